//! Benchmark of agent machines: from a `fossil push` of a check-in to the
//! server returning, to a run on an agent machine reading its line. One
//! `fossil server` serves the repository with OCX's page and its own node;
//! three agent machines (clones with nodes of their own, enrolled with
//! `ocx machine` and `approve --node`) run a session runner that notes when
//! it reads each line. First one record on one machine, beside the
//! anchor: the same push, then a clone's own `fossil pull` of it (what
//! the machine does before it delivers), taken in turns; then 50 open
//! records spread over the three; a clone pushes check-ins one at a time.
//!
//! Run: `cargo bench --bench machines` (as root, as the nodes run);
//! `OCX_BENCH_PUSHES=N` sets the number of pushes (default 30).

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

mod common;

use common::{now_ns, read_at, stat};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

const RUNNER: &str = r#"#!/usr/bin/python3
import sys, os, time
os.umask(0)
log = os.path.join(os.environ["OCX_BENCH_OUT"], os.environ["OCX_RUN_USER"])
for line in sys.stdin:
    with open(log, "a") as f:
        f.write("%d %s" % (time.time_ns(), line))
"#;

fn main() {
    let pushes: usize = std::env::var("OCX_BENCH_PUSHES")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(30);
    let fossil = ocx::fossil::Fossil::locate()
        .expect("fossil: run scripts/setup.sh")
        .path()
        .to_path_buf();
    let ocx = PathBuf::from(env!("CARGO_BIN_EXE_ocx"));
    let place = common::bench_dir(RUNNER);
    let dir = place.tmp.path();
    let (out, runner) = (&place.out, &place.runner);
    let repo = dir.join("served.fossil");
    let r = repo.to_str().unwrap().to_string();
    let f = |args: &[&str], cwd: &Path| {
        let o = Command::new(&fossil)
            .args(args)
            .env("USER", "admin")
            .current_dir(cwd)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    f(&["new", "--admin-user", "admin", &r], dir);
    f(&["user", "default", "admin", "-R", &r], dir);
    f(&["user", "new", "pat", "x", "patpw", "-R", &r], dir);
    f(&["user", "capabilities", "pat", "v4", "-R", &r], dir);
    let page = dir.join("page.md");
    let block =
        serde_json::json!({"command": [runner], "env": {"OCX_BENCH_OUT": out}, "input": "lines"});
    std::fs::write(&page, format!("```json\n{block}\n```\n")).unwrap();
    f(
        &[
            "wiki",
            "create",
            "sandbox/bench",
            page.to_str().unwrap(),
            "--mimetype",
            "text/x-markdown",
            "-R",
            &r,
        ],
        dir,
    );
    let (server, port) = common::serve_with_page(&fossil, &ocx, dir, &repo);
    let base = format!("http://127.0.0.1:{port}");
    let mut guard = Guard {
        ocx: ocx.clone(),
        served: repo.clone(),
        machines: Vec::new(),
        server,
    };
    let o = |args: &[&str], cwd: &Path, repository: &str| -> serde_json::Value {
        let out = Command::new(&ocx)
            .args(args)
            .args(["--repository", repository, "--json"])
            .env("USER", "admin")
            .current_dir(cwd)
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
            panic!(
                "{args:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    };
    let ok = |answer: serde_json::Value| {
        assert_eq!(answer["ok"], true, "{answer:#}");
        answer["result"].clone()
    };
    ok(o(&["hook", "install", "--url", &base], dir, &r));
    ok(o(&["node", "start"], dir, &r));

    let mut codes = Vec::new();
    for i in 0..3 {
        let m = dir.join(format!("machine{i}"));
        std::fs::create_dir(&m).unwrap();
        let asked = o(&["machine", &base], &m, "agent.fossil");
        assert_eq!(asked["ok"], false, "{asked:#}");
        let clone = m.join("agent.fossil");
        let code = ocx::fossil::Repository::open(&clone)
            .unwrap()
            .server_code()
            .unwrap();
        let login = ocx::protocol::found::node_login(&code);
        let root = ocx::node::config::default_root(&clone);
        let creds: serde_json::Value =
            serde_json::from_slice(&std::fs::read(root.join("credentials.json")).unwrap()).unwrap();
        use sha2::Digest;
        let key = hex::encode(sha2::Sha256::digest(
            creds["code"].as_str().unwrap().as_bytes(),
        ));
        ok(o(
            &[
                "approve",
                &login,
                &key,
                ocx::node::machine::MACHINE_CAPABILITIES,
                "--node",
            ],
            dir,
            &r,
        ));
        ok(o(&["machine", &base], &m, "agent.fossil"));
        ok(o(&["node", "start"], &m, "agent.fossil"));
        guard.machines.push(m);
        codes.push(code);
    }
    let record = |code: &str, user: &str| {
        ok(o(
            &[
                "create",
                "--runner",
                "bench",
                "--objective",
                "Note each check-in",
                "--checkins",
                "trunk",
                "--wall",
                "1h",
                "--read-write",
                out.to_str().unwrap(),
                "--node",
                code,
                "--run-user",
                user,
            ],
            dir,
            &r,
        ));
    };

    let work = dir.join("work");
    std::fs::create_dir(&work).unwrap();
    f(
        &[
            "clone",
            &format!("http://pat:patpw@127.0.0.1:{port}/"),
            dir.join("pat.fossil").to_str().unwrap(),
            "--save-http-password",
            "--workdir",
            work.to_str().unwrap(),
        ],
        dir,
    );
    f(&["settings", "autosync", "off"], &work);
    let mut pushed = 0usize;
    let mut push = |work: &Path| -> u128 {
        std::fs::write(
            work.join("f.txt"),
            format!("{pushed} {}\n", "x".repeat(pushed)),
        )
        .unwrap();
        if pushed == 0 {
            f(&["add", "f.txt"], work);
        }
        f(
            &[
                "commit",
                "-m",
                &format!("change {pushed}"),
                "--no-warnings",
                "--user-override",
                "pat",
            ],
            work,
        );
        pushed += 1;
        let o = Command::new(&fossil)
            .args(["push"])
            .current_dir(work)
            .env("USER", "pat")
            .output()
            .unwrap();
        assert!(o.status.success());
        now_ns()
    };

    let anchor = dir.join("anchor.fossil");
    f(
        &[
            "clone",
            &format!("http://pat:patpw@127.0.0.1:{port}/"),
            anchor.to_str().unwrap(),
            "--save-http-password",
        ],
        dir,
    );
    record(&codes[0], "bench-one");
    wait_lines(&out.join("bench-one"), 1);
    let (mut one, mut pulls) = (Vec::new(), Vec::new());
    for i in 0..pushes {
        let returned = push(&work);
        let read = read_at(&wait_lines(&out.join("bench-one"), 2 * i + 2));
        one.push((read as f64 - returned as f64) / 1e6);
        // The anchor: what the machine's own pull costs, taken in turns.
        let returned = push(&work);
        f(&["pull", "--once", "-R", anchor.to_str().unwrap()], dir);
        pulls.push((now_ns() as f64 - returned as f64) / 1e6);
        wait_lines(&out.join("bench-one"), 2 * i + 3);
    }
    let (m, p) = stat(&mut one);
    let (pm, pp) = stat(&mut pulls);
    println!("{pushes} check-ins pushed to the server, one run on an agent machine:");
    println!(
        "  push returned -> line read median {m:>7.1} ms   p95 {p:>7.1} ms  (goal: 20 ms, p95 50 ms)"
    );
    println!(
        "  anchor: push returned -> a clone's `fossil pull` done median {pm:>7.1} ms   p95 {pp:>7.1} ms"
    );

    let users: Vec<String> = (0..49).map(|i| format!("bench-{i:02}")).collect();
    for (i, u) in users.iter().enumerate() {
        record(&codes[i % 3], u);
    }
    let mut all: Vec<String> = users.clone();
    all.push("bench-one".into());
    for u in &users {
        wait_lines(&out.join(u), 1);
    }
    let already = 2 * pushes + 1;
    let mut many = Vec::new();
    let rounds = pushes.div_ceil(5).max(2);
    for k in 0..rounds {
        let returned = push(&work);
        for u in &all {
            let n = if u == "bench-one" {
                already + k + 1
            } else {
                k + 2
            };
            let read = read_at(&wait_lines(&out.join(u), n));
            many.push((read as f64 - returned as f64) / 1e6);
        }
    }
    let (m, p) = stat(&mut many);
    println!(
        "{rounds} check-ins pushed, 50 open records over three agent machines ({} lines):",
        many.len()
    );
    println!("  push returned -> line read median {m:>7.1} ms   p95 {p:>7.1} ms  (goal: 100 ms)");
    drop(guard);
}

/// Stops the machines' nodes and runs, the served node and the server.
struct Guard {
    ocx: PathBuf,
    served: PathBuf,
    machines: Vec<PathBuf>,
    server: Child,
}

impl Drop for Guard {
    fn drop(&mut self) {
        for m in &self.machines {
            let _ = Command::new(&self.ocx)
                .args(["node", "stop", "--runs", "--repository", "agent.fossil"])
                .current_dir(m)
                .output();
        }
        let _ = Command::new(&self.ocx)
            .args(["node", "stop", "--repository"])
            .arg(&self.served)
            .output();
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

fn wait_lines(log: &Path, n: usize) -> String {
    if let Some(line) = common::wait_line(log, n, Duration::from_secs(120)) {
        return line;
    }
    let dir = log.parent().and_then(Path::parent).unwrap();
    for i in 0..3 {
        let root = dir.join(format!("machine{i}/agent.fossil.ocx-node"));
        eprintln!(
            "machine {i}: {}",
            std::fs::read_to_string(root.join("node.log")).unwrap_or_default()
        );
        for run in std::fs::read_dir(root.join("runs"))
            .into_iter()
            .flatten()
            .flatten()
        {
            for f in ["watch.log", "output.log"] {
                eprintln!(
                    "{f}: {}",
                    std::fs::read_to_string(run.path().join(f)).unwrap_or_default()
                );
            }
        }
    }
    panic!("line {n} of {} never arrived", log.display());
}
