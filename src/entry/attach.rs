//! `ocx attach`'s side of a run's terminal, once the `attach` tool has
//! said which and as whom: the person's own terminal, raw while they are
//! joined and given back as it was, shows what the run's terminal shows;
//! each key they type reaches the program, but Ctrl-], which leaves; their
//! window's size, first and each time it changes (SIGWINCH), becomes the
//! run's terminal's. What the node says of the joining (`joining: waiting`,
//! `left`, `ended`, `refused`) reaches them in the same stream.

use crate::run::terminal::{self, Frame, LEAVE};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::termios::{self, SetArg, Termios};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

/// The pipe's end SIGWINCH's handler writes to.
static WINCH_WRITE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_winch(_: nix::libc::c_int) {
    let fd = WINCH_WRITE.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: write(2) is async-signal-safe; the buffer is a static byte.
        let _ = unsafe { nix::libc::write(fd, b"w".as_ptr().cast(), 1) };
    }
}

/// Why a joining could not be made.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// Standard input is no terminal to give the run's screen to.
    #[error(
        "standard input is not a terminal: ocx attach joins a run's terminal from a person's own"
    )]
    NotATerminal,
    /// The run's terminal's socket could not be reached.
    #[error("the run's terminal could not be reached: {0}")]
    Unreachable(std::io::Error),
    /// The person's terminal could not be set or read.
    #[error("your terminal: {0}")]
    Terminal(std::io::Error),
}

/// The person's terminal as it was, given back when dropped.
struct Raw {
    fd: OwnedFd,
    was: Termios,
}

impl Raw {
    fn make(fd: BorrowedFd<'_>) -> std::io::Result<Raw> {
        let was = termios::tcgetattr(fd)?;
        let mut raw = was.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(fd, SetArg::TCSAFLUSH, &raw)?;
        Ok(Raw {
            fd: fd.try_clone_to_owned()?,
            was,
        })
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(&self.fd, SetArg::TCSAFLUSH, &self.was);
    }
}

/// Joins the terminal of the run whose directory is `dir` as `login`;
/// answers whether it was joined (false: refused, as the node said).
pub fn join(dir: &Path, login: &str) -> Result<bool, AttachError> {
    let stdin = std::io::stdin();
    let input = stdin.as_fd();
    if !nix::unistd::isatty(input).unwrap_or(false) {
        return Err(AttachError::NotATerminal);
    }
    let mut stream =
        terminal::connect_in(dir, terminal::SOCKET).map_err(AttachError::Unreachable)?;
    let (rows, cols) = window();
    stream
        .write_all(format!("{login} {rows} {cols}\n").as_bytes())
        .map_err(AttachError::Unreachable)?;
    let (winch_read, winch_write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
            .map_err(|e| AttachError::Terminal(e.into()))?;
    WINCH_WRITE.store(winch_write.as_raw_fd(), Ordering::SeqCst);
    // SAFETY: the handler only writes a byte to a pipe.
    unsafe {
        let _ = nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGWINCH,
            nix::sys::signal::SigHandler::Handler(on_winch),
        );
    }
    let raw = Raw::make(input).map_err(AttachError::Terminal)?;
    let (done_read, done_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| AttachError::Terminal(e.into()))?;
    let showing = {
        let mut from = stream.try_clone().map_err(AttachError::Unreachable)?;
        std::thread::spawn(move || show(&mut from, done_write))
    };
    keys(&mut stream, input, winch_read.as_fd(), done_read.as_fd());
    let refused = showing.join().unwrap_or(false);
    drop(raw);
    WINCH_WRITE.store(-1, Ordering::SeqCst);
    drop(winch_write);
    Ok(!refused)
}

/// The person's window, rows then columns (the run's own size when it
/// cannot be read).
fn window() -> (u16, u16) {
    let out = std::io::stdout();
    terminal::size(out.as_fd())
        .ok()
        .filter(|&(r, c)| r > 0 && c > 0)
        .unwrap_or((terminal::ROWS, terminal::COLS))
}

/// Copies what the run's terminal shows to the person's until the node
/// closes the joining; answers whether the node refused it. `done` is
/// closed when it returns.
fn show(from: &mut UnixStream, done: OwnedFd) -> bool {
    let mut out = std::io::stdout().lock();
    let mut bytes = vec![0u8; 16 * 1024];
    let mut first = Vec::new();
    while let Ok(n) = from.read(&mut bytes) {
        if n == 0 {
            break;
        }
        if first.len() < 256 {
            first.extend_from_slice(&bytes[..n.min(256 - first.len())]);
        }
        if out
            .write_all(&bytes[..n])
            .and_then(|()| out.flush())
            .is_err()
        {
            break;
        }
    }
    drop(done);
    first.starts_with(b"joining: refused")
}

/// Sends the person's keys and window to the run's terminal until they
/// type Ctrl-] (then their side of the joining is closed) or the node
/// closes it (`done` readable).
fn keys(
    stream: &mut UnixStream,
    input: BorrowedFd<'_>,
    winch: BorrowedFd<'_>,
    done: BorrowedFd<'_>,
) {
    let mut bytes = [0u8; 4096];
    loop {
        let mut fds = [
            PollFd::new(input, PollFlags::POLLIN),
            PollFd::new(winch, PollFlags::POLLIN),
            PollFd::new(done, PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::Error::EINTR) => continue,
            Err(_) => return,
        }
        let ready = |p: &PollFd| p.revents().is_some_and(|r| !r.is_empty());
        let (keyed, resized, ended) = (ready(&fds[0]), ready(&fds[1]), ready(&fds[2]));
        if ended {
            return;
        }
        if resized {
            while nix::unistd::read(winch, &mut bytes).is_ok_and(|n| n > 0) {}
            let (rows, cols) = window();
            if stream
                .write_all(&Frame::Window(rows, cols).encode())
                .is_err()
            {
                return;
            }
        }
        if keyed {
            let n = match nix::unistd::read(input, &mut bytes) {
                Ok(0) | Err(_) => {
                    let _ = stream.shutdown(std::net::Shutdown::Write);
                    return wait(done);
                }
                Ok(n) => n,
            };
            let typed = &bytes[..n];
            let leave = typed.iter().position(|&b| b == LEAVE);
            let sent = &typed[..leave.unwrap_or(n)];
            if !sent.is_empty()
                && stream
                    .write_all(&Frame::Keys(sent.to_vec()).encode())
                    .is_err()
            {
                return;
            }
            if leave.is_some() {
                let _ = stream.shutdown(std::net::Shutdown::Write);
                return wait(done);
            }
        }
    }
}

/// Waits until the node has closed the joining.
fn wait(done: BorrowedFd<'_>) {
    let mut fds = [PollFd::new(done, PollFlags::POLLIN)];
    while let Err(nix::Error::EINTR) = poll(&mut fds, PollTimeout::NONE) {}
}
