//! Benchmark of delivery latency: from a `fossil push` of a check-in
//! returning, to the run's program reading its line. A repository is served
//! on 127.0.0.1 and made a node; a session's runner program notes when it
//! reads each line; a clone pushes 50 check-ins, one at a time. Measured
//! twice: the node serving no metrics, then serving them (`--metrics`)
//! and scraped ten times a second meanwhile, as a harsh Prometheus would.
//!
//! Run: `cargo bench --bench delivery` (as root, as the node runs).

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

mod common;

use common::{now_ns, read_at, stat};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const PUSHES: usize = 50;

fn main() {
    let without = measure(false);
    let with = measure(true);
    println!("{PUSHES} check-ins pushed one at a time to a served node:");
    for (what, (push_ms, latency_ms)) in
        [("no metrics", without), ("metrics scraped at 10/s", with)]
    {
        let (mut push_ms, mut latency_ms) = (push_ms, latency_ms);
        let (pm, pp) = stat(&mut push_ms);
        let (lm, lp) = stat(&mut latency_ms);
        println!(" {what}:");
        println!("  the push itself            median {pm:>7.1} ms   p95 {pp:>7.1} ms");
        println!("  push returned -> line read median {lm:>7.1} ms   p95 {lp:>7.1} ms");
    }
}

/// The pushes' times and their deliveries' latencies, in ms, of a node
/// serving its metrics (scraped meanwhile) or not.
fn measure(metrics: bool) -> (Vec<f64>, Vec<f64>) {
    let fossil = ocx::fossil::Fossil::locate()
        .expect("fossil: run scripts/setup.sh")
        .path()
        .to_path_buf();
    let ocx = common::release_ocx();
    let place = common::bench_dir(common::NOTING_RUNNER);
    let dir = place.tmp.path();
    let (out, runner) = (&place.out, &place.runner);
    let repo = dir.join("served.fossil");
    let f = |args: &[&str]| common::fossil_as_admin(&fossil, dir, args);
    let r = repo.to_str().unwrap();
    f(&["new", "--admin-user", "admin", r]);
    f(&["user", "default", "admin", "-R", r]);
    f(&["user", "new", "pat", "x", "patpw", "-R", r]);
    f(&["user", "capabilities", "pat", "v4", "-R", r]);
    let block = serde_json::json!({"command": [runner], "env": {"OCX_BENCH_LOG": out.join("log")}, "input": "lines"});
    common::bench_runner_page(&fossil, dir, r, &block);
    let (server, port) = common::serve(&fossil, r);
    let mut guard = Guard {
        ocx: ocx.clone(),
        repo: repo.clone(),
        record: None,
        server,
    };
    std::thread::sleep(Duration::from_millis(500));
    let o = |args: &[&str]| common::ocx_as_admin(&ocx, &repo, args);
    let url = format!("http://127.0.0.1:{port}/");
    o(&["hook", "install", "--url", &url]);
    let address = format!("127.0.0.1:{}", common::free_port());
    match metrics {
        true => o(&["node", "start", "--metrics", &address]),
        false => o(&["node", "start"]),
    };
    let scraping = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(metrics));
    let scraper = {
        let (scraping, url) = (scraping.clone(), format!("http://{address}/metrics"));
        std::thread::spawn(move || {
            let mut scrapes = 0u32;
            while scraping.load(std::sync::atomic::Ordering::SeqCst) {
                if ureq::get(&url).call().is_ok() {
                    scrapes += 1;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            scrapes
        })
    };
    let created = o(&[
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
    ]);
    guard.record = created
        .lines()
        .find_map(|l| l.strip_prefix("record: "))
        .map(str::to_string);
    let clone = dir.join("clone.fossil");
    let work = dir.join("work");
    std::fs::create_dir(&work).unwrap();
    let url_pw = format!("http://pat:patpw@127.0.0.1:{port}/");
    f(&[
        "clone",
        &url_pw,
        clone.to_str().unwrap(),
        "--save-http-password",
        "--workdir",
        work.to_str().unwrap(),
    ]);
    let in_work = |args: &[&str]| {
        let o = Command::new(&fossil)
            .args(args)
            .current_dir(&work)
            .env("USER", "pat")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    in_work(&["settings", "autosync", "off"]);
    wait_lines(&out.join("log"), 1);
    let mut push_ms = Vec::new();
    let mut latency_ms = Vec::new();
    for i in 0..PUSHES {
        std::fs::write(work.join("f.txt"), format!("{i} {}\n", "x".repeat(i))).unwrap();
        if i == 0 {
            in_work(&["add", "f.txt"]);
        }
        in_work(&["commit", "-m", &format!("change {i}"), "--no-warnings"]);
        let started = Instant::now();
        in_work(&["push"]);
        let pushed = started.elapsed();
        let returned = now_ns();
        let line = wait_lines(&out.join("log"), i + 2);
        push_ms.push(pushed.as_secs_f64() * 1000.0);
        latency_ms.push((read_at(&line) as f64 - returned as f64) / 1e6);
    }
    scraping.store(false, std::sync::atomic::Ordering::SeqCst);
    let scrapes = scraper.join().unwrap();
    assert!(
        !metrics || scrapes > 0,
        "the node's metrics were never scraped"
    );
    drop(guard);
    (push_ms, latency_ms)
}

/// Stops the run, the node and the server however the benchmark ends.
struct Guard {
    ocx: std::path::PathBuf,
    repo: std::path::PathBuf,
    record: Option<String>,
    server: std::process::Child,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let run = |args: &[&str]| {
            let _ = Command::new(&self.ocx)
                .args(args)
                .arg("--repository")
                .arg(&self.repo)
                .env("USER", "admin")
                .output();
        };
        if let Some(r) = &self.record {
            run(&["stop", "--record", r]);
            std::thread::sleep(Duration::from_millis(500));
        }
        run(&["node", "stop"]);
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

fn wait_lines(log: &Path, n: usize) -> String {
    common::wait_line(log, n, Duration::from_secs(60))
        .unwrap_or_else(|| panic!("line {n} never arrived"))
}
