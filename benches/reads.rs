//! Benchmark of the reading tools against a large repository: `thread` and
//! `receipt` through the `ocx` binary, beside the same answer obtained with
//! `fossil sql`. The repository (100,000 posts in 10,000 threads, sent by
//! five logins) is generated once into target/bench-reads/ and reused.
//!
//! Run: `cargo bench --bench reads` (builds the release binary first).

use ocx::fossil::artifact::{ForumPost, HashPolicy};
use ocx::fossil::{Fossil, Repository, bundle};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const THREADS: usize = 10_000;
const PER_THREAD: usize = 10;
const SENDERS: [&str; 5] = ["ann", "ben", "cai", "dee", "eli"];
const SAMPLES: usize = 41;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-reads");
    std::fs::create_dir_all(&root).unwrap();
    let fossil = Fossil::locate().expect("fossil: run scripts/setup.sh");
    let repo = root.join("large.fossil");
    if !repo.exists() {
        generate(&fossil, &root, &repo);
    }
    let status = Command::new("cargo")
        .args(["build", "--release", "--quiet"])
        .status()
        .unwrap();
    assert!(status.success());
    let ocx = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/ocx");
    let r = Repository::open(&repo).unwrap();
    let hashes = r.all_hashes().unwrap();
    println!(
        "repository: {} artifacts, {} bytes",
        hashes.len(),
        std::fs::metadata(&repo).unwrap().len()
    );
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
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

fn generate(fossil: &Fossil, root: &Path, repo: &PathBuf) {
    let t = Instant::now();
    let tmp = root.join("large.fossil.part");
    let _ = std::fs::remove_file(&tmp);
    let ok = |c: &mut Command| assert!(c.env("USER", "admin").status().unwrap().success());
    ok(Command::new(fossil.path())
        .args(["new", "--admin-user", "admin"])
        .arg(&tmp));
    for s in SENDERS {
        ok(Command::new(fossil.path())
            .args(["user", "new", s, "x", "pw", "-R"])
            .arg(&tmp));
        ok(Command::new(fossil.path())
            .args(["user", "capabilities", s, "v4", "-R"])
            .arg(&tmp));
    }
    let project = Repository::open(&tmp).unwrap().project_code().unwrap();
    let chunk = THREADS / SENDERS.len();
    for (n, sender) in SENDERS.iter().enumerate() {
        let mut items = Vec::new();
        for t in n * chunk..(n + 1) * chunk {
            let date = format!("2026-01-01T00:00:{:02}.{:03}", t % 60, t % 1000);
            let title = format!("Thread {t}");
            let root_art = ForumPost {
                date: &date,
                reply: None,
                title: Some(&title),
                mimetype: "text/x-markdown",
                user: sender,
                text: &format!("Opening post of thread {t}."),
            }
            .compose();
            let root_hash = HashPolicy::Sha3.name(&root_art);
            items.push((root_hash.clone(), root_art));
            for i in 1..PER_THREAD {
                let reply = ForumPost {
                    date: &date,
                    reply: Some((&root_hash, &root_hash)),
                    title: None,
                    mimetype: "text/x-markdown",
                    user: sender,
                    text: &format!("Reply {i} in thread {t}."),
                }
                .compose();
                items.push((HashPolicy::Sha3.name(&reply), reply));
            }
        }
        let b = root.join("gen.bundle");
        bundle::write(&b, &project, &items).unwrap();
        fossil.import_bundle(&tmp, &b, sender, true).unwrap();
        eprintln!(
            "generated {} posts sent by {sender} ({:.0?})",
            items.len(),
            t.elapsed()
        );
    }
    ok(Command::new(fossil.path())
        .args(["sql", "-R"])
        .arg(&tmp)
        .arg("ANALYZE"));
    std::fs::rename(&tmp, repo).unwrap();
}
