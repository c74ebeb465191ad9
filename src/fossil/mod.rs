//! The only module that knows Fossil: its tables, its artifact cards, its
//! bundle format and its command words. Everything else asks it typed
//! questions (`Repository`) and gives it typed orders (`Fossil`).

pub mod artifact;
pub mod bundle;
pub mod caps;
pub mod checkout;
pub mod csp;
pub mod delta;
pub mod diff;
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
pub mod workspace;

pub use output::UvFile;
pub use program::{FLOOR, Fossil, TARGET};
pub use remote::redact_password;
pub use repo::Repository;

use crate::stop::StopKind;
use rusqlite::ErrorCode;
use std::path::PathBuf;

/// What can go wrong between OCX and Fossil, written for the person who
/// reads it. Each variant says whether it is the caller's to mend or a
/// fault beneath them ([`FossilError::kind`]); SQLite's own errors are kept
/// whole, so their codes (busy, damaged, read-only) are matched as codes.
#[derive(Debug, thiserror::Error)]
pub enum FossilError {
    /// The repository file named is not there.
    #[error("no repository at {0}")]
    NoRepository(PathBuf),
    /// The file is there but SQLite cannot open it as a database.
    #[error("cannot read the repository {path}: {source}")]
    Unreadable {
        path: PathBuf,
        source: rusqlite::Error,
    },
    /// The file is a database but not a Fossil repository: it has no
    /// project-code.
    #[error("cannot read the repository {0}: not a Fossil repository (it has no project-code)")]
    NotFossil(PathBuf),
    /// The git export's own state (`.mirror_state/db`) cannot be read or written.
    #[error("cannot use the git export's state {path}: {source}")]
    MirrorState {
        path: PathBuf,
        source: rusqlite::Error,
    },
    /// Fossil keeps no state of a git export where one was looked for.
    #[error(
        "cannot use the git export's state {0}: no such file: Fossil's export keeps its state there"
    )]
    NoMirrorState(PathBuf),
    /// A statement failed while reading.
    #[error("reading the repository failed: {0}")]
    Query(rusqlite::Error),
    /// A row every repository holds is not there.
    #[error("the repository has no {0}")]
    NoConfig(&'static str),
    /// The repository file cannot be watched for changes.
    #[error("cannot watch the repository: {0}")]
    Watch(nix::Error),
    /// SQLite found the database damaged (`SQLITE_CORRUPT`): a fault of
    /// the file, never of whoever named it.
    #[error("the repository's database is damaged ({0}): restore it from a backup or a clone")]
    Damaged(rusqlite::Error),
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
    /// A `fossil` command found the repository held by another writer, as
    /// its SQLite said (`SQLITE_BUSY`); the same command may work later.
    #[error("fossil {operation} failed: {message}")]
    Busy {
        operation: &'static str,
        message: String,
    },
    /// An artifact's stored bytes do not read back.
    #[error("artifact {0} is stored but cannot be read back")]
    Corrupt(String),
    /// A composed artifact does not parse, so no bundle is written of it.
    #[error("cannot write the bundle: the composed {what} {hash} does not parse")]
    Unparsed { what: String, hash: String },
    /// The bundle's directory could not be made.
    #[error("cannot write the bundle: {0}")]
    BundleDir(std::io::Error),
    /// The bundle's database could not be written.
    #[error("cannot write the bundle: {0}")]
    Bundle(rusqlite::Error),
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
    /// Whether the caller can mend it (a file named that is none, or no
    /// repository; a value Fossil would read as an option) or it failed
    /// beneath them (SQLite, the `fossil` program, a damaged file).
    pub fn kind(&self) -> StopKind {
        match self {
            FossilError::NoRepository(_)
            | FossilError::NotFossil(_)
            | FossilError::OptionLike { .. } => StopKind::Refused,
            FossilError::Unreadable { source, .. } => match source.sqlite_error_code() {
                Some(
                    ErrorCode::DatabaseBusy
                    | ErrorCode::DatabaseLocked
                    | ErrorCode::ReadOnly
                    | ErrorCode::SystemIoFailure
                    | ErrorCode::OutOfMemory
                    | ErrorCode::DiskFull,
                ) => StopKind::Failed,
                _ => StopKind::Refused,
            },
            FossilError::MirrorState { .. }
            | FossilError::NoMirrorState(_)
            | FossilError::Query(_)
            | FossilError::NoConfig(_)
            | FossilError::Watch(_)
            | FossilError::Damaged(_)
            | FossilError::NoProgram
            | FossilError::Command { .. }
            | FossilError::Busy { .. }
            | FossilError::Corrupt(_)
            | FossilError::Unparsed { .. }
            | FossilError::BundleDir(_)
            | FossilError::Bundle(_) => StopKind::Failed,
        }
    }

    /// Whether another writer held the repository (SQLite's
    /// `SQLITE_BUSY` or `SQLITE_LOCKED`), so the same operation may work
    /// later.
    pub fn is_busy(&self) -> bool {
        match self {
            FossilError::Busy { .. } => true,
            FossilError::Query(e) | FossilError::Unreadable { source: e, .. } => matches!(
                e.sqlite_error_code(),
                Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
            ),
            _ => false,
        }
    }
}

/// A failure between OCX and Fossil stops a tool as its kind says, in its
/// first line alone, so `?` carries it up without a `map_err` at every call.
impl From<FossilError> for crate::stop::Stop {
    fn from(e: FossilError) -> Self {
        crate::stop::Stop::said(e.kind(), e)
    }
}

/// SQLite's error kept whole: damage (`SQLITE_CORRUPT`, `SQLITE_NOTADB`
/// met inside an open file) is its own variant, the rest a failed read.
impl From<rusqlite::Error> for FossilError {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(ErrorCode::DatabaseCorrupt) => FossilError::Damaged(e),
            _ => FossilError::Query(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(code: i32, said: &str) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), Some(said.into()))
    }

    #[test]
    fn only_another_writer_holding_the_repository_is_busy() {
        let locked = FossilError::Busy {
            operation: "bundle import",
            message: "database is locked".into(),
        };
        assert!(locked.is_busy());
        let busy = FossilError::from(sqlite(rusqlite::ffi::SQLITE_BUSY, "whatever it says"));
        assert!(busy.is_busy());
        // The words alone are not the code.
        let worded = FossilError::from(sqlite(rusqlite::ffi::SQLITE_ERROR, "database is locked"));
        assert!(!worded.is_busy());
        let other = FossilError::Command {
            operation: "bundle import",
            message: "not a valid bundle".into(),
        };
        assert!(!other.is_busy());
        assert!(!FossilError::NoProgram.is_busy());
    }

    #[test]
    fn sqlites_damage_keeps_its_kind() {
        let corrupt = sqlite(
            rusqlite::ffi::SQLITE_CORRUPT,
            "database disk image is malformed",
        );
        let damaged = FossilError::from(corrupt);
        assert!(matches!(damaged, FossilError::Damaged(_)));
        assert_eq!(damaged.kind(), StopKind::Failed);
        let other = sqlite(rusqlite::ffi::SQLITE_ERROR, "no such table: x");
        assert!(matches!(FossilError::from(other), FossilError::Query(_)));
    }

    #[test]
    fn a_file_named_is_the_callers_and_a_held_one_a_failure() {
        let path = PathBuf::from("notes.txt");
        let not_a_database = FossilError::Unreadable {
            path: path.clone(),
            source: sqlite(rusqlite::ffi::SQLITE_NOTADB, "file is not a database"),
        };
        assert_eq!(not_a_database.kind(), StopKind::Refused);
        let read_only = FossilError::Unreadable {
            path: path.clone(),
            source: sqlite(
                rusqlite::ffi::SQLITE_READONLY,
                "attempt to write a readonly database",
            ),
        };
        assert_eq!(read_only.kind(), StopKind::Failed);
        assert_eq!(
            FossilError::NoRepository(path.clone()).kind(),
            StopKind::Refused
        );
        assert_eq!(FossilError::NotFossil(path).kind(), StopKind::Refused);
        let stop = crate::stop::Stop::from(FossilError::NoProgram);
        assert_eq!(stop.kind, StopKind::Failed);
    }
}
