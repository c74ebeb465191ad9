//! What a run sends the node to store: its new check-ins and their files,
//! as bytes. The node believes nothing of the run's clone: each artifact is
//! named by the hash of its own bytes, a check-in's cards are read by OCX's
//! own parser, its branch is judged from its own T cards and its parent's
//! branch as the node's repository knows it, and its U card must be the
//! run's login. Anything else is refused, naming the artifact and why.

use super::artifact::{self, HashPolicy, Parsed};
use super::{FossilError, Repository};
use std::collections::{BTreeMap, BTreeSet};

/// Why a push is refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// One artifact is refused; nothing of the push is stored.
    #[error("artifact {hash}: {why}")]
    Artifact { hash: String, why: String },
    /// A check-in is on a branch the run may not check in on.
    #[error(
        "check-in {short} is on {branch}; this run checks in only on {only}: nothing was pushed"
    )]
    Branch {
        short: String,
        branch: String,
        only: String,
    },
    /// The node's repository could not be read.
    #[error(transparent)]
    Fossil(#[from] FossilError),
}

impl Refused {
    /// An artifact or branch refused is the pusher's to mend; a read of
    /// the node's repository that failed is as its own kind says.
    pub fn kind(&self) -> crate::stop::StopKind {
        match self {
            Refused::Artifact { .. } | Refused::Branch { .. } => crate::stop::StopKind::Refused,
            Refused::Fossil(e) => e.kind(),
        }
    }
}

/// What a push holds that the node lacks, checked and ready to store.
#[derive(Debug, Default)]
pub struct Checked {
    /// The new check-ins' hashes, in the order sent.
    pub checkins: Vec<String>,
    /// Every new artifact (files, then check-ins): its hash and bytes.
    pub artifacts: Vec<(String, Vec<u8>)>,
}

/// The cards a check-in may hold (a delta manifest's B card is not taken).
const CHECKIN_CARDS: &[u8] = b"CDFNPQRTUZ";

fn refuse(hash: &str, why: impl Into<String>) -> Refused {
    Refused::Artifact {
        hash: hash.to_string(),
        why: why.into(),
    }
}

/// Whether `hash` is a full artifact name: 40 (SHA1) or 64 (SHA3-256)
/// lowercase hex digits.
fn full_hash(hash: &str) -> bool {
    matches!(hash.len(), 40 | 64)
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `bytes` hold a line that is a Z card: Fossil reads an artifact
/// ending in one (or one wrapped in a PGP or SSH signature) as an artifact
/// of its own, so no such "file" is taken.
fn shaped_as_artifact(bytes: &[u8]) -> bool {
    bytes.split(|b| *b == b'\n').any(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        line.len() == 34 && line.starts_with(b"Z ") && line[2..].iter().all(u8::is_ascii_hexdigit)
    })
}

/// Checks what a run sent (`sent`: each a claimed hash and its bytes) for
/// the node's repository `repo`: answers what of it the node lacks, or why
/// the push is refused. `login` is the run's login; `only`, when set, the
/// one branch its check-ins may be on.
pub fn check(
    repo: &Repository,
    sent: &[(String, Vec<u8>)],
    login: &str,
    only: Option<&str>,
) -> Result<Checked, Refused> {
    let mut checkins: Vec<(String, Parsed)> = Vec::new();
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut bytes_of: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for (hash, bytes) in sent {
        if !full_hash(hash) {
            return Err(refuse(
                hash,
                "is not a full hash (40 or 64 lowercase hex digits)",
            ));
        }
        let policy = if hash.len() == 40 {
            HashPolicy::Sha1
        } else {
            HashPolicy::Sha3
        };
        let named = policy.name(bytes);
        if &named != hash {
            return Err(refuse(
                hash,
                format!("its bytes hash to {named}, not to its name"),
            ));
        }
        if !seen.insert(hash.clone()) || repo.receipt(hash)?.is_some() {
            continue;
        }
        match artifact::parse(bytes) {
            Some(p) if p.card(b'C').is_some() => {
                bytes_of.insert(hash.clone(), bytes.clone());
                checkins.push((hash.clone(), p));
            }
            _ if shaped_as_artifact(bytes) => {
                return Err(refuse(
                    hash,
                    "is a Fossil artifact other than a check-in; push takes only check-ins and their files",
                ));
            }
            _ => {
                files.insert(hash.clone(), bytes.clone());
            }
        }
    }
    let new: BTreeSet<&str> = checkins.iter().map(|(h, _)| h.as_str()).collect();
    let mut used = BTreeSet::new();
    for (hash, p) in &checkins {
        check_cards(repo, hash, p, (login, only), &new, &files, &mut used)?;
    }
    if let Some(unused) = files.keys().find(|f| !used.contains(f.as_str())) {
        return Err(refuse(
            unused,
            "is neither a check-in nor a file one of the pushed check-ins names",
        ));
    }
    if let Some(only) = only {
        let parsed: BTreeMap<&str, &Parsed> =
            checkins.iter().map(|(h, p)| (h.as_str(), p)).collect();
        for (hash, _) in &checkins {
            let branch = branch_of(repo, hash, &parsed, 0)?;
            if branch.as_deref() != Some(only) {
                return Err(Refused::Branch {
                    short: hash[..10].to_string(),
                    branch: branch.unwrap_or_else(|| "no branch".into()),
                    only: only.to_string(),
                });
            }
        }
    }
    let mut out = Checked::default();
    out.artifacts.extend(files);
    for (hash, _) in checkins {
        let bytes = bytes_of.remove(&hash).unwrap_or_default();
        out.checkins.push(hash.clone());
        out.artifacts.push((hash, bytes));
    }
    Ok(out)
}

fn check_cards(
    repo: &Repository,
    hash: &str,
    p: &Parsed,
    (login, only): (&str, Option<&str>),
    new: &BTreeSet<&str>,
    files: &BTreeMap<String, Vec<u8>>,
    used: &mut BTreeSet<String>,
) -> Result<(), Refused> {
    if let Some(c) = p.cards.iter().find(|c| !CHECKIN_CARDS.contains(&c.letter)) {
        let why = if c.letter == b'B' {
            "is a delta manifest (a B card); commit with a full manifest".to_string()
        } else {
            format!("holds a {} card, which no check-in holds", c.letter as char)
        };
        return Err(refuse(hash, why));
    }
    if p.card(b'D').is_none() {
        return Err(refuse(hash, "has no D card"));
    }
    let user = p.arg(b'U').unwrap_or_default();
    if user != login {
        return Err(refuse(
            hash,
            format!("its U card names {user:?}, not the run's login {login:?}"),
        ));
    }
    let branch_tags = p
        .all(b'T')
        .filter(|t| t.args.first().map(String::as_str) == Some("*branch"))
        .count();
    if branch_tags > 1 {
        return Err(refuse(hash, "names its branch more than once"));
    }
    for t in p.all(b'T') {
        let name = t.args.first().map(String::as_str).unwrap_or("");
        if t.args.get(1).map(String::as_str) != Some("*") {
            return Err(refuse(
                hash,
                format!("its tag {name} names another artifact; a check-in tags only itself"),
            ));
        }
        let allowed = name == "*branch" || name.starts_with("*sym-") || name.starts_with("-sym-");
        if !allowed {
            return Err(refuse(
                hash,
                format!("sets the tag {name}; a run's check-in sets only its branch"),
            ));
        }
        if let Some(only) = only
            && name.starts_with("*sym-")
            && name != format!("*sym-{}", artifact::fossilize(only))
        {
            return Err(refuse(
                hash,
                format!("names itself {name}; this run checks in only on {only}"),
            ));
        }
    }
    for parent in p.all(b'P').flat_map(|c| c.args.iter()) {
        if new.contains(parent.as_str()) {
            continue;
        }
        let known = match repo.receipt(parent)? {
            Some(r) if !r.private => repo.checkin(r.rid)?.is_some(),
            _ => false,
        };
        if !known {
            return Err(refuse(
                hash,
                format!(
                    "names the parent {parent}, which is no check-in the node's repository or this push holds"
                ),
            ));
        }
    }
    for f in p.all(b'F') {
        let Some(file) = f.args.get(1) else {
            return Err(refuse(hash, "has an F card naming no file hash"));
        };
        if files.contains_key(file) {
            used.insert(file.clone());
        } else if repo.receipt(file)?.is_none_or(|r| r.private) {
            return Err(refuse(
                hash,
                format!(
                    "names the file {file} ({}), which neither the node's repository nor this push holds",
                    artifact::defossilize(f.args.first().map(String::as_str).unwrap_or(""))
                ),
            ));
        }
    }
    Ok(())
}

/// The branch of check-in `hash`: its own `*branch` tag, else its first
/// parent's (from this push, or as the node's repository knows it).
fn branch_of(
    repo: &Repository,
    hash: &str,
    parsed: &BTreeMap<&str, &Parsed>,
    depth: usize,
) -> Result<Option<String>, Refused> {
    let Some(p) = parsed.get(hash) else {
        let Some(receipt) = repo.receipt(hash)? else {
            return Ok(None);
        };
        return Ok(repo.checkin(receipt.rid)?.and_then(|c| c.branch));
    };
    if let Some(t) = p
        .all(b'T')
        .find(|t| t.args.first().map(String::as_str) == Some("*branch"))
    {
        return Ok(t.args.get(2).map(|v| artifact::defossilize(v)));
    }
    let parent = p.card(b'P').and_then(|c| c.args.first());
    match parent {
        Some(parent) if depth < parsed.len() => branch_of(repo, parent, parsed, depth + 1),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_that_is_a_z_card_marks_an_artifact() {
        let z = format!("Z {}\n", "0".repeat(32));
        assert!(shaped_as_artifact(z.as_bytes()));
        assert!(shaped_as_artifact(format!("D x\n{z}").as_bytes()));
        let signed =
            format!("-----BEGIN PGP SIGNED MESSAGE-----\n\nD x\n{z}-----END PGP SIGNATURE-----\n");
        assert!(shaped_as_artifact(signed.as_bytes()));
        assert!(!shaped_as_artifact(
            format!("xZ {}\n", "0".repeat(32)).as_bytes()
        ));
        assert!(!shaped_as_artifact(b"fn main() {}\n"));
        assert!(full_hash(&"a".repeat(40)) && full_hash(&"0".repeat(64)));
        assert!(!full_hash(&"A".repeat(40)) && !full_hash("abc"));
    }
}
