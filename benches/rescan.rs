//! Benchmark of the rescan after the node's state is lost: the node's
//! first wake, with no state, on the large repository (100,000 posts)
//! holding 100 records its node has answered. Every artifact, record and
//! response is read again; nothing is acted on twice. It must stay under
//! 2 s.
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

fn main() {
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
    let t = Instant::now();
    let rescan = wake::wake(&root, &ocx::fossil::kept::Kept::new()).unwrap();
    let took = t.elapsed();
    assert!(
        rescan
            .iter()
            .all(|e| e.done != "refused" && e.done != "opened"),
        "acted twice: {rescan:#?}"
    );
    assert_eq!(repo.all_hashes().unwrap().len(), artifacts);
    assert_eq!(wake::State::load(&root).last_rid, repo.last_rid().unwrap());
    println!(
        "first wake with no state: {:.0} ms (limit {} ms)",
        took.as_secs_f64() * 1000.0,
        LIMIT.as_millis()
    );
    assert!(took < LIMIT, "the rescan took {took:?}");
}
