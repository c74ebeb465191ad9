//! Benchmark of the reading tools against a large repository: `thread` and
//! `receipt` through the `ocx` binary, beside the same answer obtained with
//! `fossil sql`. The repository (100,000 posts in 10,000 threads, sent by
//! five logins) is generated once into target/bench-reads/ and reused.
//!
//! Run: `cargo bench --bench reads` (builds the release binary first).

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

mod common;

use common::ms;
use ocx::fossil::Fossil;
use std::process::Command;
use std::time::{Duration, Instant};

const SAMPLES: usize = 41;

fn main() {
    let fossil = Fossil::locate().expect("fossil: run scripts/setup.sh");
    let repo = common::large_repository(&fossil);
    let ocx = common::release_ocx();
    let hashes = common::hashes(&repo);
    let picks: Vec<&String> = (0..SAMPLES)
        .map(|i| &hashes[(i * 7919 * 13) % hashes.len()])
        .collect();

    let thread_ocx = median(&picks, |h| {
        run(Command::new(&ocx)
            .args(["thread", "--json", "--user", "ann", "--repository"])
            .arg(&repo)
            .args(["--of", h]))
    });
    let thread_sql = median(&picks, |h| {
        let sql = format!(
            "SELECT b.uuid, u.login, datetime(p.fmtime) FROM forumpost p JOIN blob b ON b.rid=p.fpid \
             LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid \
             WHERE p.froot=(SELECT froot FROM forumpost WHERE fpid=(SELECT rid FROM blob WHERE uuid='{h}')) \
             ORDER BY b.rcvid, p.fpid LIMIT 20"
        );
        run(Command::new(fossil.path())
            .args(["sql", "-R"])
            .arg(&repo)
            .arg(sql))
    });
    let receipt_ocx = median(&picks, |h| {
        run(Command::new(&ocx)
            .args(["receipt", "--json", "--user", "ann", "--repository"])
            .arg(&repo)
            .args(["--artifacts", h]))
    });
    let receipt_sql = median(&picks, |h| {
        let sql = format!(
            "SELECT b.rid, b.rcvid, u.login, fullcap(u.cap) FROM blob b LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid \
             LEFT JOIN user u ON u.uid=r.uid WHERE b.uuid='{h}'"
        );
        run(Command::new(fossil.path())
            .args(["sql", "-R"])
            .arg(&repo)
            .arg(sql))
    });
    println!("median of {SAMPLES} calls, each a whole process:");
    println!(
        "  thread   ocx {:>7.2} ms   fossil sql {:>7.2} ms",
        ms(thread_ocx),
        ms(thread_sql)
    );
    println!(
        "  receipt  ocx {:>7.2} ms   fossil sql {:>7.2} ms",
        ms(receipt_ocx),
        ms(receipt_sql)
    );
}

fn run(c: &mut Command) {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn median(picks: &[&String], mut f: impl FnMut(&str)) -> Duration {
    let mut times: Vec<Duration> = picks
        .iter()
        .map(|h| {
            let t = Instant::now();
            f(h);
            t.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}
