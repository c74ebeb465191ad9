//! An agent machine and its server when things go wrong between them, made
//! for real: the machine reaches the server through a proxy of the tests'
//! own on 127.0.0.1, which can lose a request's answer after the server
//! took it, answer a request with an error, or hold a request while the
//! machine's processes are killed by signal. Each time, every record is
//! answered once, nothing is lost and nothing is written twice.

use crate::machines::{Machine, Site, until};
use crate::support::{self, kill_from};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the proxy does to the next request whose path begins with a
/// prefix.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// Forward it, then close without answering: the server took it.
    LoseAnswer,
    /// Answer 500 without forwarding it.
    Error,
    /// Hold it until released, then forward it.
    Hold,
}

#[derive(Default)]
struct Faults {
    /// Each fault still to make: the path's prefix and what to do.
    next: Vec<(String, Fault)>,
    /// Whether held requests may go on.
    released: bool,
    /// How many requests are held now.
    holding: usize,
    /// Holds the answer to every request whose path begins with one of
    /// the prefixes, once the repository file holds more forum posts than
    /// the count, until released: so what the server tells of a post, or
    /// after it, is held however soon it follows.
    hold_after_post: Option<(Vec<String>, std::path::PathBuf, i64)>,
    /// Each path seen, with what was done to it.
    seen: Vec<(String, Option<Fault>)>,
}

/// A proxy of the tests' own between an agent machine and its server.
struct Proxy {
    port: u16,
    faults: Arc<Mutex<Faults>>,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let faults = Arc::new(Mutex::new(Faults::default()));
        let f = faults.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let f = f.clone();
                std::thread::spawn(move || relay(client, upstream, &f));
            }
        });
        Proxy { port, faults }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Makes `fault` on the next request whose path begins with `prefix`
    /// (or, written `=PATH`, is `PATH`).
    fn next(&self, prefix: &str, fault: Fault) {
        let mut f = self.faults.lock().unwrap();
        f.released = false;
        f.next.push((prefix.to_string(), fault));
    }

    /// Holds the answer to each request whose path begins with one of
    /// `prefixes` once the served repository `repository` holds more than
    /// `posts` forum posts it holds not now, until released.
    fn hold_after_posts(&self, prefixes: &[&str], repository: &Path, posts: i64) {
        let mut f = self.faults.lock().unwrap();
        f.released = false;
        f.hold_after_post = Some((
            prefixes.iter().map(|p| p.to_string()).collect(),
            repository.to_path_buf(),
            forum_posts(repository) + posts,
        ));
    }

    fn release(&self) {
        let mut f = self.faults.lock().unwrap();
        f.released = true;
        f.hold_after_post = None;
    }

    fn holding(&self) -> usize {
        self.faults.lock().unwrap().holding
    }

    fn made(&self, fault: Fault) -> usize {
        self.faults
            .lock()
            .unwrap()
            .seen
            .iter()
            .filter(|s| s.1 == Some(fault))
            .count()
    }
}

/// The one request `client` sends, forwarded on a connection of its own to
/// the server at `upstream`, as the faults say; the answer's end closes both.
fn relay(mut client: TcpStream, upstream: u16, faults: &Mutex<Faults>) {
    let _ = client.set_read_timeout(Some(Duration::from_secs(120)));
    let Some((path, request)) = read_request(&mut client) else {
        return;
    };
    let fault = {
        let mut f = faults.lock().unwrap();
        let at = f.next.iter().position(|(p, _)| match p.strip_prefix('=') {
            Some(exact) => path == exact,
            None => path.starts_with(p.as_str()),
        });
        let fault = at.map(|i| f.next.remove(i).1);
        f.seen.push((path.clone(), fault));
        fault
    };
    if fault == Some(Fault::Error) {
        let _ = client.write_all(
            b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        return;
    }
    if fault == Some(Fault::Hold) {
        hold(faults);
    }
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return;
    };
    if server.write_all(&request).is_err() {
        return;
    }
    let mut answer = Vec::new();
    let _ = server.read_to_end(&mut answer);
    // Read outside the lock: the count opens the served repository.
    let armed = faults.lock().unwrap().hold_after_post.clone();
    let after_post = armed.is_some_and(|(prefixes, repository, posts)| {
        prefixes.iter().any(|p| path.starts_with(p.as_str())) && forum_posts(&repository) > posts
    });
    if after_post {
        hold(faults);
    }
    if fault != Some(Fault::LoseAnswer) {
        let _ = client.write_all(&answer);
    }
}

/// Waits until held requests are released, counted as held meanwhile.
fn hold(faults: &Mutex<Faults>) {
    faults.lock().unwrap().holding += 1;
    while !faults.lock().unwrap().released {
        std::thread::sleep(Duration::from_millis(20));
    }
    faults.lock().unwrap().holding -= 1;
}

/// How many forum posts the repository file `repository` holds.
fn forum_posts(repository: &Path) -> i64 {
    let db = rusqlite::Connection::open_with_flags(
        repository,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    db.busy_timeout(Duration::from_secs(10)).unwrap();
    db.query_row("SELECT count(*) FROM forumpost", [], |r| r.get(0))
        .unwrap()
}

/// One HTTP request from `client`, its `Connection` made `close` so the
/// server ends its answer by closing: its path and bytes.
fn read_request(client: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client.read(&mut byte).ok()? == 0 || head.len() > 64 * 1024 {
            return None;
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let path = text.split_whitespace().nth(1)?.to_string();
    let mut len = 0usize;
    let mut out = String::new();
    for (i, line) in text.split("\r\n").enumerate() {
        if line.is_empty() {
            continue;
        }
        let lower = line.to_ascii_lowercase();
        if lower.starts_with("content-length:") {
            len = line[15..].trim().parse().ok()?;
        }
        if i > 0 && lower.starts_with("connection:") {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    let mut body = vec![0u8; len];
    client.read_exact(&mut body).ok()?;
    let mut request = out.into_bytes();
    request.extend(body);
    Some((path, request))
}

/// A runner on the machine, holding no password, held to `fixes`: for
/// each post it commits a file of the post's on `fixes` (unless the post
/// says `retry`) and pushes through its tools, noting each push's answer.
const RUNNER: &str = r#"
n = 0
for line in sys.stdin:
    if not line.startswith("Post "):
        continue
    if "retry" not in line:
        n += 1
        with open("fix-%d.txt" % n, "w") as f:
            f.write("fix %d\n" % n)
        fossil("add", "fix-%d.txt" % n)
        code, said = fossil("commit", "-m", "fix %d" % n, "--branch", "fixes", "--no-warnings")
        if code != 0:
            code, said = fossil("commit", "-m", "fix %d" % n, "--no-warnings")
        note({"step": "commit", "n": n, "said": said})
    local = mcp("ocx")
    result = local("tools/call", {"name": "ocx_push", "arguments": {}})["result"]
    note({"step": "push", "result": result})
"#;

/// The notes of the runner, in `out/results`.
fn notes(out: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("results"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Waits until the runner noted `n` pushes; the last.
fn pushed(out: &std::path::Path, n: usize, m: &Machine) -> Value {
    until(&format!("push {n} noted\n{}", m.node_log()), 90, || {
        let pushes: Vec<Value> = notes(out)
            .into_iter()
            .filter(|s| s["step"] == "push")
            .collect();
        (pushes.len() >= n).then(|| pushes[n - 1]["result"].clone())
    })
}

/// How many check-ins the served repository holds with comment `comment`.
fn checkins(site: &Site, comment: &str) -> i64 {
    let db = rusqlite::Connection::open(&site.repo.file).unwrap();
    db.query_row(
        "SELECT count(*) FROM event WHERE type='ci' AND comment=?1",
        [comment],
        |r| r.get(0),
    )
    .unwrap()
}

#[test]
fn a_machines_run_whose_push_is_lost_or_refused_by_its_server_pushes_again_once_nothing_lost_or_twice()
 {
    let site = Site::new();
    site.repo.commit_as("admin", "README", "start\n", None);
    let (runner, out) = support::runner_script(
        &site.repo,
        &format!("{}{RUNNER}", support::PY_RUNNER_PRELUDE),
    );
    support::runner_page(
        &site.repo,
        "pusher",
        &json!({"command": [runner], "input": "lines",
            "env": {"OCX_TEST_OUT": out, "OCX_TEST_FOSSIL": support::fossil()}}),
    );
    let proxy = Proxy::start(site.port);
    let m = Machine::enrol_at(&site, tempfile::tempdir().unwrap(), &proxy.url());
    let record = site.fixes_record(
        &m.code,
        "pusher",
        "pusher-m1",
        "Push each fix",
        &out,
        &["--hears", "admin"],
    );
    crate::support::until_logged(&m.root(), 60, |e| support::is(e, "opened", &record));

    // The server takes the push, and its answer is lost on the way back.
    proxy.next("/ext/ocx-cgi/push", Fault::LoseAnswer);
    site.repo
        .json(&["post", "--to", &record, "--text", "fix one"])
        .ok();
    let first = pushed(&out, 1, &m);
    assert_eq!(first["isError"], true, "the answer was lost: {first:#}");
    assert_eq!(proxy.made(Fault::LoseAnswer), 1);
    assert_eq!(checkins(&site, "fix 1"), 1, "the server took it");

    // The server answers the next push with an error.
    proxy.next("/ext/ocx-cgi/push", Fault::Error);
    site.repo
        .json(&["post", "--to", &record, "--text", "retry"])
        .ok();
    let second = pushed(&out, 2, &m);
    assert_eq!(second["isError"], true, "{second:#}");
    assert_eq!(proxy.made(Fault::Error), 1);

    // Then it goes through: what the run made is there, once each.
    site.repo
        .json(&["post", "--to", &record, "--text", "fix two"])
        .ok();
    let third = pushed(&out, 3, &m);
    assert_eq!(third["isError"], false, "{third:#}");
    site.repo
        .json(&["post", "--to", &record, "--text", "retry"])
        .ok();
    let fourth = pushed(&out, 4, &m);
    assert_eq!(fourth["isError"], false, "{fourth:#}");
    assert_eq!(checkins(&site, "fix 1"), 1, "nothing twice");
    assert_eq!(checkins(&site, "fix 2"), 1, "nothing lost");
    let r = site.repository();
    let tip = r.branch_tip("fixes").unwrap().unwrap();
    assert_eq!(
        site.repo.sender(&r.hash_of(tip).unwrap()).as_deref(),
        Some("pusher-m1")
    );
    site.repo.json(&["stop", &record]).ok();
    let answered = until("the stop answered", 60, || {
        let r = site.responses(&record);
        (!r.is_empty()).then_some(r)
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(site.responses(&record), answered, "answered once");
    assert_eq!(answered, vec![("stopped".to_string(), m.login.clone())]);
}

#[test]
fn a_machine_killed_between_its_push_and_its_confirmation_and_a_push_the_server_refused_answer_once()
 {
    let site = Site::new();
    let proxy = Proxy::start(site.port);
    let m = Machine::enrol_at(&site, tempfile::tempdir().unwrap(), &proxy.url());
    let first = site.record(&m.code, "echo-f1");
    site.line(&format!("Record {first}"));

    // The server refuses the machine's next syncs (Fossil's sync posts to
    // the repository's root) with an error.
    proxy.next("=/", Fault::Error);
    proxy.next("=/", Fault::Error);
    site.repo.json(&["stop", &first]).ok();
    let answered = until("the first record's answer", 120, || {
        let r = site.responses(&first);
        (!r.is_empty()).then_some(r)
    });
    assert!(proxy.made(Fault::Error) >= 1, "the server refused a sync");
    assert_eq!(answered, vec![("stopped".to_string(), m.login.clone())]);

    // The machine killed once its answer reached the server, before the
    // server's receipt confirmed it.
    let second = site.record(&m.code, "echo-f2");
    let dir = ocx::node::config::NodeConfig::run_dir(&m.root(), &second);
    site.line(&format!("Record {second}"));
    // The stop is one post; the next, the machine's answer: what the
    // server tells of it, by a receipt or a wait, is held from the machine.
    proxy.hold_after_posts(
        &["/ext/ocx-cgi/receipt", "/ext/ocx-cgi/wait"],
        &site.repo.file,
        1,
    );
    site.repo.json(&["stop", &second]).ok();
    let unconfirmed = m.root().join("unconfirmed").join(&second[..16]);
    until("the answer pushed, its confirmation held", 60, || {
        (!site.responses(&second).is_empty() && proxy.holding() > 0 && unconfirmed.exists())
            .then_some(())
    });
    support::kill_node(&m.root());
    if dir.join("watcher.pid").exists() {
        kill_from(&dir.join("watcher.pid"));
    }
    assert!(
        unconfirmed.exists(),
        "killed before the server's receipt confirmed it"
    );
    until("the machine's processes gone", 30, || {
        (!ocx::node::watcher_alive(&dir)).then_some(())
    });
    proxy.release();
    m.ocx(&["node", "start"]).ok();
    let until_cared = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let status = m.ocx(&["status"]).ok();
        if status["machine"]["records"]
            .as_array()
            .is_some_and(|r| r.is_empty())
        {
            break;
        }
        assert!(
            std::time::Instant::now() < until_cared,
            "never: the second record out of the machine's care: {:#}\n{}\nthe proxy saw: {:?}",
            status["machine"],
            m.node_log(),
            proxy.faults.lock().unwrap().seen
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    until("the answer confirmed", 60, || {
        (!unconfirmed.exists()).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        site.responses(&second),
        vec![("stopped".to_string(), m.login.clone())],
        "answered once, never again\n{}",
        m.node_log()
    );
    assert_eq!(site.responses(&first).len(), 1, "the first still once");
}

/// A runner on the machine, holding no password, held to `fixes`: once
/// the test leaves `go` in its output directory, it commits a fix on
/// `fixes`, pushes it through its tools, notes the push's answer and
/// ends.
const AWAY_RUNNER: &str = r#"
import time
for line in sys.stdin:
    break
note({"step": "started"})
while not os.path.exists(os.path.join(out, "go")):
    time.sleep(0.05)
with open("fix-away.txt", "w") as f:
    f.write("fixed while the server was away\n")
fossil("add", "fix-away.txt")
code, said = fossil("commit", "-m", "fix while away", "--branch", "fixes", "--no-warnings")
note({"step": "commit", "code": code, "said": said})
local = mcp("ocx")
result = local("tools/call", {"name": "ocx_push", "arguments": {}})["result"]
note({"step": "push", "result": result})
"#;

/// A served site and an agent machine running a no-password record held
/// to `fixes` for [`AWAY_RUNNER`] as `user`: the machine, the record and
/// the runner's output directory.
fn away_run(site: &Site, user: &str) -> (Machine, String, std::path::PathBuf) {
    site.repo.commit_as("admin", "README", "start\n", None);
    let (runner, out) = support::runner_script(
        &site.repo,
        &format!("{}{AWAY_RUNNER}", support::PY_RUNNER_PRELUDE),
    );
    support::runner_page(
        &site.repo,
        "away",
        &json!({"command": [runner], "input": "lines",
            "env": {"OCX_TEST_OUT": out, "OCX_TEST_FOSSIL": support::fossil()}}),
    );
    let m = Machine::enrol(site);
    let record = site.fixes_record(
        &m.code,
        "away",
        user,
        "Fix it while the server is away",
        &out,
        &[],
    );
    support::until_logged(&m.root(), 60, |e| support::is(e, "opened", &record));
    (m, record, out)
}

/// Once the run started, stops the site's server, lets the run commit and
/// push, and waits until its watcher is gone: the run ended while the
/// server was away. The push's answer.
fn run_ends_while_away(site: &mut Site, m: &Machine, record: &str, out: &Path) -> Value {
    until(&format!("the run's start\n{}", m.node_log()), 90, || {
        notes(out)
            .iter()
            .any(|n| n["step"] == "started")
            .then_some(())
    });
    site.halt();
    std::fs::write(out.join("go"), b"").unwrap();
    let pushed = pushed(out, 1, m);
    let dir = ocx::node::config::NodeConfig::run_dir(&m.root(), record);
    until(&format!("the run's end\n{}", m.node_log()), 60, || {
        (!ocx::node::watcher_alive(&dir)).then_some(())
    });
    pushed
}

/// The receipt's number under which the served repository took `hash`.
fn receipt_of(site: &Site, hash: &str) -> Option<i64> {
    let db = rusqlite::Connection::open(&site.repo.file).unwrap();
    db.query_row(
        "SELECT rcvid FROM blob WHERE uuid=?1 AND size>=0",
        [hash],
        |r| r.get(0),
    )
    .ok()
}

/// The check-ins the served repository holds with comment `comment`, by hash.
fn checkins_named(site: &Site, comment: &str) -> Vec<String> {
    let db = rusqlite::Connection::open(&site.repo.file).unwrap();
    let mut q = db
        .prepare("SELECT b.uuid FROM event e JOIN blob b ON b.rid=e.objid WHERE e.type='ci' AND e.comment=?1")
        .unwrap();
    q.query_map([comment], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The responses to `record` on the served repository: hash, outcome,
/// note and sender each.
fn responses_in_full(site: &Site, record: &str) -> Vec<(String, String, String, String)> {
    site.response_posts(record)
        .iter()
        .filter_map(|(p, message)| {
            Some((
                p["hash"].as_str()?.to_string(),
                message["outcome"].as_str()?.to_string(),
                message["note"].as_str()?.to_string(),
                p["from"].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// Serves the site again and waits for the responses to `record` from
/// `m` to reach it; those responses.
fn served_again_answers(
    site: &mut Site,
    m: &Machine,
    record: &str,
) -> Vec<(String, String, String, String)> {
    site.serve_again();
    until(
        &format!("the run's response\n{}", m.node_log()),
        120,
        || {
            let r = responses_in_full(site, record);
            (!r.is_empty()).then_some(r)
        },
    )
}

#[test]
fn a_check_in_a_machines_run_pushed_while_its_server_was_away_reaches_it_before_the_runs_response()
{
    let mut site = Site::new();
    let (m, record, out) = away_run(&site, "away-m1");
    let pushed = run_ends_while_away(&mut site, &m, &record, &out);
    assert_eq!(pushed["isError"], true, "the push was refused: {pushed:#}");
    let said = pushed["structuredContent"]["stopped"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        said.contains("the machine keeps check-in"),
        "the refusal says the check-in is kept: {pushed:#}"
    );
    assert!(
        checkins_named(&site, "fix while away").is_empty(),
        "nothing reached the stopped server"
    );

    let answered = served_again_answers(&mut site, &m, &record);
    let fixes = checkins_named(&site, "fix while away");
    assert_eq!(
        fixes.len(),
        1,
        "the run's check-in reached the server, once\n{}",
        m.node_log()
    );
    assert_eq!(
        site.repo.sender(&fixes[0]).as_deref(),
        Some("away-m1"),
        "sent by the run's login"
    );
    let (response, outcome, note, from) = &answered[0];
    assert_eq!(
        (outcome.as_str(), from.as_str()),
        ("exited", m.login.as_str())
    );
    assert!(
        receipt_of(&site, &fixes[0]) < receipt_of(&site, response),
        "the check-in came before the response: {note}"
    );
    let r = site.repository();
    let tip = r.branch_tip("fixes").unwrap().unwrap();
    assert_eq!(r.hash_of(tip).unwrap(), fixes[0], "on fixes");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(responses_in_full(&site, &record).len(), 1, "answered once");
}

#[test]
fn a_machine_whose_server_is_away_with_a_response_to_push_backs_off_and_logs_once() {
    let mut site = Site::new();
    let (m, record, out) = away_run(&site, "away-m2");
    run_ends_while_away(&mut site, &m, &record, &out);
    let before = support::node_log(&m.root()).len();
    std::thread::sleep(Duration::from_secs(20));
    let during: Vec<Value> = support::node_log(&m.root())[before..].to_vec();
    assert!(
        during.len() <= 2,
        "{} lines in 20 s while the server was away:\n{:#?}",
        during.len(),
        &during[..during.len().min(10)]
    );

    let answered = served_again_answers(&mut site, &m, &record);
    assert_eq!(answered[0].1, "exited");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(responses_in_full(&site, &record).len(), 1, "answered once");
}

#[test]
fn a_check_in_a_machines_run_pushed_while_its_server_was_away_that_the_server_then_refuses_is_named_in_its_response()
 {
    let mut site = Site::new();
    let (m, record, out) = away_run(&site, "away-m3");
    run_ends_while_away(&mut site, &m, &record, &out);
    let committed = notes(&out)
        .into_iter()
        .find(|n| n["step"] == "commit")
        .unwrap();
    let fix = committed["said"]
        .as_str()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("New_Version: ")))
        .unwrap_or_else(|| panic!("the run committed: {committed:#}"))
        .trim()
        .to_string();

    // Meanwhile an administrator takes the run's login's capabilities away
    // on the served repository: the server no longer takes its push.
    site.repo.fossil(&["user", "capabilities", "away-m3", ""]);
    let answered = served_again_answers(&mut site, &m, &record);
    let (_, outcome, note, from) = &answered[0];
    assert_eq!(
        (outcome.as_str(), from.as_str()),
        ("exited", m.login.as_str())
    );
    assert!(
        note.contains(&format!(
            "the run's check-in {fix} did not reach the server"
        )),
        "the response names the check-in the server did not take: {note}"
    );
    assert!(
        checkins_named(&site, "fix while away").is_empty(),
        "the server took nothing of it"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(responses_in_full(&site, &record).len(), 1, "answered once");
}
