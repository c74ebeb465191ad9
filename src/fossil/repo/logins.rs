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

/// The `config` row where the served side keeps the run's login for
/// record `record`, addressed to an agent machine.
pub fn remote_run_row(record: &str) -> String {
    format!("{REMOTE_RUN_PREFIX}{record}")
}

/// What every [`remote_run_row`] begins with.
pub const REMOTE_RUN_PREFIX: &str = "ocx-remote-run-";

impl Repository {
    /// Whether `login` is an agent machine's node login: its key row, as
    /// `approve --node` kept it, says `node: true`.
    pub fn is_node_login(&self, login: &str) -> Result<bool, FossilError> {
        Ok(self
            .login_key(login)?
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|v| v["node"] == serde_json::Value::Bool(true)))
    }

    /// What the row of record `record`'s remote run keeps, if any.
    pub fn remote_run(&self, record: &str) -> Result<Option<String>, FossilError> {
        self.config(&remote_run_row(record))
    }

    /// Every remote run's row: the record's hash and what the row keeps.
    pub fn remote_runs(&self) -> Result<Vec<(String, String)>, FossilError> {
        let mut st = self.db.prepare(
            "SELECT substr(name,?3), value FROM config WHERE name>=?1 AND name<?2 ORDER BY name",
        )?;
        let rows = st.query_map(
            rusqlite::params![
                REMOTE_RUN_PREFIX,
                format!("{}\u{10ffff}", REMOTE_RUN_PREFIX),
                REMOTE_RUN_PREFIX.len() as i64 + 1
            ],
            |r| Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?)),
        )?;
        let mut out = Vec::new();
        for row in rows {
            let (record, value) = row?;
            out.push((record, value.unwrap_or_default()));
        }
        Ok(out)
    }
}
