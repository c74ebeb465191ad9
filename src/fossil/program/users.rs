//! Logins made and changed through `fossil user`, each secret given on
//! standard input (`--args -`), never on the command line.

use super::Fossil;
use super::plain;
use crate::fossil::FossilError;
use std::path::Path;

/// The contact a login OCX makes is given (`user new` takes one, and
/// `--args` cannot give an empty one).
const MADE_CONTACT: &str = "made by OCX";

impl Fossil {
    /// Makes login `login` with `password` and no capabilities. The
    /// password is given on standard input (`--args -`), never on the
    /// command line, where every account could read it.
    pub fn user_new(
        &self,
        repository: &Path,
        login: &str,
        password: &str,
    ) -> Result<(), FossilError> {
        self.user_with_secret(
            "user new",
            &["new", login, MADE_CONTACT, password],
            repository,
        )?;
        self.user_capabilities(repository, login, "")
    }

    /// Sets `login`'s password, given on standard input (`--args -`).
    pub fn user_password(
        &self,
        repository: &Path,
        login: &str,
        password: &str,
    ) -> Result<(), FossilError> {
        self.user_with_secret("user password", &["password", login, password], repository)
    }

    /// Runs `fossil user WORDS -R REPOSITORY` with every word on standard
    /// input, one a line, as `--args -` reads them: no word may be empty
    /// (it skips empty lines) or begin with `-` (it would be an option).
    fn user_with_secret(
        &self,
        operation: &'static str,
        words: &[&str],
        repository: &Path,
    ) -> Result<(), FossilError> {
        let repository = repository.to_str().ok_or(FossilError::Command {
            operation,
            message: "the repository's path is not UTF-8".into(),
        })?;
        let mut args = String::new();
        for w in words.iter().copied().chain([repository]) {
            if w.is_empty() || w.starts_with('-') || w.contains(['\n', '\r']) {
                return Err(FossilError::Command {
                    operation,
                    message: "a login, contact or password is empty, begins with '-' or holds a line break"
                        .into(),
                });
            }
        }
        for w in words.iter().copied().chain(["-R", repository]) {
            args.push_str(w);
            args.push('\n');
        }
        self.run_with_input(
            operation,
            &["user".as_ref(), "--args".as_ref(), "-".as_ref()],
            args.as_bytes(),
        )
        .map(|_| ())
    }

    /// Names `login` the default user of `repository`: who acts there when
    /// no one is named.
    pub fn user_default(&self, repository: &Path, login: &str) -> Result<(), FossilError> {
        self.run(
            "user default",
            &[
                "user".as_ref(),
                "default".as_ref(),
                plain("user default", "the login", login)?,
                "-R".as_ref(),
                repository.as_os_str(),
            ],
        )
        .map(|_| ())
    }
}
