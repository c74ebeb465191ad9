//! Statements given to `fossil sql` on its standard input, never on its
//! command line (values may hold passwords): the rows OCX keeps in a
//! repository's `config` and `user` tables, each value quoted one way
//! ([`literal`]).

use super::{Fossil, plain};
use crate::fossil::FossilError;
use std::path::Path;

impl Fossil {
    /// Puts a stored, private forum post in the moderators' queue, as
    /// Fossil's own forum does for a poster who holds `3` but not `4`.
    pub fn queue_for_moderation(&self, repository: &Path, hash: &str) -> Result<(), FossilError> {
        if !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(FossilError::Command {
                operation: "sql",
                message: "not a hash".into(),
            });
        }
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS repository.modreq(objid INTEGER PRIMARY KEY, attachRid INT, tktid TEXT); \
             INSERT OR IGNORE INTO modreq(objid) SELECT rid FROM blob WHERE uuid={};",
            literal("sql", hash)?
        );
        self.sql_on_stdin("sql", repository, &sql).map(|_| ())
    }

    /// Sets exactly the capabilities `login` holds of its own.
    pub fn user_capabilities(
        &self,
        repository: &Path,
        login: &str,
        letters: &str,
    ) -> Result<(), FossilError> {
        if !letters.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(FossilError::Command {
                operation: "user capabilities",
                message: format!("{letters:?} are not capability letters"),
            });
        }
        let sql = format!(
            "UPDATE user SET cap={} WHERE login={};\n",
            literal("user capabilities", letters)?,
            literal("user capabilities", login)?
        );
        self.sql_on_stdin("user capabilities", repository, &sql)
            .map(|_| ())
    }

    /// Marks `login` as a run's in `repository` (its `config` row
    /// [`crate::fossil::repo::run_user_mark`]), saying who marked it: the node for
    /// a login it made, an administrator for one they adopted.
    pub fn mark_run_user(
        &self,
        repository: &Path,
        login: &str,
        by: &str,
    ) -> Result<(), FossilError> {
        let sql = format!(
            "REPLACE INTO config(name,value,mtime) VALUES({},{},now());\n",
            literal("sql", &crate::fossil::repo::run_user_mark(login))?,
            literal("sql", by)?
        );
        self.sql_on_stdin("sql", repository, &sql).map(|_| ())
    }

    /// Keeps `value` in `repository`'s `config` row `name`. The statement
    /// is given on standard input, never on the command line, since the
    /// value may hold a password.
    pub fn config_set(
        &self,
        repository: &Path,
        name: &str,
        value: &str,
    ) -> Result<(), FossilError> {
        let sql = format!(
            "REPLACE INTO config(name,value,mtime) VALUES({},{},now());\n",
            literal("config", name)?,
            literal("config", value)?
        );
        self.sql_on_stdin("config", repository, &sql).map(|_| ())
    }

    /// Removes `repository`'s `config` row `name`.
    pub fn config_delete(&self, repository: &Path, name: &str) -> Result<(), FossilError> {
        let sql = format!(
            "DELETE FROM config WHERE name={};\n",
            literal("config", name)?
        );
        self.sql_on_stdin("config", repository, &sql).map(|_| ())
    }

    /// Counts one try in the JSON `config` row `name` with one statement,
    /// so tries made at once by several processes are each counted: its
    /// `tries` since its `window` began (Unix seconds), a window begun anew
    /// once `window_seconds` passed since (or when the clock went back).
    /// Answers whether this try is within `limit`; false too for no such row.
    pub fn count_try(
        &self,
        repository: &Path,
        name: &str,
        limit: u32,
        window_seconds: i64,
        now: i64,
    ) -> Result<bool, FossilError> {
        let window = "coalesce(json_extract(value,'$.window'),0)";
        let tries = "coalesce(json_extract(value,'$.tries'),0)";
        let anew = format!("({now}-{window}>={window_seconds} OR {now}<{window})");
        let sql = format!(
            "UPDATE config SET value=CASE WHEN {anew} \
             THEN json_set(value,'$.window',{now},'$.tries',1) \
             ELSE json_set(value,'$.tries',{tries}+1) END, mtime=now() \
             WHERE name={} AND json_valid(value) AND ({anew} OR {tries}<{limit});\n\
             SELECT changes();\n",
            literal("count a try", name)?
        );
        Ok(self.sql_on_stdin("count a try", repository, &sql)?.trim() == "1")
    }

    /// Sets `fields` of the JSON `config` row `name` with one statement,
    /// where each of `when` (a field and the value it holds) still holds,
    /// so a writer between a read and this write is never overwritten.
    /// Answers whether the row was changed.
    pub fn config_json_update(
        &self,
        repository: &Path,
        name: &str,
        fields: &[(&str, &serde_json::Value)],
        when: &[(&str, &serde_json::Value)],
    ) -> Result<bool, FossilError> {
        let field = |f: &str| -> Result<String, FossilError> {
            if f.is_empty() || !f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(FossilError::Command {
                    operation: "config",
                    message: format!("{f:?} is no field of a config row"),
                });
            }
            Ok(format!("'$.{f}'"))
        };
        let mut set = String::from("value");
        for (f, v) in fields {
            set = format!(
                "json_set({set},{},json({}))",
                field(f)?,
                literal("config", &v.to_string())?
            );
        }
        let mut condition = format!("name={} AND json_valid(value)", literal("config", name)?);
        for (f, v) in when {
            condition += &format!(
                " AND json_extract(value,{}) IS json_extract({},'$')",
                field(f)?,
                literal("config", &v.to_string())?
            );
        }
        let sql = format!(
            "UPDATE config SET value={set}, mtime=now() WHERE {condition};\nSELECT changes();\n"
        );
        Ok(self.sql_on_stdin("config", repository, &sql)?.trim() == "1")
    }

    /// Rewrites each `config` row of `rows` (its name, the value read and
    /// the value it takes) where it still holds the value read, with
    /// SQLite's secure delete on: the text it held is overwritten in the
    /// file, never left behind in a free page.
    pub fn config_rewrite_securely(
        &self,
        repository: &Path,
        rows: &[(String, String, String)],
    ) -> Result<(), FossilError> {
        let mut sql = String::from("PRAGMA secure_delete=ON;\n");
        for (name, old, new) in rows {
            sql += &format!(
                "UPDATE config SET value={}, mtime=now() WHERE name={} AND value={};\n",
                literal("config", new)?,
                literal("config", name)?,
                literal("config", old)?
            );
        }
        self.sql_on_stdin("config", repository, &sql).map(|_| ())
    }

    /// Gives `login` OCX's `R` (`on`) or takes every `R` it holds away, in
    /// one statement that reads and writes its letters at once, so a letter
    /// another writer gave it a moment before stays; a login whose letters
    /// already say so is not written. Answers whether the row changed.
    pub fn send_runs(&self, repository: &Path, login: &str, on: bool) -> Result<bool, FossilError> {
        let change = if on {
            "cap=coalesce(cap,'')||'R'"
        } else {
            "cap=replace(cap,'R','')"
        };
        let when = if on {
            "instr(coalesce(cap,''),'R')=0"
        } else {
            "instr(coalesce(cap,''),'R')>0"
        };
        let sql = format!(
            "UPDATE user SET {change}, mtime=now() WHERE login={} AND {when};\nSELECT changes();\n",
            literal("send runs", login)?
        );
        let out = self.sql_on_stdin("send runs", repository, &sql)?;
        Ok(out.trim() != "0")
    }

    /// Runs `fossil sql -R REPOSITORY` with `sql` on standard input; what it printed.
    /// The password clone `repository` remembers for its server (its
    /// `last-sync-pw`, which Fossil keeps obscured), read back here: Fossil
    /// obscures a known text in the same statement, which gives the pattern
    /// to undo it with, so no password reaches a command line. `None` when
    /// the clone remembers none.
    pub fn remembered_password(&self, repository: &Path) -> Result<Option<String>, FossilError> {
        let sql = format!(
            "SELECT coalesce((SELECT value FROM config WHERE name='last-sync-pw'),''), obscure({});\n",
            literal("remembered password", KNOWN)?
        );
        let out = self.sql_on_stdin("remembered password", repository, &sql)?;
        let row = out.lines().next().unwrap_or("").replace('\'', "");
        let Some((stored, probe)) = row.split_once('|') else {
            return Ok(None);
        };
        Ok(unobscured(stored.trim(), probe.trim()))
    }

    pub(super) fn sql_on_stdin(
        &self,
        operation: &'static str,
        repository: &Path,
        sql: &str,
    ) -> Result<String, FossilError> {
        if sql.lines().any(|l| l.trim_start().starts_with('.')) {
            return Err(FossilError::Command {
                operation,
                message: "a line of the statement would be read as a shell command".into(),
            });
        }
        let path = repository.to_str().ok_or(FossilError::Command {
            operation,
            message: "the repository's path is not UTF-8".into(),
        })?;
        let path = plain(operation, "the repository", path)?;
        self.run_with_input(
            operation,
            &["sql".as_ref(), "-R".as_ref(), path],
            sql.as_bytes(),
        )
    }
}

/// `text` as an SQL string literal: the one way a value enters a statement
/// OCX gives `fossil sql`. Its quotes are doubled; a line break is refused,
/// since `fossil sql` reads a line beginning with `.` as a command of its
/// own, not as SQL.
pub(super) fn literal(operation: &'static str, text: &str) -> Result<String, FossilError> {
    if text.contains(['\n', '\r']) {
        return Err(FossilError::Command {
            operation,
            message: "a value holds a line break".into(),
        });
    }
    Ok(format!("'{}'", text.replace('\'', "''")))
}

#[cfg(test)]
mod tests {
    use super::literal;

    #[test]
    fn a_value_is_one_literal_whatever_it_holds() {
        assert_eq!(literal("sql", "it's").unwrap(), "'it''s'");
        assert_eq!(literal("sql", "a';DROP").unwrap(), "'a'';DROP'");
        assert!(literal("sql", "a\n.shell id").is_err());
        assert!(literal("sql", "a\r").is_err());
    }
}

/// The text Fossil is asked to obscure beside a remembered password: its
/// sixteen bytes give the whole repeating pattern.
const KNOWN: &str = "ocx-knows-this16";

/// `stored`, obscured by Fossil, read back with `probe`, Fossil's obscuring
/// of [`KNOWN`] (each is a salt byte then the text, each byte XOR-ed with a
/// 16-byte pattern and the salt, in hex); `None` when either does not read.
fn unobscured(stored: &str, probe: &str) -> Option<String> {
    let stored = hex::decode(stored).ok()?;
    let probe = hex::decode(probe).ok()?;
    let (&salt, text) = stored.split_first()?;
    let (&probe_salt, probe_text) = probe.split_first()?;
    if probe_text.len() != KNOWN.len() || text.is_empty() {
        return None;
    }
    let pattern: Vec<u8> = probe_text
        .iter()
        .zip(KNOWN.bytes())
        .map(|(o, k)| o ^ k ^ probe_salt)
        .collect();
    let bytes: Vec<u8> = text
        .iter()
        .enumerate()
        .map(|(i, b)| b ^ pattern[i & 0x0f] ^ salt)
        .collect();
    String::from_utf8(bytes).ok().filter(|p| !p.is_empty())
}

#[cfg(test)]
mod remembered {
    use super::*;

    #[test]
    fn a_password_fossil_obscured_is_read_back_with_the_known_texts_pattern() {
        let fossil = Fossil::locate().expect("fossil");
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("r.fossil");
        fossil.new_repository(&repo, "admin").unwrap();
        let none = fossil.remembered_password(&repo).unwrap();
        assert_eq!(none, None);
        for password in ["pw1", "a-longer password, past sixteen bytes"] {
            let sql = format!(
                "REPLACE INTO config(name,value,mtime) VALUES('last-sync-pw',obscure({}),now());\n",
                literal("t", password).unwrap()
            );
            fossil.sql_on_stdin("t", &repo, &sql).unwrap();
            assert_eq!(
                fossil.remembered_password(&repo).unwrap().as_deref(),
                Some(password)
            );
        }
        assert_eq!(unobscured("zz", "00"), None);
    }
}
