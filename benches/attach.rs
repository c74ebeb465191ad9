//! Benchmark of a joined run's terminal: from a key typed on the person's
//! terminal, through `ocx attach`, the node's socket and the run's
//! terminal, to the program's echo of it back on the person's terminal.
//! A repository is served on 127.0.0.1 and made a node; the run's program
//! (on a terminal, `"terminal": true`) puts its terminal in raw mode and
//! writes back each byte it reads; `ocx attach` runs on a terminal the
//! benchmark holds, and 200 keys are typed one at a time.
//!
//! Run: `cargo bench --bench attach` (as root, as the node runs).

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)] // a test or a benchmark is its own program, starting others and printing as it must

mod common;

use common::stat;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const KEYS: usize = 200;

/// The run's program: raw mode, each byte read written back at once.
const ECHO: &str = r#"#!/usr/bin/python3
import os, sys, tty
tty.setraw(0)
os.write(1, b"ready\r\n")
while True:
    b = os.read(0, 1)
    if not b:
        break
    os.write(1, b)
"#;

fn main() {
    let fossil = ocx::fossil::Fossil::locate()
        .expect("fossil: run scripts/setup.sh")
        .path()
        .to_path_buf();
    let ocx = common::release_ocx();
    let place = common::bench_dir(ECHO);
    let dir = place.tmp.path();
    let repo = dir.join("served.fossil");
    let r = repo.to_str().unwrap();
    let f = |args: &[&str]| common::fossil_as_admin(&fossil, dir, args);
    f(&["new", "--admin-user", "admin", r]);
    f(&["user", "default", "admin", "-R", r]);
    let block = serde_json::json!({"command": [place.runner], "input": "lines", "terminal": true});
    common::bench_runner_page(&fossil, dir, r, &block);
    let (server, port) = common::serve(&fossil, r);
    let o = |args: &[&str]| common::ocx_as_admin(&ocx, &repo, args);
    o(&[
        "hook",
        "install",
        "--url",
        &format!("http://127.0.0.1:{port}/"),
    ]);
    o(&["node", "start"]);
    let created = o(&[
        "create",
        "--runner",
        "bench",
        "--objective",
        "Echo each key",
        "--wall",
        "1h",
    ]);
    let record = created
        .lines()
        .find_map(|l| l.strip_prefix("record: "))
        .map(str::to_string)
        .expect("a record");
    let guard = Guard {
        ocx: ocx.clone(),
        repo: repo.clone(),
        record: record.clone(),
        server,
    };
    let socket = ocx::node::config::NodeConfig::run_dir(
        &ocx::node::config::default_root(&repo.canonicalize().unwrap()),
        &record,
    )
    .join(ocx::run::terminal::SOCKET);
    let until = Instant::now() + Duration::from_secs(60);
    while !socket.exists() {
        assert!(Instant::now() < until, "the run's terminal never opened");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));

    let pty = nix::pty::openpty(
        Some(&nix::pty::Winsize {
            ws_row: 40,
            ws_col: 120,
            ws_xpixel: 0,
            ws_ypixel: 0,
        }),
        None,
    )
    .unwrap();
    let slave = std::fs::File::from(pty.slave);
    let mut attach = Command::new(&ocx)
        .args([
            "attach",
            &record[..16],
            "--repository",
            r,
            "--user",
            "admin",
        ])
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    let mut master = std::fs::File::from(pty.master);
    // The program was signalled of the new size; let what it and the
    // joining said first pass.
    let mut buf = [0u8; 4096];
    let settle = Instant::now() + Duration::from_millis(700);
    while Instant::now() < settle {
        let _ = read_within(&mut master, &mut buf, Duration::from_millis(100));
    }
    let mut ms = Vec::with_capacity(KEYS);
    for i in 0..KEYS {
        let key = b'a' + (i % 26) as u8;
        let started = Instant::now();
        master.write_all(&[key]).unwrap();
        let mut seen = false;
        while !seen {
            let n = read_within(&mut master, &mut buf, Duration::from_secs(5))
                .expect("the echo never came");
            seen = buf[..n].contains(&key);
        }
        ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    master.write_all(&[0x1d]).unwrap();
    let _ = attach.wait();
    drop(guard);
    let (median, p95) = stat(&mut ms);
    println!("{KEYS} keys typed one at a time through ocx attach to a run's terminal:");
    println!(
        "  key typed -> program's echo shown  median {median:>6.2} ms   p95 {p95:>6.2} ms   (goal: median at most 5 ms)"
    );
}

/// Reads what the terminal shows, waiting `d` at most; none when nothing came.
fn read_within(master: &mut std::fs::File, buf: &mut [u8], d: Duration) -> Option<usize> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let mut fds = [PollFd::new(master.as_fd(), PollFlags::POLLIN)];
    let ms = PollTimeout::try_from(d.as_millis() as i32).unwrap_or(PollTimeout::NONE);
    match poll(&mut fds, ms) {
        Ok(n) if n > 0 => master.read(buf).ok(),
        _ => None,
    }
}

/// Stops the run, the node and the server however the benchmark ends.
struct Guard {
    ocx: std::path::PathBuf,
    repo: std::path::PathBuf,
    record: String,
    server: std::process::Child,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let run = |args: &[&str]| {
            let _ = Command::new(&self.ocx)
                .args(args)
                .arg("--repository")
                .arg(&self.repo)
                .env("USER", "admin")
                .output();
        };
        run(&["stop", "--record", &self.record]);
        std::thread::sleep(Duration::from_millis(500));
        run(&["node", "stop"]);
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}
