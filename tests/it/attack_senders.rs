//! Attacks by a sender of runs: a login holding OCX's `R` but not admin,
//! writing records by hand (its receipt names it), against the node and
//! two agent machines. It may not open a record as a login another open
//! record's run holds, reset that login's password or take its letters
//! away, nor bind into its run a host path the node does not list for
//! such senders. Each asserts the attack failed and the victim kept what
//! it had.

use crate::machines::{Machine, Site, until};
use crate::node::{EchoNode, record_by_hand};
use crate::support::{self, Repo};
use serde_json::{Value, json};
use std::path::Path;

/// A record for `node` run as `user` by the `echo` runner, binding
/// `read_only` and `read_write`.
fn record(node: &str, user: &str, read_only: &[&Path], read_write: &[&Path]) -> Value {
    json!({"ocx": 1, "kind": "record", "node": node, "user": user, "runner": "echo",
        "objective": "written by hand", "checkins": [], "hears": [], "remote": false,
        "restrict": {}, "sandbox": {"network": false, "read_only": read_only,
        "read_write": read_write}, "budget": {"wall": "5m"}})
}

/// The hash Fossil keeps of `login`'s password, and its own letters.
fn login_row(repo: &Repo, login: &str) -> (Option<String>, Option<String>) {
    let db = rusqlite::Connection::open(&repo.file).unwrap();
    db.query_row("SELECT pw, cap FROM user WHERE login=?1", [login], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .unwrap_or((None, None))
}

/// Gives `login` the run's letters and OCX's `R`, without admin.
fn sender_of_runs(repo: &Repo, login: &str) {
    repo.user(login, "gijor234");
    repo.json(&["send_runs", login]).ok();
}

/// The outcome and note of the response to `record` on the served site.
fn answered(site: &Site, record: &str) -> (String, String) {
    until(&format!("a response to {record}"), 90, || {
        site.thread(record).iter().find_map(|p| {
            match ocx::protocol::message::read(p["text"].as_str()?.as_bytes()) {
                ocx::protocol::message::Reading::Message { message }
                    if message["kind"] == "response" && message["answers"] == record =>
                {
                    Some((
                        message["outcome"].as_str()?.to_string(),
                        message["note"].as_str().unwrap_or("").to_string(),
                    ))
                }
                _ => None,
            }
        })
    })
}

#[test]
fn a_sender_holding_r_takes_over_no_login_another_record_holds_on_the_node_or_a_machine() {
    let site = Site::new();
    let (m1, m2) = (Machine::enrol(&site), Machine::enrol(&site));
    let here = site.repo.server_code();
    sender_of_runs(&site.repo, "mallory");
    let on_m1 = site.record(&m1.code, "victim-far");
    support::until_logged(&m1.root(), 90, |e| support::is(e, "opened", &on_m1));
    let on_node = site.record(&here, "victim-near");
    until("the run on the node", 90, || {
        (site.caps("victim-near").as_deref() == Some("gijor234")).then_some(())
    });
    let far = login_row(&site.repo, "victim-far");
    let near = login_row(&site.repo, "victim-near");
    assert_eq!(far.1.as_deref(), Some("gijor234"), "{far:?}");

    let attacks = [
        (
            here.as_str(),
            "victim-far",
            "the node, as the first machine's run",
        ),
        (
            m2.code.as_str(),
            "victim-far",
            "the second machine, as the first's run",
        ),
        (
            m2.code.as_str(),
            "victim-near",
            "the second machine, as the node's run",
        ),
        (here.as_str(), "victim-near", "the node, as its own run"),
    ];
    for (node, user, what) in attacks {
        let hash = record_by_hand(&site.repo, "mallory", &record(node, user, &[], &[]));
        let (outcome, note) = answered(&site, &hash);
        assert_eq!(outcome, "refused", "{what}: {note}");
        assert!(note.starts_with("user:"), "{what}: {note}");
        assert_eq!(
            login_row(&site.repo, "victim-far"),
            far,
            "{what}: the first machine's run login changed"
        );
        assert_eq!(
            login_row(&site.repo, "victim-near"),
            near,
            "{what}: the node's run login changed"
        );
    }
    for node in [m2.code.as_str(), here.as_str()] {
        let by_admin = record_by_hand(&site.repo, "admin", &record(node, "victim-far", &[], &[]));
        let (outcome, note) = answered(&site, &by_admin);
        assert_eq!(
            outcome, "refused",
            "an administrator's record takes no held login either: {note}"
        );
        assert_eq!(login_row(&site.repo, "victim-far"), far);
    }

    let pat = site.pat_clone();
    site.pat_posts(pat.path(), &on_m1, "still yours?");
    assert_eq!(
        site.line("answered"),
        "answered ok",
        "the first machine's run could no longer write:\n{}",
        site.log()
    );
    assert!(
        site.responses(&on_m1).is_empty(),
        "the victim's record was answered"
    );
    assert!(
        site.responses(&on_node).is_empty(),
        "the victim's record was answered"
    );
}

#[test]
fn a_sender_holding_r_names_only_a_new_login() {
    let s = EchoNode::new();
    let node = s.node.repo.server_code();
    sender_of_runs(&s.node.repo, "mallory");
    s.let_senders_bind(&[&s.out]);
    let first = s.record(&[]);
    s.lines(1);
    s.node.repo.json(&["stop", "--record", &first]).ok();
    s.response(&first).expect("stopped");
    let used = s.node.repo.json(&["status"]).ok();
    assert!(used["node"] == true, "{used:#}");
    let user = first_user(&s, &first);
    let before = login_row(&s.node.repo, &user);
    let hash = record_by_hand(
        &s.node.repo,
        "mallory",
        &record(&node, &user, &[], &[&s.out]),
    );
    let (outcome, note, _) = s.response(&hash).expect("answered");
    assert_eq!(outcome, "refused", "{note}");
    assert!(
        note.starts_with("user:") && note.contains("new login"),
        "{note}"
    );
    assert_eq!(
        login_row(&s.node.repo, &user),
        before,
        "its password was reset"
    );
    let fresh = record_by_hand(
        &s.node.repo,
        "mallory",
        &record(&node, "mallory-run-1", &[], &[&s.out]),
    );
    support::until_logged(&s.root(), 60, |e| support::is(e, "opened", &fresh));
    s.node
        .repo
        .json(&["stop", "--record", &fresh, "--user", "mallory"])
        .ok();
}

/// The run login record `hash` names.
fn first_user(s: &EchoNode, hash: &str) -> String {
    let shown = s.node.repo.json(&["thread", "--of", hash]).ok();
    let text = shown["posts"][0]["text"].as_str().unwrap().to_string();
    match ocx::protocol::message::read(text.as_bytes()) {
        ocx::protocol::message::Reading::Message { message } => {
            message["user"].as_str().unwrap().to_string()
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_sender_holding_r_binds_no_host_path_the_node_does_not_list() {
    let s = EchoNode::new();
    let node = s.node.repo.server_code();
    sender_of_runs(&s.node.repo, "mallory");
    let host = tempfile::tempdir().unwrap();
    let secret = host.path().join("other.fossil.ocx-node");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(
        secret.join("credentials.json"),
        r#"{"login": "node-12345678", "password": "another-repositorys-secret"}"#,
    )
    .unwrap();
    let shared = host.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("data.txt"), "shared\n").unwrap();
    std::os::unix::fs::symlink(&secret, shared.join("leak")).unwrap();

    let refused = |read_only: &[&Path], read_write: &[&Path], field: &str| {
        let hash = record_by_hand(
            &s.node.repo,
            "mallory",
            &record(
                &node,
                &format!("mallory-{}", &field[8..12]),
                read_only,
                read_write,
            ),
        );
        let (outcome, note, _) = s.response(&hash).expect("answered");
        assert_eq!(outcome, "refused", "{read_only:?} {read_write:?}: {note}");
        assert!(note.starts_with(&format!("{field}:")), "{field}: {note}");
    };
    refused(&[&secret], &[], "sandbox.read_only");
    refused(&[], &[&secret], "sandbox.read_write");
    refused(&[Path::new("/")], &[], "sandbox.read_only");
    s.let_senders_bind(&[&shared, &s.out]);
    refused(&[&shared.join("leak")], &[&s.out], "sandbox.read_only");
    refused(
        &[&shared.join("../other.fossil.ocx-node")],
        &[&s.out],
        "sandbox.read_only",
    );
    let status = s.node.repo.json(&["status"]).ok();
    let listed: Vec<&str> = status["bindable"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(listed.contains(&shared.to_str().unwrap()), "{status:#}");

    let allowed = record_by_hand(
        &s.node.repo,
        "mallory",
        &record(&node, "mallory-allowed", &[&shared], &[&s.out]),
    );
    let by_admin = record_by_hand(
        &s.node.repo,
        "admin",
        &record(&node, "admin-binds", &[&secret], &[&s.out]),
    );
    for hash in [&allowed, &by_admin] {
        support::until_logged(&s.root(), 60, |e| support::is(e, "opened", hash));
        s.node.repo.json(&["stop", "--record", hash]).ok();
    }
}
