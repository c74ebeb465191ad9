//! The node: the host serving a repository, which acts on the records
//! addressed to it (C3). Fossil's after-receive hook pokes it; it also
//! wakes when the repository file changes and when OCX writes on it. Each
//! wake reads the truth from the repository (`wake`); each open session
//! has a watcher process of its own (`crate::entry::watch`).

pub mod config;
pub mod credentials;
pub mod daemon;
pub mod inbox;
pub mod log;
pub mod machine;
pub mod remote;
pub mod respond;
pub mod run_user;
pub mod runner;
pub mod site;
pub mod wake;

use crate::fossil::{FossilError, Repository};
use crate::protocol::kinds::{self, Problem, Record};
use crate::run::{BudgetLimits, SandboxFields};
use config::NodeConfig;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The word OCX's after-receive hook command carries, by which a node's
/// repository (and its root) is known.
pub const HOOK_MARK: &str = "ocx-node-hook";

/// What can go wrong on the node.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The root holds no node configuration.
    #[error("this is no node: its root holds no node.json (run `ocx hook install`)")]
    NotANode,
    /// A Fossil operation failed.
    #[error(transparent)]
    Fossil(#[from] FossilError),
    /// The node's host uids could not be claimed.
    #[error(transparent)]
    Uids(#[from] crate::run::uids::UidError),
    /// A file under the node's root could not be used.
    #[error("the node's files: {0}")]
    Io(#[from] std::io::Error),
    /// An agent machine's server could not be read or written.
    #[error(transparent)]
    Machine(#[from] machine::MachineError),
    /// An agent machine's wake stopped at an arrival until the server answers.
    #[error("{0}")]
    Away(String),
}

impl From<machine::NodeMachineError> for NodeError {
    fn from(e: machine::NodeMachineError) -> NodeError {
        match e {
            machine::NodeMachineError::Fossil(e) => NodeError::Fossil(e),
            machine::NodeMachineError::Machine(e) => NodeError::Machine(e),
            machine::NodeMachineError::Io(e) => NodeError::Io(e),
        }
    }
}

/// Whether OCX's after-receive hook is installed in `repo`, which makes it
/// a node. Hooks are never cloned, so only the served repository has it.
pub fn is_node(repo: &Repository) -> Result<bool, FossilError> {
    Ok(root_of(repo)?.is_some())
}

/// The node's root, as OCX's hook command in `repo` names it.
pub fn root_of(repo: &Repository) -> Result<Option<PathBuf>, FossilError> {
    Ok(repo
        .after_receive_hooks()?
        .iter()
        .find(|c| c.contains(HOOK_MARK))
        .and_then(|c| root_in(c)))
}

/// The root of the agent machine's node working in clone `repo`, when it
/// is one: beside it, its configuration naming it and a credentials file.
pub fn machine_root(repo: &Repository) -> Option<PathBuf> {
    let root = config::default_root(repo.path());
    let cfg = NodeConfig::load(&root)?;
    let same = cfg.repository.canonicalize().ok()? == repo.path().canonicalize().ok()?;
    (cfg.machine.is_some() && same).then_some(root)
}

/// The root a hook command names after `hook-poke`, read as the shell reads it.
fn root_in(command: &str) -> Option<PathBuf> {
    let words = shlex::split(command)?;
    let at = words.iter().position(|w| w == "hook-poke")?;
    words.get(at + 1).map(PathBuf::from)
}

/// The hook command for a node: the program pokes the node at `root`.
/// Fossil runs it through `/bin/sh`, so each path is quoted as the shell
/// reads it back (a path holding `'` or a space included), and
/// [`root_of`] reads it with the same rules.
pub fn hook_command(ocx: &Path, root: &Path) -> String {
    let quote = |p: &Path| {
        shlex::try_quote(&p.to_string_lossy())
            .map(|q| q.into_owned())
            .unwrap_or_else(|_| "''".into())
    };
    format!("{} hook-poke {} # {HOOK_MARK}", quote(ocx), quote(root))
}

/// The restrictions (C6) this node holds runs to: a no-password run's
/// tools run in its watcher, outside its sandbox, as its user; `push` and
/// `save` hold it to its branch, `post` to its place.
pub fn restrictions_enforced() -> Vec<String> {
    ["no_password", "branch", "own_thread"]
        .map(String::from)
        .to_vec()
}

/// The sandbox fields and budget limits a record asks for.
pub fn limits(record: &Record) -> (SandboxFields, BudgetLimits) {
    let sandbox = SandboxFields {
        network: record.sandbox.network,
        read_only: record.sandbox.read_only.iter().map(PathBuf::from).collect(),
        read_write: record
            .sandbox
            .read_write
            .iter()
            .map(PathBuf::from)
            .collect(),
    };
    let budget = BudgetLimits {
        wall: Duration::from_secs(kinds::wall_seconds(&record.budget.wall).unwrap_or(1)),
        cpu_seconds: record.budget.cpu,
        memory_bytes: record.budget.memory.as_ref().and_then(kinds::memory_bytes),
        processes: record.budget.processes,
        disk_bytes: None,
    };
    (sandbox, budget)
}

/// Refuses, naming `sandbox.read_only` or `sandbox.read_write`, a host
/// path that a record from a sender without admin or setup would bind
/// and that `bindable` (the node's configuration's list, none unless set)
/// does not hold: the path as the host resolves it, every link followed,
/// must be a listed path (resolved alike) or under one. An
/// administrator's record binds what it names.
pub fn check_bindable(
    record: &Record,
    bindable: &[PathBuf],
    sender_is_admin: bool,
) -> Result<(), Problem> {
    if sender_is_admin {
        return Ok(());
    }
    let listed: Vec<PathBuf> = bindable
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    for (name, paths) in [
        ("read_only", &record.sandbox.read_only),
        ("read_write", &record.sandbox.read_write),
    ] {
        for p in paths {
            let shown = kinds::clip(p);
            let reason = match Path::new(p).canonicalize() {
                Err(_) => format!("{shown} is no path on this node's host"),
                Ok(real) if listed.iter().any(|l| real.starts_with(l)) => continue,
                Ok(real) if listed.is_empty() => format!(
                    "{shown} ({}) is a host path, and this node lets a sender without admin or setup bind none (`bindable` in its node.json)",
                    real.display()
                ),
                Ok(real) => format!(
                    "{shown} ({}) is not among the host paths this node lets a sender without admin or setup bind: {}",
                    real.display(),
                    bindable
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            return Err(Problem::new(format!("sandbox.{name}"), reason));
        }
    }
    Ok(())
}

/// Whether this node can hold everything `record` asks, naming the first
/// field it cannot (C3, C6, C7): the runner, each restriction, each
/// sandbox field and budget limit, each limit within the node's ceiling.
pub fn check_enforceable(
    repo: &Repository,
    record: &Record,
) -> Result<Result<(), Problem>, FossilError> {
    let runner_found =
        record.runner == runner::COMMAND || runner::page(repo, &record.runner)?.is_some();
    let ceiling = root_of(repo)?
        .and_then(|root| NodeConfig::load(&root))
        .map(|c| c.ceiling)
        .unwrap_or_default();
    Ok(enforceable(
        record,
        runner_found,
        &restrictions_enforced(),
        &ceiling,
    ))
}

/// [`check_enforceable`] once the runner is looked for: whether its page
/// counts (`runner_found`), the restrictions this node enforces and its
/// ceiling.
pub fn enforceable(
    record: &Record,
    runner_found: bool,
    enforced: &[String],
    ceiling: &crate::run::Ceiling,
) -> Result<(), Problem> {
    if !runner_found {
        return Err(Problem {
            field: "runner".into(),
            reason: format!(
                "this node offers no runner {:?} (no counting wiki page sandbox/{})",
                record.runner, record.runner
            ),
        });
    }
    if let Some(r) = record
        .restrict
        .asked()
        .into_iter()
        .find(|r| !enforced.iter().any(|e| e == r))
    {
        return Err(Problem {
            field: format!("restrict.{r}"),
            reason: "this node does not enforce it".into(),
        });
    }
    let (sandbox, budget) = limits(record);
    let host = crate::run::preflight();
    let held = ceiling
        .hold(&budget, host.memory.available, host.processes.available)
        .and_then(|budget| host.check(&sandbox, &budget));
    if let Err(u) = held {
        return Err(Problem {
            field: u.field.to_string(),
            reason: u.reason,
        });
    }
    Ok(())
}

/// The response to `record` at `place` that counts: by the repository's
/// own receipts on the served repository, by the server's on an agent
/// machine (`server`).
pub fn answered(
    cfg: &NodeConfig,
    server: Option<&machine::Server>,
    repo: &Repository,
    place: &crate::place::Place,
    record: &str,
) -> Result<Option<crate::protocol::found::Found>, NodeError> {
    Ok(match server {
        Some(s) => machine::response(repo, s, place, record, &cfg.server_code)?,
        None => crate::protocol::found::response(repo, place, record, &cfg.server_code)?,
    })
}

/// Answers `record` with `outcome` as the node's login: on the served
/// repository, stored there (and the run user's capabilities withdrawn when
/// `withdraw`); on an agent machine, written in the clone and pushed, the
/// served side withdrawing them once it receives it. Answers the hash.
#[allow(clippy::too_many_arguments)]
pub fn answer(
    root: &Path,
    cfg: &NodeConfig,
    fossil: &crate::fossil::Fossil,
    repo: &Repository,
    server: Option<&machine::Server>,
    record: &crate::protocol::found::StandingRecord,
    outcome: &str,
    note: &str,
    withdraw: bool,
) -> Result<String, NodeError> {
    Ok(match server {
        Some(s) => machine::respond(root, cfg, fossil, repo, s, record, outcome, note)?.0,
        None => respond::respond(fossil, repo, record, &cfg.login, outcome, note, withdraw)?,
    })
}

/// Runner `name`'s page, by the repository's own receipts or, on an agent
/// machine, the server's.
pub fn runner_page(
    repo: &Repository,
    server: Option<&machine::Server>,
    name: &str,
) -> Result<Option<runner::RunnerPage>, NodeError> {
    Ok(match server {
        Some(s) => machine::runner_page(repo, s, name)?,
        None => runner::page(repo, name)?,
    })
}

/// Pokes the node at `root` to wake it; nothing happens when it is not
/// running. Answers whether a node took the poke.
pub fn poke(root: &Path) -> bool {
    std::os::unix::net::UnixDatagram::unbound()
        .and_then(|s| s.send_to(b"wake", NodeConfig::socket(root)))
        .is_ok()
}

/// What Fossil's after-receive hook does where no node took its poke: when
/// `input` (the hook's, one artifact a line) names a check-in or a tag on
/// one, brings the repository's git export up to date, leaving its mark for
/// any exporter already at work. Quiet: the hook's output goes nowhere.
pub fn export_without_node(root: &Path, input: &[u8]) {
    let Some(cfg) = NodeConfig::load(root) else {
        return;
    };
    let Ok(repo) = Repository::open(&cfg.repository) else {
        return;
    };
    let hashes = crate::fossil::export::hook_input_hashes(input);
    if !repo.adds_to_export(&hashes).unwrap_or(false) {
        return;
    }
    let (Ok(Some(export)), Ok(fossil)) = (
        crate::git::Export::of(&repo),
        crate::fossil::Fossil::at(&cfg.fossil),
    ) else {
        return;
    };
    drop(repo);
    let _ = export.keep_current(&fossil, &cfg.repository, crate::git::export::Wait::No);
}

/// What Fossil's after-receive hook does for agent machines where no node
/// took its poke: keeps C5 for the remote runs among the artifacts `input`
/// names (the hook's, one a line), as the node does at each wake.
pub fn keep_remote_without_node(root: &Path, input: &[u8]) {
    let Some((_, fossil, repo)) = respond::open(root) else {
        return;
    };
    let hashes = crate::fossil::export::hook_input_hashes(input);
    let held_here = wake::State::load(root).held();
    log::write(root, &remote::keep(&fossil, &repo, &hashes, &held_here));
}

/// Pokes the node `repo` belongs to, if it is one: a write on the node
/// starts no backoffice, so the writer wakes the node itself (F3).
pub fn poke_repository(repo: &Repository) {
    if let Ok(Some(root)) = root_of(repo) {
        let _ = poke(&root);
    }
}

/// Takes the lock file `path` (waiting for it when `wait`); held while the
/// answer lives. `None` when it is held elsewhere and `wait` is false.
pub fn lock(path: &Path, wait: bool) -> std::io::Result<Option<crate::lock::Held>> {
    crate::lock::take(path, wait)
}

/// A password of 24 random letters and digits.
pub fn random_password() -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut rng = rand::rng();
    (0..24)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

/// Makes a run's directory afresh, the node's alone: its inbox (a named
/// pipe), its spool of deliveries and its user's password.
pub fn prepare_run_dir(dir: &Path, password: &str) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    make_run_dir(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let inbox = dir.join("inbox");
    let _ = std::fs::remove_file(&inbox);
    nix::unistd::mkfifo(&inbox, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(std::io::Error::from)?;
    let spool = dir.join(SPOOL);
    let _ = std::fs::remove_dir_all(&spool);
    std::fs::DirBuilder::new().mode(0o700).create(&spool)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(dir.join("password"))?;
    f.write_all(password.as_bytes())
}

/// Makes a run's directory when it is missing, the node's alone (0700), in
/// a directory of runs every account may pass through but not list (0711):
/// the run's own account, given the run directory's group by its watcher,
/// passes through it to its workspace and nowhere else.
fn make_run_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(runs) = dir.parent() {
        match std::fs::DirBuilder::new().mode(0o711).create(runs) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        std::fs::set_permissions(runs, std::os::unix::fs::PermissionsExt::from_mode(0o711))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// The directory of a run's deliveries not yet read, one file each, named
/// by its number in the order given.
const SPOOL: &str = "deliveries";

/// Writes `bytes` to `path` whole and its owner's alone (0600), through
/// `tmp` beside it ([`crate::file::write_whole`]).
pub(crate) fn write_whole(path: &Path, tmp: &Path, bytes: &[u8]) -> std::io::Result<()> {
    crate::file::write_whole(path, tmp, bytes, 0o600)
}

/// Gives a session one delivery, whole: the line is written to a file of
/// the run's spool (under a temporary name, then renamed, so it is never
/// seen in part), then a one-byte wake-up goes into its inbox. Nothing is
/// given when no watcher reads the inbox. Only the node's wake gives
/// deliveries, one at a time (under its lock), so numbers never collide.
pub fn deliver(dir: &Path, line: &str) -> std::io::Result<()> {
    let escaped = inbox::escape(line);
    let fifo = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(dir.join("inbox"))?;
    let spool = dir.join(SPOOL);
    let counter = dir.join("deliveries.next");
    let n: u64 = std::fs::read_to_string(&counter)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    std::fs::write(&counter, (n + 1).to_string())?;
    write_whole(
        &spool.join(format!("{n:020}")),
        &spool.join(format!(".{n:020}")),
        escaped.as_bytes(),
    )?;
    match (&fifo).write(b"\n") {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        r => r.map(|_| ()),
    }
}

/// Reads a run's deliveries in the order given, each whole, handing each
/// line (escaped: a newline as `\n`, a backslash as `\\`) to `take` until
/// it answers false or the inbox is closed. Each wake-up read from the inbox
/// makes it take every delivery spooled so far.
pub fn read_deliveries(dir: &Path, mut take: impl FnMut(String) -> bool) -> std::io::Result<()> {
    use std::io::Read;
    let mut inbox = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("inbox"))?;
    let spool = dir.join(SPOOL);
    let mut buf = [0u8; 512];
    loop {
        if inbox.read(&mut buf)? == 0 {
            return Ok(());
        }
        let mut names: Vec<String> = std::fs::read_dir(&spool)?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .collect();
        names.sort();
        for name in names {
            let path = spool.join(&name);
            let line = std::fs::read(&path)?;
            std::fs::remove_file(&path)?;
            if !take(String::from_utf8_lossy(&line).into_owned()) {
                return Ok(());
            }
        }
    }
}

/// Waits (a few seconds at most) until a run's watcher reads its inbox.
pub fn await_reader(dir: &Path) {
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        let probe = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(dir.join("inbox"));
        if probe.is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a run's watcher holds its lock.
pub fn watcher_alive(dir: &Path) -> bool {
    matches!(lock(&dir.join("lock"), false), Ok(None))
}

/// The file a run's directory holds when its node (not a stop) ended it,
/// so its watcher's `stopped` says so.
pub const ENDED_BY_NODE: &str = "ended-by-node";

/// The runs still going under `root` (their watcher holds its lock): each
/// record, by full hash when the node's state names it, and its directory.
pub fn runs_going(root: &Path) -> Vec<(String, PathBuf)> {
    let state = wake::State::load(root);
    let Ok(dirs) = std::fs::read_dir(root.join("runs")) else {
        return Vec::new();
    };
    let mut going: Vec<(String, PathBuf)> = dirs
        .filter_map(|e| {
            let dir = e.ok()?.path();
            if !dir.join("watcher.pid").exists() || !watcher_alive(&dir) {
                return None;
            }
            let name = dir.file_name()?.to_str()?.to_string();
            let record = state
                .open
                .keys()
                .find(|h| config::NodeConfig::run_dir(root, h) == dir)
                .cloned()
                .unwrap_or(name);
            Some((record, dir))
        })
        .collect();
    going.sort();
    going
}

/// Ends a run its node ends (not a stop): marks its directory so, and asks
/// its watcher to stop it, which it answers `stopped` saying the node ended
/// it; waits (a few seconds at most) for the watcher to be gone.
pub fn end_run(dir: &Path) -> bool {
    if std::fs::write(dir.join(ENDED_BY_NODE), b"").is_err() {
        return false;
    }
    signal_watcher(dir);
    let until = Instant::now() + Duration::from_secs(30);
    while watcher_alive(dir) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    !watcher_alive(dir)
}

/// Asks a run's watcher to stop the run (SIGTERM), which it answers `stopped`.
pub fn signal_watcher(dir: &Path) {
    if let Some(pid) = std::fs::read_to_string(dir.join("watcher.pid"))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
}

/// Claims the command run of `record` on `checkin` in the run's directory:
/// true the first time alone, so a node killed before saving its state
/// never starts that run twice.
pub fn claim_checkin_run(root: &Path, record: &str, checkin: &str) -> std::io::Result<bool> {
    use std::os::unix::fs::DirBuilderExt;
    if checkin.is_empty() || !checkin.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(std::io::Error::other("a check-in's hash is not hex"));
    }
    let dir = NodeConfig::run_dir(root, record);
    make_run_dir(&dir)?;
    let ran = dir.join("ran");
    match std::fs::DirBuilder::new().mode(0o700).create(&ran) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(ran.join(checkin))
    {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

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
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(dir.join("watch.log"))?;
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

/// Starts one of the node's own processes: the `ocx` program `ocx` with
/// `args`, in a session of its own (so a signal to its starter's group
/// misses it), its environment cleared but for `PATH` and the starter's
/// `HOME`, its input empty and its output to `log`. The one place OCX
/// starts itself.
#[allow(clippy::disallowed_methods)] // the node's own processes, as docs/architecture.md says
pub fn spawn_own(
    ocx: &Path,
    args: &[OsString],
    log: std::fs::File,
) -> std::io::Result<std::process::Child> {
    let mut cmd = std::process::Command::new(ocx);
    cmd.args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    if let Some(home) = std::env::var_os("HOME") {
        cmd.env("HOME", home);
    }
    // SAFETY: setsid is async-signal-safe and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    cmd.spawn()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_command_reads_back_its_root_whatever_the_path_holds() {
        for root in ["/srv/node", "/srv/a node's root", "/srv/$(x) `y`; z"] {
            let command = hook_command(Path::new("/usr/bin/ocx"), Path::new(root));
            assert!(command.ends_with(&format!(" # {HOOK_MARK}")), "{command}");
            assert_eq!(root_in(&command), Some(PathBuf::from(root)), "{command}");
        }
        assert_eq!(
            root_in("'/usr/bin/ocx' hook-poke '/srv/node' # ocx-node-hook"),
            Some(PathBuf::from("/srv/node"))
        );
    }
}
