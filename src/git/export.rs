//! The export kept current, one run at a time. A run first leaves the mark
//! `ocx-export-again` in the export's `.git`, then tries the lock
//! `ocx-export-lock` there. The holder exports while a mark is left, taking
//! it away before each export; a run that finds the lock held leaves its
//! mark and goes, and the holder exports again before it lets go. After
//! letting go, a holder that finds a mark left meanwhile takes the lock
//! again, so no mark is ever left without an exporter. The holder keeps what
//! it did as `ocx-export-last.json` there.

use super::{Git, GitError};
use crate::fossil::{Fossil, Repository, export as fossil_export};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The mark a run leaves, asking for one more export.
pub const MARK: &str = "ocx-export-again";
/// The lock the one exporter holds.
pub const LOCK: &str = "ocx-export-lock";
/// The last holder's runs, kept whole.
pub const LAST: &str = "ocx-export-last.json";

/// What the last holder of the lock did.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub struct LastRun {
    /// When it let go (UTC).
    pub when: String,
    /// How long it held the lock, in milliseconds.
    pub took_ms: u64,
    /// How many exports it ran.
    pub runs: u64,
    /// How many check-ins each export added to git, in order: what Fossil's
    /// export sent, and what the check after it sent of what Fossil had
    /// passed over.
    pub added: Vec<u64>,
    /// Why the last export failed (Fossil's or git's words, or the
    /// check-ins the check could not send); absent when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// A repository's git export: the directory its `last-git-export-repo`
/// config row names, holding a git repository.
#[derive(Debug, Clone)]
pub struct Export {
    /// The export's directory (its work tree; git's files are in `.git`).
    pub dir: PathBuf,
}

/// Whether a run waits for the lock or leaves its mark for the holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Leave the mark; when another holds the lock, go (the node, the hook).
    No,
    /// Wait for the lock and export at least once (the `export` tool).
    ForOwnRun,
}

impl Export {
    /// The export `repo` names; `None` when it names none, refused when the
    /// directory it names holds no git repository.
    pub fn of(repo: &Repository) -> Result<Option<Export>, GitError> {
        let Some(dir) = repo.git_export_dir()? else {
            return Ok(None);
        };
        if !fossil_export::is_git_mirror(&dir) {
            return Err(GitError::NotAMirror(dir));
        }
        Ok(Some(Export { dir }))
    }

    /// Git's directory in the export.
    pub fn git_dir(&self) -> PathBuf {
        self.dir.join(".git")
    }

    /// What the last holder of the lock did, when it kept it.
    pub fn last_run(&self) -> Option<LastRun> {
        let bytes = std::fs::read(self.git_dir().join(LAST)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The export's state and how many check-ins of `repo` it lacks: what
    /// awaits export, exactly.
    pub fn awaiting(
        &self,
        repo: &Repository,
    ) -> Result<(fossil_export::MirrorState, u64), GitError> {
        let beside = repo.beside_mirror(&self.dir)?;
        Ok((beside.state()?, beside.unexported()?.len() as u64))
    }

    /// Exports what awaits, one run at a time (this module's head says
    /// how). With [`Wait::No`] it answers `None` when another holds the
    /// lock (its mark is left for that holder); otherwise the runs of its
    /// own first holding. A failed export is kept as the failure and
    /// answered in the run, not as an error; an error is a mark or a lock
    /// that could not be made.
    pub fn keep_current(
        &self,
        fossil: &Fossil,
        repository: &Path,
        wait: Wait,
    ) -> Result<Option<LastRun>, GitError> {
        let git = self.git_dir();
        self.leave_mark()?;
        let mut first: Option<LastRun> = None;
        let mut block = wait == Wait::ForOwnRun;
        loop {
            let Some(lock) = take_lock(&git, block)? else {
                return Ok(first);
            };
            let started = Instant::now();
            let mut run = LastRun {
                when: String::new(),
                took_ms: 0,
                runs: 0,
                added: Vec::new(),
                failure: None,
            };
            let force = block && first.is_none();
            while self.take_mark() || (force && run.runs == 0) {
                run.runs += 1;
                let mut added = 0;
                run.failure = self
                    .export(fossil, repository, &mut added)
                    .err()
                    .map(|e| match e {
                        GitError::Fossil(crate::fossil::FossilError::Command {
                            message, ..
                        }) => message,
                        other => other.to_string(),
                    });
                run.added.push(added);
            }
            run.took_ms = started.elapsed().as_millis() as u64;
            run.when = crate::fossil::artifact::now();
            if run.runs > 0 {
                self.keep(&run);
            }
            drop(lock);
            if first.is_none() {
                first = Some(run);
            }
            if !git.join(MARK).exists() {
                return Ok(first);
            }
            block = false;
        }
    }

    /// One export: Fossil's, then what it passed over sent and each branch
    /// set at its leaf (this module's head says why); `added` counts what
    /// reached git, even when a later step fails.
    fn export(&self, fossil: &Fossil, repository: &Path, added: &mut u64) -> Result<(), GitError> {
        *added += fossil.git_export(repository)?;
        let repo = Repository::open(repository)?;
        let beside = repo.beside_mirror(&self.dir)?;
        let missing = beside.unexported()?;
        if let (Some(oldest), Some(newest)) = (missing.first(), missing.last()) {
            // Lowered to just before the oldest passed over, Fossil's export
            // sends exactly what it lacks: what is already sent it skips
            // by its marks. Its watermark is then put back, so the next
            // export starts where the newest left off.
            let watermark = beside.state()?.start;
            fossil_export::set_watermark(&self.dir, oldest.mtime - 1e-6)?;
            let sent = fossil.git_export(repository);
            let back = watermark.map_or(newest.mtime, |w| w.max(newest.mtime));
            fossil_export::set_watermark(&self.dir, back)?;
            *added += sent?;
            let left = beside.unexported()?;
            if !left.is_empty() {
                return Err(GitError::Export(format!(
                    "{} check-in{} could not be exported ({}): Fossil's export passed {} over; `fossil git export --verbose` says why",
                    left.len(),
                    if left.len() == 1 { "" } else { "s" },
                    left.iter()
                        .take(3)
                        .map(|u| &u.hash[..16])
                        .collect::<Vec<_>>()
                        .join(", "),
                    if left.len() == 1 { "it" } else { "them" },
                )));
            }
        }
        if *added > 0 {
            self.set_heads(&beside)?;
        }
        Ok(())
    }

    /// Moves each branch of the export whose commit is of a Fossil branch
    /// with another head to that head.
    fn set_heads(&self, beside: &fossil_export::BesideMirror) -> Result<(), GitError> {
        let git = Git::locate(None)?;
        for (name, commit) in git.refs(&self.git_dir(), "refs/heads/")? {
            let Some(branch) = beside.branch_of(&commit)? else {
                continue;
            };
            match beside.head(&branch)? {
                Some(head) if head != commit => {
                    git.update_ref(&self.git_dir(), &format!("refs/heads/{name}"), &head)?
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Leaves the mark asking for one more export.
    fn leave_mark(&self) -> Result<(), GitError> {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(self.git_dir().join(MARK))
            .map(|_| ())
            .map_err(|error| GitError::Io {
                what: "leave the export's mark",
                dir: self.git_dir(),
                error,
            })
    }

    /// Takes the mark away; whether one was there.
    fn take_mark(&self) -> bool {
        std::fs::remove_file(self.git_dir().join(MARK)).is_ok()
    }

    /// Keeps `run` as the last, written whole and readable by the server
    /// that serves the export; a failure to write it loses only the record
    /// of the run.
    fn keep(&self, run: &LastRun) {
        let git = self.git_dir();
        let _ = crate::file::write_whole(
            &git.join(LAST),
            &git.join(format!("{LAST}.new")),
            &serde_json::to_vec_pretty(run).unwrap_or_default(),
            0o644,
        );
    }
}

impl Git {
    /// Points the branch `refname` of the git repository `git_dir` at `commit`.
    fn update_ref(&self, git_dir: &Path, refname: &str, commit: &str) -> Result<(), GitError> {
        self.ran(
            "update-ref",
            self.command(Some(git_dir))
                .arg("update-ref")
                .arg(refname)
                .arg(commit),
        )
        .map(drop)
    }
}

/// The export's lock in `git`, waited for when `block`; `None` when
/// another holds it and `block` is false.
fn take_lock(
    git: &Path,
    block: bool,
) -> Result<Option<nix::fcntl::Flock<std::fs::File>>, GitError> {
    let io = |error| GitError::Io {
        what: "take the export's lock",
        dir: git.to_path_buf(),
        error,
    };
    crate::lock::take(&git.join(LOCK), block).map_err(io)
}
