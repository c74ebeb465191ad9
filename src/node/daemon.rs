//! The node's one long-lived process (`ocx node-daemon`): it wakes on a
//! poke at its socket (from Fossil's hook, or from OCX's own writes), and
//! on every change of the repository file (inotify): interrupts, never a
//! tick; and at the next slot of an open session's schedule
//! (`node::schedule`), a deadline it sleeps until. It stops, saying why in its log where it still can, once its
//! repository or its root is gone (or its root made anew): told at once
//! by inotify when either is removed or renamed, and looking every
//! [`LOOK`] besides, for what inotify cannot see (a directory above them
//! moved). At its start, and at `ocx node start`, it answers `lost` for each
//! open session whose watcher is gone, and clears each run's filesystem
//! and cgroups that a watcher gone without removing them left. It claims its runs' host uids for as
//! long as it lives, and its socket is its own account's alone (0600): the
//! hook, run by `fossil server`, reaches it when the server runs as the
//! node's account; otherwise the change of the repository file wakes it.
//! An agent machine's node is woken by its listener instead, and not at
//! all while its server is away but by the listener hearing it again.
//! It opens the repository and learns `fossil` once, for every wake.

use super::config::NodeConfig;
use super::log::{self, Done, Event};
use super::receipts::Server;
use super::wake::{self, State};
use super::{NodeError, machine};
use crate::fossil::kept::Kept;
use nix::sys::inotify::AddWatchFlags;
use std::path::Path;
use std::sync::{Arc, mpsc};
use std::time::SystemTime;

/// Answers `lost` for each open session whose watcher is gone (C3, C4),
/// first clearing each run's filesystem a gone watcher left; answers what
/// it did, an event each.
pub fn sweep_lost(root: &Path) -> Result<Vec<Event>, NodeError> {
    sweep_lost_keeping(root, &Kept::new())
}

/// [`sweep_lost`] with the repository and `fossil` the node keeps.
fn sweep_lost_keeping(root: &Path, kept: &Arc<Kept>) -> Result<Vec<Event>, NodeError> {
    let _lock = super::lock(&root.join("wake.lock"), true)?;
    let cfg = NodeConfig::load(root).ok_or(NodeError::NotANode)?;
    let fossil = kept
        .fossil_at(&cfg.fossil)
        .map_err(|_| NodeError::NotANode)?;
    let repo = kept
        .repository(&cfg.repository)
        .map_err(|_| NodeError::NotANode)?;
    let receipts = super::Receipts::of_node(&cfg, &repo)?;
    if let Ok(dirs) = std::fs::read_dir(root.join("runs")) {
        let cgroup_roots = crate::run::budget::cgroup_roots();
        for dir in dirs.filter_map(Result::ok) {
            clear_left_disk(&dir.path(), &cgroup_roots);
        }
    }
    let mut state = State::load(root);
    let mut done = Vec::new();
    let attachments = super::attached::post_unseen(root, &cfg, &fossil, &repo, &receipts);
    if attachments > 0 {
        let mut e = Event::new(
            Done::Attachments,
            "attachments to runs' terminals whose end the node did not see",
        );
        e.count = Some(attachments as u64);
        done.push(e);
    }
    let open: Vec<(String, wake::OpenRun)> = state
        .open
        .iter()
        .map(|(h, o)| (h.clone(), o.clone()))
        .collect();
    for (hash, run) in open {
        let dir = NodeConfig::run_dir(root, &hash);
        if !run.session
            || matches!(super::spool::lock_when_gone(&dir), Ok(None))
            || machine::answered_here(root, &hash)
        {
            continue;
        }
        let Some(receipt) = repo.receipt(&hash)? else {
            continue;
        };
        let Some(r) = crate::protocol::found::record(&repo, receipt.rid, &hash)? else {
            continue;
        };
        if receipts
            .response(&repo, &r.place, &hash, &cfg.server_code)?
            .is_none()
        {
            super::answer(
                root,
                &cfg,
                &fossil,
                &repo,
                &receipts,
                &r,
                "lost",
                "the node lost the run's watcher",
                true,
            )?;
            done.push(Event::new(Done::Lost, "the node lost the run's watcher").record(&hash));
        }
        state.open.remove(&hash);
    }
    state.save(root)?;
    log::write(root, &done);
    Ok(done)
}

/// Unmounts and removes the filesystem a run's watcher left in `dir` when
/// it ended without doing so itself (killed, or the host went down), and
/// ends and removes the cgroups it left under `cgroup_roots`, while no
/// watcher holds the run.
fn clear_left_disk(dir: &Path, cgroup_roots: &[std::path::PathBuf]) {
    use crate::run::budget::{cgroups_left, clear_left_cgroups, disk};
    let run_name = dir
        .file_name()
        .map(|n| format!("run-{}", n.to_string_lossy()));
    let disk_left = dir.join(disk::IMAGE).exists() || dir.join(disk::MOUNT).exists();
    let cgroups = run_name
        .as_deref()
        .map(|n| cgroups_left(cgroup_roots, n))
        .unwrap_or_default();
    if !disk_left && cgroups.is_empty() {
        return;
    }
    if let Ok(Some(_free)) = super::spool::lock_when_gone(dir) {
        if disk_left {
            disk::clear(dir);
        }
        clear_left_cgroups(cgroups);
    }
}

/// Claims the host uids the node's runs run as, when it runs as root (runs
/// started by any other account run as that account); held while it lives.
pub fn claim_uids(
    root: &Path,
    cfg: &NodeConfig,
) -> Result<Option<crate::run::uids::Claim>, NodeError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    Ok(Some(crate::run::uids::claim(root, cfg.run_uids)?))
}

/// What woke the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Woken {
    /// A poke: the hook, or OCX's own write. Each tells of a write
    /// already done.
    Poked,
    /// A change of the repository file, perhaps one of several writes of
    /// one commit under way.
    Changed,
    /// The root, a file in it, or the repository file removed or moved:
    /// the node looks whether it can go on, and wakes for nothing else.
    Moved,
    /// An agent machine's listener: the server answered, and what it
    /// told of is in the clone.
    Heard,
}

/// How long a change of the repository file waits for the rest of its
/// writes before the node wakes, so one commit wakes it once.
const GATHER: std::time::Duration = std::time::Duration::from_millis(5);

/// Runs the node at `root` in this process until it is killed, its log
/// lines on stderr too (for systemd and the like); a fatal error is
/// logged and answered.
pub fn run_foreground(root: &Path) -> Result<(), NodeError> {
    log::to_stderr_too();
    run(root)
}

/// Runs the node at `root` until it is killed, or until its repository or
/// root is gone; a fatal error is logged (where the root still is) and
/// answered. Returns at once when another node process already runs there.
pub fn run(root: &Path) -> Result<(), NodeError> {
    let ran = serve(root);
    if let Err(e) = &ran {
        // Into the log the root keeps, never a new one: a root being
        // removed would be left holding it.
        log::write_if_kept(root, &[Event::new(Done::NodeStopped, e.to_string())]);
    }
    ran
}

/// How long the node waits, with nothing to wake it, before it looks
/// whether its repository and root are still there.
pub const LOOK: std::time::Duration = std::time::Duration::from_secs(30);

/// What a node stands on: its root's lock, as the node holds it, and its
/// repository's path.
struct Ground<'a> {
    root: &'a Path,
    repository: &'a Path,
    lock: (u64, u64),
}

impl Ground<'_> {
    /// Why the node cannot go on, when it cannot: its repository is gone,
    /// its root is gone, or its root was made anew (its lock file another,
    /// which another node may hold).
    fn gone(&self) -> Option<NodeError> {
        use std::os::unix::fs::MetadataExt;
        let missing = |p: &Path| matches!(std::fs::metadata(p), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
        if missing(self.repository) {
            return Some(NodeError::Gone(format!(
                "its repository {} is gone",
                self.repository.display()
            )));
        }
        match std::fs::metadata(self.root.join("node.lock")) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(NodeError::Gone(format!(
                "its root {} is gone",
                self.root.display()
            ))),
            Ok(m) if (m.dev(), m.ino()) != self.lock => Some(NodeError::Gone(format!(
                "its root {} was made anew, its lock another node's to take",
                self.root.display()
            ))),
            _ => None,
        }
    }
}

/// What removes or moves the node's root, or a file in it.
const ROOT_CHANGES: AddWatchFlags = AddWatchFlags::from_bits_truncate(
    nix::libc::IN_DELETE
        | nix::libc::IN_MOVED_FROM
        | nix::libc::IN_DELETE_SELF
        | nix::libc::IN_MOVE_SELF,
);

/// What removes or moves the repository file (its link count changing is
/// an attribute's change).
const REPOSITORY_CHANGES: AddWatchFlags = AddWatchFlags::from_bits_truncate(
    nix::libc::IN_ATTRIB | nix::libc::IN_DELETE_SELF | nix::libc::IN_MOVE_SELF,
);

/// Sends [`Woken::Moved`] on `tx` whenever the root or the repository may
/// have been removed or moved, from a thread that lives until `tx`'s
/// receiver is gone.
fn on_moved(root: &Path, repository: &Path, tx: mpsc::Sender<Woken>) -> Result<(), NodeError> {
    use nix::sys::inotify::{InitFlags, Inotify};
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC).map_err(std::io::Error::from)?;
    inotify
        .add_watch(root, ROOT_CHANGES)
        .map_err(std::io::Error::from)?;
    inotify
        .add_watch(repository, REPOSITORY_CHANGES)
        .map_err(std::io::Error::from)?;
    std::thread::spawn(move || {
        while inotify.read_events().is_ok() {
            if tx.send(Woken::Moved).is_err() {
                break;
            }
        }
    });
    Ok(())
}

/// The node's socket bound afresh, its owner's alone, each datagram on
/// it waking the node as `Poked` through `poked`.
fn listen_on_socket(root: &Path, poked: mpsc::Sender<Woken>) -> Result<(), NodeError> {
    let socket_path = NodeConfig::socket(root);
    let _ = std::fs::remove_file(&socket_path);
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&socket_path, std::fs::Permissions::from_mode(0o600))?;
    }
    std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        while socket.recv(&mut buf).is_ok() {
            if poked.send(Woken::Poked).is_err() {
                break;
            }
        }
    });
    Ok(())
}

/// Serves the node at `root` until it is killed or its ground is gone.
///
/// An agent machine's node is not woken by changes of its clone: each is
/// one the machine made itself (a pull, what the server's wait carried, a
/// response and its push, which Fossil writes even when the server gives
/// no answer), and its listener wakes it for what the server told of.
fn serve(root: &Path) -> Result<(), NodeError> {
    use std::os::unix::fs::MetadataExt;
    let Some(lock) = super::lock(&root.join("node.lock"), false)? else {
        return Ok(());
    };
    let held = lock.metadata()?;
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let cfg = NodeConfig::load(root).ok_or(NodeError::NotANode)?;
    let _claim = claim_uids(root, &cfg)?;
    std::fs::write(root.join("node.pid"), std::process::id().to_string())?;
    let _starter = super::spawn::use_starter(root, &lock)?;
    super::spawn::weigh_own_session();
    serve_metrics(root, &cfg);
    let (tx, rx) = mpsc::channel::<Woken>();
    listen_on_socket(root, tx.clone())?;
    let heard = tx.clone();
    on_moved(root, &cfg.repository, tx.clone())?;
    let ground = Ground {
        root,
        repository: &cfg.repository,
        lock: (held.dev(), held.ino()),
    };
    let (server, reach) = match &cfg.machine {
        Some(_) => {
            let server = Arc::new(Server::of(&cfg)?.ok_or(NodeError::NotANode)?);
            let reach = Arc::new(machine::Reach::new(root, &cfg.url));
            let (root, cfg) = (root.to_path_buf(), cfg.clone());
            let (listening, reached) = (server.clone(), reach.clone());
            std::thread::spawn(move || {
                machine::listen(&root, &cfg, &listening, &reached, || {
                    heard.send(Woken::Heard).is_ok()
                })
            });
            (Some(server), Some(reach))
        }
        None => {
            crate::fossil::wait::on_change(&cfg.repository, tx, Woken::Changed)?;
            let (root, cfg) = (root.to_path_buf(), cfg.clone());
            std::thread::spawn(move || upstream_on_schedule(&root, &cfg));
            (None, None)
        }
    };
    {
        let (root, days) = (root.to_path_buf(), cfg.transcript_days);
        std::thread::spawn(move || sweep_transcripts(&root, days));
    }
    let kept = Kept::new();
    if let Err(e) = sweep_lost_keeping(root, &kept) {
        log::write(
            root,
            &[Event::new(
                Done::Failed,
                format!("the sweep for lost runs failed: {e}"),
            )],
        );
    }
    let disks = disks_ahead(root, &cfg, std::os::fd::AsRawFd::as_raw_fd(&*lock));
    let mut unconfirmed_tries = 0u32;
    let started = SystemTime::now();
    loop {
        wake_once(root, &kept, server.as_deref(), reach.as_deref());
        give_back_freed();
        let _ = disks.send(());
        // A response the server answered but did not take is pushed again
        // after 1, 2, 4... seconds, at most a minute apart, while the
        // server answers; while it is away, the listener wakes the node.
        let retry = match &reach {
            Some(r) if !r.is_away() && machine::any_unconfirmed(root) => {
                unconfirmed_tries = unconfirmed_tries.saturating_add(1);
                Some(machine::listen::backoff(unconfirmed_tries))
            }
            _ => {
                unconfirmed_tries = 0;
                None
            }
        };
        let retry_at = retry.map(|r| std::time::Instant::now() + r);
        let mut slot = schedules_due(root, started);
        loop {
            let wait = until_next(retry_at, slot);
            let woken = match rx.recv_timeout(wait) {
                Ok(w) => Some(w),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if slot.is_some_and(|s| s <= SystemTime::now()) {
                        slot = schedules_due(root, started);
                    }
                    if retry_at.is_some_and(|r| r <= std::time::Instant::now()) {
                        break;
                    }
                    None
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
            };
            if woken == Some(Woken::Changed) {
                std::thread::sleep(GATHER);
            }
            let mut heard = woken == Some(Woken::Heard);
            let mut wakes = matches!(woken, Some(Woken::Poked | Woken::Changed | Woken::Heard));
            while let Ok(w) = rx.try_recv() {
                heard |= w == Woken::Heard;
                wakes |= w != Woken::Moved;
            }
            if let Some(gone) = ground.gone() {
                return Err(gone);
            }
            if !wakes {
                continue;
            }
            // While its server is away, a machine's wake would ask it in
            // vain: only the listener, once it hears the server, wakes it.
            if heard || !reach.as_ref().is_some_and(|r| r.is_away()) {
                break;
            }
        }
    }
}

/// Serves the node's metrics where its configuration names an address;
/// an address that cannot be bound is logged, and the node goes on.
fn serve_metrics(root: &Path, cfg: &NodeConfig) {
    if let Some(addr) = cfg.metrics
        && let Err(e) = super::metrics::serve(root, addr)
    {
        log::write(
            root,
            &[Event::new(
                Done::Failed,
                format!("the metrics cannot be served at {addr}: {e}"),
            )],
        );
    }
}

/// How many of its runs' filesystems a node keeps made ahead.
pub const DISKS_AHEAD: usize = 2;

/// How long the node waits with no wake before making filesystems ahead
/// again, so that the runs its wakes opened start first; each is made in
/// a session weighed least (HISTORY 474).
const DISKS_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

/// Keeps [`DISKS_AHEAD`] filesystems of the ceiling's size made ahead for
/// the node's runs, once [`DISKS_AFTER`] passed with no wake after its
/// start and after each wake, on a thread of its own and at the lowest
/// priority, each holding a workspace made ahead by the node's furnisher
/// (which holds the node's `lock` while it runs): a run's start takes one
/// in place of running `mkfs.ext4`, and pulls in place of cloning. A node
/// that cannot make them (not root) makes none, and its runs make their
/// own as before; one whose furnisher fails says why in its log, once.
fn disks_ahead(root: &Path, cfg: &NodeConfig, lock: std::os::fd::RawFd) -> mpsc::Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    let pool = crate::run::DiskPool::at(&NodeConfig::disks(root));
    let bytes = cfg.ceiling.disk_bytes;
    let (root, ocx) = (root.to_path_buf(), cfg.ocx.clone());
    let said = std::cell::Cell::new(false);
    let furnish = move |into: &Path| match super::spawn::furnisher(&ocx, &root, into, lock) {
        Ok(()) => true,
        Err(why) => {
            if !said.replace(true) {
                log::write(
                    &root,
                    &[Event::new(
                        Done::Failed,
                        format!(
                            "no workspace could be made ahead, so each run clones its own: {why}"
                        ),
                    )],
                );
            }
            false
        }
    };
    std::thread::spawn(move || {
        // Linux gives each thread its own priority, and the processes it
        // starts inherit it: `mkfs.ext4` runs at the lowest.
        // SAFETY: setpriority changes this thread's priority and nothing else.
        unsafe {
            nix::libc::setpriority(
                nix::libc::PRIO_PROCESS,
                nix::unistd::gettid().as_raw() as u32,
                19,
            );
        }
        let mut first = true;
        while first || rx.recv().is_ok() {
            first = false;
            loop {
                match rx.recv_timeout(DISKS_AFTER) {
                    Ok(()) => continue,
                    Err(mpsc::RecvTimeoutError::Timeout) => break,
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
            }
            let _ = pool.fill(bytes, DISKS_AHEAD, &furnish);
        }
    });
    tx
}

/// Gives the memory a wake freed back to the system (HISTORY 419): a
/// wake over hundreds of open runs reads their records and places, and
/// the C library's heap keeps what was freed inside it, below what is
/// still held, as the process's own; a node at 300 runs held 90 MB so.
fn give_back_freed() {
    // SAFETY: malloc_trim only returns freed memory; it is safe at any time.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// One wake of the node, its failure logged; a machine's server found
/// away is marked so in `reach`. A wake that panics leaves the server's
/// receipts half told; the next wake forgets them before it asks.
fn wake_once(
    root: &Path,
    kept: &Arc<Kept>,
    server: Option<&Server>,
    reach: Option<&machine::Reach>,
) {
    let asks = server.map_or(super::Asks::Served, super::Asks::Machine);
    let waking = std::panic::AssertUnwindSafe(|| wake::wake_asking(root, kept, asks));
    match (std::panic::catch_unwind(waking), reach) {
        (Ok(Ok(_)), _) => {}
        (Ok(Err(e)), Some(reach)) if e.server_away() => reach.lost(&e.to_string()),
        (Ok(Err(e)), _) => {
            super::metrics::KEPT.wakes_failed.inc();
            log::write(
                root,
                &[Event::new(Done::Failed, format!("the wake failed: {e}"))],
            );
        }
        (Err(_), _) => log::write(
            root,
            &[Event::new(
                Done::Failed,
                "the wake failed: the node panicked",
            )],
        ),
    }
}

/// Gives the open sessions the slots of their schedules due now (the
/// node having started at `started`); answers when the next falls. A
/// failure is logged, and looked at again at the next wake.
fn schedules_due(root: &Path, started: SystemTime) -> Option<SystemTime> {
    match super::schedule::deliver_due(root, started) {
        Ok(next) => next,
        Err(e) => {
            log::write(
                root,
                &[Event::new(
                    Done::Failed,
                    format!("the schedules' slots could not be given: {e}"),
                )],
            );
            None
        }
    }
}

/// How long the node sleeps with nothing to wake it: until its retry
/// (`retry_at`) or the next slot of a schedule (`slot`), whichever comes
/// first, and [`LOOK`] at most.
fn until_next(
    retry_at: Option<std::time::Instant>,
    slot: Option<SystemTime>,
) -> std::time::Duration {
    let to_retry = retry_at.map(|r| r.saturating_duration_since(std::time::Instant::now()));
    let to_slot = slot.map(|s| s.duration_since(SystemTime::now()).unwrap_or_default());
    [to_retry, to_slot]
        .into_iter()
        .flatten()
        .fold(LOOK, std::cmp::Ord::min)
}

/// How often the node looks for transcripts past their keeping.
const TRANSCRIPTS_LOOK: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes, once an hour for as long as the node lives, the transcripts of
/// ended runs older than `days` (the node's `transcript_days`, else 30),
/// saying in the log how many went.
fn sweep_transcripts(root: &Path, days: Option<u64>) {
    use crate::node::transcript;
    let days = days.unwrap_or(transcript::KEEP_DAYS);
    loop {
        let swept = transcript::sweep(&root.join("runs"), days);
        if !swept.is_empty() {
            log::write_if_kept(
                root,
                &[Event::new(
                    Done::Swept,
                    format!(
                        "{} transcripts of runs ended over {days} days ago removed",
                        swept.len()
                    ),
                )],
            );
        }
        std::thread::sleep(TRANSCRIPTS_LOOK);
    }
}

/// The longest the schedule of the upstream sleeps before it reads the
/// repository's configuration again.
const SCHEDULE_LOOK: std::time::Duration = std::time::Duration::from_secs(60);

/// Brings a repository imported from git up to its upstream on the
/// schedule its config row `ocx-upstream-every` sets, as the node's login,
/// for as long as the node lives; each run logged. Asleep between, reading
/// the schedule again at least once a minute.
fn upstream_on_schedule(root: &Path, cfg: &NodeConfig) {
    use crate::git::upstream::{EVERY_ROW, Upstream, last_run_at};
    let repository = cfg
        .repository
        .canonicalize()
        .unwrap_or_else(|_| cfg.repository.clone());
    loop {
        let every = crate::fossil::Repository::open(&repository)
            .ok()
            .and_then(|r| r.config(EVERY_ROW).ok().flatten())
            .and_then(|e| crate::protocol::kinds::wall_seconds(&e))
            .map(std::time::Duration::from_secs);
        let (Some(every), Some(mut up)) = (every, Upstream::of(&repository)) else {
            std::thread::sleep(SCHEDULE_LOOK);
            continue;
        };
        let since = last_run_at(&repository)
            .and_then(|t| t.elapsed().ok())
            .unwrap_or(every);
        if since < every {
            std::thread::sleep((every - since).min(SCHEDULE_LOOK));
            continue;
        }
        let event = match (
            crate::git::Git::locate(None),
            crate::fossil::Fossil::at(&cfg.fossil),
        ) {
            (Ok(git), Ok(fossil)) => {
                let held = super::lock(&up.dir.join(crate::git::upstream::LOCK), true);
                let brought = up.bring_up(&git, &fossil, &repository, &cfg.login);
                drop(held);
                match brought {
                    Ok(b) => {
                        let commits: u64 = b.branches.iter().map(|x| x.commits).sum();
                        let mut e = Event::new(Done::Upstream, format!("from {}", up.kept.from));
                        e.count = Some(commits);
                        if commits > 0 || !b.tags.is_empty() {
                            let _ = super::poke(root);
                        }
                        e
                    }
                    Err(e) => {
                        log::write(
                            root,
                            &[Event::new(
                                Done::Failed,
                                format!("the upstream could not be brought: {e}"),
                            )],
                        );
                        std::thread::sleep(every.min(SCHEDULE_LOOK));
                        continue;
                    }
                }
            }
            _ => Event::new(
                Done::Failed,
                "the upstream could not be brought: no git or fossil program",
            ),
        };
        log::write(root, &[event]);
    }
}
