//! The `fossil` program behind typed operations: found once, run with a
//! clean environment (no CGI variables, which would make it answer as a
//! CGI), never through a shell, stdin from /dev/null, stderr captured.

#![allow(clippy::disallowed_methods)] // the one place fossil is started, and where it finds its HOME, as docs/architecture.md says

use super::FossilError;
use super::output::{
    UvFile, parse_changes, parse_new_version, parse_uv_list, parse_version, sync_failure,
    version_at_least,
};
use super::remote::redact_password;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The contact a login OCX makes is given (`user new` takes one, and
/// `--args` cannot give an empty one).
const MADE_CONTACT: &str = "made by OCX";

/// The oldest Fossil OCX works with: `bundle import --publish` and the
/// after-receive hook as OCX uses them are verified from here on.
pub const FLOOR: &str = "2.23";
/// The Fossil OCX is built and tested against.
pub const TARGET: &str = "2.28";

/// The name an agent machine's clone gives its server's remote, saved
/// with the machine's login and password.
pub const SERVER_REMOTE: &str = "ocx-server";

/// A `fossil` program of at least [`FLOOR`], by absolute path.
#[derive(Debug, Clone)]
pub struct Fossil {
    path: PathBuf,
    version: String,
    home: Home,
}

/// Where the program keeps its per-user settings while OCX runs it.
#[derive(Debug, Clone)]
enum Home {
    /// `HOME` as OCX was given it.
    User(PathBuf),
    /// A directory of OCX's own, given as `FOSSIL_HOME`.
    Own(PathBuf),
}

impl Home {
    /// The caller's `HOME` when it is absolute, else a directory of OCX's own.
    fn from_environment() -> Home {
        match std::env::var_os("HOME") {
            Some(home) if Path::new(&home).is_absolute() => Home::User(home.into()),
            _ => Home::Own(own_home(&std::env::temp_dir())),
        }
    }
}

/// Where the web page finds `fossil` when its configuration names none.
pub const WEB_CANDIDATES: &[&str] = &["/usr/local/bin/fossil", "/usr/bin/fossil"];

/// Where the directory given as `FOSSIL_HOME` to a `fossil` the web page
/// starts is made, found without consulting any environment variable.
const WEB_HOME_BASE: &str = "/tmp";

/// A directory of OCX's own for Fossil's settings, `ocx-fossil-home-UID`
/// under `base`, its owner's alone; one another account made there first
/// (or a link) is never used: a fresh directory is made instead.
fn own_home(base: &Path) -> PathBuf {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let uid = nix::unistd::geteuid().as_raw();
    let dir = base.join(format!("ocx-fossil-home-{uid}"));
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    match std::fs::symlink_metadata(&dir) {
        Ok(m) if m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0 => dir,
        _ => tempfile::Builder::new()
            .prefix("ocx-fossil-home-")
            .tempdir_in(base)
            .map(|d| d.keep())
            .unwrap_or(dir),
    }
}

impl Fossil {
    /// Finds the program: `OCX_FOSSIL` when set (an absolute path), else the
    /// first of `/usr/local/bin/fossil`, `/usr/bin/fossil` and each `PATH`
    /// entry whose version is at least [`FLOOR`].
    pub fn locate() -> Result<Fossil, FossilError> {
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(p) = std::env::var_os("OCX_FOSSIL") {
            let p = PathBuf::from(p);
            if !p.is_absolute() {
                return Err(FossilError::NoProgram);
            }
            return Fossil::at(&p);
        }
        candidates.push("/usr/local/bin/fossil".into());
        candidates.push("/usr/bin/fossil".into());
        if let Some(path) = std::env::var_os("PATH") {
            for dir in std::env::split_paths(&path) {
                if dir.is_absolute() {
                    candidates.push(dir.join("fossil"));
                }
            }
        }
        candidates
            .iter()
            .filter(|p| p.is_file())
            .find_map(|p| Fossil::at(p).ok())
            .ok_or(FossilError::NoProgram)
    }

    /// The program for the web page, where the environment is the request's:
    /// `configured` (an absolute path) when given, else the first of
    /// [`WEB_CANDIDATES`] of at least [`FLOOR`]; never from `PATH` or
    /// `OCX_FOSSIL`, and run with a `FOSSIL_HOME` of OCX's own.
    pub fn locate_for_web(configured: Option<&Path>) -> Result<Fossil, FossilError> {
        let home = || Home::Own(own_home(Path::new(WEB_HOME_BASE)));
        if let Some(p) = configured {
            if !p.is_absolute() {
                return Err(FossilError::NoProgram);
            }
            return Fossil::with_home(p, home());
        }
        WEB_CANDIDATES
            .iter()
            .map(Path::new)
            .filter(|p| p.is_file())
            .find_map(|p| Fossil::with_home(p, home()).ok())
            .ok_or(FossilError::NoProgram)
    }

    /// The program at `path`, refused when it is older than [`FLOOR`].
    pub fn at(path: &Path) -> Result<Fossil, FossilError> {
        Fossil::with_home(path, Home::from_environment())
    }

    fn with_home(path: &Path, home: Home) -> Result<Fossil, FossilError> {
        let out = command(path, &home)
            .arg("version")
            .output()
            .map_err(|_| FossilError::NoProgram)?;
        let text = String::from_utf8_lossy(&out.stdout);
        let version = parse_version(&text).ok_or(FossilError::NoProgram)?;
        if !version_at_least(&version, FLOOR) {
            return Err(FossilError::NoProgram);
        }
        Ok(Fossil {
            path: path.to_path_buf(),
            version,
            home,
        })
    }

    /// The program's absolute path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its version, as `2.28`.
    pub fn version(&self) -> &str {
        &self.version
    }

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

    /// Puts a stored, private forum post in the moderators' queue, as
    /// Fossil's own forum does for a poster who holds `3` but not `4`.
    pub fn queue_for_moderation(&self, repository: &Path, hash: &str) -> Result<(), FossilError> {
        if !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(FossilError::Command {
                operation: "sql",
                message: "not a hash".into(),
            });
        }
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS repository.modreq(objid INTEGER PRIMARY KEY, attachRid INT, tktid TEXT); \
             INSERT OR IGNORE INTO modreq(objid) SELECT rid FROM blob WHERE uuid='{hash}';"
        );
        self.sql_on_stdin("sql", repository, &sql).map(|_| ())
    }

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

    /// Sets exactly the capabilities `login` holds of its own.
    pub fn user_capabilities(
        &self,
        repository: &Path,
        login: &str,
        letters: &str,
    ) -> Result<(), FossilError> {
        let sql = format!(
            "UPDATE user SET cap='{}' WHERE login='{}';\n",
            letters.replace('\'', ""),
            login.replace('\'', "''")
        );
        if !letters.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(FossilError::Command {
                operation: "user capabilities",
                message: format!("{letters:?} are not capability letters"),
            });
        }
        self.sql_on_stdin("user capabilities", repository, &sql)
            .map(|_| ())
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

    /// Marks `login` as a run's in `repository` (its `config` row
    /// [`super::repo::run_user_mark`]), saying who marked it: the node for
    /// a login it made, an administrator for one they adopted.
    pub fn mark_run_user(
        &self,
        repository: &Path,
        login: &str,
        by: &str,
    ) -> Result<(), FossilError> {
        let quote = |v: &str| v.replace('\'', "''");
        let sql = format!(
            "REPLACE INTO config(name,value,mtime) VALUES('{}','{}',now());\n",
            quote(&super::repo::run_user_mark(login)),
            quote(by)
        );
        self.sql_on_stdin("sql", repository, &sql).map(|_| ())
    }

    /// Keeps `value` in `repository`'s `config` row `name`. The statement
    /// is given on standard input, never on the command line, since the
    /// value may hold a password.
    pub fn config_set(
        &self,
        repository: &Path,
        name: &str,
        value: &str,
    ) -> Result<(), FossilError> {
        if value.contains(['\n', '\r']) || name.contains(['\n', '\r']) {
            return Err(FossilError::Command {
                operation: "config",
                message: "a config row's name or value holds a line break".into(),
            });
        }
        let sql = format!(
            "REPLACE INTO config(name,value,mtime) VALUES({},{},now());\n",
            quoted(name),
            quoted(value)
        );
        self.sql_on_stdin("config", repository, &sql).map(|_| ())
    }

    /// Removes `repository`'s `config` row `name`.
    pub fn config_delete(&self, repository: &Path, name: &str) -> Result<(), FossilError> {
        let sql = format!("DELETE FROM config WHERE name={};\n", quoted(name));
        self.sql_on_stdin("config", repository, &sql).map(|_| ())
    }

    /// Counts one try in the JSON `config` row `name` with one statement,
    /// so tries made at once by several processes are each counted: its
    /// `tries` since its `window` began (Unix seconds), a window begun anew
    /// once `window_seconds` passed since (or when the clock went back).
    /// Answers whether this try is within `limit`; false too for no such row.
    pub fn count_try(
        &self,
        repository: &Path,
        name: &str,
        limit: u32,
        window_seconds: i64,
        now: i64,
    ) -> Result<bool, FossilError> {
        let window = "coalesce(json_extract(value,'$.window'),0)";
        let tries = "coalesce(json_extract(value,'$.tries'),0)";
        let anew = format!("({now}-{window}>={window_seconds} OR {now}<{window})");
        let sql = format!(
            "UPDATE config SET value=CASE WHEN {anew} \
             THEN json_set(value,'$.window',{now},'$.tries',1) \
             ELSE json_set(value,'$.tries',{tries}+1) END, mtime=now() \
             WHERE name={} AND json_valid(value) AND ({anew} OR {tries}<{limit});\n\
             SELECT changes();\n",
            quoted(name)
        );
        Ok(self.sql_on_stdin("count a try", repository, &sql)?.trim() == "1")
    }

    /// Sets `fields` of the JSON `config` row `name` with one statement,
    /// where each of `when` (a field and the value it holds) still holds,
    /// so a writer between a read and this write is never overwritten.
    /// Answers whether the row was changed.
    pub fn config_json_update(
        &self,
        repository: &Path,
        name: &str,
        fields: &[(&str, &serde_json::Value)],
        when: &[(&str, &serde_json::Value)],
    ) -> Result<bool, FossilError> {
        let field = |f: &str| -> Result<String, FossilError> {
            if f.is_empty() || !f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(FossilError::Command {
                    operation: "config",
                    message: format!("{f:?} is no field of a config row"),
                });
            }
            Ok(format!("'$.{f}'"))
        };
        let mut set = String::from("value");
        for (f, v) in fields {
            set = format!(
                "json_set({set},{},json({}))",
                field(f)?,
                quoted(&v.to_string())
            );
        }
        let mut condition = format!("name={} AND json_valid(value)", quoted(name));
        for (f, v) in when {
            condition += &format!(
                " AND json_extract(value,{}) IS json_extract({},'$')",
                field(f)?,
                quoted(&v.to_string())
            );
        }
        let sql = format!(
            "UPDATE config SET value={set}, mtime=now() WHERE {condition};\nSELECT changes();\n"
        );
        if name.contains(['\n', '\r']) {
            return Err(FossilError::Command {
                operation: "config",
                message: "a config row's name holds a line break".into(),
            });
        }
        Ok(self.sql_on_stdin("config", repository, &sql)?.trim() == "1")
    }

    /// Rewrites each `config` row of `rows` (its name, the value read and
    /// the value it takes) where it still holds the value read, with
    /// SQLite's secure delete on: the text it held is overwritten in the
    /// file, never left behind in a free page.
    pub fn config_rewrite_securely(
        &self,
        repository: &Path,
        rows: &[(String, String, String)],
    ) -> Result<(), FossilError> {
        let mut sql = String::from("PRAGMA secure_delete=ON;\n");
        for (name, old, new) in rows {
            if [name, old, new].iter().any(|t| t.contains(['\n', '\r'])) {
                return Err(FossilError::Command {
                    operation: "config",
                    message: "a config row's name or value holds a line break".into(),
                });
            }
            sql += &format!(
                "UPDATE config SET value={}, mtime=now() WHERE name={} AND value={};\n",
                quoted(new),
                quoted(name),
                quoted(old)
            );
        }
        self.sql_on_stdin("config", repository, &sql).map(|_| ())
    }

    /// Gives `login` OCX's `R` (`on`) or takes every `R` it holds away, in
    /// one statement that reads and writes its letters at once, so a letter
    /// another writer gave it a moment before stays; a login whose letters
    /// already say so is not written. Answers whether the row changed.
    pub fn send_runs(&self, repository: &Path, login: &str, on: bool) -> Result<bool, FossilError> {
        let change = if on {
            "cap=coalesce(cap,'')||'R'"
        } else {
            "cap=replace(cap,'R','')"
        };
        let when = if on {
            "instr(coalesce(cap,''),'R')=0"
        } else {
            "instr(coalesce(cap,''),'R')>0"
        };
        let sql = format!(
            "UPDATE user SET {change}, mtime=now() WHERE login={} AND {when};\nSELECT changes();\n",
            quoted(login)
        );
        let out = self.sql_on_stdin("send runs", repository, &sql)?;
        Ok(out.trim() != "0")
    }

    /// Runs `fossil sql -R REPOSITORY` with `sql` on standard input; what it printed.
    fn sql_on_stdin(
        &self,
        operation: &'static str,
        repository: &Path,
        sql: &str,
    ) -> Result<String, FossilError> {
        if sql.lines().any(|l| l.trim_start().starts_with('.')) {
            return Err(FossilError::Command {
                operation,
                message: "a line of the statement would be read as a shell command".into(),
            });
        }
        let path = repository.to_str().ok_or(FossilError::Command {
            operation,
            message: "the repository's path is not UTF-8".into(),
        })?;
        let path = plain(operation, "the repository", path)?;
        self.run_with_input(
            operation,
            &["sql".as_ref(), "-R".as_ref(), path],
            sql.as_bytes(),
        )
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
        )?;
        self.run(
            "open",
            &[
                "open".as_ref(),
                file.as_os_str(),
                "--workdir".as_ref(),
                workdir.as_os_str(),
                "--nosync".as_ref(),
            ],
        )?;
        self.run(
            "user default",
            &[
                "user".as_ref(),
                "default".as_ref(),
                plain("user default", "the login", user)?,
                "-R".as_ref(),
                file.as_os_str(),
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

    /// Runs a `fossil pull` or `push` (in `dir`, when given). Fossil exits
    /// 0 when the server refuses or cannot be reached: any error line, or
    /// no round trip, is a failure here.
    fn sync(
        &self,
        dir: Option<&Path>,
        operation: &'static str,
        args: &[&OsStr],
    ) -> Result<(), FossilError> {
        let (stdout, stderr) = self.exec(dir, operation, args, b"")?;
        match sync_failure(&stdout, &stderr) {
            Some(message) => Err(FossilError::Command {
                operation,
                message: redact_password(&message),
            }),
            None => Ok(()),
        }
    }

    fn run(&self, operation: &'static str, args: &[&OsStr]) -> Result<String, FossilError> {
        self.exec(None, operation, args, b"")
            .map(|(stdout, _)| stdout)
    }

    fn run_in(
        &self,
        dir: Option<&Path>,
        operation: &'static str,
        args: &[&OsStr],
    ) -> Result<String, FossilError> {
        self.exec(dir, operation, args, b"")
            .map(|(stdout, _)| stdout)
    }

    fn run_with_input(
        &self,
        operation: &'static str,
        args: &[&OsStr],
        input: &[u8],
    ) -> Result<String, FossilError> {
        self.exec(None, operation, args, input)
            .map(|(stdout, _)| stdout)
    }

    /// Runs `fossil ARGS` (in `dir`, given `input` on stdin); its stdout and
    /// stderr, or its first line saying why it failed.
    fn exec(
        &self,
        dir: Option<&Path>,
        operation: &'static str,
        args: &[&OsStr],
        input: &[u8],
    ) -> Result<(String, String), FossilError> {
        use std::io::Write;
        let mut cmd = command(&self.path, &self.home);
        if let Some(d) = dir {
            cmd.current_dir(d);
        }
        cmd.args(args);
        if !input.is_empty() {
            cmd.stdin(Stdio::piped());
        }
        let out = cmd
            .spawn()
            .and_then(|mut child| {
                if let Some(mut stdin) = child.stdin.take() {
                    stdin.write_all(input)?;
                }
                child.wait_with_output()
            })
            .map_err(|e| FossilError::Command {
                operation,
                message: e.to_string(),
            })?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let failed_inside = stdout.contains("Database error") || stderr.contains("Database error");
        if !out.status.success() || failed_inside {
            let message = stderr
                .lines()
                .chain(stdout.lines())
                .find(|l| {
                    !l.trim().is_empty()
                        && !l.starts_with("Imported content")
                        && !l.starts_with("  ")
                })
                .unwrap_or("exited without saying why")
                .trim()
                .to_string();
            return Err(FossilError::Command {
                operation,
                message: redact_password(&message),
            });
        }
        Ok((stdout, stderr.into_owned()))
    }

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
                message: super::export::export_failure(&stdout, &stderr, &out.status.to_string()),
            });
        }
        Ok(super::export::parse_added(&stdout))
    }

    /// What `fossil git status` says of `repository`'s mirror.
    pub fn git_status(&self, repository: &Path) -> Result<super::export::GitStatus, FossilError> {
        let out = self.run(
            "git status",
            &[
                "git".as_ref(),
                "status".as_ref(),
                "-R".as_ref(),
                repository.as_os_str(),
            ],
        )?;
        Ok(super::export::parse_git_status(&out))
    }

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

    /// The unversioned files of `repository`: name, size, hash prefix and
    /// when each was last changed.
    pub fn uv_list(&self, repository: &Path) -> Result<Vec<UvFile>, FossilError> {
        let out = self.run_in(
            None,
            "uv list",
            &[
                "uv".as_ref(),
                "list".as_ref(),
                "-R".as_ref(),
                repository.as_os_str(),
            ],
        )?;
        Ok(parse_uv_list(&out))
    }

    /// The bytes of unversioned file `name` in `repository`.
    pub fn uv_get(&self, repository: &Path, name: &str) -> Result<Vec<u8>, FossilError> {
        let dir = tempfile::Builder::new()
            .prefix("ocx-uv-")
            .tempdir()
            .map_err(|e| FossilError::Command {
                operation: "uv export",
                message: e.to_string(),
            })?;
        let file = dir.path().join("file");
        self.run_in(
            None,
            "uv export",
            &[
                "uv".as_ref(),
                "export".as_ref(),
                plain("uv export", "the name", name)?,
                file.as_os_str(),
                "-R".as_ref(),
                repository.as_os_str(),
            ],
        )?;
        std::fs::read(&file).map_err(|e| FossilError::Command {
            operation: "uv export",
            message: e.to_string(),
        })
    }

    /// Stores `bytes` as unversioned file `name` in `repository`, as
    /// `user`, so its receipt names `user`.
    pub fn uv_put(
        &self,
        repository: &Path,
        name: &str,
        bytes: &[u8],
        user: &str,
    ) -> Result<(), FossilError> {
        let failed = |e: std::io::Error| FossilError::Command {
            operation: "uv add",
            message: e.to_string(),
        };
        let dir = tempfile::Builder::new()
            .prefix("ocx-uv-")
            .tempdir()
            .map_err(failed)?;
        let file = dir.path().join("file");
        std::fs::write(&file, bytes).map_err(failed)?;
        self.run_in(
            None,
            "uv add",
            &[
                "uv".as_ref(),
                "add".as_ref(),
                file.as_os_str(),
                "--as".as_ref(),
                plain("uv add", "the name", name)?,
                "-R".as_ref(),
                repository.as_os_str(),
                "--user".as_ref(),
                plain("uv add", "the login", user)?,
            ],
        )
        .map(|_| ())
    }
}

/// `value` as an argument of `operation`, refused when it begins with `-`:
/// Fossil reads its options, global ones such as `--chdir=DIR` among them,
/// wherever they stand on its command line, even where a value was meant.
fn plain<'a>(
    operation: &'static str,
    what: &'static str,
    value: &'a str,
) -> Result<&'a OsStr, FossilError> {
    if value.starts_with('-') {
        return Err(FossilError::OptionLike {
            operation,
            what,
            value: value.to_string(),
        });
    }
    Ok(value.as_ref())
}

/// `text` as an SQL string literal.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A command for the program with nothing inherited that could redirect it:
/// the environment cleared but for a fixed PATH, `home` and the C locale.
fn command(path: &Path, home: &Home) -> Command {
    let mut c = Command::new(path);
    c.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match home {
        Home::User(dir) => {
            c.env("HOME", dir);
        }
        Home::Own(dir) => {
            let _ = std::fs::create_dir_all(dir);
            c.env("FOSSIL_HOME", dir);
        }
    }
    c
}

/// `e` with any password a URL in its message held taken out.
fn without_password(e: FossilError) -> FossilError {
    match e {
        FossilError::Command { operation, message } => FossilError::Command {
            operation,
            message: redact_password(&message),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_beginning_with_a_dash_never_becomes_an_argument() {
        assert!(matches!(
            plain("uv add", "the name", "--chdir=/"),
            Err(FossilError::OptionLike {
                what: "the name",
                ..
            })
        ));
        assert!(plain("uv add", "the name", "-").is_err());
        assert_eq!(plain("uv add", "the name", "a-b").unwrap(), "a-b");
    }
}
