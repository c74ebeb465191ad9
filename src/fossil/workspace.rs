//! A run's workspace made ahead (HISTORY 476): a clone of the served
//! repository made as `nobody`, its local administrator named
//! [`AHEAD_ADMIN`], and its checkout, made before any run needs them; and
//! the same workspace given to a run's login once a run takes it, written
//! here with SQLite in the two files no other process holds yet (the
//! clone and its checkout's `.fslckout`), as Fossil's own `clone` of that
//! login would have left them: the login its administrator and default
//! user, its URL and password remembered for the next sync
//! (`last-sync-url`, `last-sync-pw` obscured as Fossil obscures it), and
//! the checkout naming the clone where it now lies.
//!
//! What `nobody` may pull, every login may: Fossil gives a signed-in login
//! `nobody`'s capabilities besides its own, and sends a clone every public
//! artifact alike to any login that may clone, so the run's own pull
//! afterwards brings the clone to what a clone of its own would hold.

use super::FossilError;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::path::Path;

/// The local administrator a clone made ahead is given until a run's
/// login takes its place.
pub const AHEAD_ADMIN: &str = "ocx-ahead";

/// The clone's file in a run's workspace.
pub const CLONE: &str = ".clone.fossil";

/// The checkout's own file in a workspace.
const CHECKOUT: &str = ".fslckout";

/// What a clone holds that decides which check-in its main branch's name
/// means: its check-ins and their tags, counted with their newest time.
/// Equal before and after a pull, the pull changed nothing a checkout of
/// the main branch would take.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckinsSeen {
    checkins: i64,
    newest: Option<f64>,
    tags: i64,
    newest_tag: Option<f64>,
}

/// When the workspace made ahead that `ws` holds (the clone and its
/// checkout) was last written, its clone's time; `None` when it holds none.
pub fn made_ahead(ws: &Path) -> Option<std::time::SystemTime> {
    let file = |name: &str| {
        std::fs::symlink_metadata(ws.join(name))
            .ok()
            .filter(|m| m.file_type().is_file())
    };
    file(CHECKOUT)?;
    file(CLONE)?.modified().ok()
}

/// Gives the workspace made ahead at `ws` to `login`, whose remote is
/// `remote` (its URL with the login and no password) and whose password is
/// `password`: the clone's administrator renamed, the login its default
/// user, the remote and password remembered, and the checkout pointed at
/// the clone where it lies now. Answers what the clone held of check-ins
/// before the run's pull.
pub fn adopt(
    ws: &Path,
    login: &str,
    password: &str,
    remote: &str,
) -> Result<CheckinsSeen, FossilError> {
    let refuse = |message: String| FossilError::Command {
        operation: "workspace made ahead",
        message,
    };
    if login.is_empty() || login.contains(['\0', '\n', '\r']) {
        return Err(refuse(format!("{login:?} cannot be a login")));
    }
    let clone = ws.join(CLONE);
    let mut db = open(&clone)?;
    let tx = db.transaction()?;
    let renamed = tx.execute(
        "UPDATE user SET login=?1 WHERE login=?2",
        params![login, AHEAD_ADMIN],
    )?;
    if renamed != 1 {
        return Err(refuse(format!(
            "its clone has no administrator {AHEAD_ADMIN} to give to {login}"
        )));
    }
    let salt: u8 = rand::random();
    let ckout = format!("ckout:{}/", ws.display());
    tx.execute("DELETE FROM config WHERE name GLOB 'ckout:*'", [])?;
    for (name, value) in [
        ("default-user", login.to_string()),
        ("last-sync-url", remote.to_string()),
        ("last-sync-pw", obscure(password, salt)),
        (ckout.as_str(), "1".to_string()),
    ] {
        tx.execute(
            "REPLACE INTO config(name,value,mtime) VALUES(?1,?2,strftime('%s','now'))",
            params![name, value],
        )?;
    }
    let seen = checkins_of(&tx)?;
    tx.commit()?;
    let checkout = open(&ws.join(CHECKOUT))?;
    let moved = checkout.execute(
        "UPDATE vvar SET value=?1 WHERE name='repository'",
        params![clone.to_string_lossy()],
    )?;
    if moved != 1 {
        return Err(refuse("its checkout names no repository".into()));
    }
    Ok(seen)
}

/// What the clone at `clone` holds of check-ins now.
pub fn checkins_seen(clone: &Path) -> Result<CheckinsSeen, FossilError> {
    checkins_of(&open(clone)?)
}

/// The name `fossil open` checks out when given no version: the clone's
/// `main-branch` setting, else `trunk`.
pub fn main_branch(clone: &Path) -> Result<String, FossilError> {
    let db = open(clone)?;
    let named: Option<String> = db
        .query_row(
            "SELECT value FROM config WHERE name='main-branch' AND value<>''",
            [],
            |r| r.get(0),
        )
        .optional()?;
    Ok(named.unwrap_or_else(|| "trunk".into()))
}

fn checkins_of(db: &Connection) -> Result<CheckinsSeen, FossilError> {
    let (checkins, newest) = db.query_row(
        "SELECT count(*), max(mtime) FROM event WHERE type='ci'",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let (tags, newest_tag) = db.query_row(
        "SELECT count(*), max(mtime) FROM tagxref \
         WHERE rid IN (SELECT objid FROM event WHERE type='ci')",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok(CheckinsSeen {
        checkins,
        newest,
        tags,
        newest_tag,
    })
}

fn open(file: &Path) -> Result<Connection, FossilError> {
    let db = Connection::open_with_flags(
        file,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    db.busy_timeout(std::time::Duration::from_secs(5))?;
    // No process but this one holds the workspace yet, and a watcher that
    // ends midway leaves a workspace no run takes again: nothing to wait
    // on the disk for.
    db.pragma_update(None, "synchronous", "OFF")?;
    Ok(db)
}

/// `text` as Fossil keeps a remembered password: each byte XOR-ed with
/// `salt` and with a repeating pattern of sixteen bytes, the salt first,
/// all in lower-case hexadecimal. Not secrecy, only against a glance.
fn obscure(text: &str, salt: u8) -> String {
    const PATTERN: [u8; 16] = [
        0xa7, 0x21, 0x31, 0xe3, 0x2a, 0x50, 0x2c, 0x86, 0x4c, 0xa4, 0x52, 0x25, 0xff, 0x49, 0x35,
        0x85,
    ];
    let mut out = format!("{salt:02x}");
    for (i, b) in text.bytes().enumerate() {
        out.push_str(&format!("{:02x}", b ^ PATTERN[i % 16] ^ salt));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_obscured_as_fossil_obscures_it() {
        // As `fossil test-obscure` shows it for a salt of 0x1a.
        assert_eq!(obscure("pw1", 0x1a), "1acd4c1a");
        let long = obscure("0123456789abcdefXYZ", 0);
        assert_eq!(long.len(), 2 + 2 * 19);
        // The pattern repeats after sixteen bytes: the same byte at 0 and 16
        // is obscured alike.
        assert_eq!(
            obscure("aaaaaaaaaaaaaaaaa", 7)[2..4],
            obscure("aaaaaaaaaaaaaaaaa", 7)[34..36]
        );
    }
}
