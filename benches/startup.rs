//! Benchmark of what a person waits for at a prompt, each beside its
//! anchor in the same run: `ocx --version`, `ocx --help` and `ocx list`
//! beside `fossil version`; `ocx post` of one reply beside `fossil bundle
//! import` of a bundle holding the same one reply, and beside the same
//! reply posted through Fossil's own forum form (`/forume2`) by `curl`,
//! signed in, to `fossil server` on 127.0.0.1. Each is a whole process,
//! timed from its start to its exit, taken in turns with its anchor so a
//! load on the machine weighs on both alike; the medians of [`SAMPLES`],
//! and the ratio to the anchor (the goals: at most 1.1× for the first
//! three; for `post`, 1.5× the import and 1.2× the form). Last, the size
//! of the program as the release profile builds it, beside Fossil's (the
//! goal: 25 MB).
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

    let timed = |c: &mut Command| {
        let t = Instant::now();
        quiet(c);
        t.elapsed()
    };
    let [version, bare, help, list] = turns([
        &mut |_| timed(Command::new(fossil.path()).arg("version")),
        &mut |_| timed(Command::new(&ocx).arg("--version")),
        &mut |_| timed(Command::new(&ocx).arg("--help")),
        &mut |_| timed(Command::new(&ocx).current_dir(dir.path()).arg("list")),
    ]);
    println!("{:<16} {:>9}  anchor", "", "median");
    println!("{:<16} {:>6.2} ms", "fossil version", ms(version));
    for (what, took) in [
        ("ocx --version", bare),
        ("ocx --help", help),
        ("ocx list", list),
    ] {
        println!(
            "{what:<16} {:>6.2} ms  {:.2}x fossil version (goal: at most 1.1x)",
            ms(took),
            ratio(took, version)
        );
    }

    let project = Repository::open(&repo).unwrap().project_code().unwrap();
    let form = WebForm::start(fossil.path(), &repo, &first);
    let [import, posted, web] = turns([
        &mut |i| {
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
            timed(
                Command::new(fossil.path())
                    .args(["bundle", "import"])
                    .arg(&file)
                    .args(["--publish", "--user", "admin", "-R"])
                    .arg(&repo),
            )
        },
        &mut |i| {
            let t = Instant::now();
            post(&ocx, &repo, Some(&first), &format!("posted reply {i}"));
            t.elapsed()
        },
        &mut |i| form.post(&first, &format!("web reply {i}")),
    ]);
    drop(form);
    println!("{:<16} {:>6.2} ms", "bundle import", ms(import));
    println!(
        "{:<16} {:>6.2} ms  curl posting the reply through Fossil's forum form",
        "fossil web form",
        ms(web)
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
        ratio(posted, web)
    );

    let size = |p: &Path| std::fs::metadata(p).unwrap().len() as f64 / 1e6;
    println!("{:<16} {:>6.1} MB", "fossil program", size(fossil.path()));
    println!(
        "{:<16} {:>6.1} MB  as built in the release profile (goal: at most 25 MB)",
        "ocx program",
        size(&ocx)
    );
}

/// `fossil server` of a repository on 127.0.0.1 with `admin` signed in to
/// it: what `curl` needs to post Fossil's own reply form.
struct WebForm {
    server: std::process::Child,
    base: String,
    cookie: String,
    csrf: String,
}

impl WebForm {
    /// Serves `repo`, signs `admin` in, and reads the reply form of `to`
    /// for its `csrf`.
    fn start(fossil: &Path, repo: &Path, to: &str) -> WebForm {
        quiet(
            Command::new(fossil)
                .args(["user", "password", "admin", "bench-pw", "-R"])
                .arg(repo),
        );
        let (server, port) = common::serve(fossil, repo.to_str().unwrap());
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
        WebForm {
            server,
            base,
            cookie,
            csrf,
        }
    }

    /// The time of one `curl` posting `text` in reply to `to` through the
    /// form, as a person's browser would: the reply form's fields (`fpid`,
    /// `reply`, `content`, `mimetype`, `submit`, `csrf`), the form's page
    /// as Referer, answered by the redirect to the new post.
    fn post(&self, to: &str, text: &str) -> Duration {
        let base = &self.base;
        let t = Instant::now();
        let answer = curl(&[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{redirect_url}",
            "-b",
            &self.cookie,
            "-H",
            &format!("Referer: {base}/forume2"),
            "--data-urlencode",
            &format!("fpid={to}"),
            "-d",
            "reply=1",
            "--data-urlencode",
            "mimetype=text/x-markdown",
            "--data-urlencode",
            &format!("content={text}"),
            "-d",
            "submit=Submit",
            "--data-urlencode",
            &format!("csrf={}", self.csrf),
            &format!("{base}/forume2"),
        ]);
        let took = t.elapsed();
        assert!(
            answer.starts_with("302 ") && answer.contains("/forumpost/"),
            "the form stored no reply: {answer}"
        );
        took
    }
}

impl Drop for WebForm {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
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

/// The medians of [`SAMPLES`] timings of each of `each`, given the
/// sample's number, taken in turns (one of each, then the next round) so
/// that a load on the machine weighs on each alike.
fn turns<const N: usize>(mut each: [&mut dyn FnMut(usize) -> Duration; N]) -> [Duration; N] {
    let mut all: [Vec<Duration>; N] = std::array::from_fn(|_| Vec::with_capacity(SAMPLES));
    for i in 0..SAMPLES {
        for (f, took) in each.iter_mut().zip(all.iter_mut()) {
            took.push(f(i));
        }
    }
    all.map(|mut v| {
        v.sort();
        v[SAMPLES / 2]
    })
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}
