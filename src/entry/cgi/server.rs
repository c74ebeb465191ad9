//! `ocx page-server SOCKET`: the page server `ocx-cgi` hands requests to
//! (`handoff.rs`). It is started by an `ocx-cgi` that found none, as that program's
//! own account, and lives until nothing has come for as long as the node
//! of each repository it served allows since its last request there
//! (`page_idle_seconds` in the node's configuration, a minute unless set).
//! Once no request has come for [`SETTLE`], it gives back the memory its
//! last requests left, so what it holds while it waits is little more
//! than its program.
//!
//! Each request is answered, as `ocx-cgi` answers it (`cgi::answer`, the
//! same code), by the thread that woke for it, which first hands the
//! waiting for the next to another (`serve`). It is answered from the
//! handoff alone: the request's variables, its working directory and the
//! name it was started under, and Fossil's own pipes, passed as
//! descriptors, which it reads the body from and writes the answer to.
//! What it keeps between requests is read connections to the
//! repositories (`fossil::kept`); no viewer is kept, and each request
//! proves its viewer anew. A request is read as hostile: its peer must be
//! this very account, its handoff is refused unless whole and well
//! formed, a panic inside is answered as an internal error, and past
//! [`AT_ONCE`] requests at once the rest are declined, so `ocx-cgi`
//! starts the whole program for them as before.

use super::Request;
use super::handoff::{Handoff, TAKEN};
use crate::fossil::kept::Kept;
use nix::sys::socket::{ControlMessageOwned, MsgFlags, getsockopt, recvmsg, sockopt};
use std::io::{IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a server waits for its first request before it exits, and
/// after a request for a repository whose node says nothing.
pub const IDLE: Duration = crate::node::config::PAGE_IDLE;

/// How long a server waits with no request before it gives back the
/// memory its last requests left (SQLite's cached pages, the heap freed):
/// past the burst of one page's requests, well before the next click.
pub const SETTLE: Duration = Duration::from_secs(2);

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

/// When the server ends unless a request comes: [`IDLE`] after it started
/// until a request is answered, then the latest of each repository's last
/// answered request and the idle its node allows. What a node allows is
/// read only when the server looks at its end, once its requests have
/// stopped, never on a request's way (HISTORY 482).
struct Ends(std::sync::Mutex<Answered>);

/// When the server started, and when a request was last answered for
/// each repository (none: a request that named no repository).
struct Answered {
    started: Instant,
    last: std::collections::HashMap<Option<PathBuf>, Instant>,
}

impl Ends {
    fn new() -> Ends {
        Ends(std::sync::Mutex::new(Answered {
            started: Instant::now(),
            last: std::collections::HashMap::new(),
        }))
    }

    fn answered(&self) -> std::sync::MutexGuard<'_, Answered> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A request for `repository` answered now.
    fn answered_for(&self, repository: Option<PathBuf>) {
        self.answered().last.insert(repository, Instant::now());
    }

    /// The time left; none once it has passed.
    fn left(&self, kept: &Arc<Kept>) -> Duration {
        let (started, last): (Instant, Vec<(Option<PathBuf>, Instant)>) = {
            let answered = self.answered();
            let last = answered.last.iter().map(|(r, at)| (r.clone(), *at));
            (answered.started, last.collect())
        };
        let at = last
            .iter()
            .map(|(repository, at)| *at + idle_for(repository.as_deref(), kept))
            .max()
            .unwrap_or(started + IDLE);
        at.saturating_duration_since(Instant::now())
    }
}

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
    few_heaps();
    let server = Arc::new(Server {
        listener,
        kept: Kept::new(),
        ends: Ends::new(),
        leading: std::sync::Mutex::new(Leading {
            settled: true,
            ended: false,
            until: None,
        }),
        waiting: AtomicUsize::new(0),
    });
    serve(&server);
    if listener_is_ours(socket, &server.listener) {
        let _ = std::fs::remove_file(socket);
        let _ = std::fs::remove_file(&lock_path);
    }
    0
}

/// What the server's threads share.
struct Server {
    listener: UnixListener,
    kept: Arc<Kept>,
    ends: Ends,
    /// Held by the one thread waiting for the next request, the leader;
    /// the others wait for it here.
    leading: std::sync::Mutex<Leading>,
    /// Threads waiting to lead.
    waiting: AtomicUsize,
}

/// What the leader knows of the server.
struct Leading {
    /// Whether what the last requests left has been given back.
    settled: bool,
    /// Whether the server has ended: each thread that leads next returns.
    ended: bool,
    /// When the server ends, as read once it settled.
    until: Option<Instant>,
}

/// A thread of the server, the first of which is the program's own: it
/// waits to lead, takes the next request as leader, hands the leading to
/// a thread waiting for it (starting one when none is), and answers the
/// request itself; then waits to lead again. The request is answered by
/// the thread that woke for it, with no second thread to wake on its way
/// (HISTORY 482). Returns once the server has ended.
fn serve(server: &Arc<Server>) {
    loop {
        server.waiting.fetch_add(1, Ordering::SeqCst);
        let mut leading = server
            .leading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        server.waiting.fetch_sub(1, Ordering::SeqCst);
        let Some(connection) = next_request(server, &mut leading) else {
            return;
        };
        if server.waiting.load(Ordering::SeqCst) == 0 {
            let next = server.clone();
            // Should no thread start, this one leads again once it has answered.
            let _ = std::thread::Builder::new().spawn(move || serve(&next));
        }
        drop(leading);
        let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            answer(&connection, &server.kept)
        }));
        // A connection that handed over no request moves nothing.
        if let Ok(Some(repository)) = answered {
            server.ends.answered_for(repository);
        }
        ANSWERING.fetch_sub(1, Ordering::SeqCst);
        // Closed once the request no longer counts, so a client that sees
        // it close finds room for the next.
        drop(connection);
    }
}

/// The next request to answer, as the leader waits for it; `None` once
/// the server has ended. Past [`AT_ONCE`] requests at once, a request is
/// declined (closed on), and `ocx-cgi` answers it by the whole program.
fn next_request(server: &Server, leading: &mut Leading) -> Option<UnixStream> {
    loop {
        if leading.ended {
            return None;
        }
        let mut fds = [nix::poll::PollFd::new(
            std::os::fd::AsFd::as_fd(&server.listener),
            nix::poll::PollFlags::POLLIN,
        )];
        // Until what the last requests left is given back, and while a
        // request is answered (its end moves the server's on), looked at
        // again every SETTLE.
        let answering = ANSWERING.load(Ordering::SeqCst) > 0;
        let wait = if leading.settled && !answering {
            let until = *leading
                .until
                .get_or_insert_with(|| Instant::now() + server.ends.left(&server.kept));
            until.saturating_duration_since(Instant::now())
        } else {
            SETTLE
        };
        let wait = nix::poll::PollTimeout::try_from(wait).unwrap_or(nix::poll::PollTimeout::MAX);
        match nix::poll::poll(&mut fds, wait) {
            Ok(0) if ANSWERING.load(Ordering::SeqCst) > 0 => continue,
            Ok(0) if !leading.settled => {
                // Read before the code is let go of, which reading the
                // nodes' configurations would take back.
                leading.until = Some(Instant::now() + server.ends.left(&server.kept));
                server.kept.release_memory();
                give_back_heap();
                let_go_of_code();
                leading.settled = true;
                continue;
            }
            Ok(0) if server.ends.left(&server.kept).is_zero() => {
                leading.ended = true;
                return None;
            }
            Ok(0) => {
                // A node that now allows longer: read again.
                leading.until = None;
                continue;
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => {
                leading.ended = true;
                return None;
            }
        }
        let Ok((connection, _)) = server.listener.accept() else {
            continue;
        };
        leading.settled = false;
        leading.until = None;
        if ANSWERING.fetch_add(1, Ordering::SeqCst) >= AT_ONCE {
            ANSWERING.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        return Some(connection);
    }
}

/// Holds the C library's allocator to two heaps, however many threads
/// answer at once: each heap keeps what its threads freed, and a page's
/// requests are few and short, so more heaps would buy no speed.
fn few_heaps() {
    #[cfg(target_env = "gnu")]
    // SAFETY: sets one of the allocator's tunables, before any thread of
    // the server's is started.
    unsafe {
        nix::libc::mallopt(nix::libc::M_ARENA_MAX, 2);
    }
}

/// Gives the heap's freed memory back to the system.
fn give_back_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns freed memory; it is safe at any time.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// Lets go of the pages of the program's code the server has touched:
/// they stay in the system's page cache, and the next request's first
/// touch of each maps it back (a minor fault, no read from disk). Only
/// the mapping of code is let go of, which is never written; the
/// program's data, relocated as it started, is kept.
fn let_go_of_code() {
    let here = let_go_of_code as fn() as usize;
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some("r-xp")) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((Ok(start), Ok(end))) = range
            .split_once('-')
            .map(|(a, b)| (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)))
        else {
            continue;
        };
        if (start..end).contains(&here) {
            // SAFETY: the range is this program's own mapping of its code,
            // read-only and never written, so the pages given up are read
            // back from the same file, unchanged, when next touched.
            unsafe {
                nix::libc::madvise(
                    start as *mut nix::libc::c_void,
                    end - start,
                    nix::libc::MADV_DONTNEED,
                );
            }
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
/// it, when its peer is this account and its handoff is whole; the
/// repository it named, if any.
fn answer(connection: &UnixStream, kept: &Arc<Kept>) -> Option<Option<PathBuf>> {
    let peer = getsockopt(connection, sockopt::PeerCredentials).ok()?;
    if peer.uid() != nix::unistd::geteuid().as_raw() {
        return None;
    }
    let (handoff, [stdin, stdout, stderr]) = receive(connection)?;
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
    (&*connection).write_all(&[TAKEN]).ok()?;
    let mut body = std::fs::File::from(stdin);
    let response = super::answer(&request, &mut body, Some(kept));
    let mut out = std::fs::File::from(stdout);
    let _ = out.write_all(response.to_cgi().as_bytes());
    drop((out, body, response));
    let _ = (&*connection).write_all(&[0]);
    Some(request.repository.as_ref().map(|r| request.cwd.join(r)))
}

/// How long the node of `repository` lets the server live on after its
/// last request: its `page_idle_seconds`, else [`IDLE`] (no repository, a
/// repository that is no node, or whose node's configuration this
/// account cannot read, included).
fn idle_for(repository: Option<&Path>, kept: &Arc<Kept>) -> Duration {
    repository
        .and_then(|r| kept.repository(r).ok())
        .and_then(|repo| crate::node::root_of(&repo).ok().flatten())
        .and_then(|root| crate::node::config::NodeConfig::load(&root))
        .map_or(IDLE, |c| c.page_idle())
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
