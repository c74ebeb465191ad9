//! A run's watcher (`ocx watch`), started by the node detached in its own
//! session: it makes the run's own filesystem, of the node's disk ceiling,
//! which holds all the run may write (`run::Disk`), prepares the run's
//! workspace there (a clone of the served repository over HTTP as the
//! run's user, and a checkout), starts the program confined by the
//! sandbox within the budget in a home of its own ([`home`]), gives it
//! `Record HASH: OBJECTIVE` and then each delivery from its inbox one line
//! at a time (or drives an agent's session, [`agent`]), and answers the
//! record when the run ends ([`life`]). For a `command` record it runs the program
//! once on one check-in and adds a `ci` verdict ([`command`]).
//!
//! Run as root, it leases the run a host uid of its own from the node's
//! range and makes everything of the run its owner's alone (umask 077): the
//! run's directory 0700 (0710 to the run's group while it runs, so its
//! account can pass through to its workspace), its files 0600.

#![allow(clippy::disallowed_methods)] // an entry point: it reads the watcher's own HOME, as docs/architecture.md says

use crate::fossil::artifact;
use crate::node::config::NodeConfig;
use crate::node::{self, respond};
use crate::protocol::found::{self, StandingRecord};
use crate::run::{
    BudgetLimits, Disk, Ended, Forbidden, Plan, Program, Running, SandboxError, SandboxFields,
};
use std::io::Write;
use std::os::fd::{AsFd, IntoRawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Instant;

pub mod agent;
mod command;
mod home;
mod life;
mod pause;
mod report;
mod spend;
pub mod starter;
mod typing;
mod ways;

/// What ends a watcher before its record is answered, said in its log;
/// or, as the answer's note, what kept the run from starting.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// Something the watcher cannot go on without.
    #[error("{0}")]
    Cannot(&'static str),
    /// A field of the record, its runner's page or the node's ceiling that
    /// the run cannot be given.
    #[error("{field}: {reason}")]
    Field { field: String, reason: String },
    /// A file or directory of the run.
    #[error("{what}: {source}")]
    File {
        what: String,
        source: std::io::Error,
    },
    /// The served repository or its `fossil`.
    #[error(transparent)]
    Fossil(#[from] crate::fossil::FossilError),
    /// The node, answering or reading its record.
    #[error(transparent)]
    Node(#[from] node::NodeError),
    /// The run's uid, leased from the node's range.
    #[error(transparent)]
    Uids(#[from] crate::run::uids::UidError),
    /// The sandbox or the run's own filesystem, the field at fault first.
    #[error("{}", named(.0))]
    Sandbox(#[from] SandboxError),
    /// The run's model relay, the field at fault first.
    #[error(transparent)]
    Relay(#[from] crate::run::relay::RelayError),
}

impl From<crate::stop::Stop> for WatchError {
    fn from(s: crate::stop::Stop) -> WatchError {
        field(s.field.unwrap_or_default(), s.reason)
    }
}

/// A refusal of `name`, a field the run cannot be given, saying why.
fn field(name: impl Into<String>, reason: impl std::fmt::Display) -> WatchError {
    WatchError::Field {
        field: name.into(),
        reason: reason.to_string(),
    }
}

/// What turns an error of the run's file `what` into a [`WatchError`].
fn file(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> WatchError {
    move |source| WatchError::File {
        what: what.to_string(),
        source,
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

/// The pipe's end SIGTERM's handler writes to, so a watcher waiting on its run is woken.
static STOP_WRITE: AtomicI32 = AtomicI32::new(-1);

/// The pipe's end a watcher waits on for a stop.
static STOP_READ: OnceLock<std::fs::File> = OnceLock::new();

extern "C" fn on_term(_: nix::libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
    let fd = STOP_WRITE.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: write(2) is async-signal-safe; the buffer is a static byte.
        let _ = unsafe { nix::libc::write(fd, b"!".as_ptr().cast(), 1) };
    }
}

/// A run's line for a person reading the watcher's log.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{} {line}", artifact::now());
}

/// Runs the watcher of `record` (or a command run on `checkin`); answers the exit code.
pub fn main(root: &Path, record: &str, checkin: Option<&str>) -> i32 {
    match watch(root, record, checkin) {
        Ok(()) => 0,
        Err(e) => {
            say(&format!("watcher failed: {e}"));
            1
        }
    }
}

fn watch(root: &Path, hash: &str, checkin: Option<&str>) -> Result<(), WatchError> {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    node::spawn::weigh_own_session();
    if let Some(c) = checkin {
        crate::stop::full_hash("checkin", c)?;
    }
    let (cfg, fossil, repo) =
        respond::open(root).ok_or(WatchError::Cannot("no node configuration under the root"))?;
    let receipt = repo
        .receipt(hash)?
        .ok_or(WatchError::Cannot("the record is not in the repository"))?;
    let mut standing = found::record(&repo, receipt.rid, hash)?
        .ok_or(WatchError::Cannot("the artifact holds no record"))?;
    let dir = NodeConfig::run_dir(root, hash);
    match checkin {
        Some(c) => command::run(&cfg, &fossil, &repo, &standing, &dir, c),
        None => {
            let receipts = node::Receipts::of_node(&cfg, &repo)?;
            if receipts.asked().is_some() {
                // A clone's own receipts name whoever pulled: the record's
                // sender is whom its server's receipt names.
                standing.said.from = receipts.sender(hash)?;
            }
            life::session(root, &cfg, &fossil, &repo, &receipts, &standing, &dir)
        }
    }
}

/// Says this process watches the run in `dir` (its `watcher.pid`, which
/// `ocx node stop` and a stop signal) and takes SIGTERM as the word to end it.
fn watching(dir: &Path) -> Result<(), WatchError> {
    std::fs::write(dir.join("watcher.pid"), std::process::id().to_string())
        .map_err(file("watcher.pid"))?;
    let (read, write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
            .map_err(|e| file("the watcher's stop pipe")(e.into()))?;
    if STOP_READ.set(read.into()).is_ok() {
        STOP_WRITE.store(write.into_raw_fd(), Ordering::SeqCst);
    }
    // SAFETY: the handler only stores to atomics and writes a byte to a pipe.
    unsafe {
        let _ = nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGTERM,
            nix::sys::signal::SigHandler::Handler(on_term),
        );
    }
    Ok(())
}

/// Why a run's program was killed before it ended by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Killed {
    /// A stop: SIGTERM to the watcher.
    Stopped,
    /// The run can no longer be held to its record, as `broken` said.
    Broken(String),
}

/// What changes in a no-password run's tool socket's directory that may have taken it away.
const SOCKET_CHANGES: nix::sys::inotify::AddWatchFlags =
    nix::sys::inotify::AddWatchFlags::from_bits_truncate(
        nix::libc::IN_DELETE
            | nix::libc::IN_DELETE_SELF
            | nix::libc::IN_MOVE
            | nix::libc::IN_MOVE_SELF
            | nix::libc::IN_CREATE
            | nix::libc::IN_ATTRIB,
    );

/// Waits for `running` to end, killing it when SIGTERM comes or when
/// `broken`, asked as the directory `watched` changes, says why the run can
/// no longer go on; answers how it ended and why it was killed, if it was.
/// Woken only by these (where inotify cannot watch `watched`, `broken` is
/// asked every 250 ms instead).
fn until_ended(
    running: Running,
    watched: Option<&Path>,
    mut broken: impl FnMut() -> Option<String>,
) -> (Result<Ended, SandboxError>, Option<Killed>) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use nix::sys::inotify::{InitFlags, Inotify};
    let notify = watched.and_then(|dir| {
        let i = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).ok()?;
        i.add_watch(dir, SOCKET_CHANGES).ok()?;
        Some(i)
    });
    let stop = STOP_READ.get();
    let timeout = match (watched, &notify, stop) {
        (_, _, None) => PollTimeout::from(50u8),
        (Some(_), None, _) => PollTimeout::from(250u8),
        _ => PollTimeout::NONE,
    };
    let killer = running.killer();
    let mut killed = None;
    loop {
        if STOP.load(Ordering::SeqCst) {
            killed = Some(Killed::Stopped);
        }
        if killed.is_some() {
            killer.kill();
            break;
        }
        let mut fds = vec![PollFd::new(running.ended(), PollFlags::POLLIN)];
        if let Some(s) = stop {
            fds.push(PollFd::new(s.as_fd(), PollFlags::POLLIN));
        }
        if let Some(i) = &notify {
            fds.push(PollFd::new(i.as_fd(), PollFlags::POLLIN));
        }
        let woke = match poll(&mut fds, timeout) {
            Ok(n) => n,
            Err(nix::Error::EINTR) => continue,
            Err(_) => 0,
        };
        let ready = |p: &PollFd| p.revents().is_some_and(|r| !r.is_empty());
        if ready(&fds[0]) {
            break;
        }
        let changed = notify.as_ref().is_some_and(|i| {
            fds.last().is_some_and(ready) && {
                while i.read_events().is_ok_and(|e| !e.is_empty()) {}
                true
            }
        });
        drop(fds);
        if let (true, Some(i), Some(dir)) = (changed, &notify, watched) {
            // The directory may be a new one by the name: watch that one too.
            let _ = i.add_watch(dir, SOCKET_CHANGES);
        }
        if watched.is_some() && (changed || (woke == 0 && notify.is_none())) {
            killed = broken().map(Killed::Broken);
        }
    }
    (running.wait(), killed)
}

fn url_with(cfg: &NodeConfig, user: &str, password: &str) -> String {
    crate::fossil::remote::with_login(&cfg.url, user, password)
}

/// Where a run's program runs: on the run's own filesystem, as the run's
/// leased uid when it has one, and out of sight of the node's repository,
/// its root and the watcher's own home.
struct Site<'a> {
    disk: &'a Disk,
    lease: Option<&'a RunLease>,
    forbidden: Forbidden,
}

impl<'a> Site<'a> {
    fn of(cfg: &NodeConfig, root: &Path, disk: &'a Disk, lease: Option<&'a RunLease>) -> Site<'a> {
        let mut paths = vec![cfg.repository.clone(), root.to_path_buf()];
        if let Some(home) = std::env::var_os("HOME") {
            let home = PathBuf::from(home);
            if home.is_absolute() && home != Path::new("/") {
                paths.push(home);
            }
        }
        Site {
            disk,
            lease,
            forbidden: Forbidden { paths },
        }
    }

    /// `program` planned to run at this site in `ws`, named `name`,
    /// confined by `sandbox` within `budget`.
    fn plan(
        &self,
        name: &str,
        ws: &Path,
        sandbox: &SandboxFields,
        budget: &BudgetLimits,
        program: &Program,
    ) -> Result<Plan, SandboxError> {
        let mut plan = crate::run::plan(name, ws, sandbox, budget, program, &self.forbidden)?;
        plan.on_disk(self.disk);
        if let Some(l) = self.lease {
            plan.run_as(l.lease.account.clone());
        }
        Ok(plan)
    }
}

/// The run's own host uid, leased from the node's range when the watcher
/// runs as root (else none: the run runs as the node's account); the run's
/// directory then lets that uid's group pass through it, and nothing more.
fn lease(root: &Path, dir: &Path) -> Result<Option<RunLease>, WatchError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let lease = crate::run::uids::lease(root)?;
    let gid = nix::unistd::Gid::from_raw(lease.account.gid);
    let held = RunLease {
        lease,
        dir: dir.to_path_buf(),
    };
    nix::unistd::chown(dir, None, Some(gid)).map_err(|e| file("the run's directory")(e.into()))?;
    set_mode(dir, 0o710)?;
    Ok(Some(held))
}

/// A run's host uid, leased while this lives; dropped, it closes the run's
/// directory to that uid again (the node's alone, 0700).
struct RunLease {
    lease: crate::run::uids::Lease,
    dir: PathBuf,
}

impl Drop for RunLease {
    fn drop(&mut self) {
        let _ = nix::unistd::chown(&self.dir, None, Some(nix::unistd::Gid::from_raw(0)));
        let _ = set_mode(&self.dir, 0o700);
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<(), WatchError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(file(path.display()))
}

/// The run's output log, its owner's alone.
fn private_log(path: &Path, append: bool) -> Result<std::fs::File, WatchError> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .mode(0o600)
        .open(path)
        .map_err(file(path.display()))?;
    set_mode(path, 0o600)?;
    Ok(f)
}

/// Prepares a fresh workspace at `ws`: the run user's clone (its password
/// remembered) and a checkout of `version` (or the newest).
fn workspace(
    fossil: &crate::fossil::Fossil,
    cfg: &NodeConfig,
    dir: &Path,
    ws: &Path,
    user: &str,
    version: Option<&str>,
) -> Result<(), WatchError> {
    let password =
        std::fs::read_to_string(dir.join("password")).map_err(file("the run's password"))?;
    // A command run's workspace is named for its check-in, not where one is made ahead.
    if version.is_none() && made_ahead(ws) {
        match current_ahead(fossil, cfg, ws, user, password.trim()) {
            Ok(()) => {
                say(&format!("took a workspace made ahead, pulled as {user}"));
                return set_mode(&ws.join(crate::fossil::workspace::CLONE), 0o600);
            }
            Err(e) => say(&format!(
                "the workspace made ahead could not be taken, so the run clones its own: {e}"
            )),
        }
    }
    let _ = std::fs::remove_dir_all(ws);
    std::fs::create_dir_all(ws).map_err(file(ws.display()))?;
    set_mode(ws, 0o700)?;
    let clone = ws.join(crate::fossil::workspace::CLONE);
    fossil.clone_open(
        &url_with(cfg, user, password.trim()),
        &clone,
        ws,
        version,
        true,
    )?;
    crate::fossil::Fossil::clone_default_user(&clone, user)?;
    set_mode(&clone, 0o600)
}

/// The longest a workspace made ahead is taken after it was made: what a
/// clone holds of the repository's configuration (its skin, its settings)
/// is as it was then, and a run's pull brings artifacts alone.
const AHEAD_KEPT: std::time::Duration = std::time::Duration::from_secs(3600);

/// Whether `ws` holds a workspace made ahead ([`crate::node::ahead`]) young
/// enough to be taken.
fn made_ahead(ws: &Path) -> bool {
    crate::fossil::workspace::made_ahead(ws)
        .and_then(|made| made.elapsed().ok())
        .is_some_and(|age| age < AHEAD_KEPT)
}

/// Gives the workspace made ahead at `ws` to the run's login `user`, then
/// pulls as that login, and checks out the newest check-in again when the
/// pull brought check-ins: the workspace as a clone and checkout of its
/// own would be (HISTORY 476).
fn current_ahead(
    fossil: &crate::fossil::Fossil,
    cfg: &NodeConfig,
    ws: &Path,
    user: &str,
    password: &str,
) -> Result<(), WatchError> {
    use crate::fossil::workspace;
    let remote = crate::fossil::remote::naming_login(&cfg.url, user);
    let before = workspace::adopt(ws, user, password, &remote)?;
    let clone = ws.join(workspace::CLONE);
    fossil.pull(&clone)?;
    if workspace::checkins_seen(&clone)? != before {
        fossil.check_out(ws, &workspace::main_branch(&clone)?)?;
    }
    Ok(())
}

/// The run's terminal: a fresh pseudo-terminal, and its socket served in
/// the run's directory `dir` for people to join it, what it shows kept in
/// the run's output log `out` as text.
fn on_terminal(
    root: &Path,
    r: &StandingRecord,
    dir: &Path,
    out: &std::fs::File,
) -> std::io::Result<(crate::run::terminal::Pty, crate::run::terminal::Joining)> {
    let pty = crate::run::terminal::Pty::open()?;
    let keeper = typing::Attachments {
        root: root.to_path_buf(),
        record: r.clone(),
        dir: dir.to_path_buf(),
    };
    let joining = crate::run::terminal::Joining::serve(
        dir,
        pty.master()?,
        out.try_clone()?,
        Box::new(keeper),
    )?;
    Ok((pty, joining))
}

/// Starts the run's model relay for the page's service `m`, its cost
/// reckoned at the page's `prices`, holding the record's `budget` of
/// tokens and cost: the key read
/// from the node's credential, the socket in the workspace's `.ocx`, its
/// lines in the run's output log; a note naming the field when it cannot.
fn start_relay(
    root: &Path,
    cfg: &NodeConfig,
    m: &crate::node::runner::ModelService,
    prices: Option<crate::protocol::money::Prices>,
    budget: &crate::protocol::kinds::Budget,
    dir: &Path,
    ws: &Path,
) -> Result<crate::run::relay::Relay, WatchError> {
    use crate::run::relay::{Relay, SOCKET, Settings};
    let key = crate::node::credentials::read(root, &m.credential)
        .map_err(|e| field("model.credential", e))?;
    let key = String::from_utf8(key)
        .map_err(|_| field("model.credential", "the key is not UTF-8 text"))?
        .trim()
        .to_string();
    if key.is_empty() || key.contains(['\r', '\n', '\0']) {
        return Err(field(
            "model.credential",
            format!("{:?} holds no key of one line", m.credential),
        ));
    }
    let own = ws.join(".ocx");
    std::fs::create_dir_all(&own).map_err(file(own.display()))?;
    let log = std::sync::Mutex::new(private_log(&dir.join("output.log"), true)?);
    Ok(Relay::start(Settings {
        kind: m.kind,
        upstream: m.upstream.clone(),
        key,
        budget: budget.tokens,
        prices,
        cost: budget.cost,
        ask: budget.ask == Some(true),
        dir: dir.to_path_buf(),
        socket: own.join(SOCKET),
        authorities: cfg.model_ca.clone(),
        log: Box::new(move |line| {
            if let Ok(mut f) = log.lock() {
                let _ = writeln!(f, "{} {line}", artifact::now());
            }
            say(line);
        }),
    })?)
}

/// The run as its tools act for it on the served repository: its user
/// within its record's restrictions.
fn run_scope(root: &Path, r: &StandingRecord) -> crate::context::RunScope {
    crate::context::RunScope {
        user: r.record.user.clone(),
        record: r.hash.clone(),
        place: r.place.clone(),
        restrict: r.record.restrict.clone(),
        root: root.to_path_buf(),
        server: None,
    }
}

/// On an agent machine, the served repository a run's node socket acts
/// on, as the run's login: its password, from the server's `run_login`,
/// is kept in the run's directory, which the run never sees.
fn served_as(
    cfg: &NodeConfig,
    receipts: &node::Receipts,
    r: &StandingRecord,
    dir: &Path,
) -> Result<Option<Box<crate::context::ServedAs>>, WatchError> {
    if receipts.asked().is_none() {
        return Ok(None);
    }
    let password =
        std::fs::read_to_string(dir.join("password")).map_err(file("the run's password"))?;
    let capabilities = receipts
        .capabilities(&r.record.user)?
        .map(|c| c.to_string())
        .unwrap_or_default();
    Ok(Some(Box::new(crate::context::ServedAs {
        url: cfg.url.clone(),
        login: r.record.user.clone(),
        password: password.trim().to_string(),
        capabilities,
    })))
}

/// `budget` held to the node's ceiling on memory and processes, where this
/// host holds them, and on disk; a note naming the field when it asks for more.
fn held(root: &Path, cfg: &NodeConfig, budget: &BudgetLimits) -> Result<BudgetLimits, WatchError> {
    let (memory, processes) = crate::run::Ceiling::held_here_kept(&NodeConfig::cgroups_held(root));
    cfg.ceiling
        .hold(budget, memory, processes)
        .map_err(|u| field(u.field, u.reason))
}

/// The run's own filesystem in its directory `dir`, of its disk budget's size, which
/// everything it may write goes in (one its node `root` made ahead, when one is ready); a
/// note naming `budget.disk` when it cannot be made.
fn on_disk(root: &Path, dir: &Path, budget: &BudgetLimits) -> Result<Disk, WatchError> {
    let bytes = budget
        .disk_bytes
        .ok_or_else(|| field("budget.disk", "the run was given no disk budget"))?;
    let started = Instant::now();
    let pool = crate::run::DiskPool::at(&NodeConfig::disks(root));
    let disk = Disk::make_from(dir, bytes, Some(&pool))?;
    say(&format!(
        "the run's filesystem of {} made in {} ms",
        size(bytes),
        started.elapsed().as_millis()
    ));
    Ok(disk)
}

/// A size as a person reads it: whole GiB, else MiB.
fn size(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", (bytes + (1 << 19)) >> 20)
    }
}

/// Whether the node socket is bound and made its owner's alone, so the
/// run starts only after nothing more is done to it by name.
fn socket_ready(socket: &Path) -> bool {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    std::fs::symlink_metadata(socket)
        .is_ok_and(|m| m.file_type().is_socket() && m.permissions().mode() & 0o777 == 0o600)
}

/// Why a no-password run can no longer be held to it, if it cannot: its
/// node socket is gone (looked at, never followed: the run's clone and
/// files are never opened on the host; it holds no password to remember).
fn no_password_broken(socket: &Path) -> Option<String> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(socket) {
        Ok(m) if m.file_type().is_socket() => None,
        _ => Some("the run's tool socket is gone".into()),
    }
}

/// A no-password run's workspace: a clone made as nobody in particular
/// (it can pull, never push), its local administrator the run's user,
/// autosync off, and a checkout of the newest check-in.
fn prepare_without_password(
    fossil: &crate::fossil::Fossil,
    cfg: &NodeConfig,
    ws: &Path,
    user: &str,
) -> Result<(), WatchError> {
    let _ = std::fs::remove_dir_all(ws);
    std::fs::create_dir_all(ws.join(".ocx")).map_err(file(ws.display()))?;
    let clone = ws.join(crate::fossil::workspace::CLONE);
    fossil.clone_open_anonymous(&cfg.url, &clone, ws, user)?;
    Ok(fossil.autosync_off(&clone)?)
}

/// A sandbox error as a response's note: the field at fault first.
fn named(e: &SandboxError) -> String {
    let text = e.to_string();
    match e.field() {
        Some(f) if !text.starts_with(f) => format!("{f}: {text}"),
        _ => text,
    }
}

fn feed(stdin: &mut std::process::ChildStdin, line: &str) -> std::io::Result<()> {
    stdin.write_all(format!("{line}\n").as_bytes())?;
    stdin.flush()
}
