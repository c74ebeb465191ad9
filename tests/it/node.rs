//! The node end to end: a repository served by `fossil server` on
//! 127.0.0.1 with OCX's hook installed and the node started, records
//! written by the tools, and a small runner program of ours standing where
//! Claude Code would: it writes each line it is given to a log and exits
//! when told to.

use crate::support::{Repo, Served, ServedNode};
use ocx::fossil::store::{self, Batch};
use ocx::place::{self, Where};
use serde_json::json;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const RUNNER: &str = r#"#!/usr/bin/python3
import sys, os, re
log = os.environ["OCX_TEST_LOG"]
for line in sys.stdin:
    with open(log, "a") as f:
        f.write(line)
    m = re.search(r"exit-now (\d+)", line)
    if m:
        sys.exit(int(m.group(1)))
"#;

/// A served repository that is a node, with the runner `echo` defined.
pub struct EchoNode {
    pub node: ServedNode,
    pub out: PathBuf,
}

impl EchoNode {
    pub fn new() -> EchoNode {
        let node = Served::new()
            .login("pat", "v4")
            .login("maint", "a")
            .echo(RUNNER, json!({}))
            .start();
        EchoNode {
            out: node.out.clone(),
            node,
        }
    }

    /// A record for the echo runner, its run hearing admin and maint.
    pub fn record(&self, extra: &[&str]) -> String {
        let args = crate::support::echo_record_args(self.out.to_str().unwrap(), extra);
        self.node.repo.json(&args).ok_str("record")
    }

    /// A command record on trunk whose command is a shell script of
    /// `body`, with `extra` arguments to `create`; the record's hash.
    pub fn command_record(&self, body: &str, extra: &[&str]) -> String {
        use std::os::unix::fs::PermissionsExt;
        let script = self.node.repo.dir.path().join("prog/command.sh");
        std::fs::write(&script, format!("#!/bin/sh\n{body}")).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let args = crate::support::checkin_record_args(script.to_str().unwrap(), extra);
        self.node.repo.json(&args).ok_str("record")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.out.join("log")).unwrap_or_default()
    }

    /// Waits until the runner's log holds `n` lines; answers them.
    pub fn lines(&self, n: usize) -> Vec<String> {
        let until = Instant::now() + Duration::from_secs(90);
        loop {
            let lines: Vec<String> = self.log().lines().map(str::to_string).collect();
            if lines.len() >= n || Instant::now() > until {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Waits for the node's response to `record`; answers its outcome,
    /// note and sender.
    pub fn response(&self, record: &str) -> Option<(String, String, String)> {
        let until = Instant::now() + Duration::from_secs(90);
        while Instant::now() < until {
            if let Some(r) = self.response_now(record) {
                return Some(r);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    /// The response to `record` the repository holds now, waiting for none.
    pub fn response_now(&self, record: &str) -> Option<(String, String, String)> {
        let thread = self.node.repo.json(&["thread", "--of", record]).ok();
        thread["posts"].as_array().unwrap().iter().find_map(|p| {
            let text = p["text"].as_str().unwrap();
            match ocx::protocol::message::read(text.as_bytes()) {
                ocx::protocol::message::Reading::Message { message }
                    if message["kind"] == "response" && message["answers"] == record =>
                {
                    Some((
                        message["outcome"].as_str().unwrap().into(),
                        message["note"].as_str().unwrap().into(),
                        p["from"].as_str().unwrap().into(),
                    ))
                }
                _ => None,
            }
        })
    }

    pub fn caps(&self, login: &str) -> Option<String> {
        ocx::fossil::Repository::open(&self.node.repo.file)
            .unwrap()
            .own_capabilities(login)
            .unwrap()
    }

    /// `login`'s own capabilities once they are `want`, or as they stand
    /// after ten seconds: the node withdraws a run user's capabilities
    /// right after it writes the response a test waits on.
    pub fn caps_become(&self, login: &str, want: &str) -> Option<String> {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let caps = self.caps(login);
            if caps.as_deref() == Some(want) || Instant::now() > until {
                return caps;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    pub fn root(&self) -> PathBuf {
        self.node.repo.node_root()
    }

    /// The node's log as written, for a failing test to show.
    pub fn node_log(&self) -> String {
        crate::support::node_log_text(&self.root())
    }

    /// Lists `paths` in the node's `node.json` as host paths a sender
    /// without admin may bind (read again at the next wake).
    pub fn let_senders_bind(&self, paths: &[&std::path::Path]) {
        let file = self.root().join("node.json");
        let mut cfg: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        cfg["bindable"] = json!(paths);
        std::fs::write(&file, cfg.to_string()).unwrap();
    }

    /// Waits until the node has handled every artifact the repository holds.
    pub fn settled(&self) {
        if let Err(last) =
            crate::support::handled_all(&self.node.repo.file, &self.root(), Duration::from_secs(60))
        {
            panic!("the node never handled row {last}: {}", self.node_log());
        }
    }
}

pub fn user_of(s: &EchoNode, record: &str) -> String {
    s.node.repo.run_user(record)
}

#[test]
fn a_record_opens_a_run_that_hears_what_its_record_says() {
    let s = EchoNode::new();
    assert_eq!(
        s.caps("echo-0a0b0c"),
        None,
        "no such login before its record"
    );
    let record = s.record(&["--checkins", "trunk", "--run-user", "echo-0a0b0c"]);
    assert_eq!(
        s.lines(1),
        vec![format!("Record {record}: Echo what you hear")]
    );
    assert_eq!(
        s.caps("echo-0a0b0c").as_deref(),
        Some("gijor234"),
        "exactly the run's capabilities while it runs"
    );
    s.node
        .repo
        .json(&["post", "--to", &record, "--text", "first, from admin"])
        .ok();
    let post_as = |user: &str, text: &str| {
        s.node
            .repo
            .json(&["post", "--user", user, "--to", &record, "--text", text])
            .ok()
    };
    post_as("pat", "pat is not heard");
    post_as("maint", "second\nfrom maint");
    let checkin = s.node.repo.commit_as("pat", "a.txt", "a", None);
    s.node.repo.commit_as("echo-0a0b0c", "b.txt", "b", None);
    s.node
        .repo
        .commit_as("pat", "c.txt", "c", Some("elsewhere"));
    let lines = s.lines(4);
    s.settled();
    std::thread::sleep(Duration::from_millis(300));
    let lines_after = s.lines(4);
    assert_eq!(lines, lines_after, "nothing more arrives");
    assert_eq!(lines.len(), 4, "{lines:#?}");
    assert!(
        lines[1].starts_with("Post ") && lines[1].ends_with(" from admin: first, from admin"),
        "{lines:#?}"
    );
    assert!(
        lines[2].ends_with(" from maint: second\\nfrom maint"),
        "a newline is written as \\n: {lines:#?}"
    );
    assert_eq!(lines[3], format!("Check-in {checkin} on trunk by pat"));
    s.node
        .repo
        .json(&["post", "--to", &record, "--text", "exit-now 3"])
        .ok();
    let (outcome, note, from) = s.response(&record).expect("answered");
    assert_eq!(
        (outcome.as_str(), from.as_str()),
        (
            "exited",
            format!("node-{}", &s.node.repo.server_code()[..8]).as_str()
        )
    );
    assert!(note.starts_with("exit 3 "), "{note}");
    assert_eq!(
        s.caps_become("echo-0a0b0c", "").as_deref(),
        Some(""),
        "capabilities withdrawn after the response"
    );
}

#[test]
fn stop_ends_the_run_with_stopped() {
    let s = EchoNode::new();
    let record = s.record(&[]);
    s.lines(1);
    s.node.repo.json(&["stop", "--record", &record]).ok();
    let (outcome, note, _) = s.response(&record).expect("answered");
    assert_eq!(outcome, "stopped", "{note}");
    let again = s.node.repo.json(&["stop", "--record", &record]);
    assert_eq!(again.refused(), "record");
}

pub fn forged_record(s: &EchoNode, sender: &str, node: &str, budget: serde_json::Value) -> String {
    let record = json!({"ocx": 1, "kind": "record", "node": node, "user": "echo-f0f0f0", "runner": "echo",
        "objective": "forged", "checkins": [], "hears": [], "remote": false, "restrict": {},
        "sandbox": {"network": true, "read_only": [], "read_write": [s.out]}, "budget": budget});
    record_by_hand(&s.node.repo, sender, &record)
}

/// Stores `record` in a thread of its own as sent by `sender` (its
/// receipt names `sender`), written by hand rather than by `create`, and
/// pokes the node; its hash.
pub fn record_by_hand(repo: &Repo, sender: &str, record: &serde_json::Value) -> String {
    let (hash, batch) = compose_record(repo, sender, record);
    let opened = ocx::fossil::Repository::open(&repo.file).unwrap();
    store::store(
        &ocx::fossil::Fossil::locate().unwrap(),
        &opened,
        sender,
        &batch,
        true,
    )
    .unwrap();
    ocx::node::poke_repository(&opened);
    hash
}

/// The post holding `record`, by `sender`, in a thread of its own, with
/// its tag, composed and not stored: its hash and the artifacts.
pub fn compose_record(repo: &Repo, sender: &str, record: &serde_json::Value) -> (String, Batch) {
    let opened = ocx::fossil::Repository::open(&repo.file).unwrap();
    let text = format!(
        "A record.\n\n{}",
        ocx::protocol::message::write(record.as_object().unwrap())
    );
    let mut batch = Batch::default();
    let hash = place::compose_message(
        &mut batch,
        opened.hash_policy().unwrap(),
        sender,
        &Where::NewThread("forged".into()),
        &text,
        "record",
    );
    (hash, batch)
}

#[test]
fn records_the_node_must_not_act_on_are_ignored_or_refused() {
    let s = EchoNode::new();
    let node = s.node.repo.server_code();
    let from_pat = forged_record(&s, "pat", &node, json!({"wall": "1m"}));
    let other_node = forged_record(&s, "admin", &"0".repeat(40), json!({"wall": "1m"}));
    let unknown_key = forged_record(&s, "admin", &node, json!({"wall": "1m", "gpus": 1}));
    let (outcome, note, _) = s.response(&unknown_key).expect("answered");
    assert_eq!(outcome, "refused");
    assert!(note.starts_with("budget.gpus:"), "{note}");
    let no_runner = s
        .node
        .repo
        .json(&[
            "create",
            "--runner",
            "nosuch",
            "--objective",
            "x",
            "--wall",
            "1m",
        ])
        .ok_str("record");
    let (outcome, note, _) = s.response(&no_runner).expect("answered");
    assert_eq!(outcome, "refused");
    assert!(
        note.starts_with("runner:"),
        "a runner the node does not offer: {note}"
    );
    s.settled();
    for ignored in [&from_pat, &other_node] {
        let thread = s.node.repo.json(&["thread", "--of", ignored]).ok();
        assert_eq!(
            thread["posts"].as_array().unwrap().len(),
            1,
            "nothing written for {ignored}"
        );
    }
    assert_eq!(s.log(), "", "no run started");
    assert!(
        crate::support::logged(&s.root(), |e| crate::support::is(e, "ignored", &from_pat)) > 0,
        "{}",
        s.node_log()
    );
    assert_eq!(s.caps("echo-f0f0f0"), None, "no login made");
}

#[test]
fn a_runner_page_the_node_refuses_is_answered_naming_its_field_and_why_in_the_response_and_the_log()
{
    let s = EchoNode::new();
    crate::support::runner_page(
        &s.node.repo,
        "own-tools",
        &json!({"command": ["/usr/bin/claude", "-p", "--allowedTools", "Bash"],
            "input": "claude-stream-json"}),
    );
    crate::support::runner_page(
        &s.node.repo,
        "numbered",
        &json!({"command": ["/bin/cat"], "hosts": ["10.0.0.1:443"], "input": "lines"}),
    );
    for (runner, field, why) in [
        (
            "own-tools",
            "command",
            "\"--allowedTools\" is the node's to give",
        ),
        ("numbered", "hosts[0]", "an address written as a number"),
    ] {
        let record = s
            .node
            .repo
            .json(&crate::support::create_args(runner, "x", "1m", &[]))
            .ok_str("record");
        let (outcome, note, _) = s.response(&record).expect("answered");
        assert_eq!(outcome, "refused", "{runner}");
        let said = format!("at {field}: ");
        assert!(
            note.starts_with("runner: ")
                && note.contains(&format!("sandbox/{runner}"))
                && note.contains(&said)
                && note.contains(why),
            "the response says which field of the page and why: {note}"
        );
        assert!(!note.contains("offers no runner"), "{note}");
        let logged = crate::support::until_logged(&s.root(), 10, |e| {
            crate::support::is(e, "refused", &record)
        });
        assert_eq!(logged["why"], note.as_str(), "the node's log says it too");
    }
    assert_eq!(s.log(), "", "no run started");
}

#[test]
fn a_killed_watcher_is_answered_lost_once() {
    let s = EchoNode::new();
    let record = s.record(&[]);
    assert_eq!(s.lines(1).len(), 1, "the run started: {}", s.node_log());
    let dir = ocx::node::config::NodeConfig::run_dir(&s.root(), &record);
    crate::support::kill_from(&dir.join("watcher.pid"));
    let until = Instant::now() + Duration::from_secs(10);
    while ocx::node::watcher_alive(&dir) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let first = s.node.repo.json(&["node", "start"]).ok();
    assert_eq!(first["lost"].as_array().unwrap().len(), 1, "{first:#}");
    let (outcome, _, _) = s.response(&record).expect("answered");
    assert_eq!(outcome, "lost");
    let second = s.node.repo.json(&["node", "start"]).ok();
    assert_eq!(second["lost"], json!([]));
    let thread = s.node.repo.json(&["thread", "--of", &record]).ok();
    let responses = thread["posts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["text"]
                .as_str()
                .unwrap()
                .contains("\"kind\": \"response\"")
        })
        .count();
    assert_eq!(responses, 1);
    assert_eq!(
        s.caps_become(&user_of(&s, &record), "").as_deref(),
        Some("")
    );
}

#[test]
fn a_command_record_gives_each_checkin_a_ci_verdict() {
    let s = EchoNode::new();
    let record = s.command_record(
        "test -f must-exist.txt && echo all good && exit 0\necho missing must-exist.txt\nexit 1\n",
        &["--wall", "1m", "--run-user", "ci-trunk"],
    );
    s.settled();
    let failing = s.node.repo.commit_as("pat", "a.txt", "a", None);
    let passing = s.node.repo.commit_as("pat", "must-exist.txt", "x", None);
    let verdict_of = |checkin: &str| -> Option<(String, String)> {
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            let v = s.node.repo.json(&["verdicts", "--checkin", checkin]).ok();
            if let Some(j) = v["counting"].as_array().unwrap().first() {
                return Some((
                    j["from"].as_str().unwrap().into(),
                    j["value"].as_str().unwrap().into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        None
    };
    assert_eq!(
        verdict_of(&failing),
        Some((
            "ci-trunk".into(),
            format!("fail: missing must-exist.txt (against {record})")
        ))
    );
    assert_eq!(
        verdict_of(&passing),
        Some((
            "ci-trunk".into(),
            format!("pass: all good (against {record})")
        ))
    );
    assert_eq!(
        s.caps("ci-trunk").as_deref(),
        Some("gijor234"),
        "a command record stays open"
    );
}

#[test]
fn hook_install_is_idempotent_and_remove_undoes_it() {
    let r = Repo::new();
    let before = r.json(&["status"]).ok();
    assert_eq!(before["node"], false);
    let dry = r
        .json(&[
            "hook",
            "install",
            "--url",
            "http://127.0.0.1:9/",
            "--dry-run",
        ])
        .ok();
    assert!(dry["hook"].as_str().unwrap().contains("hook-poke"));
    assert_eq!(
        r.json(&["status"]).ok()["node"],
        false,
        "a dry run installs nothing"
    );
    r.json(&["hook", "install", "--url", "http://127.0.0.1:9/"])
        .ok();
    r.json(&["hook", "install", "--url", "http://127.0.0.1:9/"])
        .ok();
    let hooks = r.fossil(&["hook", "list"]);
    assert_eq!(hooks.matches("hook-poke").count(), 1, "{hooks}");
    let status = r.json(&["status"]).ok();
    assert_eq!(status["node"], true);
    assert_eq!(
        status["preflight"]["sandbox"]["available"], true,
        "{status:#}"
    );
    let login = format!("node-{}", &r.server_code()[..8]);
    let caps = ocx::fossil::Repository::open(&r.file)
        .unwrap()
        .own_capabilities(&login)
        .unwrap();
    assert_eq!(
        caps.as_deref(),
        Some("cor4"),
        "the node's own login, never a person's capabilities"
    );
    assert_eq!(
        r.json(&["hook", "install", "--url", "ftp://x/"]).refused(),
        "url"
    );
    assert_eq!(
        r.json(&["hook", "install", "--url", "http://me:pw@127.0.0.1/"])
            .refused(),
        "url"
    );
    assert_eq!(r.json(&["hook", "remove"]).ok()["removed"], 1);
    assert!(!r.fossil(&["hook", "list"]).contains("hook-poke"));
    assert_eq!(r.json(&["status"]).ok()["node"], false);
}

#[test]
fn the_hook_reads_its_input_prints_nothing_and_pokes_the_node() {
    use std::io::Write;
    let root = tempfile::tempdir().unwrap();
    let socket = std::os::unix::net::UnixDatagram::bind(root.path().join("node.sock")).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ocx"))
        .arg("hook-poke")
        .arg(root.path())
        .env("GATEWAY_INTERFACE", "CGI/1.0")
        .env("REQUEST_METHOD", "GET")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = "abc check-in to trunk by pat on 2026-11-29 17:39\n".repeat(3000);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(
        out.stdout.is_empty() && out.stderr.is_empty(),
        "a hook must not print"
    );
    let mut buf = [0u8; 16];
    let n = socket.recv(&mut buf).expect("the node was poked");
    assert_eq!(&buf[..n], b"wake");
}

#[test]
fn fossil_itself_runs_the_installed_hook_which_pokes_the_node() {
    let r = Repo::new();
    let root = tempfile::tempdir().unwrap();
    r.json(&[
        "hook",
        "install",
        "--url",
        "http://127.0.0.1:9/",
        "--root",
        root.path().to_str().unwrap(),
    ])
    .ok();
    r.json(&["post", "--title", "Something arrives", "--text", "x"])
        .ok();
    let socket = std::os::unix::net::UnixDatagram::bind(root.path().join("node.sock")).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let hooks = r.fossil(&["hook", "list"]);
    let id = hooks.split(':').next().unwrap().trim().to_string();
    r.fossil(&["hook", "test", &id]);
    let mut buf = [0u8; 16];
    let n = socket.recv(&mut buf).expect("Fossil's hook poked the node");
    assert_eq!(&buf[..n], b"wake");
}

/// A record Fossil heard of before it held it (a phantom, as a push cut
/// short leaves one) and received later, when the node had passed its
/// row, is acted on once its content arrives.
#[test]
fn a_record_whose_row_was_a_phantom_the_node_passed_is_answered_when_it_arrives() {
    let s = EchoNode::new();
    let node = s.node.repo.server_code();
    let record = json!({"ocx": 1, "kind": "record", "node": node, "user": "echo-0f0f0f",
        "runner": "echo", "objective": "heard of first", "checkins": [], "hears": [],
        "remote": false, "restrict": {}, "sandbox": {"network": false, "read_only": [],
        "read_write": []}, "budget": {"wall": "1m", "gpus": 1}});
    let (hash, batch) = compose_record(&s.node.repo, "admin", &record);
    let db = rusqlite::Connection::open(&s.node.repo.file).unwrap();
    db.execute(
        "INSERT INTO blob(rcvid,size,uuid,content) VALUES(0,-1,?1,NULL)",
        [&hash],
    )
    .unwrap();
    db.execute(
        "INSERT INTO phantom(rid) SELECT rid FROM blob WHERE uuid=?1",
        [&hash],
    )
    .unwrap();
    drop(db);
    let after = s.record(&[]);
    s.settled();
    let state = ocx::node::wake::State::load(&s.root());
    assert!(
        !state.phantoms.is_empty(),
        "the node passed the phantom's row without keeping it: {:?}",
        state.phantoms
    );
    let opened = ocx::fossil::Repository::open(&s.node.repo.file).unwrap();
    store::store(
        &ocx::fossil::Fossil::locate().unwrap(),
        &opened,
        "admin",
        &batch,
        true,
    )
    .unwrap();
    ocx::node::poke_repository(&opened);
    let (outcome, note, _) = s
        .response(&hash)
        .unwrap_or_else(|| panic!("the record was never answered: {}", s.node_log()));
    assert_eq!(outcome, "refused", "{note}");
    assert!(note.starts_with("budget.gpus"), "{note}");
    s.node.repo.json(&["stop", "--record", &after]).ok();
}

#[test]
fn node_log_shows_a_runs_events_a_line_each_and_a_line_that_is_no_event_as_written() {
    use crate::support::{is, until_logged};
    use std::io::Write;
    let s = EchoNode::new();
    let record = s.record(&[]);
    s.lines(1);
    s.node.repo.json(&["stop", "--record", &record]).ok();
    let answered = until_logged(&s.root(), 60, |e| is(e, "answered", &record));
    assert_eq!(answered["outcome"], "stopped", "{answered}");
    std::fs::OpenOptions::new()
        .append(true)
        .open(s.root().join("node.log"))
        .unwrap()
        .write_all(b"an earlier release's line {\"done\n")
        .unwrap();

    let shown = s.node.repo.ocx(&["node", "log", "--last", "200"]);
    assert_eq!(shown.code, 0, "{}{}", shown.stdout, shown.stderr);
    let lines: Vec<&str> = shown.stdout.lines().collect();
    let short = &record[..10];
    for done in ["opened", "answered"] {
        let line = lines
            .iter()
            .find(|l| l.contains(&format!(" {done} {short}")))
            .unwrap_or_else(|| panic!("no {done} line: {}", shown.stdout));
        assert!(
            line.as_bytes()[..4].iter().all(u8::is_ascii_digit),
            "each line starts with its time: {line}"
        );
    }
    assert_eq!(
        lines.last().copied(),
        Some("an earlier release's line {\"done"),
        "{}",
        shown.stdout
    );

    let log = s.node.repo.json(&["node", "log", "--last", "200"]).ok()["log"].clone();
    let log = log.as_array().unwrap();
    assert!(
        log.iter()
            .any(|e| is(e, "opened", &record) && e["login"].is_string())
    );
    assert!(log.iter().any(|e| is(e, "answered", &record)));
    assert_eq!(
        log.last().unwrap(),
        &json!("an earlier release's line {\"done")
    );
    let last = s.node.repo.json(&["node", "log", "--last", "1"]).ok();
    assert_eq!(last["log"].as_array().unwrap().len(), 1, "{last:#}");
    assert_eq!(
        s.node.repo.json(&["node", "stop", "--last", "1"]).refused(),
        "last"
    );
}

/// The rows after `after` as one read finds them in received order: by
/// receipt (none first), then by row.
fn received_order(file: &std::path::Path, after: i64) -> Vec<i64> {
    let db = rusqlite::Connection::open(file).unwrap();
    let mut st = db
        .prepare("SELECT rid FROM blob WHERE rid>?1 AND size>=0 ORDER BY rcvid, rid")
        .unwrap();
    st.query_map([after], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The rows of the arrivals after `after`, read `at_once` at a time.
fn read_at_once(file: &std::path::Path, after: i64, at_once: usize) -> Vec<i64> {
    let repo = ocx::fossil::Repository::open(file).unwrap();
    let mut arrivals = repo.arrivals_after(after).unwrap();
    let mut rows = Vec::new();
    loop {
        let batch = arrivals.next(&repo, at_once).unwrap();
        assert!(batch.len() <= at_once, "{} read at once", batch.len());
        if batch.is_empty() {
            return rows;
        }
        rows.extend(batch.iter().map(|a| a.rid));
        assert!(
            rows.len() as i64 <= repo.last_rid().unwrap(),
            "a row read twice: {rows:?}"
        );
    }
}

#[test]
fn arrivals_read_a_few_at_a_time_are_each_read_once_in_received_order() {
    let r = Repo::new();
    let (late, late_batch) = compose_record(&r, "admin", &json!({"ocx": 1, "kind": "note"}));
    let db = rusqlite::Connection::open(&r.file).unwrap();
    db.execute(
        "INSERT INTO blob(rcvid,size,uuid,content) VALUES(0,-1,?1,NULL)",
        [&late],
    )
    .unwrap();
    db.execute(
        "INSERT INTO phantom(rid) SELECT rid FROM blob WHERE uuid=?1",
        [&late],
    )
    .unwrap();
    for i in 0..6 {
        r.json(&["post", "--title", &format!("thread {i}"), "--text", "x"])
            .ok();
    }
    let opened = ocx::fossil::Repository::open(&r.file).unwrap();
    let fossil = ocx::fossil::Fossil::locate().unwrap();
    store::store(&fossil, &opened, "admin", &late_batch, true).unwrap();
    db.execute(
        "UPDATE blob SET rcvid=NULL WHERE rid=(SELECT max(rid) FROM blob WHERE size>=0)",
        [],
    )
    .unwrap();
    let late_rid: i64 = db
        .query_row("SELECT rid FROM blob WHERE uuid=?1", [&late], |r| r.get(0))
        .unwrap();
    let all = received_order(&r.file, 0);
    let at = all.iter().position(|rid| *rid == late_rid).unwrap();
    assert!(
        all[..at].iter().any(|rid| *rid > late_rid) && all[0] == *all.iter().max().unwrap(),
        "the filled phantom's row comes after higher ones, the row of no receipt first: {all:?}"
    );
    for after in [0, all[all.len() / 2]] {
        let want = received_order(&r.file, after);
        for at_once in [1, 2, 3, 1000] {
            assert_eq!(
                read_at_once(&r.file, after, at_once),
                want,
                "{at_once} at a time after row {after}"
            );
        }
    }

    let mut arrivals = opened.arrivals_after(0).unwrap();
    let first = arrivals.next(&opened, 2).unwrap();
    r.json(&["post", "--title", "stored meanwhile", "--text", "x"])
        .ok();
    let mut rows: Vec<i64> = first.iter().map(|a| a.rid).collect();
    loop {
        let batch = arrivals.next(&opened, 2).unwrap();
        if batch.is_empty() {
            break;
        }
        rows.extend(batch.iter().map(|a| a.rid));
    }
    assert_eq!(
        rows, all,
        "what was stored after the reading began is the next reading's"
    );
}

#[test]
fn a_rescan_reading_more_than_a_batch_between_a_record_and_its_response_acts_on_nothing_twice() {
    let s = EchoNode::new();
    let node = s.node.repo.server_code();
    let record = json!({"ocx": 1, "kind": "record", "node": node, "user": "echo-0f0f0f",
        "runner": "echo", "objective": "answered before many posts", "checkins": [],
        "hears": [], "remote": false, "restrict": {}, "sandbox": {"network": false,
        "read_only": [], "read_write": []}, "budget": {"wall": "1m", "gpus": 1}});
    let (first, mut batch) = compose_record(&s.node.repo, "admin", &record);
    let opened = ocx::fossil::Repository::open(&s.node.repo.file).unwrap();
    let policy = opened.hash_policy().unwrap();
    let date = ocx::fossil::artifact::now();
    for i in 0..1500 {
        let post = ocx::fossil::artifact::ForumPost {
            date: &date,
            reply: None,
            title: Some(&format!("filler {i}")),
            mimetype: "text/x-markdown",
            user: "admin",
            text: "filler",
        }
        .compose();
        batch.add("forum post", post, policy);
    }
    let fossil = ocx::fossil::Fossil::locate().unwrap();
    store::store(&fossil, &opened, "admin", &batch, true).unwrap();
    ocx::node::poke_repository(&opened);
    assert_eq!(s.response(&first).expect("answered").0, "refused");
    let last = forged_record(&s, "admin", &node, json!({"wall": "1m", "gpus": 1}));
    assert_eq!(s.response(&last).expect("answered").0, "refused");
    s.settled();
    let root = s.root();
    let refused = |e: &serde_json::Value| e["done"] == "refused";
    let before = crate::support::logged(&root, refused);

    s.node.repo.json(&["node", "stop"]).ok();
    std::fs::remove_file(root.join("state.json")).unwrap();
    s.node.repo.json(&["node", "start"]).ok();
    s.settled();
    assert_eq!(
        crate::support::logged(&root, refused),
        before,
        "read again with no state, a record is refused again: {}",
        s.node_log()
    );
    for hash in [&first, &last] {
        let thread = s.node.repo.json(&["thread", "--of", hash]).ok();
        let responses = thread["posts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["text"].as_str().unwrap().contains(hash.as_str()))
            .count();
        assert_eq!(responses, 1, "{hash} answered once: {thread}");
    }
    let state = ocx::node::wake::State::load(&root);
    assert_eq!(state.last_rid, opened.last_rid().unwrap());
}

/// Field `n` (from 1, as proc(5) counts) of process `pid`'s
/// `/proc/PID/stat`, from the 3rd on.
fn stat_field(pid: i32, n: usize) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(n - 3)?
        .parse()
        .ok()
}

/// The parent of process `pid`.
fn parent_of(pid: i32) -> Option<i32> {
    stat_field(pid, 4)
}

/// The nice value of the autogroup (the session, as the kernel weighs
/// it) of process `pid`, where the kernel keeps autogroups.
fn session_nice(pid: i32) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/autogroup")).ok()?;
    text.split_whitespace().last()?.parse().ok()
}

/// Every process descending from `pid`, as their parents say now.
fn descendants(pid: i32) -> Vec<i32> {
    let all: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|p| Some((p, parent_of(p)?)))
        .collect();
    let mut found = vec![pid];
    let mut at = 0;
    while at < found.len() {
        let parent = found[at];
        found.extend(all.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        at += 1;
    }
    found.split_off(1)
}

#[test]
fn a_runs_watcher_is_forked_by_the_nodes_starter_reads_as_a_watcher_and_nothing_outlives_the_node()
{
    let s = EchoNode::new();
    let record = s.record(&["--checkins", "trunk"]);
    s.lines(1);
    let root = s.node.repo.node_root();
    let daemon: i32 = std::fs::read_to_string(root.join("node.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let seen = crate::support::nodes_and_watchers_under(s.node.repo.dir.path());
    let of = |command: &str| -> Vec<&crate::support::OcxProcess> {
        seen.iter().filter(|p| p.command() == command).collect()
    };
    let (starter, watcher) = (of("watchers"), of("watch"));
    assert!(
        starter.len() == 1 && watcher.len() == 1,
        "one starter and one watcher: {seen:?}"
    );
    let (starter, watcher) = (starter[0], watcher[0]);
    assert_eq!(
        parent_of(starter.pid),
        Some(daemon),
        "the node started its starter"
    );
    assert_eq!(
        parent_of(watcher.pid),
        Some(starter.pid),
        "the starter forked the watcher"
    );
    assert_eq!(
        watcher.args[1..],
        [
            "watch",
            "--root",
            root.to_str().unwrap(),
            "--record",
            &record
        ],
        "the watcher's command line is a watcher's, as ps shows it"
    );
    // The node's own sessions weigh more than a run's program's, which
    // keeps a session of its own at the weight of any.
    if session_nice(watcher.pid).is_some() {
        for own in [daemon, starter.pid, watcher.pid] {
            assert_eq!(session_nice(own), Some(-10), "the node's own process {own}");
        }
        let session = |p| stat_field(p, 6);
        let programs: Vec<i32> = descendants(watcher.pid)
            .into_iter()
            .filter(|p| session(*p) != session(watcher.pid))
            .collect();
        assert!(
            !programs.is_empty(),
            "the run's program is in a session of its own"
        );
        for p in programs {
            assert_eq!(session_nice(p), Some(0), "the run's process {p}");
        }
    }
    s.node
        .repo
        .json(&["post", "--to", &record, "--text", "exit-now 0"])
        .ok();
    assert!(s.response(&record).is_some(), "answered");
    let stopped = s.node.repo.json(&["node", "stop"]).ok();
    assert_eq!(stopped["running"], false, "{stopped:#}");
    let left = crate::support::nodes_and_watchers_under(s.node.repo.dir.path());
    assert!(
        left.is_empty(),
        "once stopped, no process of the node is left: {left:?}"
    );
}

/// A runner that reads its workspace as a person would, notes what it
/// found, then checks in a file there and ends.
const WORKSPACE_RUNNER: &str = r#"
for line in sys.stdin:
    if not line.startswith("Record "):
        continue
    code, info = fossil("info")
    checkout = [l.split()[1] for l in info.splitlines() if l.startswith("checkout:")]
    db = sqlite3.connect(".clone.fossil")
    users = db.execute("SELECT login, cap FROM user ORDER BY login").fetchall()
    config = dict(db.execute("SELECT name, value FROM config WHERE name IN ('default-user', 'last-sync-url', 'last-sync-pw') OR name GLOB 'ckout:*'").fetchall())
    db.close()
    local = sqlite3.connect(".fslckout")
    repository = local.execute("SELECT value FROM vvar WHERE name='repository'").fetchone()[0]
    local.close()
    with open("made-by-the-run.txt", "w") as f:
        f.write("the run's own\n")
    fossil("add", "made-by-the-run.txt")
    committed, said = fossil("commit", "-m", "from a workspace made ahead", "--no-warnings")
    db = sqlite3.connect(".clone.fossil")
    tip = [h for (h,) in db.execute("SELECT uuid FROM blob WHERE rid=(SELECT objid FROM event WHERE type='ci' ORDER BY mtime DESC LIMIT 1)")]
    db.close()
    note({"checkout": checkout, "users": users, "config": config, "repository": repository,
          "cwd": os.getcwd(), "committed": committed, "said": said,
          "tip": tip})
    sys.exit(0)
"#;

/// A node whose runner `ws` reads its workspace ([`WORKSPACE_RUNNER`]),
/// on a repository with one check-in that `prepare` may change first,
/// once the node has made its filesystems ahead; the runner's `out`.
fn workspace_node(prepare: impl FnOnce(&Repo)) -> (ServedNode, PathBuf) {
    let repo = Repo::new();
    let (runner, out) = crate::support::runner_script(
        &repo,
        &format!("{}{WORKSPACE_RUNNER}", crate::support::PY_RUNNER_PRELUDE),
    );
    let block = json!({"command": [runner], "input": "lines",
        "env": {"OCX_TEST_OUT": out, "OCX_TEST_FOSSIL": crate::support::fossil()}});
    crate::support::runner_page(&repo, "ws", &block);
    repo.commit_as("admin", "README", "first\n", None);
    prepare(&repo);
    let s = Served::on(repo).start();
    let pool = s.repo.node_root().join("disks");
    let ready = || {
        std::fs::read_dir(&pool)
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".img"))
                    .count()
            })
            .unwrap_or(0)
    };
    let until = Instant::now() + Duration::from_secs(60);
    while ready() < ocx::node::daemon::DISKS_AHEAD && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        ready(),
        ocx::node::daemon::DISKS_AHEAD,
        "filesystems made ahead"
    );
    (s, out)
}

/// Checks in on trunk, then runs a record for `ws` as the login `wsrun`;
/// its watcher's log, once the run has checked in from its workspace as
/// a person would and found it as a clone of the run's own would be: its
/// checkout that newest check-in, its login the clone's administrator and
/// default user, its remote the server as that login, its password
/// remembered, and its check-in received from that login.
fn run_in_its_workspace(s: &ServedNode, out: &std::path::Path) -> String {
    let newest = s.repo.commit_as("admin", "README", "second\n", None);
    let args = crate::support::create_args(
        "ws",
        "Read the workspace",
        "5m",
        &["--run-user", "wsrun", "--read-write", out.to_str().unwrap()],
    );
    let record = s.repo.json(&args).ok_str("record");
    let results = out.join("results");
    let until = Instant::now() + Duration::from_secs(90);
    while !results.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let noted: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&results).unwrap().trim()).unwrap();
    let checkout = noted["checkout"][0].as_str().unwrap_or("-");
    assert!(
        checkout.len() >= 40 && newest.starts_with(checkout),
        "the checkout is the newest check-in {newest}: {noted:#}"
    );
    assert_eq!(
        noted["users"],
        json!([
            ["anonymous", "hz"],
            ["developer", "ei"],
            ["nobody", "gjorz"],
            ["reader", "kptw"],
            ["wsrun", "s"]
        ]),
        "the run's login is its clone's administrator, and no other is: {noted:#}"
    );
    let config = &noted["config"];
    let cwd = noted["cwd"].as_str().unwrap();
    assert_eq!(config["default-user"], "wsrun", "{noted:#}");
    assert_eq!(
        config["last-sync-url"],
        format!("http://wsrun@127.0.0.1:{}/", s.port),
        "{noted:#}"
    );
    assert!(
        config["last-sync-pw"]
            .as_str()
            .is_some_and(|p| !p.is_empty()),
        "its password is remembered: {noted:#}"
    );
    let ckouts: Vec<&String> = config
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.starts_with("ckout:"))
        .collect();
    assert_eq!(ckouts, [&format!("ckout:{cwd}/")], "{noted:#}");
    assert_eq!(
        noted["repository"],
        format!("{cwd}/.clone.fossil"),
        "{noted:#}"
    );
    assert_eq!(noted["committed"], 0, "the run checked in: {noted:#}");
    let tip = noted["tip"][0].as_str().unwrap().to_string();
    assert!(
        !newest.starts_with(&tip),
        "a check-in of its own: {noted:#}"
    );
    let until = Instant::now() + Duration::from_secs(30);
    while s.repo.sender(&tip).is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        s.repo.sender(&tip).as_deref(),
        Some("wsrun"),
        "the run's check-in reached the server, sent by its login"
    );
    let dir = ocx::node::config::NodeConfig::run_dir(&s.repo.node_root(), &record);
    std::fs::read_to_string(dir.join("watch.log")).unwrap_or_default()
}

#[test]
fn a_run_takes_a_workspace_made_ahead_holding_what_a_clone_of_its_own_would_and_pushes_as_its_login()
 {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: the node makes filesystems ahead only as root");
        return;
    }
    let (s, out) = workspace_node(|_| {});
    let log = run_in_its_workspace(&s, &out);
    assert!(
        log.contains("took a workspace made ahead, pulled as wsrun"),
        "the run took a workspace made ahead: {log}"
    );
}

#[test]
fn where_nobody_may_not_clone_no_workspace_is_made_ahead_the_node_says_so_once_and_runs_clone_their_own()
 {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: the node makes filesystems ahead only as root");
        return;
    }
    let (s, out) = workspace_node(|repo| {
        repo.fossil(&["user", "capabilities", "nobody", "j"]);
    });
    let root = s.repo.node_root();
    let said = |e: &serde_json::Value| {
        e["why"]
            .as_str()
            .is_some_and(|d| d.starts_with("no workspace could be made ahead"))
    };
    assert_eq!(
        crate::support::logged(&root, said),
        1,
        "said once, though each filesystem made ahead tried: {}",
        crate::support::node_log_text(&root)
    );
    let log = run_in_its_workspace(&s, &out);
    assert!(
        !log.contains("workspace made ahead"),
        "the run cloned its own, as before: {log}"
    );
}

#[test]
fn the_nodes_furnisher_refuses_a_directory_outside_its_pool_and_changes_nothing() {
    let s = EchoNode::new();
    let root = s.node.repo.node_root();
    let outside = s.node.repo.dir.path().join("a-persons-directory");
    std::fs::create_dir(&outside).unwrap();
    let pool = root.join("disks");
    std::fs::create_dir_all(&pool).unwrap();
    let full = pool.join("not-empty.tree");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("kept"), b"kept\n").unwrap();
    for into in [&outside, &full] {
        let ran = Command::new(env!("CARGO_BIN_EXE_ocx"))
            .args([
                "workspace-ahead",
                "--root",
                root.to_str().unwrap(),
                "--into",
            ])
            .arg(into)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&ran.stderr);
        assert_eq!(ran.status.code(), Some(1), "{said}");
        assert!(
            said.contains("is no empty directory of the node's pool") && !said.contains("panicked"),
            "{said}"
        );
    }
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    assert_eq!(std::fs::read(full.join("kept")).unwrap(), b"kept\n");
}
