//! Storing what OCX composes: artifacts checked to parse, written into one
//! bundle (in memory when the batch is small), and stored by one `fossil
//! bundle import` as the sender, so Fossil records the sender in
//! `rcvfrom`. All of a batch is stored, or none.

use super::artifact::{self, HashPolicy};
use super::{Fossil, FossilError, Repository};

/// Artifacts, each its full hash and its bytes.
pub type Artifacts = Vec<(String, Vec<u8>)>;

/// Artifacts to store together.
#[derive(Debug, Default, Clone)]
pub struct Batch {
    /// Each artifact: what it is (for the log), its full hash, its bytes.
    pub artifacts: Vec<(String, String, Vec<u8>)>,
}

impl Batch {
    /// Adds an artifact, named by `policy`; answers its hash.
    pub fn add(&mut self, what: &str, bytes: Vec<u8>, policy: HashPolicy) -> String {
        let hash = policy.name(&bytes);
        self.artifacts.push((what.to_string(), hash.clone(), bytes));
        hash
    }

    /// The hashes, in order.
    pub fn hashes(&self) -> Vec<String> {
        self.artifacts.iter().map(|a| a.1.clone()).collect()
    }
}

/// Stores `batch` in `repo` as `sender`; `publish` false keeps it private.
/// Another writer holding the repository makes Fossil fail at once
/// ("database is locked"), storing nothing: the import is tried again for
/// up to [`BUSY_FOR`], waiting longer each time ([`busy_pause`]).
/// Each artifact is parsed first, since Fossil keeps a malformed one
/// silently, and looked up after, since Fossil may report success before
/// its commit fails.
pub fn store(
    fossil: &Fossil,
    repo: &Repository,
    sender: &str,
    batch: &Batch,
    publish: bool,
) -> Result<(), FossilError> {
    for (what, hash, bytes) in &batch.artifacts {
        if artifact::parse(bytes).is_none() {
            return Err(FossilError::Unparsed {
                what: what.to_string(),
                hash: hash.to_string(),
            });
        }
    }
    let items: Vec<(String, Vec<u8>)> = batch
        .artifacts
        .iter()
        .map(|(_, h, b)| (h.clone(), b.clone()))
        .collect();
    store_checked(fossil, repo, sender, &items, publish)
}

/// Stores `items` (each its full hash and bytes, already checked by the
/// caller) in `repo` as `sender`, in one bundle OCX writes itself; each is
/// looked up after.
pub fn store_checked(
    fossil: &Fossil,
    repo: &Repository,
    sender: &str,
    items: &[(String, Vec<u8>)],
    publish: bool,
) -> Result<(), FossilError> {
    let size: usize = items.iter().map(|(_, b)| b.len()).sum();
    let dir = bundle_dir(size).map_err(FossilError::BundleDir)?;
    let path = dir.path().join("write.bundle");
    let project = repo.project_code()?;
    super::bundle::write(&path, &project, items)?;
    let until = std::time::Instant::now() + BUSY_FOR;
    let mut tries = 0u32;
    loop {
        match fossil.import_bundle(repo.path(), &path, sender, publish) {
            Err(e) if e.is_busy() && std::time::Instant::now() < until => {
                tries = tries.saturating_add(1);
                std::thread::sleep(busy_pause(tries));
            }
            other => break other?,
        }
    }
    for (hash, _) in items {
        if !repo.holds(hash)? {
            return Err(FossilError::Command {
                operation: "bundle import",
                message: format!("the artifact {hash} was not stored"),
            });
        }
    }
    Ok(())
}

/// How long a store goes on trying while another writer holds the
/// repository: a node serving hundreds of runs has their clones and
/// syncs each take Fossil's write lock in turn, and an import that tries
/// only while a few of them pass is refused though the repository is
/// well. Past it the refusal says another writer holds it.
const BUSY_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// The pause before try `tries` + 1 of an import another writer refused:
/// 100 ms doubled each time up to a second, and a random part as long
/// again at most, so writers refused together do not try together again.
fn busy_pause(tries: u32) -> std::time::Duration {
    use rand::Rng;
    let base = (50u64 << tries.min(5)).min(1000);
    std::time::Duration::from_millis(base + rand::rng().random_range(0..=base))
}

/// Where a batch's bundle is written, removed when dropped: a directory of
/// its own in memory (`/dev/shm`, when it is a tmpfs one may write) for a
/// batch of at most [`IN_MEMORY_MAX`] bytes, else in the temporary
/// directory. A file on a disk's filesystem costs its journal's metadata
/// writes, a few ms when the disk is busy, for a file read once.
fn bundle_dir(size: usize) -> std::io::Result<tempfile::TempDir> {
    let mut dir = tempfile::Builder::new();
    dir.prefix("ocx-bundle-");
    let shm = std::path::Path::new("/dev/shm");
    let in_memory = size <= IN_MEMORY_MAX
        && nix::sys::statfs::statfs(shm)
            .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
    match in_memory.then(|| dir.tempdir_in(shm)) {
        Some(Ok(d)) => Ok(d),
        _ => dir.tempdir(),
    }
}

/// The largest batch whose bundle is written in memory, in bytes.
const IN_MEMORY_MAX: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_import_waits_longer_each_time_up_to_a_second_and_a_random_part() {
        for (tries, base) in [(1, 100), (2, 200), (4, 800), (5, 1000), (40, 1000)] {
            for _ in 0..20 {
                let pause = busy_pause(tries).as_millis() as u64;
                assert!((base..=2 * base).contains(&pause), "{tries}: {pause}");
            }
        }
    }

    #[test]
    fn a_small_batchs_bundle_is_written_in_memory_and_a_large_ones_in_the_temporary_directory() {
        let tmpfs = nix::sys::statfs::statfs("/dev/shm")
            .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
        let small = bundle_dir(100).unwrap();
        assert_eq!(small.path().starts_with("/dev/shm"), tmpfs, "{small:?}");
        let large = bundle_dir(IN_MEMORY_MAX + 1).unwrap();
        assert!(large.path().starts_with(std::env::temp_dir()), "{large:?}");
    }
}
