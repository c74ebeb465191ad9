//! A run's cgroups, v2 or v1: where each controller is mounted, the run's directories made and limited, its use read, its processes killed.

use crate::run::Unavailable;
use std::ffi::CString;
use std::fmt;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::Serialize;

use super::{BWRAP_PROCESSES, BudgetLimits, Limit, PARENT};
use crate::run::SandboxError;
use crate::run::preflight::Unenforceable;

/// Which cgroup interface a hierarchy offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CgroupVersion {
    /// A legacy hierarchy holding one or more controllers.
    #[serde(rename = "v1")]
    V1,
    /// The unified hierarchy.
    #[serde(rename = "v2")]
    V2,
}

impl fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CgroupVersion::V1 => "v1",
            CgroupVersion::V2 => "v2",
        })
    }
}

/// The cgroup directory through which one controller holds a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CgroupSlot {
    /// The hierarchy's interface.
    pub version: CgroupVersion,
    /// The run's own cgroup directory in that hierarchy.
    pub dir: PathBuf,
}

/// Where and how a run's cgroup budget will be held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CgroupPlan {
    /// CPU seconds in total, polled from the cgroup's usage.
    pub cpu_seconds: Option<u64>,
    /// Memory limit in bytes.
    pub memory_bytes: Option<u64>,
    /// Processes at once, as asked (the cgroup allows bubblewrap's own on top).
    pub processes: Option<u64>,
    /// Where CPU usage is read, when `cpu_seconds` is set.
    pub cpu: Option<CgroupSlot>,
    /// Where the memory limit is set, when `memory_bytes` is set.
    pub memory: Option<CgroupSlot>,
    /// Where the process limit is set, when `processes` is set.
    pub pids: Option<CgroupSlot>,
    /// Where the run's processes are frozen when it pauses, where the
    /// host's v1 freezer stands in a hierarchy of its own (elsewhere a
    /// slot's own directory freezes them, or nothing can). Not part of
    /// the plan as it is shown: it limits nothing.
    #[serde(skip)]
    pub freezer: Option<PathBuf>,
}

/// A controller a budget field needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Controller {
    Cpu,
    Memory,
    Pids,
}

impl Controller {
    pub(crate) const ALL: [Controller; 3] = [Controller::Cpu, Controller::Memory, Controller::Pids];

    pub(crate) fn field(self) -> &'static str {
        match self {
            Controller::Cpu => "budget.cpu",
            Controller::Memory => "budget.memory",
            Controller::Pids => "budget.processes",
        }
    }

    fn v2_name(self) -> &'static str {
        match self {
            Controller::Cpu => "cpu",
            Controller::Memory => "memory",
            Controller::Pids => "pids",
        }
    }

    fn v1_name(self) -> &'static str {
        match self {
            Controller::Cpu => "cpuacct",
            Controller::Memory => "memory",
            Controller::Pids => "pids",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Controller::Cpu => "cpu accounting",
            Controller::Memory => "memory",
            Controller::Pids => "pids",
        }
    }

    fn needs_enabling(self) -> bool {
        self != Controller::Cpu
    }
}

struct Mounts {
    v2: Option<PathBuf>,
    v1: Vec<(PathBuf, Vec<String>)>,
}

fn unescape_mount_path(s: &str) -> PathBuf {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let v = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsStr::from_bytes(&out))
}

fn mounts() -> Mounts {
    let mut m = Mounts {
        v2: None,
        v1: Vec::new(),
    };
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return m;
    };
    for line in info.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let Some(mountpoint) = left.split(' ').nth(4) else {
            continue;
        };
        let mut right = right.split(' ');
        let fstype = right.next().unwrap_or("");
        let superopts = right.nth(1).unwrap_or("");
        let mountpoint = unescape_mount_path(mountpoint);
        match fstype {
            "cgroup2" if m.v2.is_none() => m.v2 = Some(mountpoint),
            "cgroup" => {
                m.v1.push((mountpoint, superopts.split(',').map(String::from).collect()))
            }
            _ => {}
        }
    }
    m
}

fn v2_controllers(root: &Path) -> Vec<String> {
    fs::read_to_string(root.join("cgroup.controllers"))
        .map(|s| s.split_whitespace().map(String::from).collect())
        .unwrap_or_default()
}

/// The hierarchy root through which `controller` can be used on this host.
pub(crate) fn locate(controller: Controller) -> Result<(CgroupVersion, PathBuf), Unavailable> {
    let m = mounts();
    if let Some(v2) = &m.v2
        && v2_controllers(v2).iter().any(|c| c == controller.v2_name())
    {
        return Ok((CgroupVersion::V2, v2.clone()));
    }
    if let Some((path, _)) =
        m.v1.iter()
            .find(|(_, opts)| opts.iter().any(|o| o == controller.v1_name()))
    {
        return Ok((CgroupVersion::V1, path.clone()));
    }
    if controller == Controller::Cpu
        && let Some(v2) = m.v2
    {
        return Ok((CgroupVersion::V2, v2));
    }
    Err(Unavailable(format!(
        "no mounted cgroup hierarchy offers the {} controller",
        controller.describe()
    )))
}

impl CgroupPlan {
    /// The cgroup a run named `run_name` needs for `budget`, or `None` when only `wall` is set.
    pub(crate) fn for_run(
        run_name: &str,
        budget: &BudgetLimits,
    ) -> Result<Option<CgroupPlan>, Unenforceable> {
        if !budget.needs_cgroup() {
            return Ok(None);
        }
        let slot = |asked: bool, c: Controller| -> Result<Option<CgroupSlot>, Unenforceable> {
            if !asked {
                return Ok(None);
            }
            let (version, root) = locate(c).map_err(|Unavailable(reason)| Unenforceable {
                field: c.field(),
                reason,
            })?;
            Ok(Some(CgroupSlot {
                version,
                dir: root.join(PARENT).join(run_name),
            }))
        };
        let mut plan = CgroupPlan {
            cpu_seconds: budget.cpu_seconds,
            memory_bytes: budget.memory_bytes,
            processes: budget.processes,
            cpu: slot(budget.cpu_seconds.is_some(), Controller::Cpu)?,
            memory: slot(budget.memory_bytes.is_some(), Controller::Memory)?,
            pids: slot(budget.processes.is_some(), Controller::Pids)?,
            freezer: None,
        };
        plan.freezer = freezer_apart(&plan).map(|root| root.join(PARENT).join(run_name));
        Ok(Some(plan))
    }
}

/// The roots of this host's cgroup hierarchies (v2's, and each v1
/// one's), read once for many runs' [`left`].
pub(crate) fn roots() -> Vec<PathBuf> {
    let m = mounts();
    m.v2.into_iter()
        .chain(m.v1.into_iter().map(|(root, _)| root))
        .collect()
}

/// The cgroup directories a run named `run_name` has under `roots` now:
/// what its watcher left when it ended without removing them (killed, or
/// the host went down).
pub(crate) fn left(roots: &[PathBuf], run_name: &str) -> Vec<PathBuf> {
    roots
        .iter()
        .map(|root| root.join(PARENT).join(run_name))
        .filter(|d| d.is_dir())
        .collect()
}

/// Ends what stands in `dirs`, the cgroups a run left ([`left`]),
/// thawed first, and removes them; whether none is left. Only for a run
/// no watcher holds.
pub(crate) fn clear_left(dirs: Vec<PathBuf>) -> bool {
    if dirs.is_empty() {
        return true;
    }
    let cg = Cgroup {
        plan: CgroupPlan {
            cpu_seconds: None,
            memory_bytes: None,
            processes: None,
            cpu: None,
            memory: None,
            pids: None,
            freezer: None,
        },
        dirs,
        removed: AtomicBool::new(false),
    };
    cg.kill_all();
    cg.remove()
}

/// The root of the host's v1 freezer hierarchy when it stands apart from
/// every hierarchy `plan` already places the run in (a v2 directory, or
/// a v1 one the freezer shares, freezes the run itself).
fn freezer_apart(plan: &CgroupPlan) -> Option<PathBuf> {
    let slots = [&plan.cpu, &plan.memory, &plan.pids];
    let slots: Vec<&CgroupSlot> = slots.into_iter().flatten().collect();
    if slots.iter().any(|s| s.version == CgroupVersion::V2) {
        return None;
    }
    let (root, _) = mounts()
        .v1
        .into_iter()
        .find(|(_, opts)| opts.iter().any(|o| o == "freezer"))?;
    (!slots.iter().any(|s| s.dir.starts_with(&root))).then_some(root)
}

fn cg_err(path: &Path, source: io::Error) -> SandboxError {
    SandboxError::Cgroup {
        path: path.to_path_buf(),
        source,
    }
}

fn write_file(path: &Path, value: &str) -> Result<(), SandboxError> {
    fs::write(path, value).map_err(|e| cg_err(path, e))
}

fn mkdir_parent(dir: &Path) -> Result<(), SandboxError> {
    match fs::create_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(cg_err(dir, e)),
        _ => Ok(()),
    }
}

fn mkdir_fresh(dir: &Path) -> Result<(), SandboxError> {
    match fs::create_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_dir(dir).map_err(|e| {
                cg_err(
                    dir,
                    io::Error::new(
                        e.kind(),
                        format!("left by an earlier run and still busy: {e}"),
                    ),
                )
            })?;
            fs::create_dir(dir).map_err(|e| cg_err(dir, e))
        }
        r => r.map_err(|e| cg_err(dir, e)),
    }
}

fn enable_v2(parent: &Path, controllers: &[Controller]) -> Result<(), SandboxError> {
    let file = parent.join("cgroup.subtree_control");
    let on = fs::read_to_string(&file).map_err(|e| cg_err(&file, e))?;
    let missing: Vec<String> = controllers
        .iter()
        .filter(|c| !on.split_whitespace().any(|o| o == c.v2_name()))
        .map(|c| format!("+{}", c.v2_name()))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    write_file(&file, &missing.join(" "))
}

/// Prepares `dir`, the run's cgroup in a hierarchy, enabling `controllers` on the way for v2.
pub(crate) fn make_dir(
    version: CgroupVersion,
    dir: &Path,
    controllers: &[Controller],
) -> Result<(), SandboxError> {
    let parent = dir
        .parent()
        .ok_or_else(|| cg_err(dir, io::Error::other("has no parent")))?;
    let root = parent
        .parent()
        .ok_or_else(|| cg_err(parent, io::Error::other("has no parent")))?;
    let to_enable: Vec<Controller> = controllers
        .iter()
        .copied()
        .filter(|c| version == CgroupVersion::V2 && c.needs_enabling())
        .collect();
    if !to_enable.is_empty() {
        enable_v2(root, &to_enable)?;
    }
    mkdir_parent(parent)?;
    if !to_enable.is_empty() {
        enable_v2(parent, &to_enable)?;
    }
    mkdir_fresh(dir)
}

fn read_keyed(path: &Path, key: &str) -> Option<u64> {
    let text = fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        (parts.next() == Some(key))
            .then(|| parts.next()?.parse().ok())
            .flatten()
    })
}

fn read_number(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A run's cgroups while it runs: limits set, usage read, members killed, directories removed.
#[derive(Debug)]
pub(crate) struct Cgroup {
    plan: CgroupPlan,
    dirs: Vec<PathBuf>,
    removed: AtomicBool,
}

impl Cgroup {
    /// Creates the run's cgroups and sets every limit of `plan`, or leaves nothing behind.
    pub(crate) fn create(plan: &CgroupPlan) -> Result<Cgroup, SandboxError> {
        let mut cg = Cgroup {
            plan: plan.clone(),
            dirs: Vec::new(),
            removed: AtomicBool::new(false),
        };
        let slots = [
            (Controller::Cpu, &plan.cpu),
            (Controller::Memory, &plan.memory),
            (Controller::Pids, &plan.pids),
        ];
        for (_, slot) in slots {
            let Some(slot) = slot else { continue };
            if cg.dirs.contains(&slot.dir) {
                continue;
            }
            let here: Vec<Controller> = slots
                .iter()
                .filter(|(_, s)| s.as_ref().is_some_and(|s| s.dir == slot.dir))
                .map(|(c, _)| *c)
                .collect();
            if let Err(e) = make_dir(slot.version, &slot.dir, &here) {
                cg.remove();
                return Err(e);
            }
            cg.dirs.push(slot.dir.clone());
        }
        // A freezer apart only pauses the run: where it cannot be made,
        // the run goes on unable to be frozen, as on a host without one.
        if let Some(dir) = &plan.freezer
            && !cg.dirs.contains(dir)
            && make_dir(CgroupVersion::V1, dir, &[]).is_ok()
        {
            cg.dirs.push(dir.clone());
        }
        if let Err(e) = cg.set_limits() {
            cg.remove();
            return Err(e);
        }
        Ok(cg)
    }

    fn set_limits(&self) -> Result<(), SandboxError> {
        if let (Some(slot), Some(bytes)) = (&self.plan.memory, self.plan.memory_bytes) {
            set_memory(slot, bytes)?;
        }
        if let (Some(slot), Some(n)) = (&self.plan.pids, self.plan.processes) {
            set_pids(&slot.dir, n.saturating_add(BWRAP_PROCESSES))?;
        }
        Ok(())
    }

    /// The file of each of the run's cgroups that the child, one thread before exec, writes
    /// `0` to to join it: a v1 hierarchy's `tasks`, else `cgroup.procs`. Moving one thread
    /// through `tasks` spares cgroup v1 the lock over every process's threads that
    /// `cgroup.procs` takes, whose taking waits out an RCU grace period: 8 to 15 ms of a
    /// run's start on this kernel when no cgroup had moved just before (HISTORY 475).
    pub(crate) fn procs_files(&self) -> Vec<CString> {
        self.dirs
            .iter()
            .map(|d| match d.join("tasks") {
                tasks if tasks.is_file() => tasks,
                _ => d.join("cgroup.procs"),
            })
            .filter_map(|f| CString::new(f.as_os_str().as_bytes()).ok())
            .collect()
    }

    /// CPU time used so far by every process of the run together.
    pub(crate) fn cpu_used(&self) -> Option<Duration> {
        let slot = self.plan.cpu.as_ref()?;
        match slot.version {
            CgroupVersion::V1 => {
                read_number(&slot.dir.join("cpuacct.usage")).map(Duration::from_nanos)
            }
            CgroupVersion::V2 => {
                read_keyed(&slot.dir.join("cpu.stat"), "usage_usec").map(Duration::from_micros)
            }
        }
    }

    /// The most memory the run's processes held at once, in bytes, where
    /// its memory is limited (the kernel keeps the peak of that cgroup).
    pub(crate) fn memory_peak(&self) -> Option<u64> {
        let slot = self.plan.memory.as_ref()?;
        match slot.version {
            CgroupVersion::V1 => read_number(&slot.dir.join("memory.max_usage_in_bytes")),
            CgroupVersion::V2 => read_number(&slot.dir.join("memory.peak")),
        }
    }

    /// Whether the CPU time in total is over the budget, with `more` given on top.
    pub(crate) fn cpu_over(&self, more: Duration) -> bool {
        match (self.plan.cpu_seconds, self.cpu_used()) {
            (Some(max), Some(used)) => used > Duration::from_secs(max) + more,
            _ => false,
        }
    }

    /// CPU time the run may still use before its budget (with `more` given
    /// on top) is over, when it holds one.
    pub(crate) fn cpu_left(&self, more: Duration) -> Option<Duration> {
        let max = Duration::from_secs(self.plan.cpu_seconds?) + more;
        Some(max.saturating_sub(self.cpu_used()?))
    }

    /// Whether the memory limit made the kernel kill a process of the run.
    pub(crate) fn memory_hit(&self) -> bool {
        let Some(slot) = &self.plan.memory else {
            return false;
        };
        match slot.version {
            CgroupVersion::V1 => {
                let control = slot.dir.join("memory.oom_control");
                match read_keyed(&control, "oom_kill") {
                    Some(n) => n > 0,
                    None => read_number(&slot.dir.join("memory.failcnt")).is_some_and(|n| n > 0),
                }
            }
            CgroupVersion::V2 => {
                let events = slot.dir.join("memory.events");
                read_keyed(&events, "oom_kill").is_some_and(|n| n > 0)
                    || read_keyed(&events, "oom_group_kill").is_some_and(|n| n > 0)
            }
        }
    }

    /// Whether a process of the run was refused because the process limit was reached.
    pub(crate) fn processes_hit(&self) -> bool {
        self.plan
            .pids
            .as_ref()
            .and_then(|s| read_keyed(&s.dir.join("pids.events"), "max"))
            .is_some_and(|n| n > 0)
    }

    /// The limit the run has run into, if any, checked in the order memory,
    /// processes, cpu (with `cpu_more` given on top of its budget).
    pub(crate) fn limit_hit(&self, cpu_more: Duration) -> Option<Limit> {
        if self.memory_hit() {
            Some(Limit::Memory)
        } else if self.processes_hit() {
            Some(Limit::Processes)
        } else if self.cpu_over(cpu_more) {
            Some(Limit::Cpu)
        } else {
            None
        }
    }

    /// What tells of each limit the kernel holds the run to (memory, processes) as it is
    /// reached, to be polled rather than read on a clock: a v2 `memory.events` or
    /// `pids.events` open for `POLLPRI`, a v1 memory controller's OOM eventfd; and whether
    /// every limit the run holds has one (a v1 `pids.events` tells no one: it must be read).
    pub(crate) fn notices(&self) -> (Vec<Notice>, bool) {
        let mut notices = Vec::new();
        let mut every = true;
        if let Some(slot) = &self.plan.memory {
            let notice = match slot.version {
                CgroupVersion::V2 => Notice::file(&slot.dir.join("memory.events")),
                CgroupVersion::V1 => Notice::oom_v1(&slot.dir),
            };
            every &= notice.is_some();
            notices.extend(notice);
        }
        if let Some(slot) = &self.plan.pids {
            let notice = match slot.version {
                CgroupVersion::V2 => Notice::file(&slot.dir.join("pids.events")),
                CgroupVersion::V1 => None,
            };
            every &= notice.is_some();
            notices.extend(notice);
        }
        (notices, every)
    }

    /// How many processes the run has now, when it holds a process limit.
    pub(crate) fn processes_now(&self) -> Option<u64> {
        read_number(&self.plan.pids.as_ref()?.dir.join("pids.current"))
    }

    fn members(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .dirs
            .iter()
            .filter_map(|d| fs::read_to_string(d.join("cgroup.procs")).ok())
            .flat_map(|s| {
                s.lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Freezes every process of the run (`frozen`), or thaws them, where
    /// one of its cgroups offers a freezer: v2's `cgroup.freeze`, or v1's
    /// `freezer.state` where the freezer shares a controller's hierarchy.
    /// Whether one did.
    pub(crate) fn freeze(&self, frozen: bool) -> bool {
        if self.removed.load(Ordering::SeqCst) {
            return false;
        }
        let mut done = false;
        for d in &self.dirs {
            let v2 = d.join("cgroup.freeze");
            let v1 = d.join("freezer.state");
            done |= if v2.exists() {
                fs::write(&v2, if frozen { "1" } else { "0" }).is_ok()
            } else if v1.exists() {
                fs::write(&v1, if frozen { "FROZEN" } else { "THAWED" }).is_ok()
            } else {
                false
            };
        }
        done
    }

    /// Kills every process in the run's cgroups until none is left (or a
    /// second has passed), thawed first: a frozen v1 process dies only
    /// once thawed.
    pub(crate) fn kill_all(&self) {
        if self.removed.load(Ordering::SeqCst) {
            return;
        }
        self.freeze(false);
        for d in &self.dirs {
            let k = d.join("cgroup.kill");
            if k.exists() {
                let _ = fs::write(&k, "1");
            }
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            let pids = self.members();
            if pids.is_empty() || Instant::now() > deadline {
                return;
            }
            for p in pids {
                if p > 0 {
                    let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
                }
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Removes the run's cgroup directories, retrying while the last processes finish exiting.
    pub(crate) fn remove(&self) -> bool {
        if self.removed.swap(true, Ordering::SeqCst) {
            return true;
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut all = true;
        for d in &self.dirs {
            loop {
                match fs::remove_dir(d) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(_) if Instant::now() < deadline => {
                        for p in fs::read_to_string(d.join("cgroup.procs"))
                            .unwrap_or_default()
                            .lines()
                        {
                            if let Ok(p) = p.trim().parse::<i32>() {
                                let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
                            }
                        }
                        thread::sleep(Duration::from_millis(20));
                    }
                    Err(_) => {
                        all = false;
                        break;
                    }
                }
            }
        }
        all
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if !self.removed.load(Ordering::SeqCst) {
            self.kill_all();
            self.remove();
        }
    }
}

/// A file descriptor the kernel makes ready when a cgroup's limit is reached: an events file
/// (ready with `POLLPRI` when it changes, reset by reading it) or an eventfd (ready to read).
#[derive(Debug)]
pub(crate) struct Notice {
    fd: fs::File,
    /// Whether it is an events file (else an eventfd).
    file: bool,
    /// The v1 `memory.oom_control` the eventfd listens to, held open while it does.
    _control: Option<fs::File>,
}

impl Notice {
    fn file(path: &Path) -> Option<Notice> {
        let f = fs::File::open(path).ok()?;
        let notice = Notice {
            fd: f,
            file: true,
            _control: None,
        };
        notice.clear();
        Some(notice)
    }

    fn oom_v1(dir: &Path) -> Option<Notice> {
        let control = fs::File::open(dir.join("memory.oom_control")).ok()?;
        // SAFETY: eventfd takes no pointer; a negative answer is an error.
        let raw =
            unsafe { nix::libc::eventfd(0, nix::libc::EFD_CLOEXEC | nix::libc::EFD_NONBLOCK) };
        if raw < 0 {
            return None;
        }
        // SAFETY: `raw` is a new descriptor this alone owns.
        let fd = fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) });
        let line = format!("{} {}", fd.as_raw_fd(), control.as_raw_fd());
        fs::write(dir.join("cgroup.event_control"), line).ok()?;
        Some(Notice {
            fd,
            file: false,
            _control: Some(control),
        })
    }

    /// What `poll` waits for on it.
    pub(crate) fn events(&self) -> nix::poll::PollFlags {
        use nix::poll::PollFlags;
        if self.file {
            PollFlags::POLLPRI
        } else {
            PollFlags::POLLIN
        }
    }

    /// Reads what made it ready, so it waits for the next change.
    pub(crate) fn clear(&self) {
        use std::io::Read;
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 512];
        let _ = if self.file {
            self.fd.read_at(&mut buf, 0)
        } else {
            (&self.fd).read(&mut buf)
        };
    }
}

impl AsFd for Notice {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn set_memory(slot: &CgroupSlot, bytes: u64) -> Result<(), SandboxError> {
    let value = bytes.to_string();
    match slot.version {
        CgroupVersion::V1 => {
            write_file(&slot.dir.join("memory.limit_in_bytes"), &value)?;
            let memsw = slot.dir.join("memory.memsw.limit_in_bytes");
            if memsw.exists() {
                write_file(&memsw, &value)?;
            }
        }
        CgroupVersion::V2 => {
            write_file(&slot.dir.join("memory.max"), &value)?;
            let swap = slot.dir.join("memory.swap.max");
            if swap.exists() {
                write_file(&swap, "0")?;
            }
            let group = slot.dir.join("memory.oom.group");
            if group.exists() {
                write_file(&group, "1")?;
            }
        }
    }
    Ok(())
}

fn set_pids(dir: &Path, max: u64) -> Result<(), SandboxError> {
    write_file(&dir.join("pids.max"), &max.to_string())
}

/// Tries, in a throwaway cgroup, what a run's cgroup for `controller` needs on this host.
/// The host's cgroup mounts as `/proc/self/mountinfo` lists them, in order: what every
/// controller's probe depends on.
pub(crate) fn cgroup_mounts() -> String {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" - cgroup ") || l.contains(" - cgroup2 "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// [`probe`], its success kept in this process while the host's cgroup mounts are as they
/// were ([`cgroup_mounts`]): a long-lived node tries each controller once, not at each
/// record. A failure is tried again next time.
pub(crate) fn probe_kept(controller: Controller, name: &str) -> Result<String, Unavailable> {
    static KEPT: std::sync::Mutex<Vec<(String, Controller, String)>> =
        std::sync::Mutex::new(Vec::new());
    let mounts = cgroup_mounts();
    let mut kept = KEPT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, _, how)) = kept
        .iter()
        .find(|(m, c, _)| *c == controller && *m == mounts)
    {
        return Ok(how.clone());
    }
    let found = probe(controller, name)?;
    if kept.len() >= 12 {
        kept.remove(0);
    }
    kept.push((mounts, controller, found.clone()));
    Ok(found)
}

pub(crate) fn probe(controller: Controller, name: &str) -> Result<String, Unavailable> {
    let (version, root) = locate(controller)?;
    let dir = root.join(PARENT).join(name);
    let how = format!("cgroup {version} at {}", root.display());
    let result = make_dir(version, &dir, &[controller]).and_then(|()| {
        let procs = dir.join("cgroup.procs");
        fs::OpenOptions::new()
            .write(true)
            .open(&procs)
            .map_err(|e| cg_err(&procs, e))?;
        match controller {
            Controller::Memory => {
                let slot = CgroupSlot {
                    version,
                    dir: dir.clone(),
                };
                set_memory(&slot, 1 << 40)
            }
            Controller::Pids => set_pids(&dir, 1 << 20),
            Controller::Cpu => {
                let file = match version {
                    CgroupVersion::V1 => dir.join("cpuacct.usage"),
                    CgroupVersion::V2 => dir.join("cpu.stat"),
                };
                fs::read_to_string(&file)
                    .map(|_| ())
                    .map_err(|e| cg_err(&file, e))
            }
        }
    });
    let _ = fs::remove_dir(&dir);
    result.map(|()| how).map_err(|e| Unavailable(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_v2() -> (tempfile::TempDir, CgroupPlan) {
        let root = tempfile::tempdir().unwrap();
        fs::write(root.path().join("cgroup.subtree_control"), "cpu io\n").unwrap();
        let dir = root.path().join(PARENT).join("r1");
        fs::create_dir(root.path().join(PARENT)).unwrap();
        fs::write(root.path().join(PARENT).join("cgroup.subtree_control"), "").unwrap();
        let slot = CgroupSlot {
            version: CgroupVersion::V2,
            dir,
        };
        let plan = CgroupPlan {
            cpu_seconds: Some(2),
            memory_bytes: Some(1 << 20),
            processes: Some(5),
            cpu: Some(slot.clone()),
            memory: Some(slot.clone()),
            pids: Some(slot),
            freezer: None,
        };
        (root, plan)
    }

    #[test]
    fn v2_limits_are_written_and_read_in_one_directory() {
        let (root, plan) = fake_v2();
        let cg = Cgroup::create(&plan).unwrap();
        let dir = plan.memory.as_ref().unwrap().dir.clone();
        assert_eq!(cg.dirs, std::slice::from_ref(&dir));
        let controls = |p: &Path| fs::read_to_string(p.join("cgroup.subtree_control")).unwrap();
        assert_eq!(controls(root.path()), "+memory +pids");
        assert_eq!(controls(&root.path().join(PARENT)), "+memory +pids");
        assert_eq!(
            fs::read_to_string(dir.join("memory.max")).unwrap(),
            "1048576"
        );
        assert_eq!(fs::read_to_string(dir.join("pids.max")).unwrap(), "7");
        assert_eq!(cg.limit_hit(Duration::ZERO), None);

        fs::write(dir.join("cpu.stat"), "usage_usec 2500000\nuser_usec 1\n").unwrap();
        assert_eq!(cg.cpu_used(), Some(Duration::from_micros(2_500_000)));
        assert_eq!(cg.limit_hit(Duration::ZERO), Some(Limit::Cpu));
        fs::write(dir.join("pids.events"), "max 3\n").unwrap();
        assert_eq!(cg.limit_hit(Duration::ZERO), Some(Limit::Processes));
        fs::write(
            dir.join("memory.events"),
            "low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\n",
        )
        .unwrap();
        assert_eq!(cg.limit_hit(Duration::ZERO), Some(Limit::Memory));

        for f in [
            "memory.max",
            "pids.max",
            "cpu.stat",
            "pids.events",
            "memory.events",
        ] {
            fs::remove_file(dir.join(f)).unwrap();
        }
        assert!(cg.remove());
        assert!(!dir.exists());
    }

    #[test]
    fn v1_memory_kill_is_read_from_oom_control() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(PARENT).join("r2");
        let plan = CgroupPlan {
            cpu_seconds: None,
            memory_bytes: Some(4096),
            processes: None,
            cpu: None,
            memory: Some(CgroupSlot {
                version: CgroupVersion::V1,
                dir: dir.clone(),
            }),
            pids: None,
            freezer: None,
        };
        let cg = Cgroup::create(&plan).unwrap();
        assert_eq!(
            fs::read_to_string(dir.join("memory.limit_in_bytes")).unwrap(),
            "4096"
        );
        fs::write(
            dir.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
        )
        .unwrap();
        assert!(!cg.memory_hit());
        fs::write(
            dir.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        )
        .unwrap();
        assert!(cg.memory_hit());
        for f in ["memory.limit_in_bytes", "memory.oom_control"] {
            fs::remove_file(dir.join(f)).unwrap();
        }
        assert!(cg.remove());
    }

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape_mount_path("/a\\040b"), PathBuf::from("/a b"));
        assert_eq!(unescape_mount_path("/plain"), PathBuf::from("/plain"));
    }
}
