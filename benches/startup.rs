//! Benchmark of what a person waits for at a prompt, each beside its
//! anchor in the same run: `ocx --version`, `ocx --help` and `ocx list`
//! beside `fossil version`; `ocx post` of one reply beside `fossil bundle
//! import` of a bundle holding the same one reply, and beside the same
//! reply posted through Fossil's own forum form (`/forume2`) by `curl`,
//! signed in, to `fossil server` on 127.0.0.1. Each is a whole process,
//! timed from its start to its exit; the medians of [`SAMPLES`], and the
//! ratio to the anchor (the goals: at most 1.1× for the first three, 1.5×
//! the import and 1.2× the form for `post`). Last, the size of the
//! program as the release profile builds it, beside Fossil's (the goal:
//! 25 MB).
//!
//! Run: `cargo bench --bench startup` (with `curl` installed).

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

mod common;

use common::ms;
use ocx::fossil::artifact::{ForumPost, HashPolicy};
use ocx::fossil::{Fossil, Repository, bundle};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SAMPLES: usize = 51;

fn main() {
    let fossil = Fossil::locate().expect("fossil: run scripts/setup.sh");
    let ocx = common::release_ocx();
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("small.fossil");
    quiet(
        Command::new(fossil.path())
            .args(["new", "--admin-user", "admin"])
            .arg(&repo),
    );
    let first = post(&ocx, &repo, None, "the thread's first post");

    let version = median(|_| {
        quiet(Command::new(fossil.path()).arg("version"));
    });
    let rows = [
        (
            "ocx --version",
            median(|_| quiet(Command::new(&ocx).arg("--version"))),
        ),
        (
            "ocx --help",
            median(|_| quiet(Command::new(&ocx).arg("--help"))),
        ),
        (
            "ocx list",
            median(|_| quiet(Command::new(&ocx).current_dir(dir.path()).arg("list"))),
        ),
    ];
    println!("{:<16} {:>9}  anchor", "", "median");
    println!("{:<16} {:>6.2} ms", "fossil version", ms(version));
    for (what, took) in rows {
        println!(
            "{what:<16} {:>6.2} ms  {:.2}x fossil version (goal: at most 1.1x)",
            ms(took),
            ratio(took, version)
        );
    }

    let project = Repository::open(&repo).unwrap().project_code().unwrap();
    let import = median(|i| {
        let date = format!("2026-01-01T00:00:{:02}.{:03}", i % 60, i);
        let text = format!("imported reply {i}");
        let reply = ForumPost {
            date: &date,
            reply: Some((&first, &first)),
            title: None,
            mimetype: "text/x-markdown",
            user: "admin",
            text: &text,
        }
        .compose();
        let file = dir.path().join(format!("reply-{i}.bundle"));
        bundle::write(&file, &project, &[(HashPolicy::Sha3.name(&reply), reply)]).unwrap();
        let t = Instant::now();
        quiet(
            Command::new(fossil.path())
                .args(["bundle", "import"])
                .arg(&file)
                .args(["--publish", "--user", "admin", "-R"])
                .arg(&repo),
        );
        t.elapsed()
    });
    let posted = median(|i| {
        let t = Instant::now();
        post(&ocx, &repo, Some(&first), &format!("posted reply {i}"));
        t.elapsed()
    });
    let form = web_form(fossil.path(), &repo, &first);
    println!("{:<16} {:>6.2} ms", "bundle import", ms(import));
    println!(
        "{:<16} {:>6.2} ms  curl posting the reply through Fossil's forum form",
        "fossil web form",
        ms(form)
    );
    println!(
        "{:<16} {:>6.2} ms  {:.2}x bundle import of one reply (goal: at most 1.5x)",
        "ocx post",
        ms(posted),
        ratio(posted, import)
    );
    println!(
        "{:<16} {:>9}  {:.2}x Fossil's web form (goal: at most 1.2x)",
        "",
        "",
        ratio(posted, form)
    );

    let size = |p: &Path| std::fs::metadata(p).unwrap().len() as f64 / 1e6;
    println!("{:<16} {:>6.1} MB", "fossil program", size(fossil.path()));
    println!(
        "{:<16} {:>6.1} MB  as built in the release profile (goal: at most 25 MB)",
        "ocx program",
        size(&ocx)
    );
}

/// The median time of `curl` posting a reply to `to` through Fossil's own
/// forum form, as `admin` signed in, to `fossil server` of `repo`: the
/// reply form's fields (`fpid`, `reply`, `content`, `mimetype`, `submit`
/// and the sign-in's `csrf`), its Referer the form's page, each answered
/// by the redirect to the new post.
fn web_form(fossil: &Path, repo: &Path, to: &str) -> Duration {
    quiet(
        Command::new(fossil)
            .args(["user", "password", "admin", "bench-pw", "-R"])
            .arg(repo),
    );
    let (mut server, port) = common::serve(fossil, repo.to_str().unwrap());
    let base = format!("http://127.0.0.1:{port}");
    let until = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let headers = curl(&[
        "-o",
        "/dev/null",
        "-D",
        "-",
        "-d",
        "u=admin&p=bench-pw&in=1",
        &format!("{base}/login"),
    ]);
    let cookie = headers
        .lines()
        .find_map(|l| l.strip_prefix("Set-Cookie: "))
        .and_then(|c| c.split(';').next())
        .expect("fossil's sign-in sets a cookie")
        .to_string();
    let form = curl(&["-b", &cookie, &format!("{base}/forume2?fpid={to}&reply=1")]);
    let csrf = form
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the reply form holds its csrf")
        .to_string();
    let referer = format!("Referer: {base}/forume2");
    let took = median(|i| {
        let answer = curl(&[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{redirect_url}",
            "-b",
            &cookie,
            "-H",
            &referer,
            "--data-urlencode",
            &format!("fpid={to}"),
            "-d",
            "reply=1",
            "--data-urlencode",
            "mimetype=text/x-markdown",
            "--data-urlencode",
            &format!("content=web reply {i}"),
            "-d",
            "submit=Submit",
            "--data-urlencode",
            &format!("csrf={csrf}"),
            &format!("{base}/forume2"),
        ]);
        assert!(
            answer.starts_with("302 ") && answer.contains("/forumpost/"),
            "the form stored no reply: {answer}"
        );
    });
    let _ = server.kill();
    let _ = server.wait();
    took
}

/// `curl -s ARGS`, refused when it fails; what it printed.
fn curl(args: &[&str]) -> String {
    let out = Command::new("curl")
        .arg("-s")
        .args(args)
        .stderr(Stdio::null())
        .output()
        .expect("curl: install it to measure Fossil's web form");
    assert!(out.status.success(), "curl {args:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ocx post` as `admin`, a reply to `to` or a new thread; its hash.
fn post(ocx: &Path, repo: &Path, to: Option<&str>, text: &str) -> String {
    let mut c = Command::new(ocx);
    c.args(["post", "--json", "--user", "admin", "--repository"])
        .arg(repo)
        .args(["--text", text]);
    match to {
        Some(h) => c.args(["--to", h]),
        None => c.args(["--title", "Startup"]),
    };
    let out = c.stderr(Stdio::null()).output().unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["ok"], true, "{answer}");
    answer["result"]["hash"].as_str().unwrap().to_string()
}

/// Runs `c` to its end, its output discarded; refuses a failure.
fn quiet(c: &mut Command) {
    let status = c
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{c:?} failed");
}

/// The median of [`SAMPLES`] timings: `f` given the sample's number, timed
/// whole where it answers `()`, or answering its own time.
fn median<T: Timed>(mut f: impl FnMut(usize) -> T) -> Duration {
    let mut all: Vec<Duration> = (0..SAMPLES)
        .map(|i| {
            let t = Instant::now();
            f(i).took(t)
        })
        .collect();
    all.sort();
    all[SAMPLES / 2]
}

/// What a sample answers: nothing (timed whole) or its own time.
trait Timed {
    fn took(self, started: Instant) -> Duration;
}

impl Timed for () {
    fn took(self, started: Instant) -> Duration {
        started.elapsed()
    }
}

impl Timed for Duration {
    fn took(self, _: Instant) -> Duration {
        self
    }
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}
