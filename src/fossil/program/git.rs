//! Fossil's git export of a repository, its import of git's fast-export
//! stream into a repository, and a repository made new for a project.

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
}

impl Fossil {
    /// Imports the git fast-export stream in the file `stream` into
    /// `repository` (made new, with `admin` its administrator, unless
    /// `incremental`, when it is done as `admin`), the marks of what was
    /// imported before read from `marks` (when it exists) and all of them
    /// written to `marks_out`; what Fossil said, its administrator's new
    /// password left out.
    pub fn import_git(
        &self,
        repository: &Path,
        stream: &Path,
        marks: &Path,
        marks_out: &Path,
        incremental: bool,
        admin: &str,
    ) -> Result<String, FossilError> {
        let admin = super::plain("import", "the administrator", admin)?;
        let mut args: Vec<&std::ffi::OsStr> = vec!["import".as_ref(), "--git".as_ref()];
        if incremental {
            args.push("--incremental".as_ref());
            args.push("--user".as_ref());
        } else {
            args.push("--admin-user".as_ref());
        }
        args.push(admin);
        if marks.exists() {
            args.push("--import-marks".as_ref());
            args.push(marks.as_os_str());
        }
        args.push("--export-marks".as_ref());
        args.push(marks_out.as_os_str());
        args.push(repository.as_os_str());
        args.push(stream.as_os_str());
        let said = self.run("import", &args)?;
        Ok(said
            .lines()
            .filter(|l| !l.contains("password"))
            .collect::<Vec<_>>()
            .join("\n"))
    }

    /// Makes the git export of `repository` in the new directory `dir`
    /// (Fossil's `git export DIR`, which names it in the repository's
    /// `last-git-export-repo` row), never with an autopush.
    pub fn git_export_into(&self, repository: &Path, dir: &Path) -> Result<u64, FossilError> {
        let out = self.run(
            "git export",
            &[
                "git".as_ref(),
                "export".as_ref(),
                dir.as_os_str(),
                "-R".as_ref(),
                repository.as_os_str(),
            ],
        )?;
        Ok(crate::fossil::export::parse_added(&out))
    }
}

impl Fossil {
    /// Makes the new, empty repository `repository`, its administrator
    /// `admin` (whose password Fossil makes and OCX never shows).
    pub fn new_repository(&self, repository: &Path, admin: &str) -> Result<(), FossilError> {
        self.run(
            "new",
            &[
                "new".as_ref(),
                "--admin-user".as_ref(),
                super::plain("new", "the administrator", admin)?,
                repository.as_os_str(),
            ],
        )
        .map(drop)
    }
}
