//! Arrivals: every artifact stored after a row, in received order, with its kind and sender.

use super::{FossilError, Repository};

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
    /// and its sender. New artifacts get new, higher rows, but for a
    /// phantom filled later ([`Repository::filled_phantoms`]). Fossil
    /// makes its forum table with the first post it stores, so a read that
    /// found no such table is made again once one is there: a first post
    /// stored between the two statements is never taken for something else.
    pub fn arrivals_after(&self, after: i64) -> Result<Vec<Arrival>, FossilError> {
        self.arrivals_where("b.rid>?1", after)
    }

    /// The artifacts among `rows` that were phantoms (a row Fossil made for
    /// an artifact it heard of, with no content) and now hold their
    /// content: each arrived when it was filled, below rows already read.
    pub fn filled_phantoms(&self, rows: &[i64]) -> Result<Vec<Arrival>, FossilError> {
        let mut filled = Vec::new();
        for rid in rows {
            filled.extend(self.arrivals_where("b.rid=?1", *rid)?);
        }
        Ok(filled)
    }

    /// The phantoms among the rows above `after` up to `upto`.
    pub fn phantoms_between(&self, after: i64, upto: i64) -> Result<Vec<i64>, FossilError> {
        let mut st = self.db.prepare_cached(
            "SELECT rid FROM blob WHERE rid>?1 AND rid<=?2 AND size<0 ORDER BY rid",
        )?;
        let rows = st.query_map([after, upto], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The arrivals whose row `filter` (on `b`, with `?1` the value given)
    /// holds, read again with the forum's table once it is there.
    fn arrivals_where(&self, filter: &str, value: i64) -> Result<Vec<Arrival>, FossilError> {
        let forum = self.has_table("forumpost")?;
        let read = self.arrivals_reading(filter, value, forum)?;
        if !forum && self.has_table("forumpost")? {
            return self.arrivals_reading(filter, value, true);
        }
        Ok(read)
    }

    /// [`Repository::arrivals_where`], reading posts as posts when `forum`
    /// (the forum's table is there).
    fn arrivals_reading(
        &self,
        filter: &str,
        value: i64,
        forum: bool,
    ) -> Result<Vec<Arrival>, FossilError> {
        let sql = format!(
            "SELECT b.rid, b.uuid, coalesce(b.rcvid,0), u.login, e.type, {},
                    (SELECT value FROM tagxref x WHERE x.rid=b.rid AND x.tagid=8 AND x.tagtype>0),
                    EXISTS(SELECT 1 FROM private p WHERE p.rid=b.rid)
             FROM blob b LEFT JOIN event e ON e.objid=b.rid
             LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid
             WHERE {filter} AND b.size>=0 ORDER BY b.rcvid, b.rid",
            if forum {
                "(SELECT froot FROM forumpost f WHERE f.fpid=b.rid)"
            } else {
                "NULL"
            }
        );
        let mut st = self.db.prepare_cached(&sql)?;
        let rows = st.query_map([value], |r| {
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

    /// The newest row in the repository.
    pub fn last_rid(&self) -> Result<i64, FossilError> {
        Ok(self
            .db
            .query_row("SELECT coalesce(max(rid),0) FROM blob", [], |r| r.get(0))?)
    }
}
