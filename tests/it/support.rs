//! What the tests stand on: a fresh repository with logins, the `ocx`
//! binary run in it, and direct looks at what Fossil stored.

#![allow(dead_code)]

use serde_json::Value;
use std::borrow::Borrow;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `fossil` program the tests run against.
pub fn fossil() -> PathBuf {
    ocx::fossil::Fossil::locate()
        .expect("fossil 2.23 or later: run scripts/setup.sh")
        .path()
        .to_path_buf()
}

/// Runs `fossil ARGS` in `dir` as the host user `user`, which must
/// succeed; what it printed.
pub fn fossil_as(user: &str, dir: &Path, args: &[&str]) -> String {
    succeeds(
        Command::new(fossil())
            .args(args)
            .current_dir(dir)
            .env("USER", user),
    )
}

/// Runs `c`, which must succeed (failing the test with the command and
/// all it said when it does not); what it wrote on standard output.
pub fn succeeds(c: &mut Command) -> String {
    let out = c.output().unwrap();
    assert!(out.status.success(), "{c:?}: {}", said(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// How long a test's own write waits for a served repository's write lock
/// held by its server's syncs ([`Repo::fossil`]).
const HELD_FOR: Duration = Duration::from_secs(30);

/// A repository made for one test, in its own directory, with `admin`
/// (setup) as its default user.
pub struct Repo {
    pub dir: tempfile::TempDir,
    pub file: PathBuf,
}

impl Repo {
    /// A new repository whose first user is `admin`.
    pub fn new() -> Repo {
        // The first `fossil new` on a machine makes Fossil's own settings
        // file, and two making it at once fail: one goes first, alone.
        static FIRST: std::sync::Once = std::sync::Once::new();
        FIRST.call_once(|| {
            let dir = tempfile::tempdir().unwrap();
            let _ = Command::new(fossil())
                .args(["new", "--admin-user", "admin"])
                .arg(dir.path().join("first.fossil"))
                .env("USER", "admin")
                .output();
        });
        let dir = tempfile::Builder::new()
            .prefix("ocx-test-")
            .tempdir()
            .unwrap();
        let file = dir.path().join("repo.fossil");
        succeeds(
            Command::new(fossil())
                .args(["new", "--admin-user", "admin"])
                .arg(&file)
                .env("USER", "admin"),
        );
        let repo = Repo { dir, file };
        repo.fossil(&["user", "default", "admin"]);
        repo
    }

    /// Runs `fossil ARGS -R REPO` and answers its stdout; panics on failure.
    ///
    /// A served repository is written by every sync its server answers:
    /// Fossil's server takes the write lock for each (`BEGIN IMMEDIATE`),
    /// and a command such as `fossil wiki create`, whose transaction began
    /// as a read, is then refused at once ("database is locked"), without
    /// waiting out Fossil's busy timeout as a single write does (SQLite
    /// calls no busy handler for a read becoming a write). So a refusal
    /// of that kind is run again until the lock is free, as OCX's own
    /// store does, for up to [`HELD_FOR`]; any other failure fails at once.
    pub fn fossil(&self, args: &[&str]) -> String {
        let until = Instant::now() + HELD_FOR;
        loop {
            let mut c = Command::new(fossil());
            c.args(args).arg("-R").arg(&self.file).env("USER", "admin");
            let out = c.output().unwrap();
            if out.status.success() {
                return String::from_utf8_lossy(&out.stdout).into_owned();
            }
            let held = said(&out).contains("database is locked");
            assert!(held && Instant::now() < until, "{c:?}: {}", said(&out));
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Adds login `login` holding exactly `caps`.
    pub fn user(&self, login: &str, caps: &str) -> &Repo {
        self.fossil(&[
            "user",
            "new",
            login,
            &format!("{login}@example.org"),
            &format!("{login}-pw"),
        ]);
        self.fossil(&["user", "capabilities", login, caps]);
        self
    }

    /// Runs `ocx ARGS --repository REPO` and answers what it did.
    pub fn ocx<S: AsRef<OsStr>>(&self, args: &[S]) -> Run {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ocx"));
        c.args(args).arg("--repository").arg(&self.file);
        run(c, None)
    }

    /// Runs `ocx ARGS --repository REPO --json` and answers the Answer.
    pub fn json<S: AsRef<OsStr>>(&self, args: &[S]) -> Run {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ocx"));
        c.args(args)
            .arg("--json")
            .arg("--repository")
            .arg(&self.file);
        run(c, None)
    }

    /// Like [`Repo::json`], giving `stdin` on standard input.
    pub fn json_stdin<S: AsRef<OsStr>>(&self, args: &[S], stdin: &[u8]) -> Run {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ocx"));
        c.args(args)
            .arg("--json")
            .arg("--repository")
            .arg(&self.file);
        run(c, Some(stdin))
    }

    /// `ocx create` of a record whose runner is the command `true`, with
    /// `objective` and the arguments `more`, as [`Repo::json`] answers it.
    pub fn command_record(&self, objective: &str, more: &[&str]) -> Run {
        self.json(&command_record_args(objective, more))
    }

    /// Keeps `secret` as the credential `name`, by way of a file it removes
    /// after.
    pub fn credential(&self, name: &str, secret: &str) {
        let file = self.dir.path().join("key");
        std::fs::write(&file, secret).unwrap();
        self.json(&[
            "credential",
            "--name",
            name,
            "--file",
            file.to_str().unwrap(),
        ])
        .ok();
        std::fs::remove_file(&file).unwrap();
    }

    /// The run's login the record `record` names.
    pub fn run_user(&self, record: &str) -> String {
        let repo = ocx::fossil::Repository::open(&self.file).unwrap();
        let r = repo.receipt(record).unwrap().unwrap();
        ocx::protocol::found::record(&repo, r.rid, record)
            .unwrap()
            .unwrap()
            .record
            .user
    }

    /// Every artifact hash the repository holds, sorted.
    pub fn hashes(&self) -> Vec<String> {
        ocx::fossil::Repository::open(&self.file)
            .unwrap()
            .all_hashes()
            .unwrap()
    }

    /// The login the repository's receipt names for `hash`.
    pub fn sender(&self, hash: &str) -> Option<String> {
        let db = rusqlite::Connection::open(&self.file).unwrap();
        db.query_row(
            "SELECT u.login FROM blob b JOIN rcvfrom r ON r.rcvid=b.rcvid JOIN user u ON u.uid=r.uid WHERE b.uuid=?1",
            [hash],
            |r| r.get(0),
        )
        .ok()
    }

    /// Imports hand-made artifacts as `sender`, as a sync from them would.
    pub fn import_as(&self, sender: &str, artifacts: &[Vec<u8>]) -> Vec<String> {
        let repo = ocx::fossil::Repository::open(&self.file).unwrap();
        let policy = repo.hash_policy().unwrap();
        let items: Vec<(String, Vec<u8>)> = artifacts
            .iter()
            .map(|a| (policy.name(a), a.clone()))
            .collect();
        let bundle = self.dir.path().join("hand.bundle");
        ocx::fossil::bundle::write(&bundle, &repo.project_code().unwrap(), &items).unwrap();
        self.fossil(&[
            "bundle",
            "import",
            bundle.to_str().unwrap(),
            "--publish",
            "--user",
            sender,
        ]);
        items.into_iter().map(|i| i.0).collect()
    }
}

/// The arguments of `ocx create` of a record whose runner is the command
/// `true`, with `objective` and the arguments `more`.
pub fn command_record_args<'a>(objective: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "create",
        "--runner",
        "command",
        "--command",
        "true",
        "--objective",
        objective,
    ];
    args.extend_from_slice(more);
    args
}

/// The arguments of `ocx create` of a record for the echo runner, its run
/// hearing its hearers and writing to `out`, with the arguments `more`.
pub fn echo_record_args<'a>(out: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut args = echo_args("Echo what you hear", "5m", &["--read-write", out]);
    args.extend_from_slice(more);
    args
}

/// The arguments of `ocx create` of a record for the echo runner with
/// `objective` and `wall`, and the arguments `more`.
pub fn echo_args<'a>(objective: &'a str, wall: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    create_args("echo", objective, wall, more)
}

/// The arguments of `ocx create` of a record for `runner` with
/// `objective` and `wall`, and the arguments `more`.
pub fn create_args<'a>(
    runner: &'a str,
    objective: &'a str,
    wall: &'a str,
    more: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "create",
        "--runner",
        runner,
        "--objective",
        objective,
        "--wall",
        wall,
    ];
    args.extend_from_slice(more);
    args
}

/// The card `console` shows in its list `list` (`running`, `ended`) for
/// `record`, or null.
pub fn console_card(console: &Value, list: &str, record: &str) -> Value {
    console[list]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["record"] == record)
        .cloned()
        .unwrap_or_default()
}

/// The arguments of `ocx create` of a record run on each check-in on
/// trunk by the command `script`, on a new branch, with the arguments
/// `more`.
pub fn checkin_record_args<'a>(script: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "create",
        "--runner",
        "command",
        "--command",
        script,
        "--objective",
        "Run on each check-in",
        "--checkins",
        "trunk",
        "--new-branch",
    ];
    args.extend_from_slice(more);
    args
}

/// What one run of `ocx` did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The Answer printed with `--json`.
    pub fn answer(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not an answer ({e}): {}{}", self.stdout, self.stderr))
    }

    /// The answer's result, asserting the tool did its work.
    pub fn ok(&self) -> Value {
        let a = self.answer();
        assert_eq!(a["ok"], true, "expected ok: {a:#}");
        assert_eq!(self.code, 0);
        a["result"].clone()
    }

    /// The string `field` of the answer's result, asserting the tool did
    /// its work.
    pub fn ok_str(&self, field: &str) -> String {
        let result = self.ok();
        match result[field].as_str() {
            Some(s) => s.to_string(),
            None => panic!("no string {field} in the result: {result:#}"),
        }
    }

    /// The reason of the answer's failure, asserting something beneath
    /// the tool failed (exit 3), not that it refused.
    pub fn failed(&self) -> String {
        let a = self.answer();
        assert_eq!(a["stopped"]["kind"], "failed", "expected a failure: {a:#}");
        assert_eq!(self.code, 3);
        a["stopped"]["reason"].as_str().unwrap_or("").to_string()
    }

    /// The field the answer's refusal names, asserting it stopped.
    pub fn refused(&self) -> String {
        let a = self.answer();
        assert_eq!(a["ok"], false, "expected a refusal: {a:#}");
        assert_eq!(self.code, 1);
        assert!(
            a["next_step"].is_string(),
            "a refusal says what to do instead: {a:#}"
        );
        a["stopped"]["field"].as_str().unwrap_or("").to_string()
    }
}

/// Runs `c` with a clean environment but PATH, and stdin if given.
pub fn run(mut c: Command, stdin: Option<&[u8]>) -> Run {
    c.env_remove("FOSSIL_USER").env("USER", "nobody-here");
    c.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    if let Some(bytes) = stdin {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(bytes).unwrap();
    }
    let out: Output = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Starts `c` with its standard input and output piped to the test and
/// its errors dropped.
pub fn piped(c: &mut Command) -> std::process::Child {
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Runs the client `c` to its end, asserting it succeeded; answers the
/// JSON lines it printed.
pub fn client_lines(c: &mut Command) -> Vec<Value> {
    let out = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The names of the tools a `tools/list` answer lists.
pub fn tool_names(listed: &Value) -> Vec<&str> {
    listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect()
}

/// The `ocx` binary.
pub fn ocx_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ocx"))
}

impl Repo {
    /// Commits `file` holding `content` as `user` (on `branch` when given,
    /// starting it); answers the check-in's full hash.
    pub fn commit_as(&self, user: &str, file: &str, content: &str, branch: Option<&str>) -> String {
        self.commit_dated(user, file, content, branch, None)
    }

    /// Like [`Repo::commit_as`], the check-in dated `date` (UTC, as
    /// Fossil's `--date-override` takes it) when given, whatever its
    /// parent's date.
    pub fn commit_dated(
        &self,
        user: &str,
        file: &str,
        content: &str,
        branch: Option<&str>,
        date: Option<&str>,
    ) -> String {
        let work = self.dir.path().join("work");
        if !work.join(".fslckout").exists() {
            std::fs::create_dir_all(&work).unwrap();
            succeeds(
                Command::new(fossil())
                    .arg("open")
                    .arg(&self.file)
                    .arg("--workdir")
                    .arg(&work)
                    .env("USER", "admin"),
            );
        }
        if let Some(parent) = work.join(file).parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(work.join(file), content).unwrap();
        let fossil_in = |args: &[&str]| {
            for _ in 0..20 {
                let out = Command::new(fossil())
                    .args(args)
                    .current_dir(&work)
                    .env("USER", "admin")
                    .output()
                    .unwrap();
                let said = crate::support::said(&out);
                if out.status.success() {
                    return;
                }
                assert!(
                    said.contains("database is locked"),
                    "fossil {args:?}: {said}"
                );
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            panic!("fossil {args:?}: the repository stayed locked");
        };
        fossil_in(&["add", file]);
        let mut args = vec!["commit", "-m", "a change", "--user", user, "--no-warnings"];
        if let Some(b) = branch {
            args.extend(["--branch", b]);
        }
        if let Some(d) = date {
            args.extend(["--date-override", d, "--allow-older"]);
        }
        fossil_in(&args);
        let db = rusqlite::Connection::open(&self.file).unwrap();
        db.query_row(
            "SELECT b.uuid FROM event e JOIN blob b ON b.rid=e.objid WHERE e.type='ci' ORDER BY e.objid DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap()
    }

    /// The root of the node this repository is (or would be).
    pub fn node_root(&self) -> PathBuf {
        ocx::node::config::default_root(&self.file.canonicalize().unwrap())
    }

    /// The server-code.
    pub fn server_code(&self) -> String {
        ocx::fossil::Repository::open(&self.file)
            .unwrap()
            .server_code()
            .unwrap()
    }
}

/// Runs `fossil ARGS` in `dir` as `admin`, which must succeed; what it printed.
pub fn fossil_in(dir: &Path, args: &[&str]) -> String {
    fossil_as("admin", dir, args)
}

/// The directory beside `file` that Fossil serves as its extroot: `ocx-cgi`
/// linked to the page's hand-off program (as installed), and the page's configuration
/// naming the tests' fossil. Made once; kept with the repository's own
/// directory.
pub fn ext_root(file: &Path) -> PathBuf {
    let dir = file.parent().unwrap().join("ocx-ext");
    if !dir.join("ocx-cgi").exists() {
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ocx-cgi"), dir.join("ocx-cgi")).unwrap();
        let config = serde_json::json!({ "fossil": fossil() });
        std::fs::write(dir.join(".ocx-cgi.json"), config.to_string()).unwrap();
    }
    dir
}

/// Gives the site `file` the Content-Security-Policy a node keeps (its
/// scripts Fossil's alone), as `ocx hook install` does, for a test that
/// serves OCX's page without making the repository a node.
pub fn site_as_a_node_keeps_it(file: &Path) {
    let out = Command::new(fossil())
        .args([
            "settings",
            ocx::fossil::csp::SETTING,
            ocx::fossil::csp::POLICY,
            "-R",
        ])
        .arg(file)
        .env("USER", "admin")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// Which page a served repository's `fossil server` serves at
/// `/ext/ocx-cgi`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Page {
    /// The page's hand-off program, `ocx-cgi`, as installed: the
    /// extroot beside the repository ([`ext_root`]), and the site's
    /// Content-Security-Policy a node keeps.
    HandOff,
    /// `ocx` itself linked as `ocx-cgi` ([`Ext::new`]), in an extroot
    /// of its own.
    Ocx,
    /// No page: Fossil's own pages alone.
    Fossil,
    /// The extroot the test made and keeps (an [`Ext`], say), as it is,
    /// and the site's Content-Security-Policy a node keeps.
    At(PathBuf),
}

/// The one way a test serves a repository: what the repository holds
/// before it is served (logins, runner pages, an administrator's
/// password), which page `fossil server` serves, and whether the
/// repository is made a node (its hook installed, pointing at the
/// server's URL, and the node started). [`Served::start`] makes it a
/// [`ServedNode`].
///
/// ```ignore
/// let s = Served::new().login("pat", "v4").echo(RUNNER, json!({})).start();
/// ```
pub struct Served {
    repo: Option<Repo>,
    logins: Vec<(String, String)>,
    admin_password: bool,
    runners: Vec<(String, Value)>,
    echo: Option<(String, Value)>,
    page: Page,
    kept: Option<Ext>,
    node: bool,
    node_started: bool,
    backoffice: bool,
    ui: bool,
    cwd: Option<PathBuf>,
    env: Vec<(String, String)>,
    group: bool,
}

impl Served {
    /// A fresh repository ([`Repo::new`]), served with the hand-off page
    /// and made a node.
    pub fn new() -> Served {
        Served {
            repo: None,
            logins: Vec::new(),
            admin_password: false,
            runners: Vec::new(),
            echo: None,
            page: Page::HandOff,
            kept: None,
            node: true,
            node_started: true,
            backoffice: true,
            ui: false,
            cwd: None,
            env: Vec::new(),
            group: false,
        }
    }

    /// `repo`, made ready by the test, in place of a fresh one.
    pub fn on(repo: Repo) -> Served {
        Served {
            repo: Some(repo),
            ..Served::new()
        }
    }

    /// Adds login `login` holding exactly `caps`, signing in with
    /// `LOGIN-pw` ([`Repo::user`]).
    pub fn login(mut self, login: &str, caps: &str) -> Served {
        self.logins.push((login.into(), caps.into()));
        self
    }

    /// Gives `admin` the password `admin-pw`, to sign in with.
    pub fn admin_password(mut self) -> Served {
        self.admin_password = true;
        self
    }

    /// Defines the runner `name` as `block`, its page written by admin
    /// ([`runner_page`]).
    pub fn runner(mut self, name: &str, block: Value) -> Served {
        self.runners.push((name.into(), block));
        self
    }

    /// Defines the runner `echo` running the Python `script` with the
    /// variables of `env` ([`echo_runner`]); its `out` is the node's.
    pub fn echo(mut self, script: &str, env: Value) -> Served {
        self.echo = Some((script.into(), env));
        self
    }

    /// Serves `page` at `/ext/ocx-cgi` ([`Page::HandOff`] unless told).
    pub fn page(mut self, page: Page) -> Served {
        self.page = page;
        self
    }

    /// Serves `ext` as the extroot, as [`Page::At`] does, kept as long as
    /// the repository is served.
    pub fn extroot(mut self, ext: Ext) -> Served {
        self.page = Page::At(ext.dir.path().into());
        self.kept = Some(ext);
        self
    }

    /// Serves the repository without making it a node.
    pub fn without_node(mut self) -> Served {
        self.node = false;
        self
    }

    /// Makes the repository a node (its hook installed) without starting
    /// it; the node is stopped when dropped all the same.
    pub fn node_unstarted(mut self) -> Served {
        self.node_started = false;
        self
    }

    /// Serves the repository with no backoffice (the repository's
    /// `backoffice-disable`), whose process would outlive the server.
    pub fn without_backoffice(mut self) -> Served {
        self.backoffice = false;
        self
    }

    /// Starts `fossil server` in `dir` (the repository's own directory
    /// unless told).
    pub fn in_dir(mut self, dir: &Path) -> Served {
        self.cwd = Some(dir.into());
        self
    }

    /// Serves with `fossil ui` in the checkout `dir`, naming no
    /// repository: Fossil finds the checkout's.
    pub fn ui_in(mut self, dir: &Path) -> Served {
        self.ui = true;
        self.in_dir(dir)
    }

    /// Starts the server with `name` set to `value` in its environment.
    pub fn server_env(mut self, name: &str, value: &str) -> Served {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Starts the server in a process group of its own, so that a
    /// [`ServedNode::halt`] kills the process serving a request too.
    pub fn own_group(mut self) -> Served {
        self.group = true;
        self
    }

    /// Makes the repository as told, serves it on a free port of
    /// 127.0.0.1 and, unless told otherwise, makes it a node and starts
    /// the node.
    pub fn start(mut self) -> ServedNode {
        let repo = self.repo.take().unwrap_or_else(Repo::new);
        self.start_on(repo)
    }

    /// As [`Served::start`], serving `repo`: one the served node owns, or
    /// one the test keeps and lends (a second server of a repository
    /// already served, say).
    pub fn start_on<R: Borrow<Repo>>(self, given: R) -> ServedNode<R> {
        assert!(self.repo.is_none(), "a repository given twice");
        let repo = given.borrow();
        for (login, caps) in &self.logins {
            repo.user(login, caps);
        }
        if self.admin_password {
            repo.fossil(&["user", "password", "admin", "admin-pw"]);
        }
        for (name, block) in &self.runners {
            runner_page(repo, name, block);
        }
        let out = match &self.echo {
            Some((script, env)) => echo_runner(repo, script, env.clone()),
            None => repo.dir.path().join("out"),
        };
        if !self.backoffice {
            repo.fossil(&["settings", "backoffice-disable", "1"]);
        }
        let ext = match self.page {
            Page::Ocx => Some(Ext::new()),
            _ => self.kept,
        };
        let extroot = match self.page {
            Page::HandOff => {
                site_as_a_node_keeps_it(&repo.file);
                Some(ext_root(&repo.file))
            }
            Page::At(dir) => {
                site_as_a_node_keeps_it(&repo.file);
                Some(dir)
            }
            Page::Ocx => ext.as_ref().map(|e| e.dir.path().to_path_buf()),
            Page::Fossil => None,
        };
        let errors = tempfile::NamedTempFile::new().unwrap();
        let launch = Launch {
            file: (!self.ui).then(|| repo.file.clone()),
            extroot,
            cwd: self.cwd.unwrap_or_else(|| repo.dir.path().into()),
            env: self.env,
            group: self.group,
            errors: errors.path().into(),
        };
        let (server, port) = fossil_listening(|port| launch.command(port));
        let served = ServedNode {
            repo: given,
            port,
            out,
            server: Some(server),
            launch,
            _errors: errors,
            _ext: ext,
            node: self.node,
        };
        if self.node {
            let repo = served.repo.borrow();
            repo.json(&["hook", "install", "--url", &served.url("/")])
                .ok();
            if self.node_started {
                repo.json(&["node", "start"]).ok();
            }
        }
        served
    }
}

/// How [`Served`] starts its `fossil server` (or `fossil ui`), on any
/// port: again the same way after a halt.
struct Launch {
    /// The repository named, none for `fossil ui` in a checkout.
    file: Option<PathBuf>,
    extroot: Option<PathBuf>,
    cwd: PathBuf,
    env: Vec<(String, String)>,
    group: bool,
    /// Fossil's error log (`--errorlog`): what a request Fossil failed said.
    errors: PathBuf,
}

impl Launch {
    fn command(&self, port: u16) -> Command {
        use std::os::unix::process::CommandExt;
        let mut c = Command::new(fossil());
        let command = if self.file.is_some() { "server" } else { "ui" };
        c.args([command, "--port", &port.to_string(), "--localhost"]);
        if self.file.is_none() {
            c.arg("--nobrowser");
        }
        if let Some(extroot) = &self.extroot {
            c.arg("--nojail").arg("--extroot").arg(extroot);
        }
        c.arg("--errorlog").arg(&self.errors);
        c.args(&self.file);
        c.env("USER", "admin")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.cwd)
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        if self.group {
            c.process_group(0);
        }
        c
    }
}

/// A repository served by `fossil server` on 127.0.0.1 as [`Served`]
/// made it; stopped when dropped: the node (with its runs) first, then
/// the server.
pub struct ServedNode<R: Borrow<Repo> = Repo> {
    pub repo: R,
    /// The port `fossil server` listens on, on 127.0.0.1.
    pub port: u16,
    /// The echo runner's `out` (its log, its notes), where any run's
    /// account may write; the repository's `out` when there is no echo.
    pub out: PathBuf,
    server: Option<std::process::Child>,
    launch: Launch,
    _errors: tempfile::NamedTempFile,
    _ext: Option<Ext>,
    node: bool,
}

impl<R: Borrow<Repo>> ServedNode<R> {
    /// The server's URL, `http://127.0.0.1:PORT`.
    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The URL of `path` on the server (`path` starting with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base())
    }

    /// The URL `login` clones with, its password (`LOGIN-pw`) in it.
    pub fn url_as(&self, login: &str) -> String {
        format!("http://{login}:{login}-pw@127.0.0.1:{}/", self.port)
    }

    /// Stops `fossil server` (a node goes on) and every process forked
    /// from it: those answering requests still under way (a long-poll's
    /// lasts up to its wait) and Fossil's backoffice, which Fossil forks
    /// into a session of its own to outlive the server by up to a minute.
    /// The server is held stopped while they are found, so it forks no
    /// more; then SIGKILL, to its whole group when it has one of its own
    /// ([`Served::own_group`]). A program started for a request
    /// (`ocx-cgi`) ends with its request.
    pub fn halt(&mut self) {
        if let Some(mut c) = self.server.take() {
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP);
            // Looked for again until none is alive: a request's handler
            // killed while it forked the backoffice leaves the child, and
            // a killed process shows no command line once it is dead.
            for _ in 0..200 {
                let alive = forks_of(pid.as_raw());
                if alive.is_empty() {
                    break;
                }
                for forked in alive {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(forked),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            if self.launch.group {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(c.id() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts `fossil server` again on the same port, as after a halt.
    pub fn serve_again(&mut self) {
        let launch = &self.launch;
        self.server = Some(fossil_listening_again(
            |port| launch.command(port),
            self.port,
        ));
    }

    /// One request of `method` for `path` with `headers` and, for a POST,
    /// `body` with its length and no other header; the status, the head
    /// and the body. A connection the server cuts short answers what came.
    pub fn request_bytes(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, String, Vec<u8>) {
        let (out, _) = self.exchange(method, path, headers, body);
        let at = out
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or(out.len());
        let head = String::from_utf8_lossy(&out[..at]).into_owned();
        let status = head.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
        (status, head, out.get(at + 4..).unwrap_or_default().to_vec())
    }

    /// One request, a POST's `body` a form; the status, the head and the
    /// body. A connection cut short fails the test, saying Fossil's error
    /// log.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, String, String) {
        let form = [("Content-Type", "application/x-www-form-urlencoded")];
        let headers: Vec<(&str, &str)> = match method {
            "POST" => headers.iter().chain(&form).copied().collect(),
            _ => headers.to_vec(),
        };
        let (out, read) = self.exchange(method, path, &headers, body.as_bytes());
        if let Err(e) = read {
            panic!(
                "{method} {path}: {e}, {} bytes of an answer had come: {:?}; Fossil's error log: {:?}",
                out.len(),
                String::from_utf8_lossy(&out),
                std::fs::read_to_string(&self.launch.errors).unwrap_or_default()
            );
        }
        let text = String::from_utf8_lossy(&out).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
        (status, head.to_string(), body.to_string())
    }

    /// Sends one HTTP/1.0 request and reads the answer to its end: what
    /// came, and whether the reading ended well.
    fn exchange(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (Vec<u8>, std::io::Result<usize>) {
        use std::io::{Read, Write};
        let mut head = format!(
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{}\r\n",
            self.port
        );
        for (k, v) in headers {
            head += &format!("{k}: {v}\r\n");
        }
        if method == "POST" {
            head += &format!("Content-Length: {}\r\n", body.len());
        }
        head += "\r\n";
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        let _ = s.write_all(body);
        let mut out = Vec::new();
        let read = s.read_to_end(&mut out);
        (out, read)
    }

    /// Signs `login` in with its password (`LOGIN-pw`), as the login form
    /// does; its cookie, as a `Cookie` header gives it.
    pub fn login(&self, login: &str) -> String {
        self.login_with(login, &format!("{login}-pw"))
    }

    /// As [`ServedNode::login`], signing in with `password`.
    pub fn login_with(&self, login: &str, password: &str) -> String {
        let (status, head, _) =
            self.request("POST", "/login", &[], &format!("u={login}&p={password}"));
        assert_eq!(status, 302, "{login} did not sign in: {head}");
        head.lines()
            .find_map(|l| l.strip_prefix("Set-Cookie: "))
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_string()
    }
}

impl<R: Borrow<Repo>> Drop for ServedNode<R> {
    /// Stops the node, then the server and every process forked from it
    /// ([`ServedNode::halt`]).
    fn drop(&mut self) {
        if self.node {
            let _ = self.repo.borrow().json(&["node", "stop", "--runs"]);
        }
        self.halt();
    }
}

/// The other processes running `pid`'s very command line: what it forked
/// without starting another program (Fossil's request handlers and its
/// backoffice), wherever they were moved since. A test's server is told
/// a port and directories of its own, so no other process runs the same.
pub fn forks_of(pid: i32) -> Vec<i32> {
    let command = |p: i32| std::fs::read(format!("/proc/{p}/cmdline")).ok();
    let Some(own) = command(pid).filter(|c| !c.is_empty()) else {
        return Vec::new();
    };
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| *p != pid && command(*p).as_ref() == Some(&own))
        .collect()
}

/// A directory Fossil serves as its extroot: `ocx-cgi` linked to the
/// binary, and the page's configuration naming the tests' fossil.
pub struct Ext {
    pub dir: tempfile::TempDir,
}

impl Ext {
    /// `ocx` itself linked as `ocx-cgi`: the page's own program, run as
    /// Fossil runs it.
    pub fn new() -> Ext {
        Ext::linked_to(Path::new(env!("CARGO_BIN_EXE_ocx")))
    }

    /// `program` linked as `ocx-cgi` (the page's hand-off program, say).
    pub fn linked_to(program: &Path) -> Ext {
        let dir = tempfile::Builder::new()
            .prefix("ocx-ext-")
            .tempdir()
            .unwrap();
        std::os::unix::fs::symlink(program, dir.path().join("ocx-cgi")).unwrap();
        let config = serde_json::json!({"fossil": fossil()});
        std::fs::write(dir.path().join(".ocx-cgi.json"), config.to_string()).unwrap();
        Ext { dir }
    }

    /// The page's program in it.
    pub fn program(&self) -> PathBuf {
        self.dir.path().join("ocx-cgi")
    }
}

/// The start of a test session runner written in Python: what both the
/// restricted-run tests and the attacks from inside a run share. `note`
/// records a finding for the test to read, `mcp(name)` starts the MCP
/// server `.ocx/mcp.json` names and answers its JSON-RPC caller, and
/// `fossil` runs the program the test names.
pub const PY_RUNNER_PRELUDE: &str = r#"#!/usr/bin/python3
import sys, os, json, socket, subprocess, sqlite3, hashlib, base64
out = os.environ["OCX_TEST_OUT"]
FOSSIL = os.environ["OCX_TEST_FOSSIL"]

def note(obj):
    with open(os.path.join(out, "results"), "a") as f:
        f.write(json.dumps(obj) + "\n")

def mcp(name):
    with open(os.path.join(".ocx", "mcp.json")) as f:
        spec = json.load(f)["mcpServers"][name]
    p = subprocess.Popen([spec["command"], *spec["args"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    n = [0]
    def rpc(method, params):
        n[0] += 1
        p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": n[0], "method": method, "params": params}) + "\n")
        p.stdin.flush()
        while True:
            msg = json.loads(p.stdout.readline())
            if msg.get("id") == n[0]:
                return msg
    rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test-runner", "version": "1"}})
    p.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
    p.stdin.flush()
    return rpc

def fossil(*args):
    p = subprocess.run([FOSSIL, *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr
"#;

/// Waits, `within` at most, until the node at `root` has handled every
/// row the repository `file` holds; the last row when it has not.
pub fn handled_all(file: &Path, root: &Path, within: Duration) -> Result<(), i64> {
    let until = Instant::now() + within;
    let last = ocx::fossil::Repository::open(file)
        .unwrap()
        .last_rid()
        .unwrap();
    while Instant::now() < until {
        let state = ocx::node::wake::State::load(root);
        let repo = ocx::fossil::Repository::open(file).unwrap();
        let filled = repo.filled_phantoms(&state.phantoms).unwrap();
        if state.last_rid >= last && filled.is_empty() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    Err(last)
}

/// Whether no node process holds the node's root `root`: its lock is
/// free.
pub fn node_free(root: &Path) -> bool {
    ocx::node::lock(&root.join("node.lock"), false)
        .unwrap()
        .is_some()
}

/// Kills the node whose root is `root` with SIGKILL, as a crash would,
/// and waits until its process is gone: a killed process holds its lock
/// until the kernel has ended it (a thread in the middle of a disk write
/// first finishes it), and a node started meanwhile finds one running
/// and leaves it to it.
pub fn kill_node(root: &Path) {
    kill_from(&root.join("node.pid"));
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while !node_free(root) {
        assert!(
            Instant::now() < until,
            "the node killed at {} still holds its lock",
            root.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills with SIGKILL the process whose pid the file `pid_file` holds (a
/// node's `node.pid`, a run's `watcher.pid`), as a crash would.
pub fn kill_from(pid_file: &Path) {
    let pid: i32 = std::fs::read_to_string(pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// What a finished program wrote, its output then its errors, as one text
/// for an assertion's message.
pub fn said(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The events of the node's log under `root`, oldest first: each line's
/// object (a line that holds none, as the daemon's own stderr writes, is
/// left out).
pub fn node_log(root: &Path) -> Vec<Value> {
    std::fs::read_to_string(root.join("node.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
        .collect()
}

/// The node's log under `root` as written, for a failing test to show.
pub fn node_log_text(root: &Path) -> String {
    std::fs::read_to_string(root.join("node.log")).unwrap_or_default()
}

/// How many events of the node's log under `root` `matches` holds of.
pub fn logged(root: &Path, matches: impl Fn(&Value) -> bool) -> usize {
    node_log(root).iter().filter(|e| matches(e)).count()
}

/// Waits up to `within` until the node's log under `root` holds an event
/// `matches` holds of; the first such event, or None.
pub fn logged_within(
    root: &Path,
    within: Duration,
    matches: impl Fn(&Value) -> bool,
) -> Option<Value> {
    let until = Instant::now() + within;
    loop {
        if let Some(e) = node_log(root).into_iter().find(|e| matches(e)) {
            return Some(e);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Waits up to `secs` seconds until the node's log under `root` holds an
/// event `matches` holds of (as `is(e, "opened", &record)`); that event.
/// Panics, showing the log, when none comes.
pub fn until_logged(root: &Path, secs: u64, matches: impl Fn(&Value) -> bool) -> Value {
    logged_within(root, Duration::from_secs(secs), matches)
        .unwrap_or_else(|| panic!("no such event in the node's log:\n{}", node_log_text(root)))
}

/// Whether event `e` is `done` about record `record`.
pub fn is(e: &Value, done: &str, record: &str) -> bool {
    e["done"] == done && e["record"] == record
}

/// The page of the runner `echo` running `runner`, with the environment
/// `env` (an object).
pub fn echo_page(runner: &Path, env: &Value) -> String {
    runner_page_text(&serde_json::json!({"command": [runner], "env": env, "input": "lines"}))
}

/// A runner's page holding `block`, its definition.
pub fn runner_page_text(block: &Value) -> String {
    format!("# A runner\n\n```json\n{block}\n```\n")
}

/// Writes the Python `script` to `prog/runner.py` beside `repo`, and
/// makes `out` there, where any run's account may write; the repository's
/// directory is opened for reading, so a run's account reaches the
/// script. The script's path and `out`.
pub fn runner_script(repo: &Repo, script: &str) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = repo.dir.path();
    let (prog, out) = (dir.join("prog"), dir.join("out"));
    std::fs::create_dir_all(&prog).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let runner = prog.join("runner.py");
    std::fs::write(&runner, script).unwrap();
    std::fs::set_permissions(&runner, std::fs::Permissions::from_mode(0o755)).unwrap();
    (runner, out)
}

/// Defines the runner `name` in `repo` as `block`, its page written by admin.
pub fn runner_page(repo: &Repo, name: &str, block: &Value) {
    let page = repo.dir.path().join(format!("{name}.md"));
    std::fs::write(&page, runner_page_text(block)).unwrap();
    repo.fossil(&[
        "wiki",
        "create",
        &format!("sandbox/{name}"),
        page.to_str().unwrap(),
        "--mimetype",
        "text/x-markdown",
    ]);
}

/// Defines the runner `echo` in `repo`: the Python `script`
/// ([`runner_script`]) run with `OCX_TEST_LOG` naming `out/log` and the
/// variables of `env` (an object) too; `out`.
pub fn echo_runner(repo: &Repo, script: &str, env: Value) -> PathBuf {
    let (runner, out) = runner_script(repo, script);
    let mut vars = serde_json::json!({ "OCX_TEST_LOG": out.join("log") });
    if let (Some(all), Some(more)) = (vars.as_object_mut(), env.as_object()) {
        all.extend(more.clone());
    }
    runner_page(
        repo,
        "echo",
        &serde_json::json!({"command": [runner], "env": vars, "input": "lines"}),
    );
    out
}

/// A port of 127.0.0.1 free now, for a server to listen on.
///
/// Free now is not free later: another process may take it before the
/// server does. A Fossil server is started by [`fossil_listening`], which
/// holds to what Fossil says it listens on.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts the Fossil server `server` makes for a port (`fossil server` or
/// `fossil ui` given `--port`), on a port of 127.0.0.1 free a moment
/// before, and answers it with its port once it listens there.
///
/// Free a moment before is not yet the server's. Fossil binds its port
/// with `SO_REUSEADDR` and never reads what `listen` answers, so two
/// Fossils given one port both say they listen, and the second serves
/// nobody. So tests start their servers one at a time (the kernel gives
/// no port anything listens on), and a port another process took
/// meanwhile is never believed: Fossil says it cannot listen and ends,
/// and another port is tried (HISTORY 299).
pub fn fossil_listening(mut server: impl FnMut(u16) -> Command) -> (std::process::Child, u16) {
    let _alone = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..10 {
        let port = free_port();
        if let Some(child) = fossil_listening_on(server(port), port) {
            return (child, port);
        }
    }
    panic!("Fossil could listen on none of ten free ports");
}

/// Held while a test's Fossil server starts ([`fossil_listening`]).
static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Starts the Fossil server `server` makes for `port` again on that port,
/// as a server halted and started again is; tries for up to ten seconds
/// while the port is still held (by the halted server's last requests).
pub fn fossil_listening_again(
    mut server: impl FnMut(u16) -> Command,
    port: u16,
) -> std::process::Child {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let alone = STARTING.lock().unwrap_or_else(|e| e.into_inner());
        let started = fossil_listening_on(server(port), port);
        drop(alone);
        if let Some(child) = started {
            return child;
        }
        assert!(
            Instant::now() < until,
            "Fossil could not listen on port {port} again"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts `server`, a Fossil server told to listen on `port`, and answers
/// it once Fossil says it listens; none when Fossil ended without
/// listening there.
fn fossil_listening_on(mut server: Command, port: u16) -> Option<std::process::Child> {
    use std::io::BufRead;
    let mut child = server.stdout(Stdio::piped()).spawn().unwrap();
    let mut said = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let _ = said.read_line(&mut line);
    let listens_on = line
        .strip_prefix("Listening for HTTP requests on TCP port ")
        .and_then(|rest| rest.split(',').next())
        .map(|at| at.trim_start_matches("localhost:"));
    if listens_on != Some(port.to_string().as_str()) {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    // Whatever else the server says is read, so that saying it never stops it.
    std::thread::spawn(move || std::io::copy(&mut said, &mut std::io::sink()));
    // Fossil says where it listens a moment before it does. Whether it
    // does is read from the kernel's table, not tried with a connection:
    // Fossil would serve that connection in a process of its own, and
    // `fossil ui` in a checkout, starting two at once, may fail one before
    // it reads its request (answering a robot check, then a reset).
    let until = Instant::now() + Duration::from_secs(10);
    while !listens(port) {
        assert!(
            Instant::now() < until,
            "Fossil never listened on port {port}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    Some(child)
}

/// Whether a socket listens on `port` of 127.0.0.1, as `/proc/net/tcp`
/// lists it (`0100007F:PORT`, state `0A`).
fn listens(port: u16) -> bool {
    let local = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/net/tcp").is_ok_and(|table| {
        table.lines().skip(1).any(|row| {
            let mut fields = row.split_whitespace().skip(1);
            fields.next() == Some(local.as_str()) && fields.nth(1) == Some("0A")
        })
    })
}

/// The steps a test's runner has noted so far, a JSON object a line, in
/// `out/results`.
pub fn noted(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("results"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The steps a test's runner noted ([`noted`]) once its last one is
/// `done`; `what` names the runner in the failure.
pub fn noted_until_done(out: &Path, what: &str) -> Vec<Value> {
    let until = Instant::now() + Duration::from_secs(90);
    let steps = loop {
        let lines = noted(out);
        if lines.last().is_some_and(|l| l["step"] == "done") {
            break lines;
        }
        assert!(Instant::now() < until, "{what} never finished: {lines:#?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        !steps.iter().any(|s| s["step"] == "crash"),
        "{what} itself failed: {steps:#?}"
    );
    steps
}

/// Waits for the node's response to `record` in `repo`; answers its
/// outcome and note.
pub fn response_to(repo: &Repo, record: &str) -> (String, String) {
    let until = Instant::now() + Duration::from_secs(90);
    let root = repo.node_root();
    while Instant::now() < until {
        let thread = repo.json(&["thread", "--of", record]).ok();
        for p in thread["posts"].as_array().unwrap() {
            if let ocx::protocol::message::Reading::Message { message } =
                ocx::protocol::message::read(p["text"].as_str().unwrap().as_bytes())
                && message["kind"] == "response"
                && message["answers"] == record
            {
                return (
                    message["outcome"].as_str().unwrap().into(),
                    message["note"].as_str().unwrap().into(),
                );
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no response to {record}: {}", node_log_text(&root));
}

/// A process of the tests' own `ocx` program, alive: its pid and its
/// arguments (the program's path first).
#[derive(Debug, Clone)]
pub struct OcxProcess {
    pub pid: i32,
    pub args: Vec<String>,
}

impl OcxProcess {
    /// The directory its `--root` names, if it names one (a node's
    /// process and a run's watcher do).
    pub fn root(&self) -> Option<&Path> {
        let at = self.args.iter().position(|a| a == "--root")?;
        self.args.get(at + 1).map(Path::new)
    }

    /// What it is: its first argument after the program (`node-daemon`,
    /// `watch`, ...).
    pub fn command(&self) -> &str {
        self.args.get(1).map(String::as_str).unwrap_or("")
    }
}

/// The `(state, start time)` of process `pid` as `/proc/PID/stat` says
/// (its start time in clock ticks since the host booted).
fn stat_of(pid: &str) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// The processes of the tests' `ocx` program alive now (a zombie is no
/// longer alive), started since `since` (a start time as `/proc` counts
/// it; 0 for any).
///
/// A process is the program's when `/proc/PID/exe` is its file, as the
/// kernel links it: however it was started or named. The same reading
/// serves every test that looks for its node's process and the check at
/// the suite's end ([`leftovers`]), so a reading that found nothing
/// would fail those tests first.
pub fn ocx_processes(since: u64) -> Vec<OcxProcess> {
    let ocx = ocx_bin()
        .canonicalize()
        .unwrap_or_else(|_| ocx_bin().into());
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(exe) = std::fs::read_link(entry.path().join("exe")) else {
            continue;
        };
        let exe = exe.to_string_lossy();
        if Path::new(exe.strip_suffix(" (deleted)").unwrap_or(&exe)) != ocx {
            continue;
        }
        match stat_of(pid) {
            Some((state, start)) if state != 'Z' && state != 'X' && start >= since => {}
            _ => continue,
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if let (Ok(pid), false) = (pid.parse(), args.is_empty()) {
            found.push(OcxProcess { pid, args });
        }
    }
    found
}

/// The node processes and run watchers of the tests' `ocx` program
/// alive now whose root lies under `dir`.
pub fn nodes_and_watchers_under(dir: &Path) -> Vec<OcxProcess> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.into());
    ocx_processes(0)
        .into_iter()
        .filter(|p| {
            matches!(
                p.command(),
                "node-daemon" | "watchers" | "watch" | "workspace-ahead"
            )
        })
        .filter(|p| p.root().is_some_and(|r| r.starts_with(&dir)))
        .collect()
}

/// Whether process `pid` has ended (or is a zombie its parent has not
/// yet reaped).
pub fn ended(pid: i32) -> bool {
    !matches!(stat_of(&pid.to_string()), Some((state, _)) if state != 'Z' && state != 'X')
}

/// The node processes and run watchers of this run of the tests' `ocx`
/// program still alive, waiting `within` at most for those still ending.
pub fn leftovers(since: u64, within: Duration) -> Vec<OcxProcess> {
    let until = Instant::now() + within;
    loop {
        let left: Vec<OcxProcess> = ocx_processes(since)
            .into_iter()
            .filter(|p| {
                matches!(
                    p.command(),
                    "node-daemon" | "watchers" | "watch" | "workspace-ahead"
                )
            })
            .collect();
        if left.is_empty() || Instant::now() >= until {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The check that the suite leaves no node process and no run watcher
/// behind, registered before `main` runs (as a C program's constructor
/// is) and run when the test binary exits: after every test, whatever
/// the harness ran and in which order, which no test of its own could
/// be sure of. A test ends every process it starts; a node or watcher
/// of this run still alive 15 s after the last test is named on standard
/// error, ended, and the binary exits 1, failing the suite. The page
/// servers this run started are ended then too, without failing it: each
/// lives past its last request by design, for the next.
#[used]
#[unsafe(link_section = ".init_array")]
static CHECK_AT_EXIT: extern "C" fn() = check_at_exit;

/// When this test binary started, as `/proc` counts it.
static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn check_at_exit() {
    let start = stat_of(&std::process::id().to_string()).map_or(0, |s| s.1);
    STARTED.store(start, std::sync::atomic::Ordering::SeqCst);
    // SAFETY: registers a function taking and returning nothing, which
    // catches every panic itself.
    unsafe {
        nix::libc::atexit(no_leftovers);
    }
}

/// At exit, thread-locals are gone: this writes through the raw file
/// descriptor 2 and never panics.
extern "C" fn no_leftovers() {
    let checked = std::panic::catch_unwind(|| {
        let since = STARTED.load(std::sync::atomic::Ordering::SeqCst);
        let left = leftovers(since, Duration::from_secs(15));
        // The page servers this run's requests started serve no site once
        // every test's server is gone: ended here, not left to their idle
        // end in a directory a test removed.
        for p in ocx_processes(since) {
            if p.command() == "page-server" {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(p.pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
        }
        if left.is_empty() {
            return true;
        }
        let mut said = String::from(
            "\nThe tests left these processes of ocx running (a test ends every process it starts):\n",
        );
        for p in &left {
            said.push_str(&format!("  {} {}\n", p.pid, p.args.join(" ")));
        }
        // SAFETY: fd 2 stays open for the process's life; the File is never dropped.
        let mut stderr = std::mem::ManuallyDrop::new(unsafe {
            <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(2)
        });
        let _ = std::io::Write::write_all(&mut *stderr, said.as_bytes());
        for signal in [
            nix::sys::signal::Signal::SIGTERM,
            nix::sys::signal::Signal::SIGKILL,
        ] {
            for p in leftovers(since, Duration::ZERO) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p.pid), signal);
            }
            let until = Instant::now() + Duration::from_secs(10);
            while !leftovers(since, Duration::ZERO).is_empty() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        false
    });
    if !matches!(checked, Ok(true)) {
        // SAFETY: ends the process at once, as exit would, with status 1.
        unsafe { nix::libc::_exit(1) };
    }
}

/// Each verdict as (its sender, its value or why it does not count).
pub type Pairs = Vec<(String, String)>;

/// The verdicts on `checkin` in `r`: those counting, and those not.
pub fn verdicts(r: &Repo, checkin: &str) -> (Pairs, Pairs) {
    let out = r.json(&["verdicts", "--checkin", checkin]).ok();
    let pick = |k: &str, f: &str| -> Pairs {
        out[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| {
                (
                    j["from"].as_str().unwrap_or("").to_string(),
                    j[f].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    };
    (pick("counting", "value"), pick("not_counting", "why_not"))
}

/// The failure [`Repo::fossil`] waits out, made on purpose: a write lock
/// held as Fossil's server holds it while it answers a sync has
/// `fossil wiki create` refused at once, and the helper writes the page
/// once the lock is let go.
#[test]
fn a_tests_write_waits_out_a_sync_holding_the_served_repositorys_lock() {
    let repo = Repo::new();
    let page = repo.dir.path().join("page.md");
    std::fs::write(&page, "a page\n").unwrap();
    let held = rusqlite::Connection::open(&repo.file).unwrap();
    held.execute_batch("BEGIN IMMEDIATE").unwrap();
    let create = |name: &str| {
        let mut c = Command::new(fossil());
        c.args(["wiki", "create", name, page.to_str().unwrap(), "-R"])
            .arg(&repo.file)
            .env("USER", "admin");
        c
    };
    let refused = create("refused").output().unwrap();
    assert!(
        !refused.status.success() && said(&refused).contains("database is locked"),
        "{}",
        said(&refused)
    );
    let letting_go = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        held.execute_batch("COMMIT").unwrap();
    });
    repo.fossil(&["wiki", "create", "waited", page.to_str().unwrap()]);
    letting_go.join().unwrap();
    assert_eq!(repo.fossil(&["wiki", "export", "waited"]), "a page\n");
    assert!(!repo.fossil(&["wiki", "list"]).contains("refused"));
}

/// A served repository's server leaves nothing behind once dropped: not
/// the backoffice Fossil forked into a session of its own after a
/// request, which outlived the server by up to a minute.
#[test]
fn a_halted_server_leaves_no_process_it_forked() {
    use crate::machines::until;
    use std::io::{Read, Write};
    let mut s = Served::on(Repo::new()).start();
    let server = s.server.as_ref().unwrap().id() as i32;
    let mut http = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    http.write_all(b"GET /timeline HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    http.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    let forks = until("Fossil's backoffice forked", 10, || {
        Some(forks_of(server)).filter(|f| !f.is_empty())
    });
    // Halted, as a test that stops its server midway does (and as
    // dropping it does): its forks end with it.
    s.halt();
    let alive = |p: &i32| std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| !c.is_empty());
    until("every fork of the server ended", 5, || {
        (!forks.iter().any(alive)).then_some(())
    });
}
