//! The node: the host serving a repository, which acts on the records
//! addressed to it (C3). Fossil's after-receive hook pokes it ([`hook`]);
//! it also wakes when the repository file changes and when OCX writes on
//! it. Each wake reads the truth from the repository ([`wake`]), who sent
//! what from the receipts it believes ([`receipts`]), and holds a record
//! only to what it can enforce ([`enforce`]); each open session has a
//! watcher process of its own ([`spawn`], `crate::entry::watch`), given its
//! deliveries through the run's directory ([`spool`]).

pub mod ahead;
pub mod asked;
pub mod attached;
pub mod config;
pub mod credentials;
pub mod daemon;
pub mod enforce;
pub mod held;
pub mod hook;
pub mod inbox;
pub mod log;
pub mod machine;
pub mod metrics;
pub mod page;
pub mod receipts;
pub mod remote;
pub mod respond;
pub mod run_user;
pub mod runner;
pub mod schedule;
pub mod site;
pub mod spawn;
pub mod spool;
pub mod trace;
pub mod transcript;
pub mod wake;

pub use enforce::{check_enforceable, limits, restrictions_enforced};
pub use hook::{
    HOOK_MARK, export_without_node, hook_command, is_node, keep_remote_without_node, machine_root,
    poke, poke_repository, root_of,
};
pub use receipts::{Asks, Receipts};
pub use spawn::spawn_own;
pub use spool::{ENDED_BY_NODE, end_run, read_deliveries, runs_going, watcher_alive};

use crate::fossil::{FossilError, Repository};
use crate::stop::StopKind;
use config::NodeConfig;
use std::path::Path;

/// What can go wrong on the node.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The root holds no node configuration.
    #[error("this is no node: its root holds no node.json (run `ocx hook install`)")]
    NotANode,
    /// A Fossil operation failed.
    #[error(transparent)]
    Fossil(#[from] FossilError),
    /// The node's host uids could not be claimed.
    #[error(transparent)]
    Uids(#[from] crate::run::uids::UidError),
    /// A file under the node's root could not be used.
    #[error("the node's files: {0}")]
    Io(#[from] std::io::Error),
    /// The server, asked through OCX's page, did not give what was asked.
    #[error(transparent)]
    Page(#[from] page::PageError),
    /// An agent machine's credentials file could not be used.
    #[error("the credentials file {path}: {why}")]
    Credentials { path: String, why: String },
    /// A line of a run's input is of none of its forms, as this says.
    #[error("{0}")]
    Line(&'static str),
    /// The node panicked doing something, as this says.
    #[error("the node panicked: {0}")]
    Panicked(String),
    /// An agent machine's wake stopped at an arrival until the server answers.
    #[error("{0}")]
    Away(String),
    /// The node's configuration, read anew at a wake, names a kind of node
    /// (an agent machine or not) other than the one its daemon was started as.
    #[error("node.json now names {0}, which the node was not started as: restart the node")]
    Reconfigured(&'static str),
    /// The node's process stopped: what it stands on is gone, as this says.
    #[error("{0}")]
    Gone(String),
    /// The node's furnisher made no workspace ahead, as this says.
    #[error("{0}")]
    Ahead(String),
}

/// A node's error stops a tool as its kind says, in its first line; the
/// page's, naming `server` and what to do, as [`page::PageError`] says.
impl From<NodeError> for crate::stop::Stop {
    fn from(e: NodeError) -> Self {
        match e {
            NodeError::Page(e) => e.into(),
            e => crate::stop::Stop::said(e.kind(), e),
        }
    }
}

impl NodeError {
    /// Whether the caller can mend it (no node there, a line of the run's
    /// input, what the server refused) or it failed beneath them.
    pub fn kind(&self) -> StopKind {
        match self {
            NodeError::NotANode | NodeError::Line(_) | NodeError::Reconfigured(_) => {
                StopKind::Refused
            }
            NodeError::Fossil(e) => e.kind(),
            NodeError::Uids(e) => e.kind(),
            NodeError::Page(e) => e.kind(),
            NodeError::Io(_)
            | NodeError::Credentials { .. }
            | NodeError::Panicked(_)
            | NodeError::Away(_)
            | NodeError::Gone(_)
            | NodeError::Ahead(_) => StopKind::Failed,
        }
    }

    /// Whether an agent machine's server gave no answer.
    pub fn server_away(&self) -> bool {
        matches!(self, NodeError::Page(e) if e.away())
    }
}

/// Answers `record` with `outcome` as the node's login: on the served
/// repository, stored there (and the run user's capabilities withdrawn when
/// `withdraw`); on an agent machine (its `receipts` asked of the server),
/// written in the clone and pushed, the served side withdrawing them once
/// it receives it. Answers the hash, once the response is written (on an
/// agent machine, not while the run's check-ins wait for the server).
#[allow(clippy::too_many_arguments)]
pub fn answer(
    root: &Path,
    cfg: &NodeConfig,
    fossil: &crate::fossil::Fossil,
    repo: &Repository,
    receipts: &Receipts,
    record: &crate::protocol::found::StandingRecord,
    outcome: &str,
    note: &str,
    withdraw: bool,
) -> Result<Option<String>, NodeError> {
    Ok(match receipts.asked() {
        Some(s) => machine::respond(root, cfg, fossil, repo, s, record, outcome, note)?.response,
        None => Some(respond::respond(
            fossil, repo, record, &cfg.login, outcome, note, withdraw,
        )?),
    })
}

/// Takes the lock file `path` (waiting for it when `wait`); held while the
/// answer lives. `None` when it is held elsewhere and `wait` is false.
pub fn lock(path: &Path, wait: bool) -> std::io::Result<Option<crate::lock::Held>> {
    crate::lock::take(path, wait)
}

/// A password of 24 random letters and digits.
pub fn random_password() -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut rng = rand::rng();
    (0..24)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

/// Writes `bytes` to `path` whole and its owner's alone (0600), through
/// `tmp` beside it ([`crate::file::write_whole`]).
pub(crate) fn write_whole(path: &Path, tmp: &Path, bytes: &[u8]) -> std::io::Result<()> {
    crate::file::write_whole(path, tmp, bytes, 0o600)
}
