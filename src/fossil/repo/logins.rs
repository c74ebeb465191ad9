//! Logins asked for and given (`approve`, `collect`, `send_runs`): the
//! `config` rows OCX keeps for them and whether a login still holds the
//! password OCX set, as Fossil stores it (the SHA-1 of
//! `PROJECT-CODE/LOGIN/PASSWORD`).

use super::super::FossilError;
use super::Repository;
use rusqlite::OptionalExtension;
use sha1::{Digest, Sha1};

/// The `config` row keeping an approved login's key and password.
pub fn login_key_row(login: &str) -> String {
    format!("ocx-node-key-{login}")
}

/// The `config` row naming the thread where approvals are recorded.
pub const LOGINS_THREAD_ROW: &str = "ocx-logins-thread";

impl Repository {
    /// What the `config` row of `login`'s key keeps, if there is one.
    pub fn login_key(&self, login: &str) -> Result<Option<String>, FossilError> {
        self.config(&login_key_row(login))
    }

    /// The thread approvals are recorded in, as its first post's hash.
    pub fn logins_thread(&self) -> Result<Option<String>, FossilError> {
        self.config(LOGINS_THREAD_ROW)
    }

    /// Whether `login` exists and still holds `password` (Fossil keeps its
    /// SHA-1 with the project-code and login, or, set by hand, the text).
    pub fn holds_password(&self, login: &str, password: &str) -> Result<bool, FossilError> {
        let Some(stored) = self
            .db
            .query_row("SELECT pw FROM user WHERE login=?1", [login], |r| {
                r.get::<_, Option<String>>(0)
            })
            .optional()?
            .flatten()
        else {
            return Ok(false);
        };
        let project = self.project_code()?;
        let hashed = hex::encode(Sha1::digest(format!("{project}/{login}/{password}")));
        Ok(!password.is_empty() && (stored == hashed || stored == password))
    }
}
