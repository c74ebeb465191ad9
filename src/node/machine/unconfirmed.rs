//! The machine's responses: written in the clone as the machine's login,
//! pushed, and counted only once the server's receipt names that login.
//! One not yet confirmed is kept under the root, a file named by its
//! record, and pushed again at each wake until it is, never written twice.

use crate::fossil::store::{self, Batch};
use crate::fossil::{Fossil, Repository};
use crate::node::NodeError;
use crate::node::config::NodeConfig;
use crate::node::receipts::Server;
use crate::protocol::found::{self, StandingRecord};
use crate::protocol::kinds::{Kind, Message};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The directory of responses written in the clone and not yet confirmed
/// by the server's receipt, one file each, named by the record.
fn unconfirmed_dir(root: &Path) -> PathBuf {
    root.join("unconfirmed")
}

/// A response kept until the server confirms it.
#[derive(Serialize, Deserialize)]
struct Unconfirmed {
    record: String,
    response: String,
}

/// Answers `record` with `outcome` and `note` as the machine's login: the
/// response this machine wrote already when there is one (never a second),
/// else a new one written in the clone; then pushed and confirmed. Answers
/// the response's hash and whether the server's receipt confirmed it; an
/// unconfirmed one is pushed again by [`push_unconfirmed`].
#[allow(clippy::too_many_arguments)]
pub fn respond(
    root: &Path,
    cfg: &NodeConfig,
    fossil: &Fossil,
    repo: &Repository,
    server: &Server,
    record: &StandingRecord,
    outcome: &str,
    note: &str,
) -> Result<(String, bool), NodeError> {
    let _lock = crate::node::lock(&root.join("respond.lock"), true)?;
    let kept =
        kept_unconfirmed(root, &record.hash).filter(|h| repo.receipt(h).ok().flatten().is_some());
    let hash = match kept {
        Some(h) => h,
        None => match own_response(repo, server, record, &cfg.server_code).unwrap_or(None) {
            Some(h) => {
                keep_unconfirmed(root, &record.hash, &h)?;
                h
            }
            None => {
                let batch: Batch =
                    crate::node::respond::compose(repo, record, &cfg.login, outcome, note)?;
                let hash = batch.artifacts[0].1.clone();
                keep_unconfirmed(root, &record.hash, &hash)?;
                store::store(fossil, repo, &cfg.login, &batch, true)?;
                hash
            }
        },
    };
    let confirmed = push_and_confirm(root, cfg, fossil, server, &record.hash, &hash);
    Ok((hash, confirmed))
}

/// The response to `record` this machine wrote already: one in the clone
/// that the server received from the machine's login, or has not received
/// at all (written here and not yet pushed).
fn own_response(
    repo: &Repository,
    server: &Server,
    record: &StandingRecord,
    node: &str,
) -> Result<Option<String>, NodeError> {
    let answers: Vec<String> = found::at(repo, &record.place)?
        .into_iter()
        .filter(|f| matches!(&f.kind, Kind::Known(Message::Response(r)) if r.answers == record.hash && r.node == node))
        .map(|f| f.said.hash)
        .collect();
    for r in server.received(&answers)? {
        if !r.received || r.user.as_deref() == server.page().login() {
            return Ok(Some(r.hash));
        }
    }
    Ok(None)
}

/// The response to `record` kept as not yet confirmed, if any.
fn kept_unconfirmed(root: &Path, record: &str) -> Option<String> {
    let path = unconfirmed_dir(root).join(&record[..record.len().min(16)]);
    let kept: Unconfirmed = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    (kept.record == record).then_some(kept.response)
}

fn keep_unconfirmed(root: &Path, record: &str, response: &str) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = unconfirmed_dir(root);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let name = &record[..record.len().min(16)];
    let kept = Unconfirmed {
        record: record.to_string(),
        response: response.to_string(),
    };
    crate::node::write_whole(
        &dir.join(name),
        &dir.join(format!(".{name}")),
        &serde_json::to_vec(&kept).unwrap_or_default(),
    )
}

/// Pushes the clone and asks the server's receipt of `response`: true
/// once it names the machine's login, and the kept file is then removed.
fn push_and_confirm(
    root: &Path,
    cfg: &NodeConfig,
    fossil: &Fossil,
    server: &Server,
    record: &str,
    response: &str,
) -> bool {
    if fossil.push_server(&cfg.repository).is_err() {
        return false;
    }
    let confirmed = server
        .received(&[response.to_string()])
        .ok()
        .and_then(|mut r| r.pop())
        .is_some_and(|r| r.received && r.user.as_deref() == server.page().login());
    if confirmed {
        let _ = std::fs::remove_file(unconfirmed_dir(root).join(&record[..record.len().min(16)]));
    }
    confirmed
}

/// Pushes again each response not yet confirmed; answers what it did.
pub fn push_unconfirmed(
    root: &Path,
    cfg: &NodeConfig,
    fossil: &Fossil,
    server: &Server,
) -> Vec<crate::node::log::Event> {
    let Ok(entries) = std::fs::read_dir(unconfirmed_dir(root)) else {
        return Vec::new();
    };
    let mut done = Vec::new();
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let Some(kept) = std::fs::read(e.path())
            .ok()
            .and_then(|b| serde_json::from_slice::<Unconfirmed>(&b).ok())
        else {
            continue;
        };
        if push_and_confirm(root, cfg, fossil, server, &kept.record, &kept.response) {
            done.push(
                crate::node::log::Event::new(
                    crate::node::log::Done::Confirmed,
                    "the server holds the response pushed to it",
                )
                .record(&kept.record),
            );
        }
    }
    done
}

/// Whether responses wait for the server's receipt.
pub fn any_unconfirmed(root: &Path) -> bool {
    std::fs::read_dir(unconfirmed_dir(root)).is_ok_and(|mut d| {
        d.any(|e| e.is_ok_and(|e| !e.file_name().to_string_lossy().starts_with('.')))
    })
}
