//! A checkout's own commands, run in its directory: files added, changes,
//! the branch, commits, and the push of what was committed.

use super::{Fossil, plain};
use crate::fossil::FossilError;
use crate::fossil::output::{parse_changes, parse_new_version};
use std::ffi::OsStr;
use std::path::Path;

impl Fossil {
    /// Puts files the checkout at `root` does not manage yet under its
    /// management, to be committed with the next check-in.
    pub fn add(&self, root: &Path, paths: &[&Path]) -> Result<(), FossilError> {
        let mut args: Vec<&OsStr> = vec!["add".as_ref(), "--".as_ref()];
        args.extend(paths.iter().map(|p| p.as_os_str()));
        self.run_in(Some(root), "add", &args).map(|_| ())
    }

    /// The checkout's changes not yet committed: each file's state (EDITED,
    /// ADDED, DELETED, ...) and its path from the checkout's top.
    pub fn changes(&self, root: &Path) -> Result<Vec<(String, String)>, FossilError> {
        let out = self.run_in(Some(root), "changes", &["changes".as_ref()])?;
        Ok(parse_changes(&out))
    }

    /// The branch the checkout at `root` is on.
    pub fn current_branch(&self, root: &Path) -> Result<String, FossilError> {
        let out = self.run_in(
            Some(root),
            "branch current",
            &["branch".as_ref(), "current".as_ref()],
        )?;
        Ok(out.trim().to_string())
    }

    /// Commits every change of the checkout at `root` as `user`, with
    /// `comment`, onto a new branch `new_branch` when given; no autosync.
    /// Answers the check-in's full hash.
    pub fn commit(
        &self,
        root: &Path,
        user: &str,
        comment: &str,
        new_branch: Option<&str>,
    ) -> Result<String, FossilError> {
        let mut args: Vec<&OsStr> = vec![
            "commit".as_ref(),
            "--nosync".as_ref(),
            "--no-warnings".as_ref(),
            "--no-prompt".as_ref(),
            "--no-verify-comment".as_ref(),
            "--user".as_ref(),
            plain("commit", "the login", user)?,
            "-m".as_ref(),
            plain("commit", "the comment", comment)?,
        ];
        if let Some(b) = new_branch {
            args.extend::<[&OsStr; 2]>(["--branch".as_ref(), plain("commit", "the branch", b)?]);
        }
        let out = self.run_in(Some(root), "commit", &args)?;
        parse_new_version(&out).ok_or_else(|| FossilError::Command {
            operation: "commit",
            message: "it named no new check-in".into(),
        })
    }

    /// Pushes the repository of the checkout at `root` to its remote, with
    /// the credentials the remote's URL keeps.
    /// Fossil answers 0 when the server cannot be reached or refuses the
    /// login, saying so in words: any error line fails the push.
    pub fn push(&self, root: &Path) -> Result<(), FossilError> {
        self.sync(Some(root), "push", &["push".as_ref()])
    }

    /// The remote the checkout at `root` syncs with, as Fossil shows it
    /// (no password), or `None` when it has none.
    pub fn remote(&self, root: &Path) -> Result<Option<String>, FossilError> {
        let out = self.run_in(Some(root), "remote", &["remote".as_ref()])?;
        let url = out.trim();
        Ok((!url.is_empty() && url != "off").then(|| url.to_string()))
    }
}
