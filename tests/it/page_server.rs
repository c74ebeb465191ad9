//! The page as installed: `ocx-cgi`, the hand-off program, passing each
//! request to OCX's page server, or starting `ocx` beside it when it
//! cannot. Each test copies both programs into a directory of its own, so
//! its server is its own (a server is named by its program's file), and
//! ends that server when done.

use crate::cgi::{Ext, Page, cgi, cgi_raw, repo, thread};
use crate::support::Repo;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `ocx` and `ocx-cgi` copied side by side into a directory of their own,
/// and an extroot whose `ocx-cgi` links to that copy.
struct Installed {
    dir: tempfile::TempDir,
    ext: Ext,
}

impl Installed {
    fn new() -> Installed {
        let dir = tempfile::Builder::new()
            .prefix("ocx-installed-")
            .tempdir()
            .unwrap();
        for name in ["ocx", "ocx-cgi"] {
            let from = Path::new(env!("CARGO_BIN_EXE_ocx")).with_file_name(name);
            std::fs::copy(from, dir.path().join(name)).unwrap();
        }
        let ext = Ext::linked_to(&dir.path().join("ocx-cgi"));
        Installed { dir, ext }
    }

    fn ocx(&self) -> PathBuf {
        self.dir.path().join("ocx")
    }

    /// The socket this copy's server listens on.
    fn socket(&self) -> PathBuf {
        let dir = ocx::entry::cgi::handoff::private_directory().unwrap();
        ocx::entry::cgi::handoff::socket_for(&dir, &self.ocx()).unwrap()
    }

    /// Waits until the server listens on `socket`.
    fn until_listening(socket: &Path) {
        let until = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(socket).is_err() {
            assert!(
                Instant::now() < until,
                "no page server at {}",
                socket.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Lets `ocx` beside `ocx-cgi` be started, or not.
    fn startable(&self, yes: bool) {
        let mode = if yes { 0o755 } else { 0o644 };
        std::fs::set_permissions(self.ocx(), std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        end_page_server(&self.ocx());
    }
}

/// Ends the page server of the program `ocx` (its command line names its
/// socket), and removes its socket and lock.
pub fn end_page_server(ocx: &Path) {
    let Some(dir) = ocx::entry::cgi::handoff::private_directory() else {
        return;
    };
    let Some(socket) = ocx::entry::cgi::handoff::socket_for(&dir, ocx) else {
        return;
    };
    let _ = Command::new("pkill")
        .arg("-f")
        .arg(format!("page-server {}", socket.display()))
        .status();
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(socket.with_extension("lock"));
}

/// The tools' list as JSON, as the page answers it to `alice`.
fn list(ext: &Ext, repo: &Repo) -> Page {
    cgi(
        ext,
        repo,
        &[("FOSSIL_USER", "alice"), ("QUERY_STRING", "json")],
        b"",
    )
}

/// An answer without how long it took.
fn timeless(page: &Page) -> serde_json::Value {
    let mut answer = page.answer();
    answer.as_object_mut().unwrap().remove("took_ms");
    answer
}

#[test]
fn a_request_handed_to_the_page_server_is_answered_as_the_program_answers_it() {
    let repo = repo();
    let root = thread(&repo);
    let installed = Installed::new();
    let direct = Ext::new();
    let expected = timeless(&list(&direct, &repo));
    assert_eq!(expected["ok"], true, "{expected}");

    // The first request finds no server: `ocx` answers it, and a server starts.
    let first = list(&installed.ext, &repo);
    assert_eq!((first.status, timeless(&first)), (200, expected.clone()));
    Installed::until_listening(&installed.socket());

    // With `ocx` no longer startable, only the server can answer.
    installed.startable(false);
    let served = list(&installed.ext, &repo);
    assert_eq!((served.status, timeless(&served)), (200, expected));
    let page = cgi(&installed.ext, &repo, &[("FOSSIL_USER", "alice")], b"");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("OCX console"), "{}", page.body);

    // A write: the form's body is read from Fossil's own pipe, and the post
    // is sent as the viewer the cookie proves, whatever FOSSIL_USER says.
    let form = format!("to={root}&text=Handed+over.");
    let path = "/post";
    let written = cgi(
        &installed.ext,
        &repo,
        &[
            ("FOSSIL_USER", "alice"),
            ("PATH_INFO", path),
            ("QUERY_STRING", "json"),
            ("HTTP_REFERER", crate::cgi::OWN),
        ],
        form.as_bytes(),
    );
    let answer = written.answer();
    assert_eq!(answer["ok"], true, "{answer}");
    let hash = answer["result"]["hash"].as_str().unwrap();
    assert_eq!(repo.sender(hash).as_deref(), Some("alice"));
    installed.startable(true);
}

#[test]
fn without_a_server_or_a_program_the_page_says_what_to_do() {
    let repo = repo();
    let installed = Installed::new();
    installed.startable(false);
    let page = cgi_raw(&installed.ext, &repo, &[("QUERY_STRING", "json")], b"");
    assert_eq!(page.status, 500);
    assert!(
        page.body.contains("ocx and ocx-cgi in one directory"),
        "{}",
        page.body
    );
}

#[test]
fn the_hand_off_program_fossil_starts_for_each_request_loads_no_shared_library() {
    let program = std::fs::read(env!("CARGO_BIN_EXE_ocx-cgi")).unwrap();
    let field = |at: usize, n: usize| {
        program[at..at + n]
            .iter()
            .rev()
            .fold(0usize, |v, b| v << 8 | usize::from(*b))
    };
    assert_eq!(&program[..5], b"\x7fELF\x02", "not a 64-bit ELF program");
    let (table, size, count) = (field(0x20, 8), field(0x36, 2), field(0x38, 2));
    // PT_INTERP: the dynamic loader the kernel would start first, to find
    // and relocate the C library before the program's first instruction.
    const INTERP: usize = 3;
    let kinds: Vec<usize> = (0..count).map(|i| field(table + i * size, 4)).collect();
    assert!(!kinds.is_empty(), "no program headers");
    assert!(
        !kinds.contains(&INTERP),
        "ocx-cgi names a dynamic loader (HISTORY 480): {kinds:?}"
    );
}

/// What each Python client below begins with: a handoff as `ocx-cgi`
/// writes it, `parts` after the magic.
const FRAME: &str = r#"
import os, socket, struct, sys
def frame(parts):
    body = struct.pack("<I", len(parts)) + b"".join(struct.pack("<I", len(p)) + p for p in parts)
    return b"OCXPAGE1" + struct.pack("<I", len(body)) + body
"#;

/// One request handed over in `mode`: well formed, or each way it may not be.
const CLIENT: &str = r#"
sock, repo, mode = sys.argv[1], sys.argv[2], sys.argv[3]
env = [b"FOSSIL_REPOSITORY=" + repo.encode(), b"QUERY_STRING=json", b"REQUEST_METHOD=GET",
       b"FOSSIL_USER=alice", b"HTTP_HOST=example.org"]
good = frame([b"/nowhere/ocx-cgi", b"/"] + env)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sock)
except OSError as e:
    print("refused:", e.errno, flush=True); sys.exit(0)
s.settimeout(20)
try:
    if mode == "good":
        socket.send_fds(s, [good], [0, 1, 2])
    elif mode == "garbage":
        s.sendall(os.urandom(4096))
    elif mode == "no-fds":
        s.sendall(good)
    elif mode == "cut":
        socket.send_fds(s, [good[: len(good) // 2]], [0, 1, 2]); s.shutdown(socket.SHUT_WR)
    elif mode == "huge":
        socket.send_fds(s, [b"OCXPAGE1" + struct.pack("<I", 0xFFFFFFF0)], [0, 1, 2])
    elif mode == "nul":
        socket.send_fds(s, [frame([b"/x/ocx-cgi", b"/", b"A=\x00"])], [0, 1, 2])
except (BrokenPipeError, ConnectionResetError):
    print("closed", flush=True); sys.exit(0)
try:
    got = s.recv(1)
except ConnectionResetError:
    got = b""
print("taken" if got == b"T" else "closed", flush=True)
if got == b"T":
    s.recv(1)
"#;

/// The Python client above, as `uid` (none: this account), against
/// `socket`; what it printed.
fn client(socket: &Path, repo: &Repo, mode: &str, uid: Option<u32>) -> String {
    python(CLIENT, socket, repo, mode, uid)
}

/// `script` after [`FRAME`], given `socket`, `repo` and `arg`, as `uid`
/// (none: this account); what it printed.
fn python(script: &str, socket: &Path, repo: &Repo, arg: &str, uid: Option<u32>) -> String {
    let mut c = Command::new("python3");
    c.arg("-c")
        .arg(format!("{FRAME}{script}"))
        .arg(socket)
        .arg(&repo.file)
        .arg(arg)
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(uid) = uid {
        std::os::unix::process::CommandExt::uid(&mut c, uid);
        std::os::unix::process::CommandExt::gid(&mut c, uid);
    }
    let out = c.output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// A page server started by a test, ended when dropped.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A page server of the copied `ocx` on a socket in `dir`, which every
/// account may enter, the socket open to all: only its peer check stands.
fn open_server(installed: &Installed, dir: &Path) -> (Server, PathBuf) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.join("page.sock");
    let server = Command::new(installed.ocx())
        .arg("page-server")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server(server);
    Installed::until_listening(&socket);
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o777)).unwrap();
    (server, socket)
}

#[test]
fn another_account_cannot_hand_the_server_a_request() {
    let repo = repo();
    let installed = Installed::new();
    let dir = tempfile::tempdir().unwrap();
    let (_server, socket) = open_server(&installed, dir.path());
    let nobody = 65534;

    // This account is answered: the list comes on the client's own output.
    let own = client(&socket, &repo, "good", None);
    assert!(
        own.contains("\"tool\": \"list\"") && own.contains("taken"),
        "{own}"
    );

    // Another account reaching the socket is closed on, unanswered.
    let other = client(&socket, &repo, "good", Some(nobody));
    assert_eq!(other.trim(), "closed", "{other}");

    // And where `ocx-cgi` keeps its sockets, another account cannot even
    // connect: the directory is this account's alone.
    let private = installed.socket();
    let _ = list(&installed.ext, &repo);
    Installed::until_listening(&private);
    let outside = client(&private, &repo, "good", Some(nobody));
    assert!(outside.starts_with("refused: 13"), "{outside}");
}

#[test]
fn a_malformed_handoff_is_closed_on_and_the_server_goes_on() {
    let repo = repo();
    let installed = Installed::new();
    let dir = tempfile::tempdir().unwrap();
    let (mut server, socket) = open_server(&installed, dir.path());
    for mode in ["garbage", "no-fds", "cut", "huge", "nul"] {
        let said = client(&socket, &repo, mode, None);
        assert_eq!(said.trim(), "closed", "{mode}: {said}");
    }
    let after = client(&socket, &repo, "good", None);
    assert!(
        after.contains("\"ok\": true") && after.contains("taken"),
        "{after}"
    );
    assert!(server.0.try_wait().unwrap().is_none(), "the server goes on");
}

/// Python holding `n` requests at once in the server: each a POST whose
/// body has not come, then what the server does with one more, with one
/// let go, and with one more after.
const HOLDING: &str = r#"
sock, repo, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def hand(env, stdin, stdout):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock)
    s.settimeout(30)
    # A declined request may be closed on before its handoff is sent.
    try:
        socket.send_fds(s, [frame([b"/nowhere/ocx-cgi", b"/"] + env)], [stdin, stdout, 2])
        return s, s.recv(1) == b"T"
    except (BrokenPipeError, ConnectionResetError):
        return s, False
def read_all(fd):
    out = b""
    while True:
        b = os.read(fd, 65536)
        if not b:
            return out
        out += b
base = [b"FOSSIL_REPOSITORY=" + repo.encode(), b"FOSSIL_USER=alice", b"HTTP_HOST=example.org",
        b"QUERY_STRING=json"]
post = base + [b"REQUEST_METHOD=POST", b"PATH_INFO=/status", b"CONTENT_LENGTH=2",
               b"CONTENT_TYPE=application/json"]
get = base + [b"REQUEST_METHOD=GET"]
def get_list():
    null = os.open(os.devnull, os.O_RDONLY)
    r, w = os.pipe()
    s, taken = hand(get, null, w)
    os.close(w)
    os.close(null)
    answer = read_all(r) if taken else b""
    return taken, answer
held = []
for i in range(n):
    body_r, body_w = os.pipe()
    out_r, out_w = os.pipe()
    s, taken = hand(post, body_r, out_w)
    os.close(body_r)
    os.close(out_w)
    held.append((s, body_w, out_r, taken))
print("held", sum(1 for h in held if h[3]), flush=True)
taken, _ = get_list()
print("one more", "taken" if taken else "declined", flush=True)
s0, w0, r0, _ = held[0]
os.write(w0, b"{}")
os.close(w0)
first = read_all(r0)
s0.settimeout(30)
while s0.recv(1):
    pass
print("the first answered", b'"tool": "status"' in first, flush=True)
taken, answer = get_list()
print("then", "taken" if taken else "declined", b'"tool": "list"' in answer, flush=True)
for s, w, r, _ in held[1:]:
    os.close(w)
    read_all(r)
print("all answered", flush=True)
"#;

#[test]
fn requests_are_answered_at_once_up_to_the_limit_and_past_it_declined() {
    let repo = repo();
    let installed = Installed::new();
    let dir = tempfile::tempdir().unwrap();
    let (mut server, socket) = open_server(&installed, dir.path());
    let at_once = ocx::entry::cgi::server::AT_ONCE;
    let said = python(HOLDING, &socket, &repo, &at_once.to_string(), None);
    assert!(
        said.contains(&format!("held {at_once}\n")),
        "each request was taken while the others waited for their bodies: {said}"
    );
    assert!(said.contains("one more declined\n"), "{said}");
    assert!(said.contains("the first answered True\n"), "{said}");
    assert!(said.contains("then taken True\n"), "{said}");
    assert!(said.contains("all answered\n"), "{said}");
    assert!(server.0.try_wait().unwrap().is_none(), "the server goes on");
}

/// Waits until `server` has ended, up to `within`; whether it has.
fn ended_within(server: &mut Server, within: Duration) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if server.0.try_wait().unwrap().is_some() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

#[test]
fn the_server_ends_once_the_idle_its_node_allows_has_passed_and_waits_a_minute_elsewhere() {
    let installed = Installed::new();
    let node = repo();
    node.json(&["hook", "install", "--url", "http://127.0.0.1:9/"])
        .ok();
    let root = ocx::node::root_of(&ocx::fossil::Repository::open(&node.file).unwrap())
        .unwrap()
        .expect("a node");
    let config = ocx::node::config::NodeConfig::file(&root);
    let mut set: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    set["page_idle_seconds"] = 1.into();
    std::fs::write(&config, set.to_string()).unwrap();
    eprintln!(
        "DEBUG {} {} {:?}",
        config.display(),
        std::fs::read_to_string(&config).unwrap(),
        node.file
    );

    // A request for the node's repository: the server ends a second
    // after it (and the moment it gives its memory back), its socket gone.
    let dir = tempfile::tempdir().unwrap();
    let (mut server, socket) = open_server(&installed, dir.path());
    assert!(client(&socket, &node, "good", None).contains("taken"));
    assert!(
        ended_within(&mut server, Duration::from_secs(30)),
        "the page server still runs 30 s after a request its node allows a second of idle"
    );
    assert!(!socket.exists(), "its socket is left behind");

    // A repository that is no node: the server waits the minute.
    let plain = repo();
    let dir = tempfile::tempdir().unwrap();
    let (mut server, socket) = open_server(&installed, dir.path());
    assert!(client(&socket, &plain, "good", None).contains("taken"));
    assert!(
        !ended_within(&mut server, Duration::from_secs(5)),
        "the page server ended within 5 s of a request for a repository that is no node"
    );
}
