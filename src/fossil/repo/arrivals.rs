//! Arrivals: every artifact stored after a row, in received order, with its kind and sender.

use super::{FossilError, Repository};

/// An arrivals statement: each row's number, hash, receipt, sender, event
/// type, thread (`$root`, as the forum's table is there or not), branch,
/// privacy and when it was received, of the rows `$filter` holds. One
/// table is read and each other row is looked up by its key, so the plan
/// is the same whatever the repository's statistics say (those `fossil
/// new` leaves count a row or so a table, and plan joins as scans).
macro_rules! concat_arrivals {
    ($root:literal, $filter:literal) => {
        concat!(
            "SELECT b.rid, b.uuid, b.rcvid, ",
            "(SELECT login FROM user WHERE uid=(SELECT uid FROM rcvfrom WHERE rcvid=b.rcvid)), ",
            "(SELECT type FROM event WHERE objid=b.rid), ",
            $root,
            ", (SELECT value FROM tagxref x WHERE x.rid=b.rid AND x.tagid=8 AND x.tagtype>0),
                EXISTS(SELECT 1 FROM private p WHERE p.rid=b.rid),
                (SELECT mtime FROM rcvfrom WHERE rcvid=b.rcvid)
             FROM blob b
             WHERE ",
            $filter
        )
    };
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
    /// When the repository received it, where its receipt says.
    pub received: Option<std::time::SystemTime>,
}

/// The arrivals after a row, read a batch at a time ([`Arrivals::next`]):
/// in received order (by receipt, those of none first, then by row), each
/// once, up to the newest row there was when the reading began. Where it
/// stands is the last arrival read, so a batch is one short indexed read
/// however many came before it, and an artifact stored meanwhile is left
/// for the next reading, but for a phantom filled meanwhile, read last.
#[derive(Debug, Clone)]
pub struct Arrivals {
    after: i64,
    upto: i64,
    /// The least receipt among the arrivals after `after`, `None` when none has one.
    first_receipt: Option<i64>,
    /// The last arrival read: its receipt (`None` for none) and its row.
    last: (Option<i64>, i64),
}

/// A batch's first statement: the rest of the last arrival's receipt.
pub(super) const SQL_SAME_RECEIPT: &str = concat_arrivals!(
    "(SELECT froot FROM forumpost f WHERE f.fpid=b.rid)",
    "b.rcvid IS ?1 AND b.rid>?2 AND b.rid<=?3 AND b.size>=0 ORDER BY b.rid LIMIT ?4"
);
const SQL_SAME_RECEIPT_NO_FORUM: &str = concat_arrivals!(
    "NULL",
    "b.rcvid IS ?1 AND b.rid>?2 AND b.rid<=?3 AND b.size>=0 ORDER BY b.rid LIMIT ?4"
);
/// A batch's second statement: the receipts after it, among the rows
/// after `?2`. Fossil keeps no index of `blob.rcvid`, so the rows are found
/// by their numbers and sorted: a wake reads the rows that came since, not
/// the whole table.
pub(super) const SQL_LATER_RECEIPTS: &str = concat_arrivals!(
    "(SELECT froot FROM forumpost f WHERE f.fpid=b.rid)",
    "b.rcvid>?1 AND b.rid>?2 AND b.rid<=?3 AND b.size>=0 ORDER BY b.rcvid, b.rid LIMIT ?4"
);
const SQL_LATER_RECEIPTS_NO_FORUM: &str = concat_arrivals!(
    "NULL",
    "b.rcvid>?1 AND b.rid>?2 AND b.rid<=?3 AND b.size>=0 ORDER BY b.rcvid, b.rid LIMIT ?4"
);
const SQL_ONE: &str = concat_arrivals!(
    "(SELECT froot FROM forumpost f WHERE f.fpid=b.rid)",
    "b.rid=?1 AND b.size>=0"
);
const SQL_ONE_NO_FORUM: &str = concat_arrivals!("NULL", "b.rid=?1 AND b.size>=0");

impl Arrivals {
    /// The next arrivals, `at_most` of them at most; none once every
    /// one is read.
    pub fn next(&mut self, repo: &Repository, at_most: usize) -> Result<Vec<Arrival>, FossilError> {
        let read = repo.with_forum(|forum| self.reading(repo, at_most, forum))?;
        if let Some((receipt, a)) = read.last() {
            self.last = (*receipt, a.rid);
        }
        Ok(read.into_iter().map(|(_, a)| a).collect())
    }

    /// [`Arrivals::next`], reading posts as posts when `forum` (the
    /// forum's table is there); each arrival with its receipt as stored.
    fn reading(
        &self,
        repo: &Repository,
        at_most: usize,
        forum: bool,
    ) -> Result<Vec<(Option<i64>, Arrival)>, FossilError> {
        let at_most = i64::try_from(at_most).unwrap_or(i64::MAX);
        let (same, later) = if forum {
            (SQL_SAME_RECEIPT, SQL_LATER_RECEIPTS)
        } else {
            (SQL_SAME_RECEIPT_NO_FORUM, SQL_LATER_RECEIPTS_NO_FORUM)
        };
        let (receipt, rid) = self.last;
        let mut read =
            repo.arrivals_read(same, rusqlite::params![receipt, rid, self.upto, at_most])?;
        let left = at_most - read.len() as i64;
        let past = receipt.or(self.first_receipt.map(|r| r.saturating_sub(1)));
        if let (true, Some(past)) = (left > 0, past) {
            read.extend(
                repo.arrivals_read(later, rusqlite::params![past, self.after, self.upto, left])?,
            );
        }
        Ok(read)
    }
}

impl Repository {
    /// The artifacts stored after row `after`, to be read a batch at a
    /// time in received order, with their kinds and senders. New artifacts
    /// get new, higher rows, but for a phantom filled later
    /// ([`Repository::filled_phantoms`]).
    pub fn arrivals_after(&self, after: i64) -> Result<Arrivals, FossilError> {
        let (upto, first_receipt) = self.row(
            "SELECT (SELECT coalesce(max(rid),0) FROM blob),
                    (SELECT min(+b.rcvid) FROM blob b WHERE b.rid>?1 AND b.size>=0)",
            [after],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok(Arrivals {
            after,
            upto,
            first_receipt,
            last: (None, after),
        })
    }

    /// The artifacts among `rows` that were phantoms (a row Fossil made for
    /// an artifact it heard of, with no content) and now hold their
    /// content: each arrived when it was filled, below rows already read.
    pub fn filled_phantoms(&self, rows: &[i64]) -> Result<Vec<Arrival>, FossilError> {
        let mut filled = Vec::new();
        for rid in rows {
            let read = self.with_forum(|forum| {
                self.arrivals_read(if forum { SQL_ONE } else { SQL_ONE_NO_FORUM }, [*rid])
            })?;
            filled.extend(read.into_iter().map(|(_, a)| a));
        }
        Ok(filled)
    }

    /// What `read` answers, told whether the forum's table is there, and
    /// read again with it when it was not there and is now: Fossil makes
    /// the table with the first post it stores, so a first post stored
    /// while reading is never taken for something else.
    fn with_forum<T>(
        &self,
        read: impl Fn(bool) -> Result<T, FossilError>,
    ) -> Result<T, FossilError> {
        let forum = self.has_table("forumpost")?;
        let first = read(forum)?;
        match !forum && self.has_table("forumpost")? {
            true => read(true),
            false => Ok(first),
        }
    }

    /// Whether the repository holds a phantom: an artifact it has heard
    /// of and lacks.
    pub fn has_phantoms(&self) -> Result<bool, FossilError> {
        Ok(self.row("SELECT EXISTS(SELECT 1 FROM phantom)", [], |r| r.get(0))?)
    }

    /// The phantoms among the rows above `after` up to `upto`.
    pub fn phantoms_between(&self, after: i64, upto: i64) -> Result<Vec<i64>, FossilError> {
        let mut st = self.db.prepare_cached(
            "SELECT rid FROM blob WHERE rid>?1 AND rid<=?2 AND size<0 ORDER BY rid",
        )?;
        let rows = st.query_map([after, upto], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The arrivals an arrivals statement `sql` reads with `params`, each
    /// with its receipt as stored.
    fn arrivals_read(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<(Option<i64>, Arrival)>, FossilError> {
        let mut st = self.db.prepare_cached(sql)?;
        let rows = st.query_map(params, |r| {
            let ty: Option<String> = r.get(4)?;
            let root: Option<i64> = r.get(5)?;
            let kind = match (ty.as_deref(), root) {
                (_, Some(root)) => ArrivalKind::Post { root },
                (Some("ci"), _) => ArrivalKind::CheckIn { branch: r.get(6)? },
                (Some("t"), _) => ArrivalKind::TicketChange,
                _ => ArrivalKind::Other,
            };
            let receipt: Option<i64> = r.get(2)?;
            Ok((
                receipt,
                Arrival {
                    rid: r.get(0)?,
                    hash: r.get(1)?,
                    rcvid: receipt.unwrap_or(0),
                    sender: r.get(3)?,
                    kind,
                    private: r.get(7)?,
                    received: r.get::<_, Option<f64>>(8)?.and_then(julian_time),
                },
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The newest row in the repository.
    pub fn last_rid(&self) -> Result<i64, FossilError> {
        Ok(self.row("SELECT coalesce(max(rid),0) FROM blob", [], |r| r.get(0))?)
    }
}

/// The time a Julian day number (as Fossil stores a receipt's) names.
pub(crate) fn julian_time(day: f64) -> Option<std::time::SystemTime> {
    let secs = (day - 2_440_587.5) * 86_400.0;
    (secs.is_finite() && secs >= 0.0)
        .then(|| std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(secs))
}
