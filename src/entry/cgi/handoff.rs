//! The page's hand-off: the small program Fossil starts for each request at
//! `/ext/ocx-cgi` (`src/bin/ocx-cgi.rs`), which hands the request to a page
//! server of OCX's own (`server.rs`) instead of starting the whole `ocx`
//! program each time. Starting that program (its loader, its relocations,
//! its pages) and reading the repository's schema anew are most of what a
//! page costs; a server already started, keeping the repository open,
//! pays neither.
//!
//! The handoff is one message on a Unix socket in a directory only
//! `ocx-cgi`'s own account may enter: the request's environment, its working
//! directory, the name it was started under, and its standard input,
//! output and error themselves, passed as descriptors, so the page reads
//! Fossil's request and writes Fossil's answer as it would have. The
//! server says it has taken the request (and `ocx-cgi` lets go of its own
//! copies of the streams, so the answer ends when the server's does), then,
//! once answered, its status.
//! Whatever fails before it has taken it (no server, a directory that is
//! not private, a request too large to hand over) leaves `ocx-cgi` to start
//! the whole program as before: the page is the same either way, only
//! slower, and `ocx-cgi` starts a server for the requests after.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// What a handoff begins with: its kind and version.
const MAGIC: &[u8; 8] = b"OCXPAGE1";
/// The largest handoff, in bytes (the environment, not the request's body,
/// which stays on standard input); a larger request is answered by the
/// whole program instead.
pub const FRAME_LIMIT: usize = 256 * 1024;
/// The byte a server's child sends once it has taken a request.
pub const TAKEN: u8 = b'T';
/// The name of the internal command that serves the page (`ocx page-server
/// SOCKET`).
pub const SERVER_COMMAND: &str = "page-server";

/// A request as `ocx-cgi` hands it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handoff {
    /// The path `ocx-cgi` was started as (Fossil's `ocx-cgi` or
    /// `ocx-cgi-next`), absolute: the page's name and where its
    /// configuration lies follow from it.
    pub invoked_as: PathBuf,
    /// `ocx-cgi`'s working directory, which Fossil chose.
    pub cwd: PathBuf,
    /// The whole environment Fossil gave the request.
    pub env: Vec<(OsString, OsString)>,
}

/// Why a handoff was not read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    /// It does not begin as a handoff does.
    #[error("not a page handoff")]
    Magic,
    /// It says it is longer or shorter than it is, or longer than the limit.
    #[error("a page handoff's length does not match what came")]
    Length,
    /// One of its parts is cut short, empty where it may not be, or holds
    /// a NUL byte.
    #[error("a page handoff's part {0} is malformed")]
    Part(usize),
}

impl Handoff {
    /// The handoff as bytes; `None` when it would exceed [`FRAME_LIMIT`].
    pub fn encode(&self) -> Option<Vec<u8>> {
        let mut parts: Vec<Vec<u8>> = vec![
            self.invoked_as.as_os_str().as_bytes().to_vec(),
            self.cwd.as_os_str().as_bytes().to_vec(),
        ];
        for (name, value) in &self.env {
            let mut p = name.as_bytes().to_vec();
            p.push(b'=');
            p.extend_from_slice(value.as_bytes());
            parts.push(p);
        }
        let body: usize = 4 + parts.iter().map(|p| 4 + p.len()).sum::<usize>();
        if MAGIC.len() + 4 + body > FRAME_LIMIT {
            return None;
        }
        let mut out = Vec::with_capacity(MAGIC.len() + 4 + body);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(body as u32).to_le_bytes());
        out.extend_from_slice(&(parts.len() as u32).to_le_bytes());
        for p in parts {
            out.extend_from_slice(&(p.len() as u32).to_le_bytes());
            out.extend_from_slice(&p);
        }
        Some(out)
    }

    /// The whole length of the handoff whose first bytes are `head`, once
    /// its first twelve bytes have come.
    pub fn length(head: &[u8]) -> Result<Option<usize>, FrameError> {
        if head.len() < MAGIC.len() + 4 {
            return if MAGIC.starts_with(&head[..head.len().min(MAGIC.len())]) {
                Ok(None)
            } else {
                Err(FrameError::Magic)
            };
        }
        if &head[..MAGIC.len()] != MAGIC {
            return Err(FrameError::Magic);
        }
        let body = u32::from_le_bytes(head[8..12].try_into().map_err(|_| FrameError::Length)?);
        let whole = MAGIC.len() + 4 + body as usize;
        if whole > FRAME_LIMIT {
            return Err(FrameError::Length);
        }
        Ok(Some(whole))
    }

    /// Reads a whole handoff; refuses anything else, never panicking.
    pub fn decode(bytes: &[u8]) -> Result<Handoff, FrameError> {
        if Handoff::length(bytes)? != Some(bytes.len()) {
            return Err(FrameError::Length);
        }
        let mut rest = &bytes[MAGIC.len() + 4..];
        let count = word(take(&mut rest, 4).ok_or(FrameError::Part(0))?);
        if count < 2 {
            return Err(FrameError::Part(count));
        }
        let mut parts = Vec::with_capacity(count.min(4096));
        for i in 0..count {
            let n = word(take(&mut rest, 4).ok_or(FrameError::Part(i))?);
            let p = take(&mut rest, n).ok_or(FrameError::Part(i))?;
            if p.contains(&0) || (i < 2 && p.is_empty()) {
                return Err(FrameError::Part(i));
            }
            parts.push(p);
        }
        if !rest.is_empty() {
            return Err(FrameError::Length);
        }
        let path = |b: &[u8]| PathBuf::from(OsStr::from_bytes(b));
        let mut env = Vec::with_capacity(parts.len() - 2);
        for (i, p) in parts.iter().enumerate().skip(2) {
            match p.iter().position(|&c| c == b'=') {
                Some(at) if at > 0 => env.push((
                    OsString::from_vec(p[..at].to_vec()),
                    OsString::from_vec(p[at + 1..].to_vec()),
                )),
                _ => return Err(FrameError::Part(i)),
            }
        }
        let (invoked_as, cwd) = (path(parts[0]), path(parts[1]));
        if !invoked_as.is_absolute() || !cwd.is_absolute() {
            return Err(FrameError::Part(if invoked_as.is_absolute() {
                1
            } else {
                0
            }));
        }
        Ok(Handoff {
            invoked_as,
            cwd,
            env,
        })
    }
}

/// The first `n` bytes of `rest`, taken off it; `None` when fewer remain.
fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if rest.len() < n {
        return None;
    }
    let (a, b) = rest.split_at(n);
    *rest = b;
    Some(a)
}

/// A little-endian `u32` of four bytes, as a length.
fn word(b: &[u8]) -> usize {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
}

/// The directory the page servers of this account keep their sockets in,
/// `/tmp/ocx-UID` (Fossil gives a CGI program no `HOME` or runtime
/// directory to go by): made when missing, and `None` unless it is a
/// directory, not a link, owned by this account and closed to every other.
pub fn private_directory() -> Option<PathBuf> {
    let uid = nix::unistd::geteuid().as_raw();
    let dir = PathBuf::from(format!("/tmp/ocx-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => return None,
    }
    is_private(&dir, uid).then_some(dir)
}

/// Whether `dir` is a directory, not a link, owned by `uid` and closed to
/// every other account.
fn is_private(dir: &Path, uid: u32) -> bool {
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
}

/// The socket of the page server running `ocx`, named by that very file
/// (its device and inode), so a program installed anew gets a server of
/// its own and never one still running the program before it.
pub fn socket_for(dir: &Path, ocx: &Path) -> Option<PathBuf> {
    let meta = std::fs::metadata(ocx).ok()?;
    Some(dir.join(format!("page-{:x}-{:x}.sock", meta.dev(), meta.ino())))
}

/// The hand-off program's whole work: hands the request to the page server, or,
/// when it cannot, starts the whole `ocx` beside it as the page (and a
/// server for the requests after, when there was none).
#[allow(clippy::disallowed_methods)] // an entry point: it reads the request's environment and starts `ocx`, as docs/architecture.md says
pub fn main() -> i32 {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let invoked = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(super::NAME));
    let invoked = cwd.join(invoked);
    let Some(ocx) = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.join("ocx")))
    else {
        return cannot_start("this program's own path is unknown");
    };
    if let Some(dir) = private_directory()
        && let Some(socket) = socket_for(&dir, &ocx)
    {
        match hand_over(&socket, &invoked, &cwd) {
            Handed::Answered(code) => return code,
            Handed::NoServer => start_server(&ocx, &socket),
            Handed::Declined => {}
        }
    }
    use std::os::unix::process::CommandExt;
    let error = std::process::Command::new(&ocx).arg0(&invoked).exec();
    cannot_start(&error.to_string())
}

/// What became of a request offered to a page server.
enum Handed {
    /// A server's child took it and answered, with this exit status.
    Answered(i32),
    /// No server listens.
    NoServer,
    /// It was not taken (nothing of it answered yet).
    Declined,
}

/// Offers this request to the server on `socket`.
#[allow(clippy::disallowed_methods)] // `ocx-cgi` hands over the whole environment Fossil gave it
fn hand_over(socket: &Path, invoked: &Path, cwd: &Path) -> Handed {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    use std::io::{IoSlice, Read, Write};
    use std::os::fd::AsRawFd;
    let Ok(stream) = std::os::unix::net::UnixStream::connect(socket) else {
        return Handed::NoServer;
    };
    let handoff = Handoff {
        invoked_as: invoked.to_path_buf(),
        cwd: cwd.to_path_buf(),
        env: std::env::vars_os().collect(),
    };
    let Some(frame) = handoff.encode() else {
        return Handed::Declined;
    };
    let fds = [0, 1, 2];
    let passed = [ControlMessage::ScmRights(&fds)];
    let Ok(sent) = sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(&frame)],
        &passed,
        MsgFlags::empty(),
        None,
    ) else {
        return Handed::Declined;
    };
    if (&stream).write_all(&frame[sent..]).is_err() {
        return Handed::Declined;
    }
    let mut byte = [0u8];
    match (&stream).read(&mut byte) {
        Ok(1) if byte[0] == TAKEN => {}
        _ => return Handed::Declined,
    }
    let_go_of_streams();
    match (&stream).read(&mut byte) {
        Ok(1) => Handed::Answered(i32::from(byte[0])),
        _ => Handed::Answered(1),
    }
}

/// Puts `/dev/null` in place of this program's standard streams once the
/// server has taken them: the server then holds Fossil's pipes alone, so
/// Fossil reads the answer's end as soon as the server has written it, not
/// when this program has also heard so and exited.
fn let_go_of_streams() {
    use nix::unistd::{dup2_stderr, dup2_stdin, dup2_stdout};
    if let Ok(null) = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let _ = (dup2_stdin(&null), dup2_stdout(&null), dup2_stderr(&null));
    }
}

/// Starts `ocx page-server SOCKET` on its own: a session of its own, no
/// standard streams, no environment, and none of Fossil's descriptors (a
/// server holding Fossil's pipe would keep its request from ending).
#[allow(clippy::disallowed_methods)] // `ocx-cgi` starts the page server, as docs/architecture.md says
fn start_server(ocx: &Path, socket: &Path) {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let mut c = std::process::Command::new(ocx);
    c.arg0("ocx")
        .arg(SERVER_COMMAND)
        .arg(socket)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: only calls async-signal-safe system calls.
    unsafe {
        c.pre_exec(|| {
            let _ = nix::unistd::setsid();
            // Every descriptor from 3 up closed on exec (CLOSE_RANGE_CLOEXEC).
            nix::libc::syscall(nix::libc::SYS_close_range, 3u32, u32::MAX, 4u32);
            Ok(())
        });
    }
    let _ = c.spawn();
}

/// A CGI answer saying the page could not start, and the exit status.
fn cannot_start(why: &str) -> i32 {
    use std::io::Write;
    let body = format!(
        "OCX's page could not start the program ocx beside ocx-cgi ({why}): reinstall OCX, with ocx and ocx-cgi in one directory"
    );
    // Flushed here: with the C library's `main`, nothing flushes it at exit.
    let mut out = std::io::stdout().lock();
    let page = super::Response {
        status: 500,
        content_type: "text/plain; charset=utf-8",
        body,
    };
    let _ = out.write_all(page.to_cgi().as_bytes());
    let _ = out.flush();
    1
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Handoff {
        Handoff {
            invoked_as: "/srv/ext/ocx-cgi".into(),
            cwd: "/srv".into(),
            env: vec![
                ("PATH_INFO".into(), "/tools".into()),
                ("QUERY_STRING".into(), "a=b=c".into()),
                ("EMPTY".into(), "".into()),
            ],
        }
    }

    #[test]
    fn a_handoff_reads_back_as_written() {
        let bytes = sample().encode().unwrap();
        assert_eq!(Handoff::length(&bytes[..12]), Ok(Some(bytes.len())));
        assert_eq!(Handoff::length(&bytes[..5]), Ok(None));
        assert_eq!(Handoff::decode(&bytes), Ok(sample()));
    }

    #[test]
    fn a_handoff_over_the_limit_is_not_made() {
        let mut h = sample();
        h.env.push(("BIG".into(), "x".repeat(FRAME_LIMIT).into()));
        assert_eq!(h.encode(), None);
    }

    #[test]
    fn what_is_not_a_whole_handoff_is_refused() {
        let bytes = sample().encode().unwrap();
        assert_eq!(
            Handoff::decode(&bytes[..bytes.len() - 1]),
            Err(FrameError::Length)
        );
        assert_eq!(
            Handoff::decode(b"GET / HTTP/1.0\r\n"),
            Err(FrameError::Magic)
        );
        let mut relative = sample();
        relative.cwd = "srv".into();
        assert_eq!(
            Handoff::decode(&relative.encode().unwrap()),
            Err(FrameError::Part(1))
        );
        let mut nameless = sample();
        nameless.env.push(("".into(), "x".into()));
        assert!(Handoff::decode(&nameless.encode().unwrap()).is_err());
    }

    #[test]
    fn only_a_directory_of_this_account_alone_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let uid = nix::unistd::geteuid().as_raw();
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(is_private(&dir, uid));
        assert!(!is_private(&dir, uid + 1), "another account's");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).unwrap();
        assert!(!is_private(&dir, uid), "others may pass through");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(!is_private(&link, uid), "a link to it");
        assert!(!is_private(&t.path().join("missing"), uid));
    }

    #[test]
    fn each_program_file_has_a_socket_of_its_own() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        std::fs::write(&a, "a").unwrap();
        std::fs::write(&b, "a").unwrap();
        let of = |p: &Path| socket_for(t.path(), p).unwrap();
        assert_ne!(of(&a), of(&b));
        let before = of(&a);
        assert_eq!(of(&a), before);
        std::fs::rename(&b, &a).unwrap();
        assert_ne!(of(&a), before, "a program installed anew over the old");
        assert!(socket_for(t.path(), &t.path().join("missing")).is_none());
    }

    proptest! {
        #[test]
        fn any_bytes_are_read_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = Handoff::length(&bytes);
            let _ = Handoff::decode(&bytes);
        }

        #[test]
        fn a_handoff_with_bytes_changed_is_read_or_refused(
            at in 0usize..200, with in any::<u8>(), cut in 0usize..200
        ) {
            let mut bytes = sample().encode().unwrap();
            let n = bytes.len();
            bytes[at % n] = with;
            bytes.truncate(n - cut % n);
            let _ = Handoff::decode(&bytes);
        }
    }
}
