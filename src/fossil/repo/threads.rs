//! Forum threads and tickets: what was said where, oldest first.

use super::{FossilError, Lookup, Repository};
use rusqlite::{OptionalExtension, params};

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

/// A row of [`SQL_THREAD`] or [`SQL_TICKET_CHANGES`], whose first six
/// columns are alike, with what its seventh says.
fn said(r: &rusqlite::Row, comment: Option<String>, edit: bool) -> rusqlite::Result<Said> {
    Ok(Said {
        rid: r.get(0)?,
        hash: r.get(1)?,
        rcvid: r.get::<_, Option<i64>>(2)?.unwrap_or(0),
        from: r.get(3)?,
        when: r.get::<_, Option<f64>>(4)?.unwrap_or(0.0),
        private: r.get(5)?,
        comment,
        edit,
    })
}

/// A post's row: its number, hash, receipt, sender, time, privacy and
/// whether it edits another. Each row of another table is looked up by its
/// key and the thread by Fossil's index of it, so the plan is the same
/// whatever the repository's statistics say (those `fossil new` leaves
/// count a row or so a table, and plan a join as a scan of each).
pub(super) const SQL_THREAD: &str = "SELECT p.fpid, (SELECT uuid FROM blob WHERE rid=p.fpid),
       (SELECT rcvid FROM blob WHERE rid=p.fpid),
       (SELECT login FROM user WHERE uid=
          (SELECT uid FROM rcvfrom WHERE rcvid=(SELECT rcvid FROM blob WHERE rid=p.fpid))),
       p.fmtime, EXISTS(SELECT 1 FROM private WHERE rid=p.fpid), p.fprev IS NOT NULL
     FROM forumpost p INDEXED BY forumthread
     WHERE p.froot=?1 ORDER BY 3, 1";

pub(super) const SQL_POST: &str = "SELECT p.fpid, (SELECT uuid FROM blob WHERE rid=p.fpid),
       (SELECT rcvid FROM blob WHERE rid=p.fpid),
       (SELECT login FROM user WHERE uid=
          (SELECT uid FROM rcvfrom WHERE rcvid=(SELECT rcvid FROM blob WHERE rid=p.fpid))),
       p.fmtime, EXISTS(SELECT 1 FROM private WHERE rid=p.fpid), p.fprev IS NOT NULL
     FROM forumpost p
     WHERE p.fpid=?1";

pub(super) const SQL_FORUM_ROOT: &str = "SELECT froot FROM forumpost WHERE fpid=?1";

pub(super) const SQL_TICKET_CHANGES: &str =
    "SELECT c.tkt_rid, (SELECT uuid FROM blob WHERE rid=c.tkt_rid),
       (SELECT rcvid FROM blob WHERE rid=c.tkt_rid),
       (SELECT login FROM user WHERE uid=
          (SELECT uid FROM rcvfrom WHERE rcvid=(SELECT rcvid FROM blob WHERE rid=c.tkt_rid))),
       c.tkt_mtime, EXISTS(SELECT 1 FROM private WHERE rid=c.tkt_rid), c.icomment
     FROM ticketchng c
     WHERE c.tkt_id=?1 AND c.icomment IS NOT NULL ORDER BY 3, 1";

pub(super) const SQL_TICKET_RESOLVE: &str =
    "SELECT tkt_id, tkt_uuid FROM ticket WHERE tkt_uuid>=?1 AND tkt_uuid<?2 LIMIT 2";

/// Every first version of a post, and every ticket change with a
/// comment, that is not private and bears no tag `?1`, in received order.
const SQL_UNTAGGED_POSTS: &str = "SELECT p.fpid, b.uuid, b.rcvid, u.login, p.fmtime, 0, 0
     FROM forumpost p JOIN blob b ON b.rid=p.fpid
     LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid
     WHERE p.fprev IS NULL AND NOT EXISTS(SELECT 1 FROM private WHERE rid=p.fpid)
       AND NOT EXISTS(SELECT 1 FROM tagxref x JOIN tag t ON t.tagid=x.tagid
                      WHERE t.tagname=?1 AND x.rid=p.fpid AND x.tagtype>0)
     ORDER BY b.rcvid, p.fpid";

const SQL_UNTAGGED_CHANGES: &str =
    "SELECT c.tkt_rid, b.uuid, b.rcvid, u.login, c.tkt_mtime, 0, c.icomment
     FROM ticketchng c JOIN blob b ON b.rid=c.tkt_rid
     LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid
     WHERE c.icomment IS NOT NULL AND NOT EXISTS(SELECT 1 FROM private WHERE rid=c.tkt_rid)
       AND NOT EXISTS(SELECT 1 FROM tagxref x JOIN tag t ON t.tagid=x.tagid
                      WHERE t.tagname=?1 AND x.rid=c.tkt_rid AND x.tagtype>0)
     ORDER BY b.rcvid, c.tkt_rid";

impl Repository {
    /// Every post (its first version) and ticket change with a comment,
    /// public, that bears no tag `tag`: what may hold a message whose tag
    /// was never written.
    pub fn untagged_said(&self, tag: &str) -> Result<Vec<Said>, FossilError> {
        let mut out = Vec::new();
        if self.has_table("forumpost")? {
            let mut st = self.db.prepare_cached(SQL_UNTAGGED_POSTS)?;
            let rows = st.query_map([tag], |r| said(r, None, false))?;
            out.extend(rows.collect::<Result<Vec<_>, _>>()?);
        }
        if self.has_table("ticketchng")? {
            let mut st = self.db.prepare_cached(SQL_UNTAGGED_CHANGES)?;
            let rows = st.query_map([tag], |r| said(r, r.get(6)?, false))?;
            out.extend(rows.collect::<Result<Vec<_>, _>>()?);
        }
        Ok(out)
    }

    /// The ticket whose id a full id or prefix names.
    pub fn resolve_ticket(&self, prefix: &str) -> Result<Lookup, FossilError> {
        self.lookup_prefix(SQL_TICKET_RESOLVE, prefix)
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
        let rows = st.query_map([root], |r| said(r, None, r.get(6)?))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every change of ticket `tkt_id` that sets a comment, in the order
    /// this repository received them.
    pub fn ticket_changes(&self, tkt_id: i64) -> Result<Vec<Said>, FossilError> {
        let mut st = self.db.prepare_cached(SQL_TICKET_CHANGES)?;
        let rows = st.query_map([tkt_id], |r| said(r, r.get(6)?, false))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Whether the ticket table holds `tkt_id` (its full id).
    pub fn ticket_id(&self, tkt_id: i64) -> Result<Option<String>, FossilError> {
        Ok(self
            .row(
                "SELECT tkt_uuid FROM ticket WHERE tkt_id=?1",
                params![tkt_id],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// The post or ticket change `rid` as something said, or `None` when it is neither.
    pub fn said(&self, rid: i64) -> Result<Option<Said>, FossilError> {
        if self.has_table("forumpost")? {
            let mut st = self.db.prepare_cached(SQL_POST)?;
            if let Some(said) = st
                .query_row([rid], |r| said(r, None, r.get(6)?))
                .optional()?
            {
                return Ok(Some(said));
            }
        }
        let tkt: Option<i64> = self
            .db
            .prepare_cached("SELECT tkt_id FROM ticketchng WHERE tkt_rid=?1")?
            .query_row([rid], |r| r.get(0))
            .optional()?;
        match tkt {
            Some(t) => Ok(self.ticket_changes(t)?.into_iter().find(|s| s.rid == rid)),
            None => Ok(None),
        }
    }
}
