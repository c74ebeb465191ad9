//! The `fossil` program behind typed operations: found once, run with a
//! clean environment (no CGI variables, which would make it answer as a
//! CGI), never through a shell, stdin from /dev/null, stderr captured.

use super::FossilError;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The oldest Fossil OCX works with: `bundle import --publish` and the
/// after-receive hook as OCX uses them are verified from here on.
pub const FLOOR: &str = "2.23";
/// The Fossil OCX is built and tested against.
pub const TARGET: &str = "2.28";

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
            _ => Home::Own(std::env::temp_dir().join("ocx-fossil-home")),
        }
    }
}

/// Where the web page finds `fossil` when its configuration names none.
pub const WEB_CANDIDATES: &[&str] = &["/usr/local/bin/fossil", "/usr/bin/fossil"];

/// The directory given as `FOSSIL_HOME` to a `fossil` the web page starts,
/// which consults no environment variable to find it.
const WEB_HOME: &str = "/tmp/ocx-fossil-home";

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
        let home = || Home::Own(PathBuf::from(WEB_HOME));
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
        let mut args: Vec<&OsStr> = vec!["bundle".as_ref(), "import".as_ref(), bundle.as_os_str()];
        if publish {
            args.push("--publish".as_ref());
        }
        args.extend::<[&OsStr; 4]>([
            "-R".as_ref(),
            repository.as_os_str(),
            "--user".as_ref(),
            user.as_ref(),
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
        self.run(
            "sql",
            &[
                "sql".as_ref(),
                "-R".as_ref(),
                repository.as_os_str(),
                sql.as_ref(),
            ],
        )
        .map(|_| ())
    }

    /// Adds an after-receive hook running `command` (through /bin/sh, as
    /// Fossil runs hooks) to `repository`.
    pub fn hook_add(&self, repository: &Path, command: &str) -> Result<(), FossilError> {
        let args: [&OsStr; 9] = [
            "hook".as_ref(),
            "add".as_ref(),
            "--type".as_ref(),
            "after-receive".as_ref(),
            "--sequence".as_ref(),
            "50".as_ref(),
            "--command".as_ref(),
            command.as_ref(),
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

    /// Makes login `login` with `password` and no capabilities.
    pub fn user_new(
        &self,
        repository: &Path,
        login: &str,
        password: &str,
    ) -> Result<(), FossilError> {
        self.run(
            "user new",
            &[
                "user".as_ref(),
                "new".as_ref(),
                login.as_ref(),
                "".as_ref(),
                password.as_ref(),
                "-R".as_ref(),
                repository.as_os_str(),
            ],
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
            "UPDATE user SET cap='{}' WHERE login='{}'",
            letters.replace('\'', ""),
            login.replace('\'', "''")
        );
        if !letters.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(FossilError::Command {
                operation: "user capabilities",
                message: format!("{letters:?} are not capability letters"),
            });
        }
        self.run(
            "user capabilities",
            &[
                "sql".as_ref(),
                "-R".as_ref(),
                repository.as_os_str(),
                sql.as_ref(),
            ],
        )
        .map(|_| ())
    }

    /// Sets `login`'s password.
    pub fn user_password(
        &self,
        repository: &Path,
        login: &str,
        password: &str,
    ) -> Result<(), FossilError> {
        self.run(
            "user password",
            &[
                "user".as_ref(),
                "password".as_ref(),
                login.as_ref(),
                password.as_ref(),
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
        let mut args = format!("{url}\n{}\n", file.display());
        if remember {
            args += "--save-http-password\n";
        }
        args += "--no-open\n";
        let redact = |e: FossilError| match e {
            FossilError::Command { operation, message } => FossilError::Command {
                operation,
                message: redact_password(&message),
            },
            other => other,
        };
        self.run_with_input(
            "clone",
            &["clone".as_ref(), "--args".as_ref(), "-".as_ref()],
            args.as_bytes(),
        )
        .map_err(redact)?;
        let mut open: Vec<&OsStr> = vec!["open".as_ref(), file.as_os_str()];
        if let Some(v) = version {
            open.push(v.as_ref());
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
    pub fn bundle_export(&self, repository: &Path, bundle: &Path, checkin: &str) -> Result<(), FossilError> {
        self.run(
            "bundle export",
            &[
                "bundle".as_ref(),
                "export".as_ref(),
                bundle.as_os_str(),
                "--checkin".as_ref(),
                checkin.as_ref(),
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
    pub fn clone_open_anonymous(&self, url: &str, file: &Path, workdir: &Path, user: &str) -> Result<(), FossilError> {
        let args = format!("{url}\n{}\n--admin-user\n{user}\n--no-open\n", file.display());
        self.run_with_input("clone", &["clone".as_ref(), "--args".as_ref(), "-".as_ref()], args.as_bytes())?;
        self.run(
            "open",
            &["open".as_ref(), file.as_os_str(), "--workdir".as_ref(), workdir.as_os_str(), "--nosync".as_ref()],
        )?;
        self.run("user default", &["user".as_ref(), "default".as_ref(), user.as_ref(), "-R".as_ref(), file.as_os_str()])
            .map(|_| ())
    }

    /// Pulls into `repository` (a clone) what the server it remembers holds.
    pub fn pull(&self, repository: &Path) -> Result<(), FossilError> {
        let out = self.run(
            "pull",
            &["pull".as_ref(), "-R".as_ref(), repository.as_os_str()],
        )?;
        match out.lines().find(|l| l.contains("Error:")) {
            Some(e) => Err(FossilError::Command {
                operation: "pull",
                message: redact_password(e.trim()),
            }),
            None => Ok(()),
        }
    }

    /// Pushes what `repository` (a clone) holds to the server it remembers,
    /// as the login it remembers. Fossil says "Error:" and still exits 0 when
    /// the server refuses: that is a failure here.
    pub fn push(&self, repository: &Path) -> Result<(), FossilError> {
        let out = self.run(
            "push",
            &["push".as_ref(), "-R".as_ref(), repository.as_os_str()],
        )?;
        match out.lines().find(|l| l.contains("Error:")) {
            Some(e) => Err(FossilError::Command {
                operation: "push",
                message: redact_password(e.trim()),
            }),
            None => Ok(()),
        }
    }

    fn run(&self, operation: &'static str, args: &[&OsStr]) -> Result<String, FossilError> {
        self.run_with_input(operation, args, b"")
    }

    fn run_with_input(
        &self,
        operation: &'static str,
        args: &[&OsStr],
        input: &[u8],
    ) -> Result<String, FossilError> {
        use std::io::Write;
        let mut cmd = command(&self.path, &self.home);
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
            return Err(FossilError::Command { operation, message });
        }
        Ok(stdout)
    }
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

/// `text` with the password of any `scheme://user:password@` in it hidden.
pub fn redact_password(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || c == '/')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match (authority.rfind('@'), authority.find(':')) {
            (Some(at), Some(colon)) if colon < at => {
                out.push_str(&authority[..colon]);
                out.push_str(":***");
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// The version number in `fossil version`'s answer: "This is fossil version 2.28 [...]".
pub fn parse_version(text: &str) -> Option<String> {
    let rest = text.split("version ").nth(1)?;
    let v: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    (!v.is_empty()).then_some(v)
}

/// Whether dotted version `v` is `floor` or later.
pub fn version_at_least(v: &str, floor: &str) -> bool {
    let parts = |s: &str| -> Vec<u32> { s.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    parts(v) >= parts(floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_urls_are_hidden() {
        assert_eq!(
            redact_password("unknown command: http://run-1:s3cret@127.0.0.1:8080/ now"),
            "unknown command: http://run-1:***@127.0.0.1:8080/ now"
        );
        assert_eq!(redact_password("http://host:8080/x"), "http://host:8080/x");
    }

    #[test]
    fn reads_fossils_version_line() {
        let line = "This is fossil version 2.28 [52445a27f1] 2026-03-11 11:31:46 UTC\n";
        assert_eq!(parse_version(line).as_deref(), Some("2.28"));
        assert!(version_at_least("2.28", FLOOR));
        assert!(version_at_least("2.23", FLOOR));
        assert!(!version_at_least("2.21", FLOOR));
        assert!(version_at_least("2.100", "2.23"));
    }
}
