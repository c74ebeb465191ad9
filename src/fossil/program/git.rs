//! Fossil's git export of a repository and what it says of its mirror.

use super::{Fossil, command};
use crate::fossil::FossilError;
use std::path::Path;

impl Fossil {
    /// Runs Fossil's git export of `repository` into the mirror its
    /// `last-git-export-repo` row names (never with an autopush): how many
    /// check-ins it said it added, or, failing, its own words. Always with
    /// `--force`: without it Fossil says "no changes" to a new tag on a
    /// check-in it exported already, and exports the tag only with the
    /// next check-in.
    pub fn git_export(&self, repository: &Path) -> Result<u64, FossilError> {
        let out = command(&self.path, &self.home)
            .args([
                "git".as_ref(),
                "export".as_ref(),
                "--force".as_ref(),
                "-R".as_ref(),
                repository.as_os_str(),
            ])
            .output()
            .map_err(|e| FossilError::Command {
                operation: "git export",
                message: e.to_string(),
            })?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || stdout.contains("Database error") {
            return Err(FossilError::Command {
                operation: "git export",
                message: crate::fossil::export::export_failure(
                    &stdout,
                    &stderr,
                    &out.status.to_string(),
                ),
            });
        }
        Ok(crate::fossil::export::parse_added(&stdout))
    }

    /// What `fossil git status` says of `repository`'s mirror.
    pub fn git_status(
        &self,
        repository: &Path,
    ) -> Result<crate::fossil::export::GitStatus, FossilError> {
        let out = self.run(
            "git status",
            &[
                "git".as_ref(),
                "status".as_ref(),
                "-R".as_ref(),
                repository.as_os_str(),
            ],
        )?;
        Ok(crate::fossil::export::parse_git_status(&out))
    }
}
