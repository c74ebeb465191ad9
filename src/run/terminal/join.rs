//! The one way a person joins a run's terminal: its socket in the run's
//! directory, served to the node's own account alone; each person's first
//! line (their login and window), checked by the watcher's [`Keeper`];
//! one person at a time, the others waiting their turn; what the terminal
//! shows copied to them through [`Screen`], their keys and window's size
//! ([`Frame`]) to the program.

use super::{COLS, ROWS, Screen, set_size, size};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The byte a person types to leave: Ctrl-].
pub const LEAVE: u8 = 0x1d;

/// The socket a run's terminal is joined by, in the run's directory.
pub const SOCKET: &str = "terminal.sock";

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

/// Why a person may not join a run's terminal, told them after
/// `joining: refused: `.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// Their connection comes from another host account than the node's.
    #[error("only the node's own account may join a run's terminal")]
    Account,
    /// Their first line is not their login and window.
    #[error("the first line must be LOGIN ROWS COLUMNS")]
    Hello,
    /// The keeper refused their login, as its own error says.
    #[error(transparent)]
    Login(Box<dyn std::error::Error + Send + Sync>),
}

/// What the watcher is asked of as people join: who may (the login named
/// by the person, answered why when not), and what to keep when one joins
/// and when they part.
pub trait Keeper: Send + Sync + 'static {
    /// Whether `login` may join; why they may not.
    fn may_join(&self, login: &str) -> Result<(), Refused>;
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

fn refuse(stream: &mut UnixStream, why: &Refused) -> io::Result<()> {
    stream.write_all(format!("joining: refused: {why}\r\n").as_bytes())
}

fn joined(stream: &mut UnixStream, shared: &Shared) -> io::Result<()> {
    let own = nix::unistd::geteuid().as_raw();
    let peer =
        nix::sys::socket::getsockopt(&stream.as_fd(), nix::sys::socket::sockopt::PeerCredentials)
            .map(|c| c.uid())
            .ok();
    if peer != Some(own) {
        return refuse(stream, &Refused::Account);
    }
    stream.set_read_timeout(Some(HELLO_WAIT))?;
    let mut hello = String::new();
    BufReader::new(stream.try_clone()?.take(256)).read_line(&mut hello)?;
    stream.set_read_timeout(None)?;
    let Some((login, rows, cols)) = read_hello(&hello) else {
        return refuse(stream, &Refused::Hello);
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
