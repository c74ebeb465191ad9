//! The `fossil` program behind typed operations: found once, run with a
//! clean environment (no CGI variables, which would make it answer as a
//! CGI), never through a shell, stdin from /dev/null, stderr captured.
//! This file finds the program and runs it; each subject's commands are a
//! file below it: `sql` (statements on standard input), `users`,
//! `transfer` (clones, sync, remotes, bundles), `hooks`, `checkout`,
//! `unversioned` and `git`; `versions` keeps what each program answered
//! `fossil version`, so a later process finding it unchanged asks no more.

#![allow(clippy::disallowed_methods)] // the one place fossil is started, and where it finds its HOME, as docs/architecture.md says

mod checkout;
mod git;
mod hooks;
mod sql;
mod transfer;
mod unversioned;
mod users;
mod versions;

use super::FossilError;
use super::kept::FileId;
use super::output::{parse_version, sync_failure, version_at_least};
use super::remote::redact_password;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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
        let cache = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from);
        let kept = versions::file_for(&home, cache);
        Fossil::asked(path, home, kept.as_deref())
    }

    /// The program at `path`, its version the one `kept` holds for its file
    /// as it stands, else asked (and kept there when its file did not
    /// change while it answered).
    fn asked(path: &Path, home: Home, kept: Option<&Path>) -> Result<Fossil, FossilError> {
        let before = FileId::of(path);
        let known = kept
            .zip(before)
            .and_then(|(file, id)| versions::known(file, path, id));
        let version = match known {
            Some(version) => version,
            None => {
                let out = command(path, &home)
                    .arg("version")
                    .output()
                    .map_err(|_| FossilError::NoProgram)?;
                let text = String::from_utf8_lossy(&out.stdout);
                let version = parse_version(&text).ok_or(FossilError::NoProgram)?;
                if !version_at_least(&version, FLOOR) {
                    return Err(FossilError::NoProgram);
                }
                if let (Some(file), Some(id)) = (kept, before)
                    && FileId::of(path) == Some(id)
                {
                    versions::remember(file, path, id, &version);
                }
                version
            }
        };
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
