//! The only module that knows Fossil: its tables, its artifact cards, its
//! bundle format and its command words. Everything else asks it typed
//! questions (`Repository`) and gives it typed orders (`Fossil`).

pub mod artifact;
pub mod bundle;
pub mod caps;
pub mod checkout;
pub mod csp;
pub mod delta;
pub mod export;
pub mod incoming;
pub mod kept;
pub mod login;
mod output;
mod program;
pub mod remote;
pub mod repo;
pub mod store;
pub mod wait;

pub use output::UvFile;
pub use program::{FLOOR, Fossil, TARGET};
pub use remote::redact_password;
pub use repo::Repository;

use std::path::PathBuf;

/// What can go wrong between OCX and Fossil, written for the person who reads it.
#[derive(Debug, thiserror::Error)]
pub enum FossilError {
    /// The repository file named is not there.
    #[error("no repository at {0}")]
    NoRepository(PathBuf),
    /// The file is there but SQLite cannot read it as a repository.
    #[error("cannot read the repository {path}: {message}")]
    Unreadable { path: PathBuf, message: String },
    /// The git export's own state (`.mirror_state/db`) cannot be read or written.
    #[error("cannot use the git export's state {path}: {message}")]
    MirrorState { path: PathBuf, message: String },
    /// A query failed while reading.
    #[error("reading the repository failed: {0}")]
    Query(String),
    /// SQLite found the database damaged (`SQLITE_CORRUPT`): a fault of
    /// the file, never of whoever named it.
    #[error("the repository's database is damaged ({0}): restore it from a backup or a clone")]
    Damaged(String),
    /// No usable `fossil` program was found.
    #[error(
        "no fossil program of version {FLOOR} or later was found (set OCX_FOSSIL to its absolute path)"
    )]
    NoProgram,
    /// A `fossil` command ran and failed.
    #[error("fossil {operation} failed: {message}")]
    Command {
        operation: &'static str,
        message: String,
    },
    /// An artifact's stored bytes do not read back.
    #[error("artifact {0} is stored but cannot be read back")]
    Corrupt(String),
    /// Writing a bundle file failed.
    #[error("cannot write the bundle: {0}")]
    Bundle(String),
    /// A value for `fossil`'s command line begins with `-`, which Fossil
    /// would read as an option (`--chdir=DIR` among them) wherever it stood.
    #[error(
        "fossil {operation} refused: {what} {value:?} begins with '-', which fossil would read as an option"
    )]
    OptionLike {
        operation: &'static str,
        what: &'static str,
        value: String,
    },
}

impl FossilError {
    /// Whether another writer held the repository (SQLite's "database is
    /// locked" or "busy"), so the same operation may work later.
    pub fn is_busy(&self) -> bool {
        let message = match self {
            FossilError::Command { message, .. } | FossilError::Query(message) => message,
            _ => return false,
        };
        message.contains("database is locked") || message.contains("database is busy")
    }
}

/// A failure between OCX and Fossil stops a tool as a failure (never a
/// refusal: nothing the caller gave was wrong), in its first line alone,
/// so `?` carries it up without a `map_err` at every call.
impl From<FossilError> for crate::stop::Stop {
    fn from(e: FossilError) -> Self {
        crate::stop::Stop::internal(e)
    }
}

impl From<rusqlite::Error> for FossilError {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DatabaseCorrupt) => FossilError::Damaged(e.to_string()),
            _ => FossilError::Query(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_another_writer_holding_the_repository_is_busy() {
        let locked = FossilError::Command {
            operation: "bundle import",
            message: "SQLITE_BUSY: database is locked".into(),
        };
        assert!(locked.is_busy());
        assert!(FossilError::Query("database is busy".into()).is_busy());
        let other = FossilError::Command {
            operation: "bundle import",
            message: "not a valid bundle".into(),
        };
        assert!(!other.is_busy());
        assert!(!FossilError::NoProgram.is_busy());
    }

    #[test]
    fn sqlites_damage_keeps_its_kind() {
        let corrupt = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            Some("database disk image is malformed".into()),
        );
        assert!(matches!(
            FossilError::from(corrupt),
            FossilError::Damaged(_)
        ));
        let other = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some("no such table: x".into()),
        );
        assert!(matches!(FossilError::from(other), FossilError::Query(_)));
    }
}
