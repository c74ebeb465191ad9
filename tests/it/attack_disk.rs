//! Attacks on the host's disk from inside a run: a run writing far past
//! the node's disk ceiling into its workspace, its `/tmp` and its home, and
//! a watcher killed while its run's filesystem is mounted. Each is made for
//! real, on the node (as root) and runs of `attack_host`, whose program does
//! what each post tells it.

use crate::attack_host::Host;
use serde_json::json;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// The disk ceiling these nodes give each run.
const CEILING: u64 = 32 << 20;

/// What each run tries to write: far more than its ceiling.
const WRITTEN: &str = "200M";

/// Whether a filesystem is mounted at `dir` or anywhere under it, by this
/// process's mount table.
fn mounted_under(dir: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|at| Path::new(at).starts_with(dir))
}

/// Whether a loop device is still backed by `image`.
fn loop_backed_by(image: &Path) -> bool {
    let Ok(devices) = std::fs::read_dir("/sys/block") else {
        return false;
    };
    devices.filter_map(Result::ok).any(|d| {
        std::fs::read_to_string(d.path().join("loop/backing_file"))
            .is_ok_and(|b| Path::new(b.trim().trim_end_matches(" (deleted)")) == image)
    })
}

/// Bytes allocated on the host's disk to files under `dir`, none followed
/// through a link and no other filesystem entered.
fn allocated(dir: &Path) -> u64 {
    let dev = std::fs::symlink_metadata(dir).unwrap().dev();
    let mut total = 0;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let Ok(m) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            if m.dev() != dev {
                continue;
            }
            total += m.blocks() * 512;
            if m.is_dir() {
                todo.push(e.path());
            }
        }
    }
    total
}

/// Waits until nothing of the run's filesystem in `dir` is left: no mount,
/// no loop device, no file.
fn assert_disk_gone(dir: &Path, what: &str) {
    let image = dir.join(ocx::run::budget::disk::IMAGE);
    let until = Instant::now() + Duration::from_secs(10);
    while (mounted_under(dir) || loop_backed_by(&image) || image.exists()) && Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!mounted_under(dir), "{what}: the run's mount is gone");
    assert!(!loop_backed_by(&image), "{what}: its loop device is freed");
    assert!(!image.exists(), "{what}: its file is removed");
    assert!(
        !dir.join(ocx::run::budget::disk::MOUNT).exists(),
        "{what}: and its mount point"
    );
}

fn node() -> Host {
    Host::new(|cfg| cfg["ceiling"]["disk_bytes"] = json!(CEILING))
}

#[test]
fn a_run_writing_past_its_disk_ceiling_is_ended_budget_and_the_host_keeps_nothing() {
    let h = node();
    let status = h.served.repo.json(&["status"]).ok();
    assert_eq!(status["ceiling"]["disk_bytes"], CEILING, "{status:#}");
    assert_eq!(status["preflight"]["disk"]["available"], true, "{status:#}");
    let beside = h.served.repo.dir.path().to_path_buf();
    for (place, path) in [
        ("the workspace", "big"),
        ("/tmp", "/tmp/big"),
        ("the run's home", "\"$HOME/big\""),
    ] {
        let record = h.record("attack", &[]);
        h.started(&record);
        let dir = h.run_dir(&record);
        assert!(
            mounted_under(&dir),
            "{place}: the run has a filesystem of its own"
        );
        let room = h.sh(
            &record,
            "df -B1 --output=size . /tmp \"$HOME\" | tail -n +2 | sort -n | tail -n 1",
        );
        let most: u64 = room
            .strip_prefix("rc=0 out=")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{place}: df said {room}"));
        assert!(
            most <= CEILING,
            "{place}: the run sees no more room than its ceiling: {room}"
        );
        h.post(
            &record,
            &format!("sh head -c {WRITTEN} /dev/zero > {path}; sleep 300"),
        );
        let (outcome, note) = h.response(&record);
        assert_eq!(outcome, "budget", "{place}: {note}");
        assert!(note.starts_with("disk limit reached after "), "{note}");
        assert!(
            note.contains("of its disk budget of 32 MiB"),
            "{place}: the note names the disk and its budget: {note}"
        );
        assert_disk_gone(&dir, place);
        let kept = allocated(&beside);
        assert!(
            kept < CEILING,
            "{place}: the host beside the repository holds {kept} bytes after the run"
        );
    }
    let after = h.record("attack", &[]);
    h.started(&after);
    h.post(&after, "exit");
    assert_eq!(
        h.response(&after).0,
        "exited",
        "the node still runs records"
    );
    assert_disk_gone(&h.run_dir(&after), "a run that ended by itself");
}

#[test]
fn a_watchers_filesystem_left_mounted_when_it_was_killed_is_cleared_at_node_start() {
    let h = node();
    let record = h.record("attack", &[]);
    h.started(&record);
    let dir = h.run_dir(&record);
    assert!(
        h.sh(&record, "head -c 4M /dev/zero > big && echo ok")
            .starts_with("rc=0 out=ok"),
        "the run wrote within its disk"
    );
    crate::support::kill_from(&dir.join("watcher.pid"));
    let until = Instant::now() + Duration::from_secs(10);
    while ocx::node::watcher_alive(&dir) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(!ocx::node::watcher_alive(&dir), "the watcher is gone");
    assert!(
        mounted_under(&dir),
        "the killed watcher left the run's filesystem mounted"
    );
    assert!(
        !cgroups_of(&record).is_empty(),
        "the killed watcher left the run's cgroups"
    );
    let started = h.served.repo.json(&["node", "start"]).ok();
    assert_eq!(
        started["lost"].as_array().map(Vec::len),
        Some(1),
        "{started:#}"
    );
    assert_disk_gone(&dir, "at the node's start");
    assert_eq!(
        cgroups_of(&record),
        Vec::<std::path::PathBuf>::new(),
        "its cgroups removed at the node's start"
    );
    assert_eq!(h.response(&record).0, "lost");
}

/// The cgroup directories `record`'s run has in this host's hierarchies
/// (v2's, or each v1 controller's).
fn cgroups_of(record: &str) -> Vec<std::path::PathBuf> {
    let name = format!("run-{}", &record[..16]);
    let parent = ocx::run::budget::PARENT;
    let hierarchies = std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .map(|h| h.path());
    hierarchies
        .chain([std::path::PathBuf::from("/sys/fs/cgroup")])
        .map(|h| h.join(parent).join(&name))
        .filter(|d| d.is_dir())
        .collect()
}

#[test]
fn a_disk_ceiling_too_small_for_a_filesystem_refuses_each_record_naming_budget_disk() {
    let h = Host::new(|cfg| cfg["ceiling"]["disk_bytes"] = json!(1 << 20));
    let record = h.record("attack", &[]);
    let (outcome, note) = h.response(&record);
    assert_eq!(outcome, "refused", "{note}");
    assert!(note.starts_with("budget.disk:"), "{note}");
    assert!(!h.run_dir(&record).exists(), "no run was prepared");
    assert_eq!(h.log(&record), "", "nothing ran");
}

#[test]
fn a_command_run_writing_past_its_disk_ceiling_gets_a_failing_verdict_naming_the_disk() {
    use std::os::unix::fs::PermissionsExt;
    let h = node();
    let script = h.served.repo.dir.path().join("prog/fill.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nhead -c {WRITTEN} /dev/zero > big\necho wrote it all\nexit 0\n"),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let record = h
        .served
        .repo
        .json(&crate::support::checkin_record_args(
            script.to_str().unwrap(),
            &["--wall", "1m"],
        ))
        .ok_str("record");
    if let Err(last) =
        crate::support::handled_all(&h.served.repo.file, &h.root(), Duration::from_secs(60))
    {
        panic!(
            "the node never handled row {last}: {}",
            crate::support::node_log_text(&h.root())
        );
    }
    let checkin = h.served.repo.commit_as("maint", "a.txt", "a", None);
    let until = Instant::now() + Duration::from_secs(60);
    let value = loop {
        let v = h
            .served
            .repo
            .json(&["verdicts", "--checkin", &checkin])
            .ok();
        if let Some(j) = v["counting"].as_array().unwrap().first() {
            break j["value"].as_str().unwrap().to_string();
        }
        assert!(Instant::now() < until, "no verdict on {checkin}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        value,
        format!("fail: disk limit reached (against {record})")
    );
    assert_disk_gone(&h.run_dir(&record), "after a command run");
    let kept = allocated(h.served.repo.dir.path());
    assert!(
        kept < CEILING,
        "the host beside the repository holds {kept} bytes"
    );
}
