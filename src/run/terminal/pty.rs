//! A run's pseudo-terminal: its master the watcher's, its far end the
//! program's controlling terminal, and the size either is given.

use super::{COLS, ROWS};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::process::Stdio;

/// A fresh pseudo-terminal of 50 rows by 200 columns: its master the
/// watcher's, its far end given to the program alone (both closed on exec,
/// so nothing else the watcher starts inherits either).
pub struct Pty {
    master: File,
    slave: Option<OwnedFd>,
}

impl Pty {
    /// Opens a fresh pseudo-terminal.
    pub fn open() -> io::Result<Pty> {
        let size = winsize(ROWS, COLS);
        let pair = nix::pty::openpty(Some(&size), None).map_err(io::Error::from)?;
        for fd in [pair.master.as_fd(), pair.slave.as_fd()] {
            nix::fcntl::fcntl(
                fd,
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
            )
            .map_err(io::Error::from)?;
        }
        Ok(Pty {
            master: File::from(pair.master),
            slave: Some(pair.slave),
        })
    }

    /// The program's standard input, output and error: the far end, three times.
    pub fn stdio(&self) -> io::Result<[Stdio; 3]> {
        let slave = self
            .slave
            .as_ref()
            .ok_or_else(|| io::Error::other("the terminal's far end is already given"))?;
        Ok([
            Stdio::from(slave.try_clone()?),
            Stdio::from(slave.try_clone()?),
            Stdio::from(slave.try_clone()?),
        ])
    }

    /// Lets go of the far end once the program holds it, so the master
    /// reads an end when the program's last process does.
    pub fn given(&mut self) {
        self.slave = None;
    }

    /// The master: what the program shows is read from it, what is typed written to it.
    pub fn master(&self) -> io::Result<File> {
        self.master.try_clone()
    }
}

fn winsize(rows: u16, cols: u16) -> nix::pty::Winsize {
    nix::pty::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

nix::ioctl_write_ptr_bad!(set_winsize, nix::libc::TIOCSWINSZ, nix::pty::Winsize);
nix::ioctl_read_bad!(get_winsize, nix::libc::TIOCGWINSZ, nix::pty::Winsize);

/// Gives the terminal `rows` by `cols`; Linux signals its program
/// (SIGWINCH) when that changes its size.
pub fn set_size(master: BorrowedFd<'_>, rows: u16, cols: u16) -> io::Result<()> {
    let size = winsize(rows, cols);
    // SAFETY: TIOCSWINSZ reads one winsize from the pointer, which lives for the call.
    unsafe { set_winsize(master.as_raw_fd(), &size) }
        .map(drop)
        .map_err(io::Error::from)
}

/// The terminal's size, rows then columns.
pub fn size(fd: BorrowedFd<'_>) -> io::Result<(u16, u16)> {
    let mut size = winsize(0, 0);
    // SAFETY: TIOCGWINSZ writes one winsize to the pointer, which lives for the call.
    unsafe { get_winsize(fd.as_raw_fd(), &mut size) }.map_err(io::Error::from)?;
    Ok((size.ws_row, size.ws_col))
}
