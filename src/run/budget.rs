//! A run's budget: its limits over all of its processes together, within the node's ceiling,
//! and its disk: a filesystem of its own of the ceiling's size.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::preflight::Unenforceable;

mod cgroup;
pub mod disk;

pub(crate) use cgroup::{
    Cgroup, Controller, Notice, clear_left as clear_left_cgroups, left as cgroups_left, probe,
    probe_kept, roots as cgroup_roots,
};
pub use cgroup::{CgroupPlan, CgroupSlot, CgroupVersion};
pub use disk::{Disk, DiskUse, Pool as DiskPool, weigh_least};

/// The name of the cgroup, in each hierarchy, under which every run's cgroup lives.
pub const PARENT: &str = "ocx";

/// Processes bubblewrap keeps in a run besides the program's own: its monitor and the namespace's init.
pub const BWRAP_PROCESSES: u64 = 2;

/// The budget fields of a record: limits over all of a run's processes together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BudgetLimits {
    /// Wall-clock time from start, by the supervisor's own clock.
    #[serde(serialize_with = "super::serialize_secs")]
    pub wall: Duration,
    /// CPU time in total, summed across every process of the run.
    pub cpu_seconds: Option<u64>,
    /// Memory in use at once by all processes of the run.
    pub memory_bytes: Option<u64>,
    /// Processes (and threads) alive at once, not counting bubblewrap's own.
    pub processes: Option<u64>,
    /// Bytes the run may write in all (its workspace, home, homes' copies and `/tmp`), held by
    /// a filesystem of its own ([`Disk`]); every run on a node has the node's ceiling's.
    pub disk_bytes: Option<u64>,
}

impl BudgetLimits {
    /// A budget of wall-clock time alone.
    pub fn wall(wall: Duration) -> Self {
        BudgetLimits {
            wall,
            cpu_seconds: None,
            memory_bytes: None,
            processes: None,
            disk_bytes: None,
        }
    }

    /// Whether a field other than `wall` is set, so the run needs a cgroup.
    pub fn needs_cgroup(&self) -> bool {
        self.cpu_seconds.is_some() || self.memory_bytes.is_some() || self.processes.is_some()
    }
}

/// The node-wide ceiling on each run's memory, processes and disk, set in the node's
/// configuration: a record naming no such limit gets the ceiling's, one asking more is refused
/// naming the field. A record names no disk: every run gets the ceiling's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ceiling {
    /// Memory in use at once by all of a run's processes, in bytes.
    #[serde(default = "Ceiling::default_memory")]
    pub memory_bytes: u64,
    /// Processes (and threads) alive at once in a run.
    #[serde(default = "Ceiling::default_processes")]
    pub processes: u64,
    /// Bytes a run may write in all: its workspace, home, homes' copies and `/tmp`.
    #[serde(default = "Ceiling::default_disk")]
    pub disk_bytes: u64,
}

impl Default for Ceiling {
    fn default() -> Self {
        Ceiling {
            memory_bytes: Ceiling::default_memory(),
            processes: Ceiling::default_processes(),
            disk_bytes: Ceiling::default_disk(),
        }
    }
}

impl Ceiling {
    fn default_memory() -> u64 {
        4 << 30
    }

    fn default_processes() -> u64 {
        1024
    }

    fn default_disk() -> u64 {
        8 << 30
    }

    /// `budget` held to the ceiling: a limit it names is kept when within the ceiling, and a
    /// limit it lacks becomes the ceiling's where this host holds that controller
    /// (`memory_held`, `processes_held`); the disk always (a host that cannot make a run's
    /// filesystem refuses every run, [`crate::run::Preflight::check`]). Refused, naming the
    /// field, when it asks for more.
    pub fn hold(
        &self,
        budget: &BudgetLimits,
        memory_held: bool,
        processes_held: bool,
    ) -> Result<BudgetLimits, Unenforceable> {
        let over = |field: &'static str, asked: u64, most: u64, unit: &str| Unenforceable {
            field,
            reason: format!("asks {asked}{unit}, more than this node's ceiling of {most}{unit}"),
        };
        let mut held = budget.clone();
        match budget.memory_bytes {
            Some(m) if m > self.memory_bytes => {
                return Err(over("budget.memory", m, self.memory_bytes, " bytes"));
            }
            None if memory_held => held.memory_bytes = Some(self.memory_bytes),
            _ => {}
        }
        match budget.processes {
            Some(p) if p > self.processes => {
                return Err(over("budget.processes", p, self.processes, " processes"));
            }
            None if processes_held => held.processes = Some(self.processes),
            _ => {}
        }
        match budget.disk_bytes {
            Some(d) if d > self.disk_bytes => {
                return Err(over("budget.disk", d, self.disk_bytes, " bytes"));
            }
            None => held.disk_bytes = Some(self.disk_bytes),
            _ => {}
        }
        Ok(held)
    }

    /// [`Ceiling::held_here`], kept in the file `kept` while the host's cgroup mounts are
    /// as they were when both controllers were found held: a run's watcher, a process of
    /// its own, reads what the node's first run found rather than trying the cgroups
    /// again (each try makes and removes a cgroup, some 15 ms each on cgroup v1). `kept`
    /// must be in a directory of root's alone.
    pub fn held_here_kept(kept: &std::path::Path) -> (bool, bool) {
        let mounts = cgroup::cgroup_mounts();
        let found: Option<serde_json::Value> = std::fs::read(kept)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        if found.is_some_and(|f| f["mounts"] == mounts.as_str()) {
            return (true, true);
        }
        let held = Ceiling::held_here();
        if held == (true, true) {
            let tmp = kept.with_extension("tmp");
            let _ = crate::file::write_whole_unsynced(
                kept,
                &tmp,
                serde_json::json!({ "mounts": mounts })
                    .to_string()
                    .as_bytes(),
                0o600,
            );
        }
        held
    }

    /// Whether this host holds the memory and the process controllers now, tried in a
    /// throwaway cgroup each.
    pub fn held_here() -> (bool, bool) {
        let name = format!("ceiling-{}", std::process::id());
        (
            probe(Controller::Memory, &name).is_ok(),
            probe(Controller::Pids, &name).is_ok(),
        )
    }
}

/// The budget field whose limit ended a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Limit {
    /// The wall-clock time ran out.
    Wall,
    /// The CPU time in total ran out.
    Cpu,
    /// The processes together asked for more memory than allowed.
    Memory,
    /// The processes together tried to exceed the process count.
    Processes,
    /// The run wrote its filesystem full.
    Disk,
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Limit::Wall => "wall",
            Limit::Cpu => "cpu",
            Limit::Memory => "memory",
            Limit::Processes => "processes",
            Limit::Disk => "disk",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controllers_held_are_kept_while_the_cgroup_mounts_are_as_they_were() {
        let dir = tempfile::tempdir().unwrap();
        let kept = dir.path().join("held.json");
        let here = Ceiling::held_here();
        assert_eq!(Ceiling::held_here_kept(&kept), here);
        if here != (true, true) {
            assert!(!kept.exists(), "only both held is kept");
            return;
        }
        let read = |f: &std::path::Path| -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap()
        };
        assert_eq!(read(&kept)["mounts"], cgroup::cgroup_mounts());
        std::fs::write(&kept, r#"{"mounts":"another host's"}"#).unwrap();
        assert_eq!(Ceiling::held_here_kept(&kept), (true, true));
        assert_eq!(
            read(&kept)["mounts"],
            cgroup::cgroup_mounts(),
            "found anew once the mounts changed"
        );
    }

    #[test]
    fn every_budget_gets_the_ceilings_disk_and_one_asking_more_is_refused_naming_it() {
        let ceiling = Ceiling {
            disk_bytes: 64 << 20,
            ..Ceiling::default()
        };
        let wall = BudgetLimits::wall(Duration::from_secs(60));
        let held = ceiling.hold(&wall, false, false).unwrap();
        assert_eq!(held.disk_bytes, Some(64 << 20));
        let within = BudgetLimits {
            disk_bytes: Some(32 << 20),
            ..wall.clone()
        };
        assert_eq!(
            ceiling.hold(&within, false, false).unwrap().disk_bytes,
            Some(32 << 20)
        );
        let over = BudgetLimits {
            disk_bytes: Some(65 << 20),
            ..wall
        };
        let refused = ceiling.hold(&over, false, false).unwrap_err();
        assert_eq!(refused.field, "budget.disk");
        assert!(refused.reason.contains("ceiling"), "{}", refused.reason);
    }

    #[test]
    fn a_ceiling_without_a_disk_reads_as_eight_gib() {
        let c: Ceiling = serde_json::from_str(r#"{"memory_bytes": 1024, "processes": 8}"#).unwrap();
        assert_eq!(c.disk_bytes, 8 << 30);
    }
}
