//! The after-receive hook that makes a repository a node: its command
//! (which carries [`HOOK_MARK`] and names the node's root), reading the
//! root back from it, the root of an agent machine's node beside its
//! clone, and the pokes that wake a node (the hook's, and a writer's on
//! the node's repository), with what the hook does where no node took one.

use super::config::NodeConfig;
use super::{remote, respond, wake};
use crate::fossil::{FossilError, Repository};
use std::path::{Path, PathBuf};

/// The word OCX's after-receive hook command carries, by which a node's
/// repository (and its root) is known.
pub const HOOK_MARK: &str = "ocx-node-hook";

/// Whether OCX's after-receive hook is installed in `repo`, which makes it
/// a node. Hooks are never cloned, so only the served repository has it.
pub fn is_node(repo: &Repository) -> Result<bool, FossilError> {
    Ok(root_of(repo)?.is_some())
}

/// The node's root, as OCX's hook command in `repo` names it.
pub fn root_of(repo: &Repository) -> Result<Option<PathBuf>, FossilError> {
    Ok(repo
        .after_receive_hooks()?
        .iter()
        .find(|c| c.contains(HOOK_MARK))
        .and_then(|c| root_in(c)))
}

/// The root of the agent machine's node working in clone `repo`, when it
/// is one: beside it, its configuration naming it and a credentials file.
pub fn machine_root(repo: &Repository) -> Option<PathBuf> {
    let root = super::config::default_root(repo.path());
    let cfg = NodeConfig::load(&root)?;
    let same = cfg.repository.canonicalize().ok()? == repo.path().canonicalize().ok()?;
    (cfg.machine.is_some() && same).then_some(root)
}

/// The root a hook command names after `hook-poke`, read as the shell reads it.
fn root_in(command: &str) -> Option<PathBuf> {
    let words = shlex::split(command)?;
    let at = words.iter().position(|w| w == "hook-poke")?;
    words.get(at + 1).map(PathBuf::from)
}

/// The hook command for a node: the program pokes the node at `root`.
/// Fossil runs it through `/bin/sh`, so each path is quoted as the shell
/// reads it back (a path holding `'` or a space included), and
/// [`root_of`] reads it with the same rules.
pub fn hook_command(ocx: &Path, root: &Path) -> String {
    let quote = |p: &Path| {
        shlex::try_quote(&p.to_string_lossy())
            .map(|q| q.into_owned())
            .unwrap_or_else(|_| "''".into())
    };
    format!("{} hook-poke {} # {HOOK_MARK}", quote(ocx), quote(root))
}

/// Pokes the node at `root` to wake it; nothing happens when it is not
/// running. Answers whether a node took the poke.
pub fn poke(root: &Path) -> bool {
    std::os::unix::net::UnixDatagram::unbound()
        .and_then(|s| s.send_to(b"wake", NodeConfig::socket(root)))
        .is_ok()
}

/// What Fossil's after-receive hook does where no node took its poke: when
/// `input` (the hook's, one artifact a line) names a check-in or a tag on
/// one, brings the repository's git export up to date, leaving its mark for
/// any exporter already at work. Quiet: the hook's output goes nowhere.
pub fn export_without_node(root: &Path, input: &[u8]) {
    let Some(cfg) = NodeConfig::load(root) else {
        return;
    };
    let Ok(repo) = Repository::open(&cfg.repository) else {
        return;
    };
    let hashes = crate::fossil::export::hook_input_hashes(input);
    if !repo.adds_to_export(&hashes).unwrap_or(false) {
        return;
    }
    let (Ok(Some(export)), Ok(fossil)) = (
        crate::git::Export::of(&repo),
        crate::fossil::Fossil::at(&cfg.fossil),
    ) else {
        return;
    };
    drop(repo);
    let _ = export.keep_current(&fossil, &cfg.repository, crate::git::export::Wait::No);
}

/// What Fossil's after-receive hook does for agent machines where no node
/// took its poke: keeps C5 for the remote runs among the artifacts `input`
/// names (the hook's, one a line), as the node does at each wake.
pub fn keep_remote_without_node(root: &Path, input: &[u8]) {
    let Some((_, fossil, repo)) = respond::open(root) else {
        return;
    };
    let hashes = crate::fossil::export::hook_input_hashes(input);
    let held_here = wake::State::load(root).held();
    super::log::write(root, &remote::keep(&fossil, &repo, &hashes, &held_here));
}

/// Pokes the node `repo` belongs to, if it is one: a write on the node
/// starts no backoffice, so the writer wakes the node itself (F3).
pub fn poke_repository(repo: &Repository) {
    if let Ok(Some(root)) = root_of(repo) {
        let _ = poke(&root);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_command_reads_back_its_root_whatever_the_path_holds() {
        for root in ["/srv/node", "/srv/a node's root", "/srv/$(x) `y`; z"] {
            let command = hook_command(Path::new("/usr/bin/ocx"), Path::new(root));
            assert!(command.ends_with(&format!(" # {HOOK_MARK}")), "{command}");
            assert_eq!(root_in(&command), Some(PathBuf::from(root)), "{command}");
        }
        assert_eq!(
            root_in("'/usr/bin/ocx' hook-poke '/srv/node' # ocx-node-hook"),
            Some(PathBuf::from("/srv/node"))
        );
    }
}
