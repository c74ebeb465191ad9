//! A run's directory, the node's alone: its inbox (a named pipe) and its
//! spool of deliveries, each given whole and read in the order given; its
//! watcher's lock and pid, by which the node knows a run still going and
//! ends one; and the claim that starts a check-in's command run once.

use super::config::NodeConfig;
use super::{inbox, lock, wake};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
pub fn make_run_dir(dir: &Path) -> std::io::Result<()> {
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

/// Gives a session one delivery, whole: the line is written to a file of
/// the run's spool (under a temporary name, then renamed, so it is never
/// seen in part), then a one-byte wake-up goes into its inbox. Nothing is
/// given when no watcher reads the inbox. Only the node's wake gives
/// deliveries, one at a time (under its lock), so numbers never collide.
/// The file's time is `received`, when the artifact it tells of was
/// received, so the watcher that reads it counts the delivery's delay.
/// The file is not synced to the disk: its reader, the run's watcher,
/// does not outlive the host either, and a node giving one post to
/// hundreds of runs would wait on the disk once for each.
pub fn deliver(
    dir: &Path,
    line: &str,
    received: Option<std::time::SystemTime>,
) -> std::io::Result<()> {
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
    let given = spool.join(format!("{n:020}"));
    crate::file::write_whole_unsynced(
        &given,
        &spool.join(format!(".{n:020}")),
        escaped.as_bytes(),
        0o600,
    )?;
    if let Some(at) = received {
        let _ = std::fs::File::options()
            .write(true)
            .open(&given)
            .and_then(|f| f.set_modified(at));
    }
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
            let given = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
            let line = std::fs::read(&path)?;
            std::fs::remove_file(&path)?;
            let taken = take(String::from_utf8_lossy(&line).into_owned());
            if let Some(given) = given {
                count_delay(dir, given);
            }
            if !taken {
                return Ok(());
            }
        }
    }
}

/// The file in a run's directory counting its deliveries' delays: a line
/// each, the seconds from the artifact's receipt to the run reading it.
pub const DELAYS: &str = "delays";

/// Adds to the run's [`DELAYS`] the delay of a delivery given at `given`
/// and read now; a clock gone back counts none.
fn count_delay(dir: &Path, given: std::time::SystemTime) {
    let delay = std::time::SystemTime::now()
        .duration_since(given)
        .unwrap_or_default();
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(dir.join(DELAYS))
        .and_then(|mut f| f.write_all(format!("{:.6}\n", delay.as_secs_f64()).as_bytes()));
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

/// How long a sweep waits for the lock of a run whose watcher is gone or
/// ending.
const LET_GO: Duration = Duration::from_secs(5);

/// The lock of the run in `dir`, taken for a sweep of what a gone watcher
/// left; none while its watcher lives. A killed watcher lets go of its
/// lock only once the last of its descriptors is closed, some while after
/// its terminal's socket (a person joined sees the joining end first): a
/// lock still held while the process `watcher.pid` names is gone or ending
/// is waited for, [`LET_GO`] at most.
pub fn lock_when_gone(dir: &Path) -> std::io::Result<Option<crate::lock::Held>> {
    let path = dir.join("lock");
    let until = Instant::now() + LET_GO;
    loop {
        if let Some(held) = lock(&path, false)? {
            return Ok(Some(held));
        }
        if Instant::now() >= until || !watcher_ending(dir) {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the process `dir`'s `watcher.pid` names is gone or ending: no
/// such process, a zombie, or one left without its memory, as a process is
/// once killed, before it closes its descriptors. False when that cannot
/// be told.
fn watcher_ending(dir: &Path) -> bool {
    let Some(pid) = std::fs::read_to_string(dir.join("watcher.pid"))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
    else {
        return false;
    };
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(status) => ending(&status),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Whether a process whose `/proc/PID/status` says `status` is ending: a
/// zombie or dead, or holding no memory (a process of a program always
/// does until it exits).
fn ending(status: &str) -> bool {
    let state = status
        .lines()
        .find_map(|l| l.strip_prefix("State:"))
        .map(str::trim_start);
    matches!(state.and_then(|s| s.chars().next()), Some('Z' | 'X'))
        || !status.lines().any(|l| l.starts_with("VmSize:"))
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
                .find(|h| NodeConfig::run_dir(root, h) == dir)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_ending_once_a_zombie_or_without_its_memory() {
        let living =
            "Name:\tocx\nState:\tS (sleeping)\nPid:\t7\nVmPeak:\t  9 kB\nVmSize:\t  9 kB\n";
        assert!(!ending(living));
        assert!(ending("Name:\tocx\nState:\tZ (zombie)\nPid:\t7\n"));
        assert!(ending("Name:\tocx\nState:\tR (running)\nPid:\t7\n"));
    }

    #[test]
    fn a_run_whose_watcher_is_gone_is_locked_at_once_and_one_held_alive_is_not_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        assert!(lock_when_gone(dir.path()).unwrap().is_some(), "no watcher");
        let held = lock(&dir.path().join("lock"), false).unwrap().unwrap();
        std::fs::write(
            dir.path().join("watcher.pid"),
            std::process::id().to_string(),
        )
        .unwrap();
        let asked = Instant::now();
        assert!(
            lock_when_gone(dir.path()).unwrap().is_none(),
            "its watcher lives"
        );
        assert!(asked.elapsed() < LET_GO, "not waited for");
        drop(held);
    }
}
