//! A lock file: the one way OCX's processes take turns (the node, a run's
//! watcher, a wake, the git export). An advisory `flock` on a file made
//! owner-only and never reached through a link, held while its answer
//! lives, so a process killed holding it lets it go.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// A lock held until dropped.
pub type Held = nix::fcntl::Flock<std::fs::File>;

/// Takes the lock file `path` (waiting for it when `wait`). `None` when
/// another holds it and `wait` is false.
pub fn take(path: &Path, wait: bool) -> std::io::Result<Option<Held>> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)?;
    let arg = if wait {
        nix::fcntl::FlockArg::LockExclusive
    } else {
        nix::fcntl::FlockArg::LockExclusiveNonblock
    };
    match nix::fcntl::Flock::lock(f, arg) {
        Ok(l) => Ok(Some(l)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(std::io::Error::from(e)),
    }
}

/// One of a fixed number of places, held by this process until dropped:
/// a byte of a lock file locked through its own open file description
/// (an OFD lock), so processes count one another with no daemon, and a
/// process killed holding one lets it go.
pub struct Slot {
    _file: std::fs::File,
}

/// Takes the first free slot at `offsets` (each a byte) of the lock file
/// `path` (made owner-only, never reached through a link); `None` when
/// every one is held.
pub fn slot(path: &Path, offsets: std::ops::Range<u64>) -> std::io::Result<Option<Slot>> {
    use nix::fcntl::{FcntlArg, fcntl};
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)?;
    for offset in offsets {
        match fcntl(&file, FcntlArg::F_OFD_SETLK(&byte_lock(offset))) {
            Ok(_) => return Ok(Some(Slot { _file: file })),
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EACCES) => continue,
            Err(e) => return Err(std::io::Error::from(e)),
        }
    }
    Ok(None)
}

/// How many of the slots at `offsets` of the lock file `path` other open
/// file descriptions hold now (0 when there is no such file), asked
/// without taking any.
pub fn slots_held(path: &Path, offsets: std::ops::Range<u64>) -> std::io::Result<u64> {
    use nix::fcntl::{FcntlArg, fcntl};
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut held = 0;
    for offset in offsets {
        let mut lock = byte_lock(offset);
        fcntl(&file, FcntlArg::F_OFD_GETLK(&mut lock)).map_err(std::io::Error::from)?;
        if lock.l_type != nix::libc::F_UNLCK as i16 {
            held += 1;
        }
    }
    Ok(held)
}

/// An exclusive lock of the one byte at `offset`.
fn byte_lock(offset: u64) -> nix::libc::flock {
    nix::libc::flock {
        l_type: nix::libc::F_WRLCK as i16,
        l_whence: nix::libc::SEEK_SET as i16,
        l_start: offset as i64,
        l_len: 1,
        l_pid: 0,
    }
}
