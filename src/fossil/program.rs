//! The `fossil` program behind typed operations: found once, run with a
//! clean environment (no CGI variables, which would make it answer as a
//! CGI), never through a shell, stdin from /dev/null, stderr captured.
//! This file finds the program and runs it; each subject's commands are a
//! file below it: `sql` (statements on standard input), `users`,
//! `transfer` (clones, sync, remotes, bundles), `hooks`, `checkout`,
//! `unversioned` and `git`; `versions` keeps what each program answered
//! `fossil version`, so a later process finding it unchanged asks no more.

#![allow(clippy::disallowed_methods)] // the one place fossil is started, and where it finds its HOME, as docs/architecture.md says

mod ahead;
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
use super::output::{held_by_another, parse_version, sync_failure, version_at_least};
use super::remote::redact_password;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

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
    /// A `fossil` started ahead for the next command ([`Fossil::start_ahead`]),
    /// shared by this value's clones.
    ahead: Arc<Mutex<Option<ahead::Ahead>>>,
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
        let fossil = Fossil::asked(path, home, kept.as_deref())?;
        settings_made(&fossil.path, &fossil.home);
        Ok(fossil)
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
            ahead: Arc::default(),
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

    /// Starts the program now, for the next command run without a
    /// directory or input of its own: a process about to store what it
    /// is still composing gets Fossil's start made meanwhile ([`ahead`]).
    /// Nothing when one is waiting already or it cannot be started.
    pub fn start_ahead(&self) {
        if let Ok(mut slot) = self.ahead.lock()
            && slot.is_none()
        {
            *slot = ahead::Ahead::start(command(&self.path, &self.home));
        }
    }

    /// Ends a program started ahead and never given its command.
    pub fn end_ahead(&self) {
        if let Ok(mut slot) = self.ahead.lock() {
            slot.take();
        }
    }

    /// The process id of a program started ahead and waiting, if any.
    #[cfg(test)]
    fn waiting(&self) -> Option<u32> {
        self.ahead.lock().ok()?.as_ref().and_then(ahead::Ahead::id)
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
        let started = match (dir, input.is_empty()) {
            (None, true) => self.given_ahead(args),
            _ => None,
        };
        let out = started
            .unwrap_or_else(|| {
                let mut cmd = command(&self.path, &self.home);
                if let Some(d) = dir {
                    cmd.current_dir(d);
                }
                cmd.args(args);
                if !input.is_empty() {
                    cmd.stdin(Stdio::piped());
                }
                cmd.spawn().and_then(|mut child| {
                    if let Some(mut stdin) = child.stdin.take() {
                        stdin.write_all(input)?;
                    }
                    child.wait_with_output()
                })
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
            let message = redact_password(&message);
            return Err(match held_by_another(&stdout, &stderr) {
                true => FossilError::Busy { operation, message },
                false => FossilError::Command { operation, message },
            });
        }
        Ok((stdout, stderr.into_owned()))
    }

    /// `fossil ARGS` run by the program started ahead, when one is waiting
    /// and `args` come back through `--args` unchanged: its output, or
    /// `None` when it was not run.
    fn given_ahead(&self, args: &[&OsStr]) -> Option<std::io::Result<std::process::Output>> {
        let words = ahead::lines(args)?;
        let waiting = self.ahead.lock().ok()?.take()?;
        waiting.run(&words)
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

/// The file Fossil keeps its per-user settings in when run with `home`
/// alone in its environment, found as Fossil finds it on Unix:
/// `FOSSIL_HOME/.fossil`; else `HOME/.fossil` when it holds more than
/// [`SETTINGS_MADE`]; else `HOME/.config/fossil.db` when `HOME/.config`
/// is a directory; else `HOME/.fossil`.
fn settings_file(home: &Home) -> PathBuf {
    match home {
        Home::Own(dir) => dir.join(".fossil"),
        Home::User(dir) => {
            let dot = dir.join(".fossil");
            let config = dir.join(".config");
            if size_of(&dot) > SETTINGS_MADE || !config.is_dir() {
                dot
            } else {
                config.join("fossil.db")
            }
        }
    }
}

/// The size under which Fossil takes its settings file for not made yet,
/// and makes it.
const SETTINGS_MADE: u64 = 3 * 1024;

fn size_of(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Makes Fossil's settings file for `home` when it is not there, once a
/// process. Fossil makes it the first time one of its processes needs
/// it, and of two making it at once one fails ("table global_config
/// already exists"): a fresh host's first requests at once did. It is
/// made by one `fossil all ls` (which opens it and nothing else) while
/// its directory is locked, so OCX's processes make it one at a time;
/// any failure is left for the command that needs the file to say.
fn settings_made(path: &Path, home: &Home) {
    static MADE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let file = settings_file(home);
    let Ok(mut made) = MADE.lock() else { return };
    if made.contains(&file) {
        return;
    }
    if size_of(&file) <= SETTINGS_MADE {
        let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let _ = std::fs::create_dir_all(&dir);
        let lock = std::fs::File::open(&dir)
            .ok()
            .and_then(|d| nix::fcntl::Flock::lock(d, nix::fcntl::FlockArg::LockExclusive).ok());
        if size_of(&file) <= SETTINGS_MADE {
            let _ = command(path, home).args(["all", "ls"]).output();
        }
        drop(lock);
    }
    made.push(file);
}

/// `e` with any password a URL in its message held taken out.
fn without_password(e: FossilError) -> FossilError {
    match e {
        FossilError::Command { operation, message } => FossilError::Command {
            operation,
            message: redact_password(&message),
        },
        FossilError::Busy { operation, message } => FossilError::Busy {
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

    /// What `fossil test-echo WORDS` prints, run by `fossil` as given.
    fn echoed(fossil: &Fossil, words: &[String]) -> String {
        let mut args: Vec<&OsStr> = vec!["test-echo".as_ref()];
        args.extend(words.iter().map(OsStr::new));
        fossil
            .run("test-echo", &args)
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn a_program_started_ahead_runs_the_next_command_as_one_started_for_it_would() {
        let fresh = Fossil::locate().expect("fossil");
        let ahead = Fossil::locate().expect("fossil");
        let words: Vec<String> = [
            "bundle",
            "--user",
            "ann",
            "a b",
            "-R",
            "/tmp/x y.fossil",
            "é",
        ]
        .map(String::from)
        .to_vec();
        ahead.start_ahead();
        let pid = ahead.waiting().expect("a program waits");
        assert_eq!(echoed(&ahead, &words), echoed(&fresh, &words));
        assert!(ahead.waiting().is_none(), "the waiting program was used");
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "and reaped");
    }

    #[test]
    fn a_program_started_ahead_and_never_given_a_command_is_ended() {
        let fossil = Fossil::locate().expect("fossil");
        fossil.start_ahead();
        let pid = fossil.waiting().expect("a program waits");
        assert!(Path::new(&format!("/proc/{pid}")).exists());
        fossil.end_ahead();
        assert!(fossil.waiting().is_none());
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "ended and reaped"
        );
        let dropped = Fossil::locate().expect("fossil");
        dropped.start_ahead();
        let pid = dropped.waiting().expect("a program waits");
        drop(dropped);
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "ended when dropped"
        );
    }

    #[test]
    fn words_that_would_come_back_changed_are_run_by_a_program_started_for_them() {
        let fossil = Fossil::locate().expect("fossil");
        for word in [
            "--args",
            "-args",
            "-x y",
            "--comment=two words",
            "a\nb",
            "a\rb",
            "",
            "\u{feff}a",
            "-\tz",
        ] {
            assert!(ahead::lines(&[OsStr::new(word)]).is_none(), "{word:?}");
            fossil.start_ahead();
            let echo = echoed(&fossil, &[word.to_string()]);
            assert!(fossil.waiting().is_some(), "{word:?} was not given to it");
            if !word.contains(['\n', '\r']) && !word.is_empty() {
                assert!(echo.contains(&format!("[{word}]")), "{word:?}: {echo}");
            }
        }
        fossil.end_ahead();
        use std::os::unix::ffi::OsStrExt;
        assert!(ahead::lines(&[OsStr::from_bytes(b"\xff")]).is_none());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// Any words `--args` is trusted with come back unchanged: the
        /// program started ahead prints what one started for them prints.
        #[test]
        fn words_given_through_args_come_back_unchanged(
            words in proptest::collection::vec("[-a-zA-Z0-9 ./=_\\[\\]\t\u{e9}\u{4e2d}]{1,12}", 1..6)
        ) {
            let fresh = Fossil::locate().expect("fossil");
            let ahead = Fossil::locate().expect("fossil");
            ahead.start_ahead();
            let through = echoed(&ahead, &words);
            let trusted = ahead.waiting().is_none();
            ahead.end_ahead();
            let refused = words.iter().any(|w| w.starts_with('-') && w.contains([' ', '\t']));
            proptest::prop_assert_eq!(trusted, !refused);
            proptest::prop_assert_eq!(through, echoed(&fresh, &words));
        }
    }
}
