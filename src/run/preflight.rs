//! What this host can hold of a run's boundary now, and the first field asked for that it cannot.

#![allow(clippy::disallowed_methods)] // where bubblewrap is tried, as docs/architecture.md says

use crate::run::Unavailable;
use std::fmt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

use nix::unistd::{Gid, Uid};

use super::BudgetLimits;
use super::account::{RunAccount, become_account};
use super::budget::{self, Controller};
use super::sandbox::{SandboxFields, find_bwrap};

/// Whether one part of the boundary can be held here, how, or why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Capability {
    /// True when the host can hold it now.
    pub available: bool,
    /// How it is held, when it is.
    pub how: Option<String>,
    /// Why it cannot be held, when it cannot.
    pub reason: Option<String>,
}

impl Capability {
    fn yes(how: impl Into<String>) -> Self {
        Capability {
            available: true,
            how: Some(how.into()),
            reason: None,
        }
    }

    fn no(reason: impl Into<String>) -> Self {
        Capability {
            available: false,
            how: None,
            reason: Some(reason.into()),
        }
    }

    fn from_result(r: Result<String, Unavailable>) -> Self {
        match r {
            Ok(how) => Capability::yes(how),
            Err(Unavailable(reason)) => Capability::no(reason),
        }
    }
}

/// What this host can enforce now, found by trying each part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Preflight {
    /// The bubblewrap found, if any.
    pub bwrap: Option<PathBuf>,
    /// The host account bubblewrap is tried as, when this process runs as root: a uid no run
    /// is given (each run has a uid of its own from the node's range).
    pub account: Option<RunAccount>,
    /// Bubblewrap, started as that account when there is one, starts a program in new user,
    /// pid, ipc, uts and mount namespaces, and no further user namespace can be made inside.
    pub sandbox: Capability,
    /// Bubblewrap can give the program a user namespace of its own, as every run needs.
    pub user_namespaces: Capability,
    /// Bubblewrap can also give the program a network namespace of its own.
    pub network_isolation: Capability,
    /// The run's CPU time in total can be read from a cgroup.
    pub cpu: Capability,
    /// The run's memory can be limited by a cgroup.
    pub memory: Capability,
    /// The run's process count can be limited by a cgroup.
    pub processes: Capability,
    /// The run's writes can be held to its disk budget by a filesystem of its own, which
    /// every run needs: a loop device, `mkfs.ext4` and `mount`, as root.
    pub disk: Capability,
}

/// A field a record asks for that this host cannot hold, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unenforceable {
    /// The record field, such as `budget.memory` or `sandbox.network`.
    pub field: &'static str,
    /// Why the host cannot hold it.
    pub reason: String,
}

impl fmt::Display for Unenforceable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "this node cannot hold {}: {}", self.field, self.reason)
    }
}

fn try_bwrap(
    bwrap: &PathBuf,
    account: Option<&RunAccount>,
    unshare: &[&str],
) -> Result<(), Unavailable> {
    let mut cmd = Command::new(bwrap);
    if let Some(a) = account {
        let (uid, gid) = (Uid::from_raw(a.uid), Gid::from_raw(a.gid));
        // SAFETY: the hook only sets groups, gid and uid, all async-signal-safe, and allocates nothing.
        unsafe {
            cmd.pre_exec(move || Ok(become_account(uid, gid)?));
        }
    }
    cmd.args(unshare)
        .args(["--new-session", "--die-with-parent"])
        .args(["--cap-drop", "ALL", "--ro-bind", "/", "/", "true"])
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    match cmd.output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => {
            let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
            Err(Unavailable(if said.is_empty() {
                format!("bubblewrap failed ({})", out.status)
            } else {
                format!("bubblewrap failed: {said}")
            }))
        }
        Err(e) => Err(Unavailable(format!("bubblewrap could not start: {e}"))),
    }
}

const ISOLATED: [&str; 3] = ["--unshare-all", "--unshare-user", "--disable-userns"];

/// How long [`preflight_recent`] answers a preflight already found: long
/// enough that a server answering `status` many times a second starts
/// bubblewrap and probes the cgroups once, short enough that a change on
/// the host shows within a few seconds.
pub const PREFLIGHT_KEPT: Duration = Duration::from_secs(5);

/// [`preflight`], found at most [`PREFLIGHT_KEPT`] ago in this process: what
/// `status` says. The node's own judgement of a record tries the cgroups
/// and the disk anew, and bubblewrap as [`bwrap_found`] keeps it.
pub fn preflight_recent() -> Preflight {
    static RECENT: Mutex<Option<(Instant, Preflight)>> = Mutex::new(None);
    let mut recent = RECENT.lock().unwrap_or_else(PoisonError::into_inner);
    match recent.as_ref() {
        Some((at, found)) if at.elapsed() < PREFLIGHT_KEPT => found.clone(),
        _ => {
            let found = preflight();
            *recent = Some((Instant::now(), found.clone()));
            found
        }
    }
}

/// What bubblewrap's probes depend on: the program (its path, size,
/// inode, modification and change times), the kernel (its release, and
/// each setting that allows or bounds user namespaces) and the account
/// it is tried as. Probes found under one fingerprint hold while it is
/// unchanged.
fn bwrap_fingerprint(bwrap: &std::path::Path, account: Option<&RunAccount>) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(bwrap).ok()?;
    let mut print = format!(
        "{}|{}|{}|{}.{}|{}.{}|{:?}",
        bwrap.display(),
        m.len(),
        m.ino(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
        account.map(|a| (a.uid, a.gid))
    );
    for setting in [
        "/proc/sys/kernel/osrelease",
        "/proc/sys/user/max_user_namespaces",
        "/proc/sys/kernel/unprivileged_userns_clone",
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
    ] {
        print.push('|');
        print.push_str(std::fs::read_to_string(setting).unwrap_or_default().trim());
    }
    Some(print)
}

/// Bubblewrap's three probes (a user namespace; new namespaces, none
/// nested; and a network namespace of its own), tried once for what they
/// depend on ([`bwrap_fingerprint`]) in this process: a node tries them
/// once when it starts, and again only when bubblewrap, the kernel's
/// settings or the account change, never at each record. Only probes
/// that all succeeded are kept.
fn bwrap_found(bwrap: Option<&PathBuf>, account: Option<&RunAccount>) -> [Capability; 3] {
    static FOUND: Mutex<Vec<(String, [Capability; 3])>> = Mutex::new(Vec::new());
    let Some(b) = bwrap else {
        let missing = Capability::no("bubblewrap (bwrap) is not installed");
        return [missing.clone(), missing.clone(), missing];
    };
    let print = bwrap_fingerprint(b, account);
    let mut found = FOUND.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, caps)) = found.iter().find(|(p, _)| Some(p) == print.as_ref()) {
        return caps.clone();
    }
    let caps = try_bwrap_all(b, account);
    // A probe that failed (perhaps for a moment, as a fork refused under
    // load) is tried again next time, as before.
    if let Some(p) = print.filter(|_| caps.iter().all(|c| c.available)) {
        if found.len() >= 4 {
            found.remove(0);
        }
        found.push((p, caps.clone()));
    }
    caps
}

/// Tries bubblewrap's three probes anew.
fn try_bwrap_all(b: &PathBuf, account: Option<&RunAccount>) -> [Capability; 3] {
    let user_namespaces = match try_bwrap(b, account, &["--unshare-user"]) {
        Ok(()) => Capability::yes("a user namespace of its own"),
        Err(Unavailable(reason)) => Capability::no(reason),
    };
    let (sandbox, network_isolation) = match try_bwrap(b, account, &ISOLATED) {
        Ok(()) => (
            Capability::yes("bubblewrap with new namespaces, none nested"),
            Capability::yes("a network namespace of its own"),
        ),
        Err(Unavailable(isolated)) => {
            match try_bwrap(b, account, &[&ISOLATED[..], &["--share-net"]].concat()) {
                Ok(()) => (
                    Capability::yes("bubblewrap with new namespaces, none nested"),
                    Capability::no(isolated),
                ),
                Err(Unavailable(reason)) => {
                    (Capability::no(reason.clone()), Capability::no(reason))
                }
            }
        }
    };
    [user_namespaces, sandbox, network_isolation]
}

/// Tries what this host can enforce now: bubblewrap (as the run account, when the node runs as
/// root), network isolation, each cgroup controller, and what a run's own filesystem needs.
pub fn preflight() -> Preflight {
    static PROBES: AtomicU64 = AtomicU64::new(0);
    let account = Uid::effective()
        .is_root()
        .then(|| RunAccount::of_uid(super::uids::PROBE_UID));
    let bwrap = find_bwrap();
    let [user_namespaces, sandbox, network_isolation] =
        bwrap_found(bwrap.as_ref(), account.as_ref());
    let probe = |c: Controller| {
        let n = PROBES.fetch_add(1, Ordering::Relaxed);
        Capability::from_result(budget::probe_kept(
            c,
            &format!("preflight-{}-{n}", std::process::id()),
        ))
    };
    Preflight {
        bwrap,
        account,
        sandbox,
        user_namespaces,
        network_isolation,
        cpu: probe(Controller::Cpu),
        memory: probe(Controller::Memory),
        processes: probe(Controller::Pids),
        disk: Capability::from_result(budget::disk::probe()),
    }
}

impl Preflight {
    /// The first field of `sandbox` and `budget` asked for that this host cannot hold.
    pub fn check(
        &self,
        sandbox: &SandboxFields,
        budget: &BudgetLimits,
    ) -> Result<(), Unenforceable> {
        let refuse = |field: &'static str, c: &Capability| Unenforceable {
            field,
            reason: c.reason.clone().unwrap_or_else(|| "unavailable".into()),
        };
        if !self.sandbox.available {
            return Err(refuse("sandbox", &self.sandbox));
        }
        if !sandbox.network && !self.network_isolation.available {
            return Err(refuse("sandbox.network", &self.network_isolation));
        }
        for c in Controller::ALL {
            let (asked, cap) = match c {
                Controller::Cpu => (budget.cpu_seconds.is_some(), &self.cpu),
                Controller::Memory => (budget.memory_bytes.is_some(), &self.memory),
                Controller::Pids => (budget.processes.is_some(), &self.processes),
            };
            if asked && !cap.available {
                return Err(refuse(c.field(), cap));
            }
        }
        if let Some(bytes) = budget.disk_bytes {
            if !self.disk.available {
                return Err(refuse("budget.disk", &self.disk));
            }
            if bytes < budget::disk::LEAST {
                return Err(Unenforceable {
                    field: "budget.disk",
                    reason: format!(
                        "{bytes} bytes is less than the {} MiB a run's filesystem needs",
                        budget::disk::LEAST >> 20
                    ),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in for bubblewrap that notes each start in `log` and
    /// succeeds, written anew (its times change) each call.
    fn noting_bwrap(at: &std::path::Path, log: &std::path::Path, version: u32) {
        std::fs::write(
            at,
            format!(
                "#!/bin/sh\n# {version}\necho started >> {}\n",
                log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn bubblewraps_probes_are_tried_once_until_what_they_probe_changes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let (bwrap, log) = (dir.path().join("bwrap"), dir.path().join("log"));
        std::fs::write(&log, "").unwrap();
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666)).unwrap();
        noting_bwrap(&bwrap, &log, 1);
        let account = Uid::effective()
            .is_root()
            .then(|| RunAccount::of_uid(crate::run::uids::PROBE_UID));
        let starts = || std::fs::read_to_string(&log).unwrap().lines().count();
        let first = bwrap_found(Some(&bwrap), account.as_ref());
        assert!(first.iter().all(|c| c.available), "{first:?}");
        assert_eq!(
            starts(),
            2,
            "two probes: a user namespace, then all at once"
        );
        assert_eq!(bwrap_found(Some(&bwrap), account.as_ref()), first);
        assert_eq!(starts(), 2, "kept while bubblewrap is unchanged");
        std::thread::sleep(Duration::from_millis(20));
        noting_bwrap(&bwrap, &log, 2);
        bwrap_found(Some(&bwrap), account.as_ref());
        assert_eq!(starts(), 4, "tried anew once bubblewrap changed");
    }
}
