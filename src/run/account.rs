//! The unprivileged host account a run's processes run as when the node runs as root: a uid
//! of its own from the node's range (see `uids`), needing no entry in the host's account database.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, open, openat};
use nix::sys::stat::Mode;
use nix::sys::wait::waitpid;
use nix::unistd::{
    AccessFlags, ForkResult, Gid, Uid, access, fchown, fchownat, fork, pipe, setgid, setgroups,
    setuid, write,
};
use serde::Serialize;

use super::SandboxError;

/// A host account with neither root's uid nor root's group, which a run's processes (bubblewrap included) run as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunAccount {
    /// The account's host uid.
    pub uid: u32,
    /// The account's host primary gid; the run has no supplementary groups.
    pub gid: u32,
    /// The account's login name.
    pub name: String,
}

impl RunAccount {
    /// The account of host uid `uid`, its gid the same number; it needs no
    /// entry in the host's account database.
    pub fn of_uid(uid: u32) -> RunAccount {
        RunAccount {
            uid,
            gid: uid,
            name: format!("ocx-run-{uid}"),
        }
    }

    /// The account a run must never be: one whose uid or gid is root's.
    pub(crate) fn refuse_root(&self) -> Result<(), SandboxError> {
        let reason = if self.uid == 0 {
            "has uid 0: a run must not be root on the host"
        } else if self.gid == 0 {
            "has gid 0: a run must not hold root's group on the host"
        } else {
            return Ok(());
        };
        Err(SandboxError::Account {
            name: self.name.clone(),
            reason: reason.into(),
        })
    }

    fn ids(&self) -> (Uid, Gid) {
        (Uid::from_raw(self.uid), Gid::from_raw(self.gid))
    }
}

/// Becomes the account for good: no supplementary groups, its gid, then its uid.
///
/// Only async-signal-safe calls, so it may run between fork and exec.
pub(crate) fn become_account(uid: Uid, gid: Gid) -> nix::Result<()> {
    setgroups(&[])?;
    setgid(gid)?;
    setuid(uid)
}

/// What a path must allow the account.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Need {
    /// Reading it (and searching it, for a directory).
    Read,
    /// Reading and writing it (and searching it, for a directory).
    Write,
    /// Executing it.
    Execute,
    /// Searching it and every directory above it.
    Reach,
    /// Reading the path itself (and searching it, for a directory), whatever the
    /// directories above it allow: tried on a descriptor OCX opened of it.
    ReadItself,
    /// Executing the file itself, whatever the directories above it allow.
    ExecuteItself,
}

impl Need {
    fn flags(self, dir: bool) -> AccessFlags {
        let search = if dir {
            AccessFlags::X_OK
        } else {
            AccessFlags::empty()
        };
        match self {
            Need::Read | Need::ReadItself => AccessFlags::R_OK | search,
            Need::Write => AccessFlags::R_OK | AccessFlags::W_OK | search,
            Need::Execute | Need::ExecuteItself => AccessFlags::X_OK,
            Need::Reach => AccessFlags::X_OK,
        }
    }

    /// Whether it is tried on the path itself, not through the directories above it.
    fn itself(self) -> bool {
        matches!(self, Need::ReadItself | Need::ExecuteItself)
    }
}

/// Why what an account may reach could not be asked: a path it cannot be
/// asked of, or the account itself unusable, is refused; the host's pipe,
/// fork or the child's answer failing is a failure.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// A path to be asked of holds a NUL byte.
    #[error("{} holds a NUL byte", .0.display())]
    Nul(std::path::PathBuf),
    /// The account's uid and gid cannot be taken.
    #[error("cannot become uid {uid} gid {gid}")]
    CannotBecome { uid: u32, gid: u32 },
    /// The pipe to the child could not be made.
    #[error("cannot make a pipe: {0}")]
    Pipe(Errno),
    /// The child could not be forked.
    #[error("cannot fork: {0}")]
    Fork(Errno),
    /// What the child said could not be read.
    #[error("cannot read what the account may do: {0}")]
    Read(std::io::Error),
    /// The child ended before it answered for every path.
    #[error("the account's check ended early")]
    EndedEarly,
}

impl ProbeError {
    /// The account or a path is the caller's to mend; the rest failed beneath them.
    pub fn kind(&self) -> crate::stop::StopKind {
        use crate::stop::StopKind;
        match self {
            ProbeError::Nul(_) | ProbeError::CannotBecome { .. } => StopKind::Refused,
            ProbeError::Pipe(_)
            | ProbeError::Fork(_)
            | ProbeError::Read(_)
            | ProbeError::EndedEarly => StopKind::Failed,
        }
    }
}

/// For each path, whether the account has what it needs there, tried in a forked child that
/// has become the account: with `access`, or, for a need of the path itself, with
/// `faccessat2` on a descriptor this process (root) opened of it beforehand, so the
/// directories above it are not asked.
pub(crate) fn account_can(
    account: &RunAccount,
    checks: &[(&Path, Need)],
) -> Result<Vec<bool>, ProbeError> {
    let mut tried: Vec<(CString, AccessFlags, Option<OwnedFd>)> = Vec::with_capacity(checks.len());
    for (p, need) in checks {
        let c = CString::new(p.as_os_str().as_encoded_bytes())
            .map_err(|_| ProbeError::Nul(p.to_path_buf()))?;
        let fd = match need.itself() {
            true => open(
                c.as_c_str(),
                OFlag::O_PATH | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .ok(),
            false => None,
        };
        tried.push((c, need.flags(p.is_dir()), fd));
    }
    let (uid, gid) = account.ids();
    let (reader, writer) = pipe().map_err(ProbeError::Pipe)?;
    // SAFETY: the child calls only async-signal-safe functions (setgroups, setgid, setuid,
    // access, faccessat2, write, _exit) on data prepared before the fork, and allocates nothing.
    match unsafe { fork() } {
        Err(e) => Err(ProbeError::Fork(e)),
        Ok(ForkResult::Child) => {
            drop(reader);
            let became = become_account(uid, gid).is_ok();
            let _ = write(&writer, &[u8::from(became)]);
            for (c, flags, fd) in &tried {
                let ok = became
                    && match fd {
                        Some(fd) => may_itself(fd, *flags),
                        None => access(c.as_c_str(), *flags).is_ok(),
                    };
                let _ = write(&writer, &[u8::from(ok)]);
            }
            // SAFETY: ends the forked child at once, running no handler of the parent.
            unsafe { nix::libc::_exit(0) }
        }
        Ok(ForkResult::Parent { child }) => {
            drop(writer);
            let mut said = Vec::new();
            let read = File::from(reader).read_to_end(&mut said);
            let _ = waitpid(child, None);
            read.map_err(ProbeError::Read)?;
            match said.split_first() {
                Some((1, rest)) if rest.len() == tried.len() => {
                    Ok(rest.iter().map(|b| *b == 1).collect())
                }
                Some((1, _)) => Err(ProbeError::EndedEarly),
                _ => Err(ProbeError::CannotBecome {
                    uid: account.uid,
                    gid: account.gid,
                }),
            }
        }
    }
}

/// Whether this process may do `flags` to the file `fd` was opened of (`O_PATH`), asked of
/// that file alone (`faccessat2` with `AT_EMPTY_PATH`, Linux 5.8): the directories above it
/// are not searched. Async-signal-safe.
fn may_itself(fd: &OwnedFd, flags: AccessFlags) -> bool {
    // SAFETY: a system call on a descriptor this process holds and a static empty string.
    let r = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_faccessat2,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags.bits(),
            nix::libc::AT_EMPTY_PATH,
        )
    };
    r == 0
}

const OPEN_DIR: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// Makes the account the owner of a directory and of everything under it, changing symbolic
/// links themselves and never following one, nor leaving the directory's own tree by one.
pub(crate) fn hand_over(dir: &Path, account: &RunAccount) -> nix::Result<()> {
    let (uid, gid) = account.ids();
    let fd = open(dir, OPEN_DIR, Mode::empty())?;
    fchown(&fd, Some(uid), Some(gid))?;
    hand_over_under(fd, uid, gid)
}

fn hand_over_under(dir: OwnedFd, uid: Uid, gid: Gid) -> nix::Result<()> {
    let names: Vec<CString> = {
        let mut listing = Dir::from_fd(dir.try_clone().map_err(|_| Errno::EMFILE)?)?;
        let mut names = Vec::new();
        for entry in listing.iter() {
            let name = entry?.file_name().to_owned();
            if !is_dot(&name) {
                names.push(name);
            }
        }
        names
    };
    for name in names {
        fchownat(
            dir.as_fd(),
            name.as_c_str(),
            Some(uid),
            Some(gid),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )?;
        match openat(dir.as_fd(), name.as_c_str(), OPEN_DIR, Mode::empty()) {
            Ok(sub) => hand_over_under(sub, uid, gid)?,
            Err(Errno::ENOTDIR | Errno::ELOOP | Errno::ENOENT) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn is_dot(name: &CStr) -> bool {
    matches!(name.to_bytes(), b"." | b"..")
}
