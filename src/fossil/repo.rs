//! Reading a repository directly with SQLite: query-only, with a busy
//! timeout, each read a short statement so Fossil's writers are never held
//! up. Every hot question is answered by an index (see [`HOT_QUERIES`]).

use super::FossilError;
use super::artifact::{self, HashPolicy, Parsed};
use super::caps::{Capabilities, Special};
use super::delta;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::path::{Path, PathBuf};
use std::time::Duration;

mod arrivals;
mod checkins;
mod logins;
mod refs;
mod threads;
mod wiki;

pub use arrivals::{Arrival, ArrivalKind, Arrivals};
pub use checkins::{CheckIn, TagChanges, TagSet};
pub use logins::{
    LOGIN_KEY_PREFIX, LOGINS_THREAD_ROW, REMOTE_RUN_PREFIX, forget_kept_passwords, login_key_row,
    remote_run_row,
};
pub use refs::{CheckinFile, Thing};
pub use threads::Said;
use threads::{SQL_FORUM_ROOT, SQL_POST, SQL_THREAD, SQL_TICKET_CHANGES, SQL_TICKET_RESOLVE};
pub use wiki::WikiVersion;

/// An open repository, read-only.
pub struct Repository {
    path: PathBuf,
    pub(super) db: Connection,
}

/// The artifacts a hash or prefix names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Exactly one: its row id and full hash.
    One(i64, String),
    /// None.
    None,
    /// More than one.
    Several,
}

/// Who sent an artifact to this repository, by its receipt.
#[derive(Debug, Clone)]
pub struct Receipt {
    pub rid: i64,
    pub rcvid: i64,
    /// The login the receipt names (`None` when the receipt names no user).
    pub login: Option<String>,
    /// Whether the artifact is private (an unmoderated post, say).
    pub private: bool,
}

/// The queries run for every call of the reading tools and every wake of
/// the node, by name, so a test can hold their query plans to indexed searches.
pub const HOT_QUERIES: &[(&str, &str)] = &[
    ("resolve", SQL_RESOLVE),
    ("receipt", SQL_RECEIPT),
    ("thread", SQL_THREAD),
    ("said", SQL_POST),
    ("thread_root", SQL_FORUM_ROOT),
    ("ticket_changes", SQL_TICKET_CHANGES),
    ("ticket_resolve", SQL_TICKET_RESOLVE),
    ("content", SQL_CONTENT),
    ("capabilities", SQL_CAPABILITIES),
    ("arrivals_same_receipt", arrivals::SQL_SAME_RECEIPT),
    ("arrivals_later_receipts", arrivals::SQL_LATER_RECEIPTS),
];

const SQL_RESOLVE: &str = "SELECT b.rid, b.uuid FROM blob b WHERE b.uuid>=?1 AND b.uuid<?2
     AND NOT EXISTS(SELECT 1 FROM phantom p WHERE p.rid=b.rid) LIMIT 2";
/// An artifact's row, sender and privacy; the sender looked up by key, so
/// the plan does not turn on the repository's statistics.
const SQL_RECEIPT: &str = "SELECT b.rid, b.rcvid, b.size,
       (SELECT login FROM user WHERE uid=(SELECT uid FROM rcvfrom WHERE rcvid=b.rcvid)),
       EXISTS(SELECT 1 FROM private WHERE rid=b.rid)
     FROM blob b WHERE b.uuid=?1";
/// The login's row and the special logins', each found by the login's
/// index whatever the table's statistics say (a `CROSS JOIN` keeps the five
/// names as the outer loop).
const SQL_CAPABILITIES: &str = "SELECT u.login, coalesce(u.cap,'')
     FROM (VALUES(?1),('nobody'),('anonymous'),('reader'),('developer')) AS w
     CROSS JOIN user u ON u.login=w.column1";
const SQL_CONTENT: &str = "SELECT b.content, b.size, (SELECT srcid FROM delta WHERE rid=b.rid)
     FROM blob b WHERE b.rid=?1";

/// Runs `sql`, a statement of no row and no parameter (`BEGIN`, `COMMIT`,
/// `ROLLBACK`), kept prepared on `db` as every statement of a kept
/// connection is: parsed anew, a `BEGIN` cost a page request more than its
/// lock.
fn kept_statement(db: &Connection, sql: &str) -> rusqlite::Result<usize> {
    db.prepare_cached(sql)?.execute([])
}

/// A read transaction [`Repository::reading`] began, rolled back when
/// dropped still open (its `read` panicked, or its commit failed).
struct OpenRead<'a>(&'a Connection);

impl Drop for OpenRead<'_> {
    fn drop(&mut self) {
        if !self.0.is_autocommit() {
            let _ = kept_statement(self.0, "ROLLBACK");
        }
    }
}

/// Whether a read finding the repository locked by a writer's commit
/// tries again, after a sleep: a quarter of a millisecond for the first
/// 40 tries (a commit's sync), then 10 ms, for about 15 s in all. SQLite's
/// own handler sleeps 1, 2, 5, 10 ms and more, so a reader woken by the
/// first write of a commit (the long-poll, a node) waited up to 8 ms past
/// a commit of 3.
fn busy(tries: i32) -> bool {
    const QUICK: i32 = 40;
    let pause = match tries < QUICK {
        true => Duration::from_micros(250),
        false => Duration::from_millis(10),
    };
    std::thread::sleep(pause);
    tries < QUICK + 1_500
}

impl Repository {
    /// Opens the repository file at `path` for reading. A path that is not
    /// a file is refused before SQLite could make one there.
    ///
    /// The connection is query-only: no statement it runs writes. It is
    /// opened for writing where the file may be written, as Fossil opens
    /// it, so that SQLite itself puts back what a writer killed mid-write
    /// left, and looks again when a commit's journal vanishes as it reads;
    /// a connection opened read-only answers both "attempt to write a
    /// readonly database" (HISTORY 298).
    pub fn open(path: &Path) -> Result<Repository, FossilError> {
        if !path.is_file() {
            return Err(FossilError::NoRepository(path.to_path_buf()));
        }
        let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let unreadable = |e: rusqlite::Error| match FossilError::from(e) {
            FossilError::Query(source) => FossilError::Unreadable {
                path: path.clone(),
                source,
            },
            damaged => damaged,
        };
        let mut db = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(unreadable)?;
        db.busy_handler(Some(busy)).map_err(unreadable)?;
        // A connection kept by a long-lived process (the page server, MCP,
        // the node) keeps every hot statement prepared, not the last 16.
        db.set_prepared_statement_cache_capacity(64);
        db.pragma_update(None, "query_only", true)
            .map_err(unreadable)?;
        db.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
            .map_err(unreadable)?;
        let repo = Repository { path, db };
        repo.project_code().map_err(|e| match e {
            FossilError::Query(source) => FossilError::Unreadable {
                path: repo.path.clone(),
                source,
            },
            FossilError::NoConfig(_) => FossilError::NotFossil(repo.path.clone()),
            other => other,
        })?;
        Ok(repo)
    }

    /// The one row `sql` finds, read by `f`, its statement kept prepared
    /// on the connection: rusqlite's own `query_row` parses its statement
    /// anew each call, which a kept connection (the page server, the node)
    /// paid on every request.
    pub(in crate::fossil) fn row<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        self.db.prepare_cached(sql)?.query_row(params, f)
    }

    /// The repository file, absolute.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A row of the `config` table.
    pub fn config(&self, name: &str) -> Result<Option<String>, FossilError> {
        Ok(self
            .db
            .prepare_cached("SELECT value FROM config WHERE name=?1")?
            .query_row([name], |r| r.get::<_, Option<String>>(0))
            .optional()?
            .flatten())
    }

    /// The repository's default user (`fossil user default`), when one is set.
    pub fn default_user(&self) -> Result<Option<String>, FossilError> {
        Ok(self.config("default-user")?.filter(|u| !u.is_empty()))
    }

    /// The project-code every clone of this project shares.
    pub fn project_code(&self) -> Result<String, FossilError> {
        self.config("project-code")?
            .ok_or_else(|| FossilError::NoConfig("project-code"))
    }

    /// This repository's own server-code, which names it as a node.
    pub fn server_code(&self) -> Result<String, FossilError> {
        self.config("server-code")?
            .ok_or_else(|| FossilError::NoConfig("server-code"))
    }

    /// The hash that names new artifacts here.
    pub fn hash_policy(&self) -> Result<HashPolicy, FossilError> {
        Ok(HashPolicy::from_config(
            self.config("hash-policy")?.as_deref(),
        ))
    }

    /// The letters Fossil's special users hold here.
    pub fn special(&self) -> Result<Special, FossilError> {
        let cap = |login: &str| -> Result<String, FossilError> {
            Ok(self.own_capabilities(login)?.unwrap_or_default())
        };
        Ok(Special {
            nobody: cap("nobody")?,
            anonymous: cap("anonymous")?,
            reader: cap("reader")?,
            developer: cap("developer")?,
        })
    }

    /// The letters `login` holds of its own, or `None` when there is no such login.
    pub fn own_capabilities(&self, login: &str) -> Result<Option<String>, FossilError> {
        Ok(self
            .db
            .prepare_cached("SELECT cap FROM user WHERE login=?1")?
            .query_row([login], |r| r.get::<_, Option<String>>(0))
            .optional()?
            .map(Option::unwrap_or_default))
    }

    /// What `login` may do here, signed in: its letters with inheritance and
    /// implications; `None` when there is no such login.
    /// Read with one indexed query, the special logins' rows with its own.
    pub fn capabilities(&self, login: &str) -> Result<Option<Capabilities>, FossilError> {
        let mut st = self.db.prepare_cached(SQL_CAPABILITIES)?;
        let rows = st.query_map([login], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?;
        let (mut own, mut special) = (None, Special::default());
        for row in rows {
            let (name, cap) = row?;
            if name == login {
                own = Some(cap.clone());
            }
            match name.as_str() {
                "nobody" => special.nobody = cap,
                "anonymous" => special.anonymous = cap,
                "reader" => special.reader = cap,
                "developer" => special.developer = cap,
                _ => {}
            }
        }
        let signed_in = login != "nobody";
        Ok(own.map(|own| Capabilities::effective(&own, &special, signed_in)))
    }

    /// Every login and the letters it holds of its own, by login.
    pub fn users(&self) -> Result<Vec<(String, String)>, FossilError> {
        let mut st = self
            .db
            .prepare_cached("SELECT login, coalesce(cap,'') FROM user ORDER BY login")?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The artifact a full hash or a prefix names (lower-case hex only):
    /// every such hash sorts from the prefix up to the prefix and a `g`.
    pub fn resolve(&self, prefix: &str) -> Result<Lookup, FossilError> {
        self.lookup_prefix(SQL_RESOLVE, prefix)
    }

    /// What `sql` finds between `prefix` and the prefix and a `g` (its
    /// `?1` and `?2`): a row id and a full hash, two rows at most.
    pub(super) fn lookup_prefix(&self, sql: &str, prefix: &str) -> Result<Lookup, FossilError> {
        let mut st = self.db.prepare_cached(sql)?;
        let rows: Vec<(i64, String)> = st
            .query_map([prefix.to_string(), format!("{prefix}g")], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect::<Result<_, _>>()?;
        Ok(lookup(rows))
    }

    /// The receipt of the artifact with full hash `hash`, or `None` when
    /// this repository has not received it (a phantom is not received).
    pub fn receipt(&self, hash: &str) -> Result<Option<Receipt>, FossilError> {
        let mut st = self.db.prepare_cached(SQL_RECEIPT)?;
        let row = st
            .query_row([hash], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Option<i64>>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, bool>(4)?,
                ))
            })
            .optional()?;
        Ok(row.and_then(|(rid, rcvid, size, login, private)| {
            (size >= 0).then_some(Receipt {
                rid,
                rcvid: rcvid.unwrap_or(0),
                login,
                private,
            })
        }))
    }

    /// When this repository received the artifact with full hash `hash`,
    /// where its receipt says.
    pub fn received_at(&self, hash: &str) -> Result<Option<std::time::SystemTime>, FossilError> {
        let mut st = self.db.prepare_cached(
            "SELECT r.mtime FROM blob b JOIN rcvfrom r ON r.rcvid=b.rcvid WHERE b.uuid=?1",
        )?;
        let day: Option<Option<f64>> = st.query_row([hash], |r| r.get(0)).optional()?;
        Ok(day.flatten().and_then(arrivals::julian_time))
    }

    /// Whether this repository has received the artifact with full hash
    /// `hash` (a phantom is not received): [`Repository::receipt`]'s
    /// question alone, a statement a fifth as dear to prepare.
    pub fn holds(&self, hash: &str) -> Result<bool, FossilError> {
        let mut st = self
            .db
            .prepare_cached("SELECT 1 FROM blob WHERE uuid=?1 AND size>=0")?;
        Ok(st.exists([hash])?)
    }

    /// The full hash of artifact `rid`.
    pub fn hash_of(&self, rid: i64) -> Result<String, FossilError> {
        Ok(self
            .db
            .prepare_cached("SELECT uuid FROM blob WHERE rid=?1")?
            .query_row([rid], |r| r.get(0))?)
    }

    /// The bytes of artifact `rid`, its delta chain applied; `None` for a phantom.
    pub fn content(&self, rid: i64) -> Result<Option<Vec<u8>>, FossilError> {
        let mut chain = Vec::new();
        let mut next = Some(rid);
        while let Some(id) = next {
            let mut st = self.db.prepare_cached(SQL_CONTENT)?;
            let row = st
                .query_row([id], |r| {
                    Ok((
                        r.get::<_, Option<Vec<u8>>>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, Option<i64>>(2)?,
                    ))
                })
                .optional()?;
            let Some((Some(stored), size, src)) = row else {
                return Ok(None);
            };
            if size < 0 || chain.len() > 10_000 {
                return Ok(None);
            }
            let bytes = delta::uncompress(&stored)
                .ok_or_else(|| FossilError::Corrupt(format!("rid {id}")))?;
            chain.push(bytes);
            next = src;
        }
        let mut out = chain.pop().unwrap_or_default();
        while let Some(d) = chain.pop() {
            out =
                delta::apply(&out, &d).ok_or_else(|| FossilError::Corrupt(format!("rid {rid}")))?;
        }
        Ok(Some(out))
    }

    /// Artifact `rid` read into its cards, or `None` when it has none.
    pub fn parsed(&self, rid: i64) -> Result<Option<Parsed>, FossilError> {
        Ok(self.content(rid)?.as_deref().and_then(artifact::parse))
    }

    /// Whether the forum has ever held a post here (its table is made lazily).
    fn has_table(&self, name: &str) -> Result<bool, FossilError> {
        Ok(self
            .db
            .prepare_cached("SELECT 1 FROM sqlite_schema WHERE type='table' AND name=?1")?
            .query_row([name], |_| Ok(()))
            .optional()?
            .is_some())
    }

    /// Runs `read` inside one read transaction, so its statements share one
    /// shared lock instead of taking and giving back one each (and looking
    /// for a journal each time). A writer waits until `read` ends, so a
    /// caller keeps it to a few milliseconds of reads and never writes,
    /// nor starts `fossil`, inside it. Ended however `read` ends. Inside
    /// a read already begun ([`Repository::begin_reading`]), `read` is
    /// part of it.
    pub fn reading<T>(&self, read: impl FnOnce() -> T) -> Result<T, FossilError> {
        if !self.db.is_autocommit() {
            return Ok(read());
        }
        kept_statement(&self.db, "BEGIN")?;
        let open = OpenRead(&self.db);
        let out = read();
        kept_statement(&self.db, "COMMIT")?;
        drop(open);
        Ok(out)
    }

    /// Begins one read transaction that every read after shares until
    /// [`Repository::end_reading`]: for a whole request that only reads
    /// and never waits (a page's), as [`Repository::reading`] is for a
    /// few reads. A connection given back to [`super::kept::Kept`] with
    /// it still open is closed, never lent again.
    pub fn begin_reading(&self) -> Result<(), FossilError> {
        if self.db.is_autocommit() {
            kept_statement(&self.db, "BEGIN")?;
        }
        Ok(())
    }

    /// Ends the read [`Repository::begin_reading`] began, if one is open.
    pub fn end_reading(&self) {
        if !self.db.is_autocommit() {
            let _ = kept_statement(&self.db, "COMMIT");
        }
    }

    /// The query plan SQLite chooses for `sql`, a line per step.
    pub fn query_plan(&self, sql: &str) -> Result<Vec<String>, FossilError> {
        let mut st = self.db.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
        let n = st.parameter_count();
        let args: Vec<&str> = vec!["1"; n];
        let rows = st.query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(3))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every hook installed here, in Fossil's order: its index (as `fossil
    /// hook delete` takes it), its type and its command.
    pub fn hooks(&self) -> Result<Vec<(usize, String, String)>, FossilError> {
        let Some(json) = self.config("hooks")? else {
            return Ok(Vec::new());
        };
        let list: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap_or_default();
        Ok(list
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let field = |k: &str| h.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
                (i, field("type"), field("cmd"))
            })
            .collect())
    }

    /// The command of each after-receive hook installed here.
    pub fn after_receive_hooks(&self) -> Result<Vec<String>, FossilError> {
        Ok(self
            .hooks()?
            .into_iter()
            .filter(|h| h.1 == "after-receive")
            .map(|h| h.2)
            .collect())
    }

    /// Every artifact hash held here, for tests and benchmarks that compare
    /// a repository before and after.
    pub fn all_hashes(&self) -> Result<Vec<String>, FossilError> {
        let mut st = self
            .db
            .prepare_cached("SELECT uuid FROM blob ORDER BY uuid")?;
        let rows = st.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

impl Repository {
    /// The server this repository (a clone) syncs with, if it remembers one.
    pub fn remote_url(&self) -> Result<Option<String>, FossilError> {
        self.config("last-sync-url")
    }

    /// Whether this repository (a clone) remembers a password for syncing.
    pub fn remembers_password(&self) -> Result<bool, FossilError> {
        Ok(self.row(
            "SELECT count(*) FROM config WHERE name='last-sync-pw' OR name GLOB 'sync-pw:*' OR name GLOB 'peer-*'",
            [],
            |r| r.get::<_, i64>(0),
        )? > 0)
    }

    /// Every public artifact this repository (a run's clone) made itself and
    /// never sent, each its full hash and bytes: what a run's `push` offers
    /// the node, which judges each one itself.
    pub fn unsent(&self) -> Result<Vec<(String, Vec<u8>)>, FossilError> {
        let mut st = self.db.prepare_cached(
            "SELECT u.rid, b.uuid FROM unsent u JOIN blob b ON b.rid=u.rid
             WHERE NOT EXISTS(SELECT 1 FROM private p WHERE p.rid=u.rid) ORDER BY u.rid",
        )?;
        let rows: Vec<(i64, String)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        let mut out = Vec::new();
        for (rid, hash) in rows {
            if let Some(bytes) = self.content(rid)? {
                out.push((hash, bytes));
            }
        }
        Ok(out)
    }
}

fn lookup(rows: Vec<(i64, String)>) -> Lookup {
    match rows.len() {
        0 => Lookup::None,
        1 => {
            let (rid, hash) = rows.into_iter().next().expect("one row");
            Lookup::One(rid, hash)
        }
        _ => Lookup::Several,
    }
}

/// A Julian day as RFC 3339 in UTC, to the second.
pub fn julian_to_rfc3339(jd: f64) -> String {
    let unix = ((jd - 2440587.5) * 86400.0).round() as i64;
    time::OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// The `config` row that marks `login` as a run's login (C5): a name of
/// OCX's own, which Fossil never syncs or clones, so it lives as long as
/// the repository and no longer than it.
pub fn run_user_mark(login: &str) -> String {
    format!("ocx-run-user:{login}")
}

/// Who may act as whom: run logins.
impl Repository {
    /// Whether `login` is marked as a run's login here, by the node that
    /// made it or by an administrator who adopted it.
    pub fn is_run_user(&self, login: &str) -> Result<bool, FossilError> {
        Ok(self.config(&run_user_mark(login))?.is_some())
    }

    /// What the mark of run login `login` says of who made or adopted it.
    pub fn run_user_mark(&self, login: &str) -> Result<Option<String>, FossilError> {
        self.config(&run_user_mark(login))
    }
}
