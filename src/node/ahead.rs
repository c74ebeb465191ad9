//! Workspaces made ahead (HISTORY 476): the node's furnisher, `ocx
//! workspace-ahead --root ROOT --into DIR`, started by the node for each
//! of its runs' filesystems it makes ahead. It clones the node's
//! repository as `nobody` into `DIR/ws` and opens a checkout there, as a
//! run's workspace lies in its filesystem; the node then formats the
//! filesystem holding a copy of `DIR` (`mkfs.ext4 -d`), and the run that
//! takes it gives that workspace its login and pulls, in place of cloning
//! and opening its own.
//!
//! The furnisher holds the node's lock with the node and is killed when
//! the node ends, so nothing of it outlives the node. A repository that
//! `nobody` may not clone gets no workspace made ahead: the filesystem is
//! made empty as before, and its run clones its own.

use super::NodeError;
use super::config::NodeConfig;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

/// The furnisher's command, after `ocx`.
pub const COMMAND: &str = "workspace-ahead";

/// The directory in a run's filesystem that holds its workspace.
pub const WORKSPACE: &str = "ws";

/// Makes a workspace ahead in `into`, an empty directory of the node's
/// pool at `root`; why not, when it cannot.
pub fn furnish(root: &Path, into: &Path) -> Result<(), NodeError> {
    let pool = NodeConfig::disks(root);
    let in_pool = into.parent() == Some(pool.as_path())
        && std::fs::symlink_metadata(into).is_ok_and(|m| m.file_type().is_dir())
        && std::fs::read_dir(into).is_ok_and(|mut d| d.next().is_none());
    if !in_pool {
        return Err(NodeError::Ahead(format!(
            "{} is no empty directory of the node's pool {}",
            into.display(),
            pool.display()
        )));
    }
    let cfg = NodeConfig::load(root).ok_or(NodeError::NotANode)?;
    let fossil = crate::fossil::Fossil::locate()?;
    let ws = into.join(WORKSPACE);
    std::fs::DirBuilder::new().mode(0o700).create(&ws)?;
    fossil.workspace_ahead(&cfg.url, &ws).map_err(|e| {
        let _ = std::fs::remove_dir_all(&ws);
        NodeError::Ahead(format!("its workspace could not be made ahead: {e}"))
    })
}
