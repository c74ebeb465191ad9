//! The node: the host serving a repository, which acts on the records
//! addressed to it. For now: how to tell that a repository is one, its
//! runners, and what it can enforce.

pub mod runner;

use crate::fossil::{FossilError, Repository};
use crate::protocol::kinds::{Problem, Record};

/// The word OCX's after-receive hook command carries, by which a node's
/// repository is known.
pub const HOOK_MARK: &str = "ocx-node-hook";

/// Whether OCX's after-receive hook is installed in `repo`, which makes it
/// a node. Hooks are never cloned, so only the served repository has it.
pub fn is_node(repo: &Repository) -> Result<bool, FossilError> {
    Ok(repo
        .after_receive_hooks()?
        .iter()
        .any(|c| c.contains(HOOK_MARK)))
}

/// The restrictions (C6) this node holds runs to. None yet.
pub fn restrictions_enforced() -> Vec<String> {
    Vec::new()
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
    Ok(Ok(()))
}
