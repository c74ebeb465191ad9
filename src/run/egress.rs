//! A run's one way out when its record names `sandbox.hosts`: the proxy
//! its watcher serves outside the sandbox on a Unix socket, the relay to
//! the node's own address, and the forwarder that offers each inside on a
//! loopback port (a run with hosts has a network namespace of its own).
//!
//! The proxy reads one request head (`CONNECT host:port`, or a plain HTTP
//! request in absolute form), resolves the name itself and connects only
//! to a listed host and port; anything else is answered 403 (400 for what
//! is not a request), written to the run's log and counted.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::protocol::kinds;

/// The most a request head may hold, in bytes; a longer one is refused.
pub const MAX_HEAD: usize = 16 * 1024;

/// The most connections a run's proxy holds open at once; past it a new one is closed unanswered.
const MAX_OPEN: usize = 256;

/// How long the proxy waits for a request head, and for a listed host to answer its connect.
const WAIT: Duration = Duration::from_secs(30);

/// One way out offered inside a run: its loopback `port` there, forwarded to the Unix `socket`
/// its watcher serves outside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passage {
    /// The port on 127.0.0.1 inside the sandbox.
    pub port: u16,
    /// The socket outside (bound inside at the same path) each connection is forwarded to.
    pub socket: PathBuf,
}

impl Passage {
    /// The passage as the forwarder's argument: `PORT=SOCKET`.
    pub fn arg(&self) -> String {
        format!("{}={}", self.port, self.socket.display())
    }

    /// Reads a forwarder's argument, `PORT=SOCKET`.
    pub fn read(arg: &str) -> Option<Passage> {
        let (port, socket) = arg.split_once('=')?;
        let port = port.parse::<u16>().ok().filter(|p| *p > 0)?;
        (!socket.is_empty()).then(|| Passage {
            port,
            socket: PathBuf::from(socket),
        })
    }
}

/// What a request head asks of the proxy, once read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// `CONNECT host:port`: a tunnel, answered 200 once connected.
    Connect {
        /// The host as written.
        host: String,
        /// Its port.
        port: u16,
    },
    /// A plain HTTP request in absolute form, to be sent on in origin form.
    Plain {
        /// The host as written.
        host: String,
        /// Its port (80 when none).
        port: u16,
        /// The head to send the host: origin form, its `Host` the URL's, `Connection: close`,
        /// no `Proxy-` fields.
        head: Vec<u8>,
    },
}

impl Ask {
    /// The host and port asked for.
    pub fn target(&self) -> (&str, u16) {
        match self {
            Ask::Connect { host, port } | Ask::Plain { host, port, .. } => (host, *port),
        }
    }
}

/// Why the proxy would not take a request: it answers `status` and says `why` in the run's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status answered: 400 for what is not a request, 403 for a way out not listed.
    pub status: u16,
    /// What was refused, in words for the run's log.
    pub why: String,
}

fn bad(why: &str) -> Refusal {
    Refusal {
        status: 400,
        why: why.to_string(),
    }
}

/// The length of the request head at the start of `buf` (through its blank line), once whole.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4)
}

/// Reads a request head (through its blank line): what it asks, or why it is refused as
/// not a request (400). Whether the way out is listed is [`Allowed::check`]'s.
pub fn parse_head(head: &[u8]) -> Result<Ask, Refusal> {
    let text = std::str::from_utf8(head).map_err(|_| bad("a request head that is not UTF-8"))?;
    let text = text
        .strip_suffix("\r\n\r\n")
        .ok_or_else(|| bad("a request head with no end"))?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut words = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(bad("a request line that is not METHOD TARGET VERSION"));
    };
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(bad("a version other than HTTP/1.0 or HTTP/1.1"));
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(bad("a method that is not a word in capitals"));
    }
    let fields: Vec<(&str, &str)> = lines
        .map(|l| {
            l.split_once(':')
                .filter(|(name, _)| !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic()))
                .map(|(name, value)| (name, value.trim()))
                .ok_or_else(|| bad("a header line that is not NAME: VALUE"))
        })
        .collect::<Result<_, _>>()?;
    if method == "CONNECT" {
        let (host, port) = authority(target, None)?;
        return Ok(Ask::Connect { host, port });
    }
    let rest = target
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case("http://"))
        .map(|_| &target[7..])
        .ok_or_else(|| bad("a plain request not in absolute form (http://host/...)"))?;
    let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (auth, path) = rest.split_at(split);
    let (host, port) = authority(auth, Some(80))?;
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('/') => p.to_string(),
        p => format!("/{p}"),
    };
    let mut out = format!("{method} {path} {version}\r\nHost: {auth}\r\n");
    for (name, value) in fields {
        let lower = name.to_ascii_lowercase();
        if lower.starts_with("proxy-")
            || ["connection", "keep-alive", "host"].contains(&lower.as_str())
        {
            continue;
        }
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("Connection: close\r\n\r\n");
    Ok(Ask::Plain {
        host,
        port,
        head: out.into_bytes(),
    })
}

/// `host:port` (or `host` with `default`), as written: no user, no path.
fn authority(auth: &str, default: Option<u16>) -> Result<(String, u16), Refusal> {
    if auth.is_empty() || auth.contains(['@', '/', '\\', '%']) {
        return Err(bad("a target that is not host:port"));
    }
    if auth.starts_with('[') {
        let end = auth
            .find(']')
            .ok_or_else(|| bad("a target that is not host:port"))?;
        let port = match &auth[end + 1..] {
            "" => default.ok_or_else(|| bad("a target with no port"))?,
            p => port_of(p.strip_prefix(':').unwrap_or("x"))?,
        };
        return Ok((auth[..=end].to_string(), port));
    }
    match auth.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => Ok((host.to_string(), port_of(port)?)),
        Some(_) => Ok((auth.to_string(), default.unwrap_or(0))),
        None => Ok((
            auth.to_string(),
            default.ok_or_else(|| bad("a target with no port"))?,
        )),
    }
}

fn port_of(p: &str) -> Result<u16, Refusal> {
    if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("a port that is not a number"));
    }
    p.parse::<u16>()
        .map_err(|_| bad("a port that is not a number"))
}

/// The hosts and ports a run may reach, from its record's `sandbox.hosts`, and the node's own
/// address, which it always reaches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowed {
    /// Each listed host (lower case, no trailing dot) and port.
    pub hosts: Vec<(String, u16)>,
    /// The node's address as its URL writes it (`127.0.0.1:8080`), and where it is.
    pub node: Option<(String, SocketAddr)>,
}

/// Where an allowed request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Way {
    /// A listed host, by name, resolved when connecting.
    Host(String, u16),
    /// The node's own address.
    Node(SocketAddr),
}

impl Allowed {
    /// The list of a record's `sandbox.hosts` (entries not read as hosts are left out: the
    /// record's check refuses them first).
    pub fn of(entries: &[String]) -> Allowed {
        Allowed {
            hosts: entries
                .iter()
                .filter_map(|e| kinds::host_port(e).ok())
                .collect(),
            node: None,
        }
    }

    /// Where `host:port` goes, or why it is refused (403).
    pub fn check(&self, host: &str, port: u16) -> Result<Way, Refusal> {
        let forbid = |why: String| Refusal { status: 403, why };
        let shown = format!("{host}:{port}");
        if let Some((auth, at)) = &self.node
            && auth.eq_ignore_ascii_case(&shown)
        {
            return Ok(Way::Node(*at));
        }
        let (name, port) =
            kinds::host_port(&shown).map_err(|why| forbid(format!("{shown:?} {why}")))?;
        if self.hosts.iter().any(|(h, p)| *h == name && *p == port) {
            return Ok(Way::Host(name, port));
        }
        if self.hosts.iter().any(|(h, _)| *h == name) {
            return Err(forbid(format!(
                "{shown}: port {port} of {name} is not listed"
            )));
        }
        Err(forbid(format!("{shown}: {name} is not a listed host")))
    }
}

/// A proxy serving: how many requests it has refused so far.
#[derive(Debug, Clone, Default)]
pub struct Refused(Arc<AtomicU64>);

impl Refused {
    /// The refusals counted so far.
    pub fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Serves the proxy on the Unix socket `path` (made anew, mode 0600) until the process ends:
/// each connection on a thread of its own (at most 256 at once), each refusal written to `log` as a line and
/// counted in `refused` before it is answered.
pub fn serve_proxy(
    path: &Path,
    allowed: Allowed,
    log: std::fs::File,
    refused: Refused,
) -> io::Result<()> {
    let listener = bind_unix(path)?;
    let books = Arc::new(Books {
        allowed,
        log,
        refused,
    });
    std::thread::spawn(move || each_connection(listener, move |stream| proxy_one(stream, &books)));
    Ok(())
}

/// What every connection to a run's proxy shares: the list, and where refusals are kept.
struct Books {
    allowed: Allowed,
    log: std::fs::File,
    refused: Refused,
}

impl Books {
    /// Counts and logs `r`, then answers it and closes.
    fn refuse(&self, stream: &mut UnixStream, r: Refusal) {
        self.refused.0.fetch_add(1, Ordering::Relaxed);
        let line = format!("ocx: the proxy refused {}\n", r.why);
        let _ = (&self.log).write_all(line.as_bytes());
        let reason = if r.status == 403 {
            "Forbidden"
        } else {
            "Bad Request"
        };
        let _ = stream.write_all(
            format!(
                "HTTP/1.1 {} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}\n",
                r.status,
                r.why.len() + 1,
                r.why
            )
            .as_bytes(),
        );
        let _ = stream.shutdown(Shutdown::Both);
    }
}

/// Serves the relay to the node's own address `to` on the Unix socket `path`: every
/// connection (at most 256 at once) is joined to a connection to `to`, nothing read.
pub fn serve_node(path: &Path, to: SocketAddr) -> io::Result<()> {
    let listener = bind_unix(path)?;
    std::thread::spawn(move || {
        each_connection(listener, move |stream| {
            if let Ok(tcp) = TcpStream::connect_timeout(&to, WAIT) {
                join(stream, tcp, &[]);
            }
        })
    });
    Ok(())
}

/// Runs `serve` on a thread of its own for each connection `listener` accepts, at most
/// [`MAX_OPEN`] at once (one past it is closed unanswered).
fn each_connection(listener: UnixListener, serve: impl Fn(UnixStream) + Send + Sync + 'static) {
    let serve = Arc::new(serve);
    let open = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        if open.load(Ordering::Relaxed) >= MAX_OPEN {
            continue;
        }
        let (serve, open) = (serve.clone(), open.clone());
        open.fetch_add(1, Ordering::Relaxed);
        std::thread::spawn(move || {
            serve(stream);
            open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// A Unix socket listening at `path`, made anew (what was there removed, never
/// followed) and reachable by its owner alone.
pub(crate) fn bind_unix(path: &Path) -> io::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// One connection to the proxy: its head read, checked, and the way out joined, or refused.
fn proxy_one(mut stream: UnixStream, books: &Books) {
    let _ = stream.set_read_timeout(Some(WAIT));
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(end) = head_end(&buf) {
            break end;
        }
        if buf.len() > MAX_HEAD {
            return books.refuse(&mut stream, bad("a request head longer than 16 KiB"));
        }
        match stream.read(&mut chunk) {
            Ok(0) if buf.is_empty() => return,
            Ok(0) | Err(_) => return books.refuse(&mut stream, bad("a request head cut short")),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let ask = match parse_head(&buf[..end]) {
        Ok(a) => a,
        Err(r) => return books.refuse(&mut stream, r),
    };
    let (host, port) = ask.target();
    let way = match books.allowed.check(host, port) {
        Ok(w) => w,
        Err(r) => return books.refuse(&mut stream, r),
    };
    let Some(tcp) = connect(&way) else {
        let _ = stream.write_all(
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        return;
    };
    let _ = stream.set_read_timeout(None);
    let rest = buf[end..].to_vec();
    match ask {
        Ask::Connect { .. } => {
            if stream
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .is_ok()
            {
                join(stream, tcp, &rest);
            }
        }
        Ask::Plain { head, .. } => {
            let mut first = head;
            first.extend_from_slice(&rest);
            join(stream, tcp, &first);
        }
    }
}

/// Connects to where `way` goes, the name resolved here (never by the run).
fn connect(way: &Way) -> Option<TcpStream> {
    let addrs: Vec<SocketAddr> = match way {
        Way::Node(at) => vec![*at],
        Way::Host(name, port) => (name.as_str(), *port).to_socket_addrs().ok()?.collect(),
    };
    addrs
        .iter()
        .find_map(|a| TcpStream::connect_timeout(a, WAIT).ok())
}

/// Copies both ways between `unix` and `tcp` until both ends close, `first` sent to `tcp`
/// before anything else.
fn join(unix: UnixStream, mut tcp: TcpStream, first: &[u8]) {
    if tcp.write_all(first).is_err() {
        return;
    }
    let (Ok(mut unix_in), Ok(mut tcp_out)) = (unix.try_clone(), tcp.try_clone()) else {
        return;
    };
    let up = std::thread::spawn(move || {
        let _ = io::copy(&mut unix_in, &mut tcp_out);
        let _ = tcp_out.shutdown(Shutdown::Write);
    });
    let mut unix_out = unix;
    let _ = io::copy(&mut tcp, &mut unix_out);
    let _ = unix_out.shutdown(Shutdown::Write);
    let _ = up.join();
}

/// The forwarder, inside the sandbox before the run's program: binds 127.0.0.1 at each
/// passage's port, then forks; the parent becomes `program` (keeping its pid), the child
/// forwards each connection to its passage's socket and dies with the program. Returns only
/// when it could not (why, for the run's log).
pub fn forward(passages: &[Passage], program: &[String]) -> String {
    use std::os::unix::process::CommandExt;
    let Some((exe, args)) = program.split_first() else {
        return "no program given".into();
    };
    let mut bound = Vec::new();
    for p in passages {
        match TcpListener::bind(("127.0.0.1", p.port)) {
            Ok(l) => bound.push((l, p.socket.clone())),
            Err(e) => return format!("127.0.0.1:{} could not be bound: {e}", p.port),
        }
    }
    let parent = nix::unistd::getpid();
    // SAFETY: nothing before this has started a thread; the child only
    // starts threads of its own and never returns into the caller.
    match unsafe { nix::unistd::fork() } {
        Err(e) => format!("could not fork: {e}"),
        Ok(nix::unistd::ForkResult::Child) => {
            let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
            if nix::unistd::getppid() != parent {
                std::process::exit(0);
            }
            let threads: Vec<_> = bound
                .into_iter()
                .map(|(listener, socket)| std::thread::spawn(move || accept(listener, socket)))
                .collect();
            for t in threads {
                let _ = t.join();
            }
            std::process::exit(0);
        }
        Ok(nix::unistd::ForkResult::Parent { .. }) => {
            drop(bound);
            #[allow(clippy::disallowed_methods)]
            // the forwarder becomes the run's program, as docs/architecture.md says
            let e = std::process::Command::new(exe).args(args).exec();
            format!("{exe}: {e}")
        }
    }
}

fn accept(listener: TcpListener, socket: PathBuf) {
    for tcp in listener.incoming() {
        let Ok(tcp) = tcp else { continue };
        let socket = socket.clone();
        std::thread::spawn(move || {
            if let Ok(unix) = UnixStream::connect(&socket) {
                join(unix, tcp, &[]);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn allowed() -> Allowed {
        Allowed::of(&["Example.com".into(), "api.example.com:8443".into()])
    }

    #[test]
    fn only_listed_hosts_and_ports_pass() {
        let a = allowed();
        assert_eq!(
            a.check("EXAMPLE.com.", 443),
            Ok(Way::Host("example.com".into(), 443))
        );
        assert!(a.check("api.example.com", 8443).is_ok());
        for (host, port) in [
            ("example.com", 80),
            ("api.example.com", 443),
            ("other.com", 443),
            ("93.184.216.34", 443),
            ("[::1]", 443),
            ("0x7f000001", 443),
            ("", 443),
        ] {
            assert_eq!(
                a.check(host, port).map_err(|r| r.status),
                Err(403),
                "{host}:{port}"
            );
        }
    }

    #[test]
    fn heads_are_read_as_connect_or_absolute_form() {
        assert_eq!(
            parse_head(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"),
            Ok(Ask::Connect {
                host: "example.com".into(),
                port: 443
            })
        );
        let Ok(Ask::Plain { host, port, head }) = parse_head(
            b"GET http://example.com/a?b HTTP/1.1\r\nHost: elsewhere.com\r\nProxy-Authorization: x\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n",
        ) else {
            panic!("not read");
        };
        assert_eq!((host.as_str(), port), ("example.com", 80));
        assert_eq!(
            String::from_utf8_lossy(&head),
            "GET /a?b HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        for garbage in [
            &b"GET /a HTTP/1.1\r\n\r\n"[..],
            b"CONNECT example.com HTTP/1.1\r\n\r\n",
            b"CONNECT example.com:x HTTP/1.1\r\n\r\n",
            b"GET https://example.com/ HTTP/1.1\r\n\r\n",
            b"GET http://u@example.com/ HTTP/1.1\r\n\r\n",
            b"CONNECT a:1 HTTP/2\r\n\r\n",
            b"\r\n\r\n",
            b"CONNECT a:1 HTTP/1.1\r\nno colon\r\n\r\n",
        ] {
            assert_eq!(
                parse_head(garbage).map_err(|r| r.status),
                Err(400),
                "{garbage:?}"
            );
        }
    }

    #[test]
    fn passages_read_as_written() {
        let p = Passage {
            port: 8080,
            socket: "/a/b=c.sock".into(),
        };
        assert_eq!(Passage::read(&p.arg()), Some(p));
        for bad in ["", "=x", "0=/a", "x=/a", "80=", "70000=/a"] {
            assert_eq!(Passage::read(bad), None, "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn any_head_is_read_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let mut head = bytes;
            head.extend_from_slice(b"\r\n\r\n");
            if let Ok(ask) = parse_head(&head) {
                let (host, port) = ask.target();
                let _ = allowed().check(host, port);
            }
            let _ = head_end(&head);
        }

        #[test]
        fn any_request_line_is_read_or_refused(
            method in "[A-Z]{0,8}",
            target in "[ -~]{0,80}",
            fields in proptest::collection::vec("[ -~]{0,40}", 0..6),
        ) {
            let head = format!("{method} {target} HTTP/1.1\r\n{}\r\n", fields.iter().map(|f| format!("{f}\r\n")).collect::<String>());
            match parse_head(head.as_bytes()) {
                Ok(ask) => {
                    let (host, port) = ask.target();
                    if let Ok(Way::Host(name, p)) = allowed().check(host, port) {
                        prop_assert!(allowed().hosts.contains(&(name, p)));
                    }
                }
                Err(r) => prop_assert_eq!(r.status, 400),
            }
        }
    }
}
