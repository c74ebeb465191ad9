//! The machine's responses: written in the clone as the machine's login,
//! pushed, and counted only once the server's receipt names that login.
//! One not yet confirmed is kept under the root, a file named by its
//! record, and pushed again at each wake until it is, never written twice.
//! A run's check-ins its server gave no answer to reach the server before
//! its response ([`super::checkins`]): until they can, the run's ending is
//! kept there in its stead, and the response written once they did.

use super::checkins;
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

/// A response kept until the server confirms it: written in the clone,
/// or still to be written while the run's check-ins wait for the server.
#[derive(Serialize, Deserialize)]
struct Unconfirmed {
    record: String,
    /// The response written in the clone; none while check-ins the run
    /// pushed when the server gave no answer wait for it (the response is
    /// written once the server took them or did not).
    #[serde(default)]
    response: Option<String>,
    /// The outcome the run ended with (empty in a file an earlier release
    /// wrote).
    #[serde(default)]
    outcome: String,
    /// Its note; once the response is written, the note it holds.
    #[serde(default)]
    note: String,
}

/// Where a machine's response to a record stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Responded {
    /// The response written in the clone; none while the run's check-ins
    /// wait for the server, which gives no answer.
    pub response: Option<String>,
    /// Whether the server's receipt confirmed it.
    pub confirmed: bool,
}

/// Answers `record` with `outcome` and `note` as the machine's login: the
/// response this machine wrote already when there is one (never a second),
/// else a new one written in the clone; then pushed and confirmed. The
/// check-ins the run pushed while the server gave no answer are pushed
/// again first, as the run's login, and a new response names each the
/// server did not take; while the server still gives none, no response
/// is written, and the run's ending is kept for [`push_unconfirmed`] to
/// write (the first ending kept is the one answered). A response not yet
/// confirmed is pushed again by [`push_unconfirmed`].
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
) -> Result<Responded, NodeError> {
    let _lock = crate::node::lock(&root.join("respond.lock"), true)?;
    let kept = kept_unconfirmed(root, &record.hash);
    let written = kept
        .as_ref()
        .and_then(|k| k.response.clone())
        .filter(|h| repo.receipt(h).ok().flatten().is_some());
    let written = match written {
        Some(h) => Some(h),
        None => match own_response(repo, server, record, &cfg.server_code).unwrap_or(None) {
            Some(h) => {
                keep_unconfirmed(root, &record.hash, Some(&h), outcome, note)?;
                Some(h)
            }
            None => None,
        },
    };
    let dir = NodeConfig::run_dir(root, &record.hash);
    let hash = match written {
        Some(h) => h,
        None => {
            let (outcome, note, ended) = match &kept {
                Some(k) if !k.outcome.is_empty() => (k.outcome.as_str(), k.note.as_str(), true),
                _ => (outcome, note, false),
            };
            let written_before = kept.as_ref().is_some_and(|k| k.response.is_some());
            let note = match checkins::kept(&dir) {
                None => note.to_string(),
                // A response written before, and lost before it was
                // stored, named what the server did not take already.
                Some(_) if written_before && ended => note.to_string(),
                Some(pushed) => {
                    if !ended {
                        keep_unconfirmed(root, &record.hash, None, outcome, note)?;
                    }
                    match checkins::push_again(&cfg.url, &dir, &record.record.user) {
                        Err(_) => {
                            return Ok(Responded {
                                response: None,
                                confirmed: false,
                            });
                        }
                        Ok(missed) => {
                            crate::node::log::write(
                                root,
                                &[pushed_again(record, &pushed, &missed)],
                            );
                            checkins::naming(note, &missed)
                        }
                    }
                }
            };
            let batch: Batch =
                crate::node::respond::compose(repo, record, &cfg.login, outcome, &note)?;
            let hash = batch.artifacts[0].1.clone();
            keep_unconfirmed(root, &record.hash, Some(&hash), outcome, &note)?;
            store::store(fossil, repo, &cfg.login, &batch, true)?;
            hash
        }
    };
    let _ = checkins::forget(&dir);
    let confirmed = push_and_confirm(root, cfg, fossil, server, &record.hash, &hash);
    Ok(Responded {
        response: Some(hash),
        confirmed,
    })
}

/// The log's line for the check-ins of `record`'s run, `pushed` while the
/// server gave no answer, pushed again: those it did not take named.
fn pushed_again(
    record: &StandingRecord,
    pushed: &[String],
    missed: &[checkins::Missed],
) -> crate::node::log::Event {
    let taken = pushed.len().saturating_sub(missed.len());
    let reached = match (taken, pushed.len()) {
        (1, 1) => "the check-in".to_string(),
        (t, n) if t == n => format!("the {n} check-ins"),
        (0, _) => "none of the check-ins".to_string(),
        (t, n) => format!("{t} of the {n} check-ins"),
    };
    let why = checkins::naming(
        &format!(
            "{reached} the run pushed while the server gave no answer reached it as {}",
            record.record.user
        ),
        missed,
    );
    crate::node::log::Event::new(crate::node::log::Done::PushedAgain, why)
        .record(&record.hash)
        .login(&record.record.user)
        .count(taken as u64)
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
fn kept_unconfirmed(root: &Path, record: &str) -> Option<Unconfirmed> {
    let path = unconfirmed_dir(root).join(&record[..record.len().min(16)]);
    let kept: Unconfirmed = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    (kept.record == record).then_some(kept)
}

/// Keeps the response to `record` as not yet confirmed: `response`, once
/// written, and the `outcome` and `note` it holds or will.
fn keep_unconfirmed(
    root: &Path,
    record: &str,
    response: Option<&str>,
    outcome: &str,
    note: &str,
) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = unconfirmed_dir(root);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let name = &record[..record.len().min(16)];
    let kept = Unconfirmed {
        record: record.to_string(),
        response: response.map(str::to_string),
        outcome: outcome.to_string(),
        note: note.to_string(),
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

/// Pushes again each response not yet confirmed, and writes each still
/// to be written (its run's check-ins pushed again first, [`respond`]);
/// answers what it did.
pub fn push_unconfirmed(
    root: &Path,
    cfg: &NodeConfig,
    fossil: &Fossil,
    repo: &Repository,
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
        let confirmed = match &kept.response {
            Some(response) => push_and_confirm(root, cfg, fossil, server, &kept.record, response),
            None if kept.outcome.is_empty() => false,
            None => match standing(repo, &kept.record) {
                Some(record) => respond(root, cfg, fossil, repo, server, &record, "", "")
                    .is_ok_and(|r| r.confirmed),
                None => false,
            },
        };
        if confirmed {
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

/// The record `hash` as the clone holds it.
fn standing(repo: &Repository, hash: &str) -> Option<StandingRecord> {
    let receipt = repo.receipt(hash).ok()??;
    found::record(repo, receipt.rid, hash).ok()?
}

/// Whether this machine keeps a response to `record`, written and not yet
/// confirmed, or still to be written once the run's check-ins reach the
/// server: the run ended, and was answered, whatever became of its watcher.
pub fn answered_here(root: &Path, record: &str) -> bool {
    kept_unconfirmed(root, record).is_some()
}

/// Whether responses wait for the server's receipt.
pub fn any_unconfirmed(root: &Path) -> bool {
    std::fs::read_dir(unconfirmed_dir(root)).is_ok_and(|mut d| {
        d.any(|e| e.is_ok_and(|e| !e.file_name().to_string_lossy().starts_with('.')))
    })
}
