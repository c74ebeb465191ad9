//! A run's supervisor: starts the planned sandbox as the run's account, in its cgroups, and holds it to its budget.

#![allow(clippy::disallowed_methods)] // where bubblewrap is started, as docs/architecture.md says

use std::ffi::{CStr, CString};
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::fcntl::{OFlag, open};
use nix::sys::signal::{Signal, kill};
use nix::sys::stat::Mode;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Gid, Pid, Uid};
use serde::Serialize;

use super::SandboxError;
use super::account::{Need, RunAccount, account_can, become_account, hand_over};
use super::budget::{Cgroup, Limit, disk};

mod plan;
mod waking;

pub(crate) use plan::find_bwrap;
pub use plan::{Bind, Forbidden, Plan, Program, RUN_HOME, SandboxFields, on_path, plan};
use plan::{path_err, text};

/// How a run ended, and whether a budget limit ended it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ended {
    /// The exit code bubblewrap reported (a program killed by signal N shows as 128+N).
    pub code: Option<i32>,
    /// The signal that ended bubblewrap itself, as when the supervisor kills the run.
    pub signal: Option<i32>,
    /// The budget limit that ended the run, if one did.
    pub limit: Option<Limit>,
    /// Whether the run was ended by a [`Killer`] (or by dropping its [`Running`]).
    pub stopped: bool,
    /// Wall-clock time from start to end.
    #[serde(serialize_with = "super::serialize_secs")]
    pub elapsed: Duration,
    /// CPU time used by all of the run's processes together, known when the budget holds `cpu`.
    #[serde(serialize_with = "super::serialize_opt_secs")]
    pub cpu_used: Option<Duration>,
    /// Bytes in use on the run's own filesystem when it ended, when it had one.
    pub disk_used: Option<u64>,
}

#[derive(Debug)]
struct Shared {
    pid: i32,
    reaped: Mutex<bool>,
    stopped: AtomicBool,
    cgroup: Option<Arc<Cgroup>>,
    waker: waking::Waker,
    asks: Mutex<Asks>,
}

/// Who is asked, in place of ending the run, when it reaches its wall or
/// its CPU budget; what they gave; and the pause at one while they decide.
#[derive(Default)]
struct Asks {
    /// Called at the wall or CPU limit reached: whether the run pauses
    /// there (its caller has frozen it and asks) rather than ending.
    asker: Option<Box<dyn Fn(Limit) -> bool + Send>>,
    /// Wall time given on top of the plan's.
    wall_more: Duration,
    /// CPU time given on top of the plan's.
    cpu_more: Duration,
    /// The limit the run is paused at, and since when.
    paused: Option<(Limit, Instant)>,
    /// Whether the paused run is to end at its limit now.
    end: bool,
}

impl std::fmt::Debug for Asks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Asks")
            .field("asker", &self.asker.is_some())
            .field("wall_more", &self.wall_more)
            .field("cpu_more", &self.cpu_more)
            .field("paused", &self.paused)
            .field("end", &self.end)
            .finish()
    }
}

impl Shared {
    fn asks(&self) -> std::sync::MutexGuard<'_, Asks> {
        self.asks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn kill_all(&self) {
        {
            let reaped = self.reaped.lock().unwrap_or_else(|e| e.into_inner());
            if !*reaped {
                for child in children(self.pid) {
                    let _ = kill(Pid::from_raw(child), Signal::SIGKILL);
                }
                let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
            }
        }
        if let Some(cg) = &self.cgroup {
            cg.kill_all();
        }
    }

    fn try_reap(&self) -> Result<Option<WaitStatus>, nix::Error> {
        let mut reaped = self.reaped.lock().unwrap_or_else(|e| e.into_inner());
        if *reaped {
            return Err(nix::Error::ECHILD);
        }
        loop {
            match waitpid(Pid::from_raw(self.pid), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => return Ok(None),
                Ok(status @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => {
                    *reaped = true;
                    return Ok(Some(status));
                }
                Ok(_) | Err(nix::Error::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

fn children(pid: i32) -> Vec<i32> {
    fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Ends every process of a run from any thread; cheap to clone.
#[derive(Debug, Clone)]
pub struct Killer {
    shared: Arc<Shared>,
}

impl Killer {
    /// What the run's processes have used so far, where its cgroups count
    /// it: CPU time, and the most memory held at once in bytes.
    pub fn used(&self) -> (Option<Duration>, Option<u64>) {
        match &self.shared.cgroup {
            Some(cg) => (cg.cpu_used(), cg.memory_peak()),
            None => (None, None),
        }
    }

    /// Freezes every process of the run (`frozen`), or thaws them, where
    /// its cgroups offer a freezer; whether they did (false where the run
    /// has no cgroup, or its host no freezer for it).
    pub fn freeze(&self, frozen: bool) -> bool {
        self.shared
            .cgroup
            .as_ref()
            .is_some_and(|cg| cg.freeze(frozen))
    }

    /// Has `asker` called, in place of ending the run, when it reaches its
    /// wall or its CPU budget: when it answers true (it froze the run and
    /// asks whether to give it more), the run waits paused at that limit
    /// until [`Killer::resume`] or [`Killer::end_paused`], or until its
    /// plan's wall passes again unanswered, when it ends at the limit.
    pub fn on_limit(&self, asker: impl Fn(Limit) -> bool + Send + 'static) {
        self.shared.asks().asker = Some(Box::new(asker));
    }

    /// Goes on from a pause at the wall or CPU limit with `more` of it: at
    /// the wall, `more` from now (the pause is not counted against it).
    pub fn resume(&self, more: Duration) {
        let mut asks = self.shared.asks();
        match asks.paused.take() {
            Some((Limit::Wall, since)) => asks.wall_more += more + since.elapsed(),
            Some((_, _)) => asks.cpu_more += more,
            None => {}
        }
        drop(asks);
        self.shared.waker.wake();
    }

    /// Ends a run paused at its wall or CPU limit, at that limit.
    pub fn end_paused(&self) {
        self.shared.asks().end = true;
        self.shared.waker.wake();
    }

    /// Ends every process of the run; its [`Ended`] then says `stopped`.
    pub fn kill(&self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.shared.kill_all();
        self.shared.waker.wake();
    }
}

/// A started run, held by a supervisor thread that enforces its budget until it ends.
#[derive(Debug)]
pub struct Running {
    pid: u32,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    killer: Killer,
    supervisor: Option<JoinHandle<Result<Ended, SandboxError>>>,
    ended: fs::File,
}

impl Running {
    /// The host pid of the run's bubblewrap process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The run's standard input, when it was piped; taken once.
    pub fn stdin(&mut self) -> Option<ChildStdin> {
        self.stdin.take()
    }

    /// The run's standard output, when it was piped; taken once.
    pub fn stdout(&mut self) -> Option<ChildStdout> {
        self.stdout.take()
    }

    /// The run's standard error, when it was piped; taken once.
    pub fn stderr(&mut self) -> Option<ChildStderr> {
        self.stderr.take()
    }

    /// A handle that ends the run from another thread.
    pub fn killer(&self) -> Killer {
        self.killer.clone()
    }

    /// Ends every process of the run.
    pub fn kill(&self) {
        self.killer.kill();
    }

    /// Hung up (`POLLHUP` to `poll`) once the run has ended and its cgroup is gone, so a
    /// caller waiting on more than the run is woken by its end.
    pub fn ended(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.ended)
    }

    /// Whether the run has ended and its cgroup is gone, so `wait` returns at once.
    pub fn is_finished(&self) -> bool {
        self.supervisor.as_ref().is_none_or(|h| h.is_finished())
    }

    /// Waits for the run to end (by itself, by a limit, or by a [`Killer`]) and its cgroup to be removed.
    pub fn wait(mut self) -> Result<Ended, SandboxError> {
        self.stdin = None;
        let handle = self
            .supervisor
            .take()
            .ok_or_else(|| SandboxError::Supervisor("already waited for".into()))?;
        handle
            .join()
            .unwrap_or_else(|_| Err(SandboxError::Supervisor("panicked".into())))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(handle) = self.supervisor.take() {
            self.killer.kill();
            let _ = handle.join();
        }
    }
}

struct Started {
    shared: Arc<Shared>,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
}

fn join_cgroups(files: &[CString]) -> io::Result<()> {
    for f in files {
        let fd = open(
            f.as_c_str(),
            OFlag::O_WRONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        nix::unistd::write(&fd, b"0")?;
    }
    Ok(())
}

/// How often a run's use is read when something it holds cannot wake its supervisor here,
/// and at the most while it writes its filesystem.
const TICK: Duration = Duration::from_millis(50);

/// The longest a limit that tells no one goes unread while the run's processes stay as they are.
const SLOWEST: Duration = Duration::from_secs(10);

/// The longest a run's filesystem goes unread while its use stays as it is, where its writes
/// cannot wake the supervisor: its size still holds it, and the run is ended this much later
/// at the most once it is full.
const DISK_SLOWEST: Duration = Duration::from_secs(1);

/// The least time between two reads of a run's CPU time as it nears its budget.
const CPU_LEAST: Duration = Duration::from_millis(10);

fn supervise(
    plan: Plan,
    cgroup: Option<Arc<Cgroup>>,
    mounts: Vec<(CString, CString)>,
    stdio: [Stdio; 3],
    started: mpsc::Sender<Result<Started, SandboxError>>,
) -> Result<Ended, SandboxError> {
    let mut cmd = bubblewrap(&plan, cgroup.as_deref(), mounts, stdio);
    let (waker, woken) = match waking::pipe() {
        Ok(p) => p,
        Err(e) => {
            return Err(not_started(
                cgroup.as_deref(),
                &started,
                e,
                "no pipe to wake it",
            ));
        }
    };
    let start = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Err(not_started(
                cgroup.as_deref(),
                &started,
                e,
                "bubblewrap did not start",
            ));
        }
    };
    let shared = Arc::new(Shared {
        pid: child.id() as i32,
        reaped: Mutex::new(false),
        stopped: AtomicBool::new(false),
        cgroup: cgroup.clone(),
        waker,
        asks: Mutex::default(),
    });
    let sources = waking::Sources::of(shared.pid, woken, cgroup.as_deref(), plan.disk.as_deref());
    let _ = started.send(Ok(Started {
        shared: shared.clone(),
        stdin: child.stdin.take(),
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
    }));
    drop(child);

    let (status, mut limit) = watch(&plan, &shared, &sources, start)?;
    let elapsed = start.elapsed();
    let stopped = shared.stopped.load(Ordering::SeqCst);
    let mut cpu_used = None;
    if let Some(cg) = &cgroup {
        cg.kill_all();
        if limit.is_none() && !stopped {
            limit = if cg.memory_hit() {
                Some(Limit::Memory)
            } else if cg.processes_hit() {
                Some(Limit::Processes)
            } else {
                None
            };
        }
        cpu_used = cg.cpu_used();
        if !cg.remove() {
            return Err(SandboxError::Supervisor(format!(
                "cgroup of run {} could not be removed",
                plan.run_name
            )));
        }
    }
    if limit.is_none() && !stopped && disk_full(&plan) {
        limit = Some(Limit::Disk);
    }
    let disk_used = plan.disk.as_deref().and_then(disk::usage).map(|u| u.used);
    let (code, signal) = match status {
        WaitStatus::Exited(_, code) => (Some(code), None),
        WaitStatus::Signaled(_, sig, _) => (None, Some(sig as i32)),
        _ => (None, None),
    };
    Ok(Ended {
        code,
        signal,
        limit,
        stopped,
        elapsed,
        cpu_used,
        disk_used,
    })
}

/// The bubblewrap command `plan` runs, on `stdio`: before it starts, its
/// process joins the run's cgroup, mounts what is reached for it, becomes
/// the run's account and, for a terminal, leads a session on its stdin.
fn bubblewrap(
    plan: &Plan,
    cgroup: Option<&Cgroup>,
    mounts: Vec<(CString, CString)>,
    stdio: [Stdio; 3],
) -> Command {
    let [stdin, stdout, stderr] = stdio;
    let mut cmd = Command::new(&plan.bwrap);
    cmd.args(&plan.args)
        .env_clear()
        .envs(&plan.env)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr);
    let files = cgroup.map(|cg| cg.procs_files()).unwrap_or_default();
    let ids = plan
        .account
        .as_ref()
        .map(|a| (Uid::from_raw(a.uid), Gid::from_raw(a.gid)));
    let terminal = plan.terminal;
    if !files.is_empty() || ids.is_some() || terminal || !mounts.is_empty() {
        // SAFETY: the hook only opens and writes files, makes a mount namespace and mounts
        // in it, sets its groups, gid and uid, and makes a session whose controlling
        // terminal its standard input is, all async-signal-safe, and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                join_cgroups(&files)?;
                mount_reached(&mounts)?;
                if let Some((uid, gid)) = ids {
                    become_account(uid, gid)?;
                }
                if terminal {
                    nix::unistd::setsid()?;
                    if nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
    cmd
}

/// Bubblewrap not started (`why`): the run's cgroup removed and whoever
/// waits for the start told of `error`.
fn not_started(
    cgroup: Option<&Cgroup>,
    started: &mpsc::Sender<Result<Started, SandboxError>>,
    error: io::Error,
    why: &str,
) -> SandboxError {
    if let Some(cg) = cgroup {
        cg.remove();
    }
    let _ = started.send(Err(SandboxError::Spawn(error)));
    SandboxError::Supervisor(why.into())
}

/// The run watched from `start` until bubblewrap is reaped: killed at its
/// first limit reached (its wall, its cgroup's, its disk) or when it is
/// stopped, waking for the run's end, a notice, a write, or the next
/// time a limit must be read. Its status and the limit that ended it.
fn watch(
    plan: &Plan,
    shared: &Shared,
    sources: &waking::Sources,
    start: Instant,
) -> Result<(WaitStatus, Option<Limit>), SandboxError> {
    let cores = waking::cores();
    let mut limit = None;
    // A second read of the run's use soon after a notice or a write: a limit the kernel
    // tells of before it counts it, and a filesystem written fast, read once a tick.
    let mut again: Option<Instant> = None;
    // How often a limit that tells no one is read, and what the run's processes were then.
    let (mut read_every, mut seen) = (TICK, None);
    // How often a filesystem whose writes wake no one is read, and its use then.
    let (mut disk_every, mut disk_seen) = (TICK, None);
    let status = loop {
        match shared.try_reap() {
            Ok(Some(done)) => break done,
            Ok(None) => {}
            Err(e) => {
                shared.kill_all();
                if let Some(cg) = &shared.cgroup {
                    cg.remove();
                }
                return Err(SandboxError::Supervisor(format!(
                    "cannot wait for bubblewrap: {e}"
                )));
            }
        }
        let stopped = shared.stopped.load(Ordering::SeqCst);
        let (wall, cpu_more, paused) = {
            let asks = shared.asks();
            let over = asks
                .paused
                .filter(|(_, since)| asks.end || since.elapsed() >= plan.wall);
            if let Some((at, _)) = over {
                limit.get_or_insert(at);
            }
            (plan.wall + asks.wall_more, asks.cpu_more, asks.paused)
        };
        let disk_use = plan.disk.as_deref().and_then(disk::usage);
        if limit.is_none() && !stopped && paused.is_none() {
            if start.elapsed() >= wall {
                limit = Some(Limit::Wall);
            } else if let Some(cg) = &shared.cgroup {
                limit = cg.limit_hit(cpu_more);
            }
            if let Some(at @ (Limit::Wall | Limit::Cpu)) = limit
                && asked(shared, at)
            {
                limit = None;
                continue;
            }
            if limit.is_none() && disk_use.is_some_and(|u| u.full) {
                limit = Some(Limit::Disk);
            }
        }
        if limit.is_some() || stopped {
            shared.kill_all();
        }
        let now = Instant::now();
        if again.is_some_and(|at| at <= now) {
            again = None;
        }
        let mut next = match paused {
            Some((_, since)) => plan.wall.saturating_sub(since.elapsed()),
            None => wall.saturating_sub(start.elapsed()),
        };
        if let (None, Some(left)) = (
            paused,
            shared
                .cgroup
                .as_deref()
                .and_then(|cg| cg.cpu_left(cpu_more)),
        ) {
            next = next.min((left / cores).max(CPU_LEAST) + Duration::from_millis(1));
        }
        if sources.tick || limit.is_some() || stopped {
            next = next.min(TICK);
        }
        if let (true, Some(cg)) = (sources.unnoticed, &shared.cgroup) {
            let now_seen = cg.processes_now();
            read_every = slower_while_same(read_every, now_seen == seen, SLOWEST);
            seen = now_seen;
            next = next.min(read_every);
        }
        if sources.disk_unwatched && plan.disk.is_some() {
            let used = disk_use.map(|u| u.used);
            disk_every = slower_while_same(disk_every, used == disk_seen, DISK_SLOWEST);
            disk_seen = used;
            next = next.min(disk_every);
        }
        if let Some(at) = again {
            next = next.min(at - now);
        }
        let woke = sources.wait(next.max(Duration::from_millis(1)), again.is_none());
        if (woke.notice || woke.disk) && again.is_none() {
            again = Some(Instant::now() + TICK);
            read_every = TICK;
        }
    };
    Ok((status, limit))
}

/// Whether the run, at its wall or CPU limit `at`, pauses there: its
/// asker (if it has one) froze it and asks.
fn asked(shared: &Shared, at: Limit) -> bool {
    let mut asks = shared.asks();
    let pauses = asks.asker.as_ref().is_some_and(|ask| ask(at));
    if pauses {
        asks.paused = Some((at, Instant::now()));
        asks.end = false;
    }
    pauses
}

/// The next wait between two reads of something that wakes no one: twice `every`, up to
/// `slowest`, while it stays the `same`; a [`TICK`] again once it changes.
fn slower_while_same(every: Duration, same: bool, slowest: Duration) -> Duration {
    if same { (every * 2).min(slowest) } else { TICK }
}

/// Whether the run has written its own filesystem full.
fn disk_full(plan: &Plan) -> bool {
    plan.disk
        .as_deref()
        .and_then(disk::usage)
        .is_some_and(|u| u.full)
}

/// Starts the run: joins bubblewrap to the run's cgroup before it executes, then supervises it on a thread of its own.
///
/// Every limit of the plan is in force before the program starts, or the run does not start.
/// The supervisor thread is bubblewrap's parent, so the run also ends if that thread ends.
///
/// When the plan names a run account, bubblewrap runs as that account, which first becomes the
/// owner of the workspace and the program's homes (everything under them too, never following a
/// symbolic link). The run is refused, naming the field, when the account cannot read a
/// `sandbox.read_only` path, read and write a `sandbox.read_write` path (the maintainer grants
/// that access; it is never handed over), execute the program, or reach the workspace or a home.
/// A plan given [`Plan::reach_closed`] alone may have a read-only path of the administrator's
/// that the account may read itself but not reach bound by OCX for bubblewrap; a path closed
/// to the account itself is refused all the same.
pub fn spawn(
    plan: &Plan,
    stdin: Stdio,
    stdout: Stdio,
    stderr: Stdio,
) -> Result<Running, SandboxError> {
    match &plan.account {
        Some(account) => account.refuse_root()?,
        None if Uid::effective().is_root() => {
            return Err(SandboxError::Account {
                name: "root".into(),
                reason: "would run the program: a run started by root needs an account of its own"
                    .into(),
            });
        }
        None => {}
    }
    on_its_disk(plan)?;
    make_home_copies(plan)?;
    make_tmp(plan)?;
    let mut owned = plan.clone();
    let mounts = match &plan.account {
        Some(account) => {
            let reached = prepare_for(plan, account)?;
            make_reach_points(&mut owned, &reached)?
        }
        None => Vec::new(),
    };
    let cgroup = plan
        .cgroup
        .as_ref()
        .map(Cgroup::create)
        .transpose()?
        .map(Arc::new);
    let (tx, rx) = mpsc::channel();
    let (done, ended) = waking::pipe().map_err(SandboxError::Spawn)?;
    let handle = thread::Builder::new()
        .name(format!("ocx-run-{}", plan.run_name))
        .spawn(move || {
            let _done = done;
            supervise(owned, cgroup, mounts, [stdin, stdout, stderr], tx)
        })
        .map_err(SandboxError::Spawn)?;
    match rx.recv() {
        Ok(Ok(s)) => Ok(Running {
            pid: s.shared.pid as u32,
            stdin: s.stdin,
            stdout: s.stdout,
            stderr: s.stderr,
            killer: Killer { shared: s.shared },
            supervisor: Some(handle),
            ended,
        }),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        Err(_) => Err(handle
            .join()
            .map_err(|_| SandboxError::Supervisor("panicked".into()))
            .and_then(|r| r)
            .err()
            .unwrap_or_else(|| SandboxError::Supervisor("ended before starting".into()))),
    }
}

/// Whether OCX may reach the bind's path for bubblewrap: a read-only path the node's
/// administrator named, in a plan that asks for it.
fn may_reach(plan: &Plan, field: &str) -> bool {
    plan.reach.is_some() && matches!(field, "sandbox.read_only" | "program.command")
}

/// Checks what the account needs of each path, and hands it the run's own directories;
/// answers the read-only paths OCX is to reach for bubblewrap ([`Plan::reach_closed`]).
fn prepare_for(plan: &Plan, account: &RunAccount) -> Result<Vec<PathBuf>, SandboxError> {
    let exe = plan
        .command()
        .first()
        .map(PathBuf::from)
        .unwrap_or_default();
    let mut checks: Vec<(&'static str, &Path, Need)> =
        vec![("program.command", &exe, Need::Execute)];
    for b in &plan.binds {
        let need = match b.field {
            "sandbox.read_only" | "program.command" => Need::Read,
            "sandbox.read_write" => Need::Write,
            _ => Need::Reach,
        };
        checks.push((b.field, b.copy.as_ref().unwrap_or(&b.host), need));
    }
    let mut asked: Vec<(&Path, Need)> = checks
        .iter()
        .map(|(_, p, need)| match need {
            Need::Reach => (p.parent().unwrap_or(p), *need),
            _ => (*p, *need),
        })
        .collect();
    // A path OCX may reach is asked twice more: of itself, and whether its directory is reached.
    for (field, p, need) in &checks {
        if may_reach(plan, field) {
            let itself = match need {
                Need::Execute => Need::ExecuteItself,
                _ => Need::ReadItself,
            };
            asked.push((p, itself));
            asked.push((p.parent().unwrap_or(p), Need::Reach));
        }
    }
    let allowed = account_can(account, &asked).map_err(|source| SandboxError::Probe {
        name: account.name.clone(),
        source,
    })?;
    let (plain, mut more) = allowed.split_at(checks.len());
    let mut reached = Vec::new();
    for (at, ((field, path, need), ok)) in checks.iter().zip(plain).enumerate() {
        let mut ok = *ok;
        if may_reach(plan, field) {
            let (pair, rest) = more.split_at(2.min(more.len()));
            more = rest;
            // Readable itself, behind a directory closed to the account: OCX reaches it.
            if !ok && pair == [true, false] {
                ok = true;
                if at > 0 {
                    reached.push(path.to_path_buf());
                }
            }
        }
        if !ok {
            let whose = format!("the run account {} (uid {})", account.name, account.uid);
            let reason = match need {
                Need::Read | Need::ReadItself => format!("is not readable by {whose}"),
                Need::Write => format!(
                    "is not readable and writable by {whose}; grant it that access, as runs never take it over"
                ),
                Need::Execute | Need::ExecuteItself => format!("is not executable by {whose}"),
                Need::Reach => {
                    format!("cannot be reached by {whose}: a directory above it is closed to it")
                }
            };
            return Err(path_err(field, path, reason));
        }
    }
    for b in &plan.binds {
        if matches!(
            b.field,
            "workspace" | "program.homes" | "program.home" | "tmp"
        ) {
            let dir = b.copy.as_ref().unwrap_or(&b.host);
            hand_over(dir, account)
                .and_then(|()| {
                    let fd = open(
                        dir.as_path(),
                        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                        Mode::empty(),
                    )?;
                    nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(0o700))
                })
                .map_err(|e| {
                    path_err(
                        b.field,
                        &b.host,
                        format!("cannot be handed to the run account {}: {e}", account.name),
                    )
                })?;
        }
    }
    reached.sort();
    reached.dedup();
    Ok(reached)
}

/// Makes where bubblewrap binds each reached path from (`DIR/N`, an empty directory or file
/// as the path is, under the plan's `reach` directory, 0711), and points bubblewrap's
/// arguments there (never the program's own, after `--`); answers each mount to make, as C
/// strings the hook before bubblewrap starts uses without allocating.
fn make_reach_points(
    plan: &mut Plan,
    reached: &[PathBuf],
) -> Result<Vec<(CString, CString)>, SandboxError> {
    let Some(dir) = plan.reach.clone() else {
        return Ok(Vec::new());
    };
    if reached.is_empty() {
        return Ok(Vec::new());
    }
    let failed = |p: &Path, e: io::Error| path_err("reach", p, format!("cannot be made: {e}"));
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(&dir)
        .map_err(|e| failed(&dir, e))?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o711)).map_err(|e| failed(&dir, e))?;
    let options = plan
        .args
        .iter()
        .position(|a| a == "--")
        .unwrap_or(plan.args.len());
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_encoded_bytes())
            .map_err(|_| path_err("reach", p, "holds a NUL byte"))
    };
    let mut mounts = Vec::with_capacity(reached.len());
    for (n, host) in reached.iter().enumerate() {
        let at = dir.join(n.to_string());
        match fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => fs::remove_dir(&at),
            Ok(_) => fs::remove_file(&at),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
        .and_then(|()| match host.is_dir() {
            true => fs::DirBuilder::new().mode(0o700).create(&at),
            false => fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&at)
                .map(drop),
        })
        .map_err(|e| failed(&at, e))?;
        let (from, to) = (text(host), text(&at));
        for i in 0..options.saturating_sub(2) {
            if plan.args[i] == "--ro-bind" && plan.args[i + 1] == from {
                plan.args[i + 1] = to.clone();
            }
        }
        mounts.push((c(host)?, c(&at)?));
    }
    Ok(mounts)
}

/// Gives bubblewrap, in a mount namespace of its own, each path OCX reaches for it
/// ([`Plan::reach_closed`]) bound read-only where bubblewrap binds it from. The namespace
/// takes the host's mounts as they come and gives it none, so nothing mounted here reaches
/// the host, and it ends with bubblewrap. Runs between fork and exec, as root: only
/// async-signal-safe calls on strings made before, allocating nothing.
fn mount_reached(mounts: &[(CString, CString)]) -> nix::Result<()> {
    use nix::mount::{MsFlags, mount};
    const NONE: Option<&CStr> = None;
    if mounts.is_empty() {
        return Ok(());
    }
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)?;
    mount(NONE, c"/", NONE, MsFlags::MS_REC | MsFlags::MS_SLAVE, NONE)?;
    for (host, at) in mounts {
        mount(
            Some(host.as_c_str()),
            at.as_c_str(),
            NONE,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            NONE,
        )?;
        mount(
            NONE,
            at.as_c_str(),
            NONE,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            NONE,
        )?;
    }
    Ok(())
}

/// Refuses a run whose budget holds a disk when it was given no filesystem of its own, or
/// when its workspace, home or a home's copy lies outside it, where its writes would go
/// unbounded.
fn on_its_disk(plan: &Plan) -> Result<(), SandboxError> {
    if plan.disk_bytes.is_none() {
        return Ok(());
    }
    let Some(mount) = &plan.disk else {
        return Err(SandboxError::Disk(
            "was not given to the run, which holds its disk budget".into(),
        ));
    };
    let resolved = fs::canonicalize(mount).unwrap_or_else(|_| mount.clone());
    let within = |p: &Path| {
        [mount, &resolved]
            .iter()
            .any(|m| p.starts_with(m) && p != *m)
    };
    for b in &plan.binds {
        if matches!(
            b.field,
            "workspace" | "program.homes" | "program.home" | "tmp"
        ) {
            let host = b.copy.as_ref().unwrap_or(&b.host);
            if !within(host) {
                return Err(path_err(
                    b.field,
                    host,
                    format!(
                        "is not on the run's own filesystem ({}), which holds its disk budget",
                        mount.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Makes the run's `/tmp` afresh on its own filesystem, when it has one.
fn make_tmp(plan: &Plan) -> Result<(), SandboxError> {
    for b in plan.binds.iter().filter(|b| b.field == "tmp") {
        let failed = |e: io::Error| path_err("tmp", &b.host, format!("cannot be made: {e}"));
        match fs::remove_dir_all(&b.host) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(failed(e)),
            _ => {}
        }
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&b.host)
            .map_err(failed)?;
    }
    Ok(())
}

/// Makes each home's fresh copy: the directory's tree copied anew (files, directories and
/// symbolic links as links, never followed; nothing else), so what one run writes there never
/// reaches the next.
fn make_home_copies(plan: &Plan) -> Result<(), SandboxError> {
    for b in &plan.binds {
        let Some(copy) = &b.copy else { continue };
        let failed = |e: io::Error| {
            path_err(
                b.field,
                &b.inside,
                format!("cannot be copied to {}: {e}", copy.display()),
            )
        };
        if let Some(parent) = copy.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o711)
                .create(parent)
                .map_err(failed)?;
            fs::set_permissions(parent, fs::Permissions::from_mode(0o711)).map_err(failed)?;
        }
        match fs::remove_dir_all(copy) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(failed(e)),
            _ => {}
        }
        copy_tree(&b.host, copy).map_err(failed)?;
        fs::set_permissions(copy, fs::Permissions::from_mode(0o700)).map_err(failed)?;
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    fs::DirBuilder::new().mode(0o700).create(to)?;
    copy_contents(from, to)
}

/// Copies what the directory `from` holds into the directory `to`: files,
/// directories and symbolic links as links, never followed; nothing else.
/// A name already in `to` is refused.
pub fn copy_contents(from: &Path, to: &Path) -> io::Result<()> {
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&src)?, &dst)?;
        } else if kind.is_file() {
            let mode = entry.metadata()?.permissions().mode() & 0o700;
            let mut input = fs::OpenOptions::new()
                .read(true)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(&src)?;
            let mut output = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode | 0o600)
                .open(&dst)?;
            io::copy(&mut input, &mut output)?;
        }
    }
    Ok(())
}
