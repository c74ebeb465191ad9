//! The run's own home, made fresh for each run and removed when it ends:
//! what the runner page's named homes hold, the credentials it names (never
//! the model's key, which the run's relay alone holds),
//! and what the repository says to its agent (`AGENTS.md` for Codex,
//! `CLAUDE.md` for Claude Code), read from the served repository or
//! inside the sandbox, never from the workspace on the host.

use super::{WatchError, field};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The run's own home: removed when dropped, however the run's start or
/// end goes, so nothing of it (its credentials among it) outlives the run.
pub(super) struct FreshHome(pub(super) PathBuf);

impl Drop for FreshHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The most of `AGENTS.md` given to Codex as the repository's word.
const AGENTS_MD_MAX: usize = 64 << 10;

/// What the repository says to its agent: `AGENTS.md` of the newest
/// check-in on the branch a checkout opens (what the workspace holds),
/// read from the served repository, never from the workspace.
pub(super) fn agents_md(repo: &crate::fossil::Repository) -> Option<String> {
    let branch = repo.main_branch().ok()?;
    let tip = repo.branch_tip(&branch).ok()??;
    let bytes = repo.file_at(tip, "AGENTS.md").ok()??;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(AGENTS_MD_MAX)]).into_owned();
    Some(format!(
        "What this repository says to its agent (its AGENTS.md):\n\n{text}"
    ))
}

/// Lets Claude Code read what the repository says to its agent
/// (`CLAUDE.md` in the checkout), which `--setting-sources user` would
/// leave out with the checkout's settings: the run's own memory file in
/// its home imports it by path, read inside the sandbox, never here.
pub(super) fn repository_word(home: &Path, ws: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = home.join(".claude");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(dir.join("CLAUDE.md"))?;
    writeln!(f, "\n@{}/CLAUDE.md", ws.display())
}

/// Makes the run's own home at `home`, fresh: what the page's named homes
/// hold (the node's directories `homes/NAME` under its root), then each
/// credential the page names written where it says, its owner's alone.
/// Answers the variables the credentials are given as; a note naming the
/// field when one cannot be given.
pub(super) fn fresh_home(
    root: &Path,
    home: &Path,
    page: &crate::node::runner::RunnerPage,
) -> Result<std::collections::BTreeMap<String, String>, WatchError> {
    use std::os::unix::fs::DirBuilderExt;
    let _ = std::fs::remove_dir_all(home);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(home)
        .map_err(|e| field("program.home", format!("{}: {e}", home.display())))?;
    for (i, name) in page.homes.iter().enumerate() {
        if name.starts_with('/') {
            continue;
        }
        let from = root.join("homes").join(name);
        if !from.is_dir() {
            return Err(field(
                format!("homes[{i}]"),
                format!(
                    "the node keeps no home {name:?} (a directory homes/{name} under its root)"
                ),
            ));
        }
        crate::run::sandbox::copy_contents(&from, home).map_err(|e| {
            field(
                format!("homes[{i}]"),
                format!("{name:?} could not be copied: {e}"),
            )
        })?;
    }
    // The model's key is the relay's alone: never written here or given as a variable.
    let uses: Vec<_> = page
        .credentials
        .iter()
        .filter(|c| page.model.as_ref().is_none_or(|m| m.credential != c.name))
        .cloned()
        .collect();
    let given = crate::node::credentials::give(root, &uses).map_err(|e| field("credentials", e))?;
    let mut env = std::collections::BTreeMap::new();
    for g in given {
        match g {
            crate::node::credentials::Given::Env(name, value) => {
                env.insert(name, value);
            }
            crate::node::credentials::Given::File(rel, bytes) => {
                let path = home.join(&rel);
                if let Some(parent) = path.parent() {
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(parent)
                        .map_err(|e| field("credentials", format!("{rel}: {e}")))?;
                }
                write_private(&path, &bytes)
                    .map_err(|e| field("credentials", format!("{rel}: {e}")))?;
            }
        }
    }
    Ok(env)
}

/// Writes `bytes` to `path` in the run's home, made anew and its owner's
/// alone, never through a link left there.
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)?
        .write_all(bytes)
}
