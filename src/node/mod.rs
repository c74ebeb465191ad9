//! The node: the host serving a repository, which acts on the records
//! addressed to it. For now, only how to tell that a repository is one.

use crate::fossil::{FossilError, Repository};

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
