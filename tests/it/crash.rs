//! The node as a service that never falls over and loses nothing: run in
//! the foreground as systemd runs it, stopped with its runs going on or
//! ended, and processes killed by signal at the worst moments.

use crate::node::{EchoNode, forged_record};
use crate::support;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `ocx node start --foreground` for `s`'s repository, its stderr in `err`.
fn foreground(s: &EchoNode, err: &Path) -> Child {
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
    let s = EchoNode::new();
    s.node.repo.json(&["node", "stop"]).ok();
    let err = s.node.repo.dir.path().join("node.err");
    let mut node = foreground(&s, &err);
    serving(&s.root(), node.id());
    let record = s.record(&[]);
    assert!(s.lines(1)[0].starts_with(&format!("Record {record}")));
    let opened = format!("opened {}", &record[..10]);
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(stderr.contains(&opened), "stderr: {stderr}");
    assert_eq!(
        support::logged(&s.root(), |e| support::is(e, "opened", &record)),
        1,
        "{}",
        s.node_log()
    );

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
    assert!(support::node_free(&s.root()));
    s.node.repo.json(&["node", "stop", "--runs"]).ok();
}

#[test]
fn node_stop_with_runs_ends_each_run_answered_stopped_by_its_node_once() {
    let s = EchoNode::new();
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
    let s = EchoNode::new();
    let refused = s.node.repo.json(&["node", "start", "--foreground"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert_eq!(
        refused.answer()["stopped"]["kind"],
        "refused",
        "{refused:?}"
    );
    s.node.repo.json(&["node", "stop"]).ok();
    let socket = s.root().join("node.sock");
    let _ = std::fs::remove_file(&socket);
    std::fs::create_dir_all(socket.join("in-the-way")).unwrap();
    let err = s.node.repo.dir.path().join("node.err");
    let mut node = foreground(&s, &err);
    let status = ended(&mut node, Duration::from_secs(20)).expect("the node ended");
    assert_eq!(
        status.code(),
        Some(3),
        "a failure, nothing the caller gave: {status:?}"
    );
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(stderr.contains("node stopped"), "stderr: {stderr}");
    assert_eq!(
        support::logged(&s.root(), |e| e["done"] == "node stopped"),
        1,
        "{}",
        s.node_log()
    );
    std::fs::remove_dir_all(&socket).unwrap();
}

/// The run directory of `record` under `s`'s node.
fn run_dir(s: &EchoNode, record: &str) -> std::path::PathBuf {
    ocx::node::config::NodeConfig::run_dir(&s.root(), record)
}

fn posts(s: &EchoNode, record: &str) -> usize {
    let thread = s.node.repo.json(&["thread", "--of", record]).ok();
    thread["posts"].as_array().unwrap().len()
}

#[test]
fn a_half_written_state_never_opens_a_running_record_twice_nor_answers_one_twice() {
    let s = EchoNode::new();
    let node = s.node.repo.server_code();
    let record = s.record(&[]);
    s.lines(1);
    let refused = forged_record(
        &s,
        "admin",
        &node,
        serde_json::json!({"wall": "1m", "gpus": 1}),
    );
    assert_eq!(s.response(&refused).unwrap().0, "refused");
    s.settled();
    let password = std::fs::read(run_dir(&s, &record).join("password")).unwrap();
    s.node.repo.json(&["node", "stop"]).ok();
    let state = std::fs::read(s.root().join("state.json")).unwrap();
    std::fs::write(s.root().join("state.json"), &state[..state.len() / 2]).unwrap();

    s.node.repo.json(&["node", "start"]).ok();
    s.settled();
    assert_eq!(
        std::fs::read(run_dir(&s, &record).join("password")).unwrap(),
        password,
        "the running record's user kept its password"
    );
    let log = s.node_log();
    assert_eq!(
        support::logged(&s.root(), |e| support::is(e, "opened", &record)),
        1,
        "{log}"
    );
    assert_eq!(
        support::logged(&s.root(), |e| support::is(e, "found running", &record)),
        1,
        "{log}"
    );
    assert_eq!(
        posts(&s, &refused),
        2,
        "the refused record is answered once"
    );
    assert_eq!(posts(&s, &record), 1, "the running record is not answered");
    s.node
        .repo
        .json(&["post", "--to", &record, "--text", "after the rescan"])
        .ok();
    let lines = s.lines(2);
    assert!(
        lines[1].ends_with("from admin: after the rescan"),
        "{lines:?}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(s.log().lines().count(), 2, "given once: {}", s.log());
    s.node.repo.json(&["node", "stop", "--runs"]).ok();
}

#[test]
fn a_watcher_killed_mid_run_is_answered_lost_once_after_node_start() {
    let s = EchoNode::new();
    let record = s.record(&[]);
    s.lines(1);
    let dir = run_dir(&s, &record);
    crate::support::kill_from(&dir.join("watcher.pid"));
    let until = Instant::now() + Duration::from_secs(10);
    while ocx::node::watcher_alive(&dir) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(25));
    }
    let started = s.node.repo.json(&["node", "start"]).ok();
    assert_eq!(started["lost"].as_array().unwrap().len(), 1, "{started:#}");
    let (outcome, note, from) = s.response(&record).unwrap();
    assert_eq!(outcome, "lost");
    assert!(note.contains("watcher"), "{note}");
    assert!(from.starts_with("node-"), "{from}");
    s.node.repo.json(&["node", "stop"]).ok();
    let again = s.node.repo.json(&["node", "start"]).ok();
    assert!(again["lost"].as_array().unwrap().is_empty(), "{again:#}");
    s.settled();
    assert_eq!(posts(&s, &record), 2, "answered lost once");
}

#[test]
fn a_node_killed_mid_wake_answers_every_record_exactly_once_after_start() {
    let s = EchoNode::new();
    let node = s.node.repo.server_code();
    s.node.repo.json(&["node", "stop"]).ok();
    let records: Vec<String> = (0..30)
        .map(|_| {
            forged_record(
                &s,
                "admin",
                &node,
                serde_json::json!({"wall": "1m", "gpus": 1}),
            )
        })
        .collect();
    s.node.repo.json(&["node", "start"]).ok();
    let until = Instant::now() + Duration::from_secs(30);
    let refused = |e: &serde_json::Value| e["done"] == "refused";
    while support::logged(&s.root(), refused) == 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    crate::support::kill_from(&s.root().join("node.pid"));
    let answered = support::logged(&s.root(), refused);
    assert!(answered < records.len(), "killed mid-wake: {answered}");
    while !support::node_free(&s.root()) {
        std::thread::sleep(Duration::from_millis(25));
    }
    s.node.repo.json(&["node", "start"]).ok();
    s.settled();
    for r in &records {
        assert_eq!(s.response(r).unwrap().0, "refused");
        assert_eq!(posts(&s, r), 2, "{r} answered once");
    }
}

#[test]
fn a_command_run_started_before_the_state_was_saved_never_runs_twice() {
    let s = EchoNode::new();
    let count = s.out.join("count");
    let out = s.out.to_str().unwrap();
    s.command_record(
        &format!("echo ran >> {}\nexit 0\n", count.display()),
        &["--wall", "1m", "--read-write", out],
    );
    s.settled();
    let checkin = s.node.repo.commit_as("pat", "a.txt", "a", None);
    let ran = || std::fs::read_to_string(&count).unwrap_or_default();
    let until = Instant::now() + Duration::from_secs(60);
    while ran().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(ran(), "ran\n");
    s.settled();
    s.node.repo.json(&["node", "stop"]).ok();
    let rid = ocx::fossil::Repository::open(&s.node.repo.file)
        .unwrap()
        .receipt(&checkin)
        .unwrap()
        .unwrap()
        .rid;
    let mut state = ocx::node::wake::State::load(&s.root());
    assert!(state.last_rid >= rid);
    state.last_rid = rid - 1;
    std::fs::write(
        s.root().join("state.json"),
        serde_json::to_vec(&state).unwrap(),
    )
    .unwrap();

    s.node.repo.json(&["node", "start"]).ok();
    s.settled();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(ran(), "ran\n", "the check-in's run ran once");
}

/// Points the node's `fossil` at a program that, once, SIGKILLs the node
/// when the node asks `fossil sql` to make a login (its statements mark
/// the login, then make it): with the mark alone written (`after` false)
/// or with all of them (`after` true); otherwise it is `fossil`.
fn kill_node_on_user_new(s: &EchoNode, after: bool) {
    let file = s.root().join("node.json");
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let real = cfg["fossil"].as_str().unwrap().to_string();
    let dir = s.node.repo.dir.path();
    let armed = dir.join("armed");
    std::fs::write(&armed, "").unwrap();
    let input = dir.join("user-input");
    let wrapper = dir.join("prog/fossil-killer");
    let make = if after {
        format!("{real} \"$@\" < {}", input.display())
    } else {
        format!("grep -v 'INTO user' {} | {real} \"$@\"", input.display())
    };
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n\
             if [ \"$1\" = sql ] && [ -e {armed} ]; then\n\
               cat > {input}\n\
               if grep -q 'INSERT INTO user' {input}; then\n\
                 rm -f {armed}\n\
                 {make}\n\
                 kill -9 $(cat {root}/node.pid)\n\
                 exit 1\n\
               fi\n\
               exec {real} \"$@\" < {input}\n\
             fi\n\
             exec {real} \"$@\"\n",
            armed = armed.display(),
            input = input.display(),
            root = s.root().display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    cfg["fossil"] = wrapper.to_str().unwrap().into();
    std::fs::write(&file, serde_json::to_vec(&cfg).unwrap()).unwrap();
}

/// A record sent while the node is armed to die making its run's user:
/// after `ocx node start` the record is opened once, its user marked as a
/// run's with the run's capabilities, and the run hears it.
fn killed_making_a_run_user_opens_once(after: bool) {
    let s = EchoNode::new();
    kill_node_on_user_new(&s, after);
    let record = s.record(&[]);
    let user = crate::node::user_of(&s, &record);
    let until = Instant::now() + Duration::from_secs(30);
    while !support::node_free(&s.root()) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(support::node_free(&s.root()), "the node was killed");
    assert!(!s.node.repo.dir.path().join("armed").exists());
    let repo = ocx::fossil::Repository::open(&s.node.repo.file).unwrap();
    assert!(repo.is_run_user(&user).unwrap(), "marked before it is made");
    assert_eq!(repo.own_capabilities(&user).unwrap().is_some(), after);
    assert!(s.response_now(&record).is_none());

    s.node.repo.json(&["node", "start"]).ok();
    let lines = s.lines(1);
    assert!(lines[0].starts_with("Record "), "{lines:?}");
    s.settled();
    assert_eq!(
        support::logged(&s.root(), |e| support::is(e, "opened", &record)
            && e["login"] == user),
        1,
        "{}",
        s.node_log()
    );
    assert!(s.response_now(&record).is_none(), "running, not refused");
    assert_eq!(
        repo.own_capabilities(&user).unwrap().as_deref(),
        Some(ocx::node::wake::RUN_CAPABILITIES)
    );
    assert!(repo.is_run_user(&user).unwrap());
    s.node.repo.json(&["node", "stop", "--runs"]).ok();
    assert_eq!(posts(&s, &record), 2, "answered once: stopped");
}

#[test]
fn a_node_killed_after_marking_and_before_making_a_run_user_opens_the_record_once() {
    killed_making_a_run_user_opens_once(false);
}

#[test]
fn a_node_killed_after_making_a_run_user_and_before_recording_the_run_opens_it_once() {
    killed_making_a_run_user_opens_once(true);
}

/// What `fossil push` said it did: its round trips and the artifacts it
/// sent (a push cut off may end 0, having sent nothing).
fn push_said(said: &str) -> (usize, usize) {
    let number = |after: &str| {
        said.split(after)
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (number("Round-trips:"), number("Artifacts sent:"))
}

#[test]
fn a_server_killed_mid_push_loses_nothing_and_each_record_is_answered_once() {
    use crate::support::{Page, Repo, Served, fossil};
    use ocx::fossil::store::{self, Batch};
    use ocx::place::{self, Where};
    let served = Repo::new();
    let mut serving = Served::new()
        .admin_password()
        .page(Page::Fossil)
        .own_group()
        .start_on(&served);
    let port = serving.port;
    let node = ocx::fossil::Repository::open(&served.file)
        .unwrap()
        .server_code()
        .unwrap();

    let work = tempfile::tempdir().unwrap();
    let clone = work.path().join("clone.fossil");
    let co = work.path().join("co");
    std::fs::create_dir(&co).unwrap();
    let fossil_in = |args: &[&str]| {
        Command::new(fossil())
            .args(args)
            .current_dir(&co)
            .env("USER", "admin")
            .output()
            .unwrap()
    };
    let url = format!("http://admin:admin-pw@127.0.0.1:{port}/");
    assert!(
        fossil_in(&[
            "clone",
            "--save-http-password",
            &url,
            clone.to_str().unwrap()
        ])
        .status
        .success()
    );
    assert!(
        fossil_in(&["open", "--nosync", clone.to_str().unwrap()])
            .status
            .success()
    );
    let fossil_program = ocx::fossil::Fossil::locate().unwrap();

    let mut records = Vec::new();
    let mut cut_short = 0;
    for (round, delay) in [0u64, 15, 40, 80, 150, 300, 600, 1200]
        .into_iter()
        .enumerate()
    {
        let repo = ocx::fossil::Repository::open(&clone).unwrap();
        let mut batch = Batch::default();
        for i in 0..10 {
            let record = serde_json::json!({"ocx": 1, "kind": "record", "node": node,
                "user": format!("echo-{round:02x}{i:04x}"), "runner": "echo",
                "objective": "pushed", "checkins": [], "hears": [], "remote": false,
                "restrict": {}, "sandbox": {"network": false, "read_only": [], "read_write": []},
                "budget": {"wall": "1m", "gpus": 1}});
            let text = format!(
                "A record.\n\n{}",
                ocx::protocol::message::write(record.as_object().unwrap())
            );
            records.push(place::compose_message(
                &mut batch,
                repo.hash_policy().unwrap(),
                "admin",
                &Where::NewThread(format!("round {round} record {i}")),
                &text,
                "record",
            ));
        }
        store::store(&fossil_program, &repo, "admin", &batch, true).unwrap();
        drop(repo);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (round as u64 + 1);
        let bulk: Vec<u8> = (0..4 << 20)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let bulk_file = format!("bulk-{round}.bin");
        std::fs::write(co.join(&bulk_file), bulk).unwrap();
        fossil_in(&["add", &bulk_file]);
        let committed = fossil_in(&[
            "commit",
            "--nosync",
            "--no-warnings",
            "-m",
            &format!("round {round}"),
        ]);
        assert!(committed.status.success(), "{committed:?}");

        let push = Command::new(fossil())
            .args(["push"])
            .current_dir(&co)
            .env("USER", "admin")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        serving.halt();
        let _ = push.wait_with_output();
        serving.serve_again();
        let until = Instant::now() + Duration::from_secs(60);
        let mut first = true;
        loop {
            let again = fossil_in(&["push"]);
            let said = String::from_utf8_lossy(&again.stdout).to_string()
                + &String::from_utf8_lossy(&again.stderr);
            let (trips, sent) = push_said(&said);
            if first && sent > 0 {
                cut_short += 1;
            }
            first = false;
            if again.status.success() && trips > 0 && !said.contains("Error") {
                break;
            }
            assert!(
                Instant::now() < until,
                "the push never went through: {said}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    assert!(cut_short > 0, "no push was cut short by the kill");

    let integrity = Command::new(fossil())
        .args(["test-integrity", "-R"])
        .arg(&served.file)
        .output()
        .unwrap();
    assert!(integrity.status.success(), "{integrity:?}");
    let root = served.node_root();
    crate::support::handled_all(&served.file, &root, Duration::from_secs(60)).unwrap();
    let repo = ocx::fossil::Repository::open(&served.file).unwrap();
    for r in &records {
        let receipt = repo.receipt(r).unwrap().expect("every record arrived");
        assert_eq!(receipt.login.as_deref(), Some("admin"));
        let thread = served.json(&["thread", "--of", r]).ok();
        let posts = thread["posts"].as_array().unwrap();
        assert_eq!(
            posts.len(),
            2,
            "{r} answered once: {thread:#}\nthe node's log:\n{}",
            support::node_log_text(&root)
        );
    }
}

#[test]
fn node_stop_lists_a_command_run_going_and_with_runs_ends_it_answered_stopped_once() {
    let s = EchoNode::new();
    let began = s.out.join("began");
    let out = s.out.to_str().unwrap();
    let record = s.command_record(
        &format!("echo began > {}\nsleep 120\n", began.display()),
        &["--wall", "5m", "--read-write", out],
    );
    s.settled();
    let checkin = s.node.repo.commit_as("pat", "a.txt", "a", None);
    let until = Instant::now() + Duration::from_secs(60);
    while !began.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(began.exists(), "the command run began");

    let listed = s.node.repo.json(&["node", "stop"]).ok();
    assert_eq!(list(&listed["runs"]), vec![record.clone()], "{listed:#}");
    s.node.repo.json(&["node", "start"]).ok();
    let stopped = s.node.repo.json(&["node", "stop", "--runs"]).ok();
    assert_eq!(list(&stopped["ended"]), vec![record.clone()], "{stopped:#}");
    assert!(list(&stopped["runs"]).is_empty(), "{stopped:#}");
    let (outcome, note, from) = s.response(&record).expect("answered");
    assert_eq!(outcome, "stopped");
    assert!(note.starts_with("ended by its node"), "{note}");
    assert!(note.contains(&checkin[..10]), "{note}");
    assert!(from.starts_with("node-"), "{from}");
    let verdicts = s.node.repo.json(&["verdicts", "--checkin", &checkin]).ok();
    assert!(
        verdicts.to_string().find(&record[..10]).is_none(),
        "an ended run judges nothing: {verdicts:#}"
    );
    s.node.repo.json(&["node", "start"]).ok();
    s.settled();
    assert_eq!(posts(&s, &record), 2, "answered once");
    let user = crate::node::user_of(&s, &record);
    assert_eq!(
        ocx::fossil::Repository::open(&s.node.repo.file)
            .unwrap()
            .own_capabilities(&user)
            .unwrap()
            .as_deref(),
        Some(""),
        "its user's capabilities withdrawn"
    );
    s.node.repo.json(&["node", "stop"]).ok();
}

/// A repository in `sub` of a directory of its own, made a node (its hook
/// installed, pointing at a port no server listens on) and its node's
/// process started; the repository, and that process as the tests see it.
fn node_in(sub: &str) -> (support::Repo, support::OcxProcess) {
    let dir = tempfile::Builder::new()
        .prefix("ocx-test-")
        .tempdir()
        .unwrap();
    std::fs::create_dir(dir.path().join(sub)).unwrap();
    let file = dir.path().join(sub).join("repo.fossil");
    let made = Command::new(support::fossil())
        .args(["new", "--admin-user", "admin"])
        .arg(&file)
        .env("USER", "admin")
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", support::said(&made));
    let repo = support::Repo { dir, file };
    repo.fossil(&["user", "default", "admin"]);
    repo.json(&["hook", "install", "--url", "http://127.0.0.1:9/"])
        .ok();
    repo.json(&["node", "start"]).ok();
    let root = repo.node_root();
    let pid: i32 = std::fs::read_to_string(root.join("node.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let seen = support::nodes_and_watchers_under(repo.dir.path());
    assert!(
        seen.len() == 1 && seen[0].pid == pid && seen[0].command() == "node-daemon",
        "the node's process {pid}, and it alone, is seen running under its root: {seen:?}"
    );
    assert_eq!(seen[0].root(), Some(root.as_path()));
    (repo, seen.into_iter().next().unwrap())
}

/// Waits up to a minute for process `pid` to end; how long it took.
fn ends_within_a_minute(pid: i32, what: &str) -> Duration {
    let started = Instant::now();
    while !support::ended(pid) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the node's process {pid} lived on a minute after {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    started.elapsed()
}

#[test]
fn a_node_whose_repository_or_root_is_removed_stops_within_a_minute_saying_why_where_it_can() {
    // The repository removed: at once, said in the log its root keeps.
    let (repo, node) = node_in("a");
    let root = repo.node_root();
    std::fs::remove_file(&repo.file).unwrap();
    let took = ends_within_a_minute(node.pid, "its repository was removed");
    assert!(took < Duration::from_secs(10), "told at once: {took:?}");
    let stopped = support::until_logged(&root, 5, |e| e["done"] == "node stopped");
    let why = stopped["why"].as_str().unwrap();
    assert!(
        why.contains("repository") && why.contains(repo.file.to_str().unwrap()),
        "{why}"
    );
    assert!(support::nodes_and_watchers_under(repo.dir.path()).is_empty());

    // Its root removed: at once, with nowhere left to say why. Moved
    // aside first, so the removal is one step for the node, as `rm -r` of a
    // directory a process may still write in is not: a write of the node's
    // own between the removal's listing and its last `rmdir` would fail it.
    let (repo, node) = node_in("b");
    let aside = repo.dir.path().join("removed");
    std::fs::rename(repo.node_root(), &aside).unwrap();
    std::fs::remove_dir_all(&aside).unwrap();
    let took = ends_within_a_minute(node.pid, "its root was removed");
    assert!(took < Duration::from_secs(10), "told at once: {took:?}");
    assert!(repo.file.is_file(), "its repository is left as it was");

    // A directory above both moved away, of which inotify need tell the
    // node nothing: within a minute all the same.
    let (repo, node) = node_in("c");
    std::fs::rename(repo.dir.path().join("c"), repo.dir.path().join("moved")).unwrap();
    ends_within_a_minute(node.pid, "the directory above it was moved");
}
