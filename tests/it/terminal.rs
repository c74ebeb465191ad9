//! A run's terminal (protocol v1, C3), joined for real: a run whose
//! runner page says `"terminal": true`, a person in `tmux` running `ocx
//! attach` on the node's host, seeing the program's screen, typing a line
//! it acts on, resizing their window, leaving with Ctrl-]; the node's post
//! naming them; and who may not join, or must wait.

use crate::support::{Repo, Served, ServedNode, runner_page, runner_script};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long a test waits for what a person would wait for.
const PATIENCE: Duration = Duration::from_secs(60);

/// A small terminal program of ours: it says whether its input is a
/// terminal and its window's size, again at each SIGWINCH, and answers
/// each line it reads; each thing noted for the test.
const TERMINAL_PROGRAM: &str = r#"
import signal, fcntl, termios, struct
def size():
    rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(0, termios.TIOCGWINSZ, b"\0" * 8))
    return rows, cols
def on_winch(*_):
    rows, cols = size()
    note({"step": "size", "rows": rows, "cols": cols})
    sys.stdout.write("\r\nwindow %dx%d\r\n> " % (rows, cols))
    sys.stdout.flush()
signal.signal(signal.SIGWINCH, on_winch)
note({"step": "start", "tty": os.isatty(0), "out_tty": os.isatty(1), "size": size(),
      "term": os.environ.get("TERM"), "pgrp_is_fg": os.tcgetpgrp(0) == os.getpgrp()})
sys.stdout.write("ready\r\n> ")
sys.stdout.flush()
while True:
    try:
        line = sys.stdin.readline()
    except InterruptedError:
        continue
    if not line:
        break
    line = line.rstrip("\n")
    note({"step": "line", "text": line})
    if line == "controls":
        # The clipboard, a link, a device control, an application string and
        # a window report, each written with C1 introducers, as 8-bit bytes
        # and as UTF-8 characters; then the queries a terminal answers by
        # typing: cursor position, device attributes, a colour, the answerback.
        c1 = b"\x9d52;c;b2N4LXNlY3JldC1wYXlsb2Fk\x9c\x9d8;;http://example.org/\x9c\x90$qm\x9c\x9fapp\x9c\x9b21t"
        sys.stdout.flush()
        sys.stdout.buffer.write(c1)
        sys.stdout.buffer.write(c1.decode("latin-1").encode("utf-8"))
        sys.stdout.buffer.write(b"\x1b[6n\x9b6n\x1b[c\xc2\x9bc\x1b]11;?\x07\x05\x1bZ")
        sys.stdout.buffer.flush()
    if line == "clipboard":
        sys.stdout.write("\x1b]52;c;b2N4LXNlY3JldC1wYXlsb2Fk\x07\x1bPtmux;\x1b\x1b]52;c;b2N4LXNlY3JldC1wYXlsb2Fk\x07\x1b\\")
        sys.stdout.flush()
    sys.stdout.write("\x1b[1mgot:\x1b[0m %s\r\n> " % line)
    sys.stdout.flush()
"#;

/// A session of `tmux` of its own (its own server), running one command.
pub struct Tmux {
    socket: PathBuf,
    name: String,
}

impl Tmux {
    /// Starts `command` (run by `sh -c`, then its exit status shown and
    /// held on screen) in a window `cols` by `rows`.
    pub fn start(dir: &Path, name: &str, command: &str, cols: u16, rows: u16) -> Tmux {
        let t = Tmux {
            socket: dir.join(format!("tmux-{name}")),
            name: name.into(),
        };
        let held = format!("{command}; echo \"[exit $?]\"; sleep 600");
        let out = t
            .tmux()
            .args(["new-session", "-d", "-s", name, "-x"])
            .arg(cols.to_string())
            .arg("-y")
            .arg(rows.to_string())
            .args(["sh", "-c", &held])
            .output()
            .expect("tmux: run scripts/setup.sh");
        assert!(out.status.success(), "tmux: {}", crate::support::said(&out));
        let _ = t
            .tmux()
            .args(["set-option", "-t", name, "window-size", "manual"])
            .output();
        t
    }

    fn tmux(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket).env_remove("TMUX");
        c
    }

    /// Types `text` as it is.
    pub fn type_text(&self, text: &str) {
        let out = self
            .tmux()
            .args(["send-keys", "-t", &self.name, "-l", text])
            .output()
            .unwrap();
        assert!(out.status.success());
    }

    /// Presses `key` as tmux names it (`Enter`, `C-]`).
    pub fn press(&self, key: &str) {
        let out = self
            .tmux()
            .args(["send-keys", "-t", &self.name, key])
            .output()
            .unwrap();
        assert!(out.status.success());
    }

    /// Gives the window `cols` by `rows`.
    pub fn resize(&self, cols: u16, rows: u16) {
        let out = self
            .tmux()
            .args(["resize-window", "-t", &self.name, "-x"])
            .arg(cols.to_string())
            .arg("-y")
            .arg(rows.to_string())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", crate::support::said(&out));
    }

    /// Lets programs in the window set the clipboard (OSC 52), which
    /// tmux keeps as a paste buffer.
    pub fn set_clipboard(&self) {
        let _ = self
            .tmux()
            .args(["set-option", "-g", "set-clipboard", "on"])
            .output();
    }

    /// Copies to `file` every byte the program in the window writes to it
    /// from now on, as the terminal reads them.
    pub fn record_to(&self, file: &Path) {
        let out = self
            .tmux()
            .args(["pipe-pane", "-O", "-t", &self.name])
            .arg(format!("cat >> '{}'", file.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", crate::support::said(&out));
    }

    /// Every paste buffer tmux keeps, as text.
    pub fn buffers(&self) -> String {
        let list = self
            .tmux()
            .args(["list-buffers", "-F", "#{buffer_name}"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&list.stdout)
            .lines()
            .map(|b| {
                let out = self.tmux().args(["show-buffer", "-b", b]).output().unwrap();
                String::from_utf8_lossy(&out.stdout).into_owned()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// What the window shows now.
    pub fn screen(&self) -> String {
        let out = self
            .tmux()
            .args(["capture-pane", "-p", "-t", &self.name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the window shows `text`; the screen.
    pub fn shows(&self, text: &str) -> String {
        let until = Instant::now() + PATIENCE;
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(
                Instant::now() < until,
                "the window never showed {text:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").output();
    }
}

/// A served node whose runner `term` runs [`TERMINAL_PROGRAM`] on a
/// terminal; its steps noted in `out`.
pub struct Site {
    pub node: ServedNode,
    pub out: PathBuf,
}

impl Site {
    pub fn new() -> Site {
        let repo = Repo::new();
        repo.user("pat", "v234");
        repo.user("stone", "a");
        let script = format!("{}{TERMINAL_PROGRAM}", crate::support::PY_RUNNER_PRELUDE);
        let (runner, out) = runner_script(&repo, &script);
        runner_page(
            &repo,
            "term",
            &json!({"command": [runner], "input": "lines", "terminal": true,
                    "env": {"OCX_TEST_OUT": out, "OCX_TEST_FOSSIL": crate::support::fossil(), "TERM": "xterm-256color"}}),
        );
        Site {
            node: Served::on(repo).start(),
            out,
        }
    }

    /// A record for `term`; its full hash, once its program has started.
    pub fn record(&self) -> String {
        let record = self
            .node
            .repo
            .json(&[
                "create",
                "--runner",
                "term",
                "--objective",
                "Answer at the terminal",
                "--wall",
                "10m",
                "--hears",
                "admin",
                "--read-write",
                self.out.to_str().unwrap(),
            ])
            .ok_str("record");
        self.noted(|s| {
            s["step"] == "line" && s["text"].as_str().is_some_and(|t| t.starts_with("Record "))
        });
        record
    }

    /// The steps the program noted.
    pub fn steps(&self) -> Vec<Value> {
        std::fs::read_to_string(self.out.join("results"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Waits until the program noted a step `matches` holds of; that step.
    pub fn noted(&self, matches: impl Fn(&Value) -> bool) -> Value {
        let until = Instant::now() + PATIENCE;
        loop {
            if let Some(s) = self.steps().into_iter().find(|s| matches(s)) {
                return s;
            }
            assert!(
                Instant::now() < until,
                "the program never noted that: {:#?}\n{}",
                self.steps(),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The command line that attaches to `record`'s run as `login`.
    pub fn attach(&self, record: &str, login: &str) -> String {
        format!(
            "{} attach {} --repository {} --user {login}",
            env!("CARGO_BIN_EXE_ocx"),
            &record[..12],
            self.node.repo.file.display()
        )
    }

    /// `login` attached to `record`'s terminal in tmux session `session`,
    /// 120 columns by 40 rows, once the run shows it that window.
    pub fn joined(&self, record: &str, session: &str, login: &str) -> Tmux {
        let tmux = Tmux::start(
            self.node.repo.dir.path(),
            session,
            &self.attach(record, login),
            120,
            40,
        );
        tmux.shows("window 40x120");
        tmux
    }

    /// The run's directory.
    pub fn run_dir(&self, record: &str) -> PathBuf {
        ocx::node::config::NodeConfig::run_dir(&self.node.repo.node_root(), record)
    }

    /// The run's output log, and its watcher's and the node's, for a failure's message.
    pub fn logs(&self) -> String {
        let root = self.node.repo.node_root();
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
        let runs: Vec<PathBuf> = std::fs::read_dir(root.join("runs"))
            .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default();
        let mut t = String::new();
        for r in runs {
            t += &format!(
                "{}:\noutput.log:\n{}\nwatch.log:\n{}\n",
                r.display(),
                read(r.join("output.log")),
                read(r.join("watch.log"))
            );
        }
        t + &crate::support::node_log_text(&root)
    }

    /// The posts at `record`'s place by the node's login holding `text`.
    pub fn node_posts(&self, record: &str, text: &str) -> Vec<String> {
        let node = ocx::node::config::NodeConfig::load(&self.node.repo.node_root())
            .unwrap()
            .login;
        self.node.repo.json(&["thread", "--of", record]).ok()["posts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| {
                p["text"].as_str().is_some_and(|t| t.contains(text))
                    && p["from"].as_str() == Some(node.as_str())
            })
            .map(|p| p["text"].as_str().unwrap().to_string())
            .collect()
    }

    /// Waits until the node posted at `record`'s place one post holding `text`; its words.
    pub fn posted(&self, record: &str, text: &str) -> String {
        let until = Instant::now() + PATIENCE;
        loop {
            if let Some(p) = self.node_posts(record, text).pop() {
                return p;
            }
            assert!(
                Instant::now() < until,
                "the node never posted {text:?}:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn a_person_attaches_sees_the_screen_types_resizes_and_leaves_and_the_node_posts_it() {
    let site = Site::new();
    let record = site.record();
    let start = site.noted(|s| s["step"] == "start");
    assert_eq!(start["tty"], true, "the program's input is a terminal");
    assert_eq!(start["out_tty"], true);
    assert_eq!(start["size"], json!([50, 200]), "50 rows by 200 columns");
    assert_eq!(
        start["term"], "xterm-256color",
        "TERM as the page's env names it"
    );
    assert_eq!(
        start["pgrp_is_fg"], true,
        "the terminal is its controlling terminal"
    );

    let console = site.node.repo.json(&["console"]).ok();
    assert_eq!(
        console["running"][0]["attach"],
        format!("ocx attach {}", &record[..16]),
        "console says how to attach: {console:#}"
    );

    let tmux = Tmux::start(
        site.node.repo.dir.path(),
        "admin",
        &site.attach(&record, "admin"),
        120,
        40,
    );
    site.noted(|s| s["step"] == "size" && s["rows"] == 40 && s["cols"] == 120);
    tmux.shows("window 40x120");

    tmux.type_text("hello from admin");
    tmux.press("Enter");
    site.noted(|s| s["step"] == "line" && s["text"] == "hello from admin");
    tmux.shows("got: hello from admin");

    tmux.resize(100, 30);
    site.noted(|s| s["step"] == "size" && s["rows"] == 30 && s["cols"] == 100);
    tmux.shows("window 30x100");

    std::thread::sleep(Duration::from_millis(1100));
    tmux.press("C-]");
    let screen = tmux.shows("[exit 0]");
    assert!(screen.contains("joining: left"), "{screen}");
    site.noted(|s| s["step"] == "size" && s["rows"] == 50 && s["cols"] == 200);

    let post = site.posted(&record, "attached to this run's terminal");
    assert!(
        post.contains("admin attached to this run's terminal at ")
            && post.contains(" UTC, for ")
            && post.contains("and left."),
        "{post}"
    );
    let seconds: u64 = post
        .split(" UTC, for ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!((1..60).contains(&seconds), "{post}");

    let log = std::fs::read_to_string(site.run_dir(&record).join("output.log")).unwrap();
    assert!(log.contains("got: hello from admin\n"), "{log}");
    assert!(!log.contains('\x1b') && !log.contains('\r'), "{log:?}");
}

#[test]
fn who_may_not_join_is_refused_and_a_second_person_waits_their_turn() {
    let site = Site::new();
    let record = site.record();
    let repo = &site.node.repo;

    let pat = repo.json(&["attach", &record[..12], "--user", "pat"]);
    assert_eq!(pat.code, 1, "a login without admin or setup: {pat:?}");
    assert_eq!(pat.answer()["stopped"]["kind"], "refused", "{pat:?}");
    let dry = repo
        .json(&["attach", &record[..12], "--user", "admin", "--dry-run"])
        .ok();
    assert_eq!(dry["record"], record.as_str());
    let no_terminal = repo.ocx(&["attach", &record[..12], "--user", "admin"]);
    assert_eq!(no_terminal.code, 1);
    assert!(
        no_terminal
            .stderr
            .contains("standard input is not a terminal"),
        "{no_terminal:?}"
    );

    // Another account of the host: refused by the tool, and by the socket itself.
    let nobody = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(site.attach(&record, "admin").split(' '))
        .arg("--json")
        .output()
        .unwrap();
    let said = crate::support::said(&nobody);
    assert_eq!(nobody.status.code(), Some(1), "{said}");
    assert!(said.contains("only the account the node runs as"), "{said}");
    let socket = site.run_dir(&record).join(ocx::run::terminal::SOCKET);
    let direct = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(["/usr/bin/python3", "-c", "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b'admin 40 120\\n'); print(s.recv(100))"])
        .arg(&socket)
        .output()
        .unwrap();
    let said = crate::support::said(&direct);
    assert!(!direct.status.success(), "{said}");
    assert!(said.contains("PermissionError"), "{said}");

    let first = site.joined(&record, "first", "admin");
    let second = Tmux::start(
        repo.dir.path(),
        "second",
        &site.attach(&record, "stone"),
        90,
        25,
    );
    let waiting = second.shows("joining: waiting");
    assert!(waiting.contains("admin joined at"), "{waiting}");
    second.type_text("not yet");
    first.type_text("from the first");
    first.press("Enter");
    site.noted(|s| s["step"] == "line" && s["text"] == "from the first");
    assert!(
        !second.screen().contains("got: from the first"),
        "the one waiting sees nothing yet"
    );

    first.press("C-]");
    first.shows("joining: left");
    site.noted(|s| s["step"] == "size" && s["rows"] == 25 && s["cols"] == 90);
    second.shows("window 25x90");
    second.press("Enter");
    site.noted(|s| s["step"] == "line" && s["text"] == "not yet");
    second.press("C-]");
    second.shows("[exit 0]");

    site.posted(&record, "stone attached");
    let admin = site.node_posts(&record, "admin attached");
    assert_eq!(admin.len(), 1, "{admin:#?}");
    let stone = site.node_posts(&record, "stone attached");
    assert_eq!(stone.len(), 1, "{stone:#?}");
}

#[test]
fn a_run_stopped_while_attached_ends_the_attachment_and_it_is_posted_once() {
    let site = Site::new();
    let record = site.record();
    let repo = &site.node.repo;
    let tmux = site.joined(&record, "admin", "admin");
    repo.json(&["stop", &record]).ok();
    let screen = tmux.shows("[exit 0]");
    assert!(screen.contains("joining: ended"), "{screen}");
    let post = site.posted(&record, "until the run ended");
    assert!(post.starts_with("OCX: admin attached"), "{post}");
    let until = Instant::now() + PATIENCE;
    while site
        .node_posts(&record, "the run of this record ended: stopped")
        .is_empty()
    {
        assert!(Instant::now() < until, "never answered: {}", site.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        site.node_posts(&record, "attached to this run's terminal")
            .len(),
        1
    );
    let gone = repo.json(&["attach", &record[..12], "--user", "admin"]);
    assert_eq!(
        gone.code, 1,
        "an answered run has no terminal to join: {gone:?}"
    );
}

#[test]
fn an_attachment_whose_end_the_node_did_not_see_is_posted_at_its_next_start() {
    let site = Site::new();
    let record = site.record();
    let repo = &site.node.repo;
    let tmux = site.joined(&record, "admin", "admin");
    let dir = site.run_dir(&record);
    assert!(dir.join(ocx::node::attached::MARK).exists());
    crate::support::kill_from(&dir.join("watcher.pid"));
    tmux.shows("[exit");
    assert!(
        site.node_posts(&record, "attached to this run's terminal")
            .is_empty()
    );
    repo.json(&["node", "start"]).ok();
    let post = site.posted(&record, "did not see the attachment end");
    assert!(post.starts_with("OCX: admin attached"), "{post}");
    repo.json(&["node", "start"]).ok();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        site.node_posts(&record, "attached to this run's terminal")
            .len(),
        1,
        "posted once"
    );
    assert!(
        !site.node_posts(&record, "ended: lost").is_empty(),
        "{}",
        site.logs()
    );
}

/// The real Claude Code and Codex in their own interfaces on a run's
/// terminal, from the pages `ocx runner --terminal` writes, against the
/// scripted model: the record's line typed in (its first turn already
/// holding the run's tools), a post heard typed in once the agent waits
/// again, a person attached typing a line the agent acts on, and the
/// node's post naming them.
#[test]
fn claude_and_codex_on_a_terminal_take_their_lines_and_a_person_who_attaches() {
    use crate::agents::{Agent, delivery, installed};
    use crate::model::{Model, Reply};
    for agent in [Agent::Claude, Agent::Codex] {
        installed(agent);
        let post = agent.tool("ocx", "post");
        let model = Model::start(move |r| {
            let answered = !r.new_tool_results().is_empty();
            let said = r.last_user_text().unwrap_or_default();
            let record = crate::agents::record_of(r);
            if answered {
                return Reply::text("Done.");
            }
            if said.contains("admin typed this") {
                return Reply::tool(
                    &post,
                    json!({"to": record, "text": "I read what admin typed at my terminal"}),
                );
            }
            match delivery(r) {
                Some((line, _)) if line.starts_with("Record ") => {
                    Reply::tool(&post, json!({"to": record, "text": "ready at my terminal"}))
                }
                Some((line, hash)) if line.contains("please answer") => {
                    Reply::tool(&post, json!({"to": hash, "text": "answered the post"}))
                }
                _ => Reply::text("Nothing to do."),
            }
        });
        let repo = Repo::new();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(repo.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        repo.commit_as("admin", "README.md", "hello\n", None);
        let node = Served::on(repo).start();
        let repo = &node.repo;
        repo.credential("model-key", "a-model-key-of-the-node-0123456789");
        let base = match agent {
            Agent::Claude => model.url(),
            Agent::Codex => format!("{}/v1", model.url()),
        };
        let name = format!("{agent:?}").to_lowercase();
        let mut args = crate::agents::runner_args(&name, &base);
        args.push("--terminal");
        let page = repo.json(&args).ok();
        assert_eq!(page["page"], format!("sandbox/{name}-terminal"));
        assert_eq!(page["definition"]["terminal"], true);
        let runner = format!("{name}-terminal");
        let record = repo
            .json(&[
                "create",
                "--runner",
                &runner,
                "--objective",
                "Work at your terminal",
                "--wall",
                "10m",
                "--hears",
                "admin",
            ])
            .ok_str("record");
        let run_user = ocx::protocol::found::record(
            &ocx::fossil::Repository::open(&repo.file).unwrap(),
            ocx::fossil::Repository::open(&repo.file)
                .unwrap()
                .receipt(&record)
                .unwrap()
                .unwrap()
                .rid,
            &record,
        )
        .unwrap()
        .unwrap()
        .record
        .user;
        let dir = ocx::node::config::NodeConfig::run_dir(&repo.node_root(), &record);
        let from_run = |text: &str| {
            let until = Instant::now() + PATIENCE;
            loop {
                let posts = repo.json(&["thread", "--of", &record]).ok()["posts"].clone();
                if posts.as_array().unwrap().iter().any(|p| {
                    p["from"] == run_user.as_str()
                        && p["text"].as_str().is_some_and(|t| t.contains(text))
                }) {
                    return;
                }
                assert!(
                    Instant::now() < until,
                    "{agent:?}: the run never posted {text:?}: {posts:#}\n{}\n{}",
                    std::fs::read_to_string(dir.join("output.log")).unwrap_or_default(),
                    std::fs::read_to_string(dir.join("watch.log")).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        };
        from_run("ready at my terminal");
        repo.json(&["post", "--to", &record, "--text", "please answer"])
            .ok();
        from_run("answered the post");

        let tmux = Tmux::start(
            repo.dir.path(),
            &name,
            &format!(
                "{} attach {} --repository {} --user admin",
                env!("CARGO_BIN_EXE_ocx"),
                &record[..12],
                repo.file.display()
            ),
            160,
            45,
        );
        let prompt = match agent {
            Agent::Claude => "? for shortcuts",
            Agent::Codex => "OpenAI Codex",
        };
        tmux.shows(prompt);
        tmux.type_text("admin typed this");
        std::thread::sleep(Duration::from_millis(500));
        tmux.press("Enter");
        from_run("I read what admin typed at my terminal");
        tmux.press("C-]");
        tmux.shows("joining: left");
        let node_login = ocx::node::config::NodeConfig::load(&repo.node_root())
            .unwrap()
            .login;
        let until = Instant::now() + PATIENCE;
        loop {
            let posts = repo.json(&["thread", "--of", &record]).ok()["posts"].clone();
            if posts.as_array().unwrap().iter().any(|p| {
                p["from"] == node_login.as_str()
                    && p["text"]
                        .as_str()
                        .is_some_and(|t| t.contains("admin attached to this run's terminal"))
            }) {
                break;
            }
            assert!(
                Instant::now() < until,
                "{agent:?}: no attachment post: {posts:#}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let log = std::fs::read_to_string(dir.join("output.log")).unwrap();
        assert!(!log.contains('\x1b'), "{agent:?}: the log is text: {log:?}");
        repo.json(&["stop", &record]).ok();
    }
}
