//! What the benchmarks share: the large repository (100,000 posts in
//! 10,000 threads, sent by five logins), generated once into
//! target/bench-reads/ and reused, and the release binary they run.
// Each benchmark uses only some of these.
#![allow(dead_code)]

use ocx::fossil::artifact::{ForumPost, HashPolicy};
use ocx::fossil::{Fossil, Repository, bundle};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const THREADS: usize = 10_000;
const PER_THREAD: usize = 10;
const SENDERS: [&str; 5] = ["ann", "ben", "cai", "dee", "eli"];

/// The large repository, generated on first use.
pub fn large_repository(fossil: &Fossil) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-reads");
    std::fs::create_dir_all(&root).unwrap();
    let repo = root.join("large.fossil");
    if !repo.exists() {
        generate(fossil, &root, &repo);
    }
    repo
}

/// The release `ocx` binary: the one `cargo bench` built beside the
/// benchmark, in the same profile, so nothing is built a second time.
pub fn release_ocx() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ocx"))
}

/// A benchmark's directory, which every account may reach (a run's host
/// uid must), holding `out/`, writable by every account, and the runner
/// program `prog/runner.py`; removed when dropped.
pub struct BenchDir {
    pub tmp: tempfile::TempDir,
    pub out: PathBuf,
    pub runner: PathBuf,
}

/// A new [`BenchDir`] whose runner program is `runner`.
pub fn bench_dir(runner: &str) -> BenchDir {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::Builder::new()
        .prefix("ocx-bench-")
        .tempdir()
        .unwrap();
    let dir = tmp.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let prog = dir.join("prog");
    std::fs::create_dir(&prog).unwrap();
    let runner_path = prog.join("runner.py");
    std::fs::write(&runner_path, runner).unwrap();
    std::fs::set_permissions(&runner_path, std::fs::Permissions::from_mode(0o755)).unwrap();
    BenchDir {
        tmp,
        out,
        runner: runner_path,
    }
}

/// A runner program that notes when it reads each line: `NANOSECONDS LINE`
/// appended to the file `OCX_BENCH_LOG` names.
pub const NOTING_RUNNER: &str = r#"#!/usr/bin/python3
import sys, os, time
log = os.environ["OCX_BENCH_LOG"]
for line in sys.stdin:
    with open(log, "a") as f:
        f.write("%d %s" % (time.time_ns(), line))
"#;

/// `fossil ARGS` as `admin` in `dir`, refused when it fails; what it printed.
pub fn fossil_as_admin(fossil: &Path, dir: &Path, args: &[&str]) -> String {
    let o = Command::new(fossil)
        .args(args)
        .env("USER", "admin")
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `ocx ARGS --repository REPO` as `admin`, refused when it fails; what it
/// printed.
pub fn ocx_as_admin(ocx: &Path, repo: &Path, args: &[&str]) -> String {
    let out = Command::new(ocx)
        .args(args)
        .arg("--repository")
        .arg(repo)
        .env("USER", "admin")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Writes the runner page `sandbox/bench` of `repo`, its JSON `block`, as
/// `admin` (the page a benchmark's records name as their runner).
pub fn bench_runner_page(fossil: &Path, dir: &Path, repo: &str, block: &serde_json::Value) {
    let page = dir.join("page.md");
    std::fs::write(&page, format!("```json\n{block}\n```\n")).unwrap();
    fossil_as_admin(
        fossil,
        dir,
        &[
            "wiki",
            "create",
            "sandbox/bench",
            page.to_str().unwrap(),
            "--mimetype",
            "text/x-markdown",
            "-R",
            repo,
        ],
    );
}

/// A free loopback port, as the kernel gives one.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `fossil server` of `repo` (Fossil's own pages alone) on a free loopback
/// port; the server and its port.
pub fn serve(fossil: &Path, repo: &str) -> (std::process::Child, u16) {
    let port = free_port();
    let server = Command::new(fossil)
        .args(["server", "--port", &port.to_string(), "--localhost", repo])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    (server, port)
}

/// `fossil server` of `repo` on a free loopback port, serving OCX's page
/// from the extroot `dir/ext` as installed (the page's hand-off program beside `ocx`
/// linked there as `ocx-cgi`, told which `fossil` to run), and from
/// `dir/ext/direct` as before the page server (`ocx` itself linked there as
/// `ocx-cgi`), once it answers; the server and its port.
pub fn serve_with_page(
    fossil: &Path,
    ocx: &Path,
    dir: &Path,
    repo: &Path,
) -> (std::process::Child, u16) {
    let ext = dir.join("ext");
    let direct = ext.join("direct");
    std::fs::create_dir_all(&direct).unwrap();
    std::os::unix::fs::symlink(ocx.with_file_name("ocx-cgi"), ext.join("ocx-cgi")).unwrap();
    std::os::unix::fs::symlink(ocx, direct.join("ocx-cgi")).unwrap();
    for at in [&ext, &direct] {
        std::fs::write(
            at.join(".ocx-cgi.json"),
            serde_json::json!({ "fossil": fossil }).to_string(),
        )
        .unwrap();
    }
    let port = free_port();
    let server = Command::new(fossil)
        .args([
            "server",
            "--port",
            &port.to_string(),
            "--localhost",
            "--nojail",
        ])
        .arg("--extroot")
        .arg(&ext)
        .arg(repo)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    (server, port)
}

/// Now, in nanoseconds since the epoch (as a runner program notes it).
pub fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// When a runner's line `NANOSECONDS TEXT` was read.
pub fn read_at(line: &str) -> u128 {
    line.split_whitespace().next().unwrap().parse().unwrap()
}

/// Line `n` (from 1) of `log`, once it is there; `None` after `within`.
pub fn wait_line(log: &Path, n: usize, within: Duration) -> Option<String> {
    let until = Instant::now() + within;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = text.lines().nth(n - 1) {
            return Some(line.to_string());
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The median and the 95th percentile of `v`.
pub fn stat(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[(v.len() * 95).div_ceil(100) - 1])
}

/// A duration in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Every artifact's hash in `repo`, printed with the repository's size.
pub fn hashes(repo: &Path) -> Vec<String> {
    let hashes = Repository::open(repo).unwrap().all_hashes().unwrap();
    println!(
        "repository: {} artifacts, {} bytes",
        hashes.len(),
        std::fs::metadata(repo).unwrap().len()
    );
    hashes
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

/// Signs `login` in through Fossil's own form; the `Cookie` header's value.
pub fn sign_in(port: u16, login: &str, password: &str) -> String {
    let body = format!("u={login}&p={password}");
    let head = exchange(
        port,
        &format!(
            "POST /login HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    );
    head.lines()
        .find_map(|l| l.strip_prefix("Set-Cookie: "))
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("{login} did not sign in: {head}"))
        .to_string()
}

/// A GET of `path` with `cookie`, refused unless it answers 200 holding
/// `holds`; the body.
pub fn get(port: u16, cookie: &str, path: &str, holds: &str) -> String {
    let text = exchange(
        port,
        &format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n\r\n"),
    );
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    assert_eq!(head.split(' ').nth(1), Some("200"), "{path}: {head}");
    assert!(body.contains(holds), "{path}: {body}");
    body.to_string()
}

/// One request written whole, and everything the server answered.
pub fn exchange(port: u16, request: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// Waits, at most 10 s, until something listens on `port` of 127.0.0.1.
pub fn wait_for_port(port: u16) {
    let until = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Makes `repo` a node (its hook pointing at a node that never answers)
/// and writes a record sent by `sender` (admin, or a login given `R`)
/// whose run has a transcript of `entries` entries, four kinds in turn as
/// an agent's turn leaves them: its words, a tool call, the call's result
/// and a command with its output. The record, and the transcript, to
/// write more of.
pub fn run_with_transcript(
    ocx: &Path,
    repo: &Path,
    sender: &str,
    entries: usize,
) -> (String, ocx::node::transcript::Transcript) {
    use ocx::node::transcript::{Said, Transcript};
    ocx_as_admin(
        ocx,
        repo,
        &["hook", "install", "--url", "http://127.0.0.1:9/"],
    );
    if sender != "admin" {
        ocx_as_admin(ocx, repo, &["send_runs", "--login", sender]);
    }
    let created = ocx_as_admin(
        ocx,
        repo,
        &[
            "create",
            "--runner",
            "command",
            "--command",
            "true",
            "--objective",
            "Follow the run",
            "--wall",
            "1h",
            "--user",
            sender,
            "--json",
        ],
    );
    let record = serde_json::from_str::<serde_json::Value>(&created).unwrap()["result"]["record"]
        .as_str()
        .expect("the record written")
        .to_string();
    let root = ocx::node::root_of(&Repository::open(repo).unwrap())
        .unwrap()
        .expect("a node");
    let run_dir = ocx::node::config::NodeConfig::run_dir(&root, &record);
    std::fs::create_dir_all(&run_dir).unwrap();
    let transcript = Transcript::open(&run_dir, []).unwrap();
    for i in 0..entries / 4 {
        transcript.add(Said::Words {
            text: format!("Step {i}: reading what changed, then running the tests."),
        });
        transcript.add(Said::ToolCall {
            id: format!("t{i}"),
            name: "mcp__ocx__ocx_thread".into(),
            arguments: serde_json::json!({"of": record}),
        });
        transcript.add(Said::ToolResult {
            id: format!("t{i}"),
            output: "posts: 3\n".repeat(20),
            error: false,
        });
        transcript.add(Said::Command {
            command: "cargo test".into(),
            output: "test result: ok. 12 passed\n".repeat(10),
            exit: Some(0),
        });
    }
    (record, transcript)
}

/// What a process holds of memory, from `/proc/PID/smaps_rollup` and
/// `/proc/PID/status`, in KiB: resident (its share of shared pages whole),
/// proportional (shared pages divided among their sharers), anonymous
/// (its own heap and stacks), and its peak resident.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pub rss: u64,
    pub pss: u64,
    pub anonymous: u64,
    pub peak: u64,
}

/// The memory of process `pid`, while it lives.
pub fn memory_of(pid: u32) -> Option<Memory> {
    let field = |text: &str, name: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(Memory {
        rss: field(&rollup, "Rss:")?,
        pss: field(&rollup, "Pss:")?,
        anonymous: field(&rollup, "Anonymous:")?,
        peak: field(&status, "VmHWM:")?,
    })
}

/// The page server running `ocx` (the release binary), by its socket:
/// its process id, once it listens.
pub fn page_server_of(ocx: &Path) -> Option<u32> {
    let dir = ocx::entry::cgi::handoff::private_directory()?;
    let socket = ocx::entry::cgi::handoff::socket_for(&dir, ocx)?;
    let wanted = [
        ocx::entry::cgi::handoff::SERVER_COMMAND.as_bytes(),
        socket.as_os_str().as_encoded_bytes(),
    ];
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|p| {
        let pid: u32 = p.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(p.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        args.windows(2).any(|w| w == wanted).then_some(pid)
    })
}

/// The peak resident memory, in KiB, of one `fossil` answering `GET
/// path` of `repo` with `cookie` as a CGI program (a script naming the
/// repository, as a web server runs Fossil), as the kernel counted it for
/// that process alone (`wait4`'s usage): what one request of Fossil's own
/// costs in memory.
pub fn fossil_request_peak(fossil: &Path, repo: &Path, path: &str, cookie: &str) -> u64 {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("repo.cgi");
    std::fs::write(
        &script,
        format!("#!{}\nrepository: {}\n", fossil.display(), repo.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    #[allow(clippy::zombie_processes)] // waited for below, by wait4, for its usage
    let mut child = Command::new(&script)
        .env_clear()
        .envs([
            ("GATEWAY_INTERFACE", "CGI/1.0"),
            ("REQUEST_METHOD", "GET"),
            ("SCRIPT_NAME", "/repo.cgi"),
            ("PATH_INFO", path),
            ("HTTP_HOST", "127.0.0.1"),
            ("SERVER_NAME", "127.0.0.1"),
            ("SERVER_PORT", "80"),
            ("REMOTE_ADDR", "127.0.0.1"),
            ("HTTP_COOKIE", cookie),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut answer = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut answer)
        .unwrap();
    assert!(
        answer.starts_with("Status: 200"),
        "fossil {path}: {}",
        &answer[..answer.len().min(300)]
    );
    let pid = child.id() as nix::libc::pid_t;
    let mut status = 0;
    // SAFETY: zeroed is a valid `rusage` (plain integers), and `wait4`
    // writes only into the two places given, for a child of this process
    // that nothing else waits for.
    let mut usage: nix::libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { nix::libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "fossil was not waited for");
    assert_eq!(status, 0, "fossil {path} failed");
    usage.ru_maxrss as u64
}
