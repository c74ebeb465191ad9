//! Fossil's stored form of an artifact: a 4-byte big-endian length and a
//! zlib stream, itself sometimes a delta against another artifact. A reader
//! must undo both to get an artifact's bytes back.

use flate2::read::ZlibDecoder;
use std::io::Read;

/// Fossil's compressed form of `data`, as `blob.content` and bundles hold
/// it, its zlib stream made of stored blocks: what Fossil reads as it
/// reads any, at the cost of a copy. A bundle is inflated by the `fossil`
/// that imports it, which compresses each artifact anew as it stores it,
/// so deflating here (a quarter of a megabyte of state made and cleared
/// for a post of a few hundred bytes) would be work thrown away.
pub fn compress(data: &[u8]) -> Vec<u8> {
    const BLOCK: usize = 0xffff;
    let blocks = data.len().div_ceil(BLOCK).max(1);
    let mut out = Vec::with_capacity(4 + 2 + blocks * 5 + data.len() + 4);
    out.extend((data.len() as u32).to_be_bytes());
    // CMF: deflate with a 32 KiB window; FLG: no dictionary, the check bits.
    out.extend([0x78, 0x01]);
    let mut chunks = data.chunks(BLOCK).peekable();
    if chunks.peek().is_none() {
        out.extend([1, 0, 0, 0xff, 0xff]);
    }
    while let Some(chunk) = chunks.next() {
        let last = chunks.peek().is_none();
        let len = chunk.len() as u16;
        out.push(u8::from(last));
        out.extend(len.to_le_bytes());
        out.extend((!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out.extend(adler32(data).to_be_bytes());
    out
}

/// The Adler-32 checksum that ends a zlib stream.
fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65521;
    // The most bytes whose sums cannot overflow 32 bits between reductions.
    const NMAX: usize = 5552;
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(NMAX) {
        for &x in chunk {
            a += u32::from(x);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

/// The bytes compressed by [`compress`], or `None` when they do not read.
pub fn uncompress(stored: &[u8]) -> Option<Vec<u8>> {
    if stored.len() < 4 {
        return None;
    }
    let n = u32::from_be_bytes([stored[0], stored[1], stored[2], stored[3]]) as usize;
    let mut out = Vec::with_capacity(n.min(64 << 20));
    if n <= 64 << 20 {
        // The announced length is room enough: one call, no buffer between.
        let mut z = flate2::Decompress::new(true);
        let status = z
            .decompress_vec(&stored[4..], &mut out, flate2::FlushDecompress::Finish)
            .ok()?;
        if status == flate2::Status::StreamEnd {
            return (out.len() == n).then_some(out);
        }
        out.clear();
    }
    ZlibDecoder::new(&stored[4..]).read_to_end(&mut out).ok()?;
    (out.len() == n).then_some(out)
}

fn digit(b: u8) -> Option<u64> {
    Some(match b {
        b'0'..=b'9' => b - b'0',
        b'A'..=b'Z' => b - b'A' + 10,
        b'_' => 36,
        b'a'..=b'z' => b - b'a' + 37,
        b'~' => 63,
        _ => return None,
    } as u64)
}

fn number(d: &[u8], i: &mut usize) -> u64 {
    let mut v = 0u64;
    while let Some(x) = d.get(*i).and_then(|b| digit(*b)) {
        v = (v << 6) | x;
        *i += 1;
    }
    v
}

/// Applies a Fossil delta to `source`: a size line, then copy (`N@OFF,`)
/// and insert (`N:BYTES`) commands, ended by `CKSUM;`.
pub fn apply(source: &[u8], delta: &[u8]) -> Option<Vec<u8>> {
    let mut i = 0;
    let limit = number(delta, &mut i) as usize;
    if delta.get(i) != Some(&b'\n') {
        return None;
    }
    i += 1;
    let mut out = Vec::with_capacity(limit.min(64 << 20));
    while i < delta.len() {
        let count = number(delta, &mut i) as usize;
        let op = *delta.get(i)?;
        i += 1;
        match op {
            b'@' => {
                let offset = number(delta, &mut i) as usize;
                if delta.get(i) != Some(&b',') {
                    return None;
                }
                i += 1;
                out.extend_from_slice(source.get(offset..offset.checked_add(count)?)?);
            }
            b':' => {
                out.extend_from_slice(delta.get(i..i.checked_add(count)?)?);
                i += count;
            }
            b';' => return (out.len() == limit).then_some(out),
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compress_round_trips_through_zlib() {
        let text = b"D 2026-11-29T17:40:38.094\nU alice\n".to_vec();
        let large: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for data in [Vec::new(), text, vec![0xff; 0xffff], large] {
            let stored = compress(&data);
            assert_eq!(uncompress(&stored).unwrap(), data);
            let mut inflated = Vec::new();
            ZlibDecoder::new(&stored[4..])
                .read_to_end(&mut inflated)
                .unwrap();
            assert_eq!(inflated, data, "a plain zlib reader, as Fossil's");
        }
    }

    #[test]
    fn applies_copy_and_insert() {
        // "hello world" from "hello there": copy 6 bytes at 0, insert "world".
        let delta = b"B\n6@0,5:world0;";
        assert_eq!(apply(b"hello there", delta).unwrap(), b"hello world");
        assert!(apply(b"hello there", b"C\n6@0,5:world0;").is_none());
    }
}
