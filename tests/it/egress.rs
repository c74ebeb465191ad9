//! A run whose record names `sandbox.hosts`, for real: a served node, a
//! real bubblewrap run with a network namespace of its own, and a server
//! of the test's on the host as the one listed host. The listed host is
//! `localhost:PORT`: the proxy resolves names itself, and `localhost` is a
//! name every host resolves, to the server's loopback address.

use crate::support::{Repo, Served, ServedNode, fossil};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The runner: on its record's delivery, it tries each way out, notes what
/// it reached, posts through its own `ocx --mcp`, and ends.
const PROBE: &str = r#"
PORT = int(os.environ["EGRESS_PORT"])
UDP = int(os.environ["EGRESS_UDP"])
HOST_IP = os.environ["EGRESS_IP"]
PROXY = ("127.0.0.1", int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1]))

def exchange(sock, data):
    sock.sendall(data)
    got = b""
    while True:
        try:
            chunk = sock.recv(4096)
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    return got.decode("latin-1")

def connect_via(sock, target):
    sock.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            break
        head += chunk
    status = head.split(b"\r\n")[0].decode("latin-1")
    if " 200 " in status:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        body = b""
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            body += chunk
        return status + " | " + body.decode("latin-1")
    return status

def tcp(addr):
    try:
        s = socket.create_connection(addr, timeout=5)
        s.close()
        return "CONNECTED"
    except OSError as e:
        return "REFUSED %s" % e

def through_proxy(target):
    try:
        return connect_via(socket.create_connection(PROXY, timeout=10), target)
    except OSError as e:
        return "ERROR %s" % e

def on_socket(data):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        s.connect(os.path.join(".ocx", "egress.sock"))
        s.sendall(data)
        return s.recv(4096).split(b"\r\n")[0].decode("latin-1")
    except OSError as e:
        return "ERROR %s" % e

def udp(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"out", addr)
        return "SENT"
    except OSError as e:
        return "REFUSED %s" % e

def probe():
    note({"step": "listed", "result": through_proxy("localhost:%d" % PORT)})
    try:
        plain = exchange(socket.create_connection(PROXY, timeout=10),
            ("GET http://localhost:%d/plain HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % (PORT, PORT)).encode())
    except OSError as e:
        plain = "ERROR %s" % e
    note({"step": "plain", "result": plain})
    note({"step": "other-host", "result": through_proxy("example.com:443")})
    note({"step": "number", "result": through_proxy("127.0.0.1:%d" % PORT)})
    note({"step": "other-port", "result": through_proxy("localhost:%d" % (PORT + 1 if PORT < 65535 else PORT - 1))})
    note({"step": "direct-loopback", "result": tcp(("127.0.0.1", PORT))})
    note({"step": "direct-host", "result": tcp((HOST_IP, PORT)) if HOST_IP else "none"})
    note({"step": "udp-host", "result": udp((HOST_IP or "192.0.2.1", UDP))})
    note({"step": "udp-loopback", "result": udp(("127.0.0.1", UDP))})
    try:
        socket.getaddrinfo("example.com", 443)
        dns = "RESOLVED"
    except OSError as e:
        dns = "FAILED %s" % e
    note({"step": "dns", "result": dns})
    note({"step": "forged", "result": on_socket(("CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % PORT).encode())})
    note({"step": "garbage", "result": on_socket(b"\x00\xff nonsense\r\n\r\n")})
    rpc = mcp("ocx")
    note({"step": "post", "result": rpc("tools/call", {"name": "ocx_post",
        "arguments": {"to": os.environ["OCX_RECORD"], "text": "reached the node from a hosts run"}})})

for line in sys.stdin:
    if not line.startswith("Record "):
        continue
    try:
        probe()
    except Exception as e:
        note({"step": "crash", "error": repr(e)})
    note({"step": "done"})
    break
"#;

/// A server on every address of the host: each connection counted, its
/// request read, and answered `hello` over HTTP.
fn listed_host() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            counted.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut b).unwrap_or(0) == 1 {
                    head.push(b[0]);
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                );
            });
        }
    });
    (port, seen)
}

/// This host's address on its default route, if it has one besides loopback.
fn host_address() -> String {
    UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("192.0.2.1:9").and_then(|()| s.local_addr()))
        .ok()
        .map(|a| a.ip())
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
        .map(|ip| ip.to_string())
        .unwrap_or_default()
}

struct Probed {
    node: ServedNode,
    record: String,
    steps: Vec<Value>,
    seen: Arc<AtomicUsize>,
    udp: UdpSocket,
}

impl Probed {
    fn step(&self, name: &str) -> String {
        self.steps
            .iter()
            .find(|s| s["step"] == name)
            .map(|s| s["result"].as_str().unwrap_or_default().to_string())
            .unwrap_or_else(|| panic!("no step {name}: {:#?}", self.steps))
    }

    fn output_log(&self) -> String {
        std::fs::read_to_string(
            ocx::node::config::NodeConfig::run_dir(&self.node.repo.node_root(), &self.record)
                .join("output.log"),
        )
        .unwrap_or_default()
    }

    fn response(&self) -> (String, String) {
        let until = Instant::now() + Duration::from_secs(90);
        loop {
            let thread = self.node.repo.json(&["thread", "--of", &self.record]).ok();
            let found = thread["posts"].as_array().unwrap().iter().find_map(|p| {
                match ocx::protocol::message::read(p["text"].as_str().unwrap().as_bytes()) {
                    ocx::protocol::message::Reading::Message { message }
                        if message["kind"] == "response" =>
                    {
                        Some((
                            message["outcome"].as_str().unwrap().to_string(),
                            message["note"].as_str().unwrap().to_string(),
                        ))
                    }
                    _ => None,
                }
            });
            if let Some(r) = found {
                return r;
            }
            assert!(
                Instant::now() < until,
                "never answered: {}",
                self.output_log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A served node and a run of the probe whose record lists `localhost:PORT`, the test's
/// server; what it noted.
fn probed() -> Probed {
    let (port, seen) = listed_host();
    let udp = UdpSocket::bind("0.0.0.0:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let repo = Repo::new();
    let (runner, out) = crate::support::runner_script(
        &repo,
        &format!("{}{PROBE}", crate::support::PY_RUNNER_PRELUDE),
    );
    let block = json!({"command": [runner], "input": "lines", "env": {
        "OCX_TEST_OUT": out, "OCX_TEST_FOSSIL": fossil(), "EGRESS_PORT": port.to_string(),
        "EGRESS_UDP": udp.local_addr().unwrap().port().to_string(), "EGRESS_IP": host_address()}});
    crate::support::runner_page(&repo, "probe", &block);
    let node = Served::on(repo).start();
    let listed = format!("localhost:{port}");
    let created = node.repo.json(&[
        "create",
        "--runner",
        "probe",
        "--objective",
        "Try every way out",
        "--wall",
        "5m",
        "--read-write",
        out.to_str().unwrap(),
        "--hosts",
        &listed,
    ]);
    let created = created.ok();
    assert_eq!(created["fields"]["sandbox"]["hosts"], json!([listed]));
    let record = created["record"].as_str().unwrap().to_string();
    let steps = crate::support::noted_until_done(&out, "the probe");
    Probed {
        node,
        record,
        steps,
        seen,
        udp,
    }
}

#[test]
fn a_hosts_run_reaches_its_listed_host_and_its_node_and_nothing_else() {
    let p = probed();
    let listed = p.step("listed");
    assert!(
        listed.contains(" 200 ") && listed.ends_with("hello"),
        "CONNECT to the listed host: {listed}"
    );
    let plain = p.step("plain");
    assert!(
        plain.starts_with("HTTP/1.1 200 OK") && plain.ends_with("hello"),
        "a plain request to the listed host: {plain}"
    );
    for name in ["other-host", "number", "other-port", "forged"] {
        let got = p.step(name);
        assert!(got.starts_with("HTTP/1.1 403"), "{name}: {got}");
    }
    let garbage = p.step("garbage");
    assert!(garbage.starts_with("HTTP/1.1 400"), "{garbage}");
    for name in ["direct-loopback", "direct-host"] {
        let got = p.step(name);
        assert!(got.starts_with("REFUSED") || got == "none", "{name}: {got}");
    }
    assert!(
        p.step("udp-host").starts_with("REFUSED"),
        "{}",
        p.step("udp-host")
    );
    assert!(p.step("dns").starts_with("FAILED"), "{}", p.step("dns"));
    assert_eq!(
        p.seen.load(Ordering::SeqCst),
        2,
        "the listed host saw the two connections the proxy made, and no other"
    );
    let mut buf = [0u8; 16];
    assert_eq!(
        p.udp.recv(&mut buf).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "no datagram left the run"
    );

    let posted: Value = p
        .steps
        .iter()
        .find(|s| s["step"] == "post")
        .map(|s| s["result"].clone())
        .unwrap_or_default();
    assert_eq!(posted["result"]["isError"], false, "{posted:#}");
    let hash = posted["result"]["structuredContent"]["result"]["hash"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        p.node.repo.sender(&hash).is_some(),
        "the run's post through its ocx --mcp reached the node: {posted:#}"
    );

    let (outcome, note) = p.response();
    assert_eq!(outcome, "exited", "{note}");
    assert!(note.ends_with(", 5 connections refused"), "{note}");
    let log = p.output_log();
    let refusals: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("ocx: the proxy refused"))
        .collect();
    assert_eq!(refusals.len(), 5, "{log}");
    for said in [
        "example.com is not a listed host",
        "\"127.0.0.1:",
        "is not listed",
        "not UTF-8",
    ] {
        assert!(refusals.iter().any(|l| l.contains(said)), "{said}: {log}");
    }
}

/// A record's arguments: trunk's check-ins, on a branch of its own, for a minute.
const ON_TRUNK: &[&str] = &["--checkins", "trunk", "--new-branch", "--wall", "1m"];

#[test]
fn a_record_with_a_bad_host_is_refused_naming_it() {
    let repo = Repo::new();
    for (hosts, field) in [
        ("a.example b.example 10.0.0.1", "sandbox.hosts[2]"),
        ("a.example [::1]:443", "sandbox.hosts[1]"),
        ("::1", "sandbox.hosts[0]"),
        ("a.example:0", "sandbox.hosts[0]"),
        ("a.example:https", "sandbox.hosts[0]"),
        ("a_b.example", "sandbox.hosts[0]"),
    ] {
        let r = repo.command_record("x", &[ON_TRUNK, &["--hosts", hosts]].concat());
        assert_eq!(r.refused(), field, "{hosts}");
    }
    let hosts = ["--network", "false", "--hosts", "a.example"];
    let r = repo.command_record("x", &[ON_TRUNK, &hosts].concat());
    assert_eq!(r.refused(), "sandbox.hosts");
}

#[test]
fn create_writes_the_runner_pages_hosts_into_a_record_that_names_none() {
    let repo = Repo::new();
    crate::support::runner_page(
        &repo,
        "svc",
        &json!({"command": ["/bin/true"], "input": "lines", "hosts": ["api.example.com"]}),
    );
    let create = |extra: &[&str]| {
        let mut args = vec![
            "create",
            "--runner",
            "svc",
            "--objective",
            "x",
            "--wall",
            "1m",
        ];
        args.extend_from_slice(extra);
        repo.json(&args).ok()["fields"]["sandbox"].clone()
    };
    assert_eq!(create(&[])["hosts"], json!(["api.example.com"]));
    assert_eq!(
        create(&["--hosts", "other.example:8443"])["hosts"],
        json!(["other.example:8443"]),
        "the record's own hosts, never the page's beside them"
    );
    let off = create(&["--network", "false"]);
    assert_eq!(off["network"], false);
    assert!(off.get("hosts").is_none(), "{off}");
}

/// The model relay of a runner page naming its service is one more
/// passage: a hosts run reaches it at its usual address, and finds no key.
#[test]
fn a_hosts_run_reaches_its_model_relay_through_a_passage_of_its_own() {
    use crate::relay::{KEY, create, results, search_site, step};
    let model = crate::model::Model::start(|_| crate::model::Reply::text("hello from upstream"));
    let tls = crate::tls::Tls::front(crate::tls::port_of(&model.url()));
    let (site, out) = search_site(&tls);
    let record = create(&site, &out, &["--hosts", "only.example"]);
    let all = results(&out);
    let through = step(&all, "token");
    assert_eq!(through["status"], 200, "{all:#?}");
    assert!(
        through["body"]
            .as_str()
            .unwrap_or_default()
            .contains("hello from upstream"),
        "{through:#}"
    );
    let seen = std::fs::read(out.join("seen.bin")).unwrap();
    assert!(
        seen.windows(12).any(|w| w == b"HTTPS_PROXY="),
        "the search read a hosts run's environment"
    );
    assert!(
        !seen.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
        "the model key is inside the sandbox"
    );
    site.post(&record, "please end");
    let (outcome, note) = site.response(&record);
    assert_eq!(outcome, "exited", "{note}");
    assert!(note.ends_with(" tokens"), "{note}");
}
