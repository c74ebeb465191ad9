//! Logins asked for and given (`approve`, `collect`, `send_runs`): the
//! `config` rows OCX keeps for them, whether a login still holds the
//! password OCX set, as Fossil stores it (the SHA-1 of
//! `PROJECT-CODE/LOGIN/PASSWORD`), and the passwords an earlier release
//! kept in those rows, forgotten.

use super::super::{Fossil, FossilError};
use super::Repository;
use rusqlite::OptionalExtension;
use sha1::{Digest, Sha1};

/// The `config` row keeping an approved login's key (never its password).
pub fn login_key_row(login: &str) -> String {
    format!("{LOGIN_KEY_PREFIX}{login}")
}

/// What every [`login_key_row`] begins with.
pub const LOGIN_KEY_PREFIX: &str = "ocx-node-key-";

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

    /// What Fossil keeps of `login`'s password (the hash it checks a
    /// sign-in against), or `None` when there is no such login or it has none.
    pub fn password_hash(&self, login: &str) -> Result<Option<String>, FossilError> {
        Ok(self
            .db
            .prepare_cached("SELECT pw FROM user WHERE login=?1")?
            .query_row([login], |r| r.get::<_, Option<String>>(0))
            .optional()?
            .flatten()
            .filter(|pw| !pw.is_empty()))
    }

    /// Whether `login` exists and still holds `password` (Fossil keeps its
    /// SHA-1 with the project-code and login, or, set by hand, the text).
    pub fn holds_password(&self, login: &str, password: &str) -> Result<bool, FossilError> {
        let Some(stored) = self.password_hash(login)? else {
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
        let mut st = self.db.prepare_cached(
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

impl Repository {
    /// The rows of logins' keys and of remote runs that still keep a
    /// `password`, as an earlier release wrote them: each its name, the
    /// value it holds and the value it takes. A key's row takes, in its
    /// place, what Fossil keeps of the password while the login still holds
    /// it (`pw`), so `approve` and `collect` still tell a password changed
    /// by hand; a remote run's row keeps nothing of it.
    pub fn kept_passwords(&self) -> Result<Vec<(String, String, String)>, FossilError> {
        let mut st = self.db.prepare_cached(
            "SELECT name, value FROM config
             WHERE (name GLOB 'ocx-node-key-*' OR name GLOB 'ocx-remote-run-*')
             AND json_valid(value) AND json_type(value,'$.password') IS NOT NULL",
        )?;
        let rows: Vec<(String, String)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        let mut out = Vec::new();
        for (name, old) in rows {
            if let Some(new) = self.without_password(&name, &old)? {
                out.push((name, old, new));
            }
        }
        Ok(out)
    }

    /// What the row `name` (a login's key or a remote run) takes in place
    /// of `value` once its `password` is forgotten, when it keeps one.
    pub fn without_password(&self, name: &str, value: &str) -> Result<Option<String>, FossilError> {
        let Ok(serde_json::Value::Object(mut value)) = serde_json::from_str(value) else {
            return Ok(None);
        };
        let Some(password) = value.remove("password") else {
            return Ok(None);
        };
        if let Some(login) = name.strip_prefix(LOGIN_KEY_PREFIX) {
            let held = match password.as_str() {
                Some(p) if self.holds_password(login, p)? => self.password_hash(login)?,
                _ => None,
            };
            match held {
                Some(pw) => value.insert("pw".into(), pw.into()),
                None => value.remove("pw"),
            };
        }
        Ok(Some(serde_json::Value::Object(value).to_string()))
    }
}

/// Forgets every password an earlier release kept in the rows of logins'
/// keys and of remote runs ([`Repository::kept_passwords`]), overwriting
/// what they held; how many rows it rewrote. Done at each of the node's
/// wakes and before `approve`, `collect` and `run_login` read a row.
pub fn forget_kept_passwords(fossil: &Fossil, repo: &Repository) -> Result<usize, FossilError> {
    let rows = repo.kept_passwords()?;
    if !rows.is_empty() {
        fossil.config_rewrite_securely(repo.path(), &rows)?;
    }
    Ok(rows.len())
}
