//! A Fossil checkout, found as Fossil finds it: the checkout file
//! (`.fslckout`, or the older `_FOSSIL_`) in the working directory or one
//! above it, read directly for its repository and default user.

use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::path::{Path, PathBuf};

/// What a checkout says of itself.
#[derive(Debug, Clone)]
pub struct Checkout {
    /// The checkout's top directory.
    pub root: PathBuf,
    /// Its repository file, made absolute.
    pub repository: PathBuf,
    /// The user `fossil user default` set inside it, if any.
    pub default_user: Option<String>,
}

/// The names Fossil gives a checkout's own file, in the checkout's top.
pub const FILES: &[&str] = &[".fslckout", "_FOSSIL_"];

/// The checkout holding `dir`, or `None` when `dir` is in none.
pub fn find(dir: &Path) -> Option<Checkout> {
    for root in dir.ancestors() {
        for name in FILES {
            let file = root.join(name);
            if file.is_file()
                && let Some(c) = read(root, &file)
            {
                return Some(c);
            }
        }
    }
    None
}

fn read(root: &Path, file: &Path) -> Option<Checkout> {
    let db = Connection::open_with_flags(
        file,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .ok()?;
    db.busy_timeout(std::time::Duration::from_secs(15)).ok()?;
    let var = |name: &str| -> Option<String> {
        db.query_row("SELECT value FROM vvar WHERE name=?1", [name], |r| {
            r.get::<_, String>(0)
        })
        .optional()
        .ok()
        .flatten()
    };
    let repo = PathBuf::from(var("repository")?);
    let repository = if repo.is_absolute() {
        repo
    } else {
        root.join(repo)
    };
    Some(Checkout {
        root: root.to_path_buf(),
        repository,
        default_user: var("default-user").filter(|u| !u.is_empty()),
    })
}
