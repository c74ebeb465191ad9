//! Benchmark of a scrape of the node's metrics: a node's root holding 500
//! ended runs (each its `run.json`, `spend.json` and ten delays), its
//! metrics served on 127.0.0.1 as `ocx node start --metrics` serves them,
//! scraped over HTTP 200 times (each ended run read once, as the node
//! starts serving); and, for comparison, the first reading of every run's
//! directory.
//!
//! Run: `cargo bench --bench metrics`.

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

mod common;

use common::stat;
use ocx::node::metrics::{self, RunFacts};
use ocx::node::transcript::{Spend, write_spend};
use std::time::Instant;

const RUNS: usize = 500;
const SCRAPES: usize = 200;

fn main() {
    let root = tempfile::tempdir().unwrap();
    for i in 0..RUNS {
        let dir = root.path().join("runs").join(format!("{i:016x}"));
        std::fs::create_dir_all(&dir).unwrap();
        let facts = RunFacts {
            runner: ["claude", "codex", "ci"][i % 3].into(),
            sender: Some(["ann", "ben", "cai", "dee", "eli"][i % 5].into()),
            opened: 1.8e9,
            outcome: Some(["exited", "budget", "stopped"][i % 3].into()),
            ended: Some(1.8e9 + 60.0),
        };
        std::fs::write(
            dir.join(metrics::RUN_FILE),
            serde_json::to_vec(&facts).unwrap(),
        )
        .unwrap();
        let spend = Spend {
            tokens_in: Some(1000 + i as u64),
            tokens_out: Some(100),
            model_errors: [("429".to_string(), 1)].into_iter().collect(),
            ..Spend::default()
        };
        write_spend(&dir, &spend).unwrap();
        let delays: String = (0..10).map(|d| format!("0.00{d}\n")).collect();
        std::fs::write(dir.join(ocx::node::spool::DELAYS), delays).unwrap();
    }
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", common::free_port())
        .parse()
        .unwrap();
    metrics::serve(root.path(), addr).unwrap();
    let url = format!("http://{addr}/metrics");
    let scrape = || {
        let started = Instant::now();
        let text = ureq::get(&url)
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap();
        let took = started.elapsed();
        assert!(text.contains("ocx_runs_ended_total"), "{text}");
        (took, text.len())
    };
    let started = Instant::now();
    let cold = metrics::Metrics::new(root.path()).render();
    let reading = started.elapsed();
    let (_, size) = scrape();
    let mut ms: Vec<f64> = (0..SCRAPES).map(|_| common::ms(scrape().0)).collect();
    let (median, p95) = stat(&mut ms);
    println!("a scrape of a node with {RUNS} ended runs, over HTTP ({size} bytes):");
    println!("  {SCRAPES} scrapes                median {median:>7.2} ms   p95 {p95:>7.2} ms");
    println!(
        "  every run's directory read (as the node starts serving) {:>7.2} ms, {} bytes",
        common::ms(reading),
        cold.len()
    );
}
