//! A run's terminal (protocol v1, C3): a fresh pseudo-terminal its
//! watcher holds, whose far end is the program's controlling terminal,
//! and the one way a person joins it ([`Joining`]): what it shows copied
//! to them, what they type reaching the program, one person at a time.
//!
//! Everything the program writes is hostile: what reaches a person's
//! terminal passes [`Screen`] (`screen.rs`), which reads it as a terminal
//! does, lets through what draws a screen and holds back what would act
//! outside it or make the terminal answer; what is kept as the run's
//! output log is its text alone, without escape sequences or carriage
//! returns.

mod screen;
pub use screen::Screen;

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The rows a run's terminal has while no one is joined.
pub const ROWS: u16 = 50;
/// The columns a run's terminal has while no one is joined.
pub const COLS: u16 = 200;

/// The longest line Linux's terminal holds for a program reading lines
/// (its canonical mode), the newline aside.
pub const LINE_MAX: usize = 4095;

/// The byte a person types to leave: Ctrl-].
pub const LEAVE: u8 = 0x1d;

/// The socket a run's terminal is joined by, in the run's directory.
pub const SOCKET: &str = "terminal.sock";

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

/// A line as the run's terminal is given it: no control character (each
/// made a space), cut at [`LINE_MAX`] bytes on a character's boundary,
/// ended by a carriage return.
pub fn typed(line: &str) -> Vec<u8> {
    let mut out: String = line
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if out.len() > LINE_MAX {
        let mut at = LINE_MAX;
        while !out.is_char_boundary(at) {
            at -= 1;
        }
        out.truncate(at);
    }
    let mut bytes = out.into_bytes();
    bytes.push(b'\r');
    bytes
}

/// Text as an agent's own interface is given it: one bracketed paste
/// (what a terminal sends for pasted text, which the program takes whole,
/// line breaks and all, without acting on any of it), its control
/// characters but line breaks and tabs made spaces, so nothing in it ends
/// the paste early, cut at `max` bytes on a character's boundary. The
/// carriage return that submits it is typed after, on its own.
pub fn pasted(text: &str, max: usize) -> Vec<u8> {
    let mut at = text.len().min(max);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let clean: String = text[..at]
        .chars()
        .map(|c| match c {
            '\n' | '\t' => c,
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    let mut bytes = b"\x1b[200~".to_vec();
    bytes.extend_from_slice(clean.as_bytes());
    bytes.extend_from_slice(b"\x1b[201~");
    bytes
}

/// A person joined, as the watcher tells of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    /// The login they joined as.
    pub login: String,
    /// When they joined, as Fossil writes a time (UTC).
    pub at: String,
}

/// How a joining ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parted {
    /// The person left (Ctrl-], or their connection closed).
    Left,
    /// The run ended, or its watcher ended the joining.
    Ended,
}

impl Parted {
    /// The word the person is told, after `joining: `.
    pub fn word(self) -> &'static str {
        match self {
            Parted::Left => "left",
            Parted::Ended => "ended",
        }
    }
}

/// What the watcher is asked of as people join: who may (the login named
/// by the person, answered the reason when not), and what to keep when
/// one joins and when they part.
pub trait Keeper: Send + Sync + 'static {
    /// Whether `login` may join; the reason they may not.
    fn may_join(&self, login: &str) -> Result<(), String>;
    /// `joined` began.
    fn joined(&self, joined: &Joined);
    /// `joined` ended after `seconds`, as `how` says.
    fn parted(&self, joined: &Joined, seconds: u64, how: Parted);
}

/// How many pieces of the screen wait for a person who does not keep up
/// before what follows is dropped for them.
const BACKLOG: usize = 256;

/// How long a person's first line may take.
const HELLO_WAIT: Duration = Duration::from_secs(10);

struct Shared {
    master: File,
    /// The person joined now, and where their screen's pieces go.
    viewer: Mutex<Option<SyncSender<Arc<Vec<u8>>>>>,
    /// The joined person's connection, so the end of the run wakes its reader.
    person: Mutex<Option<UnixStream>>,
    /// Who is joined now (their login and since when), for one waiting.
    turn: Mutex<Option<Joined>>,
    freed: Condvar,
    ended: AtomicBool,
    /// Joinings under way, counted so the watcher waits for their ends.
    open: Mutex<usize>,
    closed: Condvar,
    keeper: Box<dyn Keeper>,
}

/// A run's terminal as people join it: its socket served, its screen read.
#[derive(Clone)]
pub struct Joining {
    shared: Arc<Shared>,
    socket: PathBuf,
}

impl Joining {
    /// Serves the socket [`SOCKET`] in `dir` (the run's directory, its
    /// owner's alone; a socket a killed watcher left is removed first) for
    /// the terminal whose master is `master`; `log` gets its text.
    pub fn serve(
        dir: &Path,
        master: File,
        log: File,
        keeper: Box<dyn Keeper>,
    ) -> io::Result<Joining> {
        let listener = bind_in(dir, SOCKET)?;
        let shared = Arc::new(Shared {
            master,
            viewer: Mutex::new(None),
            person: Mutex::new(None),
            turn: Mutex::new(None),
            freed: Condvar::new(),
            ended: AtomicBool::new(false),
            open: Mutex::new(0),
            closed: Condvar::new(),
            keeper,
        });
        let reading = shared.clone();
        let reader = reading.master.try_clone()?;
        std::thread::spawn(move || read_screen(reader, log, &reading));
        let serving = shared.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if serving.ended.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let one = serving.clone();
                std::thread::spawn(move || join_one(stream, &one));
            }
        });
        Ok(Joining {
            shared,
            socket: dir.join(SOCKET),
        })
    }

    /// Types `bytes` into the terminal, as if on its keyboard.
    pub fn type_in(&self, bytes: &[u8]) -> io::Result<()> {
        (&self.shared.master).write_all(bytes)
    }

    /// Ends every joining (each told `joining: ended`, each kept by the
    /// keeper), waits for their ends, and removes the socket.
    pub fn end(&self) {
        let shared = &self.shared;
        shared.ended.store(true, Ordering::SeqCst);
        let _ = std::fs::remove_file(&self.socket);
        if let Some(person) = lock(&shared.person).as_ref() {
            let _ = person.shutdown(std::net::Shutdown::Read);
        }
        lock(&shared.viewer).take();
        shared.freed.notify_all();
        // The accepting thread wakes to a connection and sees the end.
        let _ = UnixStream::connect(&self.socket);
        let mut open = lock(&shared.open);
        let until = Instant::now() + Duration::from_secs(10);
        while *open > 0 && Instant::now() < until {
            open = shared
                .closed
                .wait_timeout(open, Duration::from_millis(100))
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads what the terminal shows until its program's last process ends:
/// its text to `log`, what a person may see to the person joined.
fn read_screen(mut master: File, mut log: File, shared: &Shared) {
    let mut screen = Screen::default();
    let mut chunk = vec![0u8; 16 * 1024];
    let (mut text, mut shown) = (Vec::new(), Vec::new());
    loop {
        let n = match master.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // EIO: every holder of the far end has closed it.
            Err(_) => break,
        };
        text.clear();
        shown.clear();
        screen.read(&chunk[..n], &mut text, &mut shown);
        if !text.is_empty() {
            let _ = log.write_all(&text);
        }
        if shown.is_empty() {
            continue;
        }
        let mut viewer = lock(&shared.viewer);
        if let Some(tx) = viewer.as_ref() {
            match tx.try_send(Arc::new(shown.clone())) {
                Ok(()) | Err(TrySendError::Full(_)) => {}
                Err(TrySendError::Disconnected(_)) => *viewer = None,
            }
        }
    }
}

/// Serves one connection: checked, made to wait its turn, joined, parted.
fn join_one(mut stream: UnixStream, shared: &Shared) {
    if shared.ended.load(Ordering::SeqCst) {
        let _ = stream.write_all(b"joining: ended\r\n");
        return;
    }
    *lock(&shared.open) += 1;
    let _ = joined(&mut stream, shared);
    let mut open = lock(&shared.open);
    *open = open.saturating_sub(1);
    shared.closed.notify_all();
}

fn refuse(stream: &mut UnixStream, why: &str) -> io::Result<()> {
    stream.write_all(format!("joining: refused: {why}\r\n").as_bytes())
}

fn joined(stream: &mut UnixStream, shared: &Shared) -> io::Result<()> {
    let own = nix::unistd::geteuid().as_raw();
    let peer =
        nix::sys::socket::getsockopt(&stream.as_fd(), nix::sys::socket::sockopt::PeerCredentials)
            .map(|c| c.uid())
            .ok();
    if peer != Some(own) {
        return refuse(
            stream,
            "only the node's own account may join a run's terminal",
        );
    }
    stream.set_read_timeout(Some(HELLO_WAIT))?;
    let mut hello = String::new();
    BufReader::new(stream.try_clone()?.take(256)).read_line(&mut hello)?;
    stream.set_read_timeout(None)?;
    let Some((login, rows, cols)) = read_hello(&hello) else {
        return refuse(stream, "the first line must be LOGIN ROWS COLUMNS");
    };
    if let Err(why) = shared.keeper.may_join(&login) {
        return refuse(stream, &why);
    }
    let me = {
        let mut turn = lock(&shared.turn);
        if let Some(other) = turn.as_ref() {
            stream.write_all(
                format!(
                    "joining: waiting: {} joined at {} UTC; you join when they leave\r\n",
                    other.login, other.at
                )
                .as_bytes(),
            )?;
        }
        while turn.is_some() && !shared.ended.load(Ordering::SeqCst) {
            turn = shared
                .freed
                .wait_timeout(turn, Duration::from_millis(500))
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
            if gone(stream) {
                return Ok(());
            }
        }
        if shared.ended.load(Ordering::SeqCst) {
            drop(turn);
            return stream.write_all(b"joining: ended\r\n");
        }
        let me = Joined {
            login,
            at: crate::fossil::artifact::now(),
        };
        *turn = Some(me.clone());
        me
    };
    let started = Instant::now();
    shared.keeper.joined(&me);
    let how = attached(stream, shared, rows, cols);
    let _ = set_size(shared.master.as_fd(), ROWS, COLS);
    let _ = stream.write_all(format!("\r\njoining: {}\r\n", how.word()).as_bytes());
    let _ = stream.shutdown(std::net::Shutdown::Both);
    shared.keeper.parted(&me, started.elapsed().as_secs(), how);
    lock(&shared.turn).take();
    shared.freed.notify_all();
    Ok(())
}

/// Whether the person waiting on `stream` has gone (closed their side
/// with nothing unread), looked at without reading or waiting.
fn gone(stream: &UnixStream) -> bool {
    use nix::sys::socket::{MsgFlags, recv};
    let mut byte = [0u8; 1];
    matches!(
        recv(
            stream.as_raw_fd(),
            &mut byte,
            MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT
        ),
        Ok(0)
    )
}

/// The person's first line: their login, then their window's rows and columns.
fn read_hello(line: &str) -> Option<(String, u16, u16)> {
    let mut words = line.split_whitespace();
    let login = words.next()?.to_string();
    let rows: u16 = words.next()?.parse().ok()?;
    let cols: u16 = words.next()?.parse().ok()?;
    (words.next().is_none() && fits(rows) && fits(cols) && login.len() <= 100)
        .then_some((login, rows, cols))
}

/// What a joined person's side sends after its first line, a frame at a
/// time: keys typed (`k`, a length of two bytes, the bytes) or their
/// window's new size (`w`, rows and columns, two bytes each), all numbers
/// big-endian. The end of what they send is their leaving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Keys typed, as the person's terminal gave them.
    Keys(Vec<u8>),
    /// Their window, rows then columns.
    Window(u16, u16),
}

/// The most bytes of keys one frame carries.
pub const KEYS_MAX: usize = 4096;

impl Frame {
    /// The frame as it is sent; keys longer than [`KEYS_MAX`] go as several.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Frame::Keys(keys) => keys
                .chunks(KEYS_MAX)
                .flat_map(|c| {
                    let mut f = vec![b'k'];
                    f.extend_from_slice(&(c.len() as u16).to_be_bytes());
                    f.extend_from_slice(c);
                    f
                })
                .collect(),
            Frame::Window(rows, cols) => {
                let mut f = vec![b'w'];
                f.extend_from_slice(&rows.to_be_bytes());
                f.extend_from_slice(&cols.to_be_bytes());
                f
            }
        }
    }
}

/// What came from a joined person that is not a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("what came is not a frame of keys or of a window")]
pub struct NotAFrame;

/// Reads frames from bytes as they come, in pieces of any size. Total: a
/// frame of another kind, keys longer than [`KEYS_MAX`] or a window
/// outside 1 to 1000 either way is an error, after which it reads nothing.
#[derive(Debug, Default)]
pub struct Frames {
    pending: Vec<u8>,
    broken: bool,
}

impl Frames {
    /// Adds `bytes`; answers the frames now whole, or `Err` once what came
    /// is not a frame.
    pub fn read(&mut self, bytes: &[u8]) -> Result<Vec<Frame>, NotAFrame> {
        if self.broken {
            return Err(NotAFrame);
        }
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            let rest = &self.pending[at..];
            let Some((&kind, body)) = rest.split_first() else {
                break;
            };
            let two = |i: usize| u16::from_be_bytes([body[i], body[i + 1]]);
            match kind {
                b'k' if body.len() >= 2 => {
                    let n = two(0) as usize;
                    if n > KEYS_MAX {
                        self.broken = true;
                        return Err(NotAFrame);
                    }
                    if body.len() < 2 + n {
                        break;
                    }
                    out.push(Frame::Keys(body[2..2 + n].to_vec()));
                    at += 3 + n;
                }
                b'w' if body.len() >= 4 => {
                    let (rows, cols) = (two(0), two(2));
                    if !fits(rows) || !fits(cols) {
                        self.broken = true;
                        return Err(NotAFrame);
                    }
                    out.push(Frame::Window(rows, cols));
                    at += 5;
                }
                b'k' | b'w' => break,
                _ => {
                    self.broken = true;
                    return Err(NotAFrame);
                }
            }
        }
        self.pending.drain(..at);
        Ok(out)
    }
}

/// Whether `n` rows or columns is a window a terminal may be given.
fn fits(n: u16) -> bool {
    (1..=1000).contains(&n)
}

/// Copies the screen to the person and their keys to the program until
/// they leave or the run ends; their window's size, first and as it
/// changes, given to the run's terminal.
fn attached(stream: &mut UnixStream, shared: &Shared, rows: u16, cols: u16) -> Parted {
    let (tx, rx) = sync_channel::<Arc<Vec<u8>>>(BACKLOG);
    *lock(&shared.viewer) = Some(tx);
    *lock(&shared.person) = stream.try_clone().ok();
    if shared.ended.load(Ordering::SeqCst) {
        let _ = stream.shutdown(std::net::Shutdown::Read);
    }
    let master = shared.master.as_fd();
    resize(master, rows, cols);
    let Ok(mut out) = stream.try_clone() else {
        lock(&shared.viewer).take();
        return Parted::Left;
    };
    let showing = std::thread::spawn(move || {
        while let Ok(piece) = rx.recv() {
            if out.write_all(&piece).is_err() {
                break;
            }
        }
    });
    let mut frames = Frames::default();
    let mut bytes = [0u8; 8192];
    let how = 'reading: loop {
        let n = match stream.read(&mut bytes) {
            Ok(0) => break Parted::Left,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break Parted::Left,
        };
        if shared.ended.load(Ordering::SeqCst) {
            break Parted::Ended;
        }
        let Ok(read) = frames.read(&bytes[..n]) else {
            break Parted::Left;
        };
        for frame in read {
            match frame {
                Frame::Keys(keys) => {
                    if (&shared.master).write_all(&keys).is_err() {
                        break 'reading Parted::Ended;
                    }
                }
                Frame::Window(rows, cols) => {
                    let _ = set_size(master, rows, cols);
                }
            }
        }
    };
    let how = if shared.ended.load(Ordering::SeqCst) {
        Parted::Ended
    } else {
        how
    };
    lock(&shared.viewer).take();
    lock(&shared.person).take();
    let _ = showing.join();
    how
}

/// Gives the terminal `rows` by `cols`, so its program is signalled and
/// redraws; when that is its size already, a size one column less first,
/// so the program redraws its screen for the person at once all the same.
fn resize(master: BorrowedFd<'_>, rows: u16, cols: u16) {
    if size(master).ok() == Some((rows, cols)) {
        let _ = set_size(master, rows, cols.saturating_sub(1).max(1));
    }
    let _ = set_size(master, rows, cols);
}

/// Binds the socket `name` in `dir`, its owner's alone, by the directory's
/// descriptor (a socket's whole name may be no longer than 108 bytes).
pub fn bind_in(dir: &Path, name: &str) -> io::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let d = open_dir(dir)?;
    let path = PathBuf::from(format!("/proc/self/fd/{}/{name}", d.as_raw_fd()));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Connects to the socket `name` in `dir`, by the directory's descriptor.
pub fn connect_in(dir: &Path, name: &str) -> io::Result<UnixStream> {
    let d = open_dir(dir)?;
    UnixStream::connect(format!("/proc/self/fd/{}/{name}", d.as_raw_fd()))
}

fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    use nix::fcntl::OFlag;
    nix::fcntl::open(
        dir,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_typed_line_is_one_line_cut_where_linux_cuts_it() {
        assert_eq!(typed("Post abc: hi"), b"Post abc: hi\r");
        assert_eq!(typed("a\nb\rc\x1b"), b"a b c \r");
        let long = "é".repeat(3000);
        let t = typed(&long);
        assert!(t.len() <= LINE_MAX + 1 && std::str::from_utf8(&t[..t.len() - 1]).is_ok());
    }

    #[test]
    fn a_paste_holds_nothing_that_ends_it_early() {
        let hostile = "Post abc from pat: hi\x1b[201~\rrm -rf /\r\nsecond line\x07";
        let p = pasted(hostile, 1000);
        let inner = &p[6..p.len() - 6];
        assert!(p.starts_with(b"\x1b[200~") && p.ends_with(b"\x1b[201~"));
        assert!(!inner.contains(&0x1b) && !inner.contains(&b'\r') && !inner.contains(&0x07));
        assert!(inner.windows(12).any(|w| w == b"\nsecond line"));
        let cut = pasted(&"é".repeat(100), 51);
        assert!(std::str::from_utf8(&cut[6..cut.len() - 6]).is_ok());
        assert_eq!(cut.len(), 12 + 50);
    }

    #[test]
    fn a_first_line_is_read_or_refused() {
        assert_eq!(
            read_hello("admin 40 120\n"),
            Some(("admin".into(), 40, 120))
        );
        for bad in [
            "",
            "admin",
            "admin 0 120",
            "admin 40 99999",
            "admin 40 120 x",
            "a -1 3",
        ] {
            assert_eq!(read_hello(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn frames_are_read_whole_however_they_are_cut() {
        let sent = [
            Frame::Keys(b"hello\r".to_vec()),
            Frame::Window(40, 120),
            Frame::Keys(vec![0x1b, b'[', b'A']),
        ];
        let bytes: Vec<u8> = sent.iter().flat_map(Frame::encode).collect();
        for cut in 0..bytes.len() {
            let mut f = Frames::default();
            let mut got = f.read(&bytes[..cut]).unwrap();
            got.extend(f.read(&bytes[cut..]).unwrap());
            assert_eq!(got, sent, "cut at {cut}");
        }
        let long = Frame::Keys(vec![b'x'; KEYS_MAX * 2 + 1]).encode();
        let got = Frames::default().read(&long).unwrap();
        assert_eq!(got.len(), 3);
    }

    #[test]
    fn what_is_not_a_frame_ends_the_reading() {
        for bad in [
            &b"x"[..],
            b"w\x00\x00\x00\x10",
            b"w\x03\xe9\x00\x10",
            b"k\xff\xff",
        ] {
            let mut f = Frames::default();
            assert_eq!(f.read(bad), Err(NotAFrame), "{bad:?}");
            assert_eq!(f.read(&Frame::Window(1, 1).encode()), Err(NotAFrame));
        }
    }

    proptest! {
        #[test]
        fn any_bytes_are_read_as_frames_or_refused(
            bytes in proptest::collection::vec(any::<u8>(), 0..3000),
            cut in 0usize..3000,
        ) {
            let cut = cut.min(bytes.len());
            let mut f = Frames::default();
            if let Ok(frames) = f.read(&bytes[..cut]) {
                for frame in frames {
                    if let Frame::Keys(k) = frame {
                        prop_assert!(k.len() <= KEYS_MAX);
                    }
                }
                let _ = f.read(&bytes[cut..]);
            }
        }
    }
}
