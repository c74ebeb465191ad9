//! The served repository's side of agent machines, over real HTTP to a
//! real `fossil server` serving OCX's page: the long-poll `wait`, the
//! receipts and unaudited check-ins answered as JSON to a signed-in
//! machine, the run's login kept for a remote run (`run_login`), and the
//! clone-side tools pulling, writing in the clone and pushing.

use crate::cgi::{Ext, Server, thread};
use crate::support::Repo;
use serde_json::Value;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A served repository: `pat` may read (o) and post, `zed` may not read,
/// nobody reads nothing; each signs in with `LOGIN-pw`.
struct Site {
    repo: Repo,
    server: Server,
    _ext: Ext,
}

impl Site {
    fn new() -> Site {
        let repo = Repo::new();
        repo.user("alice", "v234").user("pat", "o").user("zed", "g");
        repo.fossil(&["user", "capabilities", "nobody", "g"]);
        repo.fossil(&["user", "capabilities", "anonymous", ""]);
        let ext = Ext::new();
        let server = Server::start(&repo, &ext);
        Site {
            repo,
            server,
            _ext: ext,
        }
    }

    /// GET `path` with `cookie` (none: unsigned); status and JSON body.
    fn get(&self, path: &str, cookie: Option<&str>) -> (u16, Value) {
        let headers: Vec<(&str, &str)> = cookie.map(|c| ("Cookie", c)).into_iter().collect();
        let (status, head, body) = self.server.request("GET", path, &headers, "");
        let value =
            serde_json::from_str(&body).unwrap_or_else(|_| panic!("not JSON: {head}\n{body}"));
        (status, value)
    }
}

/// The newest receipt's number, read from the file.
fn last_receipt(repo: &Repo) -> i64 {
    let db = rusqlite::Connection::open(&repo.file).unwrap();
    db.query_row("SELECT coalesce(max(rcvid),0) FROM rcvfrom", [], |r| {
        r.get(0)
    })
    .unwrap()
}

#[test]
fn wait_answers_when_a_receipt_arrives_and_a_cli_write_goes_through_meanwhile() {
    let site = Site::new();
    thread(&site.repo);
    let cookie = site.server.login("pat");
    let m = last_receipt(&site.repo);
    assert!(m > 0, "the thread was received");
    let (status, now) = site.get("/ext/ocx-cgi/wait?after=0", Some(&cookie));
    assert_eq!((status, now["last"].as_i64()), (200, Some(m)), "{now}");
    let (status, quiet) = site.get(
        &format!("/ext/ocx-cgi/wait?after={m}&within=1"),
        Some(&cookie),
    );
    assert_eq!(
        (status, quiet["last"].as_i64()),
        (200, Some(m)),
        "nothing arrived within 1 s: {quiet}"
    );

    let (tx, rx) = mpsc::channel();
    let (port, asked) = (site.server.port, format!("/ext/ocx-cgi/wait?after={m}"));
    let waiting_cookie = cookie.clone();
    std::thread::spawn(move || {
        let started = Instant::now();
        let answer = crate::served::request(port, &asked, &waiting_cookie);
        let _ = tx.send((answer, started.elapsed()));
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(700)).is_err(),
        "the wait answered with nothing received"
    );
    let written = Instant::now();
    thread(&site.repo);
    let wrote_in = written.elapsed();
    let ((status, answer), waited) = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(status, 200, "{answer}");
    let last = answer["last"].as_i64().unwrap();
    assert_eq!(last, last_receipt(&site.repo), "the newest receipt");
    assert!(last > m, "a receipt after {m}: {answer}");
    assert!(
        waited < Duration::from_secs(45),
        "answered on the arrival, not at the end of the wait ({waited:?}; the write took {wrote_in:?})"
    );
}

/// One GET of `path` on `port` with `cookie`: status and JSON body.
pub fn request(port: u16, path: &str, cookie: &str) -> (u16, Value) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn wait_is_refused_to_nobody_and_to_a_login_that_may_not_read() {
    let site = Site::new();
    let m = last_receipt(&site.repo);
    let (status, unsigned) = site.get("/ext/ocx-cgi/wait?after=0&within=1", None);
    assert_eq!(status, 403, "{unsigned}");
    assert_eq!(unsigned["ok"], false);
    assert_eq!(unsigned["stopped"]["field"], "user");
    assert!(unsigned.get("last").is_none(), "no receipt number told");
    let zed = site.server.login("zed");
    let (status, refused) = site.get("/ext/ocx-cgi/wait?after=0&within=1", Some(&zed));
    assert_eq!(status, 403, "{refused}");
    assert!(refused.get("last").is_none());
    let forged = "fossil-0000000000000000=AAAA%2F0%2Fpat";
    let (status, _) = site.get("/ext/ocx-cgi/wait?after=0&within=1", Some(forged));
    assert_eq!(
        status, 403,
        "a cookie the user table does not hold proves no one"
    );
    let pat = site.server.login("pat");
    for (query, field) in [
        ("", "after"),
        ("after=-1", "after"),
        ("after=x", "after"),
        ("after=1&within=0", "within"),
        ("after=1&within=51", "within"),
        ("after=1&sleep=3", "sleep"),
    ] {
        let (status, bad) = site.get(&format!("/ext/ocx-cgi/wait?{query}"), Some(&pat));
        assert_eq!(status, 400, "{query}: {bad}");
        assert_eq!(bad["stopped"]["field"], field, "{query}: {bad}");
    }
    assert_eq!(last_receipt(&site.repo), m, "nothing was written");
}

/// A served repository with the page, OCX's hook and (when `node`) its
/// node, and an agent machine's clone enrolled with `register` and
/// `approve --node`: its node login and password.
struct Enrolled {
    site: Site,
    _machine: tempfile::TempDir,
    /// The clone's server-code: the node the records name.
    code: String,
    login: String,
    password: String,
    node: bool,
}

impl Enrolled {
    fn new(node: bool) -> Enrolled {
        let site = Site::new();
        site.repo.fossil(&["user", "password", "admin", "admin-pw"]);
        site.repo
            .json(&["hook", "install", "--url", &site.server.base()])
            .ok();
        if node {
            site.repo.json(&["node", "start"]).ok();
        }
        let machine = tempfile::tempdir().unwrap();
        let (code, login, password) = enrol(&site, machine.path(), "clone");
        Enrolled {
            site,
            _machine: machine,
            code,
            login,
            password,
            node,
        }
    }

    fn cookie(&self) -> String {
        sign_in(&self.site.server, &self.login, &self.password)
    }

    /// A record addressed to `node`, written by admin on the served
    /// repository; its hash.
    fn record(&self, node: &str, user: &str) -> String {
        let r = self.site.repo.json(&[
            "create",
            "--runner",
            "command",
            "--command",
            "true",
            "--objective",
            "build it",
            "--wall",
            "10m",
            "--node",
            node,
            "--run-user",
            user,
        ]);
        r.ok()["record"].as_str().unwrap().to_string()
    }

    /// `run_login` as a POST signed in with `cookie` (none: unsigned).
    fn run_login(&self, record: &str, cookie: Option<&str>) -> (u16, Value) {
        let headers: Vec<(&str, &str)> = cookie.map(|c| ("Cookie", c)).into_iter().collect();
        let (status, head, body) = self.site.server.request(
            "POST",
            "/ext/ocx-cgi/run_login?json",
            &headers,
            &format!("record={record}"),
        );
        let value =
            serde_json::from_str(&body).unwrap_or_else(|_| panic!("not JSON: {head}\n{body}"));
        (status, value)
    }

    fn repository(&self) -> ocx::fossil::Repository {
        ocx::fossil::Repository::open(&self.site.repo.file).unwrap()
    }

    /// Waits until `done` holds of the served repository (the served side
    /// acts on its own time), 60 s at most.
    fn until(&self, what: &str, done: impl Fn(&ocx::fossil::Repository) -> bool) {
        let started = Instant::now();
        while !done(&self.repository()) {
            assert!(started.elapsed() < Duration::from_secs(60), "never: {what}");
            if !self.node {
                self.site.repo.fossil(&["backoffice", "--nodelay"]);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Enrolled {
    fn drop(&mut self) {
        if self.node {
            let _ = self.site.repo.json(&["node", "stop"]);
        }
    }
}

/// Clones the served repository over HTTP (a clone of the file itself
/// would keep its server-code) into `dir/NAME.fossil`, enrols the clone's
/// node login with `register` and `approve --node`, and collects its
/// password: the clone's server-code, the login and the password.
fn enrol(site: &Site, dir: &std::path::Path, name: &str) -> (String, String, String) {
    let clone = dir.join(format!("{name}.fossil"));
    let out = std::process::Command::new(crate::support::fossil())
        .arg("clone")
        .arg(site.server.base())
        .arg(&clone)
        .env("USER", "admin")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let code = ocx::fossil::Repository::open(&clone)
        .unwrap()
        .server_code()
        .unwrap();
    let login = ocx::protocol::found::node_login(&code);
    let register = |args: &[&str]| {
        let mut c = std::process::Command::new(crate::support::ocx_bin());
        c.args(["register", &site.server.base(), &format!("{name}.json")])
            .args(args)
            .arg("--json")
            .current_dir(dir);
        crate::support::run(c, None)
    };
    register(&["--login", &login]).refused();
    let creds = |dir: &std::path::Path| -> Value {
        serde_json::from_slice(&std::fs::read(dir.join(format!("{name}.json"))).unwrap()).unwrap()
    };
    use sha2::Digest;
    let key = hex::encode(sha2::Sha256::digest(
        creds(dir)["code"].as_str().unwrap().as_bytes(),
    ));
    site.repo
        .json(&["approve", &login, &key, "goC4w", "--node"])
        .ok();
    register(&[]).ok();
    let password = creds(dir)["password"].as_str().unwrap().to_string();
    (code, login, password)
}

/// Signs `login` in with `password` through Fossil's login form; its cookie.
fn sign_in(server: &Server, login: &str, password: &str) -> String {
    let (status, head, _) =
        server.request("POST", "/login", &[], &format!("u={login}&p={password}"));
    assert_eq!(status, 302, "{login} did not sign in: {head}");
    head.lines()
        .find_map(|l| l.strip_prefix("Set-Cookie: "))
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn a_record_for_an_agent_machine_gets_a_run_login_only_that_machine_collects_until_it_answers() {
    let e = Enrolled::new(true);
    let other = tempfile::tempdir().unwrap();
    let (_, other_login, other_password) = enrol(&e.site, other.path(), "other");
    let record = e.record(&e.code, "build-a1b2c3");
    e.until("the run's login made", |r| {
        r.remote_run(&record).unwrap().is_some()
    });
    let repo = e.repository();
    assert_eq!(
        repo.own_capabilities("build-a1b2c3").unwrap().as_deref(),
        Some(ocx::node::wake::RUN_CAPABILITIES)
    );
    assert!(
        repo.is_run_user("build-a1b2c3").unwrap(),
        "marked as a run's"
    );
    assert!(
        ocx::node::remote::RemoteRun::read(&repo, &record)
            .unwrap()
            .is_some_and(|k| k.machine == e.login),
        "kept for that machine"
    );

    let (status, got) = e.run_login(&record, Some(&e.cookie()));
    assert_eq!(status, 200, "{got}");
    let result = &got["result"];
    assert_eq!(result["record"], record.as_str());
    assert_eq!(result["user"], "build-a1b2c3");
    let password = result["password"].as_str().unwrap();
    assert!(
        repo.holds_password("build-a1b2c3", password).unwrap(),
        "the run login's own"
    );

    let refusal = ocx::tools::run_login::REFUSAL;
    let admin = sign_in(&e.site.server, "admin", "admin-pw");
    let another = sign_in(&e.site.server, &other_login, &other_password);
    for (who, cookie) in [
        ("unsigned", None),
        ("admin", Some(admin.as_str())),
        ("another machine", Some(another.as_str())),
        ("pat", Some(&*e.site.server.login("pat"))),
    ] {
        let (status, no) = e.run_login(&record, cookie);
        assert_ne!(status, 200, "{who}: {no}");
        assert_eq!(no["stopped"]["reason"], refusal, "{who}: one refusal");
        assert!(!no.to_string().contains(password), "{who}: no password");
    }
    let (_, no) = e.run_login(&"0".repeat(64), Some(&e.cookie()));
    assert_eq!(no["stopped"]["reason"], refusal, "a record never made");
    let (status, head, body) = e.site.server.request(
        "GET",
        &format!("/ext/ocx-cgi/run_login?json&record={record}"),
        &[("Cookie", &e.cookie())],
        "",
    );
    assert_eq!(status, 400, "a GET is refused: {head}");
    assert!(!body.contains(password));

    // A response from any other login does not count, and withdraws nothing.
    let standing = |repo: &ocx::fossil::Repository| {
        let rid = repo.receipt(&record).unwrap().unwrap().rid;
        ocx::protocol::found::record(repo, rid, &record)
            .unwrap()
            .unwrap()
    };
    let fossil = ocx::fossil::Fossil::locate().unwrap();
    ocx::node::respond::respond(
        &fossil,
        &repo,
        &standing(&repo),
        "pat",
        "exited",
        "forged",
        false,
    )
    .unwrap();
    e.site.server.login("pat");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        e.repository()
            .own_capabilities("build-a1b2c3")
            .unwrap()
            .as_deref(),
        Some(ocx::node::wake::RUN_CAPABILITIES),
        "pat's response counts for nothing"
    );
    let repo = e.repository();
    ocx::node::respond::respond(
        &fossil,
        &repo,
        &standing(&repo),
        &e.login,
        "exited",
        "done",
        false,
    )
    .unwrap();
    ocx::node::poke_repository(&repo);
    e.until("the run's login withdrawn", |r| {
        r.own_capabilities("build-a1b2c3").unwrap().as_deref() == Some("")
            && r.remote_run(&record).unwrap().is_none()
    });
    let (_, no) = e.run_login(&record, Some(&e.cookie()));
    assert_eq!(no["stopped"]["reason"], refusal, "nothing once answered");
}
