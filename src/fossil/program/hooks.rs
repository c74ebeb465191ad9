//! The repository's after-receive hooks, as `fossil hook` adds and
//! deletes them.

use super::{Fossil, plain};
use crate::fossil::FossilError;
use std::ffi::OsStr;
use std::path::Path;

impl Fossil {
    /// Adds an after-receive hook running `command` (through /bin/sh, as
    /// Fossil runs hooks) to `repository`.
    pub fn hook_add(&self, repository: &Path, command: &str) -> Result<(), FossilError> {
        let command = plain("hook add", "the command", command)?;
        let args: [&OsStr; 9] = [
            "hook".as_ref(),
            "add".as_ref(),
            "--type".as_ref(),
            "after-receive".as_ref(),
            "--sequence".as_ref(),
            "50".as_ref(),
            "--command".as_ref(),
            command,
            "-R".as_ref(),
        ];
        let mut all: Vec<&OsStr> = args.to_vec();
        all.push(repository.as_os_str());
        self.run("hook add", &all).map(|_| ())
    }

    /// Deletes the hook at `index` in the repository's list of hooks.
    pub fn hook_delete(&self, repository: &Path, index: usize) -> Result<(), FossilError> {
        let i = index.to_string();
        self.run(
            "hook delete",
            &[
                "hook".as_ref(),
                "delete".as_ref(),
                i.as_ref(),
                "-R".as_ref(),
                repository.as_os_str(),
            ],
        )
        .map(|_| ())
    }
}
