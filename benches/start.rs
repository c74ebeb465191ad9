//! Benchmark of a run's start beside its anchor: from `ocx create`
//! returning to the run's program running its first line, beside a
//! `fossil sync` round trip of a clone of the same served repository (the
//! goal: the median start within 2x the median sync). A small repository
//! is served on 127.0.0.1 and made a node; its runner's program notes when
//! it starts (bash's `$EPOCHREALTIME`, its first word) and ends, so each
//! run is answered before the next record is created. Taken in turns with
//! the anchor, so a load on the machine weighs on both alike.
//!
//! Run: `cargo bench --bench start` (as root, as the node runs).

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

mod common;

use common::{ms, stat};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const SAMPLES: usize = 21;

/// The runner's program: its first line notes when it started, in the
/// file named by its record, then it ends.
const NOTING_START: &str =
    "#!/bin/bash\necho \"$EPOCHREALTIME\" > \"$OCX_BENCH_OUT/$OCX_RECORD\"\n";

fn main() {
    let fossil = ocx::fossil::Fossil::locate()
        .expect("fossil: run scripts/setup.sh")
        .path()
        .to_path_buf();
    let ocx = common::release_ocx();
    let place = common::bench_dir(NOTING_START);
    let dir = place.tmp.path();
    let (out, runner) = (&place.out, &place.runner);
    let repo = dir.join("served.fossil");
    let f = |args: &[&str]| common::fossil_as_admin(&fossil, dir, args);
    let r = repo.to_str().unwrap();
    f(&["new", "--admin-user", "admin", r]);
    f(&["user", "default", "admin", "-R", r]);
    f(&["user", "password", "admin", "adminpw", "-R", r]);
    let block =
        serde_json::json!({"command": [runner], "env": {"OCX_BENCH_OUT": out}, "input": "lines"});
    common::bench_runner_page(&fossil, dir, r, &block);
    let (server, port) = common::serve(&fossil, r);
    let guard = Guard {
        ocx: ocx.clone(),
        repo: repo.clone(),
        server,
    };
    common::wait_for_port(port);
    let o = |args: &[&str]| common::ocx_as_admin(&ocx, &repo, args);
    o(&[
        "hook",
        "install",
        "--url",
        &format!("http://127.0.0.1:{port}/"),
    ]);
    o(&["node", "start"]);

    let work = dir.join("work");
    std::fs::create_dir(&work).unwrap();
    f(&[
        "clone",
        &format!("http://admin:adminpw@127.0.0.1:{port}/"),
        dir.join("clone.fossil").to_str().unwrap(),
        "--save-http-password",
        "--workdir",
        work.to_str().unwrap(),
    ]);
    // A first run, untimed: the node's first start tries what it keeps after.
    start_one(&ocx, &repo, out);
    let mut starts = Vec::new();
    let mut syncs = Vec::new();
    for _ in 0..SAMPLES {
        let t = Instant::now();
        common::fossil_as_admin(&fossil, &work, &["sync"]);
        syncs.push(ms(t.elapsed()));
        starts.push(start_one(&ocx, &repo, out));
    }
    drop(guard);
    let (sm, sp) = stat(&mut starts);
    let (ym, yp) = stat(&mut syncs);
    println!("{SAMPLES} runs started one at a time on a served node, beside fossil sync:");
    println!("  fossil sync round trip          median {ym:>7.1} ms   p95 {yp:>7.1} ms");
    println!(
        "  create returned -> program ran  median {sm:>7.1} ms   p95 {sp:>7.1} ms   {:.2}x sync (goal: at most 2x)",
        sm / ym
    );
}

/// Creates one record for the bench runner, and waits until its program
/// noted its start and its run was answered; the time from `ocx create`
/// returning to the program's first line, in milliseconds.
fn start_one(ocx: &Path, repo: &Path, out: &Path) -> f64 {
    let created = common::ocx_as_admin(
        ocx,
        repo,
        &[
            "create",
            "--runner",
            "bench",
            "--objective",
            "Note the start",
            "--wall",
            "1h",
            "--read-write",
            out.to_str().unwrap(),
        ],
    );
    let returned = common::now_ns();
    let record = created
        .lines()
        .find_map(|l| l.strip_prefix("record: "))
        .expect("create names its record")
        .to_string();
    let noted: PathBuf = out.join(&record);
    let until = Instant::now() + Duration::from_secs(30);
    let started = loop {
        let text = std::fs::read_to_string(&noted).unwrap_or_default();
        if let Some(line) = text.lines().next() {
            let secs: f64 = line.trim().parse().expect("the runner notes a time");
            break secs * 1e9;
        }
        assert!(Instant::now() < until, "the run of {record} never started");
        std::thread::sleep(Duration::from_millis(1));
    };
    answered(ocx, repo, &record);
    (started - returned as f64) / 1e6
}

/// Waits until the node answered `record` (its run ended and its
/// filesystem was given back), so runs are timed one at a time.
fn answered(ocx: &Path, repo: &Path, record: &str) {
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        let said = Command::new(ocx)
            .args(["run", "--json", "--record", record, "--repository"])
            .arg(repo)
            .env("USER", "admin")
            .output()
            .unwrap();
        let answer: serde_json::Value = serde_json::from_slice(&said.stdout).unwrap_or_default();
        if answer["result"]["state"] == "ended" {
            std::thread::sleep(Duration::from_millis(300));
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{record} was never answered");
}

/// Stops the node and the server however the benchmark ends.
struct Guard {
    ocx: PathBuf,
    repo: PathBuf,
    server: std::process::Child,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = Command::new(&self.ocx)
            .args(["node", "stop", "--repository"])
            .arg(&self.repo)
            .env("USER", "admin")
            .output();
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}
