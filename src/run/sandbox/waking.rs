//! What wakes a run's supervisor: bubblewrap's end (a pidfd), a [`super::Killer`] (a pipe
//! it writes), a limit the kernel tells of as it is reached (the cgroup's notices), a write
//! to the run's own filesystem (fanotify) and the nearest deadline; so a run given nothing
//! costs nothing. Where the end cannot be had here, the supervisor also reads the run's use
//! every [`super::TICK`], as it did before any was there; where the writes cannot (the host's
//! fanotify groups, 128 an account by default, all taken by other runs), its filesystem is
//! read every tick while it changes and less often, up to [`super::DISK_SLOWEST`], while it
//! does not; a cgroup limit that tells no one (v1's process limit) is read every tick while
//! the run's processes come and go, and less often, up to [`super::SLOWEST`], while they do
//! not.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::super::budget::{Cgroup, Notice};

/// The end of a pipe that wakes a supervisor from another thread.
#[derive(Debug)]
pub(super) struct Waker(File);

impl Waker {
    /// Wakes the supervisor; a full pipe has woken it already.
    pub(super) fn wake(&self) {
        let _ = (&self.0).write(b"!");
    }
}

/// A pipe's two ends: the [`Waker`] and what the supervisor waits on.
pub(super) fn pipe() -> std::io::Result<(Waker, File)> {
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    Ok((Waker(File::from(write)), File::from(read)))
}

/// What has woken the supervisor, besides its deadline.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Woken {
    /// A cgroup's limit may have been reached.
    pub notice: bool,
    /// The run wrote to its own filesystem.
    pub disk: bool,
}

/// Everything a supervisor waits on at once.
#[derive(Debug)]
pub(super) struct Sources {
    ended: Option<OwnedFd>,
    woken: File,
    notices: Vec<Notice>,
    disk: Option<File>,
    /// Whether the run's end cannot wake the supervisor here, so it reads it every tick.
    pub tick: bool,
    /// Whether a write to the run's filesystem cannot wake the supervisor here, so it reads
    /// the filesystem's use.
    pub disk_unwatched: bool,
    /// Whether a limit of the run's cgroup tells no one it is reached, so it must be read.
    pub unnoticed: bool,
}

impl Sources {
    /// What wakes the supervisor of bubblewrap `pid`, woken by `woken`, holding the run to
    /// its `cgroup` and the filesystem mounted at `disk`.
    pub(super) fn of(
        pid: i32,
        woken: File,
        cgroup: Option<&Cgroup>,
        disk: Option<&Path>,
    ) -> Sources {
        let ended = pidfd(pid);
        let (notices, every) = cgroup.map(Cgroup::notices).unwrap_or((Vec::new(), true));
        let disk_writes = disk.map(writes_to);
        let tick = ended.is_none();
        let disk_unwatched = disk_writes.as_ref().is_some_and(Option::is_none);
        Sources {
            ended,
            woken,
            notices,
            disk: disk_writes.flatten(),
            tick,
            disk_unwatched,
            unnoticed: !every,
        }
    }

    /// Waits until something wakes the supervisor or `timeout` has passed, watching the
    /// run's writes only when `writes` (so a run writing fast is read at most every tick).
    pub(super) fn wait(&self, timeout: Duration, writes: bool) -> Woken {
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        let mut fds = Vec::with_capacity(3 + self.notices.len());
        fds.push(PollFd::new(self.woken.as_fd(), PollFlags::POLLIN));
        if let Some(e) = &self.ended {
            fds.push(PollFd::new(e.as_fd(), PollFlags::POLLIN));
        }
        let first_notice = fds.len();
        for n in &self.notices {
            fds.push(PollFd::new(n.as_fd(), n.events()));
        }
        let disk_at = fds.len();
        if let (Some(d), true) = (&self.disk, writes) {
            fds.push(PollFd::new(d.as_fd(), PollFlags::POLLIN));
        }
        let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
        if poll(&mut fds, timeout).unwrap_or(0) <= 0 {
            return Woken::default();
        }
        let ready = |p: &PollFd| p.revents().is_some_and(|r| !r.is_empty());
        let mut woke = Woken::default();
        if ready(&fds[0]) {
            drain(&self.woken);
        }
        for (n, p) in self.notices.iter().zip(&fds[first_notice..disk_at]) {
            if ready(p) {
                n.clear();
                woke.notice = true;
            }
        }
        if let (Some(d), Some(p)) = (&self.disk, fds.get(disk_at))
            && ready(p)
        {
            drain(d);
            woke.disk = true;
        }
        woke
    }
}

fn drain(mut f: &File) {
    let mut buf = [0u8; 4096];
    while matches!(f.read(&mut buf), Ok(n) if n > 0) {}
}

/// A pidfd of `pid`, readable once it has ended (not yet reaped).
fn pidfd(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes no pointer; a negative answer is an error.
    let raw = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a descriptor pidfd_open has just made, this alone owns.
    (raw >= 0).then(|| unsafe { OwnedFd::from_raw_fd(raw as i32) })
}

/// A fanotify of every write and creation on the filesystem mounted at `mount`, through any
/// of its mounts (the sandbox binds parts of it), reporting file handles, never opening a
/// file of the run.
fn writes_to(mount: &Path) -> Option<File> {
    use nix::libc;
    let path = CString::new(mount.as_os_str().as_bytes()).ok()?;
    let flags =
        libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK | libc::FAN_REPORT_FID;
    // SAFETY: fanotify_init takes no pointer; a negative answer is an error.
    let raw = unsafe { libc::fanotify_init(flags, libc::O_RDONLY as u32) };
    if raw < 0 {
        return None;
    }
    // SAFETY: a descriptor fanotify_init has just made, this alone owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mask = libc::FAN_MODIFY | libc::FAN_CREATE | libc::FAN_ONDIR;
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let marked = unsafe {
        libc::fanotify_mark(
            raw,
            libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM,
            mask,
            libc::AT_FDCWD,
            path.as_ptr(),
        )
    };
    (marked == 0).then(|| File::from(fd))
}

/// How many CPUs the run's processes may use at once at the most.
pub(super) fn cores() -> u32 {
    // SAFETY: sysconf takes no pointer.
    let n = unsafe { nix::libc::sysconf(nix::libc::_SC_NPROCESSORS_ONLN) };
    n.clamp(1, i64::from(u32::MAX)) as u32
}
