//! Workspaces made ahead (HISTORY 476): the node's furnisher, `ocx
//! workspace-ahead --root ROOT --image FILE`, started by the node for each
//! of its runs' filesystems it makes ahead. In a mount namespace of its
//! own, it mounts the filesystem, clones the node's repository there as
//! `nobody` and opens a checkout of it (`ws`, as a run's workspace lies),
//! and unmounts it; the run that takes the filesystem gives that workspace
//! its login and pulls, in place of cloning and opening its own.
//!
//! The furnisher holds the node's lock with the node and is killed when
//! the node ends, so nothing of it outlives the node; its mount is seen by
//! no other process and goes with it however it ends. A repository that
//! `nobody` may not clone gets no workspace made ahead: the filesystem is
//! ready as before, and its run clones its own.

use super::NodeError;
use super::config::NodeConfig;
use crate::run::SandboxError;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

/// The furnisher's command, after `ocx`.
pub const COMMAND: &str = "workspace-ahead";

/// The directory in a run's filesystem that holds its workspace.
pub const WORKSPACE: &str = "ws";

/// Makes a workspace ahead in the filesystem made ahead `image`, a file of
/// the node's pool at `root`; why not, when it cannot.
pub fn furnish(root: &Path, image: &Path) -> Result<(), NodeError> {
    let pool = NodeConfig::disks(root);
    let in_pool = image.parent() == Some(pool.as_path())
        && std::fs::symlink_metadata(image).is_ok_and(|m| m.file_type().is_file());
    if !in_pool {
        return Err(NodeError::Ahead(format!(
            "{} is no filesystem made ahead in {}",
            image.display(),
            pool.display()
        )));
    }
    let cfg = NodeConfig::load(root).ok_or(NodeError::NotANode)?;
    let fossil = crate::fossil::Fossil::locate()?;
    crate::run::furnish_ahead(image, |at| {
        let ws = at.join(WORKSPACE);
        let made = |e: &dyn std::fmt::Display| {
            SandboxError::Disk(format!("its workspace could not be made ahead: {e}"))
        };
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&ws)
            .map_err(|e| made(&format!("{}: {e}", ws.display())))?;
        fossil.workspace_ahead(&cfg.url, &ws).map_err(|e| {
            let _ = std::fs::remove_dir_all(&ws);
            made(&e)
        })
    })
    .map_err(|e| NodeError::Ahead(e.to_string()))
}
