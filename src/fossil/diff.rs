//! What a push of check-ins changes, as a person reads it before it is
//! written (`restrict.review`): each new check-in's comment and branch,
//! and a unified diff of each file against its parent's, read from the
//! pushed bytes and the repository.

use super::artifact::{self, Parsed};
use super::{FossilError, Repository};
use std::collections::BTreeMap;

/// The longest diff shown of one check-in, in bytes; past it the diff is
/// cut, saying how much more it held.
pub const SHOWN_MAX: usize = 100_000;

/// One new check-in as shown: its hash, comment, branch and diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownCheckin {
    pub hash: String,
    pub comment: String,
    pub branch: Option<String>,
    /// A unified diff of every file it adds, changes or removes.
    pub diff: String,
}

/// Each check-in `checkins` names, as `items` (the pushed artifacts, each
/// its hash and bytes) and `repo` hold it and its parent.
pub fn checkins(
    repo: &Repository,
    items: &[(String, Vec<u8>)],
    checkins: &[String],
) -> Result<Vec<ShownCheckin>, FossilError> {
    let pushed: BTreeMap<&str, &[u8]> = items
        .iter()
        .map(|(h, b)| (h.as_str(), b.as_slice()))
        .collect();
    let bytes = |hash: &str| -> Result<Option<Vec<u8>>, FossilError> {
        if let Some(b) = pushed.get(hash) {
            return Ok(Some(b.to_vec()));
        }
        match repo.receipt(hash)? {
            Some(r) => repo.content(r.rid),
            None => Ok(None),
        }
    };
    let mut out = Vec::new();
    for hash in checkins {
        let Some(manifest) = bytes(hash)?.as_deref().and_then(artifact::parse) else {
            continue;
        };
        let parent = manifest.card(b'P').and_then(|c| c.args.first().cloned());
        let before = match parent {
            Some(p) => bytes(&p)?
                .as_deref()
                .and_then(artifact::parse)
                .map(|m| files(&m))
                .unwrap_or_default(),
            None => BTreeMap::new(),
        };
        let after = files(&manifest);
        let mut diff = String::new();
        let names: std::collections::BTreeSet<&String> =
            before.keys().chain(after.keys()).collect();
        for name in names {
            let (old, new) = (before.get(name), after.get(name));
            if old == new {
                continue;
            }
            let text = |h: Option<&String>| -> Result<Option<Vec<u8>>, FossilError> {
                match h {
                    Some(h) => bytes(h),
                    None => Ok(Some(Vec::new())),
                }
            };
            diff.push_str(&file_diff(name, &text(old)?, &text(new)?));
        }
        out.push(ShownCheckin {
            hash: hash.clone(),
            comment: manifest.arg(b'C').unwrap_or_default(),
            branch: manifest
                .all(b'T')
                .find(|t| t.args.first().map(String::as_str) == Some("*branch"))
                .and_then(|t| t.args.get(2))
                .map(|b| artifact::defossilize(b)),
            diff: cut(diff),
        });
    }
    Ok(out)
}

/// A manifest's files: each name and its content's hash.
fn files(m: &Parsed) -> BTreeMap<String, String> {
    m.all(b'F')
        .filter_map(|f| {
            let name = artifact::defossilize(f.args.first()?);
            Some((name, f.args.get(1)?.clone()))
        })
        .collect()
}

/// One file's unified diff, from `old` to `new` (none: unknown here).
fn file_diff(name: &str, old: &Option<Vec<u8>>, new: &Option<Vec<u8>>) -> String {
    let head = format!("--- a/{name}\n+++ b/{name}\n");
    let (Some(old), Some(new)) = (old, new) else {
        return format!("{head}(content not held here)\n");
    };
    match (std::str::from_utf8(old), std::str::from_utf8(new)) {
        (Ok(o), Ok(n)) => similar::TextDiff::from_lines(o, n)
            .unified_diff()
            .context_radius(3)
            .header(&format!("a/{name}"), &format!("b/{name}"))
            .to_string(),
        _ => format!("{head}binary: {} bytes to {} bytes\n", old.len(), new.len()),
    }
}

/// `diff` cut to [`SHOWN_MAX`] bytes at a line's end, saying how much more it held.
fn cut(diff: String) -> String {
    if diff.len() <= SHOWN_MAX {
        return diff;
    }
    let at = diff[..SHOWN_MAX].rfind('\n').map_or(0, |i| i + 1);
    let more = diff[at..].lines().count();
    format!("{}… and {more} lines more\n", &diff[..at])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_text_file_is_a_unified_diff_and_a_binary_one_says_its_sizes() {
        let d = file_diff(
            "a.txt",
            &Some(b"one\ntwo\n".to_vec()),
            &Some(b"one\n2\n".to_vec()),
        );
        assert!(d.starts_with("--- a/a.txt\n+++ b/a.txt\n"), "{d}");
        assert!(d.contains("-two\n+2\n"), "{d}");
        let b = file_diff("b.bin", &Some(vec![0xff]), &Some(vec![0xfe, 0]));
        assert!(b.ends_with("binary: 1 bytes to 2 bytes\n"), "{b}");
    }

    #[test]
    fn a_long_diff_is_cut_at_a_line_saying_how_many_more() {
        let long = "+x\n".repeat(SHOWN_MAX);
        let cut = cut(long);
        assert!(cut.len() < SHOWN_MAX + 40);
        assert!(cut.ends_with("lines more\n"), "{}", &cut[cut.len() - 40..]);
    }
}
