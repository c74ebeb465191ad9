//! The node as a service that never falls over and loses nothing: run in
//! the foreground as systemd runs it, stopped with its runs going on or
//! ended, and processes killed by signal at the worst moments.

use crate::node::Served;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `ocx node start --foreground` for `s`'s repository, its stderr in `err`.
fn foreground(s: &Served, err: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ocx"))
        .args(["node", "start", "--foreground", "--json", "--repository"])
        .arg(&s.node.repo.file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(err).unwrap())
        .spawn()
        .unwrap()
}

/// Waits until `child` has ended; answers how.
fn ended(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    None
}

/// Waits until the node's process at `root` is `pid`, its socket bound.
fn serving(root: &Path, pid: u32) {
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        if std::fs::read_to_string(root.join("node.pid"))
            .ok()
            .as_deref()
            == Some(pid.to_string().as_str())
            && root.join("node.sock").exists()
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("the foreground node never served");
}

fn list(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_foreground_node_acts_logs_on_stderr_and_ends_on_a_term_leaving_its_runs() {
    let s = Served::new();
    s.node.repo.json(&["node", "stop"]).ok();
    let err = s.node.repo.dir.path().join("node.err");
    let mut node = foreground(&s, &err);
    serving(&s.root(), node.id());
    let record = s.record(&[]);
    assert!(s.lines(1)[0].starts_with(&format!("Record {record}")));
    let opened = format!("opened {}", &record[..10]);
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(stderr.contains(&opened), "stderr: {stderr}");
    assert!(s.node_log().contains(&opened));

    let stopped = s.node.repo.json(&["node", "stop"]).ok();
    let status = ended(&mut node, Duration::from_secs(10)).expect("the node ended");
    assert_eq!(status.signal(), Some(15), "{status:?}");
    assert_eq!(stopped["running"], false);
    assert_eq!(list(&stopped["runs"]), vec![record.clone()]);
    assert!(list(&stopped["ended"]).is_empty());
    std::thread::sleep(Duration::from_millis(500));
    let thread = s.node.repo.json(&["thread", "--of", &record]).ok();
    assert_eq!(
        thread["posts"].as_array().unwrap().len(),
        1,
        "a run outlives its node: {thread:#}"
    );

    let again = s
        .node
        .repo
        .json(&["node", "start", "--foreground", "--runs"]);
    assert_eq!(again.refused(), "runs");
    assert!(node_free(&s.root()));
    s.node.repo.json(&["node", "stop", "--runs"]).ok();
}

fn node_free(root: &Path) -> bool {
    ocx::node::lock(&root.join("node.lock"), false)
        .unwrap()
        .is_some()
}

#[test]
fn node_stop_with_runs_ends_each_run_answered_stopped_by_its_node_once() {
    let s = Served::new();
    let record = s.record(&[]);
    s.lines(1);
    let stopped = s.node.repo.json(&["node", "stop", "--runs"]).ok();
    assert_eq!(list(&stopped["ended"]), vec![record.clone()]);
    assert!(list(&stopped["runs"]).is_empty(), "{stopped:#}");
    let (outcome, note, from) = s.response(&record).expect("answered");
    assert_eq!(outcome, "stopped");
    assert!(note.starts_with("ended by its node"), "{note}");
    assert!(from.starts_with("node-"), "{from}");
    s.node.repo.json(&["node", "start"]).ok();
    s.settled();
    let stopped = s.node.repo.json(&["node", "stop", "--runs"]).ok();
    assert!(list(&stopped["ended"]).is_empty());
    let thread = s.node.repo.json(&["thread", "--of", &record]).ok();
    assert_eq!(
        thread["posts"].as_array().unwrap().len(),
        2,
        "answered once: {thread:#}"
    );
}

#[test]
fn a_foreground_node_that_cannot_serve_exits_non_zero_saying_why() {
    let s = Served::new();
    let refused = s.node.repo.json(&["node", "start", "--foreground"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(refused.stdout.contains("already"), "{}", refused.stdout);
    s.node.repo.json(&["node", "stop"]).ok();
    let socket = s.root().join("node.sock");
    let _ = std::fs::remove_file(&socket);
    std::fs::create_dir_all(socket.join("in-the-way")).unwrap();
    let err = s.node.repo.dir.path().join("node.err");
    let mut node = foreground(&s, &err);
    let status = ended(&mut node, Duration::from_secs(20)).expect("the node ended");
    assert_eq!(status.code(), Some(1), "{status:?}");
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(stderr.contains("the node stopped"), "stderr: {stderr}");
    assert!(s.node_log().contains("the node stopped"));
    std::fs::remove_dir_all(&socket).unwrap();
}
