//! Attacks on the protocol's boundary, each made as an attacker would: a
//! record naming a login that is not a run's, a value meant to reach
//! `fossil` as an option, a `user` tag meant to discount a verdict, a
//! runner page edited by someone without standing, and messages sent
//! through a real `fossil server` sync by a login that may not send them.
//! Each asserts the attack failed and that nothing changed.

use crate::support::{self, Repo, Served, ServedNode, verdicts};
use ocx::fossil::artifact::WikiPage;
use ocx::fossil::store::{self, Batch};
use ocx::place::{self, Place, Where};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const RUNNER: &str = r#"#!/usr/bin/python3
import sys, os
log = os.environ["OCX_TEST_LOG"]
for line in sys.stdin:
    with open(log, "a") as f:
        f.write(line)
"#;

/// A served node with the runner `echo` (its page written by admin), the
/// administrator `maint`, and people holding no standing: `rita` (a login
/// made by hand, who syncs) and `mallory` (who may check in and edit the
/// wiki, so any artifact she pushes is stored).
struct Node {
    node: ServedNode,
    out: PathBuf,
}

impl Node {
    fn new() -> Node {
        let repo = Repo::new();
        repo.user("maint", "a")
            .user("rita", "gio")
            .user("mallory", "giok3");
        let out = support::echo_runner(&repo, RUNNER, json!({}));
        Node {
            node: Served::on(repo).start(),
            out,
        }
    }

    fn repo(&self) -> &Repo {
        &self.node.repo
    }

    fn root(&self) -> PathBuf {
        self.repo().node_root()
    }

    fn url(&self) -> String {
        ocx::node::config::NodeConfig::load(&self.root())
            .unwrap()
            .url
    }

    fn port(&self) -> u16 {
        self.url()
            .trim_end_matches('/')
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    }

    fn node_login(&self) -> String {
        format!("node-{}", &self.repo().server_code()[..8])
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.out.join(name)).unwrap_or_default()
    }

    /// Waits until the runner's log `name` holds `n` lines; answers them.
    fn lines(&self, name: &str, n: usize) -> Vec<String> {
        let until = Instant::now() + Duration::from_secs(90);
        loop {
            let lines: Vec<String> = self.log(name).lines().map(str::to_string).collect();
            if lines.len() >= n || Instant::now() > until {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    fn node_log(&self) -> String {
        support::node_log_text(&self.root())
    }

    /// Waits until the node's log holds an event `matches` holds of;
    /// answers whether it did.
    fn node_logs(&self, matches: impl Fn(&Value) -> bool) -> bool {
        support::logged_within(&self.root(), Duration::from_secs(30), matches).is_some()
    }

    /// Waits until the node has handled every artifact the repository holds.
    fn settled(&self) {
        if let Err(last) =
            crate::support::handled_all(&self.repo().file, &self.root(), Duration::from_secs(30))
        {
            panic!("the node never handled row {last}: {}", self.node_log());
        }
    }

    /// `login`'s row of the user table: its password (as stored) and letters.
    fn user_row(&self, login: &str) -> Option<(String, String)> {
        let db = rusqlite::Connection::open(&self.repo().file).unwrap();
        db.query_row(
            "SELECT coalesce(pw,''), coalesce(cap,'') FROM user WHERE login=?1",
            [login],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .ok()
    }

    /// A record for the echo runner naming `user`, composed and stored by
    /// an administrator directly, as a record written anywhere but `create`.
    fn record_by_admin(&self, user: &str) -> String {
        let repo = ocx::fossil::Repository::open(&self.repo().file).unwrap();
        let mut batch = Batch::default();
        let text = record_text(&self.repo().server_code(), user, &self.out);
        let hash = place::compose_message(
            &mut batch,
            repo.hash_policy().unwrap(),
            "admin",
            &Where::NewThread("a record".into()),
            &text,
            "record",
        );
        store::store(
            &ocx::fossil::Fossil::locate().unwrap(),
            &repo,
            "admin",
            &batch,
            true,
        )
        .unwrap();
        ocx::node::poke_repository(&repo);
        hash
    }

    /// A record for the echo runner written by `create` as admin.
    fn record(&self) -> String {
        self.repo()
            .json(&crate::support::echo_record_args(
                self.out.to_str().unwrap(),
                &[],
            ))
            .ok_str("record")
    }

    /// The node's response to `record` (outcome, note, sender), waiting for it.
    fn response(&self, record: &str) -> Option<(String, String, String)> {
        let until = Instant::now() + Duration::from_secs(90);
        while Instant::now() < until {
            if let Some(r) = self.answer(record) {
                return Some(r);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    /// The response that counts for `record` now, if any.
    fn answer(&self, record: &str) -> Option<(String, String, String)> {
        let repo = ocx::fossil::Repository::open(&self.repo().file).unwrap();
        let r = repo.receipt(record).unwrap()?;
        let standing = ocx::protocol::found::record(&repo, r.rid, record)
            .unwrap()
            .unwrap();
        let found = ocx::node::Receipts::served(&repo)
            .response(&repo, &standing.place, record, &self.repo().server_code())
            .unwrap()?;
        let ocx::protocol::kinds::Kind::Known(ocx::protocol::kinds::Message::Response(m)) =
            found.kind
        else {
            return None;
        };
        Some((m.outcome, m.note, found.said.from.unwrap_or_default()))
    }

    /// How many posts `record`'s thread holds.
    fn posts(&self, record: &str) -> usize {
        self.repo().json(&["thread", "--of", record]).ok()["posts"]
            .as_array()
            .unwrap()
            .len()
    }
}

fn page_text(runner: &Path, log: &Path) -> String {
    support::echo_page(runner, &json!({ "OCX_TEST_LOG": log }))
}

fn record_text(node: &str, user: &str, out: &Path) -> String {
    let record = json!({"ocx": 1, "kind": "record", "node": node, "user": user, "runner": "echo",
        "objective": "Echo what you hear", "checkins": [], "hears": ["admin"], "remote": false,
        "restrict": {}, "sandbox": {"network": true, "read_only": [], "read_write": [out]},
        "budget": {"wall": "5m"}});
    format!(
        "A record.\n\n{}",
        ocx::protocol::message::write(record.as_object().unwrap())
    )
}

/// A clone made over HTTP by `login` with `password`, from which artifacts
/// composed by hand are pushed, so the server's receipt names `login`.
struct Clone {
    _dir: tempfile::TempDir,
    file: PathBuf,
    login: String,
    password: String,
    port: u16,
}

impl Clone {
    fn new(port: u16, login: &str, password: &str) -> Result<Clone, String> {
        let dir = tempfile::Builder::new()
            .prefix("ocx-attacker-")
            .tempdir()
            .unwrap();
        let file = dir.path().join("clone.fossil");
        let out = Command::new(support::fossil())
            .arg("clone")
            .arg(format!("http://{login}:{password}@127.0.0.1:{port}/"))
            .arg(&file)
            .env("USER", login)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(Clone {
            _dir: dir,
            file,
            login: login.into(),
            password: password.into(),
            port,
        })
    }

    fn fossil(&self, args: &[&str]) -> String {
        let out = Command::new(support::fossil())
            .args(args)
            .arg("-R")
            .arg(&self.file)
            .env("USER", &self.login)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let said = crate::support::said(&out);
        assert!(out.status.success(), "fossil {args:?}: {said}");
        said
    }

    /// Pushes what the clone holds to the server, as its login.
    fn push(&self) {
        let url = format!(
            "http://{}:{}@127.0.0.1:{}/",
            self.login, self.password, self.port
        );
        let said = self.fossil(&["push", &url, "--once"]);
        assert!(
            said.contains("Round-trips") && !said.contains("Error"),
            "push: {said}"
        );
    }

    /// Stores `batch` in the clone and pushes it.
    fn send(&self, batch: &Batch) {
        let repo = ocx::fossil::Repository::open(&self.file).unwrap();
        store::store(
            &ocx::fossil::Fossil::locate().unwrap(),
            &repo,
            &self.login,
            batch,
            true,
        )
        .unwrap();
        self.push();
    }
}

/// `GET path` from the server on `port` as a visitor: its status line and body.
fn http_get(port: u16, path: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let status = text.lines().next().unwrap_or("").to_string();
    (status, text)
}

fn refused_naming_user(n: &Node, record: &str) -> String {
    let (outcome, note, from) = n.response(record).expect("the node answers the record");
    assert_eq!(outcome, "refused", "{note}");
    assert!(note.starts_with("user: "), "{note}");
    assert_eq!(from, n.node_login());
    note
}

#[test]
fn a_record_naming_nobody_is_refused_and_visitors_still_read_the_site() {
    let n = Node::new();
    let checkin = n.repo().commit_as("admin", "a.txt", "a", None);
    let page = format!("/info/{checkin}");
    let (status, body) = http_get(n.port(), &page);
    assert!(status.contains(" 200 "), "{status}");
    assert!(body.contains(&checkin), "a visitor reads the check-in");
    let nobody = n.user_row("nobody");
    let at_create = n.repo().json(&crate::support::echo_args(
        "x",
        "1m",
        &["--run-user", "nobody"],
    ));
    assert_eq!(at_create.refused(), "user");
    let record = n.record_by_admin("nobody");
    let note = refused_naming_user(&n, &record);
    assert!(note.contains("Fossil's own logins"), "{note}");
    n.settled();
    assert_eq!(n.user_row("nobody"), nobody, "nobody's row is untouched");
    let (status, after) = http_get(n.port(), &page);
    assert!(status.contains(" 200 "), "{status}");
    assert!(
        after.contains(&checkin),
        "a visitor still reads the check-in"
    );
    assert_eq!(n.log("log"), "", "no run started");
}

#[test]
fn a_record_naming_a_persons_own_login_is_refused_and_their_password_still_syncs() {
    let n = Node::new();
    let rita = n.user_row("rita");
    let at_create = n.repo().json(&crate::support::echo_args(
        "x",
        "1m",
        &["--run-user", "rita"],
    ));
    assert_eq!(at_create.refused(), "user");
    let record = n.record_by_admin("rita");
    let note = refused_naming_user(&n, &record);
    assert!(note.contains("no administrator adopted"), "{note}");
    n.settled();
    assert_eq!(
        n.user_row("rita"),
        rita,
        "rita's password and letters unchanged"
    );
    Clone::new(n.port(), "rita", "rita-pw").expect("rita still syncs with her password");
    assert_eq!(n.log("log"), "", "no run started");
}

#[test]
fn a_login_an_administrator_adopts_may_be_a_run_user_and_loses_its_letters_after() {
    let n = Node::new();
    assert_eq!(
        n.repo().json(&["adopt", "--login", "maint"]).refused(),
        "login",
        "an administrator is never adopted"
    );
    assert_eq!(
        n.repo().json(&["adopt", "--login", "nobody"]).refused(),
        "login"
    );
    n.repo().json(&["adopt", "--login", "rita"]).ok();
    let record = n.repo().json(&crate::support::echo_record_args(
        n.out.to_str().unwrap(),
        &["--run-user", "rita"],
    ));
    let record = record.ok_str("record");
    assert_eq!(
        n.lines("log", 1),
        vec![format!("Record {record}: Echo what you hear")]
    );
    assert_eq!(n.user_row("rita").unwrap().1, "gijor234");
    n.repo().json(&["stop", "--record", &record]).ok();
    assert_eq!(n.response(&record).unwrap().0, "stopped");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !n.user_row("rita").unwrap().1.is_empty() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    assert_eq!(n.user_row("rita").unwrap().1, "", "withdrawn after");
}

#[test]
fn records_naming_the_nodes_login_or_an_administrator_are_refused() {
    let n = Node::new();
    let login = n.node_login();
    let (node_row, maint_row) = (n.user_row(&login), n.user_row("maint"));
    for user in [login.as_str(), "maint", "admin"] {
        let at_create = n.repo().json(&[
            "create",
            "--runner",
            "echo",
            "--objective",
            "x",
            "--wall",
            "1m",
            "--run-user",
            user,
        ]);
        assert_eq!(at_create.refused(), "user", "{user}");
    }
    let of_node = n.record_by_admin(&login);
    let of_admin = n.record_by_admin("maint");
    assert!(refused_naming_user(&n, &of_node).contains("node's own login"));
    assert!(refused_naming_user(&n, &of_admin).contains("admin or setup"));
    n.settled();
    assert_eq!(n.user_row(&login), node_row);
    assert_eq!(n.user_row("maint"), maint_row);
    assert_eq!(n.log("log"), "", "no run started");
}

#[test]
fn values_beginning_with_a_dash_are_refused_naming_the_field() {
    let n = Node::new();
    let r = n.repo();
    r.fossil(&["user", "capabilities", "admin", "sy"]);
    let before = r.hashes();
    let uv_before = r.fossil(&["uv", "list"]);
    let tries: &[(&str, serde_json::Value, &str)] = &[
        (
            "unversioned_put",
            json!({"name": "--chdir=/", "text": "x"}),
            "name",
        ),
        ("unversioned_get", json!({"name": "--chdir=/"}), "name"),
        (
            "wiki_edit",
            json!({"page": "--chdir=/", "old": "", "new": "x"}),
            "page",
        ),
        ("wiki_read", json!({"page": "--chdir=/"}), "page"),
        (
            "create",
            json!({"runner": "echo", "objective": "x", "budget": {"wall": "1m"}, "user": "--chdir=/"}),
            "user",
        ),
        (
            "create",
            json!({"runner": "echo", "objective": "x", "budget": {"wall": "1m"},
                "restrict": {"no_password": true, "branch": "--chdir=/"}}),
            "restrict.branch",
        ),
    ];
    for (tool, input, field) in tries {
        let input_text = input.to_string();
        let run = r.json(&[*tool, "--input", input_text.as_str()]);
        assert_eq!(run.refused(), *field, "{tool} {input}");
        assert!(
            run.answer()["stopped"]["reason"]
                .as_str()
                .unwrap()
                .contains("begins with '-'"),
            "{}",
            run.stdout
        );
    }
    assert_eq!(r.hashes(), before, "nothing written");
    assert_eq!(r.fossil(&["uv", "list"]), uv_before);
    let fossil = ocx::fossil::Fossil::locate().unwrap();
    let direct = fossil.uv_put(&r.file, "--chdir=/", b"x", "admin");
    assert!(
        matches!(direct, Err(ocx::fossil::FossilError::OptionLike { .. })),
        "{direct:?}"
    );
    let record = n.record_by_admin("--chdir=/");
    refused_naming_user(&n, &record);
    n.settled();
    assert_eq!(n.user_row("--chdir=/"), None, "no login made");
    assert_eq!(r.fossil(&["uv", "list"]), uv_before);
}

#[test]
fn a_user_tag_naming_a_verdicts_sender_does_not_discount_it() {
    let r = Repo::new();
    r.user("pat", "gio")
        .user("reviewer", "gio")
        .user("mallory", "gio");
    let mut server = support::Served::new().without_node().start_on(&r);
    let port = server.port;
    let checkin = r.commit_as("pat", "a.txt", "a", None);
    r.json(&[
        "audit",
        "--user",
        "reviewer",
        "--checkin",
        &checkin,
        "--verdict",
        "fail",
        "--reason",
        "breaks the build",
        "--against",
        "PLAN.md",
    ])
    .ok();
    let mallory = Clone::new(port, "mallory", "mallory-pw").unwrap();
    mallory.fossil(&["amend", &checkin, "--author", "reviewer"]);
    mallory.push();
    let pat = Clone::new(port, "pat", "pat-pw").unwrap();
    pat.fossil(&[
        "tag",
        "add",
        "--raw",
        "audited",
        &checkin,
        "pass: mine is fine (against PLAN.md)",
    ]);
    pat.fossil(&["amend", &checkin, "--author", "someone-else"]);
    pat.push();
    let db = rusqlite::Connection::open(&r.file).unwrap();
    let (user, edited): (String, String) = db
        .query_row(
            "SELECT e.user, e.euser FROM event e JOIN blob b ON b.rid=e.objid WHERE b.uuid=?1",
            [&checkin],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        (user.as_str(), edited.as_str()),
        ("pat", "someone-else"),
        "the tags reached the server and Fossil shows the edited user"
    );
    let (yes, no) = verdicts(&r, &checkin);
    assert_eq!(
        yes,
        vec![(
            "reviewer".to_string(),
            "fail: breaks the build (against PLAN.md)".to_string()
        )],
        "the reviewer's verdict still counts"
    );
    assert_eq!(no.len(), 1, "{no:?}");
    assert_eq!(no[0].0, "pat");
    assert!(no[0].1.contains("author's own"), "{no:?}");
    let own = r.json(&[
        "audit",
        "--user",
        "pat",
        "--checkin",
        &checkin,
        "--verdict",
        "pass",
        "--reason",
        "mine",
        "--against",
        "PLAN.md",
    ]);
    assert_eq!(own.refused(), "checkin");
    let unaudited = r.json(&["unaudited"]).ok();
    assert!(
        !unaudited.to_string().contains(&checkin),
        "judged by the reviewer: {unaudited}"
    );
    server.halt();
}

#[test]
fn a_non_administrators_future_dated_runner_page_is_ignored_and_an_administrators_later_edit_counts()
 {
    let n = Node::new();
    let repo = || ocx::fossil::Repository::open(&n.repo().file).unwrap();
    let admins = repo().wiki_page("sandbox/echo").unwrap().unwrap();
    let mallory = Clone::new(n.port(), "mallory", "mallory-pw").unwrap();
    let text = "# Mine now\n\n```json\n{\"command\": [\"/bin/false\"]}\n```\n";
    let bytes = WikiPage {
        date: "2099-01-01T00:00:00.000",
        name: "sandbox/echo",
        mimetype: "text/x-markdown",
        parent: Some(admins.hash.as_str()),
        user: "admin",
        text,
    }
    .compose();
    let mut batch = Batch::default();
    batch.add("wiki page", bytes, repo().hash_policy().unwrap());
    mallory.send(&batch);
    n.settled();
    let shown = repo().wiki_page("sandbox/echo").unwrap().unwrap();
    assert_eq!(
        shown.sent_by.as_deref(),
        Some("mallory"),
        "Fossil shows mallory's version as the newest"
    );
    let page = ocx::node::Receipts::served(&repo())
        .runner_page(&repo(), "echo")
        .unwrap()
        .unwrap();
    assert_eq!(
        page.command,
        vec![
            n.repo()
                .dir
                .path()
                .join("prog")
                .join("runner.py")
                .display()
                .to_string()
        ]
    );
    let record = n.record();
    assert_eq!(
        n.lines("log", 1),
        vec![format!("Record {record}: Echo what you hear")],
        "the runner is still offered, as admin wrote it"
    );
    n.repo().json(&["stop", "--record", &record]).ok();
    assert_eq!(n.response(&record).unwrap().0, "stopped");
    let older = WikiPage {
        date: "2001-01-01T00:00:00.000",
        name: "sandbox/echo",
        mimetype: "text/x-markdown",
        parent: Some(shown.hash.as_str()),
        user: "admin",
        text: &page_text(
            &n.repo().dir.path().join("prog").join("runner.py"),
            &n.out.join("log2"),
        ),
    }
    .compose();
    n.repo().import_as("admin", &[older]);
    let page = ocx::node::Receipts::served(&repo())
        .runner_page(&repo(), "echo")
        .unwrap()
        .unwrap();
    assert_eq!(
        page.env["OCX_TEST_LOG"],
        n.out.join("log2").display().to_string(),
        "admin's later edit counts though dated earlier"
    );
    let record = n.record();
    assert_eq!(
        n.lines("log2", 1),
        vec![format!("Record {record}: Echo what you hear")]
    );
    n.repo().json(&["stop", "--record", &record]).ok();
    n.response(&record);
}

#[test]
fn a_record_whose_u_card_names_the_admin_sent_by_a_login_without_standing_is_not_acted_on() {
    let n = Node::new();
    let mallory = Clone::new(n.port(), "mallory", "mallory-pw").unwrap();
    let mut batch = Batch::default();
    let record = place::compose_message(
        &mut batch,
        ocx::fossil::Repository::open(&mallory.file)
            .unwrap()
            .hash_policy()
            .unwrap(),
        "admin",
        &Where::NewThread("a record".into()),
        &record_text(&n.repo().server_code(), "echo-abc123", &n.out),
        "record",
    );
    mallory.send(&batch);
    n.settled();
    assert_eq!(n.repo().sender(&record).as_deref(), Some("mallory"));
    assert!(
        n.node_logs(|e| support::is(e, "ignored", &record) && e["arrival"] == record),
        "{}",
        n.node_log()
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(n.log("log"), "", "no run started");
    assert_eq!(n.user_row("echo-abc123"), None, "no login made");
    assert_eq!(n.posts(&record), 1, "nothing answered");
}

/// Composes, in `clone`, a message of `kind` replying to `record` with
/// `fields`, its U card naming `user`.
fn reply_batch(
    clone: &Clone,
    record: &str,
    user: &str,
    fields: serde_json::Value,
    kind: &str,
) -> Batch {
    let repo = ocx::fossil::Repository::open(&clone.file).unwrap();
    let rid = repo
        .receipt(record)
        .unwrap()
        .expect("the clone has the record")
        .rid;
    let at = Where::At(Place::Thread {
        root_rid: rid,
        root: record.into(),
        post_rid: rid,
        post: record.into(),
    });
    let text = format!(
        "A {kind}.\n\n{}",
        ocx::protocol::message::write(fields.as_object().unwrap())
    );
    let mut batch = Batch::default();
    place::compose_message(
        &mut batch,
        repo.hash_policy().unwrap(),
        user,
        &at,
        &text,
        kind,
    );
    batch
}

#[test]
fn a_stop_sent_by_a_non_administrator_is_ignored_and_the_run_goes_on() {
    let n = Node::new();
    let record = n.record();
    n.lines("log", 1);
    let mallory = Clone::new(n.port(), "mallory", "mallory-pw").unwrap();
    let stop = json!({"ocx": 1, "kind": "stop", "node": n.repo().server_code(), "stops": record});
    mallory.send(&reply_batch(&mallory, &record, "admin", stop, "stop"));
    n.settled();
    assert!(
        n.node_logs(|e| support::is(e, "ignored", &record) && e["arrival"] != record),
        "{}",
        n.node_log()
    );
    n.repo()
        .json(&["post", "--to", &record, "--text", "still there?"])
        .ok();
    let lines = n.lines("log", 2);
    assert!(
        lines.len() == 2 && lines[1].ends_with(" from admin: still there?"),
        "the run goes on: {lines:?}"
    );
    assert_eq!(n.answer(&record), None, "not answered");
    n.repo().json(&["stop", "--record", &record]).ok();
    assert_eq!(n.response(&record).unwrap().0, "stopped");
}

#[test]
fn a_response_from_a_login_not_the_nodes_does_not_answer_the_record() {
    let n = Node::new();
    let record = n.record();
    n.lines("log", 1);
    let user = {
        let repo = ocx::fossil::Repository::open(&n.repo().file).unwrap();
        let rid = repo.receipt(&record).unwrap().unwrap().rid;
        ocx::protocol::found::record(&repo, rid, &record)
            .unwrap()
            .unwrap()
            .record
            .user
    };
    let mallory = Clone::new(n.port(), "mallory", "mallory-pw").unwrap();
    let response = json!({"ocx": 1, "kind": "response", "node": n.repo().server_code(),
        "answers": record, "outcome": "exited", "note": "exit 0"});
    let login = n.node_login();
    mallory.send(&reply_batch(
        &mallory, &record, &login, response, "response",
    ));
    n.settled();
    assert_eq!(n.answer(&record), None, "mallory's response does not count");
    assert!(
        ocx::node::wake::State::load(&n.root())
            .open
            .contains_key(&record),
        "still open on the node"
    );
    assert_eq!(n.user_row(&user).unwrap().1, "gijor234", "its letters kept");
    n.repo()
        .json(&["post", "--to", &record, "--text", "still heard"])
        .ok();
    assert_eq!(n.lines("log", 2).len(), 2, "the run still hears its place");
    n.repo().json(&["stop", "--record", &record]).ok();
    let (outcome, _, from) = n.response(&record).unwrap();
    assert_eq!(
        (outcome.as_str(), from.as_str()),
        ("stopped", login.as_str())
    );
}
