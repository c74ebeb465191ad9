//! Starting a run's watcher: one of the node's own processes, in a
//! session of its own, its environment cleared. The one place OCX starts
//! itself.

use super::config::NodeConfig;
use super::spool::make_run_dir;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;

/// Starts the watcher of `record` (or a command run on `checkin`),
/// detached in a session of its own, its output in the run's directory.
pub fn spawn_watcher(
    root: &Path,
    cfg: &NodeConfig,
    record: &str,
    checkin: Option<&str>,
) -> std::io::Result<()> {
    let dir = NodeConfig::run_dir(root, record);
    make_run_dir(&dir)?;
    if let Some(starter) = STARTER.get() {
        let mut held = starter
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match held.fork(root, cfg, record, checkin) {
            Ok(()) => return Ok(()),
            Err(e) => super::log::write(
                root,
                &[super::log::Event::new(
                    super::log::Done::Failed,
                    format!(
                        "the watchers' starter failed ({e}); the watcher is started as a program"
                    ),
                )],
            ),
        }
    }
    let log = own_log(&dir.join("watch.log"))?;
    let mut args = vec![
        OsString::from("watch"),
        "--root".into(),
        root.into(),
        "--record".into(),
        record.into(),
    ];
    if let Some(c) = checkin {
        args.extend(["--checkin".into(), c.into()]);
    }
    let mut child = spawn_own(&cfg.ocx, &args, log)?;
    std::thread::spawn(move || child.wait());
    Ok(())
}

/// The log at `path` of one of the node's own processes, opened to append
/// to, made its owner's alone (0600) where it is not there yet.
pub fn own_log(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// The nice value of the node's own sessions (its daemon, its starter,
/// each watcher) as the kernel's autogroups weigh them against each
/// other: about nine times a run's session.
const OWN_SESSION_NICE: i32 = -10;

/// Gives this process's session the node's priority (HISTORY 417): where
/// the kernel groups processes by session to share the processors (its
/// autogroups), every session weighs the same, so a node with 500 busy
/// runs, each program in a session of its own, got a 500th of them to
/// deliver a post or hold a budget. Each of the node's own sessions is
/// weighed as [`OWN_SESSION_NICE`] says; a run's program, in a session of
/// its own, keeps the weight of any. Only a process that leads its
/// session weighs it, so a node run in a person's terminal leaves that
/// terminal's session as it was; nothing is changed where the kernel has
/// no autogroups or the node may not raise a priority (not root).
pub fn weigh_own_session() {
    if nix::unistd::getsid(None) == Ok(nix::unistd::getpid()) {
        let _ = std::fs::write("/proc/self/autogroup", OWN_SESSION_NICE.to_string());
    }
}

/// The node's starter of watchers, once the node process has asked for
/// one ([`use_starter`]); a process that never asks (a command that opens
/// a run without a node) starts each watcher as a program of its own.
static STARTER: std::sync::OnceLock<std::sync::Mutex<Starter>> = std::sync::OnceLock::new();

/// Has this process start its runs' watchers from a starter of its own
/// (`ocx watchers`, HISTORY 416): one `ocx` started once, which forks each
/// watcher from itself, so the pages the loader wrote as it started `ocx`
/// (1.4 MB of relocated data) are shared by every watcher rather than
/// written again in each, and a watcher starts without a program's start.
/// The starter is started at the first watcher, and again when it has
/// ended or `ocx` on the disk is another program than it started.
pub fn use_starter(root: &Path, lock: &std::fs::File) -> std::io::Result<StarterKept> {
    let lock = lock.try_clone()?.into();
    let _ = STARTER.set(std::sync::Mutex::new(Starter {
        root: root.to_path_buf(),
        lock,
        running: None,
    }));
    Ok(StarterKept)
}

/// The node's hold on its starter: dropped as the node ends, it ends the
/// starter and waits for it (five seconds at most), so nothing of the node
/// outlives it. A node killed ends it too: its socket closed, the starter
/// ends at once, and the node's lock, which the starter holds with it, is
/// free only once both have ended.
pub struct StarterKept;

impl Drop for StarterKept {
    fn drop(&mut self) {
        let Some(starter) = STARTER.get() else {
            return;
        };
        let mut held = starter
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(running) = held.running.take() {
            let mut child = running.close();
            let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while matches!(child.try_wait(), Ok(None)) && std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

/// The starter's command, after `ocx`.
pub const STARTER_COMMAND: &str = "watchers";

/// How many bytes a watcher's command line may need beyond the starter's
/// (`--room` and as many dots): its record and check-in as SHA3-256
/// hashes and their flags, less the starter's own words. Its children
/// write their command lines over it.
pub const STARTER_ROOM: usize = 160;

/// The starter the node talks to, when it runs.
struct Starter {
    root: std::path::PathBuf,
    /// The node's lock, which each starter holds with the node.
    lock: OwnedFd,
    running: Option<Forking>,
}

/// A running starter: its process, the socket it reads requests on and
/// answers through, and the `ocx` it was started from.
struct Forking {
    child: std::process::Child,
    socket: std::os::unix::net::UnixStream,
    program: Option<ProgramId>,
}

/// What tells one `ocx` on the disk from another put in its place.
type ProgramId = (u64, u64, i64, i64);

fn program_id(ocx: &Path) -> Option<ProgramId> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(ocx).ok()?;
    Some((m.dev(), m.ino(), m.mtime(), m.mtime_nsec()))
}

/// How long the node waits for the starter to say it forked.
const STARTER_ANSWERS: std::time::Duration = std::time::Duration::from_secs(10);

impl Starter {
    /// Has the starter fork the watcher of `record` (on `checkin`):
    /// started first when it is not running, and once again when it
    /// fails on the way.
    fn fork(
        &mut self,
        root: &Path,
        cfg: &NodeConfig,
        record: &str,
        checkin: Option<&str>,
    ) -> std::io::Result<()> {
        if root != self.root {
            return Err(std::io::Error::other("another node's root"));
        }
        let line = match checkin {
            Some(c) => format!("{record} {c}\n"),
            None => format!("{record}\n"),
        };
        let mut tried = 0;
        loop {
            tried += 1;
            let running = match self.running.take() {
                Some(f) if f.program == program_id(&cfg.ocx) => f,
                Some(f) => {
                    f.end();
                    Forking::start(root, cfg, &self.lock)?
                }
                None => Forking::start(root, cfg, &self.lock)?,
            };
            match running.ask(&line) {
                Ok(answer) => {
                    self.running = Some(running);
                    return answer;
                }
                Err(e) => {
                    running.end();
                    if tried == 2 {
                        return Err(e);
                    }
                }
            }
        }
    }
}

impl Forking {
    /// Starts the starter, its requests read from its standard input, one
    /// end of a socket whose other end the node keeps; it holds `lock`
    /// with the node.
    fn start(root: &Path, cfg: &NodeConfig, lock: &OwnedFd) -> std::io::Result<Forking> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        ours.set_read_timeout(Some(STARTER_ANSWERS))?;
        ours.set_write_timeout(Some(STARTER_ANSWERS))?;
        let log = own_log(&super::log::file(root))?;
        let program = program_id(&cfg.ocx);
        let args = [
            OsString::from(STARTER_COMMAND),
            "--root".into(),
            root.into(),
            "--lock".into(),
            lock.as_raw_fd().to_string().into(),
            "--room".into(),
            ".".repeat(STARTER_ROOM).into(),
        ];
        let child = spawn_own_reading(
            &cfg.ocx,
            &args,
            OwnedFd::from(theirs).into(),
            Some(lock.as_raw_fd()),
            log,
        )?;
        Ok(Forking {
            child,
            socket: ours,
            program,
        })
    }

    /// Sends one request and reads its answer: the watcher's process id,
    /// or why it could not be forked.
    fn ask(&self, line: &str) -> std::io::Result<std::io::Result<()>> {
        use std::io::{Read, Write};
        let mut socket = &self.socket;
        socket.write_all(line.as_bytes())?;
        // One short line, read a byte at a time so nothing past it is
        // taken; the node asks one request at a time.
        let mut answer = Vec::new();
        let mut byte = [0u8];
        while byte[0] != b'\n' {
            if socket.read(&mut byte)? == 0 {
                return Err(std::io::Error::other("the starter ended"));
            }
            answer.push(byte[0]);
        }
        let answer = String::from_utf8_lossy(&answer);
        Ok(match answer.trim_end().strip_prefix("! ") {
            Some(why) => Err(std::io::Error::other(format!("cannot fork: {why}"))),
            None => Ok(()),
        })
    }

    /// Closes the node's end of the starter's socket, which ends it; its
    /// process, to be waited for.
    fn close(self) -> std::process::Child {
        self.child
    }

    /// Ends the starter, waited for on a thread of its own.
    fn end(self) {
        let mut child = self.close();
        std::thread::spawn(move || child.wait());
    }
}

/// Starts one of the node's own processes: the `ocx` program `ocx` with
/// `args`, in a session of its own (so a signal to its starter's group
/// misses it), its environment cleared but for `PATH` and the starter's
/// `HOME`, its input empty and its output to `log`. The one place OCX
/// starts itself.
pub fn spawn_own(
    ocx: &Path,
    args: &[OsString],
    log: std::fs::File,
) -> std::io::Result<std::process::Child> {
    spawn_own_reading(ocx, args, std::process::Stdio::null(), None, log)
}

/// Runs the node's furnisher ([`super::ahead`]) into the pool's empty
/// directory `into` and waits for it: in a session weighed least, holding
/// the node's `lock` with the node, and killed when the thread that
/// started it ends (the node's). What it said, when it failed.
#[allow(clippy::disallowed_methods)] // the node's own processes, as docs/architecture.md says
pub(crate) fn furnisher(
    ocx: &Path,
    root: &Path,
    into: &Path,
    lock: std::os::fd::RawFd,
) -> Result<(), super::NodeError> {
    let mut cmd = own_command(ocx);
    cmd.arg(super::ahead::COMMAND)
        .arg("--root")
        .arg(root)
        .arg("--into")
        .arg(into)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let parent = std::process::id() as i32;
    // SAFETY: prctl, getppid and fcntl are async-signal-safe and allocate
    // nothing; `lock` is open in the node while it runs.
    unsafe {
        cmd.pre_exec(move || {
            nix::libc::prctl(nix::libc::PR_SET_PDEATHSIG, nix::libc::SIGKILL);
            if nix::libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(nix::libc::ESRCH));
            }
            kept_across_exec(lock)
        });
    }
    crate::run::weigh_least(&mut cmd);
    let out = cmd.output()?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    Err(super::NodeError::Ahead(format!(
        "{}: {}",
        out.status,
        said.trim()
    )))
}

/// [`spawn_own`], its input `stdin`, and the descriptor `keep` left open
/// in it.
#[allow(clippy::disallowed_methods)] // the node's own processes, as docs/architecture.md says
fn spawn_own_reading(
    ocx: &Path,
    args: &[OsString],
    stdin: std::process::Stdio,
    keep: Option<std::os::fd::RawFd>,
    log: std::fs::File,
) -> std::io::Result<std::process::Child> {
    let mut cmd = own_command(ocx);
    cmd.args(args)
        .stdin(stdin)
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: setsid and fcntl are async-signal-safe and allocate
    // nothing; `keep` is open in the starter until it has started.
    unsafe {
        cmd.pre_exec(move || {
            nix::unistd::setsid()?;
            match keep {
                Some(fd) => kept_across_exec(fd),
                None => Ok(()),
            }
        });
    }
    cmd.spawn()
}

/// `ocx` as the node starts its own processes: nothing of the node's
/// environment but a fixed `PATH` and its `HOME`.
#[allow(clippy::disallowed_methods)] // the node's own processes, as docs/architecture.md says
fn own_command(ocx: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(ocx);
    cmd.env_clear().env("PATH", "/usr/local/bin:/usr/bin:/bin");
    if let Some(home) = std::env::var_os("HOME") {
        cmd.env("HOME", home);
    }
    cmd
}

/// Leaves the descriptor `fd` open across the exec that follows, in a
/// child between fork and exec: one `fcntl`, async-signal-safe.
fn kept_across_exec(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    // SAFETY: the caller's `fd` is open until the child has started.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    nix::fcntl::fcntl(
        fd,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )?;
    Ok(())
}
