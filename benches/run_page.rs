//! Benchmark of a run's page as a maintainer meets it: whole HTTP requests
//! over loopback to `fossil server` running OCX's page as installed, signed
//! in as the administrator. A node's record whose run has a transcript of
//! [`ENTRIES`] entries (words, tool calls, results and commands, as an
//! agent's turn leaves them): the median of [`SAMPLES`] requests of its page
//! `/ext/ocx-cgi/run/RECORD`, and of its `?json`, beside the anchor,
//! Fossil's own `/forumthread` of the record's thread on the same server
//! (the goal: at most 1.5x), and two floors of Fossil's `/ext`: a shell
//! script answering nothing, and one answering the run page's very bytes
//! (what a page that size costs under `/ext` with no work of OCX's at
//! all). Then the delay from an entry's writing to the
//! open page: the page's own long-poll waiting, an entry written as the
//! watcher writes it, the time until the long-poll's answer holding it has
//! come whole (the goal: at most 500 ms).
//!
//! Run: `cargo bench --bench run_page` (builds the release binary first).

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

mod common;

use common::{exchange, get, ms, sign_in};
use ocx::fossil::Fossil;
use ocx::node::transcript::Said;
use std::time::{Duration, Instant};

const SAMPLES: usize = 41;
/// Entries in the run's transcript.
const ENTRIES: usize = 200;
/// Entries written while a page waits, one a delay measured.
const DELAYS: usize = 21;

fn main() {
    let fossil = Fossil::locate().expect("fossil: run scripts/setup.sh");
    let ocx = common::release_ocx();
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("run.fossil");
    let repo_s = repo.to_str().unwrap();
    common::fossil_as_admin(
        fossil.path(),
        dir.path(),
        &["new", "--admin-user", "admin", repo_s],
    );
    common::fossil_as_admin(
        fossil.path(),
        dir.path(),
        &["user", "password", "admin", "pw", "-R", repo_s],
    );
    let (record, transcript) = common::run_with_transcript(&ocx, &repo, "admin", ENTRIES);

    let ext_dir = tempfile::tempdir().unwrap();
    let (server, port) = common::serve_with_page(fossil.path(), &ocx, ext_dir.path(), &repo);
    let _server = Stopped(server);
    let cookie = sign_in(port, "admin", "pw");
    let page = format!("/ext/ocx-cgi/run/{record}");
    let json = format!("{page}?json");
    let anchor = format!("/forumthread/{record}");
    let served = get(port, &cookie, &page, "ocx-transcript");
    static_pages(ext_dir.path(), &served);
    let all: [(&str, &str, &str); 5] = [
        ("fossil /forumthread", &anchor, "forum"),
        ("run page", &page, "ocx-transcript"),
        ("run ?json", &json, "\"transcript\""),
        ("/ext, nothing", "/ext/static-nothing", "nothing"),
        ("/ext, page's bytes", "/ext/static-run", "ocx-transcript"),
    ];
    for (_, path, holds) in &all {
        for _ in 0..3 {
            get(port, &cookie, path, holds);
        }
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); all.len()];
    for _ in 0..SAMPLES {
        for ((_, path, holds), t) in all.iter().zip(&mut times) {
            let started = Instant::now();
            get(port, &cookie, path, holds);
            t.push(started.elapsed());
        }
    }
    let medians: Vec<Duration> = times
        .iter_mut()
        .map(|t| {
            t.sort();
            t[SAMPLES / 2]
        })
        .collect();
    println!(
        "a run's page, {ENTRIES} transcript entries ({} bytes as Fossil sends it), median of {SAMPLES} requests, signed in:",
        served.len()
    );
    println!("  {:<20} {:>6.2} ms", all[0].0, ms(medians[0]));
    for ((name, _, _), took) in all.iter().zip(&medians).skip(1) {
        let goal = match *name {
            "run page" | "run ?json" => " (goal: at most 1.5x)",
            _ => " (a shell script's, the floor)",
        };
        println!(
            "  {name:<20} {:>6.2} ms  {:.2}x /forumthread{goal}",
            ms(*took),
            took.as_secs_f64() / medians[0].as_secs_f64()
        );
    }

    let mut delays = Vec::new();
    for i in 0..DELAYS {
        let after = ENTRIES + i;
        let path = format!("{page}?json&after={after}&within=20");
        let waiting = {
            let cookie = cookie.clone();
            std::thread::spawn(move || {
                let answer = exchange(
                    port,
                    &format!(
                        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n\r\n"
                    ),
                );
                (Instant::now(), answer)
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        let written = Instant::now();
        transcript.add(Said::Words {
            text: format!("Entry {i} while the page waits."),
        });
        let (came, answer) = waiting.join().unwrap();
        assert!(
            answer.contains(&format!("Entry {i} while the page waits.")),
            "{answer}"
        );
        delays.push(came.duration_since(written));
    }
    delays.sort();
    println!(
        "an entry's delay to the open page, median of {DELAYS}: {:.1} ms (most {:.1} ms; goal: at most 500 ms)",
        ms(delays[DELAYS / 2]),
        ms(delays[DELAYS - 1])
    );
}

/// A server stopped when dropped, a failed sample's panic included.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Two floors under `/ext` beside the run page, each a shell script in
/// the extroot of `ext_dir`: one that answers nothing, and one that
/// answers the very bytes OCX gave for the run page (`served`, the page
/// as Fossil sent it, its skin taken off): what Fossil's `/ext` costs a
/// page of that size with no work of OCX's at all. Both print with the
/// shell's own `printf`, one process each: a `cat` would add a second
/// program's start, which cost as much as the bytes.
fn static_pages(ext_dir: &std::path::Path, served: &str) {
    use std::os::unix::fs::PermissionsExt;
    let start = served
        .find("<div class=\"fossil-doc\"")
        .expect("OCX's page");
    let list_end = served[start..].find("</ol>").expect("the transcript") + start;
    let end = served[list_end..].find("</div>").expect("the page's end") + list_end + 6;
    let ext = ext_dir.join("ext");
    let head = r"printf 'Status: 200 OK\r\nContent-Type: text/html\r\n\r\n'";
    for (name, body) in [
        (
            "static-nothing",
            format!("{head}\nprintf '<div class=\"fossil-doc\" data-title=\"x\">nothing</div>'\n"),
        ),
        (
            "static-run",
            format!(
                "{head}\nprintf '%s' '{}'\n",
                served[start..end].replace('\'', r"'\''")
            ),
        ),
    ] {
        let script = ext.join(name);
        std::fs::write(&script, format!("#!/bin/sh\n{body}")).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}
