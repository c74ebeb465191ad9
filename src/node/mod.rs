//! The node: the host serving a repository, which acts on the records
//! addressed to it (C3). Fossil's after-receive hook pokes it; it also
//! wakes when the repository file changes and when OCX writes on it. Each
//! wake reads the truth from the repository (`wake`); each open session
//! has a watcher process of its own (`crate::run::watch`).

pub mod config;
pub mod daemon;
pub mod respond;
pub mod run_user;
pub mod runner;
pub mod wake;

use crate::fossil::{FossilError, Repository};
use crate::protocol::kinds::{Problem, Record};
use config::NodeConfig;
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
    /// A file under the node's root could not be used.
    #[error("the node's files: {0}")]
    Io(#[from] std::io::Error),
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
        .and_then(|c| {
            let rest = c.split(" hook-poke ").nth(1)?;
            let quoted = rest.strip_prefix('\'')?;
            Some(PathBuf::from(quoted.split('\'').next()?))
        }))
}

/// The hook command for a node: the program pokes the node at `root`.
pub fn hook_command(ocx: &Path, root: &Path) -> String {
    format!(
        "'{}' hook-poke '{}' # {HOOK_MARK}",
        ocx.display(),
        root.display()
    )
}

/// The restrictions (C6) this node holds runs to: a no-password run's
/// tools run in its watcher, outside its sandbox, as its user; `push` and
/// `save` hold it to its branch, `post` to its place.
pub fn restrictions_enforced() -> Vec<String> {
    ["no_password", "branch", "own_thread"]
        .map(String::from)
        .to_vec()
}

/// Whether this node can hold everything `record` asks, naming the first
/// field it cannot (C3, C6, C7): the runner, each restriction, each
/// sandbox field and budget limit.
pub fn check_enforceable(
    repo: &Repository,
    record: &Record,
) -> Result<Result<(), Problem>, FossilError> {
    if record.runner != runner::COMMAND && runner::page(repo, &record.runner)?.is_none() {
        return Ok(Err(Problem {
            field: "runner".into(),
            reason: format!(
                "this node offers no runner {:?} (no counting wiki page sandbox/{})",
                record.runner, record.runner
            ),
        }));
    }
    let enforced = restrictions_enforced();
    if let Some(r) = record
        .restrict
        .asked()
        .into_iter()
        .find(|r| !enforced.iter().any(|e| e == r))
    {
        return Ok(Err(Problem {
            field: format!("restrict.{r}"),
            reason: "this node does not enforce it".into(),
        }));
    }
    let (sandbox, budget) = crate::run::watch::limits(record);
    if let Err(u) = crate::run::preflight().check(&sandbox, &budget) {
        return Ok(Err(Problem {
            field: u.field.to_string(),
            reason: u.reason,
        }));
    }
    Ok(Ok(()))
}

/// Pokes the node at `root` to wake it; nothing happens when it is not running.
pub fn poke(root: &Path) {
    if let Ok(s) = std::os::unix::net::UnixDatagram::unbound() {
        let _ = s.send_to(b"wake", NodeConfig::socket(root));
    }
}

/// Pokes the node `repo` belongs to, if it is one: a write on the node
/// starts no backoffice, so the writer wakes the node itself (F3).
pub fn poke_repository(repo: &Repository) {
    if let Ok(Some(root)) = root_of(repo) {
        poke(&root);
    }
}

/// Takes the lock file `path` (waiting for it when `wait`); held while the
/// answer lives. `None` when it is held elsewhere and `wait` is false.
pub fn lock(path: &Path, wait: bool) -> std::io::Result<Option<nix::fcntl::Flock<std::fs::File>>> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)?;
    let arg = if wait {
        nix::fcntl::FlockArg::LockExclusive
    } else {
        nix::fcntl::FlockArg::LockExclusiveNonblock
    };
    match nix::fcntl::Flock::lock(f, arg) {
        Ok(l) => Ok(Some(l)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(std::io::Error::from(e)),
    }
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

/// Makes a run's directory afresh: its inbox (a named pipe) and its
/// user's password, readable by the node alone.
pub fn prepare_run_dir(dir: &Path, password: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let inbox = dir.join("inbox");
    let _ = std::fs::remove_file(&inbox);
    nix::unistd::mkfifo(&inbox, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(std::io::Error::from)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(dir.join("password"))?;
    f.write_all(password.as_bytes())
}

/// Gives a session one delivery: a line in its inbox. Nothing is queued
/// when no watcher reads it.
pub fn deliver(dir: &Path, line: &str) -> std::io::Result<()> {
    let escaped = line
        .replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('\r', "\\r");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(dir.join("inbox"))?;
    f.write_all(format!("{escaped}\n").as_bytes())
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

/// Starts the watcher of `record` (or a command run on `checkin`),
/// detached in a session of its own, its output in the run's directory.
pub fn spawn_watcher(
    root: &Path,
    cfg: &NodeConfig,
    record: &str,
    checkin: Option<&str>,
) -> std::io::Result<()> {
    let dir = NodeConfig::run_dir(root, record);
    std::fs::create_dir_all(&dir)?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(dir.join("watch.log"))?;
    let mut cmd = std::process::Command::new(&cfg.ocx);
    cmd.arg("watch")
        .arg("--root")
        .arg(root)
        .arg("--record")
        .arg(record);
    if let Some(c) = checkin {
        cmd.arg("--checkin").arg(c);
    }
    cmd.env_clear()
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
    let mut child = cmd.spawn()?;
    std::thread::spawn(move || child.wait());
    Ok(())
}
