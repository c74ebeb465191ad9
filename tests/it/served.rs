//! The served repository's side of agent machines, over real HTTP to a
//! real `fossil server` serving OCX's page: the long-poll `wait`, the
//! receipts and unaudited check-ins answered as JSON to a signed-in
//! machine, the run's login kept for a remote run (`run_login`), and the
//! clone-side tools pulling, writing in the clone and pushing.

use crate::cgi::{Ext, served_as, thread};
use crate::support::{Page, Repo, Served, ServedNode};
use serde_json::Value;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A served repository: `pat` may read (o) and post, `zed` may not read,
/// nobody reads nothing; each signs in with `LOGIN-pw`.
pub(crate) struct Site {
    pub(crate) server: ServedNode,
    _ext: Ext,
}

impl Site {
    fn new() -> Site {
        Site::serving(Ext::new())
    }

    /// The same repository served with Fossil's own pages alone: an
    /// extroot holding no `ocx-cgi`, so `/ext/ocx-cgi` is Fossil's 404.
    fn without_page() -> Site {
        Site::serving(Ext {
            dir: tempfile::tempdir().unwrap(),
        })
    }

    fn serving(ext: Ext) -> Site {
        let repo = Repo::new();
        repo.fossil(&["user", "capabilities", "nobody", "g"]);
        repo.fossil(&["user", "capabilities", "anonymous", ""]);
        let server = served_as(repo, &ext, |s| {
            s.login("alice", "v234").login("pat", "o").login("zed", "g")
        });
        Site { server, _ext: ext }
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
    thread(&site.server.repo);
    let cookie = site.server.login("pat");
    let m = last_receipt(&site.server.repo);
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
    thread(&site.server.repo);
    let wrote_in = written.elapsed();
    let ((status, answer), waited) = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(status, 200, "{answer}");
    let last = answer["last"].as_i64().unwrap();
    assert_eq!(last, last_receipt(&site.server.repo), "the newest receipt");
    assert!(last > m, "a receipt after {m}: {answer}");
    assert!(
        waited < Duration::from_secs(45),
        "answered on the arrival, not at the end of the wait ({waited:?}; the write took {wrote_in:?})"
    );
}

/// A site where, after receipt M, newbie's post is held for moderation
/// and alice's is public: the site, M, the held post's hash, the public
/// one's, and pat's login cookie.
fn held_and_public() -> (Site, i64, String, String, String) {
    let site = Site::new();
    site.server.repo.user("newbie", "o3");
    thread(&site.server.repo);
    let m = last_receipt(&site.server.repo);
    let held = site
        .server
        .repo
        .json(&[
            "post", "--user", "newbie", "--title", "Hi", "--text", "Held.",
        ])
        .ok_str("hash");
    let public = thread(&site.server.repo);
    let cookie = site.server.login("pat");
    (site, m, held, public, cookie)
}

#[test]
fn wait_tells_who_sent_what_arrived_and_never_a_held_posts_hash() {
    let (site, m, held, public, cookie) = held_and_public();
    let (status, answer) = site.get(&format!("/ext/ocx-cgi/wait?after={m}"), Some(&cookie));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["last"].as_i64(),
        Some(last_receipt(&site.server.repo))
    );
    let told = answer["received"].as_array().unwrap();
    let said = told
        .iter()
        .find(|r| r["hash"] == public.as_str())
        .unwrap_or_else(|| panic!("the new post told: {answer}"));
    assert_eq!(said["received"], true);
    assert_eq!(said["user"], "alice", "its sender by the receipt");
    assert!(
        said["capabilities"].as_str().unwrap().contains('4'),
        "{said}"
    );
    assert!(
        !answer.to_string().contains(&held),
        "a post held for moderation is not told: {answer}"
    );
    assert!(
        told.iter().all(|r| r["rcvid"].as_i64().unwrap() > m),
        "only what came after receipt {m}: {answer}"
    );
    let (_, quiet) = site.get(
        &format!("/ext/ocx-cgi/wait?after={}&within=1", answer["last"]),
        Some(&cookie),
    );
    assert_eq!(
        quiet["received"],
        serde_json::json!([]),
        "nothing new: {quiet}"
    );
}

#[test]
fn wait_carries_what_arrived_when_asked_whole_and_never_a_held_post() {
    use base64::Engine;
    use sha3::Digest;
    let (site, m, held, public, cookie) = held_and_public();
    let (status, answer) = site.get(
        &format!("/ext/ocx-cgi/wait?after={m}&artifacts=1"),
        Some(&cookie),
    );
    assert_eq!(status, 200, "{answer}");
    let carried = answer["artifacts"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"));
    let post = carried
        .iter()
        .find(|a| a["hash"] == public.as_str())
        .unwrap_or_else(|| panic!("the new post carried: {answer}"));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(post["content"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        hex::encode(sha3::Sha3_256::digest(&bytes)),
        public,
        "its bytes, whole"
    );
    assert_eq!(
        bytes,
        site.server.repo.fossil(&["artifact", &public]).into_bytes(),
        "as Fossil has it"
    );
    assert!(
        !answer.to_string().contains(&held),
        "a post held for moderation is neither carried nor told: {answer}"
    );
    let (_, plain) = site.get(&format!("/ext/ocx-cgi/wait?after={m}"), Some(&cookie));
    assert!(
        plain.get("artifacts").is_none(),
        "carried only when asked: {plain}"
    );

    // More than one answer carries: none, and the machine pulls.
    let big = site.server.repo.dir.path().join("big.md");
    let text: String = (0..40_000).map(|i| format!("{i:07}\n")).collect();
    std::fs::write(&big, text).unwrap();
    let before = last_receipt(&site.server.repo);
    site.server.repo.fossil(&[
        "wiki",
        "create",
        "Big",
        big.to_str().unwrap(),
        "--mimetype",
        "text/x-markdown",
    ]);
    let (status, answer) = site.get(
        &format!("/ext/ocx-cgi/wait?after={before}&artifacts=1"),
        Some(&cookie),
    );
    assert_eq!(status, 200, "{answer}");
    assert!(answer["last"].as_i64() > Some(before), "{answer}");
    assert_eq!(
        answer["artifacts"],
        Value::Null,
        "too much to carry: {answer}"
    );
    // More rows than one answer reads: none either.
    let before = last_receipt(&site.server.repo);
    let page = site.server.repo.dir.path().join("page.md");
    std::fs::write(&page, "a page\n").unwrap();
    for i in 0..70 {
        site.server.repo.fossil(&[
            "wiki",
            "create",
            &format!("Page{i}"),
            page.to_str().unwrap(),
            "--mimetype",
            "text/x-markdown",
        ]);
    }
    let (_, burst) = site.get(
        &format!("/ext/ocx-cgi/wait?after={before}&artifacts=1"),
        Some(&cookie),
    );
    assert_eq!(burst["artifacts"], Value::Null, "too many rows: {burst}");
    let (_, last) = site.get(
        &format!(
            "/ext/ocx-cgi/wait?after={}&artifacts=1",
            last_receipt(&site.server.repo) - 1
        ),
        Some(&cookie),
    );
    assert_eq!(
        last["artifacts"].as_array().map(Vec::len),
        Some(1),
        "the one page of the last receipt: {last}"
    );
    let (_, bad) = site.get("/ext/ocx-cgi/wait?after=0&artifacts=all", Some(&cookie));
    assert_eq!(bad["stopped"]["field"], "artifacts", "{bad}");
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
    let m = last_receipt(&site.server.repo);
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
    assert_eq!(last_receipt(&site.server.repo), m, "nothing was written");
}

/// A served repository with the page, OCX's hook and (when `node`) its
/// node, and an agent machine's clone enrolled with `register` and
/// `approve --node`: its node login and password.
pub(crate) struct Enrolled {
    pub(crate) site: Site,
    _machine: tempfile::TempDir,
    /// The clone's server-code: the node the records name.
    pub(crate) code: String,
    pub(crate) login: String,
    pub(crate) password: String,
    node: bool,
}

impl Enrolled {
    pub(crate) fn new(node: bool) -> Enrolled {
        let site = Site::new();
        site.server
            .repo
            .fossil(&["user", "password", "admin", "admin-pw"]);
        site.server
            .repo
            .json(&["hook", "install", "--url", &site.server.base()])
            .ok();
        let machine = tempfile::tempdir().unwrap();
        let (code, login, password) = enrol(&site, machine.path(), "clone");
        if node {
            site.server.repo.json(&["node", "start"]).ok();
        }
        Enrolled {
            site,
            _machine: machine,
            code,
            login,
            password,
            node,
        }
    }

    pub(crate) fn cookie(&self) -> String {
        self.site.server.login_with(&self.login, &self.password)
    }

    /// A record addressed to `node`, written by admin on the served
    /// repository; its hash.
    pub(crate) fn record(&self, node: &str, user: &str) -> String {
        let r = self.site.server.repo.command_record(
            "build it",
            &["--wall", "10m", "--node", node, "--run-user", user],
        );
        r.ok_str("record")
    }

    /// `run_login` as a POST signed in with `cookie` (none: unsigned),
    /// from the page itself, as the machine sends it.
    pub(crate) fn run_login(&self, record: &str, cookie: Option<&str>) -> (u16, Value) {
        let page = format!("{}/ext/ocx-cgi/run_login", self.site.server.base());
        let mut headers: Vec<(&str, &str)> = cookie.map(|c| ("Cookie", c)).into_iter().collect();
        headers.push(("Referer", &page));
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

    pub(crate) fn repository(&self) -> ocx::fossil::Repository {
        ocx::fossil::Repository::open(&self.site.server.repo.file).unwrap()
    }

    /// Waits until `done` holds of the served repository (the served side
    /// acts on its own time), 60 s at most.
    pub(crate) fn until(&self, what: &str, done: impl Fn(&ocx::fossil::Repository) -> bool) {
        let started = Instant::now();
        while !done(&self.repository()) {
            assert!(started.elapsed() < Duration::from_secs(60), "never: {what}");
            if !self.node {
                // Fossil's backoffice runs the after-receive hook (the
                // test's server runs none of its own).
                let out = std::process::Command::new(crate::support::fossil())
                    .args(["backoffice", "--nolease"])
                    .arg(&self.site.server.repo.file)
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Enrolled {
    fn drop(&mut self) {
        if self.node {
            let _ = self.site.server.repo.json(&["node", "stop"]);
        }
    }
}

/// Clones the served repository over HTTP (a clone of the file itself
/// would keep its server-code) into `dir/NAME.fossil`, enrols the clone's
/// node login with `register` and `approve --node`, and collects its
/// password: the clone's server-code, the login and the password.
fn enrol(site: &Site, dir: &std::path::Path, name: &str) -> (String, String, String) {
    let clone = dir.join(format!("{name}.fossil"));
    crate::support::succeeds(
        std::process::Command::new(crate::support::fossil())
            .arg("clone")
            .arg(site.server.base())
            .arg(&clone)
            .env("USER", "admin"),
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
    site.server
        .repo
        .json(&["approve", &login, &key, "goC4w", "--node"])
        .ok();
    register(&[]).ok();
    let password = creds(dir)["password"].as_str().unwrap().to_string();
    (code, login, password)
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
    let on_cli = e
        .site
        .server
        .repo
        .json(&["run_login", &record, "--user", &e.login])
        .ok();
    let first = password;
    let password = on_cli["password"].as_str().unwrap();
    assert!(
        repo.holds_password("build-a1b2c3", password).unwrap()
            && !repo.holds_password("build-a1b2c3", first).unwrap(),
        "the machine's login on the command line: a password set for this ask"
    );
    let admin_cli = e
        .site
        .server
        .repo
        .json(&["run_login", &record, "--user", "admin"]);
    admin_cli.refused();
    assert_eq!(
        admin_cli.answer()["stopped"]["reason"],
        refusal,
        "not even admin"
    );
    let admin = e.site.server.login("admin");
    let another = e.site.server.login_with(&other_login, &other_password);
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

/// POSTs `body` as JSON to the page's `tool` with `cookie` (none:
/// unsigned): status and the answer.
fn post_json(server: &ServedNode, tool: &str, cookie: Option<&str>, body: &Value) -> (u16, Value) {
    use std::io::{Read, Write};
    let body = body.to_string();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let cookie = cookie
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "POST /ext/ocx-cgi/{tool}?json HTTP/1.0\r\nHost: 127.0.0.1:{}\r\n{cookie}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.port,
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, text) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
    (
        status,
        serde_json::from_str(text).unwrap_or_else(|_| panic!("not JSON: {out}")),
    )
}

#[test]
fn receipt_and_unaudited_answer_a_signed_in_machine_as_json_within_what_it_may_read() {
    let e = Enrolled::new(false);
    let post = thread(&e.site.server.repo);
    let checkin = e.site.server.repo.commit_as("alice", "a.txt", "one", None);
    let machine = e.cookie();
    let asked = serde_json::json!({"artifacts": [post, checkin], "capabilities_of": "alice"});
    let (status, seen) = post_json(&e.site.server, "receipt", Some(&machine), &asked);
    assert_eq!(status, 200, "{seen}");
    let artifacts = seen["result"]["artifacts"].as_array().unwrap();
    assert_eq!(artifacts[0]["hash"], post.as_str());
    assert_eq!(artifacts[0]["received"], true);
    assert_eq!(artifacts[0]["user"], "alice");
    assert_eq!(artifacts[1]["user"], "alice", "the check-in's sender");
    assert!(artifacts[0]["rcvid"].as_i64().unwrap() > 0);
    assert!(seen["result"]["capabilities_of"]["capabilities"].is_string());

    let (status, nothing) = post_json(&e.site.server, "receipt", None, &asked);
    assert_eq!(status, 200, "{nothing}");
    for a in nothing["result"]["artifacts"].as_array().unwrap() {
        assert_eq!(a["received"], false, "nobody may not read: {a}");
        assert!(a["user"].is_null());
    }
    assert!(nothing["result"]["capabilities_of"]["capabilities"].is_null());

    let (status, open) = e.site.get("/ext/ocx-cgi/unaudited?json", Some(&machine));
    assert_eq!(status, 200, "{open}");
    let listed = |v: &Value| {
        v["result"]["checkins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["checkin"] == checkin.as_str())
    };
    assert!(listed(&open), "{open}");
    for cookie in [None, Some(e.site.server.login("zed"))] {
        let (status, no) = e.site.get("/ext/ocx-cgi/unaudited?json", cookie.as_deref());
        assert_eq!(status, 403, "without Read (o): {no}");
        assert!(no["result"].is_null());
    }

    // A verdict from the agent machine's node login counts for nothing: a
    // node runs others' work and judges none; pat's counts.
    e.site.server.repo.user("judge", "oi");
    let verdict = |user: &str| {
        e.site
            .server
            .repo
            .json(&[
                "audit",
                "--user",
                user,
                "--checkin",
                &checkin,
                "--verdict",
                "pass",
                "--reason",
                "reads well",
                "--against",
                "PLAN.md",
            ])
            .ok();
    };
    e.site
        .server
        .repo
        .fossil(&["user", "capabilities", &e.login, "goC4wi"]);
    verdict(&e.login);
    let (_, still) = e.site.get("/ext/ocx-cgi/unaudited?json", Some(&machine));
    assert!(
        listed(&still),
        "the node login's verdict does not count: {still}"
    );
    verdict("judge");
    let (_, judged) = e.site.get("/ext/ocx-cgi/unaudited?json", Some(&machine));
    assert!(!listed(&judged), "judge's verdict counts: {judged}");
}

/// A person's clone of the served repository, cloned over HTTP as `login`
/// (its password remembered), with a checkout open in `work`.
struct PersonClone {
    _dir: tempfile::TempDir,
    work: std::path::PathBuf,
}

impl PersonClone {
    fn new(site: &Site, login: &str) -> PersonClone {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mine.fossil");
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let url = format!("http://{login}:{login}-pw@127.0.0.1:{}/", site.server.port);
        let file = file.to_str().unwrap();
        crate::support::fossil_as(
            login,
            dir.path(),
            &["clone", &url, file, "--save-http-password"],
        );
        crate::support::fossil_as(login, &work, &["open", file]);
        crate::support::fossil_as(login, &work, &["user", "default", login]);
        PersonClone { _dir: dir, work }
    }

    /// `ocx ARGS --json` in the checkout.
    fn ocx(&self, args: &[&str]) -> crate::support::Run {
        let mut c = std::process::Command::new(crate::support::ocx_bin());
        c.args(args).arg("--json").current_dir(&self.work);
        crate::support::run(c, None)
    }

    fn fossil(&self, args: &[&str]) {
        let out = std::process::Command::new(crate::support::fossil())
            .args(args)
            .current_dir(&self.work)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn in_a_clone_thread_names_senders_by_the_server_and_writes_count_once_it_received_them() {
    let site = Site::new();
    site.server.repo.user("carol", "v234");
    site.server
        .repo
        .fossil(&["user", "capabilities", "nobody", "go"]);
    let root = thread(&site.server.repo);
    let clone = PersonClone::new(&site, "alice");
    let reply = site
        .server
        .repo
        .json(&[
            "post",
            "--user",
            "carol",
            "--to",
            &root,
            "--text",
            "Carol agrees.",
        ])
        .ok_str("hash");

    let read = clone.ocx(&["thread", "--of", &root]).ok();
    let posts = read["posts"].as_array().unwrap();
    let from: Vec<(&str, &str)> = posts
        .iter()
        .map(|p| {
            (
                p["hash"].as_str().unwrap(),
                p["from"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        from,
        vec![(root.as_str(), "alice"), (reply.as_str(), "carol")],
        "pulled first, each named as the server received it: {read:#}"
    );

    let mine = clone
        .ocx(&[
            "post",
            "--to",
            &root,
            "--text",
            "Alice replies from her clone.",
        ])
        .ok_str("hash");
    assert_eq!(
        site.server.repo.sender(&mine).as_deref(),
        Some("alice"),
        "the server received it from alice"
    );

    let record = clone
        .ocx(&crate::support::command_record_args(
            "build it",
            &["--wall", "1m"],
        ))
        .ok_str("record");
    assert_eq!(
        site.server.repo.sender(&record).as_deref(),
        Some("alice"),
        "create too"
    );

    let checkin = site.server.repo.commit_as("carol", "b.txt", "two", None);
    let open = |answer: &Value| {
        answer["checkins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["checkin"] == checkin.as_str())
    };
    let before = clone.ocx(&["unaudited"]).ok();
    assert_eq!(
        before["asked"],
        site.server.base(),
        "the server's own answer"
    );
    assert!(open(&before), "{before:#}");
    let verdict = clone
        .ocx(&[
            "audit",
            "--checkin",
            &checkin,
            "--verdict",
            "pass",
            "--reason",
            "fine",
            "--against",
            "PLAN.md",
        ])
        .ok();
    assert_eq!(
        verdict["checkin"].as_str(),
        Some(checkin.as_str()),
        "{verdict:#}"
    );
    let after = clone.ocx(&["unaudited"]).ok();
    assert!(
        !open(&after),
        "alice's verdict, received from her, counts: {after:#}"
    );

    // The clone's default user is not the login it pushes as: the server
    // receives the post from alice, so it does not count as dora's.
    clone.fossil(&["user", "new", "dora", "dora@example.org", "dora-pw"]);
    clone.fossil(&["user", "capabilities", "dora", "v234"]);
    clone.fossil(&["user", "default", "dora"]);
    let refused = clone.ocx(&["post", "--to", &root, "--text", "Dora's word."]);
    assert_eq!(refused.refused(), "server");
    let answer = refused.answer();
    let reason = answer["stopped"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("received it from alice, not from dora"),
        "{reason}"
    );

    // A server that lets no one unsigned read is asked as the clone's own
    // login (the one its remote names, the password it remembers): the
    // post is confirmed once that receipt names alice.
    clone.fossil(&["user", "default", "alice"]);
    site.server
        .repo
        .fossil(&["user", "capabilities", "nobody", "g"]);
    let private = clone.ocx(&["post", "--to", &root, "--text", "Said privately."]);
    let hash = private.ok_str("hash");
    assert_eq!(site.server.repo.sender(&hash).as_deref(), Some("alice"));
    assert!(
        private.stdout.contains("signed in as alice"),
        "{}",
        private.stdout
    );
}

#[test]
fn where_no_node_runs_the_hook_keeps_the_run_login_and_withdraws_it() {
    let e = Enrolled::new(false);
    let record = e.record(&e.code, "hooked-a1b2c3");
    e.until("the hook made the run's login", |r| {
        r.remote_run(&record).unwrap().is_some()
    });
    let repo = e.repository();
    assert_eq!(
        repo.own_capabilities("hooked-a1b2c3").unwrap().as_deref(),
        Some(ocx::node::wake::RUN_CAPABILITIES)
    );
    let (status, got) = e.run_login(&record, Some(&e.cookie()));
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["result"]["user"], "hooked-a1b2c3");

    // A record for this repository's own node, and one naming a clone no
    // one approved with --node, make no login here.
    let own = e.record(&e.site.server.repo.server_code(), "local-a1b2c3");
    let stranger = e.record(&"ab".repeat(20), "stranger-a1b2c3");
    let later = e.record(&e.code, "later-a1b2c3");
    e.until("the hook read the later record", |r| {
        r.remote_run(&later).unwrap().is_some()
    });
    let repo = e.repository();
    for (record, user) in [(&own, "local-a1b2c3"), (&stranger, "stranger-a1b2c3")] {
        assert!(repo.remote_run(record).unwrap().is_none(), "{user}");
        assert!(
            repo.own_capabilities(user).unwrap().is_none(),
            "{user} not made"
        );
    }

    let rid = repo.receipt(&record).unwrap().unwrap().rid;
    let standing = ocx::protocol::found::record(&repo, rid, &record)
        .unwrap()
        .unwrap();
    let fossil = ocx::fossil::Fossil::locate().unwrap();
    ocx::node::respond::respond(&fossil, &repo, &standing, &e.login, "exited", "done", false)
        .unwrap();
    e.until("the hook withdrew the run's login", |r| {
        r.own_capabilities("hooked-a1b2c3").unwrap().as_deref() == Some("")
            && r.remote_run(&record).unwrap().is_none()
    });
    assert_eq!(
        e.repository()
            .own_capabilities("later-a1b2c3")
            .unwrap()
            .as_deref(),
        Some(ocx::node::wake::RUN_CAPABILITIES),
        "only the answered record's login"
    );
}

/// A record addressed to `node` naming `user`, stored as received from
/// `sender` (bypassing `create`'s own checks, as a hostile client's push
/// would); its hash.
fn forged_record(repo: &Repo, sender: &str, node: &str, user: &str) -> String {
    let record = serde_json::json!({"ocx": 1, "kind": "record", "node": node, "user": user,
        "runner": "command", "command": ["true"], "objective": "forged", "checkins": [],
        "hears": [], "remote": false, "restrict": {},
        "sandbox": {"network": true, "read_only": [], "read_write": []},
        "budget": {"wall": "10m"}});
    crate::node::record_by_hand(repo, sender, &record)
}

#[test]
fn records_for_a_machine_that_may_not_run_make_no_login_and_change_no_user() {
    let e = Enrolled::new(true);
    e.site.server.repo.user("maker", "i");
    e.site
        .server
        .repo
        .fossil(&["user", "capabilities", "maker", "iR"]);
    let users_before =
        |r: &ocx::fossil::Repository, login: &str| r.own_capabilities(login).unwrap();
    let repo = e.repository();
    let alice = users_before(&repo, "alice");
    let admin = users_before(&repo, "admin");
    let machine = users_before(&repo, &e.login);
    let forged = [
        ("pat", "by-pat-a1b2c3", "a sender without R or admin"),
        (
            "maker",
            "by-maker-a1b2c3",
            "a sender with R lacking the run's letters",
        ),
        ("admin", "alice", "a person's login, made by hand"),
        ("admin", "admin", "an administrator"),
        ("admin", "nobody", "one of Fossil's own"),
        ("admin", &e.login, "the machine's own login"),
    ]
    .map(|(sender, user, why)| {
        (
            forged_record(&e.site.server.repo, sender, &e.code, user),
            user.to_string(),
            why,
        )
    });
    let good = forged_record(&e.site.server.repo, "admin", &e.code, "good-a1b2c3");
    e.until("the good record's login made", |r| {
        r.remote_run(&good).unwrap().is_some()
    });
    let repo = e.repository();
    for (record, user, why) in &forged {
        assert!(repo.remote_run(record).unwrap().is_none(), "{why}: no row");
        let (status, no) = e.run_login(record, Some(&e.cookie()));
        assert_ne!(status, 200, "{why}: {no}");
        if user.ends_with("a1b2c3") {
            assert!(
                repo.own_capabilities(user).unwrap().is_none(),
                "{why}: not made"
            );
        }
    }
    assert_eq!(users_before(&repo, "alice"), alice, "alice untouched");
    assert_eq!(users_before(&repo, "admin"), admin, "admin untouched");
    assert_eq!(
        users_before(&repo, &e.login),
        machine,
        "the machine keeps what approve gave it"
    );
    assert!(!repo.is_run_user("alice").unwrap());
}

#[test]
fn in_a_clone_a_server_away_refuses_thread_and_post_naming_the_server() {
    let mut site = Site::new();
    let root = thread(&site.server.repo);
    let clone = PersonClone::new(&site, "alice");
    let before = site.server.repo.hashes();
    site.server.halt();
    let read = clone.ocx(&["thread", "--of", &root]);
    assert_eq!(read.refused(), "server", "the pull failed");
    let wrote = clone.ocx(&["post", "--to", &root, "--text", "Anyone there?"]);
    assert_eq!(
        wrote.refused(),
        "server",
        "pulled first, and the pull failed"
    );
    assert_eq!(
        site.server.repo.hashes(),
        before,
        "nothing reached the server"
    );
}

/// The answer's refusal reason.
fn reason(run: &crate::support::Run) -> String {
    run.answer()["stopped"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn in_a_clone_of_a_server_serving_no_page_every_reader_of_senders_refuses_naming_the_server() {
    let site = Site::without_page();
    site.server.repo.user("carol", "v234i");
    site.server
        .repo
        .fossil(&["user", "capabilities", "nobody", "go"]);
    let root = carols_thread(&site.server.repo);
    let checkin = site
        .server
        .repo
        .commit_as("carol", "c.txt", "carol's", None);
    site.server
        .repo
        .json(&[
            "post", "--to", &root, "--text", "Ship it?", "--for", "alice",
        ])
        .ok();
    // In alice's clone every pulled artifact reads as received from alice:
    // believed, carol's post would be named alice's, and alice's verdict on
    // carol's check-in refused as on her own.
    let clone = PersonClone::new(&site, "alice");

    let read = clone.ocx(&["thread", "--of", &root]);
    assert_eq!(read.refused(), "server", "{}", read.stdout);
    assert!(read.answer()["result"].is_null(), "no sender told");
    let why = reason(&read);
    assert!(
        why.contains(&site.server.base()) && why.contains("serves no OCX page at /ext/ocx-cgi"),
        "{why}"
    );
    let next = read.answer()["next_step"].as_str().unwrap().to_string();
    assert!(
        next.contains("--extroot") && next.contains("ocx-cgi"),
        "says what the server must serve: {next}"
    );

    let audit = clone.ocx(&[
        "audit",
        "--checkin",
        &checkin,
        "--verdict",
        "pass",
        "--reason",
        "fine",
        "--against",
        "PLAN.md",
    ]);
    assert_eq!(
        audit.refused(),
        "server",
        "not judged by the clone's receipts: {}",
        audit.stdout
    );
    assert!(reason(&audit).contains("serves no OCX page"));

    for (tool, args) in [
        ("unaudited", vec!["unaudited"]),
        ("verdicts", vec!["verdicts", "--checkin", &checkin]),
        ("questions", vec!["questions"]),
        ("console", vec!["console"]),
    ] {
        let asked = clone.ocx(&args);
        assert_eq!(asked.refused(), "server", "{tool}: {}", asked.stdout);
        assert!(reason(&asked).contains("serves no OCX page"), "{tool}");
    }

    let before = site.server.repo.hashes();
    let wrote = clone.ocx(&["post", "--to", &root, "--text", "Alice replies."]);
    assert_eq!(wrote.refused(), "server", "{}", wrote.stdout);
    let why = reason(&wrote);
    assert!(
        why.contains("is pushed but cannot be confirmed as received from alice"),
        "{why}"
    );
    let pushed: Vec<String> = site
        .server
        .repo
        .hashes()
        .into_iter()
        .filter(|h| !before.contains(h))
        .collect();
    assert_eq!(pushed.len(), 1, "the reply reached the server: {pushed:?}");
    assert!(why.contains(&pushed[0]), "the refusal names it: {why}");
    assert_eq!(
        site.server.repo.sender(&pushed[0]).as_deref(),
        Some("alice")
    );
}

#[test]
fn a_run_holding_its_password_asks_its_server_who_sent_what_in_its_own_clone() {
    let site = Site::new();
    site.server
        .repo
        .fossil(&["user", "capabilities", "nobody", "go"]);
    let root = site
        .server
        .repo
        .json(&[
            "post",
            "--title",
            "Review",
            "--text",
            "The maintainer asks.",
        ])
        .ok_str("hash");
    assert_eq!(site.server.repo.sender(&root).as_deref(), Some("admin"));
    let checkin = site.server.repo.commit_as("pat", "p.txt", "pat's", None);
    let user = "claude-a1b2c3";
    let record = site
        .server
        .repo
        .json(&[
            "create",
            "--runner",
            "claude",
            "--objective",
            "review pat's work",
            "--wall",
            "10m",
            "--run-user",
            user,
            "--to",
            &root,
        ])
        .ok_str("record");
    site.server
        .repo
        .user(user, ocx::node::wake::RUN_CAPABILITIES);

    // The run's workspace as its watcher makes it: a clone as the run's
    // login, its password remembered, the run's login its default user,
    // a checkout open in it; the program started there with the run's
    // variables.
    let ws = tempfile::tempdir().unwrap();
    let fossil = ocx::fossil::Fossil::locate().unwrap();
    let clone = ws.path().join(".clone.fossil");
    let url = ocx::fossil::remote::with_login(&site.server.base(), user, &format!("{user}-pw"));
    fossil
        .clone_open(&url, &clone, ws.path(), None, true)
        .unwrap();
    fossil.user_default(&clone, user).unwrap();
    let in_run = |args: &[&str]| {
        let mut c = std::process::Command::new(crate::support::ocx_bin());
        c.args(args)
            .arg("--json")
            .current_dir(ws.path())
            .env(ocx::context::RECORD_VAR, &record)
            .env(ocx::context::RUN_USER_VAR, user);
        crate::support::run(c, None)
    };

    let verdict = in_run(&[
        "audit",
        "--checkin",
        &checkin,
        "--verdict",
        "pass",
        "--reason",
        "reads well",
        "--against",
        &record,
    ]);
    let written = verdict.ok_str("hash");
    assert_eq!(
        site.server.repo.sender(&written).as_deref(),
        Some(user),
        "the server received the run's verdict on pat's check-in from the run"
    );

    let reply = in_run(&["post", "--to", &root, "--text", "Reviewed."]).ok_str("hash");
    let read = in_run(&["thread", "--of", &root]).ok();
    let from: Vec<(&str, &str)> = read["posts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["hash"].as_str().unwrap(),
                p["from"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        from,
        vec![
            (root.as_str(), "admin"),
            (record.as_str(), "admin"),
            (reply.as_str(), user)
        ],
        "each named as the server received it, not as the run pulled it: {read:#}"
    );
}

#[test]
fn hook_install_node_start_and_status_warn_when_the_served_url_serves_no_page() {
    for page in [false, true] {
        let repo = Repo::new();
        let mut server = Served::new()
            .page(if page { Page::HandOff } else { Page::Fossil })
            .without_node()
            .start_on(&repo);
        let url = server.url("/");
        let before = repo.json(&["status"]).ok();
        assert!(
            before.get("served_page").is_none() && before.get("warning").is_none(),
            "no node, nothing asked: {before:#}"
        );
        let hook = repo.json(&["hook", "install", "--url", &url]).ok();
        let node = repo.json(&["node", "start"]).ok();
        let status = repo.json(&["status"]).ok();
        repo.json(&["node", "stop"]).ok();
        server.halt();
        assert_eq!(status["node"], true);
        assert_eq!(status["served_page"], page, "{status:#}");
        for (what, answer) in [
            ("hook install", &hook),
            ("node start", &node),
            ("status", &status),
        ] {
            let warning = answer["warning"].as_str();
            if page {
                assert_eq!(warning, None, "{what}: {answer:#}");
                continue;
            }
            let warning = warning.unwrap_or_else(|| panic!("{what} warns: {answer:#}"));
            assert!(
                warning.starts_with(&format!("{url} serves no OCX page at /ext/ocx-cgi")),
                "{what}: {warning}"
            );
            assert!(
                warning.contains("runs that hold their password")
                    && warning.contains("fossil server --extroot DIR")
                    && warning.contains("ocx-cgi"),
                "{what} says what to serve: {warning}"
            );
        }
    }
}

#[test]
fn in_a_clone_questions_verdicts_console_and_stop_stand_by_the_servers_receipts() {
    let site = Site::new();
    site.server.repo.user("carol", "v234i");
    site.server
        .repo
        .fossil(&["user", "capabilities", "alice", "v234iR"]);
    site.server
        .repo
        .fossil(&["user", "capabilities", "nobody", "go"]);
    site.server
        .repo
        .json(&["hook", "install", "--url", &site.server.base()])
        .ok();
    let root = thread(&site.server.repo);
    let question = site
        .server
        .repo
        .json(&[
            "post", "--to", &root, "--text", "Ship it?", "--for", "alice",
        ])
        .ok_str("hash");
    // carol's decision (stored as a push from her would be: `decide`
    // refuses her) counts for nothing: the question waits on alice.
    {
        use ocx::fossil::store::{self, Batch};
        let served = ocx::fossil::Repository::open(&site.server.repo.file).unwrap();
        let rid = served.receipt(&question).unwrap().unwrap().rid;
        let place = ocx::protocol::found::place_of(&served, rid)
            .unwrap()
            .unwrap();
        let decision = ocx::protocol::ask::Decision {
            ocx: 1,
            kind: "decision".into(),
            question: question.clone(),
            note: "ship".into(),
        };
        let text = ocx::protocol::ask::decision_text(&decision, "carol", false);
        let mut batch = Batch::default();
        ocx::place::compose_message(
            &mut batch,
            served.hash_policy().unwrap(),
            "carol",
            &ocx::place::Where::At(place),
            &text,
            "decision",
        );
        let fossil = ocx::fossil::Fossil::locate().unwrap();
        store::store(&fossil, &served, "carol", &batch, true).unwrap();
    }
    let checkin = site
        .server
        .repo
        .commit_as("carol", "c.txt", "carol's", None);
    let run = |objective: &str| {
        site.server
            .repo
            .command_record(objective, &["--wall", "10m"])
            .ok_str("record")
    };
    let (answered, going) = (run("answered"), run("going"));
    let served = ocx::fossil::Repository::open(&site.server.repo.file).unwrap();
    let rid = served.receipt(&answered).unwrap().unwrap().rid;
    let standing = ocx::protocol::found::record(&served, rid, &answered)
        .unwrap()
        .unwrap();
    let node_login = ocx::protocol::found::node_login(&site.server.repo.server_code());
    ocx::node::respond::respond(
        &ocx::fossil::Fossil::locate().unwrap(),
        &served,
        &standing,
        &node_login,
        "exited",
        "done",
        false,
    )
    .unwrap();
    // In alice's clone every pulled artifact reads as received from alice,
    // and the clone holds neither the server's code nor its marks.
    let clone = PersonClone::new(&site, "alice");
    clone.fossil(&["pull"]);

    let asked = clone.ocx(&["questions"]).ok();
    let waiting = asked["waiting"].as_array().unwrap();
    assert_eq!(waiting.len(), 1, "still open on the server: {asked:#}");
    let shown = &waiting[0];
    assert_eq!(shown["asked"], question.as_str());
    assert_eq!(shown["from"], "admin", "{shown:#}");
    assert_eq!(shown["decisions"][0]["from"], "carol", "{shown:#}");
    assert_eq!(shown["decisions"][0]["counts"], "nothing", "{shown:#}");
    let served = site.server.repo.json(&["questions", "--for", "alice"]).ok();
    assert_eq!(
        shown["confirmers"], served["waiting"][0]["confirmers"],
        "who may close it, as the server says: {served:#}"
    );
    let confirmers: Vec<&str> = shown["confirmers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        confirmers.contains(&"admin") && !confirmers.contains(&"alice"),
        "{confirmers:?}"
    );
    let decided = clone.ocx(&["decide", &question[..12], "--note", "yes"]);
    let decision = decided.ok_str("hash");
    assert_eq!(site.server.repo.sender(&decision).as_deref(), Some("alice"));

    let mine = clone
        .ocx(&[
            "audit",
            "--checkin",
            &checkin,
            "--verdict",
            "pass",
            "--reason",
            "fine",
            "--against",
            "PLAN.md",
        ])
        .ok_str("hash");
    let verdicts = clone.ocx(&["verdicts", "--checkin", &checkin]).ok();
    assert_eq!(verdicts["asked"], site.server.base(), "{verdicts:#}");
    assert_eq!(verdicts["sender"], "carol", "{verdicts:#}");
    assert_eq!(
        verdicts["counting"][0]["hash"],
        mine.as_str(),
        "{verdicts:#}"
    );
    assert_eq!(verdicts["counting"][0]["from"], "alice", "{verdicts:#}");

    let console = clone.ocx(&["console"]).ok();
    let runs = |list: &str| -> Vec<(String, String)> {
        console[list]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["record"].as_str().unwrap().to_string(),
                    r["sent_by"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    };
    assert_eq!(
        runs("running"),
        vec![(going.clone(), "admin".to_string())],
        "{console:#}"
    );
    assert_eq!(
        runs("ended"),
        vec![(answered.clone(), "admin".to_string())],
        "{console:#}"
    );
    assert_eq!(console["ended"][0]["outcome"], "exited");

    // alice holds R without admin (her clone made her its setup: given
    // her letters as the server's, the clone's table decides what she
    // tries, the server's receipts whose records they are), and sent
    // neither record.
    clone.fossil(&["user", "capabilities", "alice", "v234iR"]);
    let stop = clone.ocx(&["stop", "--record", &going]);
    assert_eq!(stop.refused(), "record", "{}", stop.stdout);
    assert!(
        reason(&stop).contains("stops only the records it sent itself"),
        "{}",
        reason(&stop)
    );
    let again = clone.ocx(&["stop", "--record", &answered]);
    assert_eq!(again.refused(), "record");
    assert!(
        reason(&again).contains("answered already"),
        "{}",
        reason(&again)
    );
}

#[test]
fn in_a_clone_of_a_repository_file_no_reader_of_senders_believes_the_clones_own_receipts() {
    let repo = crate::support::Repo::new();
    repo.user("carol", "v234");
    let root = carols_thread(&repo);
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let file = dir.path().join("mine.fossil");
    let (from, file) = (repo.file.to_str().unwrap(), file.to_str().unwrap());
    crate::support::fossil_as("alice", dir.path(), &["clone", from, file]);
    crate::support::fossil_as("alice", &work, &["open", file]);
    // The clone's own receipt names whoever pulled: believed, carol's
    // post would read as the puller's.
    let mut c = std::process::Command::new(crate::support::ocx_bin());
    c.args(["thread", "--of", &root, "--json"])
        .current_dir(&work);
    let read = crate::support::run(c, None);
    assert_eq!(read.refused(), "server", "{}", read.stdout);
    assert!(read.answer()["result"].is_null(), "no sender told");
    assert!(
        reason(&read).contains("no http or https server"),
        "{}",
        read.stdout
    );
}

/// Carol's thread "Plans", posted in `repo`; its first post's hash.
fn carols_thread(repo: &crate::support::Repo) -> String {
    repo.json(&[
        "post",
        "--user",
        "carol",
        "--title",
        "Plans",
        "--text",
        "Carol plans.",
    ])
    .ok_str("hash")
}
