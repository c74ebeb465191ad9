//! A `command` record's run: its program once on one check-in, in a
//! fresh workspace of that check-in and within the record's budget, and
//! the `ci` verdict it earns, added as the record's user.

use super::{
    Site, WatchError, file, held, lease, on_disk, private_log, say, until_ended, watching,
    workspace,
};
use crate::fossil::artifact::{self, TagChange};
use crate::fossil::store::{self, Batch};
use crate::node::config::NodeConfig;
use crate::node::{self, respond};
use crate::protocol::found::StandingRecord;
use crate::protocol::verdict;
use crate::run::Program;
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

/// Runs `r`'s command on `checkin` in the run's directory `dir`, adds its
/// verdict and pokes the node; a failure to run it is a failing verdict.
pub(super) fn run(
    cfg: &NodeConfig,
    fossil: &crate::fossil::Fossil,
    repo: &crate::fossil::Repository,
    r: &StandingRecord,
    dir: &Path,
    checkin: &str,
) -> Result<(), WatchError> {
    let _lock = node::lock(&dir.join("command.lock"), true).map_err(file("the run's lock"))?;
    let _watching = node::lock(&dir.join("lock"), true).map_err(file("the run's lock"))?;
    watching(dir)?;
    let root = dir
        .parent()
        .and_then(Path::parent)
        .ok_or(WatchError::Cannot(
            "the run's directory is not under a node's root",
        ))?;
    let lease = lease(root, dir)?;
    let (sandbox, budget) = node::limits(&r.record);
    let (budget, disk) = match held(root, cfg, &budget)
        .and_then(|budget| on_disk(root, dir, &budget).map(|disk| (budget, disk)))
    {
        Ok(held) => held,
        Err(e) => {
            ci_verdict(
                fossil,
                repo,
                r,
                checkin,
                false,
                &format!("could not run: {e}"),
            )?;
            drop(lease);
            let _ = node::poke(root);
            return Ok(());
        }
    };
    let ws = disk.path().join(format!("ci-{}", &checkin[..16]));
    workspace(fossil, cfg, dir, &ws, &r.record.user, Some(checkin))?;
    let program = Program {
        command: r.record.command.clone().unwrap_or_default(),
        env: Default::default(),
        homes: Vec::new(),
        home: None,
    };
    let log_path = dir.join(format!("ci-{}.log", &checkin[..16]));
    let started = Instant::now();
    let run_name = format!("ci-{}-{}", &r.hash[..10], &checkin[..10]);
    let planned = Site::of(cfg, root, &disk, lease.as_ref())
        .plan(&run_name, &ws, &sandbox, &budget, &program);
    let (pass, reason) = match planned {
        Err(e) => (false, format!("could not run: {e}")),
        Ok(plan) => {
            let out = private_log(&log_path, false)?;
            let err = out.try_clone().map_err(file(log_path.display()))?;
            match crate::run::spawn(&plan, Stdio::null(), Stdio::from(out), Stdio::from(err))
                .and_then(|running| {
                    let (ended, killed) = until_ended(running, None, || None);
                    Ok((ended?, killed.is_some()))
                }) {
                Err(e) => (false, format!("could not run: {e}")),
                Ok((_, true)) if dir.join(node::ENDED_BY_NODE).exists() => {
                    let secs = started.elapsed().as_secs();
                    let note = format!(
                        "ended by its node (ocx node stop --runs) after {secs} seconds, while it ran on check-in {}",
                        &checkin[..10]
                    );
                    respond::respond(fossil, repo, r, &cfg.login, "stopped", &note, true)?;
                    say(&format!("answered stopped: {note}"));
                    drop(disk);
                    drop(lease);
                    let _ = node::poke(root);
                    return Ok(());
                }
                Ok((ended, _)) => {
                    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
                    let last = text
                        .lines()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                        .unwrap_or("")
                        .trim();
                    let last: String = last.chars().filter(|c| !c.is_control()).take(300).collect();
                    let pass = ended.code == Some(0) && ended.limit.is_none();
                    let reason = match (ended.limit, last.is_empty()) {
                        (Some(l), _) => format!("{l} limit reached"),
                        (None, false) => last,
                        (None, true) => format!("exit {}", ended.code.unwrap_or(-1)),
                    };
                    (pass, reason)
                }
            }
        }
    };
    ci_verdict(fossil, repo, r, checkin, pass, &reason)?;
    drop(disk);
    drop(lease);
    let _ = node::poke(root);
    Ok(())
}

/// Adds the `ci` verdict of a command run on `checkin`, as the record's user.
fn ci_verdict(
    fossil: &crate::fossil::Fossil,
    repo: &crate::fossil::Repository,
    r: &StandingRecord,
    checkin: &str,
    pass: bool,
    reason: &str,
) -> Result<(), WatchError> {
    let reason = reason.replace("(against", "(against:");
    let value = verdict::format(pass, &reason, &r.hash);
    let bytes = artifact::control(
        &artifact::now(),
        &r.record.user,
        &[TagChange {
            op: '+',
            name: "ci".into(),
            target: checkin.to_string(),
            value: Some(value.clone()),
        }],
    );
    let mut batch = Batch::default();
    batch.add("ci verdict", bytes, repo.hash_policy()?);
    store::store(fossil, repo, &r.record.user, &batch, true)?;
    say(&format!("ci verdict on {}: {value}", &checkin[..10]));
    Ok(())
}
