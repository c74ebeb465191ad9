//! Benchmark of one node at scale, each figure beside its goal: `RUNS`
//! records of the demo runner (500 unless `OCX_SCALE_RUNS` says fewer)
//! created at once, in one thread, by eight senders' worth of `ocx
//! create` at a time; all started within 60 s, none lost, none started
//! twice (each record's run opened once in the node's log and started
//! once in its watcher's); the node's own memory (its daemon and every
//! watcher, as proportional set size) per open run, beside the goal of
//! 1 MB; and a post in the thread, heard by every run, delivered to each
//! (the time its watcher gave it, from the run's transcript) within 1 s at
//! the 95th percentile. The repository is served on 127.0.0.1.
//!
//! Run: `cargo bench --bench scale` (as root, as the node runs).

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

mod common;

use common::stat;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const SENDING_AT_ONCE: usize = 8;

fn main() {
    let runs: usize = std::env::var("OCX_SCALE_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(500);
    let fossil = ocx::fossil::Fossil::locate()
        .expect("fossil: run scripts/setup.sh")
        .path()
        .to_path_buf();
    let ocx = common::release_ocx();
    let place = common::bench_dir("");
    let dir = place.tmp.path();
    let repo = dir.join("served.fossil");
    let f = |args: &[&str]| common::fossil_as_admin(&fossil, dir, args);
    let r = repo.to_str().unwrap();
    f(&["new", "--admin-user", "admin", r]);
    f(&["user", "default", "admin", "-R", r]);
    let (server, port) = common::serve(&fossil, r);
    let guard = Guard {
        ocx: ocx.clone(),
        repo: repo.clone(),
        server,
    };
    common::wait_for_port(port);
    let o = |args: &[&str]| common::ocx_as_admin(&ocx, &repo, args);
    let url = format!("http://127.0.0.1:{port}/");
    o(&["hook", "install", "--url", &url]);
    o(&["node", "start"]);
    o(&["runner", "--name", "demo"]);
    let root = PathBuf::from(format!("{r}.ocx-node"));
    let thread = hash_of(&o(&[
        "post",
        "--title",
        "Scale",
        "--text",
        "Where every run is",
    ]));

    let sent_at = Instant::now();
    let records = create_at_once(&ocx, &repo, &thread, runs);
    let created_in = sent_at.elapsed();
    let until = sent_at + Duration::from_secs(120);
    let mut started = Vec::new();
    while Instant::now() < until {
        started = records
            .iter()
            .filter(|h| started_times(&root, h) >= 1)
            .collect();
        if started.len() == records.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let all_started_in = sent_at.elapsed();
    let twice = records
        .iter()
        .filter(|h| started_times(&root, h) > 1 || opened_times(&root, h) > 1)
        .count();
    let lost = records.len() - started.len();

    let (pss, parts) = pss_kb(&root, &records);
    let posted = common::now_ns();
    let post = hash_of(&o(&[
        "post",
        "--to",
        &thread,
        "--text",
        "Heard by every run",
    ]));
    let mut delivered = Vec::new();
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        delivered = records
            .iter()
            .filter_map(|h| delivered_at(&root, h, "Heard by every run"))
            .map(|at| (at as f64 - posted as f64) / 1e6)
            .collect();
        if delivered.len() == records.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let heard = delivered.len();
    let mut given: Vec<f64> = given_at(&root, &post)
        .into_iter()
        .map(|at| (at as f64 - posted as f64) / 1e6)
        .collect();
    drop(guard);

    println!("{runs} records of the demo runner created at once on one node:");
    println!(
        "  created in {:.1} s; all started within {:.1} s (goal: 60 s); {lost} lost, {twice} started twice (goal: none)",
        created_in.as_secs_f64(),
        all_started_in.as_secs_f64()
    );
    println!(
        "  the node's own memory (daemon and watchers, PSS): {:.1} MB, {:.2} MB a run (goal: at most 1 MB)",
        pss as f64 / 1024.0,
        pss as f64 / 1024.0 / runs as f64
    );
    println!("    ({parts})");
    if delivered.is_empty() {
        println!("  a post heard by every run: delivered to none within 60 s");
    } else {
        let (m, p) = stat(&mut delivered);
        println!(
            "  a post heard by every run: taken by {heard} of {runs} watchers, median {m:.0} ms, p95 {p:.0} ms (goal: p95 within 1 s)"
        );
    }
    if !given.is_empty() {
        let count = given.len();
        let (m, p) = stat(&mut given);
        println!(
            "  the same post given by the node to {count} runs' inboxes (its log), median {m:.0} ms, p95 {p:.0} ms"
        );
    }
}

/// The hash an `ocx post` or `ocx create` printed.
fn hash_of(said: &str) -> String {
    said.lines()
        .find_map(|l| {
            l.strip_prefix("record: ")
                .or_else(|| l.strip_prefix("hash: "))
        })
        .unwrap_or_else(|| panic!("no hash in {said}"))
        .to_string()
}

/// Creates `runs` records of the demo runner in the thread `thread`,
/// [`SENDING_AT_ONCE`] `ocx create` at a time; their hashes.
fn create_at_once(ocx: &Path, repo: &Path, thread: &str, runs: usize) -> Vec<String> {
    let next = Mutex::new(0usize);
    let made = Mutex::new(Vec::with_capacity(runs));
    std::thread::scope(|s| {
        for _ in 0..SENDING_AT_ONCE {
            s.spawn(|| {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        *n += 1;
                        *n
                    };
                    if i > runs {
                        return;
                    }
                    let said = common::ocx_as_admin(
                        ocx,
                        repo,
                        &[
                            "create",
                            "--runner",
                            "demo",
                            "--objective",
                            &format!("Answer posts here ({i})"),
                            "--to",
                            thread,
                            "--hears",
                            "admin",
                            "--wall",
                            "1h",
                        ],
                    );
                    made.lock().unwrap().push(hash_of(&said));
                }
            });
        }
    });
    made.into_inner().unwrap()
}

/// A run's directory under the node's root.
fn run_dir(root: &Path, record: &str) -> PathBuf {
    root.join("runs").join(&record[..16])
}

/// How many times the watcher of `record` started its program.
fn started_times(root: &Path, record: &str) -> usize {
    std::fs::read_to_string(run_dir(root, record).join("watch.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" started run-"))
        .count()
}

/// How many times the node's log says it opened `record`.
fn opened_times(root: &Path, record: &str) -> usize {
    std::fs::read_to_string(root.join("node.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["done"] == "opened" && e["record"] == record)
        .count()
}

/// When the watcher of `record` gave its program a delivery holding
/// `text`, in nanoseconds since the epoch, by the run's transcript.
fn delivered_at(root: &Path, record: &str, text: &str) -> Option<u128> {
    std::fs::read_to_string(run_dir(root, record).join("transcript.jsonl"))
        .ok()?
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["kind"] == "delivery" && e["text"].as_str().is_some_and(|t| t.contains(text)))
        .and_then(|e| e["at"].as_str().and_then(epoch_ns))
}

/// When the node's log says it gave the post `post` to each run, in
/// nanoseconds since the epoch.
fn given_at(root: &Path, post: &str) -> Vec<u128> {
    std::fs::read_to_string(root.join("node.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["done"] == "delivered" && e["arrival"] == post)
        .filter_map(|e| e["time"].as_str().and_then(epoch_ns))
        .collect()
}

/// `YYYY-MM-DDTHH:MM:SS.mmm` (UTC) in nanoseconds since the epoch.
fn epoch_ns(at: &str) -> Option<u128> {
    let n = |a: usize, b: usize| at.get(a..b)?.parse::<i64>().ok();
    let (y, m, d) = (n(0, 4)?, n(5, 7)?, n(8, 10)?);
    let (hh, mm, ss, ms) = (n(11, 13)?, n(14, 16)?, n(17, 19)?, n(20, 23)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    Some(secs as u128 * 1_000_000_000 + ms as u128 * 1_000_000)
}

/// The proportional set size, in KiB, of the node's daemon, its starter
/// of watchers and every watcher of `records`, and how it parts among them.
fn pss_kb(root: &Path, records: &[String]) -> (u64, String) {
    let pid_in = |file: PathBuf| {
        std::fs::read_to_string(file)
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
    };
    let pids: Vec<u32> = records
        .iter()
        .filter_map(|h| pid_in(run_dir(root, h).join("watcher.pid")))
        .collect();
    let pss = |p: Option<u32>| -> u64 {
        p.and_then(|p| std::fs::read_to_string(format!("/proc/{p}/smaps_rollup")).ok())
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("Pss:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .unwrap_or(0)
    };
    let mut watchers: Vec<f64> = pids.iter().map(|p| pss(Some(*p)) as f64).collect();
    let (daemon, starter) = (pss(pid_in(root.join("node.pid"))), pss(starter_of(root)));
    let all = daemon + starter + watchers.iter().sum::<f64>() as u64;
    let (median, p95) = if watchers.is_empty() {
        (0.0, 0.0)
    } else {
        stat(&mut watchers)
    };
    let parts = format!(
        "the daemon {:.1} MB, its starter {:.1} MB, a watcher {:.2} MB (median; p95 {:.2} MB)",
        daemon as f64 / 1024.0,
        starter as f64 / 1024.0,
        median / 1024.0,
        p95 / 1024.0
    );
    (all, parts)
}

/// The node's starter of watchers (`ocx watchers --root ROOT`), by its
/// command line.
fn starter_of(root: &Path) -> Option<u32> {
    let root = root.as_os_str().as_encoded_bytes();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|p| {
        let pid: u32 = p.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(p.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let starter = args.get(1) == Some(&ocx::node::spawn::STARTER_COMMAND.as_bytes())
            && args.windows(2).any(|w| w == [b"--root".as_slice(), root]);
        starter.then_some(pid)
    })
}

/// Stops every run, the node and the server however the benchmark ends.
struct Guard {
    ocx: PathBuf,
    repo: PathBuf,
    server: std::process::Child,
}

impl Drop for Guard {
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
