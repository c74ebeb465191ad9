//! What a long-lived process (the MCP server, the node) keeps between
//! calls: each repository opened once, and the `fossil` program found and
//! asked its version once. Each is learned again when its file is
//! replaced: a repository renamed over (another file: a connection would
//! go on reading the old one), a program upgraded (another file, size,
//! modification or change time). Nothing about a caller is kept.

use super::{Fossil, FossilError, Repository};
use std::ops::Deref;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The most connections kept idle at once (one per call under way); past
/// it, the one given back longest ago is closed.
const IDLE: usize = 8;

/// Repositories opened and the program learned, for the life of a process.
#[derive(Default)]
pub struct Kept {
    idle: Mutex<Vec<Idle>>,
    fossil: Mutex<Option<Learned>>,
}

/// A repository open and not lent.
struct Idle {
    path: PathBuf,
    file: FileId,
    repo: Repository,
}

/// The program as learned, and how it was asked for.
struct Learned {
    at: Option<PathBuf>,
    file: FileId,
    fossil: Fossil,
}

/// A file as it stands, its links followed: its device and inode, and for
/// a program also its size and its modification and change times (the
/// change time moves on any write or `touch`, and no caller can set it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileId {
    /// The file at `path` as it stands now; `None` when it is not there.
    pub(super) fn of(path: &Path) -> Option<FileId> {
        let m = std::fs::metadata(path).ok()?;
        Some(FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }

    /// The same file, whatever was written into it since.
    fn same_file(&self, other: &FileId) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
    }
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Kept {
    /// Nothing kept yet.
    pub fn new() -> Arc<Kept> {
        Arc::new(Kept::default())
    }

    /// The repository at `path` (as given, before any link is followed),
    /// lent until the [`Held`] is dropped: one kept open when its file is
    /// still the one it opened, else opened now.
    pub fn repository(self: &Arc<Self>, path: &Path) -> Result<Held, FossilError> {
        let file = FileId::of(path);
        let kept = {
            let mut idle = locked(&self.idle);
            idle.retain(|i| i.path != path || file.is_some_and(|f| f.same_file(&i.file)));
            idle.iter()
                .rposition(|i| i.path == path)
                .map(|at| idle.swap_remove(at))
        };
        let (repo, file) = match (kept, file) {
            (Some(i), _) => (i.repo, i.file),
            (None, Some(file)) => (Repository::open(path)?, file),
            (None, None) => return Err(FossilError::NoRepository(path.to_path_buf())),
        };
        Ok(Held {
            repo: Some(repo),
            back: Some((self.clone(), path.to_path_buf(), file)),
        })
    }

    /// Gives back the memory each idle connection holds beyond what it
    /// needs to go on (the pages SQLite cached of its repository), keeping
    /// the connection and its schema: for a process that waits long
    /// between calls.
    pub fn release_memory(&self) {
        for i in locked(&self.idle).iter() {
            let _ = i.repo.db.release_memory();
        }
    }

    /// The `fossil` program as [`Fossil::locate`] finds it, learned once.
    pub fn fossil(&self) -> Result<Fossil, FossilError> {
        self.learn(None)
    }

    /// The `fossil` program at `path`, learned once.
    pub fn fossil_at(&self, path: &Path) -> Result<Fossil, FossilError> {
        self.learn(Some(path))
    }

    /// The program learned before when it was asked for the same way and
    /// its file is unchanged; else learned now (a program not found is
    /// looked for again next time).
    fn learn(&self, at: Option<&Path>) -> Result<Fossil, FossilError> {
        let mut learned = locked(&self.fossil);
        if let Some(l) = learned.as_ref()
            && l.at.as_deref() == at
            && FileId::of(l.fossil.path()) == Some(l.file)
        {
            return Ok(l.fossil.clone());
        }
        *learned = None;
        let fossil = match at {
            Some(p) => Fossil::at(p)?,
            None => Fossil::locate()?,
        };
        if let Some(file) = FileId::of(fossil.path()) {
            *learned = Some(Learned {
                at: at.map(Path::to_path_buf),
                file,
                fossil: fossil.clone(),
            });
        }
        Ok(fossil)
    }
}

/// A repository lent for one call (or one wake), given back to its
/// [`Kept`] when dropped; or one opened for a single use.
pub struct Held {
    repo: Option<Repository>,
    back: Option<(Arc<Kept>, PathBuf, FileId)>,
}

impl From<Repository> for Held {
    /// A repository of its own, closed when dropped.
    fn from(repo: Repository) -> Held {
        Held {
            repo: Some(repo),
            back: None,
        }
    }
}

impl Deref for Held {
    type Target = Repository;
    fn deref(&self) -> &Repository {
        self.repo.as_ref().expect("a held repository until dropped")
    }
}

impl Drop for Held {
    /// Gives the connection back, unless a statement of it was left
    /// unfinished or a transaction open: either would hold a read open
    /// between calls, so the connection is closed instead. With [`IDLE`]
    /// kept already, the one given back longest ago is closed, so that
    /// repositories served before (or since deleted) never crowd out the
    /// one in use.
    fn drop(&mut self) {
        if let (Some(repo), Some((kept, path, file))) = (self.repo.take(), self.back.take())
            && !repo.db.is_busy()
            && repo.db.is_autocommit()
        {
            let oldest = {
                let mut idle = locked(&kept.idle);
                idle.push(Idle { path, file, repo });
                (idle.len() > IDLE).then(|| idle.remove(0))
            };
            drop(oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repository(dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        let db = rusqlite::Connection::open(&path).unwrap();
        db.execute_batch(&format!(
            "CREATE TABLE config(name TEXT PRIMARY KEY, value);
             INSERT INTO config VALUES('project-code', '{name}');"
        ))
        .unwrap();
        path
    }

    #[test]
    fn a_repository_is_opened_once_and_again_when_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = repository(dir.path(), "a");
        let kept = Kept::new();
        let first = kept.repository(&path).unwrap();
        let second = kept.repository(&path).unwrap();
        assert_eq!(
            locked(&kept.idle).len(),
            0,
            "two calls at once, two connections"
        );
        drop((first, second));
        assert_eq!(locked(&kept.idle).len(), 2);
        assert_eq!(kept.repository(&path).unwrap().project_code().unwrap(), "a");
        assert_eq!(locked(&kept.idle).len(), 2, "given back");
        std::fs::rename(repository(dir.path(), "b"), &path).unwrap();
        assert_eq!(
            kept.repository(&path).unwrap().project_code().unwrap(),
            "b",
            "the file renamed over it is read"
        );
        assert_eq!(
            locked(&kept.idle).len(),
            1,
            "the old file's connections closed"
        );
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            kept.repository(&path),
            Err(FossilError::NoRepository(_))
        ));
        assert_eq!(locked(&kept.idle).len(), 0);
    }

    #[test]
    fn the_repository_in_use_is_kept_however_many_were_served_before() {
        let dir = tempfile::tempdir().unwrap();
        let kept = Kept::new();
        for i in 0..IDLE + 3 {
            let other = repository(dir.path(), &format!("before-{i}"));
            drop(kept.repository(&other).unwrap());
        }
        assert_eq!(locked(&kept.idle).len(), IDLE, "no more than IDLE kept");
        let path = repository(dir.path(), "now");
        let first = kept.repository(&path).unwrap();
        first.db.execute_batch("PRAGMA cache_size = -1234").unwrap();
        drop(first);
        assert_eq!(locked(&kept.idle).len(), IDLE);
        let again = kept.repository(&path).unwrap();
        let marked: i64 = again
            .db
            .query_row("PRAGMA cache_size", [], |r| r.get(0))
            .unwrap();
        assert_eq!(marked, -1234, "the same connection, kept");
        assert_eq!(again.project_code().unwrap(), "now");
        drop(again);
        let before_0 = dir.path().join("before-0");
        assert!(
            locked(&kept.idle).iter().all(|i| i.path != before_0),
            "the one given back longest ago was closed"
        );
    }

    /// A stand-in `fossil` that answers `version` as `version` and counts
    /// how often it was run; written beside and renamed into place, as an
    /// upgrade is.
    fn program(dir: &Path, version: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("fossil");
        let next = dir.join("fossil.new");
        let count = dir.join("runs");
        std::fs::write(
            &next,
            format!(
                "#!/bin/sh\necho x >> '{}'\necho 'This is fossil version {version} [0123456789] 2026-01-01'\n",
                count.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::rename(&next, &path).unwrap();
        path
    }

    fn runs(dir: &Path) -> usize {
        std::fs::read_to_string(dir.join("runs"))
            .unwrap_or_default()
            .lines()
            .count()
    }

    #[test]
    fn the_program_is_asked_its_version_once_and_again_when_upgraded() {
        let dir = tempfile::tempdir().unwrap();
        let path = program(dir.path(), "2.27");
        let kept = Kept::new();
        assert_eq!(kept.fossil_at(&path).unwrap().version(), "2.27");
        assert_eq!(kept.fossil_at(&path).unwrap().version(), "2.27");
        assert_eq!(runs(dir.path()), 1, "asked once");
        program(dir.path(), "2.29");
        assert_eq!(kept.fossil_at(&path).unwrap().version(), "2.29");
        assert_eq!(runs(dir.path()), 2);
        program(dir.path(), "2.1");
        assert!(
            matches!(kept.fossil_at(&path), Err(FossilError::NoProgram)),
            "a program below the floor is refused, as at start"
        );
    }
}
