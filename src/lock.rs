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
