//! Benchmark of OCX's page as a person's browser meets it: whole HTTP
//! requests over loopback to `fossil server`, which runs `ocx-cgi` at
//! `/ext/ocx-cgi` as installed (the page's hand-off program, handing each request to
//! OCX's page server), signed in as `ann` with the login cookie Fossil's
//! own sign-in gave. On a small repository (a few threads) and on the large
//! one (100,000 posts, copied, since signing in writes to it), the
//! medians of [`SAMPLES`] requests each of the console, `/tools`, a post's
//! `thread` as HTML, the console, the list and `thread` with `?json`,
//! beside the anchor, Fossil's own `/forumthread` of the same posts on
//! the same server. Each is printed with its ratio to the anchor (the
//! goal: at most 1.5x) and, on the large repository, to the small one's
//! figure (the goal: at most 1.2x). Beside them, the floor: a shell script
//! under `/ext` printing one paragraph, what Fossil's running any program
//! there costs before the program does anything; and the console answered
//! by the whole `ocx` started for the request, as before the page server
//! (timed apart from the others, whose caches it would empty).
//!
//! Run: `cargo bench --bench page` (builds the release binary first).

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

mod common;

use common::{get, ms, sign_in};
use ocx::fossil::Fossil;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SAMPLES: usize = 201;
/// The most a page may take, as a multiple of Fossil's `/forumthread`.
const GOAL_ANCHOR: f64 = 1.5;
/// The most a page may take on the large repository, as a multiple of the
/// small one's.
const GOAL_LARGE: f64 = 1.2;
/// The most OCX's part of a page may take (the page's median less the
/// floor's), as a multiple of Fossil's `/forumthread`.
const GOAL_PART: f64 = 0.15;
/// The most the page server may hold, as a multiple of one `fossil`
/// request's peak.
const GOAL_MEMORY: f64 = 2.0;
/// How long the page server is left with no request before its memory is
/// read again.
const SETTLE: Duration = Duration::from_secs(3);
/// Entries in the transcript of the run whose page is measured.
const ENTRIES: usize = 200;

/// One thing measured: its name, and the path of a sample given a post and
/// the run's record.
struct Measure {
    name: &'static str,
    path: fn(&Given) -> String,
    /// What its body must hold, so a refusal is not timed as a page.
    holds: &'static str,
}

/// What a sample's path is made from: a post, and the record of the run
/// with a transcript.
struct Given<'a> {
    post: &'a str,
    record: &'a str,
}

/// A page under `/ext` that does nothing, a shell script printing one
/// paragraph: what any program Fossil serves there costs, OCX's or not.
const FLOOR: Measure = Measure {
    name: "/ext floor (sh)",
    path: |_| "/ext/floor".into(),
    holds: "floor",
};

/// The floor's program.
const FLOOR_SCRIPT: &str = "#!/bin/sh\nprintf 'Status: 200 OK\\r\\nContent-Type: text/html\\r\\n\\r\\n<div class=\"fossil-doc\" data-title=\"floor\"><p>floor</p></div>'\n";

/// The console answered by the whole `ocx` started for the request, as
/// before the page server: what the relay saves.
const DIRECT: Measure = Measure {
    name: "console, ocx alone",
    path: |_| "/ext/direct/ocx-cgi".into(),
    holds: "OCX console",
};

const ANCHOR: Measure = Measure {
    name: "fossil /forumthread",
    path: |g| format!("/forumthread/{}", g.post),
    holds: "forum",
};

const MEASURES: [Measure; 7] = [
    Measure {
        name: "console",
        path: |_| "/ext/ocx-cgi".into(),
        holds: "OCX console",
    },
    Measure {
        name: "/tools",
        path: |_| "/ext/ocx-cgi/tools".into(),
        holds: "id=\"tool-thread\"",
    },
    Measure {
        name: "thread",
        path: |g| format!("/ext/ocx-cgi/thread?of={}", g.post),
        holds: "thread: the answer",
    },
    Measure {
        name: "run page",
        path: |g| format!("/ext/ocx-cgi/run/{}", g.record),
        holds: "id=\"ocx-transcript\"",
    },
    Measure {
        name: "console ?json",
        path: |_| "/ext/ocx-cgi/console?json".into(),
        holds: "\"ok\": true",
    },
    Measure {
        name: "list ?json",
        path: |_| "/ext/ocx-cgi?json".into(),
        holds: "\"ok\": true",
    },
    Measure {
        name: "thread ?json",
        path: |g| format!("/ext/ocx-cgi/thread?of={}&json", g.post),
        holds: "\"ok\": true",
    },
];

fn main() {
    let fossil = Fossil::locate().expect("fossil: run scripts/setup.sh");
    let ocx = common::release_ocx();
    let dir = tempfile::tempdir().unwrap();

    let small = dir.path().join("small.fossil");
    let small_posts = make_small(&fossil, &ocx, dir.path(), &small);
    let (small_record, _) = common::run_with_transcript(&ocx, &small, "ann", ENTRIES);
    let small_figures = measure_repository(
        "small repository",
        &fossil,
        &ocx,
        &small,
        &small_posts,
        &small_record,
    );

    let large = dir.path().join("large.fossil");
    std::fs::copy(common::large_repository(&fossil), &large).unwrap();
    let hashes = common::hashes(&large);
    let large_posts: Vec<String> = (0..SAMPLES)
        .map(|i| hashes[(i * 7919 * 13) % hashes.len()].clone())
        .collect();
    let (large_record, _) = common::run_with_transcript(&ocx, &large, "ann", ENTRIES);
    let large_figures = measure_repository(
        "large repository",
        &fossil,
        &ocx,
        &large,
        &large_posts,
        &large_record,
    );

    println!();
    println!("large repository beside the small one (goal: at most {GOAL_LARGE}x):");
    for ((name, s), (_, l)) in small_figures.iter().zip(&large_figures) {
        println!(
            "  {name:<20} {:>6.2} ms  {:>6.2} ms  {:.2}x",
            ms(*s),
            ms(*l),
            ratio(*l, *s)
        );
    }
}

/// The small repository: `ann` (password `pw`, forum writer) and three
/// threads of four posts each, posted with `ocx post`; the posts.
fn make_small(fossil: &Fossil, ocx: &Path, dir: &Path, repo: &Path) -> Vec<String> {
    let repo_s = repo.to_str().unwrap();
    common::fossil_as_admin(
        fossil.path(),
        dir,
        &["new", "--admin-user", "admin", repo_s],
    );
    common::fossil_as_admin(
        fossil.path(),
        dir,
        &["user", "new", "ann", "x", "pw", "-R", repo_s],
    );
    common::fossil_as_admin(
        fossil.path(),
        dir,
        &["user", "capabilities", "ann", "v4", "-R", repo_s],
    );
    let mut posts = Vec::new();
    for t in 0..3 {
        let root = post(ocx, repo, None, &format!("Opening post of thread {t}."));
        posts.push(root.clone());
        for i in 1..4 {
            posts.push(post(
                ocx,
                repo,
                Some(&root),
                &format!("Reply {i} in thread {t}."),
            ));
        }
    }
    posts
}

/// `ocx post` as `ann`, a reply to `to` or a new thread; its hash.
fn post(ocx: &Path, repo: &Path, to: Option<&str>, text: &str) -> String {
    let mut c = Command::new(ocx);
    c.args(["post", "--json", "--user", "ann", "--repository"])
        .arg(repo)
        .args(["--text", text]);
    match to {
        Some(h) => c.args(["--to", h]),
        None => c.args(["--title", "Page"]),
    };
    let out = c.stderr(Stdio::null()).output().unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["ok"], true, "{answer}");
    answer["result"]["hash"].as_str().unwrap().to_string()
}

/// Serves `repo` with the page, signs `ann` in, and prints each measure's
/// median beside the anchor's and OCX's part of it, above the floor; then
/// the page server's memory beside one `fossil` request's. The medians,
/// the anchor's first, then the floor's, then the whole program's. The
/// samples go round: the anchor, the floor, then each page, [`SAMPLES`]
/// times, so what else the machine does weighs on each alike; the whole
/// program started for the request is timed after, in rounds of its own.
fn measure_repository(
    title: &str,
    fossil: &Fossil,
    ocx: &Path,
    repo: &Path,
    posts: &[String],
    record: &str,
) -> Vec<(&'static str, Duration)> {
    let ext_dir = tempfile::tempdir().unwrap();
    let (server, port) = common::serve_with_page(fossil.path(), ocx, ext_dir.path(), repo);
    let _server = Stopped(server);
    let floor = ext_dir.path().join("ext/floor");
    std::fs::write(&floor, FLOOR_SCRIPT).unwrap();
    std::fs::set_permissions(&floor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let cookie = sign_in(port, "ann", "pw");
    // The whole program started for the request is timed in rounds of its
    // own, after the others: in theirs it evicted from the caches what the
    // page server keeps warm, and the page after it paid (HISTORY 483).
    let all: Vec<&Measure> = [&ANCHOR, &FLOOR].into_iter().chain(&MEASURES).collect();
    for m in all.iter().chain([&&DIRECT]) {
        for post in posts.iter().take(3) {
            get(port, &cookie, &(m.path)(&Given { post, record }), m.holds);
        }
    }
    let sample = |m: &Measure, i: usize| {
        let path = (m.path)(&Given {
            post: &posts[i % posts.len()],
            record,
        });
        let started = Instant::now();
        let body = get(port, &cookie, &path, "");
        let took = started.elapsed();
        assert!(body.contains(m.holds), "{path}: {body}");
        took
    };
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); all.len()];
    for i in 0..SAMPLES {
        for (m, t) in all.iter().zip(&mut times) {
            t.push(sample(m, i));
        }
    }
    let mut direct: Vec<Duration> = (0..SAMPLES).map(|i| sample(&DIRECT, i)).collect();
    direct.sort();
    let direct = direct[SAMPLES / 2];
    let mut figures: Vec<(&'static str, Duration)> = all
        .iter()
        .zip(&mut times)
        .map(|(m, t)| {
            t.sort();
            (m.name, t[SAMPLES / 2])
        })
        .collect();
    figures.insert(2, (DIRECT.name, direct));
    let (anchor, floor) = (figures[0].1, figures[1].1);
    println!("{title}, median of {SAMPLES} requests, signed in:");
    println!("  {:<20} {:>6.2} ms", ANCHOR.name, ms(anchor));
    println!(
        "  {:<20} {:>6.2} ms  {:.2}x /forumthread (any page under /ext, doing nothing)",
        FLOOR.name,
        ms(floor),
        ratio(floor, anchor)
    );
    println!(
        "  {:<20} {:>6.2} ms  {:.2}x /forumthread (the whole program started for the request, no page server)",
        DIRECT.name,
        ms(direct),
        ratio(direct, anchor)
    );
    println!(
        "  each page: its median, as a multiple of /forumthread (goal: at most {GOAL_ANCHOR}x), and OCX's part, what it takes above the floor, likewise (goal: at most {GOAL_PART}x):"
    );
    for (name, took) in &figures[3..] {
        println!(
            "  {name:<20} {:>6.2} ms  {:.2}x /forumthread  OCX's part {:+.2}x above the floor's {:.2} ms",
            ms(*took),
            ratio(*took, anchor),
            (took.as_secs_f64() - floor.as_secs_f64()) / anchor.as_secs_f64(),
            ms(floor),
        );
    }
    let threads = [record, posts[1].as_str()].map(|post| (ANCHOR.path)(&Given { post, record }));
    memory(fossil, ocx, repo, &threads, &cookie);
    figures
}

/// Prints the page server's memory as it stands after the samples, and
/// again after [`SETTLE`] with no request, beside the peak of one `fossil`
/// request of a thread's `/forumthread`, the least of `threads` (the
/// goal: the server at most [`GOAL_MEMORY`] times that).
fn memory(fossil: &Fossil, ocx: &Path, repo: &Path, threads: &[String], cookie: &str) {
    let kib = |k: u64| k as f64 / 1024.0;
    let fossil_peak = threads
        .iter()
        .map(|t| common::fossil_request_peak(fossil.path(), repo, t, cookie))
        .min()
        .unwrap();
    println!(
        "  one fossil request of /forumthread: {:.1} MiB at its peak; the page server (goal: resident at most {GOAL_MEMORY}x that, {:.1} MiB):",
        kib(fossil_peak),
        GOAL_MEMORY * kib(fossil_peak),
    );
    let Some(pid) = common::page_server_of(ocx) else {
        println!("  no page server found");
        return;
    };
    for (when, wait) in [("after the samples", Duration::ZERO), ("idle", SETTLE)] {
        std::thread::sleep(wait);
        let Some(m) = common::memory_of(pid) else {
            println!("  {when}: the page server has ended");
            continue;
        };
        println!(
            "  {when:<18} resident {:>5.1} MiB ({:.2}x), proportional {:>5.1} MiB, its own {:>5.1} MiB, peak {:>5.1} MiB",
            kib(m.rss),
            m.rss as f64 / fossil_peak as f64,
            kib(m.pss),
            kib(m.anonymous),
            kib(m.peak),
        );
    }
}

/// A server stopped when dropped, a failed sample's panic included.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}
