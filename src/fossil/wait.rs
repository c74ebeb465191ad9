//! Waiting for the repository to receive something: the newest receipt's
//! number read by one short, indexed statement, again each time the
//! repository file changes (inotify), so a long wait holds no lock and
//! any writer goes through meanwhile. A wait that cannot have an inotify
//! instance reads the receipts every 100 ms instead of failing.

use super::{FossilError, Repository};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use rusqlite::OptionalExtension;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The longest a wait goes without reading the receipts again, in case a
/// change came by a way inotify does not see (a write-ahead log, say).
const RECHECK: Duration = Duration::from_secs(5);

/// How often a wait that cannot watch the file (the account holds all
/// the inotify instances it may) reads the receipts instead.
const POLL: Duration = Duration::from_millis(100);

impl Repository {
    /// The number of the newest receipt (`rcvid`) the repository holds; 0
    /// when it holds none.
    pub fn last_receipt(&self) -> Result<i64, FossilError> {
        Ok(
            self.row("SELECT coalesce(max(rcvid),0) FROM rcvfrom", [], |r| {
                r.get(0)
            })?,
        )
    }

    /// The hashes of the artifacts received after receipt `after` among
    /// the repository's newest `rows` rows, oldest first, phantoms left
    /// out: what a caller who heard `after` last is about to pull, as far
    /// as the newest rows tell (a phantom filled since keeps its older row).
    pub fn received_lately(&self, after: i64, rows: usize) -> Result<Vec<String>, FossilError> {
        let floor = self.last_rid()? - rows as i64;
        Ok(self
            .received_above(after, floor)?
            .into_iter()
            .map(|r| r.1)
            .collect())
    }

    /// The rows above `floor` received after receipt `after`, phantoms
    /// left out, oldest first: each its row, hash and size, and whether it
    /// is private or shunned (what a pull leaves out). Rows are read by
    /// their numbers alone: Fossil keeps no index of `blob.rcvid`.
    fn received_above(
        &self,
        after: i64,
        floor: i64,
    ) -> Result<Vec<(i64, String, i64, bool)>, FossilError> {
        let mut q = self.db.prepare_cached(
            "SELECT rid, uuid, size, rid IN private OR uuid IN (SELECT uuid FROM shun) FROM blob \
             WHERE rid>?2 AND rcvid>?1 AND size>=0 ORDER BY rid",
        )?;
        let rows = q
            .query_map(rusqlite::params![after, floor], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    /// Every public artifact received after receipt `after` among the
    /// newest `most` rows, each its full hash and bytes, oldest first, read
    /// in one snapshot: all a clone that took everything up to `after`
    /// lacks, but for a phantom filled since (its row is old; the caller
    /// knows it by a phantom of its own). `None` when the arrivals may go
    /// past those rows (the row just below them is not an artifact received
    /// by `after` at the latest: a burst, or a phantom or a private artifact
    /// there) or hold more than `bytes` in all, so the caller pulls instead.
    /// A phantom is not received; a private artifact (an unmoderated post)
    /// or a shunned one is left out, as a pull leaves it.
    pub fn arrived_after(
        &self,
        after: i64,
        most: usize,
        bytes: usize,
    ) -> Result<Option<super::store::Artifacts>, FossilError> {
        // One read: the rows and their contents as one snapshot.
        self.reading(|| {
            let floor = self.last_rid()? - most as i64;
            let below: Option<(i64, i64, bool)> = self
                .row(
                    "SELECT rcvid, size, rid IN private FROM blob WHERE rid<=?1 ORDER BY rid DESC LIMIT 1",
                    [floor],
                    |r| Ok((r.get::<_, Option<i64>>(0)?.unwrap_or(0), r.get(1)?, r.get(2)?)),
                )
                .optional()?;
            if below
                .is_some_and(|(rcvid, size, private)| rcvid < 1 || rcvid > after || size < 0 || private)
            {
                return Ok(None);
            }
            let rows: Vec<_> = self
                .received_above(after, floor)?
                .into_iter()
                .filter(|r| !r.3)
                .collect();
            let total: i64 = rows.iter().map(|r| r.2).sum();
            if total > bytes as i64 {
                return Ok(None);
            }
            let mut out = Vec::with_capacity(rows.len());
            for (rid, hash, _, _) in rows {
                match self.content(rid)? {
                    Some(content) => out.push((hash, content)),
                    None => return Ok(None),
                }
            }
            Ok(Some(out))
        })?
    }

    /// Waits until the repository holds a receipt numbered above `after`,
    /// or `within` has passed; answers the newest receipt's number then
    /// (above `after` only when one came).
    pub fn wait_for_receipt_after(&self, after: i64, within: Duration) -> Result<i64, FossilError> {
        let deadline = Instant::now() + within;
        let changed = watch(self).ok();
        loop {
            let last = self.last_receipt()?;
            let left = deadline.saturating_duration_since(Instant::now());
            if last > after || left.is_zero() {
                return Ok(last);
            }
            match changed.as_ref().map(|c| c.recv_timeout(left.min(RECHECK))) {
                Some(Ok(())) => while changed.as_ref().is_some_and(|c| c.try_recv().is_ok()) {},
                Some(Err(mpsc::RecvTimeoutError::Timeout)) => {}
                Some(Err(mpsc::RecvTimeoutError::Disconnected)) | None => {
                    std::thread::sleep(left.min(POLL));
                }
            }
        }
    }
}

/// A channel that hears each change of the repository file.
fn watch(repo: &Repository) -> Result<mpsc::Receiver<()>, FossilError> {
    let (tx, rx) = mpsc::channel();
    on_change(repo.path(), tx, ())?;
    Ok(rx)
}

/// Sends `what` on `tx` at each change of the repository file `path`
/// (written, closed after writing, or its attributes changed), from a
/// thread that lives until `tx`'s receiver is gone or the process ends.
/// The one inotify watch OCX keeps: the node's daemon and the page's
/// long-poll.
pub fn on_change<T: Clone + Send + 'static>(
    path: &std::path::Path,
    tx: mpsc::Sender<T>,
    what: T,
) -> Result<(), FossilError> {
    let failed = FossilError::Watch;
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC).map_err(failed)?;
    inotify
        .add_watch(
            path,
            AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_CLOSE_WRITE | AddWatchFlags::IN_ATTRIB,
        )
        .map_err(failed)?;
    std::thread::spawn(move || {
        while inotify.read_events().is_ok() {
            if tx.send(what.clone()).is_err() {
                break;
            }
        }
    });
    Ok(())
}
