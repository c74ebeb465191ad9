//! Artifacts moved between repositories: clones (their URLs, which may
//! hold a password, on standard input), pulls and pushes (a failure read
//! from Fossil's words, since it exits 0), remotes, and bundles.

use super::{Fossil, SERVER_REMOTE, plain, without_password};
use crate::fossil::FossilError;
use std::ffi::OsStr;
use std::path::Path;

impl Fossil {
    /// Stores a bundle's artifacts in `repository` as `user`, so Fossil
    /// records `user` as their sender; `publish` false keeps them private
    /// (awaiting moderation). All or nothing: Fossil commits once.
    pub fn import_bundle(
        &self,
        repository: &Path,
        bundle: &Path,
        user: &str,
        publish: bool,
    ) -> Result<(), FossilError> {
        let user = plain("bundle import", "the login", user)?;
        let mut args: Vec<&OsStr> = vec!["bundle".as_ref(), "import".as_ref(), bundle.as_os_str()];
        if publish {
            args.push("--publish".as_ref());
        }
        args.extend::<[&OsStr; 4]>([
            "-R".as_ref(),
            repository.as_os_str(),
            "--user".as_ref(),
            user,
        ]);
        self.run("bundle import", &args).map(|_| ())
    }

    /// Adds check-in `checkin` of `repository`, with its files in full, to
    /// the bundle file `bundle` (made when it is not there).
    pub fn bundle_export(
        &self,
        repository: &Path,
        bundle: &Path,
        checkin: &str,
    ) -> Result<(), FossilError> {
        self.run(
            "bundle export",
            &[
                "bundle".as_ref(),
                "export".as_ref(),
                bundle.as_os_str(),
                "--checkin".as_ref(),
                plain("bundle export", "the check-in", checkin)?,
                "--standalone".as_ref(),
                "-R".as_ref(),
                repository.as_os_str(),
            ],
        )
        .map(|_| ())
    }

    /// Clones `url` into `file` over HTTP, opening a checkout of `version`
    /// (or the newest) in `workdir`. The URL, which may hold a password, is
    /// given on standard input (`--args -`), never on the command line;
    /// `remember` keeps its password in the clone.
    pub fn clone_open(
        &self,
        url: &str,
        file: &Path,
        workdir: &Path,
        version: Option<&str>,
        remember: bool,
    ) -> Result<(), FossilError> {
        plain("clone", "the URL", url)?;
        let mut args = format!("{url}\n{}\n", file.display());
        if remember {
            args += "--save-http-password\n";
        }
        args += "--no-open\n";
        self.run_with_input(
            "clone",
            &["clone".as_ref(), "--args".as_ref(), "-".as_ref()],
            args.as_bytes(),
        )
        .map_err(without_password)?;
        let mut open: Vec<&OsStr> = vec!["open".as_ref(), file.as_os_str()];
        if let Some(v) = version {
            open.push(plain("open", "the version", v)?);
        }
        open.extend::<[&OsStr; 3]>([
            "--workdir".as_ref(),
            workdir.as_os_str(),
            "--nosync".as_ref(),
        ]);
        self.run("open", &open).map(|_| ())
    }

    /// Clones `url` into `file` as nobody in particular (no login, no
    /// password), its local administrator named `user`, and opens a
    /// checkout in `workdir`: a clone that can pull but never push.
    pub fn clone_open_anonymous(
        &self,
        url: &str,
        file: &Path,
        workdir: &Path,
        user: &str,
    ) -> Result<(), FossilError> {
        self.clone_anonymous(url, file, user)?;
        self.open_newest(file, workdir)?;
        self.user_default(file, user)
    }

    /// Clones `url` into `workdir`'s clone file as `nobody`, its local
    /// administrator [`AHEAD_ADMIN`](crate::fossil::workspace::AHEAD_ADMIN),
    /// and opens a checkout of the newest check-in there: a run's workspace
    /// made ahead, for a run's login to adopt ([`crate::fossil::workspace`]).
    pub fn workspace_ahead(&self, url: &str, workdir: &Path) -> Result<(), FossilError> {
        let file = workdir.join(crate::fossil::workspace::CLONE);
        self.clone_anonymous(url, &file, crate::fossil::workspace::AHEAD_ADMIN)?;
        self.open_newest(&file, workdir)
    }

    /// Opens a checkout of the clone `file`'s newest check-in on its main
    /// branch in `workdir`, pulling nothing first.
    fn open_newest(&self, file: &Path, workdir: &Path) -> Result<(), FossilError> {
        self.run(
            "open",
            &[
                "open".as_ref(),
                file.as_os_str(),
                "--workdir".as_ref(),
                workdir.as_os_str(),
                "--nosync".as_ref(),
            ],
        )
        .map(|_| ())
    }

    /// Checks out `version` in the checkout at `workdir`, which holds no
    /// change of its own.
    pub fn check_out(&self, workdir: &Path, version: &str) -> Result<(), FossilError> {
        self.run_in(
            Some(workdir),
            "checkout",
            &[
                "checkout".as_ref(),
                plain("checkout", "the version", version)?,
            ],
        )
        .map(|_| ())
    }

    /// Clones `url` into `file` as nobody in particular, its local
    /// administrator named `user`, opening no checkout: an agent machine's
    /// clone before its login is approved. The URL goes on standard input.
    pub fn clone_anonymous(&self, url: &str, file: &Path, user: &str) -> Result<(), FossilError> {
        plain("clone", "the URL", url)?;
        plain("clone", "the login", user)?;
        let args = format!(
            "{url}\n{}\n--admin-user\n{user}\n--no-open\n",
            file.display()
        );
        self.run_with_input(
            "clone",
            &["clone".as_ref(), "--args".as_ref(), "-".as_ref()],
            args.as_bytes(),
        )
        .map_err(without_password)
        .map(|_| ())
    }

    /// Names `url` (which holds the login and its password) as the clone's
    /// remote [`SERVER_REMOTE`], its password saved in the clone; the URL
    /// goes on standard input, never on the command line. The default
    /// remote is left as it is.
    pub fn remote_add_server(&self, clone: &Path, url: &str) -> Result<(), FossilError> {
        plain("remote", "the URL", url)?;
        let _ = self.exec(
            None,
            "remote",
            &[
                "remote".as_ref(),
                "delete".as_ref(),
                SERVER_REMOTE.as_ref(),
                "-R".as_ref(),
                clone.as_os_str(),
            ],
            b"",
        );
        let args = format!("add\n{SERVER_REMOTE}\n{url}\n");
        self.run_with_input(
            "remote",
            &[
                "remote".as_ref(),
                "--args".as_ref(),
                "-".as_ref(),
                "-R".as_ref(),
                clone.as_os_str(),
            ],
            args.as_bytes(),
        )
        .map_err(without_password)
        .map(|_| ())
    }

    /// Pulls into `clone` from its remote [`SERVER_REMOTE`], as the login
    /// saved with it, leaving the default remote as it is.
    pub fn pull_server(&self, clone: &Path) -> Result<(), FossilError> {
        self.sync(
            None,
            "pull",
            &[
                "pull".as_ref(),
                SERVER_REMOTE.as_ref(),
                "--once".as_ref(),
                "-R".as_ref(),
                clone.as_os_str(),
            ],
        )
    }

    /// Pushes what `clone` holds to its remote [`SERVER_REMOTE`], as the
    /// login saved with it, leaving the default remote as it is.
    pub fn push_server(&self, clone: &Path) -> Result<(), FossilError> {
        self.sync(
            None,
            "push",
            &[
                "push".as_ref(),
                SERVER_REMOTE.as_ref(),
                "--once".as_ref(),
                "-R".as_ref(),
                clone.as_os_str(),
            ],
        )
    }

    /// Sets `autosync` off in `repository`, so a commit there tries no push.
    pub fn autosync_off(&self, repository: &Path) -> Result<(), FossilError> {
        self.run(
            "settings",
            &[
                "settings".as_ref(),
                "autosync".as_ref(),
                "off".as_ref(),
                "-R".as_ref(),
                repository.as_os_str(),
            ],
        )
        .map(|_| ())
    }

    /// Pulls into `repository` (a clone) what the server it remembers holds.
    pub fn pull(&self, repository: &Path) -> Result<(), FossilError> {
        self.sync(
            None,
            "pull",
            &["pull".as_ref(), "-R".as_ref(), repository.as_os_str()],
        )
    }

    /// Pushes what `repository` (a clone) holds to the server it remembers,
    /// as the login it remembers.
    pub fn push_clone(&self, repository: &Path) -> Result<(), FossilError> {
        self.sync(
            None,
            "push",
            &["push".as_ref(), "-R".as_ref(), repository.as_os_str()],
        )
    }
}
