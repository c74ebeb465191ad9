//! Whether this node can hold what a record asks (C3, C6, C7): the
//! runner's counting page, each restriction, each sandbox field and budget
//! limit within the node's ceiling, and the host paths a sender without
//! admin or setup may bind.

use super::NodeError;
use super::config::NodeConfig;
use super::receipts::Receipts;
use super::runner;
use crate::fossil::Repository;
use crate::protocol::kinds::{self, Problem, Record};
use crate::run::{BudgetLimits, SandboxFields};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The restrictions (C6) this node holds runs to: a no-password run's
/// tools run in its watcher, outside its sandbox, as its user; `push` and
/// `save` hold it to its branch, `post` to its place; `stage` lets it
/// stage a release; `review` holds each of its writes for a decision.
pub fn restrictions_enforced() -> Vec<String> {
    ["no_password", "branch", "own_thread", "stage", "review"]
        .map(String::from)
        .to_vec()
}

/// The restrictions an agent machine holds its runs to: all but `stage`,
/// since the release root is on the serving host. A `review` run's calls
/// are held by the machine and made on the server once approved.
pub fn machine_restrictions_enforced() -> Vec<String> {
    let mut all = restrictions_enforced();
    all.retain(|r| r != "stage");
    all
}

/// The sandbox fields and budget limits a record asks for; a record naming
/// `sandbox.hosts` shares no network (its way out is its watcher's proxy).
pub fn limits(record: &Record) -> (SandboxFields, BudgetLimits) {
    let sandbox = SandboxFields {
        network: record.sandbox.network && record.sandbox.hosts.is_none(),
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
) -> Result<Result<(), Problem>, NodeError> {
    let offered = match record.runner == runner::COMMAND {
        true => None,
        false => Some(Receipts::served(repo).runner(repo, &record.runner)?),
    };
    let ceiling = super::root_of(repo)?
        .and_then(|root| NodeConfig::load(&root))
        .map(|c| c.ceiling)
        .unwrap_or_default();
    let found = enforceable(record, offered.as_ref(), &restrictions_enforced(), &ceiling);
    if found.is_err() {
        return Ok(found);
    }
    reviewers_are_logins(repo, record)
}

/// Refuses, naming `restrict.review_by[i]`, a reviewer that is no login
/// of this repository: its held writes would wait on no one.
fn reviewers_are_logins(
    repo: &Repository,
    record: &Record,
) -> Result<Result<(), Problem>, NodeError> {
    for (i, login) in record.restrict.review_by.iter().flatten().enumerate() {
        if repo.capabilities(login)?.is_none() {
            return Ok(Err(Problem::new(
                format!("restrict.review_by[{i}]"),
                format!("{} is no login of this repository", kinds::shown(login)),
            )));
        }
    }
    Ok(Ok(()))
}

/// [`check_enforceable`] once the runner is looked for: how this node
/// finds its page (none for `command`), which must count and read, and
/// name its model service where the record counts tokens (its relay alone
/// counts them) and give prices where it counts cost, the restrictions this node enforces and its ceiling.
pub fn enforceable(
    record: &Record,
    offered: Option<&runner::Offered>,
    enforced: &[String],
    ceiling: &crate::run::Ceiling,
) -> Result<(), Problem> {
    if let Some(why) = offered.and_then(|o| o.refusal(&record.runner)) {
        return Err(why);
    }
    let names_model = matches!(offered, Some(runner::Offered::Page(p)) if p.model.is_some());
    if record.budget.tokens.is_some() && !names_model {
        return Err(Problem {
            field: "budget.tokens".into(),
            reason: format!(
                "the runner {:?} names no model service (`model` on its page), so nothing counts its tokens",
                record.runner
            ),
        });
    }
    let gives_prices = matches!(offered, Some(runner::Offered::Page(p)) if p.prices.is_some());
    if record.budget.cost.is_some() && !gives_prices {
        return Err(Problem {
            field: "budget.cost".into(),
            reason: format!(
                "the runner {:?} gives no prices (`prices` on its page), so nothing reckons its cost",
                record.runner
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
