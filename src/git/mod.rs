//! The git export of a served repository: kept current by one exporter at
//! a time (`export.rs`: a mark, then a lock, in the export's `.git`), and
//! served read-only by `git upload-pack` (`upload.rs`); and an imported
//! repository's upstream (`upstream.rs`: a mirror of the git repository it
//! came from, brought in by git's fast-export). Only this module starts
//! `git`. Fossil's side (its commands, its config row, its mirror state)
//! stays in `crate::fossil`.

pub mod export;
pub mod upload;
pub mod upstream;

pub use export::{Export, LastRun};
pub use upload::Git;

use std::path::PathBuf;

/// What can go wrong with the export or with `git`, for the person who reads it.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The config row names a directory that holds no git repository.
    #[error("last-git-export-repo names {0}, which holds no git repository (no .git with a HEAD)")]
    NotAMirror(PathBuf),
    /// A file of OCX's own in the export's `.git` could not be used.
    #[error("cannot {what} in {dir}: {error}")]
    Io {
        what: &'static str,
        dir: PathBuf,
        error: std::io::Error,
    },
    /// Fossil's export failed, in its own words.
    #[error("{0}")]
    Export(String),
    /// A Fossil read failed.
    #[error(transparent)]
    Fossil(#[from] crate::fossil::FossilError),
    /// No `git` program was found where OCX looks for one.
    #[error("no git program at {0}")]
    NoProgram(String),
    /// What the upstream holds is refused, in words saying why.
    #[error("{0}")]
    Refused(String),
    /// `git` ran and failed, or could not be started.
    #[error("git {operation} failed: {message}")]
    Command {
        operation: &'static str,
        message: String,
    },
}

impl GitError {
    /// What the caller can mend (a config row naming no mirror, an
    /// upstream refused) or a failure beneath them (a file, Fossil's
    /// export, git itself).
    pub fn kind(&self) -> crate::stop::StopKind {
        use crate::stop::StopKind;
        match self {
            GitError::NotAMirror(_) | GitError::Refused(_) => StopKind::Refused,
            GitError::Fossil(e) => e.kind(),
            GitError::Io { .. }
            | GitError::Export(_)
            | GitError::NoProgram(_)
            | GitError::Command { .. } => StopKind::Failed,
        }
    }
}

/// A git error stops a tool as its kind says, in its first line.
impl From<GitError> for crate::stop::Stop {
    fn from(e: GitError) -> Self {
        crate::stop::Stop::said(e.kind(), e)
    }
}

/// The first line git wrote on its standard error `stderr` that says
/// something, for a person.
pub(crate) fn first_said(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("exited without saying why")
        .to_string()
}
