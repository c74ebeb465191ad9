//! A run's plan: the paths it may reach, checked and resolved, and bubblewrap's arguments.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use nix::unistd::{Uid, User};
use serde::{Serialize, Serializer};

use crate::run::SandboxError;
use crate::run::account::RunAccount;
use crate::run::budget::{BudgetLimits, CgroupPlan, Disk};

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
    /// The run's own home: a host directory made fresh for this run, bound read-write at
    /// [`RUN_HOME`] and given as `HOME`, so `HOME` is never the workspace nor a home shared
    /// between runs. Without it `HOME` is the first of `homes`, else the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<PathBuf>,
}

/// Where the run's own home ([`Program::home`]) is inside its sandbox.
pub const RUN_HOME: &str = "/home/ocx-run";

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
    #[serde(serialize_with = "crate::run::serialize_secs")]
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
    /// The run's disk budget in bytes, when its budget holds one: it then starts only once
    /// given a filesystem of its own ([`Plan::on_disk`]) holding all it may write.
    pub disk_bytes: Option<u64>,
    /// Where the run's own filesystem is mounted, once given ([`Plan::on_disk`]).
    pub disk: Option<PathBuf>,
    /// Whether the program's standard input is a terminal that becomes its
    /// controlling terminal, in a session of its own ([`Plan::on_terminal`]).
    pub terminal: bool,
    /// Where OCX mounts, for bubblewrap alone, each read-only path named by the node's
    /// administrator that the run account could read but cannot reach ([`Plan::reach_closed`]);
    /// none for a run from a record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reach: Option<PathBuf>,
}

/// A host path bound inside a run at the path its field named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bind {
    /// The field naming it: `workspace`, `sandbox.read_only`, `sandbox.read_write`, `program.command`, `program.homes`, `program.home`, or `tmp` (the run's `/tmp` on its own filesystem).
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
    on_path("bwrap")
}

fn is_executable(p: &Path) -> bool {
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The first executable file named `name` in an absolute directory of
/// this process's `PATH`: how OCX finds the programs it is told by name.
#[allow(clippy::disallowed_methods)] // PATH is read here alone, as docs/architecture.md says
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

pub(super) fn path_err(
    field: &'static str,
    path: &Path,
    reason: impl Into<String>,
) -> SandboxError {
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

pub(super) fn text(p: &Path) -> String {
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
        on_path(first).ok_or_else(|| SandboxError::Command(format!("{first} not found on PATH")))?
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

/// The program's directories (those outside the `system` directories,
/// read-only), its homes and its home added to `binds`; any of them
/// reaching a forbidden path refused, naming its field.
fn program_binds(
    program: &Program,
    resolved: &Resolved,
    system: &[PathBuf],
    forbidden: &[PathBuf],
    binds: &mut Vec<(&str, Named)>,
) -> Result<(), SandboxError> {
    for d in &resolved.dirs {
        let n = Named::new("program.command", d)?;
        n.refuse_containing(forbidden)?;
        if !system.iter().any(|s| n.real.starts_with(s)) {
            binds.push(("--ro-bind", n));
        }
    }
    for p in &program.homes {
        let n = Named::new("program.homes", p)?;
        if !n.real.is_dir() {
            return Err(path_err("program.homes", p, "is not a directory"));
        }
        n.refuse_reaching(forbidden)?;
        binds.push(("--bind", n));
    }
    if let Some(h) = &program.home {
        if !h.is_dir() {
            return Err(path_err("program.home", h, "is not a directory"));
        }
        binds.push((
            "--bind",
            Named {
                field: "program.home",
                named: PathBuf::from(RUN_HOME),
                real: real("program.home", h)?,
            },
        ));
    }
    Ok(())
}

/// The program's `env` refused unless each name is a variable's and no
/// value holds a NUL byte.
fn check_env(program: &Program) -> Result<(), SandboxError> {
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
    Ok(())
}

/// The environment inside: the program's `env`, then `PATH` (the
/// program's own directories before the system's), `HOME` (its home, else
/// its first home, else the workspace) and `USER` set over it.
fn inner_env(
    program: &Program,
    resolved: &Resolved,
    binds: &[(&str, Named)],
    workspace_named: &Path,
) -> BTreeMap<String, String> {
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
        .find(|(_, n)| n.field == "program.home")
        .or_else(|| binds.iter().find(|(_, n)| n.field == "program.homes"))
        .map(|(_, n)| &n.named)
        .map(PathBuf::as_path)
        .unwrap_or(workspace_named);
    env.insert("HOME".into(), text(home));
    env.insert("USER".into(), host_user());
    env
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
    program_binds(program, &resolved, &system, &forbidden, &mut binds)?;
    check_env(program)?;
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

    let env = inner_env(program, &resolved, &binds, &workspace_named);
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
        disk_bytes: budget.disk_bytes,
        disk: None,
        terminal: false,
        reach: None,
    })
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

    /// Holds the run to `disk`, its own filesystem: its `/tmp` is a fresh directory there
    /// (`tmp`, made when the run starts) rather than a tmpfs, and the run starts only when its
    /// workspace, home and homes' copies are there too, so the kernel holds all it writes to
    /// the filesystem's size, and the supervisor ends it `disk` once it is full.
    pub fn on_disk(&mut self, disk: &Disk) {
        let mount = disk.path().to_path_buf();
        let tmp = mount.join("tmp");
        if let Some(at) = self
            .args
            .windows(2)
            .position(|w| w[0] == "--tmpfs" && w[1] == "/tmp")
        {
            self.args.splice(
                at..at + 2,
                ["--bind".to_string(), text(&tmp), "/tmp".to_string()],
            );
        }
        self.binds.retain(|b| b.field != "tmp");
        self.binds.push(Bind {
            field: "tmp",
            host: tmp,
            inside: PathBuf::from("/tmp"),
            writable: true,
            copy: None,
        });
        self.disk = Some(mount);
    }

    /// Gives the program the terminal its standard input is as its
    /// controlling terminal: bubblewrap starts in a session of its own made
    /// for it (rather than bubblewrap's `--new-session`, which would take
    /// the terminal away), so the terminal's window signals the program.
    /// The terminal is the run's own, which nothing outside reads as
    /// input: what the program pushes into it reaches the program alone.
    pub fn on_terminal(&mut self) {
        self.args.retain(|a| a != "--new-session");
        self.terminal = true;
    }

    /// Lets a run as an account of its own read a `sandbox.read_only` or `program.command`
    /// path that a directory above it closes to the account, when the account may read (or
    /// execute) the path itself, as a toolchain under root's home (`/root`, 0700) is: OCX, as
    /// root, binds each such path read-only at `dir/N` in a mount namespace of bubblewrap's
    /// own (nothing is mounted on the host), and bubblewrap binds it from there. `dir` must
    /// lie where the account reaches. Only for a plan whose paths are the node
    /// administrator's own (`stage`'s, from the release root's `release.json`): a run from a
    /// record reads only what its account reaches.
    pub fn reach_closed(&mut self, dir: &Path) {
        self.reach = Some(dir.to_path_buf());
    }

    /// Puts `words` before the program's command line inside (a program that becomes the
    /// run's program, as the forwarder of a run with `sandbox.hosts` does).
    pub fn before_program(&mut self, words: &[String]) {
        let at = self
            .args
            .iter()
            .position(|a| a == "--")
            .map_or(self.args.len(), |i| i + 1);
        self.args.splice(at..at, words.iter().cloned());
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
