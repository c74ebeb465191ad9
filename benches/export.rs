//! `cargo bench --bench export`: what checking the git export against the
//! repository costs on a repository of 10,000 check-ins, beside Fossil's
//! own `fossil git export` of the same repository when nothing is new
//! (what the node runs at every check-in). Prints the median of each: the
//! check alone (the mirror's state read, the check-ins it lacks found,
//! each branch's head), Fossil's export, and OCX's whole export (Fossil's,
//! then the check) with nothing new, with one new check-in, and with one
//! check-in dated before all the others, which Fossil alone passes over.

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

use ocx::fossil::{Fossil, Repository};
use ocx::git::{Export, export::Wait};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHECKINS: usize = 10_000;
const RUNS: usize = 9;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// A git fast-import stream of `CHECKINS` commits on master, each changing
/// one of 100 files, a minute apart (Fossil imports it onto its branch
/// `master`).
fn stream() -> Vec<u8> {
    let mut s = Vec::new();
    for i in 0..CHECKINS {
        let text = format!("line {i}\n");
        write!(
            s,
            "blob\nmark :{}\ndata {}\n{text}\n",
            2 * i + 1,
            text.len()
        )
        .unwrap();
        let message = format!("change {i}");
        write!(
            s,
            "commit refs/heads/master\nmark :{}\ncommitter Bench <bench@example.org> {} +0000\ndata {}\n{message}\n",
            2 * i + 2,
            1_700_000_000 + 60 * i,
            message.len()
        )
        .unwrap();
        if i > 0 {
            writeln!(s, "from :{}", 2 * i).unwrap();
        }
        writeln!(s, "M 100644 :{} f{}.txt\n", 2 * i + 1, i % 100).unwrap();
    }
    s
}

fn fossil_ok(fossil: &Fossil, dir: &Path, args: &[&str]) {
    let out = Command::new(fossil.path())
        .args(args)
        .current_dir(dir)
        .env("USER", "bench")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fossil {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Times `f` `RUNS` times, `before` done untimed before each.
fn timed(mut before: impl FnMut(usize), mut f: impl FnMut()) -> Duration {
    let mut took = Vec::new();
    for i in 0..RUNS {
        before(i);
        let started = Instant::now();
        f();
        took.push(started.elapsed());
    }
    median(took)
}

fn main() {
    let dir = tempfile::Builder::new()
        .prefix("ocx-bench-export-")
        .tempdir()
        .unwrap();
    let fossil = Fossil::locate().expect("fossil 2.23 or later");
    let repository = dir.path().join("bench.fossil");
    let stream_file = dir.path().join("stream");
    std::fs::write(&stream_file, stream()).unwrap();
    let made = Instant::now();
    fossil_ok(
        &fossil,
        dir.path(),
        &[
            "import",
            "--git",
            "--admin-user",
            "bench",
            repository.to_str().unwrap(),
            stream_file.to_str().unwrap(),
        ],
    );
    let mirror = dir.path().join("mirror");
    let r = repository.to_str().unwrap();
    fossil_ok(
        &fossil,
        dir.path(),
        &["git", "export", mirror.to_str().unwrap(), "-R", r],
    );
    println!(
        "repository: {CHECKINS} check-ins, imported and exported once in {:?}",
        made.elapsed()
    );
    let export = Export {
        dir: mirror.clone(),
    };

    let check = timed(
        |_| {},
        || {
            let repo = Repository::open(&repository).unwrap();
            let beside = repo.beside_mirror(&mirror).unwrap();
            assert!(beside.unexported().unwrap().is_empty());
            let head = beside.head("master").unwrap().unwrap();
            assert_eq!(beside.branch_of(&head).unwrap().as_deref(), Some("master"));
        },
    );
    let fossils = timed(
        |_| {},
        || {
            fossil.git_export(&repository).unwrap();
        },
    );
    let nothing_new = timed(
        |_| {},
        || {
            export
                .keep_current(&fossil, &repository, Wait::ForOwnRun)
                .unwrap();
        },
    );

    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    fossil_ok(&fossil, &work, &["open", r, "--force"]);
    let commit = |i: usize, date: Option<&str>| {
        std::fs::write(work.join(format!("new{i}.txt")), "new\n").unwrap();
        fossil_ok(&fossil, &work, &["add", &format!("new{i}.txt")]);
        let mut args = vec!["commit", "-m", "new", "--no-warnings", "--allow-older"];
        if let Some(d) = date {
            args.extend(["--date-override", d]);
        }
        fossil_ok(&fossil, &work, &args);
    };
    let one_new = timed(
        |i| commit(i, None),
        || {
            let run = export
                .keep_current(&fossil, &repository, Wait::ForOwnRun)
                .unwrap();
            assert_eq!(run.unwrap().added, vec![1]);
        },
    );
    let one_early = timed(
        |i| commit(RUNS + i, Some("2000-01-01 00:00:00")),
        || {
            let run = export
                .keep_current(&fossil, &repository, Wait::ForOwnRun)
                .unwrap();
            assert_eq!(run.unwrap().added, vec![1]);
        },
    );
    let _ = Command::new(fossil.path())
        .args(["close", "--force"])
        .current_dir(&work)
        .stdout(Stdio::null())
        .status();

    println!("the check alone (what it lacks, a branch's head)      : median {check:?} of {RUNS}");
    println!(
        "fossil git export --force, nothing new:                     median {fossils:?} of {RUNS}"
    );
    println!(
        "OCX's export (Fossil's, then the check), nothing new:       median {nothing_new:?} of {RUNS}"
    );
    println!(
        "OCX's export of one new check-in:                          median {one_new:?} of {RUNS}"
    );
    println!(
        "OCX's export of one check-in dated before all others:      median {one_early:?} of {RUNS}"
    );
    println!(
        "the check beside Fossil's export: {:.2}x",
        check.as_secs_f64() / fossils.as_secs_f64()
    );
}
