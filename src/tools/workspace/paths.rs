//! Paths confined to the checkout: each given path relative, without
//! `..`, outside Fossil's and OCX's own files, and each file opened once,
//! beneath the checkout's top (`openat2` with `RESOLVE_BENEATH`), never
//! through a symbolic link.

use super::STATE_DIR;
use crate::stop::Stop;
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

/// A path given in `field`, confined to the checkout at `root`: relative,
/// without `..`, outside Fossil's and OCX's own files, and leading nowhere
/// outside the checkout through a symbolic link. The file itself need not
/// exist; the directory holding it must be inside.
pub fn confine(root: &Path, field: &str, given: &str) -> Result<PathBuf, Stop> {
    let rel = relative(field, given)?;
    let refuse = |why: &str| {
        Stop::field(field, format!("{given:?} {why}")).next(
            "give a path inside the checkout, relative to its top, as find or context shows it",
        )
    };
    let full = root.join(&rel);
    let mut existing = full.as_path();
    while std::fs::symlink_metadata(existing).is_err() {
        existing = match existing.parent() {
            Some(p) => p,
            None => return Err(refuse("cannot be resolved")),
        };
    }
    let real = existing
        .canonicalize()
        .map_err(|_| refuse("leads through a link that goes nowhere"))?;
    if !real.starts_with(root) {
        return Err(refuse("leads outside the checkout"));
    }
    match full.strip_prefix(existing) {
        Ok(rest) if !rest.as_os_str().is_empty() => Ok(real.join(rest)),
        _ => Ok(real),
    }
}

/// A path given in `field` as the checkout sees it: relative, without
/// `..`, naming neither the checkout itself nor Fossil's or OCX's own
/// files. Judged by its text alone; [`open_file`] and [`create_file`] then
/// reach it without following any link.
pub fn relative(field: &str, given: &str) -> Result<PathBuf, Stop> {
    let refuse = |why: &str| {
        Stop::field(field, format!("{given:?} {why}")).next(
            "give a path inside the checkout, relative to its top, as find or context shows it",
        )
    };
    if given.trim().is_empty() {
        return Err(refuse("is empty"));
    }
    let p = Path::new(given);
    let mut rel = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(part) => rel.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err(refuse("climbs out with ..")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(refuse("is absolute"));
            }
        }
    }
    let first = rel
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    if rel.as_os_str().is_empty() {
        return Err(refuse("names the checkout itself, not a file"));
    }
    if crate::fossil::checkout::FILES.contains(&first.as_str()) || first == STATE_DIR {
        return Err(refuse("is Fossil's or OCX's own file"));
    }
    Ok(rel)
}

/// How a file under the checkout is reached: beneath its top, never
/// through a symbolic link at any component (`openat2`).
pub(super) fn beneath(flags: OFlag, mode: Mode) -> OpenHow {
    OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
        .mode(mode)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS)
}

pub(super) fn open_top(root: &Path) -> std::io::Result<OwnedFd> {
    Ok(nix::fcntl::open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?)
}

/// Why a file under the checkout cannot be reached, for a refusal.
pub(super) fn unreachable(e: std::io::Error) -> String {
    match e.raw_os_error() {
        Some(c) if c == Errno::ELOOP as i32 => "leads through a symbolic link".into(),
        Some(c) if c == Errno::EXDEV as i32 => "leads outside the checkout".into(),
        _ => e.to_string(),
    }
}

/// Opens `rel` (from [`relative`]) under the checkout at `root`, once,
/// without following a link: for reading, or with `write` for reading and
/// writing. `None` when there is no such file; refused naming `field` when
/// a link is on the way or it is not a regular file.
pub fn open_file(
    root: &Path,
    rel: &Path,
    field: &str,
    write: bool,
) -> Result<Option<std::fs::File>, Stop> {
    let given = rel.display();
    let refuse = |why: String| {
        Stop::field(field, format!("{given} {why}"))
            .next("give a file the checkout holds; context and find show paths")
    };
    let top = open_top(root).map_err(|e| refuse(e.to_string()))?;
    let flags = if write {
        OFlag::O_RDWR
    } else {
        OFlag::O_RDONLY
    };
    let fd = match nix::fcntl::openat2(&top, rel, beneath(flags, Mode::empty())) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(None),
        Err(Errno::EISDIR) => return Err(refuse("is a directory".into())),
        Err(e) => return Err(refuse(unreachable(e.into()))),
    };
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|e| refuse(e.to_string()))?;
    if meta.is_dir() {
        return Err(refuse("is a directory".into()));
    }
    if !meta.is_file() {
        return Err(refuse("is not a regular file".into()));
    }
    Ok(Some(file))
}

/// Opens the directory `rel` under the checkout at `root`, making it and
/// those above it when missing, never through a link.
pub(super) fn open_dir(root: &Path, rel: &Path) -> std::io::Result<OwnedFd> {
    let mut dir = open_top(root)?;
    for part in rel.components() {
        let how = beneath(OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty());
        let next = match nix::fcntl::openat2(&dir, part.as_os_str(), how) {
            Err(Errno::ENOENT) => {
                match nix::sys::stat::mkdirat(
                    &dir,
                    part.as_os_str(),
                    Mode::from_bits_truncate(0o755),
                ) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                nix::fcntl::openat2(&dir, part.as_os_str(), how)?
            }
            other => other?,
        };
        dir = next;
    }
    Ok(dir)
}

/// Makes the new file `rel` under the checkout at `root` (and the
/// directories above it), never through a link and never over a file.
pub fn create_file(root: &Path, rel: &Path, field: &str) -> Result<std::fs::File, Stop> {
    let refuse = |why: String| {
        Stop::field(field, format!("{} {why}", rel.display()))
            .next("give a path inside the checkout, as find or context shows it")
    };
    let name = rel
        .file_name()
        .ok_or_else(|| refuse("names no file".into()))?;
    let parent = rel.parent().unwrap_or(Path::new(""));
    let dir = open_dir(root, parent).map_err(|e| refuse(unreachable(e)))?;
    let how = beneath(
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
        Mode::from_bits_truncate(0o644),
    );
    let fd = nix::fcntl::openat2(&dir, name, how).map_err(|e| refuse(unreachable(e.into())))?;
    Ok(std::fs::File::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("src")).unwrap();
        assert!(confine(&root, "path", "src/new.rs").is_ok());
        assert!(confine(&root, "path", "../x").is_err());
        assert!(confine(&root, "path", "/etc/passwd").is_err());
        assert!(confine(&root, "path", ".fslckout").is_err());
        std::os::unix::fs::symlink("/etc", root.join("out")).unwrap();
        assert!(confine(&root, "path", "out/passwd").is_err());
        assert!(confine(&root, "path", "out/nothing/here").is_err());
    }
}
