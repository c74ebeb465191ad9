//! The host uids a node's runs run as: a range of the node's own, claimed
//! host-wide so that no two nodes of a host share a uid, and one uid of it
//! leased to each run for as long as the run's watcher lives.
//!
//! Claims are files named `FIRST-LAST` in [`CLAIMS_DIR`], each holding the
//! claiming node's root and locked (shared) by that node's process and by
//! each of its watchers; a claim nobody holds a lock on is stale and is
//! removed. Everything is done under the directory's own lock file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use super::account::RunAccount;

/// The host-wide directory of claimed ranges.
pub const CLAIMS_DIR: &str = "/run/ocx/uids";
/// The first uid of the blocks a node picks when its configuration names no range.
pub const AUTO_FIRST: u32 = 1_600_000_000;
/// How many uids a picked block holds.
pub const AUTO_COUNT: u32 = 1000;
const AUTO_BLOCKS: u32 = 100_000;
/// The uid bubblewrap is tried as by `preflight`: below every picked block, and no run's.
pub const PROBE_UID: u32 = AUTO_FIRST - 1;
const NOBODY: u32 = 65534;

/// A range of host uids, `first` to `first + count - 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UidRange {
    /// The range's first uid.
    pub first: u32,
    /// How many uids it holds.
    pub count: u32,
}

impl UidRange {
    /// The range's last uid.
    pub fn last(&self) -> u32 {
        self.first.saturating_add(self.count.saturating_sub(1))
    }

    fn overlaps(&self, other: &UidRange) -> bool {
        self.first <= other.last() && other.first <= self.last()
    }

    /// Refuses a range that is empty, or holds root, `nobody`, the uid
    /// meaning "none" or the probe's uid.
    pub fn check(&self) -> Result<(), UidError> {
        let bad = |reason: &str| {
            Err(UidError::Invalid {
                range: *self,
                reason: reason.into(),
            })
        };
        if self.count == 0 {
            return bad("holds no uid");
        }
        if self.first.checked_add(self.count - 1).is_none() || self.last() == u32::MAX {
            return bad("runs past the last uid");
        }
        for (uid, what) in [
            (0, "root"),
            (NOBODY, "nobody"),
            (PROBE_UID, "the probe's uid"),
        ] {
            if self.first <= uid && uid <= self.last() {
                return bad(&format!("holds {what} ({uid})"));
            }
        }
        Ok(())
    }

    fn name(&self) -> String {
        format!("{}-{}", self.first, self.last())
    }

    fn parse(name: &str) -> Option<UidRange> {
        let (a, b) = name.split_once('-')?;
        let (first, last): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
        (last >= first).then(|| UidRange {
            first,
            count: last - first + 1,
        })
    }
}

impl std::fmt::Display for UidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last())
    }
}

/// Why a range could not be claimed or a uid leased.
#[derive(Debug, thiserror::Error)]
pub enum UidError {
    /// The configured range cannot be used.
    #[error("run_uids {range}: {reason}")]
    Invalid {
        /// The range.
        range: UidRange,
        /// What is wrong with it.
        reason: String,
    },
    /// Another node of this host holds a range overlapping it.
    #[error("run_uids {range} overlaps {other}, claimed by the node at {}", root.display())]
    Overlap {
        /// The range asked for.
        range: UidRange,
        /// The range claimed.
        other: UidRange,
        /// The other node's root.
        root: PathBuf,
    },
    /// No free block is left to pick.
    #[error("run_uids: no free block of {AUTO_COUNT} uids is left from {AUTO_FIRST}")]
    Exhausted,
    /// The node holds no claim its watcher can join.
    #[error("run_uids: the node at {} holds no claim (is it started?)", .0.display())]
    NoClaim(PathBuf),
    /// Every uid of the range is leased to a run.
    #[error("run_uids {0}: every uid is leased to a run")]
    Full(UidRange),
    /// A claim or lease file could not be used.
    #[error("run_uids: {}: {source}", path.display())]
    Io {
        /// The file at fault.
        path: PathBuf,
        /// The underlying failure.
        #[source]
        source: io::Error,
    },
}

impl UidError {
    /// A range configured that cannot be used, or one another node holds,
    /// is the operator's to mend; no uid left, no claim, or a file that
    /// failed is a failure beneath them.
    pub fn kind(&self) -> crate::stop::StopKind {
        use crate::stop::StopKind;
        match self {
            UidError::Invalid { .. } | UidError::Overlap { .. } => StopKind::Refused,
            UidError::Exhausted
            | UidError::NoClaim(_)
            | UidError::Full(_)
            | UidError::Io { .. } => StopKind::Failed,
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> UidError + '_ {
    move |source| UidError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A range claimed for a node, held while this value lives.
#[derive(Debug)]
pub struct Claim {
    /// The range claimed.
    pub range: UidRange,
    _lock: Flock<File>,
}

/// A uid leased to one run, with the node's claim kept alive while it lives.
#[derive(Debug)]
pub struct Lease {
    /// The account the run runs as.
    pub account: RunAccount,
    _uid: Flock<File>,
    _claim: Claim,
}

fn private_dir(dir: &Path) -> Result<(), UidError> {
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) => return Err(io_err(dir)(e)),
    }
    let m = fs::symlink_metadata(dir).map_err(io_err(dir))?;
    let me = nix::unistd::geteuid().as_raw();
    if !m.is_dir() || m.uid() != me {
        return Err(io_err(dir)(io::Error::other(
            "is not a directory of this account's own",
        )));
    }
    if m.mode() & 0o022 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_err(dir))?;
    }
    Ok(())
}

fn lock_file(path: &Path, arg: FlockArg) -> Result<Option<Flock<File>>, UidError> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(io_err(path))?;
    match Flock::lock(f, arg) {
        Ok(l) => Ok(Some(l)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(io_err(path)(io::Error::from(e))),
    }
}

fn canonical(root: &Path) -> PathBuf {
    fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf())
}

/// The live claims of the host, stale ones removed; called under the directory's lock.
fn live_claims(dir: &Path) -> Result<Vec<(UidRange, PathBuf)>, UidError> {
    let mut live = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let Some(range) = entry.file_name().to_str().and_then(UidRange::parse) else {
            continue;
        };
        let path = entry.path();
        if lock_file(&path, FlockArg::LockExclusiveNonblock)?.is_some() {
            let _ = fs::remove_file(&path);
            continue;
        }
        let mut owner = String::new();
        File::open(&path)
            .and_then(|mut f| f.read_to_string(&mut owner))
            .map_err(io_err(&path))?;
        live.push((range, PathBuf::from(owner.trim_end_matches('\n'))));
    }
    Ok(live)
}

/// The range the node at `root` claimed when it last started.
pub fn claimed(root: &Path) -> Option<UidRange> {
    remembered(root)
}

fn remembered(root: &Path) -> Option<UidRange> {
    serde_json::from_slice(&fs::read(root.join("uids.json")).ok()?).ok()
}

/// Claims for the node at `root` its configured range, or when none is
/// configured the range it had before (if still free) or the first free
/// block of [`AUTO_COUNT`] uids from [`AUTO_FIRST`]. Refused when another
/// node of the host holds an overlapping range. The range is written to
/// `ROOT/uids.json` for the node's watchers.
pub fn claim(root: &Path, configured: Option<UidRange>) -> Result<Claim, UidError> {
    claim_in(Path::new(CLAIMS_DIR), root, configured)
}

fn claim_in(dir: &Path, root: &Path, configured: Option<UidRange>) -> Result<Claim, UidError> {
    if let Some(r) = configured {
        r.check()?;
    }
    private_dir(dir)?;
    let _host = lock_file(&dir.join("lock"), FlockArg::LockExclusive)?;
    let me = canonical(root);
    let live = live_claims(dir)?;
    let others: Vec<&(UidRange, PathBuf)> = live.iter().filter(|(_, r)| *r != me).collect();
    let free = |r: &UidRange| !others.iter().any(|(o, _)| o.overlaps(r));
    let range = match configured {
        Some(r) => {
            if let Some((other, root)) = others.iter().find(|(o, _)| o.overlaps(&r)) {
                return Err(UidError::Overlap {
                    range: r,
                    other: *other,
                    root: root.clone(),
                });
            }
            r
        }
        None => {
            let mine = live.iter().find(|(_, r)| *r == me).map(|(r, _)| *r);
            match mine.or_else(|| remembered(root)).filter(|r| free(r)) {
                Some(r) => r,
                None => (0..AUTO_BLOCKS)
                    .map(|k| UidRange {
                        first: AUTO_FIRST + k * AUTO_COUNT,
                        count: AUTO_COUNT,
                    })
                    .find(|r| free(r))
                    .ok_or(UidError::Exhausted)?,
            }
        }
    };
    let path = dir.join(range.name());
    let lock = lock_file(&path, FlockArg::LockShared)?
        .ok_or_else(|| io_err(&path)(io::Error::other("is locked by another process")))?;
    if !live.iter().any(|(r, owner)| *r == range && *owner == me) {
        let mut f = OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .map_err(io_err(&path))?;
        f.write_all(format!("{}\n", me.display()).as_bytes())
            .map_err(io_err(&path))?;
    }
    let record = root.join("uids.json");
    fs::write(&record, serde_json::to_vec(&range).unwrap_or_default()).map_err(io_err(&record))?;
    Ok(Claim { range, _lock: lock })
}

/// Joins the claim of the node at `root` and leases the first uid of its
/// range no other run of it holds, each kept until the lease is dropped.
pub fn lease(root: &Path) -> Result<Lease, UidError> {
    lease_in(Path::new(CLAIMS_DIR), root)
}

fn lease_in(dir: &Path, root: &Path) -> Result<Lease, UidError> {
    let range = remembered(root).ok_or_else(|| UidError::NoClaim(root.to_path_buf()))?;
    let claim = {
        private_dir(dir)?;
        let _host = lock_file(&dir.join("lock"), FlockArg::LockExclusive)?;
        let me = canonical(root);
        if !live_claims(dir)?
            .iter()
            .any(|(r, owner)| *r == range && *owner == me)
        {
            return Err(UidError::NoClaim(root.to_path_buf()));
        }
        let path = dir.join(range.name());
        let lock = lock_file(&path, FlockArg::LockShared)?
            .ok_or_else(|| UidError::NoClaim(root.to_path_buf()))?;
        Claim { range, _lock: lock }
    };
    let leases = root.join("uids");
    private_dir(&leases)?;
    for uid in range.first..=range.last() {
        if let Some(lock) = lock_file(
            &leases.join(uid.to_string()),
            FlockArg::LockExclusiveNonblock,
        )? {
            return Ok(Lease {
                account: RunAccount::of_uid(uid),
                _uid: lock,
                _claim: claim,
            });
        }
    }
    Err(UidError::Full(range))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_overlap_and_are_checked() {
        let a = UidRange {
            first: 100_000,
            count: 10,
        };
        assert!(a.overlaps(&UidRange {
            first: 100_009,
            count: 1
        }));
        assert!(!a.overlaps(&UidRange {
            first: 100_010,
            count: 5
        }));
        assert!(a.check().is_ok());
        assert!(UidRange { first: 0, count: 5 }.check().is_err());
        assert!(
            UidRange {
                first: 65530,
                count: 10
            }
            .check()
            .is_err()
        );
        assert!(UidRange { first: 5, count: 0 }.check().is_err());
        assert!(
            UidRange {
                first: u32::MAX - 1,
                count: 2
            }
            .check()
            .is_err()
        );
        assert_eq!(UidRange::parse(&a.name()), Some(a));
    }

    #[test]
    fn a_second_node_is_refused_an_overlapping_range_and_picks_another_block() {
        let dir = tempfile::tempdir().unwrap();
        let claims = dir.path().join("claims");
        let (one, two) = (dir.path().join("one"), dir.path().join("two"));
        fs::create_dir_all(&one).unwrap();
        fs::create_dir_all(&two).unwrap();
        let r = UidRange {
            first: 200_000,
            count: 100,
        };
        let held = claim_in(&claims, &one, Some(r)).unwrap();
        let again = claim_in(&claims, &one, Some(r)).unwrap();
        assert_eq!(again.range, r, "a node may claim its own range again");
        let overlapping = UidRange {
            first: 200_050,
            count: 100,
        };
        assert!(matches!(
            claim_in(&claims, &two, Some(overlapping)),
            Err(UidError::Overlap { .. })
        ));
        let a = claim_in(&claims, &two, None).unwrap();
        assert_eq!(a.range.first, AUTO_FIRST);
        let lease1 = lease_in(&claims, &two).unwrap();
        let lease2 = lease_in(&claims, &two).unwrap();
        assert_eq!(lease1.account.uid, AUTO_FIRST);
        assert_eq!(lease2.account.uid, AUTO_FIRST + 1);
        drop(lease1);
        assert_eq!(lease_in(&claims, &two).unwrap().account.uid, AUTO_FIRST);
        drop((held, again));
        let now = claim_in(&claims, &two, Some(overlapping)).unwrap();
        assert_eq!(now.range, overlapping, "a range nobody holds is free");
    }
}
