//! Running a program inside a run's boundary: its sandbox, its budget, and what the host can hold.

pub mod account;
pub mod budget;
pub mod egress;
pub mod link;
pub mod preflight;
pub mod relay;
pub mod sandbox;
pub mod terminal;
pub mod uids;

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serializer;

pub use account::RunAccount;
pub use budget::{
    BudgetLimits, Ceiling, CgroupPlan, CgroupSlot, CgroupVersion, Disk, DiskPool, DiskUse, Limit,
    weigh_least,
};
pub use preflight::{Capability, Preflight, Unenforceable, preflight, preflight_recent};
pub use sandbox::{
    Bind, Ended, Forbidden, Killer, Plan, Program, RUN_HOME, Running, SandboxFields, plan, spawn,
};

/// Why this host cannot give a run something now (bubblewrap, a cgroup
/// controller, a filesystem of its own), in words for its operator: what
/// a probe answers instead of how it would be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

/// Why a run was refused or could not be started, naming the field or thing at fault.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The run's name cannot name its cgroup.
    #[error("run_name {name:?} {reason}")]
    RunName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A path of a field is relative, missing, not UTF-8 or otherwise unusable.
    #[error("{field}: {} {reason}", path.display())]
    Path {
        /// The record or program field holding the path.
        field: &'static str,
        /// The path as given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A path of a field is, is inside, or contains a path never visible to a run.
    #[error("{field}: {} reaches forbidden path {}", path.display(), forbidden.display())]
    Forbidden {
        /// The record or program field holding the path.
        field: &'static str,
        /// The path as given.
        path: PathBuf,
        /// The forbidden path it reaches.
        forbidden: PathBuf,
    },
    /// The program's command is empty or cannot be found.
    #[error("program.command: {0}")]
    Command(String),
    /// The program's environment holds a name or value that cannot be passed.
    #[error("program.env: {0}")]
    Env(String),
    /// The host account runs are to run as cannot be used.
    #[error("run account {name:?} {reason}")]
    Account {
        /// The account's login name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// What the run's account may reach could not be asked.
    #[error("run account {name:?}: {source}")]
    Probe {
        /// The account's login name.
        name: String,
        /// Why it could not be asked.
        source: account::ProbeError,
    },
    /// The run's host uid could not be leased from the node's range.
    #[error(transparent)]
    Uids(#[from] uids::UidError),
    /// Bubblewrap is not installed.
    #[error("bubblewrap (bwrap) not found")]
    BwrapMissing,
    /// A field this host cannot hold.
    #[error("{0}")]
    Unenforceable(Unenforceable),
    /// A cgroup file or directory could not be made, written or removed.
    #[error("cgroup {}: {source}", path.display())]
    Cgroup {
        /// The cgroup file or directory at fault.
        path: PathBuf,
        /// The underlying failure.
        #[source]
        source: io::Error,
    },
    /// The run's own filesystem, which holds its disk budget, could not be made or is missing.
    #[error("the run's filesystem {0}")]
    Disk(String),
    /// Bubblewrap could not be started.
    #[error("bubblewrap could not start: {0}")]
    Spawn(#[source] io::Error),
    /// The run's supervisor failed while waiting for it.
    #[error("run supervisor: {0}")]
    Supervisor(String),
}

impl SandboxError {
    /// A field of the record or program, a run's name or account, or what
    /// this host cannot hold is the caller's to mend (refused); bubblewrap
    /// missing or not started, a cgroup, the run's filesystem, or its
    /// supervisor is a failure beneath them.
    pub fn kind(&self) -> crate::stop::StopKind {
        use crate::stop::StopKind;
        match self {
            SandboxError::RunName { .. }
            | SandboxError::Path { .. }
            | SandboxError::Forbidden { .. }
            | SandboxError::Command(_)
            | SandboxError::Env(_)
            | SandboxError::Account { .. }
            | SandboxError::Unenforceable(_) => StopKind::Refused,
            SandboxError::Probe { source, .. } => source.kind(),
            SandboxError::Uids(e) => e.kind(),
            SandboxError::BwrapMissing
            | SandboxError::Cgroup { .. }
            | SandboxError::Disk(_)
            | SandboxError::Spawn(_)
            | SandboxError::Supervisor(_) => StopKind::Failed,
        }
    }

    /// The record or program field this error names, when it names one.
    pub fn field(&self) -> Option<&str> {
        match self {
            SandboxError::Path { field, .. } | SandboxError::Forbidden { field, .. } => Some(field),
            SandboxError::Command(_) => Some("program.command"),
            SandboxError::Env(_) => Some("program.env"),
            SandboxError::Unenforceable(u) => Some(u.field),
            SandboxError::RunName { .. } => Some("run_name"),
            SandboxError::Disk(_) => Some("budget.disk"),
            _ => None,
        }
    }
}

impl From<Unenforceable> for SandboxError {
    fn from(u: Unenforceable) -> Self {
        SandboxError::Unenforceable(u)
    }
}

pub(crate) fn serialize_secs<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

pub(crate) fn serialize_opt_secs<S: Serializer>(
    d: &Option<Duration>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&d.as_secs_f64()),
        None => s.serialize_none(),
    }
}
