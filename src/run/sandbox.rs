//! A run's sandbox: the bubblewrap plan for one program, and the supervisor holding its budget.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::fcntl::{OFlag, open};
use nix::sys::signal::{Signal, kill};
use nix::sys::stat::Mode;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Gid, Pid, Uid, User};
use serde::{Serialize, Serializer};

use super::SandboxError;
use super::account::{Need, RunAccount, account_can, become_account, hand_over};
use super::budget::{BudgetLimits, Cgroup, CgroupPlan, Limit};

/// The `sandbox` fields of a record: what of the host a run may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SandboxFields {
    /// Whether the run shares the host's network; without it the run has only its own loopback.
    pub network: bool,
    /// Host paths visible read-only at the same path.
    pub read_only: Vec<PathBuf>,
    /// Host paths visible read-write at the same path.
    pub read_write: Vec<PathBuf>,
}

/// The runner's program: what to execute and what it needs of its own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Program {
    /// The command line; the first word is absolute or found on the host's PATH.
    pub command: Vec<String>,
    /// Environment variables the program gets besides PATH, HOME and USER.
    #[serde(serialize_with = "serialize_redacted")]
    pub env: BTreeMap<String, String>,
    /// Directories the program keeps its own state in, bound read-write at the same path
    /// (from a fresh copy of each, when the plan is given [`Plan::copy_homes`]).
    pub homes: Vec<PathBuf>,
}

/// Host paths never visible inside a run: the served repository, the node's root, the node account's home.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Forbidden {
    /// The forbidden paths, absolute.
    pub paths: Vec<PathBuf>,
}

/// Everything needed to start one run, fixed before it starts; serializable for a dry run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The run's name, which also names its cgroup.
    pub run_name: String,
    /// The bubblewrap executable.
    pub bwrap: PathBuf,
    /// Bubblewrap's arguments, ending with `--` and the program's command line.
    pub args: Vec<String>,
    /// The whole environment inside (bubblewrap adds only PWD, the workspace); values other than PATH, HOME and USER are hidden when serialized.
    #[serde(serialize_with = "serialize_redacted")]
    pub env: BTreeMap<String, String>,
    /// The run's cgroup, when the budget has a field other than `wall`.
    pub cgroup: Option<CgroupPlan>,
    /// Wall-clock time the supervisor allows.
    #[serde(serialize_with = "super::serialize_secs")]
    pub wall: Duration,
    /// The run's workspace, read-write and the working directory inside.
    pub workspace: PathBuf,
    /// Whether the run shares the host's network.
    pub network: bool,
    /// The host account the run's processes run as ([`Plan::run_as`]); a run is never started
    /// as root without one.
    pub account: Option<RunAccount>,
    /// The host paths bound inside besides the system directories, each with the field naming it.
    pub binds: Vec<Bind>,
}

/// A host path bound inside a run at the path its field named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bind {
    /// The field naming it: `workspace`, `sandbox.read_only`, `sandbox.read_write`, `program.command` or `program.homes`.
    pub field: &'static str,
    /// The path on the host, resolved.
    pub host: PathBuf,
    /// The path inside, as named.
    pub inside: PathBuf,
    /// Whether it is bound read-write.
    pub writable: bool,
    /// For a home, the fresh copy bound in its stead, made when the run starts.
    pub copy: Option<PathBuf>,
}

const SHOWN_ENV: [&str; 3] = ["PATH", "HOME", "USER"];

fn serialize_redacted<S: Serializer>(
    env: &BTreeMap<String, String>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let shown: BTreeMap<&str, &str> = env
        .iter()
        .map(|(k, v)| {
            let v = if SHOWN_ENV.contains(&k.as_str()) {
                v.as_str()
            } else {
                "<hidden>"
            };
            (k.as_str(), v)
        })
        .collect();
    shown.serialize(s)
}

const SYSTEM_DIRS: [&str; 8] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];

const INNER_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// The bubblewrap executable of this host, if installed.
pub(crate) fn find_bwrap() -> Option<PathBuf> {
    let usual = Path::new("/usr/bin/bwrap");
    if is_executable(usual) {
        return Some(usual.to_path_buf());
    }
    search_path("bwrap")
}

fn is_executable(p: &Path) -> bool {
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn search_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn path_err(field: &'static str, path: &Path, reason: impl Into<String>) -> SandboxError {
    SandboxError::Path {
        field,
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn clean(field: &'static str, p: &Path) -> Result<PathBuf, SandboxError> {
    if !p.is_absolute() {
        return Err(path_err(field, p, "is relative"));
    }
    if p.to_str().is_none() {
        return Err(path_err(field, p, "is not valid UTF-8"));
    }
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::RootDir => out.push("/"),
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir => return Err(path_err(field, p, "contains ..")),
            Component::Prefix(_) => return Err(path_err(field, p, "is not a unix path")),
        }
    }
    Ok(out)
}

fn real(field: &'static str, p: &Path) -> Result<PathBuf, SandboxError> {
    let r =
        fs::canonicalize(p).map_err(|e| path_err(field, p, format!("cannot be resolved: {e}")))?;
    if r.to_str().is_none() {
        return Err(path_err(
            field,
            p,
            "resolves to a path that is not valid UTF-8",
        ));
    }
    Ok(r)
}

fn text(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn reaches(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// A host path as named in a field and as it resolves on the host.
struct Named {
    field: &'static str,
    named: PathBuf,
    real: PathBuf,
}

impl Named {
    fn new(field: &'static str, p: &Path) -> Result<Named, SandboxError> {
        Ok(Named {
            field,
            named: clean(field, p)?,
            real: real(field, p)?,
        })
    }

    fn forms(&self) -> [&Path; 2] {
        [&self.named, &self.real]
    }

    fn refuse_reaching(&self, forbidden: &[PathBuf]) -> Result<(), SandboxError> {
        self.refuse_if(forbidden, reaches)
    }

    fn refuse_containing(&self, forbidden: &[PathBuf]) -> Result<(), SandboxError> {
        self.refuse_if(forbidden, |mine, f| f.starts_with(mine))
    }

    fn refuse_if(
        &self,
        forbidden: &[PathBuf],
        test: impl Fn(&Path, &Path) -> bool,
    ) -> Result<(), SandboxError> {
        for f in forbidden {
            if self.forms().iter().any(|mine| test(mine, f)) {
                return Err(SandboxError::Forbidden {
                    field: self.field,
                    path: self.named.clone(),
                    forbidden: f.clone(),
                });
            }
        }
        Ok(())
    }
}

fn forbidden_forms(forbidden: &Forbidden) -> Result<Vec<PathBuf>, SandboxError> {
    let mut forms = Vec::new();
    for p in &forbidden.paths {
        let named = clean("forbidden", p)?;
        if let Ok(r) = fs::canonicalize(p) {
            forms.push(r);
        }
        forms.push(named);
    }
    forms.sort();
    forms.dedup();
    Ok(forms)
}

fn check_run_name(name: &str) -> Result<(), SandboxError> {
    let reason = if name.is_empty() {
        Some("is empty")
    } else if name.len() > 200 {
        Some("is longer than 200 bytes")
    } else if name.starts_with('.') {
        Some("starts with a dot")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        Some("may hold only letters, digits, '-', '_' and '.'")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(SandboxError::RunName {
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// The program's executable as run inside, and the host directories it needs.
struct Resolved {
    exe: PathBuf,
    dirs: Vec<PathBuf>,
}

fn resolve_program(program: &Program) -> Result<Resolved, SandboxError> {
    let field = "program.command";
    let first = program
        .command
        .first()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| SandboxError::Command("is empty".into()))?;
    let found = if first.contains('/') {
        PathBuf::from(first)
    } else {
        search_path(first)
            .ok_or_else(|| SandboxError::Command(format!("{first} not found on PATH")))?
    };
    let found = clean(field, &found)?;
    if !is_executable(&found) {
        return Err(path_err(field, &found, "is not an executable file"));
    }
    let (Some(parent), Some(file)) = (found.parent(), found.file_name()) else {
        return Err(path_err(field, &found, "is not an executable file"));
    };
    let dir = real(field, parent)?;
    let exe = dir.join(file);
    let mut dirs = vec![dir];
    if let Some(target_dir) = real(field, &exe)?.parent()
        && !dirs.iter().any(|d| d == target_dir)
    {
        dirs.push(target_dir.to_path_buf());
    }
    Ok(Resolved { exe, dirs })
}

fn host_user() -> String {
    User::from_uid(Uid::current())
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| "ocx".to_string())
}

fn push(args: &mut Vec<String>, words: &[&str]) {
    args.extend(words.iter().map(|w| w.to_string()));
}

fn system_binds(
    args: &mut Vec<String>,
    forbidden: &[PathBuf],
) -> Result<Vec<PathBuf>, SandboxError> {
    let mut bound = Vec::new();
    for dir in SYSTEM_DIRS {
        let p = Path::new(dir);
        let Ok(meta) = fs::symlink_metadata(p) else {
            continue;
        };
        let Ok(resolved) = fs::canonicalize(p) else {
            continue;
        };
        if let Some(f) = forbidden
            .iter()
            .find(|f| resolved.starts_with(f) || p.starts_with(f))
        {
            return Err(path_err(
                "forbidden",
                f,
                format!("holds the system directory {dir}, which every run needs"),
            ));
        }
        let target = fs::read_link(p).ok();
        match target {
            Some(t) if meta.file_type().is_symlink() && resolved.starts_with("/usr") => {
                push(args, &["--symlink", &text(&t), dir]);
            }
            _ => {
                push(args, &["--ro-bind", &text(&resolved), dir]);
                bound.push(resolved);
            }
        }
    }
    Ok(bound)
}

/// Checks every field against the forbidden paths and this host, and fixes the run's bubblewrap command.
///
/// Refuses, naming the field: a relative path, one holding `..`, or one that does not exist;
/// a `sandbox.read_only`, `sandbox.read_write` or `program.homes` path that is, is inside, or
/// holds a forbidden path; a workspace or program directory that is or holds one (either may lie
/// inside one, as a workspace under the node's root does, and nothing else of it becomes visible);
/// a budget field no cgroup controller of this host offers. Forbidden paths inside the system
/// directories bound read-only are covered by an empty directory or file.
///
/// Nothing on the host changes until [`spawn`]. A run started by root needs an account of its
/// own, given by [`Plan::run_as`].
pub fn plan(
    run_name: &str,
    workspace: &Path,
    sandbox: &SandboxFields,
    budget: &BudgetLimits,
    program: &Program,
    forbidden: &Forbidden,
) -> Result<Plan, SandboxError> {
    check_run_name(run_name)?;
    let forbidden = forbidden_forms(forbidden)?;

    let ws = Named::new("workspace", workspace)?;
    if !ws.real.is_dir() {
        return Err(path_err("workspace", workspace, "is not a directory"));
    }
    ws.refuse_containing(&forbidden)?;

    let mut binds: Vec<(&str, Named)> = Vec::new();
    for p in &sandbox.read_only {
        let n = Named::new("sandbox.read_only", p)?;
        n.refuse_reaching(&forbidden)?;
        binds.push(("--ro-bind", n));
    }
    for p in &sandbox.read_write {
        let n = Named::new("sandbox.read_write", p)?;
        n.refuse_reaching(&forbidden)?;
        binds.push(("--bind", n));
    }
    let mut system_args = Vec::new();
    let system = system_binds(&mut system_args, &forbidden)?;
    let resolved = resolve_program(program)?;
    for d in &resolved.dirs {
        let n = Named::new("program.command", d)?;
        n.refuse_containing(&forbidden)?;
        if !system.iter().any(|s| n.real.starts_with(s)) {
            binds.push(("--ro-bind", n));
        }
    }
    for p in &program.homes {
        let n = Named::new("program.homes", p)?;
        if !n.real.is_dir() {
            return Err(path_err("program.homes", p, "is not a directory"));
        }
        n.refuse_reaching(&forbidden)?;
        binds.push(("--bind", n));
    }
    for key in program.env.keys() {
        if key.is_empty() || key.contains('=') || key.contains('\0') {
            return Err(SandboxError::Env(format!("{key:?} is not a variable name")));
        }
    }
    if let Some(v) = program.env.values().find(|v| v.contains('\0')) {
        return Err(SandboxError::Env(format!(
            "a value holds a NUL byte ({} bytes)",
            v.len()
        )));
    }
    let cgroup = CgroupPlan::for_run(run_name, budget)?;
    let bwrap = find_bwrap().ok_or(SandboxError::BwrapMissing)?;

    let mut args = Vec::new();
    push(
        &mut args,
        &[
            "--new-session",
            "--die-with-parent",
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
        ],
    );
    if sandbox.network {
        push(&mut args, &["--share-net"]);
    }
    push(&mut args, &["--cap-drop", "ALL"]);
    args.append(&mut system_args);
    push(
        &mut args,
        &["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"],
    );
    if sandbox.network
        && let Ok(conf) = fs::canonicalize("/etc/resolv.conf")
        && !system.iter().any(|s| conf.starts_with(s))
        && !forbidden.iter().any(|f| reaches(&conf, f))
    {
        let conf = text(&conf);
        push(&mut args, &["--ro-bind-try", &conf, &conf]);
    }
    binds.insert(0, ("--bind", ws));
    binds.sort_by_key(|(_, n)| n.named.components().count());
    for (how, n) in &binds {
        push(&mut args, &[how, &text(&n.real), &text(&n.named)]);
    }
    for f in &forbidden {
        if !system.iter().any(|s| f.starts_with(s)) {
            continue;
        }
        match fs::metadata(f) {
            Ok(m) if m.is_dir() => push(&mut args, &["--tmpfs", &text(f)]),
            Ok(_) => push(&mut args, &["--ro-bind", "/dev/null", &text(f)]),
            Err(_) => {}
        }
    }
    let workspace_named = binds
        .iter()
        .find(|(_, n)| n.field == "workspace")
        .map(|(_, n)| n.named.clone())
        .unwrap_or_default();
    push(&mut args, &["--chdir", &text(&workspace_named), "--"]);
    args.push(text(&resolved.exe));
    args.extend(program.command.iter().skip(1).cloned());

    let mut env = program.env.clone();
    let mut path_dirs: Vec<String> = resolved.dirs.iter().map(|d| text(d)).collect();
    path_dirs.extend(
        INNER_PATH
            .split(':')
            .filter(|d| !resolved.dirs.iter().any(|r| r == Path::new(d)))
            .map(String::from),
    );
    env.insert("PATH".into(), path_dirs.join(":"));
    let home = binds
        .iter()
        .find(|(_, n)| n.field == "program.homes")
        .map(|(_, n)| &n.named)
        .unwrap_or(&workspace_named);
    env.insert("HOME".into(), text(home));
    env.insert("USER".into(), host_user());
    let binds = binds
        .into_iter()
        .map(|(how, n)| Bind {
            field: n.field,
            host: n.real,
            inside: n.named,
            writable: how == "--bind",
            copy: None,
        })
        .collect();

    Ok(Plan {
        run_name: run_name.to_string(),
        bwrap,
        args,
        env,
        cgroup,
        wall: budget.wall,
        workspace: workspace_named,
        network: sandbox.network,
        account: None,
        binds,
    })
}

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
}

#[derive(Debug)]
struct Shared {
    pid: i32,
    reaped: Mutex<bool>,
    stopped: AtomicBool,
    cgroup: Option<Arc<Cgroup>>,
}

impl Shared {
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
    /// Ends every process of the run; its [`Ended`] then says `stopped`.
    pub fn kill(&self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.shared.kill_all();
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

const TICK: Duration = Duration::from_millis(50);

fn supervise(
    plan: Plan,
    cgroup: Option<Arc<Cgroup>>,
    stdio: [Stdio; 3],
    started: mpsc::Sender<Result<Started, SandboxError>>,
) -> Result<Ended, SandboxError> {
    let [stdin, stdout, stderr] = stdio;
    let mut cmd = Command::new(&plan.bwrap);
    cmd.args(&plan.args)
        .env_clear()
        .envs(&plan.env)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr);
    let files = cgroup
        .as_ref()
        .map(|cg| cg.procs_files())
        .unwrap_or_default();
    let ids = plan
        .account
        .as_ref()
        .map(|a| (Uid::from_raw(a.uid), Gid::from_raw(a.gid)));
    if !files.is_empty() || ids.is_some() {
        // SAFETY: the hook only opens and writes files and sets its groups, gid and uid, all
        // async-signal-safe, and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                join_cgroups(&files)?;
                if let Some((uid, gid)) = ids {
                    become_account(uid, gid)?;
                }
                Ok(())
            });
        }
    }
    let start = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            if let Some(cg) = &cgroup {
                cg.remove();
            }
            let _ = started.send(Err(SandboxError::Spawn(e)));
            return Err(SandboxError::Supervisor("bubblewrap did not start".into()));
        }
    };
    let shared = Arc::new(Shared {
        pid: child.id() as i32,
        reaped: Mutex::new(false),
        stopped: AtomicBool::new(false),
        cgroup: cgroup.clone(),
    });
    let _ = started.send(Ok(Started {
        shared: shared.clone(),
        stdin: child.stdin.take(),
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
    }));
    drop(child);

    let mut limit = None;
    let mut tick = Duration::from_millis(5);
    let status = loop {
        match shared.try_reap() {
            Ok(Some(done)) => break done,
            Ok(None) => {}
            Err(e) => {
                shared.kill_all();
                if let Some(cg) = &cgroup {
                    cg.remove();
                }
                return Err(SandboxError::Supervisor(format!(
                    "cannot wait for bubblewrap: {e}"
                )));
            }
        }
        let stopped = shared.stopped.load(Ordering::SeqCst);
        if limit.is_none() && !stopped {
            if start.elapsed() >= plan.wall {
                limit = Some(Limit::Wall);
            } else if let Some(cg) = &cgroup {
                limit = cg.limit_hit();
            }
        }
        if limit.is_some() || stopped {
            shared.kill_all();
        }
        let left = plan.wall.saturating_sub(start.elapsed());
        thread::sleep(tick.min(left.max(Duration::from_millis(1))));
        tick = (tick * 2).min(TICK);
    };
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
    })
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
    make_home_copies(plan)?;
    if let Some(account) = &plan.account {
        prepare_for(plan, account)?;
    }
    let cgroup = plan
        .cgroup
        .as_ref()
        .map(Cgroup::create)
        .transpose()?
        .map(Arc::new);
    let (tx, rx) = mpsc::channel();
    let owned = plan.clone();
    let handle = thread::Builder::new()
        .name(format!("ocx-run-{}", plan.run_name))
        .spawn(move || supervise(owned, cgroup, [stdin, stdout, stderr], tx))
        .map_err(SandboxError::Spawn)?;
    match rx.recv() {
        Ok(Ok(s)) => Ok(Running {
            pid: s.shared.pid as u32,
            stdin: s.stdin,
            stdout: s.stdout,
            stderr: s.stderr,
            killer: Killer { shared: s.shared },
            supervisor: Some(handle),
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

fn prepare_for(plan: &Plan, account: &RunAccount) -> Result<(), SandboxError> {
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
    let asked: Vec<(&Path, Need)> = checks
        .iter()
        .map(|(_, p, need)| match need {
            Need::Reach => (p.parent().unwrap_or(p), *need),
            _ => (*p, *need),
        })
        .collect();
    let allowed = account_can(account, &asked).map_err(|reason| SandboxError::Account {
        name: account.name.clone(),
        reason,
    })?;
    if let Some(((field, path, need), _)) = checks.iter().zip(&allowed).find(|(_, ok)| !**ok) {
        let whose = format!("the run account {} (uid {})", account.name, account.uid);
        let reason = match need {
            Need::Read => format!("is not readable by {whose}"),
            Need::Write => format!(
                "is not readable and writable by {whose}; grant it that access, as runs never take it over"
            ),
            Need::Execute => format!("is not executable by {whose}"),
            Need::Reach => {
                format!("cannot be reached by {whose}: a directory above it is closed to it")
            }
        };
        return Err(path_err(field, path, reason));
    }
    for b in &plan.binds {
        if matches!(b.field, "workspace" | "program.homes") {
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

impl Plan {
    /// Runs the program as `account`, which becomes the owner of the workspace and of the
    /// homes' copies (or the homes) when the run starts; `USER` inside names it.
    pub fn run_as(&mut self, account: RunAccount) {
        self.env.insert("USER".into(), account.name.clone());
        self.account = Some(account);
    }

    /// Binds each of the program's homes from a fresh copy made under `dir` when the run
    /// starts (`dir/home-N`, the Nth home), so nothing a run writes in a home reaches the
    /// next run; the host's own home is only read.
    pub fn copy_homes(&mut self, dir: &Path) {
        let homes = self.binds.iter_mut().filter(|b| b.field == "program.homes");
        for (n, b) in homes.enumerate() {
            let copy = dir.join(format!("home-{n}"));
            let (host, inside) = (text(&b.host), text(&b.inside));
            if let Some(at) = self
                .args
                .windows(3)
                .position(|w| w[0] == "--bind" && w[1] == host && w[2] == inside)
            {
                self.args[at + 1] = text(&copy);
            }
            b.copy = Some(copy);
        }
    }

    /// The command line the program runs inside, as given to bubblewrap after `--`.
    pub fn command(&self) -> &[String] {
        let at = self
            .args
            .iter()
            .position(|a| a == "--")
            .map_or(0, |i| i + 1);
        &self.args[at..]
    }
}
