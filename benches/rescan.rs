//! Benchmark of the rescan after the node's state is lost: the node's
//! first wake, with no state, on the large repository (100,000 posts)
//! holding 100 records its node has answered. Every artifact, record and
//! response is read again; nothing is acted on twice. It must stay under
//! 2 s and peak at 15 MB at most, beside a wake of the same node with its
//! state. Each wake runs in a process of its own (this program started
//! again with `--wake ROOT`), whose peak resident memory it reports.
//!
//! Run: `cargo bench --bench rescan` (builds the release binary first).

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

mod common;

use ocx::fossil::store::{self, Batch};
use ocx::fossil::{Fossil, Repository};
use ocx::node::wake;
use ocx::place::{self, Where};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const RECORDS: usize = 100;
const LIMIT: Duration = Duration::from_secs(2);
const PEAK_GOAL_MB: f64 = 15.0;

/// What one wake in a process of its own did: how long it took, the
/// process's peak resident memory, and how many records it acted on.
struct Woken {
    took: Duration,
    peak_mb: f64,
    acted: usize,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, root] = &args[..]
        && flag == "--wake"
    {
        wake_here(Path::new(root));
        return;
    }
    let fossil = Fossil::locate().expect("fossil: run scripts/setup.sh");
    let large = common::large_repository(&fossil);
    let ocx = common::release_ocx();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-rescan");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("node.fossil");
    std::fs::copy(&large, &file).unwrap();
    let out = Command::new(&ocx)
        .args([
            "hook",
            "install",
            "--url",
            "http://127.0.0.1:9/",
            "--json",
            "--user",
            "admin",
        ])
        .arg("--repository")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let root = ocx::node::config::default_root(&file.canonicalize().unwrap());
    let repo = Repository::open(&file).unwrap();
    let node = repo.server_code().unwrap();
    let mut batch = Batch::default();
    for i in 0..RECORDS {
        let record = serde_json::json!({"ocx": 1, "kind": "record", "node": node,
            "user": format!("nosuch-{i:06x}"), "runner": "nosuch", "objective": "Rescanned.",
            "checkins": [], "hears": [], "remote": false, "restrict": {},
            "sandbox": {"network": false, "read_only": [], "read_write": []},
            "budget": {"wall": "1m"}});
        let text = format!(
            "A record.\n\n{}",
            ocx::protocol::message::write(record.as_object().unwrap())
        );
        place::compose_message(
            &mut batch,
            repo.hash_policy().unwrap(),
            "admin",
            &Where::NewThread(format!("record {i}")),
            &text,
            "record",
        );
    }
    store::store(&fossil, &repo, "admin", &batch, true).unwrap();
    let answered = wake::wake(&root, &ocx::fossil::kept::Kept::new()).unwrap();
    let refused = answered.iter().filter(|e| e.done == "refused").count();
    assert_eq!(refused, RECORDS, "{answered:#?}");
    let artifacts = repo.all_hashes().unwrap().len();
    println!("repository: {artifacts} artifacts, {RECORDS} records answered");

    std::fs::remove_file(root.join("state.json")).unwrap();
    let rescan = wake_apart(&root);
    assert_eq!(rescan.acted, 0, "acted twice");
    assert_eq!(repo.all_hashes().unwrap().len(), artifacts);
    assert_eq!(wake::State::load(&root).last_rid, repo.last_rid().unwrap());
    let kept = wake_apart(&root);
    assert_eq!(kept.acted, 0, "acted twice");
    println!(
        "first wake with no state: {:.0} ms (limit {} ms), peak {:.1} MB (goal {PEAK_GOAL_MB} MB)",
        rescan.took.as_secs_f64() * 1000.0,
        LIMIT.as_millis(),
        rescan.peak_mb,
    );
    println!(
        "anchor, a wake of the same node with its state: {:.0} ms, peak {:.1} MB ({:.2}x)",
        kept.took.as_secs_f64() * 1000.0,
        kept.peak_mb,
        rescan.peak_mb / kept.peak_mb,
    );
    assert!(rescan.took < LIMIT, "the rescan took {:?}", rescan.took);
    assert!(
        rescan.peak_mb <= PEAK_GOAL_MB,
        "the rescan peaked at {:.1} MB",
        rescan.peak_mb
    );
}

/// One wake of the node at `root` in a process of its own.
fn wake_apart(root: &Path) -> Woken {
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--wake")
        .arg(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Woken {
        took: Duration::from_secs_f64(said["seconds"].as_f64().unwrap()),
        peak_mb: said["peak_kb"].as_f64().unwrap() / 1024.0,
        acted: said["acted"].as_u64().unwrap() as usize,
    }
}

/// Wakes the node at `root` in this process and prints, as JSON, how long
/// it took, this process's peak resident memory (`VmHWM`), and how many
/// records it refused or opened.
fn wake_here(root: &Path) {
    let t = Instant::now();
    let report = wake::wake(root, &ocx::fossil::kept::Kept::new()).unwrap();
    let took = t.elapsed();
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let peak_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let acted = report
        .iter()
        .filter(|e| e.done == "refused" || e.done == "opened")
        .count();
    println!(
        "{}",
        serde_json::json!({"seconds": took.as_secs_f64(), "peak_kb": peak_kb, "acted": acted})
    );
}
