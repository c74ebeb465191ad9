//! Benchmark of what an open run given nothing costs, and how promptly it
//! is acted on all the same. A repository is served on 127.0.0.1 and made a
//! node; `OCX_IDLE_RUNS` (100) session runs are opened and given nothing
//! for `OCX_IDLE_SECS` (60) seconds, each watcher's CPU ticks (utime and
//! stime in `/proc/PID/stat`; its supervisor is a thread of it) and its
//! threads' context switches (each a wake-up) read before and after. Then,
//! on runs of the same node: the time from a delivery to the program reading
//! it, from a stop (the watcher's SIGTERM) to the program's end, and from
//! the wall passing (3 s after the run's start, as its watcher logs it) to
//! the program's end.
//!
//! Run: `cargo bench --bench idle` (as root, as the node runs);
//! `OCX_IDLE_RUNS=10 OCX_IDLE_SECS=10 cargo bench --bench idle` for a short one.

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

mod common;

use common::{now_ns, read_at, stat};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Samples of each latency.
const TIMES: usize = 5;

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let runs = setting("OCX_IDLE_RUNS", 100) as usize;
    let secs = setting("OCX_IDLE_SECS", 60);
    let fossil = ocx::fossil::Fossil::locate()
        .expect("fossil: run scripts/setup.sh")
        .path()
        .to_path_buf();
    let ocx = common::release_ocx();
    let place = common::bench_dir(common::NOTING_RUNNER);
    let dir = place.tmp.path();
    let log = place.out.join("log");
    // Every run appends to it, each as its own uid.
    std::fs::write(&log, "").unwrap();
    std::fs::set_permissions(&log, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let repo = dir.join("served.fossil");
    let f = |args: &[&str]| common::fossil_as_admin(&fossil, dir, args);
    let r = repo.to_str().unwrap();
    f(&["new", "--admin-user", "admin", r]);
    f(&["user", "default", "admin", "-R", r]);
    let block = serde_json::json!({"command": [&place.runner], "env": {"OCX_BENCH_LOG": &log}, "input": "lines"});
    common::bench_runner_page(&fossil, dir, r, &block);
    let (server, port) = common::serve(&fossil, r);
    let node = Node {
        ocx: ocx.clone(),
        repo: repo.clone(),
        server,
    };
    std::thread::sleep(Duration::from_millis(500));
    node.ocx(&[
        "hook",
        "install",
        "--url",
        &format!("http://127.0.0.1:{port}/"),
    ]);
    node.ocx(&["node", "start"]);
    let root = ocx::node::config::default_root(&repo.canonicalize().unwrap());

    let opened = Instant::now();
    let idle: Vec<Run> = (0..runs)
        .map(|i| node.open(&root, &place.out, &format!("Idle {i}"), "1h"))
        .collect();
    for run in &idle {
        run.started();
    }
    eprintln!("{runs} runs open in {:.1?}", opened.elapsed());
    std::thread::sleep(Duration::from_secs(1));
    let before: Vec<(u64, u64)> = idle.iter().map(Run::use_so_far).collect();
    std::thread::sleep(Duration::from_secs(secs));
    let after: Vec<(u64, u64)> = idle.iter().map(Run::use_so_far).collect();
    let mut ticks: Vec<f64> = Vec::new();
    let mut wakes: Vec<f64> = Vec::new();
    for (b, a) in before.iter().zip(&after) {
        ticks.push(a.0.saturating_sub(b.0) as f64);
        wakes.push(a.1.saturating_sub(b.1) as f64 / secs as f64);
    }
    let most_ticks = ticks.iter().copied().fold(0.0, f64::max);
    let (tm, tp) = stat(&mut ticks);
    let most_wakes = wakes.iter().copied().fold(0.0, f64::max);
    let (wm, _) = stat(&mut wakes);

    let mut delivered = Vec::new();
    for k in 0..TIMES {
        let text = format!("bench delivery {k}");
        let sent = now_ns();
        ocx::node::spool::deliver(&idle[0].dir, &text, None).unwrap();
        let line = wait_for(&log, &text);
        delivered.push((read_at(&line) as f64 - sent as f64) / 1e6);
    }
    let mut stopped = Vec::new();
    for run in idle.iter().skip(1).take(TIMES) {
        let program = run.program();
        let sent = now_ns();
        ocx::node::spool::signal_watcher(&run.dir);
        let ended = program.ended();
        stopped.push((ended as f64 - sent as f64) / 1e6);
    }
    let walled: Vec<Run> = (0..TIMES)
        .map(|i| node.open(&root, &place.out, &format!("Walled {i}"), "3s"))
        .collect();
    let waits: Vec<_> = walled
        .iter()
        .map(|run| {
            let (program, started) = (run.program(), run.started());
            std::thread::spawn(move || (program.ended() as f64 - started as f64) / 1e6 - 3000.0)
        })
        .collect();
    let mut past_wall: Vec<f64> = waits.into_iter().map(|w| w.join().unwrap()).collect();
    drop(node);

    let (dm, dmax) = (
        stat(&mut delivered).0,
        delivered.iter().copied().fold(0.0, f64::max),
    );
    let (sm, smax) = (
        stat(&mut stopped).0,
        stopped.iter().copied().fold(0.0, f64::max),
    );
    let (pm, pmax) = (
        stat(&mut past_wall).0,
        past_wall.iter().copied().fold(0.0, f64::max),
    );
    println!(
        "{runs} open runs given nothing for {secs} s, each run's watcher (its supervisor a thread of it):"
    );
    println!(
        "  CPU ticks          median {tm:>5.1}  p95 {tp:>5.1}  most {most_ticks:>5.1}   goal: at most 1 each"
    );
    println!(
        "  wake-ups a second  median {wm:>5.1}            most {most_wakes:>5.1}   (before: 40, two 50 ms polls)"
    );
    println!("then, {TIMES} times each, the time to its effect:");
    println!(
        "  a delivery -> the program reads it    median {dm:>6.1} ms  most {dmax:>6.1} ms   goal: within 10 ms"
    );
    println!(
        "  a stop -> the program ended           median {sm:>6.1} ms  most {smax:>6.1} ms   goal: within 10 ms"
    );
    println!(
        "  the wall passed -> the program ended  median {pm:>6.1} ms  most {pmax:>6.1} ms   goal: within 10 ms"
    );
    println!(
        "  (the wall from the watcher's log of the start, in whole ms, a little after its own clock starts)"
    );
}

/// The node, its `ocx` and the served repository's server; stops its runs,
/// the node and the server however the benchmark ends.
struct Node {
    ocx: PathBuf,
    repo: PathBuf,
    server: std::process::Child,
}

impl Node {
    fn ocx(&self, args: &[&str]) -> String {
        common::ocx_as_admin(&self.ocx, &self.repo, args)
    }

    /// A session run of the bench runner given `objective` and `wall`,
    /// writing to `out`.
    fn open(&self, root: &Path, out: &Path, objective: &str, wall: &str) -> Run {
        let created = self.ocx(&[
            "create",
            "--runner",
            "bench",
            "--objective",
            objective,
            "--wall",
            wall,
            "--read-write",
            out.to_str().unwrap(),
        ]);
        let record = created
            .lines()
            .find_map(|l| l.strip_prefix("record: "))
            .expect("a record")
            .to_string();
        Run {
            dir: ocx::node::config::NodeConfig::run_dir(root, &record),
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = Command::new(&self.ocx)
            .args(["node", "stop", "--runs", "--repository"])
            .arg(&self.repo)
            .env("USER", "admin")
            .output();
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// A run, by its directory.
struct Run {
    dir: PathBuf,
}

impl Run {
    /// When its watcher logged the program's start, in nanoseconds since the
    /// epoch, once it has (a minute at most).
    fn started(&self) -> u128 {
        let until = Instant::now() + Duration::from_secs(120);
        loop {
            let text = std::fs::read_to_string(self.dir.join("watch.log")).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| l.contains(" started run-")) {
                return logged_at(line);
            }
            assert!(
                Instant::now() < until,
                "the run never started: {}",
                text.trim()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn watcher(&self) -> i32 {
        std::fs::read_to_string(self.dir.join("watcher.pid"))
            .unwrap_or_else(|e| {
                let log = std::fs::read_to_string(self.dir.join("watch.log")).unwrap_or_default();
                panic!("{}: {e}: {log}", self.dir.display())
            })
            .trim()
            .parse()
            .unwrap()
    }

    /// The watcher's CPU ticks and its threads' context switches so far.
    fn use_so_far(&self) -> (u64, u64) {
        let pid = self.watcher();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_else(|e| {
            let log = std::fs::read_to_string(self.dir.join("watch.log")).unwrap_or_default();
            let out = std::fs::read_to_string(self.dir.join("output.log")).unwrap_or_default();
            panic!("the watcher {pid}: {e}: {log}{out}")
        });
        let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
        let ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        let mut switches = 0;
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
            let status =
                std::fs::read_to_string(task.unwrap().path().join("status")).unwrap_or_default();
            switches += status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>();
        }
        (ticks, switches)
    }

    /// The run's program (its bubblewrap, a child of a thread of the watcher).
    fn program(&self) -> Program {
        self.started();
        let pid = self.watcher();
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let children: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
                .unwrap()
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
                .flat_map(|c| {
                    c.split_whitespace()
                        .filter_map(|p| p.parse().ok())
                        .collect::<Vec<i32>>()
                })
                .collect();
            let bwrap = children.into_iter().find(|c| {
                std::fs::read_to_string(format!("/proc/{c}/comm"))
                    .is_ok_and(|comm| comm.trim() == "bwrap")
            });
            if let Some(b) = bwrap {
                return Program::of(b);
            }
            assert!(Instant::now() < until, "the run's program never showed");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// A run's program, by a pidfd of its bubblewrap.
struct Program(std::os::fd::OwnedFd);

impl Program {
    fn of(pid: i32) -> Program {
        use std::os::fd::FromRawFd;
        // SAFETY: pidfd_open takes no pointer; a negative answer is an error.
        let raw = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid, 0) };
        assert!(raw >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
        // SAFETY: a descriptor pidfd_open has just made, this alone owns.
        Program(unsafe { std::os::fd::OwnedFd::from_raw_fd(raw as i32) })
    }

    /// When it ended, in nanoseconds since the epoch, once it has.
    fn ended(&self) -> u128 {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd;
        let mut fds = [PollFd::new(self.0.as_fd(), PollFlags::POLLIN)];
        while poll(&mut fds, PollTimeout::NONE).is_err() {}
        now_ns()
    }
}

/// A watcher's log line's time (`YYYY-MM-DDTHH:MM:SS.mmm`, UTC), in
/// nanoseconds since the epoch.
fn logged_at(line: &str) -> u128 {
    let stamp = line.split_whitespace().next().unwrap();
    let n: Vec<u32> = stamp
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse().unwrap())
        .collect();
    let month = time::Month::try_from(n[1] as u8).unwrap();
    let date = time::Date::from_calendar_date(n[0] as i32, month, n[2] as u8).unwrap();
    let at = time::Time::from_hms_milli(n[3] as u8, n[4] as u8, n[5] as u8, n[6] as u16).unwrap();
    time::PrimitiveDateTime::new(date, at)
        .assume_utc()
        .unix_timestamp_nanos() as u128
}

/// The log's line holding `text`, once it is there (a minute at most).
fn wait_for(log: &Path, text: &str) -> String {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let lines = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = lines.lines().find(|l| l.ends_with(text)) {
            return line.to_string();
        }
        assert!(Instant::now() < until, "{text:?} never read");
        std::thread::sleep(Duration::from_millis(1));
    }
}
