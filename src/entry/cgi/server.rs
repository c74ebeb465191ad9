//! `ocx page-server SOCKET`: the page server `ocx-cgi` hands requests to
//! (`handoff.rs`). It is started by an `ocx-cgi` that found none, as that program's
//! own account, and lives until nothing has come for [`IDLE`].
//!
//! Each request is answered on a thread of its own, as `ocx-cgi` answers
//! it (`cgi::answer`, the same code), from the handoff alone: the
//! request's variables, its working directory and the name it was started
//! under, and Fossil's own pipes, passed as descriptors, which it reads the
//! body from and writes the answer to. What it keeps between requests is
//! read connections to the repositories (`fossil::kept`); no viewer is
//! kept, and each request proves its viewer anew. A request is read as hostile: its
//! peer must be this very account, its handoff is refused unless whole
//! and well formed, a panic inside is answered as an internal error, and
//! past [`AT_ONCE`] requests at once the rest are declined, so `ocx-cgi`
//! starts the whole program for them as before.

use super::Request;
use super::handoff::{Handoff, TAKEN};
use crate::fossil::kept::Kept;
use nix::sys::socket::{ControlMessageOwned, MsgFlags, getsockopt, recvmsg, sockopt};
use std::io::{IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How long a server waits for a request before it exits (ten minutes):
/// one wake then, none before.
pub const IDLE: Duration = Duration::from_secs(600);

/// How many requests a server answers at once; `ocx-cgi` answers any
/// more by starting the whole program.
pub const AT_ONCE: usize = 64;

/// The bytes read of a handoff before its length is known: more than
/// Fossil's variables take.
const FIRST_READ: usize = 16 * 1024;

/// How long a request's thread waits for its handoff.
const HANDOFF_WAIT: Duration = Duration::from_secs(5);

/// The requests being answered now.
static ANSWERING: AtomicUsize = AtomicUsize::new(0);

/// Serves requests on `socket` until [`IDLE`] passes with none; 0 also
/// when another server holds the socket already.
pub fn main(socket: &Path) -> i32 {
    std::panic::set_hook(Box::new(|_| {}));
    let lock_path = socket.with_extension("lock");
    let _lock = match crate::lock::take(&lock_path, false) {
        Ok(Some(held)) => held,
        Ok(None) => return 0,
        Err(_) => return 1,
    };
    let _ = std::fs::remove_file(socket);
    let Ok(listener) = UnixListener::bind(socket) else {
        return 1;
    };
    let kept = Kept::new();
    let workers = Workers::new();
    let idle = nix::poll::PollTimeout::try_from(IDLE).unwrap_or(nix::poll::PollTimeout::MAX);
    loop {
        let mut fds = [nix::poll::PollFd::new(
            std::os::fd::AsFd::as_fd(&listener),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, idle) {
            Ok(0) if ANSWERING.load(Ordering::SeqCst) == 0 => break,
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => break,
        }
        let Ok((connection, _)) = listener.accept() else {
            continue;
        };
        if ANSWERING.fetch_add(1, Ordering::SeqCst) >= AT_ONCE {
            ANSWERING.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        workers.give(connection, &kept);
    }
    if listener_is_ours(socket, &listener) {
        let _ = std::fs::remove_file(socket);
        let _ = std::fs::remove_file(&lock_path);
    }
    0
}

/// The threads that answer requests: one taken from those waiting when
/// there is one, else a new one, which waits for the next request once
/// done (blocked, costing nothing) rather than ending.
struct Workers {
    /// Threads waiting for a request and not yet promised one.
    waiting: Arc<AtomicUsize>,
    give: std::sync::mpsc::Sender<UnixStream>,
    take: Arc<std::sync::Mutex<std::sync::mpsc::Receiver<UnixStream>>>,
}

impl Workers {
    fn new() -> Workers {
        let (give, take) = std::sync::mpsc::channel();
        Workers {
            waiting: Arc::new(AtomicUsize::new(0)),
            give,
            take: Arc::new(std::sync::Mutex::new(take)),
        }
    }

    /// Has `connection` answered by a waiting thread, else by a new one.
    fn give(&self, connection: UnixStream, kept: &Arc<Kept>) {
        let promised = self
            .waiting
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if promised {
            if self.give.send(connection).is_err() {
                ANSWERING.fetch_sub(1, Ordering::SeqCst);
            }
            return;
        }
        let (waiting, take, kept) = (self.waiting.clone(), self.take.clone(), kept.clone());
        let started = std::thread::Builder::new().spawn(move || {
            let mut next = Some(connection);
            while let Some(connection) = next.take() {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    answer(connection, &kept)
                }));
                ANSWERING.fetch_sub(1, Ordering::SeqCst);
                waiting.fetch_add(1, Ordering::SeqCst);
                let take = take
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                next = take.recv().ok();
            }
        });
        if started.is_err() {
            ANSWERING.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Whether the socket file is still the one `listener` is bound to.
fn listener_is_ours(socket: &Path, listener: &UnixListener) -> bool {
    listener
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(Path::to_path_buf))
        .is_some_and(|p| p == socket)
}

/// Answers the request handed over on `connection`, as the page answers
/// it, when its peer is this account and its handoff is whole.
fn answer(connection: UnixStream, kept: &Arc<Kept>) {
    let Ok(peer) = getsockopt(&connection, sockopt::PeerCredentials) else {
        return;
    };
    if peer.uid() != nix::unistd::geteuid().as_raw() {
        return;
    }
    let Some((handoff, [stdin, stdout, stderr])) = receive(&connection) else {
        return;
    };
    drop(stderr);
    let request = Request::from_variables(
        |name| {
            handoff
                .env
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        },
        handoff.invoked_as.clone(),
        handoff.cwd.clone(),
    );
    if (&connection).write_all(&[TAKEN]).is_err() {
        return;
    }
    let mut body = std::fs::File::from(stdin);
    let response = super::answer(&request, &mut body, Some(kept));
    let mut out = std::fs::File::from(stdout);
    let _ = out.write_all(response.to_cgi().as_bytes());
    drop((out, body));
    let _ = (&connection).write_all(&[0]);
}

/// The handoff on `connection` and the three descriptors passed with it;
/// `None` for anything else.
fn receive(connection: &UnixStream) -> Option<(Handoff, [OwnedFd; 3])> {
    connection.set_read_timeout(Some(HANDOFF_WAIT)).ok()?;
    // Room for a handoff as large as most are; grown once its length is
    // read, up to FRAME_LIMIT (Handoff::length refuses more).
    let mut buffer = vec![0u8; FIRST_READ];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 3]);
    let (got, fds) = {
        let mut iov = [IoSliceMut::new(&mut buffer)];
        let message = recvmsg::<()>(
            connection.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .ok()?;
        let mut fds: Vec<OwnedFd> = Vec::new();
        for c in message.cmsgs().ok()? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: each descriptor was just received, and is owned
                // by this process alone.
                fds.extend(
                    raw.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
        (message.bytes, fds)
    };
    let fds: [OwnedFd; 3] = fds.try_into().ok()?;
    let mut have = got;
    let whole = loop {
        match Handoff::length(&buffer[..have]) {
            Ok(Some(n)) => break n,
            Ok(None) => {}
            Err(_) => return None,
        }
        let n = (&*connection).read(&mut buffer[have..]).ok()?;
        if n == 0 {
            return None;
        }
        have += n;
    };
    if have > whole {
        return None;
    }
    buffer.resize(whole, 0);
    while have < whole {
        let n = (&*connection).read(&mut buffer[have..whole]).ok()?;
        if n == 0 {
            return None;
        }
        have += n;
    }
    Some((Handoff::decode(&buffer[..whole]).ok()?, fds))
}
