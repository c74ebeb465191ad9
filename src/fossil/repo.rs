//! Reading a repository directly with SQLite: query-only, with a busy
//! timeout, each read a short statement so Fossil's writers are never held
//! up. Every hot question is answered by an index (see [`HOT_QUERIES`]).

use super::FossilError;
use super::artifact::{self, HashPolicy, Parsed};
use super::caps::{Capabilities, Special};
use super::delta;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// One thing said where a record is: a forum post, or a ticket change.
#[derive(Debug, Clone)]
pub struct Said {
    pub rid: i64,
    pub hash: String,
    pub rcvid: i64,
    pub from: Option<String>,
    /// When it was written, as a Julian day.
    pub when: f64,
    pub private: bool,
    /// A ticket change's comment; a post's text is read from its artifact.
    pub comment: Option<String>,
    /// Whether it is an edit of an earlier post (never a message of its own).
    pub edit: bool,
}

/// A check-in, as verdicts need it.
#[derive(Debug, Clone)]
pub struct CheckIn {
    pub rid: i64,
    pub hash: String,
    /// Its branch, by its branch tag.
    pub branch: Option<String>,
    /// The user written in it: its own U card, never a later `user` tag
    /// (Fossil keeps that one apart, as the event's edited user).
    pub user: String,
    /// Its sender here, by receipt.
    pub sender: Option<String>,
    pub rcvid: i64,
    pub comment: String,
}

/// One tag change of a control artifact: its op (`+`, `*`, `-`), the tag's
/// full name, its value.
#[derive(Debug, Clone)]
pub struct TagSet {
    pub op: char,
    pub name: String,
    pub value: Option<String>,
}

/// A control artifact's changes to the tags of one target, with who sent it.
#[derive(Debug, Clone)]
pub struct TagChanges {
    pub rid: i64,
    pub hash: String,
    pub rcvid: i64,
    pub sender: Option<String>,
    /// When its writer says it was written, as a Julian day.
    pub when: f64,
    /// The target's full hash.
    pub target: String,
    pub tags: Vec<TagSet>,
}

/// The queries run for every call of the reading tools, by name, so a
/// test can hold their query plans to indexed searches.
pub const HOT_QUERIES: &[(&str, &str)] = &[
    ("resolve", SQL_RESOLVE),
    ("receipt", SQL_RECEIPT),
    ("thread", SQL_THREAD),
    ("thread_root", SQL_FORUM_ROOT),
    ("ticket_changes", SQL_TICKET_CHANGES),
    ("ticket_resolve", SQL_TICKET_RESOLVE),
    ("content", SQL_CONTENT),
    ("capabilities", SQL_CAPABILITIES),
];

const SQL_RESOLVE: &str = "SELECT b.rid, b.uuid FROM blob b WHERE b.uuid>=?1 AND b.uuid<?2
     AND NOT EXISTS(SELECT 1 FROM phantom p WHERE p.rid=b.rid) LIMIT 2";
const SQL_RECEIPT: &str =
    "SELECT b.rid, b.rcvid, b.size, u.login, EXISTS(SELECT 1 FROM private WHERE rid=b.rid)
     FROM blob b LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid
     WHERE b.uuid=?1";
const SQL_THREAD: &str = "SELECT p.fpid, b.uuid, b.rcvid, u.login, p.fmtime, EXISTS(SELECT 1 FROM private WHERE rid=p.fpid), p.fprev IS NOT NULL
     FROM forumpost p JOIN blob b ON b.rid=p.fpid
     LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid
     WHERE p.froot=?1 ORDER BY b.rcvid, p.fpid";
/// The login's row and the special logins', each found by the login's
/// index whatever the table's statistics say (a `CROSS JOIN` keeps the five
/// names as the outer loop).
const SQL_CAPABILITIES: &str = "SELECT u.login, coalesce(u.cap,'')
     FROM (VALUES(?1),('nobody'),('anonymous'),('reader'),('developer')) AS w
     CROSS JOIN user u ON u.login=w.column1";
const SQL_FORUM_ROOT: &str = "SELECT froot FROM forumpost WHERE fpid=?1";
const SQL_TICKET_CHANGES: &str = "SELECT c.tkt_rid, b.uuid, b.rcvid, u.login, c.tkt_mtime, EXISTS(SELECT 1 FROM private WHERE rid=c.tkt_rid), c.icomment
     FROM ticketchng c JOIN blob b ON b.rid=c.tkt_rid
     LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid
     WHERE c.tkt_id=?1 AND c.icomment IS NOT NULL ORDER BY b.rcvid, c.tkt_rid";
const SQL_TICKET_RESOLVE: &str =
    "SELECT tkt_id, tkt_uuid FROM ticket WHERE tkt_uuid>=?1 AND tkt_uuid<?2 LIMIT 2";
const SQL_CONTENT: &str =
    "SELECT b.content, b.size, d.srcid FROM blob b LEFT JOIN delta d ON d.rid=b.rid WHERE b.rid=?1";

const SQL_WIKI_NEWEST: &str = "SELECT x.rid, b.uuid FROM tag t JOIN tagxref x ON x.tagid=t.tagid \
     JOIN blob b ON b.rid=x.rid WHERE t.tagname=?1 ORDER BY x.mtime DESC, x.rid DESC LIMIT 1";
const SQL_WIKI_NAMES: &str =
    "SELECT substr(tagname, 6) FROM tag WHERE tagname GLOB 'wiki-*' ORDER BY 1";

/// The newest version of a wiki page.
#[derive(Debug, Clone)]
pub struct WikiVersion {
    /// Its full hash.
    pub hash: String,
    /// Its mimetype (`text/x-fossil-wiki` when it names none).
    pub mimetype: String,
    /// The page's text.
    pub text: String,
    /// Who stored it, as the receipt names them.
    pub sent_by: Option<String>,
}

impl Repository {
    /// Opens the repository file at `path` for reading. A path that is not
    /// a file is refused before SQLite could make one there.
    pub fn open(path: &Path) -> Result<Repository, FossilError> {
        if !path.is_file() {
            return Err(FossilError::NoRepository(path.to_path_buf()));
        }
        let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let unreadable = |e: rusqlite::Error| FossilError::Unreadable {
            path: path.clone(),
            message: e.to_string(),
        };
        let db = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(unreadable)?;
        db.busy_timeout(Duration::from_secs(15))
            .map_err(unreadable)?;
        db.pragma_update(None, "query_only", true)
            .map_err(unreadable)?;
        let repo = Repository { path, db };
        repo.project_code().map_err(|e| FossilError::Unreadable {
            path: repo.path.clone(),
            message: format!("not a Fossil repository ({e})"),
        })?;
        Ok(repo)
    }

    /// The repository file, absolute.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The newest version of wiki page `name`, or `None` when there is none.
    pub fn wiki_page(&self, name: &str) -> Result<Option<WikiVersion>, FossilError> {
        let row: Option<(i64, String)> = self
            .db
            .query_row(SQL_WIKI_NEWEST, [format!("wiki-{name}")], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        let Some((rid, hash)) = row else {
            return Ok(None);
        };
        let parsed = self
            .parsed(rid)?
            .ok_or_else(|| FossilError::Corrupt(hash.clone()))?;
        let text = String::from_utf8_lossy(parsed.text.as_deref().unwrap_or_default()).into_owned();
        let mimetype = parsed
            .arg(b'N')
            .unwrap_or_else(|| "text/x-fossil-wiki".to_string());
        let sent_by = self.receipt(&hash)?.and_then(|r| r.login);
        Ok(Some(WikiVersion {
            hash,
            mimetype,
            text,
            sent_by,
        }))
    }

    /// The names of every wiki page, sorted.
    pub fn wiki_names(&self) -> Result<Vec<String>, FossilError> {
        let mut st = self.db.prepare_cached(SQL_WIKI_NAMES)?;
        let rows = st.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// A row of the `config` table.
    pub fn config(&self, name: &str) -> Result<Option<String>, FossilError> {
        Ok(self
            .db
            .query_row("SELECT value FROM config WHERE name=?1", [name], |r| {
                r.get::<_, Option<String>>(0)
            })
            .optional()?
            .flatten())
    }

    /// The project-code every clone of this project shares.
    pub fn project_code(&self) -> Result<String, FossilError> {
        self.config("project-code")?
            .ok_or_else(|| FossilError::Query("the repository has no project-code".into()))
    }

    /// This repository's own server-code, which names it as a node.
    pub fn server_code(&self) -> Result<String, FossilError> {
        self.config("server-code")?
            .ok_or_else(|| FossilError::Query("the repository has no server-code".into()))
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
            .query_row("SELECT cap FROM user WHERE login=?1", [login], |r| {
                r.get::<_, Option<String>>(0)
            })
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
            .prepare("SELECT login, coalesce(cap,'') FROM user ORDER BY login")?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The artifact a full hash or a prefix names (lower-case hex only):
    /// every such hash sorts from the prefix up to the prefix and a `g`.
    pub fn resolve(&self, prefix: &str) -> Result<Lookup, FossilError> {
        let mut st = self.db.prepare_cached(SQL_RESOLVE)?;
        let rows: Vec<(i64, String)> = st
            .query_map([prefix.to_string(), format!("{prefix}g")], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect::<Result<_, _>>()?;
        Ok(lookup(rows))
    }

    /// The ticket whose id a full id or prefix names.
    pub fn resolve_ticket(&self, prefix: &str) -> Result<Lookup, FossilError> {
        let mut st = self.db.prepare_cached(SQL_TICKET_RESOLVE)?;
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

    /// The full hash of artifact `rid`.
    pub fn hash_of(&self, rid: i64) -> Result<String, FossilError> {
        Ok(self
            .db
            .query_row("SELECT uuid FROM blob WHERE rid=?1", [rid], |r| r.get(0))?)
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
            .query_row(
                "SELECT 1 FROM sqlite_schema WHERE type='table' AND name=?1",
                [name],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    /// The first post of the thread holding forum post `rid`, or `None`
    /// when `rid` is no forum post.
    pub fn thread_root(&self, rid: i64) -> Result<Option<i64>, FossilError> {
        if !self.has_table("forumpost")? {
            return Ok(None);
        }
        let mut st = self.db.prepare_cached(SQL_FORUM_ROOT)?;
        Ok(st.query_row([rid], |r| r.get(0)).optional()?)
    }

    /// Every post of the thread whose first post is `root`, edits included,
    /// in the order this repository received them (rcvid, then rid).
    pub fn thread(&self, root: i64) -> Result<Vec<Said>, FossilError> {
        let mut st = self.db.prepare_cached(SQL_THREAD)?;
        let rows = st.query_map([root], |r| {
            Ok(Said {
                rid: r.get(0)?,
                hash: r.get(1)?,
                rcvid: r.get::<_, Option<i64>>(2)?.unwrap_or(0),
                from: r.get(3)?,
                when: r.get::<_, Option<f64>>(4)?.unwrap_or(0.0),
                private: r.get(5)?,
                comment: None,
                edit: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every change of ticket `tkt_id` that sets a comment, in the order
    /// this repository received them.
    pub fn ticket_changes(&self, tkt_id: i64) -> Result<Vec<Said>, FossilError> {
        let mut st = self.db.prepare_cached(SQL_TICKET_CHANGES)?;
        let rows = st.query_map([tkt_id], |r| {
            Ok(Said {
                rid: r.get(0)?,
                hash: r.get(1)?,
                rcvid: r.get::<_, Option<i64>>(2)?.unwrap_or(0),
                from: r.get(3)?,
                when: r.get::<_, Option<f64>>(4)?.unwrap_or(0.0),
                private: r.get(5)?,
                comment: r.get(6)?,
                edit: false,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
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

    /// Whether the ticket table holds `tkt_id` (its full id).
    pub fn ticket_id(&self, tkt_id: i64) -> Result<Option<String>, FossilError> {
        Ok(self
            .db
            .query_row(
                "SELECT tkt_uuid FROM ticket WHERE tkt_id=?1",
                params![tkt_id],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Every artifact hash held here, for tests and benchmarks that compare
    /// a repository before and after.
    pub fn all_hashes(&self) -> Result<Vec<String>, FossilError> {
        let mut st = self.db.prepare("SELECT uuid FROM blob ORDER BY uuid")?;
        let rows = st.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

impl Repository {
    /// The check-in `rid`, or `None` when it is no check-in.
    pub fn checkin(&self, rid: i64) -> Result<Option<CheckIn>, FossilError> {
        let mut st = self.db.prepare_cached(SQL_CHECKIN)?;
        Ok(st.query_row([rid], checkin_row).optional()?)
    }

    /// Every public check-in, in received order.
    pub fn checkins(&self) -> Result<Vec<CheckIn>, FossilError> {
        let sql = SQL_CHECKINS.replace("AND EXISTS(SELECT 1 FROM mlink m WHERE m.mid=e.objid)", "");
        let mut st = self
            .db
            .prepare(&format!("SELECT * FROM ({sql}) ORDER BY rcvid, rid"))?;
        let rows = st.query_map([], checkin_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The check-ins that change files (a check-in with no file changed is
    /// none to judge), on `branch` or every branch, in received order.
    pub fn checkins_changing_files(
        &self,
        branch: Option<&str>,
    ) -> Result<Vec<CheckIn>, FossilError> {
        let sql = format!(
            "SELECT * FROM ({SQL_CHECKINS}) WHERE (?1 IS NULL OR branch=?1) ORDER BY rcvid, rid"
        );
        let mut st = self.db.prepare_cached(&sql)?;
        let rows = st.query_map([branch], checkin_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every control artifact that sets, on any target, a tag whose name
    /// (after an optional `sym-`) is one of `names`, in received order.
    /// Fossil writes each tag change's name into its event's comment, which
    /// narrows the artifacts read.
    pub fn tag_changes(
        &self,
        names: &[&str],
        target: Option<&str>,
    ) -> Result<Vec<TagChanges>, FossilError> {
        let mut clauses: Vec<String> = names
            .iter()
            .map(|n| format!("e.comment LIKE '%\"{}\"%' ESCAPE '\\'", n.replace('%', "")))
            .collect();
        if clauses.is_empty() {
            clauses.push("1".into());
        }
        let sql = format!(
            "SELECT e.objid, b.uuid, b.rcvid, u.login, e.mtime FROM event e JOIN blob b ON b.rid=e.objid
             LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid
             WHERE e.type='g' AND ({}) AND (?1 IS NULL OR e.comment LIKE '%[' || substr(?1,1,16) || '|%')
             ORDER BY b.rcvid, e.objid",
            clauses.join(" OR ")
        );
        type Row = (i64, String, Option<i64>, Option<String>, f64);
        let rows: Vec<Row> = {
            let mut st = self.db.prepare_cached(&sql)?;
            st.query_map([target], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?
            .collect::<Result<_, _>>()?
        };
        let mut out = Vec::new();
        for (rid, hash, rcvid, sender, when) in rows {
            let Some(parsed) = self.parsed(rid)? else {
                continue;
            };
            let mut by_target: Vec<TagChanges> = Vec::new();
            for card in parsed.all(b'T') {
                let (Some(raw), Some(tgt)) = (card.args.first(), card.args.get(1)) else {
                    continue;
                };
                let name = artifact::defossilize(raw);
                let mut chars = name.chars();
                let op = chars.next().unwrap_or('+');
                let name: String = chars.collect();
                let bare = name.strip_prefix("sym-").unwrap_or(&name);
                if !names.is_empty() && !names.contains(&bare) {
                    continue;
                }
                if target.is_some_and(|t| t != tgt) {
                    continue;
                }
                let set = TagSet {
                    op,
                    name: bare.to_string(),
                    value: card.args.get(2).map(|v| artifact::defossilize(v)),
                };
                match by_target.iter_mut().find(|c| &c.target == tgt) {
                    Some(c) => c.tags.push(set),
                    None => by_target.push(TagChanges {
                        rid,
                        hash: hash.clone(),
                        rcvid: rcvid.unwrap_or(0),
                        sender: sender.clone(),
                        when,
                        target: tgt.clone(),
                        tags: vec![set],
                    }),
                }
            }
            out.extend(by_target);
        }
        Ok(out)
    }

    /// The artifacts tagged `name` (a raw tag, such as `ocx-message`), in received order.
    pub fn tagged(&self, name: &str) -> Result<Vec<(i64, String)>, FossilError> {
        let mut st = self.db.prepare_cached(
            "SELECT x.rid, b.uuid FROM tagxref x JOIN blob b ON b.rid=x.rid
             WHERE x.tagid=(SELECT tagid FROM tag WHERE tagname=?1) AND x.tagtype>0 ORDER BY b.rcvid, x.rid",
        )?;
        let rows = st.query_map([name], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The post or ticket change `rid` as something said, or `None` when it is neither.
    pub fn said(&self, rid: i64) -> Result<Option<Said>, FossilError> {
        if let Some(root) = self.thread_root(rid)? {
            return Ok(self.thread(root)?.into_iter().find(|s| s.rid == rid));
        }
        let tkt: Option<i64> = self
            .db
            .query_row(
                "SELECT tkt_id FROM ticketchng WHERE tkt_rid=?1",
                [rid],
                |r| r.get(0),
            )
            .optional()?;
        match tkt {
            Some(t) => Ok(self.ticket_changes(t)?.into_iter().find(|s| s.rid == rid)),
            None => Ok(None),
        }
    }
}

/// What kind of thing arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArrivalKind {
    /// A forum post (or edit), in the thread whose first post is `root`.
    Post { root: i64 },
    /// A ticket change.
    TicketChange,
    /// A check-in, on its branch.
    CheckIn { branch: Option<String> },
    /// Anything else (a file, a tag change, a wiki page).
    Other,
}

/// An artifact this repository received, with its sender.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub rid: i64,
    pub hash: String,
    pub rcvid: i64,
    pub sender: Option<String>,
    pub kind: ArrivalKind,
    /// Private (an unmoderated post): not yet published, so not acted on.
    pub private: bool,
}

impl Repository {
    /// Every artifact stored after row `after`, in received order: its kind
    /// and its sender. New artifacts always get new, higher rows.
    pub fn arrivals_after(&self, after: i64) -> Result<Vec<Arrival>, FossilError> {
        let forum = self.has_table("forumpost")?;
        let sql = format!(
            "SELECT b.rid, b.uuid, coalesce(b.rcvid,0), u.login, e.type, {},
                    (SELECT value FROM tagxref x WHERE x.rid=b.rid AND x.tagid=8 AND x.tagtype>0),
                    EXISTS(SELECT 1 FROM private p WHERE p.rid=b.rid)
             FROM blob b LEFT JOIN event e ON e.objid=b.rid
             LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid
             WHERE b.rid>?1 AND b.size>=0 ORDER BY b.rcvid, b.rid",
            if forum {
                "(SELECT froot FROM forumpost f WHERE f.fpid=b.rid)"
            } else {
                "NULL"
            }
        );
        let mut st = self.db.prepare(&sql)?;
        let rows = st.query_map([after], |r| {
            let ty: Option<String> = r.get(4)?;
            let root: Option<i64> = r.get(5)?;
            let kind = match (ty.as_deref(), root) {
                (_, Some(root)) => ArrivalKind::Post { root },
                (Some("ci"), _) => ArrivalKind::CheckIn { branch: r.get(6)? },
                (Some("t"), _) => ArrivalKind::TicketChange,
                _ => ArrivalKind::Other,
            };
            Ok(Arrival {
                rid: r.get(0)?,
                hash: r.get(1)?,
                rcvid: r.get(2)?,
                sender: r.get(3)?,
                kind,
                private: r.get(7)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The server this repository (a clone) syncs with, if it remembers one.
    pub fn remote_url(&self) -> Result<Option<String>, FossilError> {
        self.config("last-sync-url")
    }

    /// Whether this repository (a clone) remembers a password for syncing.
    pub fn remembers_password(&self) -> Result<bool, FossilError> {
        Ok(self.db.query_row(
            "SELECT count(*) FROM config WHERE name='last-sync-pw' OR name GLOB 'sync-pw:*' OR name GLOB 'peer-*'",
            [],
            |r| r.get::<_, i64>(0),
        )? > 0)
    }

    /// Every public artifact this repository (a run's clone) made itself and
    /// never sent, each its full hash and bytes: what a run's `push` offers
    /// the node, which judges each one itself.
    pub fn unsent(&self) -> Result<Vec<(String, Vec<u8>)>, FossilError> {
        let mut st = self.db.prepare(
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

    /// The newest row in the repository.
    pub fn last_rid(&self) -> Result<i64, FossilError> {
        Ok(self
            .db
            .query_row("SELECT coalesce(max(rid),0) FROM blob", [], |r| r.get(0))?)
    }
}

const SQL_CHECKINS: &str = "SELECT e.objid AS rid, b.uuid, (SELECT value FROM tagxref x WHERE x.rid=e.objid AND x.tagid=8 AND x.tagtype>0) AS branch,
       e.user, u.login, coalesce(b.rcvid, 0) AS rcvid, coalesce(e.ecomment, e.comment, '')
     FROM event e JOIN blob b ON b.rid=e.objid
     LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid
     WHERE e.type='ci' AND EXISTS(SELECT 1 FROM mlink m WHERE m.mid=e.objid)
       AND NOT EXISTS(SELECT 1 FROM private p WHERE p.rid=e.objid)";
const SQL_CHECKIN: &str = "SELECT e.objid, b.uuid, (SELECT value FROM tagxref x WHERE x.rid=e.objid AND x.tagid=8 AND x.tagtype>0),
       e.user, u.login, coalesce(b.rcvid, 0), coalesce(e.ecomment, e.comment, '')
     FROM event e JOIN blob b ON b.rid=e.objid
     LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid
     WHERE e.objid=?1 AND e.type='ci'";

fn checkin_row(r: &rusqlite::Row) -> rusqlite::Result<CheckIn> {
    Ok(CheckIn {
        rid: r.get(0)?,
        hash: r.get(1)?,
        branch: r.get(2)?,
        user: r.get::<_, Option<String>>(3)?.unwrap_or_default(),
        sender: r.get(4)?,
        rcvid: r.get(5)?,
        comment: r.get(6)?,
    })
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

/// Who may act as whom: run logins and the senders of runner pages.
impl Repository {
    /// Whether `login` is marked as a run's login here, by the node that
    /// made it or by an administrator who adopted it.
    pub fn is_run_user(&self, login: &str) -> Result<bool, FossilError> {
        Ok(self.config(&run_user_mark(login))?.is_some())
    }

    /// Every version of wiki page `name` with its sender (by receipt),
    /// newest received first: by `rcvid`, then row, never the writer's
    /// own date, which anyone may set.
    pub fn wiki_versions_received(
        &self,
        name: &str,
    ) -> Result<Vec<(i64, Option<String>)>, FossilError> {
        let mut st = self.db.prepare_cached(
            "SELECT x.rid, u.login FROM tag t JOIN tagxref x ON x.tagid=t.tagid JOIN blob b ON b.rid=x.rid
             LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid
             WHERE t.tagname='wiki-' || ?1 AND NOT EXISTS(SELECT 1 FROM private p WHERE p.rid=x.rid)
             ORDER BY coalesce(b.rcvid, 0) DESC, x.rid DESC",
        )?;
        let rows = st.query_map([name], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}
