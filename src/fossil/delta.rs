//! Fossil's stored form of an artifact: a 4-byte big-endian length and a
//! zlib stream, itself sometimes a delta against another artifact. A reader
//! must undo both to get an artifact's bytes back.

use flate2::read::ZlibDecoder;
use flate2::write::ZlibEncoder;
use std::io::{Read, Write};

/// Fossil's compressed form of `data`, as `blob.content` and bundles hold it.
pub fn compress(data: &[u8]) -> Vec<u8> {
    let mut out = (data.len() as u32).to_be_bytes().to_vec();
    let mut enc = ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).expect("writing to memory");
    out.extend(enc.finish().expect("writing to memory"));
    out
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
    fn compress_round_trips() {
        let text = b"D 2026-11-29T17:40:38.094\nU alice\n";
        assert_eq!(uncompress(&compress(text)).unwrap(), text);
    }

    #[test]
    fn applies_copy_and_insert() {
        // "hello world" from "hello there": copy 6 bytes at 0, insert "world".
        let delta = b"B\n6@0,5:world0;";
        assert_eq!(apply(b"hello there", delta).unwrap(), b"hello world");
        assert!(apply(b"hello there", b"C\n6@0,5:world0;").is_none());
    }
}
