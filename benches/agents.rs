//! Benchmark of the agents people use, run by a node as `ocx runner`
//! writes them, against the tests' scripted model server on 127.0.0.1:
//! for the real Claude Code and the real Codex CLI, and beside them the
//! `lines` runner of the delivery benchmark,
//!
//! - start: `create` returned, to the model's first request (for the
//!   `lines` runner: to the program reading its first line), 20 records,
//!   each stopped before the next;
//! - delivery: a post returned, to the model's request holding it (the
//!   program reading its line), 20 posts to one warm session.
//!
//! Goals (issue 22): start at most 3 s, delivery at most 150 ms median.
//! Run: `cargo bench --bench agents` (as root, as the node runs).

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

mod common;

#[path = "../tests/it/model.rs"]
#[allow(unused_imports)]
mod model;

use common::{ms, now_ns, read_at, stat};
use model::{Model, Reply};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const TIMES: usize = 20;

/// A served node for one runner, stopped however the benchmark ends.
struct Site {
    ocx: PathBuf,
    repo: PathBuf,
    server: std::process::Child,
}

impl Site {
    fn ocx(&self, args: &[&str]) -> serde_json::Value {
        let out = Command::new(&self.ocx)
            .args(args)
            .args(["--json", "--repository"])
            .arg(&self.repo)
            .env("USER", "admin")
            .output()
            .unwrap();
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{args:?}: {}", String::from_utf8_lossy(&out.stdout)));
        assert_eq!(answer["ok"], true, "{args:?}: {answer:#}");
        answer["result"].clone()
    }

    fn record(&self, runner: &str, extra: &[&str]) -> String {
        let mut args = vec![
            "create",
            "--runner",
            runner,
            "--objective",
            "Answer each post",
            "--wall",
            "1h",
        ];
        args.extend_from_slice(extra);
        self.ocx(&args)["record"].as_str().unwrap().to_string()
    }

    /// Stops `record` and waits until its response is written.
    fn stop(&self, record: &str) {
        self.ocx(&["stop", "--record", record]);
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            let thread = self.ocx(&["thread", "--of", record]);
            let answered = thread["posts"].as_array().into_iter().flatten().any(|p| {
                matches!(
                    ocx::protocol::message::read(p["text"].as_str().unwrap_or("").as_bytes()),
                    ocx::protocol::message::Reading::Message { message }
                        if message["kind"] == "response" && message["answers"] == record
                )
            });
            if answered {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "{record} was never answered: {:#}",
            self.ocx(&["thread", "--of", record])
        );
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = Command::new(&self.ocx)
            .args(["node", "stop", "--runs", "--repository"])
            .arg(&self.repo)
            .env("USER", "admin")
            .output();
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

fn serve(ocx: &Path, fossil: &Path, dir: &Path) -> Site {
    let repo = dir.join("served.fossil");
    let f = |args: &[&str]| {
        let o = Command::new(fossil)
            .args(args)
            .env("USER", "admin")
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let r = repo.to_str().unwrap();
    f(&["new", "--admin-user", "admin", r]);
    f(&["user", "default", "admin", "-R", r]);
    let (server, port) = common::serve_with_page(fossil, ocx, dir, &repo);
    let site = Site {
        ocx: ocx.to_path_buf(),
        repo,
        server,
    };
    site.ocx(&[
        "hook",
        "install",
        "--url",
        &format!("http://127.0.0.1:{port}/"),
    ]);
    site.ocx(&["node", "start"]);
    site
}

/// The model's requests holding `needle` in their newest user message.
fn asked(model: &Model, needle: &str) -> Option<Instant> {
    model
        .conversation()
        .into_iter()
        .find(|r| r.last_user_text().is_some_and(|t| t.contains(needle)))
        .map(|r| r.at)
}

fn wait(what: &str, f: impl Fn() -> Option<Instant>) -> Instant {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(at) = f() {
            return at;
        }
        assert!(Instant::now() < until, "{what} never came");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn agent(name: &str, ocx: &Path, fossil: &Path) -> ((f64, f64), (f64, f64)) {
    let model = Model::start(|_| Reply::text("Noted."));
    let place = common::bench_dir(common::NOTING_RUNNER);
    let site = serve(ocx, fossil, place.tmp.path());
    let key = place.tmp.path().join("key");
    std::fs::write(&key, "bench-key").unwrap();
    site.ocx(&[
        "credential",
        "--name",
        "bench-key",
        "--file",
        key.to_str().unwrap(),
    ]);
    let base = match name {
        "codex" => format!("{}/v1", model.url()),
        _ => model.url(),
    };
    site.ocx(&[
        "runner",
        "--name",
        name,
        "--base-url",
        &base,
        "--api-key",
        "bench-key",
        "--model",
        "scripted",
    ]);
    let mut start = Vec::new();
    for _ in 0..TIMES {
        let before = Instant::now();
        let record = site.record(name, &[]);
        let returned = Instant::now();
        let first = wait("the first request", || asked(&model, &record));
        start.push(ms(first.saturating_duration_since(returned)));
        let _ = before;
        site.stop(&record);
    }
    let record = site.record(name, &[]);
    wait("the warm session's first request", || {
        asked(&model, &record)
    });
    let mut delivery = Vec::new();
    for i in 0..TIMES {
        let text = format!("bench post {i} {}", now_ns());
        site.ocx(&["post", "--to", &record, "--text", &text]);
        let returned = Instant::now();
        let at = wait("the post's request", || asked(&model, &text));
        delivery.push(ms(at.saturating_duration_since(returned)));
        // The session answers each turn before the next post.
        std::thread::sleep(Duration::from_millis(300));
    }
    site.ocx(&["stop", "--record", &record]);
    (stat(&mut start), stat(&mut delivery))
}

fn lines(ocx: &Path, fossil: &Path) -> ((f64, f64), (f64, f64)) {
    let place = common::bench_dir(common::NOTING_RUNNER);
    let site = serve(ocx, fossil, place.tmp.path());
    let log = place.out.join("log");
    let page = place.tmp.path().join("page.md");
    let block = serde_json::json!({"command": [place.runner], "env": {"OCX_BENCH_LOG": log}, "input": "lines"});
    std::fs::write(&page, format!("```json\n{block}\n```\n")).unwrap();
    let o = Command::new(fossil)
        .args(["wiki", "create", "sandbox/lines"])
        .arg(&page)
        .args(["--mimetype", "text/x-markdown", "-R"])
        .arg(&site.repo)
        .env("USER", "admin")
        .output()
        .unwrap();
    assert!(o.status.success());
    let out = place.out.to_str().unwrap().to_string();
    let mut start = Vec::new();
    let mut seen = 0;
    for _ in 0..TIMES {
        let record = site.record("lines", &["--read-write", &out]);
        let returned = now_ns();
        seen += 1;
        let line = common::wait_line(&log, seen, Duration::from_secs(60)).expect("first line");
        start.push((read_at(&line) as f64 - returned as f64) / 1e6);
        site.stop(&record);
    }
    let record = site.record("lines", &["--read-write", &out]);
    seen += 1;
    common::wait_line(&log, seen, Duration::from_secs(60)).expect("first line");
    let mut delivery = Vec::new();
    for i in 0..TIMES {
        site.ocx(&[
            "post",
            "--to",
            &record,
            "--text",
            &format!("bench post {i}"),
        ]);
        let returned = now_ns();
        seen += 1;
        let line = common::wait_line(&log, seen, Duration::from_secs(60)).expect("a line");
        delivery.push((read_at(&line) as f64 - returned as f64) / 1e6);
    }
    site.ocx(&["stop", "--record", &record]);
    (stat(&mut start), stat(&mut delivery))
}

fn main() {
    let fossil = ocx::fossil::Fossil::locate()
        .expect("fossil: run scripts/setup.sh")
        .path()
        .to_path_buf();
    let ocx = common::release_ocx();
    println!(
        "{TIMES} starts (create returned -> first request) and {TIMES} deliveries (post returned -> its request), medians and p95:"
    );
    let show = |name: &str, ((sm, sp), (dm, dp)): ((f64, f64), (f64, f64))| {
        println!(
            "  {name:<7} start median {sm:>8.1} ms  p95 {sp:>8.1} ms   delivery median {dm:>7.1} ms  p95 {dp:>7.1} ms"
        );
    };
    show("lines", lines(&ocx, &fossil));
    for name in ["claude", "codex"] {
        show(name, agent(name, &ocx, &fossil));
    }
    println!("goals: start at most 3000 ms, delivery at most 150 ms median");
}
