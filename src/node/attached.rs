//! Who joined a run's terminal (protocol v1, C3): a person with admin or
//! setup may attach to it at the node, and each attachment leaves a post
//! in the record's place, written by the node's login, naming who
//! attached, when, and for how long. While one lasts, a file in the run's
//! directory says so, so that one whose end the node did not see (its
//! watcher killed) is posted at the node's next start, once.

use super::config::NodeConfig;
use super::{NodeError, Receipts};
use crate::fossil::store::{self, Batch};
use crate::fossil::{Fossil, Repository};
use crate::place::{self, Where};
use crate::protocol::found::StandingRecord;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The file in a run's directory that says who is attached now.
pub const MARK: &str = "attached.json";

/// An attachment under way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// The run's record, in full.
    pub record: String,
    /// The login that attached.
    pub login: String,
    /// When, as Fossil writes a time (UTC).
    pub at: String,
    /// When, in seconds since 1970.
    pub since: u64,
}

/// How an attachment ended, as its post says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The person left.
    Left,
    /// The run ended, or its watcher ended the attachment.
    WithTheRun,
    /// The node did not see it end: its watcher was gone when it looked.
    Unseen,
}

/// Why a login may not attach to a run's terminal.
#[derive(Debug, thiserror::Error)]
pub enum Unattachable {
    /// The login holds neither admin nor setup.
    #[error("{login} holds neither admin nor setup, which attaching to a run's terminal needs")]
    NotAdmin { login: String },
    /// The repository has no such login.
    #[error("{login} is no login of this repository")]
    NoLogin { login: String },
    /// What the login holds could not be read.
    #[error("{login}'s capabilities could not be read: {source}")]
    Unread { login: String, source: NodeError },
    /// The node's repository, which says who holds what, could not be read.
    #[error("the node's repository could not be read")]
    NoNode,
}

/// Whether `login`, as `receipts` knows it, may attach to a run's
/// terminal: it holds admin or setup. Why not, when not.
pub fn may_attach(receipts: &Receipts, login: &str) -> Result<(), Unattachable> {
    let login = login.to_string();
    match receipts.capabilities(&login) {
        Ok(Some(c)) if c.is_admin() => Ok(()),
        Ok(Some(_)) => Err(Unattachable::NotAdmin { login }),
        Ok(None) => Err(Unattachable::NoLogin { login }),
        Err(source) => Err(Unattachable::Unread { login, source }),
    }
}

/// Keeps `a` in the run's directory `dir` as the attachment under way.
pub fn began(dir: &Path, a: &Attachment) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(a).map_err(std::io::Error::other)?;
    super::write_whole(&dir.join(MARK), &dir.join(".attached.json.tmp"), &bytes)
}

/// The attachment kept in `dir` as under way, if one is (one that does not
/// read is none).
pub fn under_way(dir: &Path) -> Option<Attachment> {
    let bytes = std::fs::read(dir.join(MARK)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The post's words for `a`, `seconds` long, ended as `how`.
pub fn words(a: &Attachment, seconds: u64, how: Ended) -> String {
    let login = crate::protocol::ask::escape(&a.login);
    let at = a.at.replace('T', " ");
    let at = at.split('.').next().unwrap_or(&at);
    let long = match seconds {
        1 => "1 second".to_string(),
        n => format!("{n} seconds"),
    };
    match how {
        Ended::Left => format!(
            "OCX: {login} attached to this run's terminal at {at} UTC, for {long}, and left."
        ),
        Ended::WithTheRun => format!(
            "OCX: {login} attached to this run's terminal at {at} UTC, for {long}, until the run ended."
        ),
        Ended::Unseen => format!(
            "OCX: {login} attached to this run's terminal at {at} UTC; the node did not see the attachment end (its run's watcher ended first), at most {long} later."
        ),
    }
}

/// Posts that `a` ended after `seconds`, as `how` says, at `record`'s
/// place as the node's login, then forgets it in `dir`; answers the post's
/// hash. On an agent machine the post is written in its clone and pushed.
#[allow(clippy::too_many_arguments)]
pub fn ended(
    cfg: &NodeConfig,
    fossil: &Fossil,
    repo: &Repository,
    receipts: &Receipts,
    record: &StandingRecord,
    dir: &Path,
    a: &Attachment,
    seconds: u64,
    how: Ended,
) -> Result<String, NodeError> {
    let mut batch = Batch::default();
    let hash = place::compose(
        &mut batch,
        repo.hash_policy()?,
        &crate::fossil::artifact::now(),
        &cfg.login,
        &Where::At(record.place.clone()),
        &words(a, seconds, how),
    );
    store::store(fossil, repo, &cfg.login, &batch, true)?;
    let _ = std::fs::remove_file(dir.join(MARK));
    if receipts.asked().is_some() {
        let _ = fossil.push_server(&cfg.repository);
    }
    Ok(hash)
}

/// Posts each attachment a run's watcher, gone, left under way in the
/// runs' directories under `root`: the node did not see it end. Answers
/// how many it posted.
pub fn post_unseen(
    root: &Path,
    cfg: &NodeConfig,
    fossil: &Fossil,
    repo: &Repository,
    receipts: &Receipts,
) -> usize {
    let Ok(dirs) = std::fs::read_dir(root.join("runs")) else {
        return 0;
    };
    let mut posted = 0;
    for dir in dirs.filter_map(Result::ok).map(|d| d.path()) {
        let Some(a) = under_way(&dir) else {
            continue;
        };
        let Ok(Some(_free)) = super::spool::lock_when_gone(&dir) else {
            continue;
        };
        let record = repo.receipt(&a.record).ok().flatten().and_then(|r| {
            crate::protocol::found::record(repo, r.rid, &a.record)
                .ok()
                .flatten()
        });
        let Some(record) = record else {
            let _ = std::fs::remove_file(dir.join(MARK));
            continue;
        };
        let seconds = now_seconds().saturating_sub(a.since);
        if ended(
            cfg,
            fossil,
            repo,
            receipts,
            &record,
            &dir,
            &a,
            seconds,
            Ended::Unseen,
        )
        .is_ok()
        {
            posted += 1;
        }
    }
    posted
}

/// Seconds since 1970, now.
pub fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_post_names_the_login_the_time_and_how_long() {
        let a = Attachment {
            record: "0".repeat(64),
            login: "stone".into(),
            at: "2026-12-03T15:40:02.123".into(),
            since: 0,
        };
        assert_eq!(
            words(&a, 12, Ended::Left),
            "OCX: stone attached to this run's terminal at 2026-12-03 15:40:02 UTC, for 12 seconds, and left."
        );
        assert!(words(&a, 1, Ended::WithTheRun).contains("for 1 second, until the run ended"));
        assert!(words(&a, 30, Ended::Unseen).contains("did not see the attachment end"));
    }
}
