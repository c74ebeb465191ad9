//! Storing what OCX composes: artifacts checked to parse, written into one
//! bundle, and stored by one `fossil bundle import` as the sender, so
//! Fossil records the sender in `rcvfrom`. All of a batch is stored, or none.

use super::artifact::{self, HashPolicy};
use super::{Fossil, FossilError, Repository};

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
/// ("database is locked"), storing nothing: the import is tried again,
/// a few times, waiting longer each time.
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
            return Err(FossilError::Bundle(format!(
                "the composed {what} {hash} does not parse"
            )));
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
    let dir = tempfile::Builder::new()
        .prefix("ocx-bundle-")
        .tempdir()
        .map_err(|e| FossilError::Bundle(e.to_string()))?;
    let path = dir.path().join("write.bundle");
    let project = repo.project_code()?;
    super::bundle::write(&path, &project, items)?;
    let mut tries = 0;
    loop {
        match fossil.import_bundle(repo.path(), &path, sender, publish) {
            Err(FossilError::Command { message, .. })
                if message.contains("database is locked") && tries < 8 =>
            {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(50 << tries.min(5)));
            }
            other => break other?,
        }
    }
    for (hash, _) in items {
        if repo.receipt(hash)?.is_none() {
            return Err(FossilError::Command {
                operation: "bundle import",
                message: format!("the artifact {hash} was not stored"),
            });
        }
    }
    Ok(())
}
