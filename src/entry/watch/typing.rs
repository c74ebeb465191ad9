//! A run on a terminal of its own (a runner page's `"terminal": true`):
//! who may join it and what each joining leaves ([`Attachments`]), and the
//! run's lines typed into it ([`type_lines`]): the first line and each
//! delivery, each ended by a carriage return, one after the other as its
//! mode allows. A program reading lines is typed each as it comes; an
//! agent's own interface is typed the next only once it says it waits for
//! input again, by a byte its hook writes to the run's turns pipe.

use super::home::write_private;
use super::say;
use crate::node::attached::{self, Attachment, Ended, Unattachable};
use crate::node::inbox;
use crate::node::runner::InputMode;
use crate::protocol::found::StandingRecord;
use crate::run::terminal::{self, Joined, Joining, Parted, Refused};
use std::collections::VecDeque;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

/// The pipe in the workspace's `.ocx` an agent's hook writes a byte to
/// each time it waits for input again.
pub const TURNS: &str = "turns";

/// The most bytes of one delivery typed into an agent's own interface
/// (a program reading lines takes at most [`terminal::LINE_MAX`]).
const AGENT_LINE_MAX: usize = 16 << 10;

/// The watcher's word on who joins its run's terminal: a login holding
/// admin or setup, as the node's receipts say; each joining kept in the
/// run's directory while it lasts, and posted by the node when it ends.
pub struct Attachments {
    pub root: PathBuf,
    pub record: StandingRecord,
    pub dir: PathBuf,
}

impl Attachments {
    /// `then` given the node as it stands now; none when its repository
    /// cannot be read.
    fn with_node<T>(
        &self,
        then: impl FnOnce(
            &crate::node::config::NodeConfig,
            &crate::fossil::Fossil,
            &crate::fossil::Repository,
            &crate::node::Receipts,
        ) -> T,
    ) -> Option<T> {
        let (cfg, fossil, repo) = crate::node::respond::open(&self.root)?;
        let receipts = crate::node::Receipts::of_node(&cfg, &repo).ok()?;
        Some(then(&cfg, &fossil, &repo, &receipts))
    }
}

impl terminal::Keeper for Attachments {
    fn may_join(&self, login: &str) -> Result<(), Refused> {
        let may = self
            .with_node(|_, _, _, receipts| attached::may_attach(receipts, login))
            .unwrap_or(Err(Unattachable::NoNode));
        may.map_err(|e| Refused::Login(Box::new(e)))
    }

    fn joined(&self, joined: &Joined) {
        let a = Attachment {
            record: self.record.hash.clone(),
            login: joined.login.clone(),
            at: joined.at.clone(),
            since: attached::now_seconds(),
        };
        if let Err(e) = attached::began(&self.dir, &a) {
            say(&format!(
                "the attachment of {} could not be kept: {e}",
                a.login
            ));
        }
        say(&format!("{} attached to the run's terminal", a.login));
    }

    fn parted(&self, joined: &Joined, seconds: u64, how: Parted) {
        let a = Attachment {
            record: self.record.hash.clone(),
            login: joined.login.clone(),
            at: joined.at.clone(),
            since: attached::now_seconds().saturating_sub(seconds),
        };
        let how = match how {
            Parted::Left => Ended::Left,
            Parted::Ended => Ended::WithTheRun,
        };
        let posted = self.with_node(|cfg, fossil, repo, receipts| {
            attached::ended(
                cfg,
                fossil,
                repo,
                receipts,
                &self.record,
                &self.dir,
                &a,
                seconds,
                how,
            )
        });
        match posted {
            Some(Ok(hash)) => say(&format!(
                "{} left the run's terminal after {seconds} seconds: posted {}",
                a.login,
                &hash[..hash.len().min(16)]
            )),
            Some(Err(e)) => say(&format!(
                "the attachment of {} could not be posted: {e}",
                a.login
            )),
            None => {
                say("the attachment could not be posted: the node's repository could not be read")
            }
        }
    }
}

/// The turns pipe in `own` (the workspace's `.ocx`), made for the run's
/// account `uid` (none: the watcher's own) to write, and opened here for
/// reading and writing, so it never reads an end and no hook ever waits
/// to open it.
pub fn turns_pipe(own: &Path, uid: Option<u32>) -> std::io::Result<std::fs::File> {
    use nix::sys::stat::Mode;
    let path = own.join(TURNS);
    let _ = std::fs::remove_file(&path);
    nix::unistd::mkfifo(&path, Mode::S_IRUSR | Mode::S_IWUSR)?;
    if let Some(uid) = uid {
        nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(uid)), None)?;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags_nofollow()
        .open(&path)
}

/// Opening a path without following a symbolic link at its end.
trait NoFollow {
    fn custom_flags_nofollow(&mut self) -> &mut Self;
}

impl NoFollow for std::fs::OpenOptions {
    fn custom_flags_nofollow(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
    }
}

/// What the typist hears of.
enum Heard {
    /// A delivery's line, escaped as the inbox keeps it.
    Line(String),
    /// The agent waits for input again.
    Waiting,
}

/// How long an agent's own interface is given to take a paste before the
/// carriage return that submits it (typed at once, both Claude Code and
/// Codex may read it as part of the paste).
const PASTE_SETTLE: Duration = Duration::from_millis(300);

/// How long after Claude Code says its prompt is ready its first line
/// waits, so the MCP servers it starts beside it are connected first.
const FIRST_SETTLE: Duration = Duration::from_millis(500);

/// Types `line` (escaped as the inbox keeps it) into the run's terminal
/// as `mode` takes it: a line for a program reading lines, a paste then
/// its carriage return for an agent's own interface.
fn type_line(joining: &Joining, mode: InputMode, line: &str) -> std::io::Result<()> {
    if !mode.is_interactive() {
        return joining.type_in(&terminal::typed(line));
    }
    joining.type_in(&terminal::pasted(&inbox::unescape(line), AGENT_LINE_MAX))?;
    std::thread::sleep(PASTE_SETTLE);
    joining.type_in(b"\r")
}

/// Types the run's lines into its terminal, on threads of their own:
/// `first` (none: the program was given it on its command line) and then
/// each delivery from `deliveries`; for an agent's own interface, each
/// only once `turns` said it waits for input again.
pub fn type_lines(
    joining: Joining,
    mode: InputMode,
    first: Option<String>,
    deliveries: Receiver<String>,
    turns: Option<std::fs::File>,
) {
    let (tx, heard) = channel::<Heard>();
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            while let Ok(line) = deliveries.recv() {
                if tx.send(Heard::Line(line)).is_err() {
                    return;
                }
            }
        });
    }
    if let Some(mut turns) = turns {
        std::thread::spawn(move || {
            let mut bytes = [0u8; 64];
            loop {
                match turns.read(&mut bytes) {
                    Ok(0) => return,
                    Ok(n) => {
                        for _ in 0..n {
                            if tx.send(Heard::Waiting).is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return,
                }
            }
        });
    }
    std::thread::spawn(move || {
        let gated = mode.is_interactive();
        // Whether the program takes a line now: a program reading lines
        // always does; an agent only once it says it waits for input (its
        // first turn, the line it was started with, under way until then).
        let mut free = !gated;
        let mut waiting: VecDeque<String> = first.into_iter().collect();
        let mut started = false;
        let mut give = |line: String, free: &mut bool| -> bool {
            *free = !gated;
            if gated && !started {
                std::thread::sleep(FIRST_SETTLE);
            }
            started = true;
            type_line(&joining, mode, &line).is_ok()
        };
        while free && let Some(line) = waiting.pop_front() {
            if !give(line, &mut free) {
                return;
            }
        }
        while let Ok(h) = heard.recv() {
            match h {
                Heard::Line(line) => waiting.push_back(line),
                Heard::Waiting => free = true,
            }
            while free && let Some(line) = waiting.pop_front() {
                if !give(line, &mut free) {
                    return;
                }
            }
        }
    });
}

/// The hook an agent's own interface runs each time it waits for input
/// again: a byte to the run's turns pipe, which its variable names.
const TURN_HOOK: &str = "printf . >> \"$OCX_TURNS\"";

/// Codex's `notify` program: the hook, for each turn of the run's thread
/// (not the one Codex starts beside the first to name it).
const CODEX_NOTIFY: &str = "case \"$1\" in *'\"input-messages\":[\"Generate a concise, single-line task title'*) ;; *) printf . >> \"$OCX_TURNS\" ;; esac";

/// Makes the run's home `home` ready for an agent's own interface on a
/// terminal, so it starts straight at its prompt and says each time it
/// waits for input again: for Claude Code, its start-up done, the key
/// `env` gives it approved, the workspace (`workspace`, as the run sees
/// it) trusted, and its `SessionStart` and `Stop` hooks; for Codex, no
/// update asked for, pastes read as pastes, and its `notify` program.
/// What the home holds already (a page's homes, a login) is kept.
pub fn prepare_home(
    mode: InputMode,
    home: &Path,
    workspace: &Path,
    env: &std::collections::BTreeMap<String, String>,
) -> std::io::Result<()> {
    use serde_json::{Value, json};
    match mode {
        InputMode::ClaudeInteractive => {
            let state = home.join(".claude.json");
            let mut s = read_object(&state);
            s["hasCompletedOnboarding"] = json!(true);
            if let Some(key) = env.get("ANTHROPIC_API_KEY") {
                let tail = key.char_indices().rev().nth(19).map_or(0, |(i, _)| i);
                let responses = object_at(&mut s, "customApiKeyResponses");
                list_at(responses, "approved").push(json!(key[tail..]));
                list_at(responses, "rejected");
            }
            let projects = object_at(&mut s, "projects");
            object_at(projects, &workspace.display().to_string())["hasTrustDialogAccepted"] =
                json!(true);
            write_private(&state, &serde_json::to_vec_pretty(&s)?)?;
            let dir = home.join(".claude");
            std::fs::create_dir_all(&dir)?;
            let settings = dir.join("settings.json");
            let mut s = read_object(&settings);
            let hook = json!({"hooks": [{"type": "command", "command": format!("/bin/sh -c '{TURN_HOOK}'")}]});
            let hooks = object_at(&mut s, "hooks");
            for event in ["SessionStart", "Stop"] {
                list_at(hooks, event).push(hook.clone());
            }
            object_at(&mut s, "env")["DISABLE_AUTOUPDATER"] = Value::from("1");
            write_private(&settings, &serde_json::to_vec_pretty(&s)?)
        }
        InputMode::CodexInteractive => {
            let dir = home.join(".codex");
            std::fs::create_dir_all(&dir)?;
            let config = dir.join("config.toml");
            let kept = std::fs::read_to_string(&config).unwrap_or_default();
            let notify = serde_json::to_string(&["/bin/sh", "-c", CODEX_NOTIFY, "sh"])?;
            let text = format!(
                "check_for_update_on_startup = false\ndisable_paste_burst = true\nnotify = {notify}\n\n{kept}"
            );
            write_private(&config, text.as_bytes())
        }
        _ => Ok(()),
    }
}

/// The JSON object in `path`, or an empty one.
fn read_object(path: &Path) -> serde_json::Value {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .filter(serde_json::Value::is_object)
        .unwrap_or_else(|| serde_json::json!({}))
}

/// The object at `key` of the object `v`, made one when it is anything else.
fn object_at<'a>(v: &'a mut serde_json::Value, key: &str) -> &'a mut serde_json::Value {
    if !v[key].is_object() {
        v[key] = serde_json::json!({});
    }
    &mut v[key]
}

/// The list at `key` of the object `v`, made one when it is anything else.
fn list_at<'a>(v: &'a mut serde_json::Value, key: &str) -> &'a mut Vec<serde_json::Value> {
    if !v[key].is_array() {
        v[key] = serde_json::json!([]);
    }
    match &mut v[key] {
        serde_json::Value::Array(a) => a,
        _ => unreachable!("made a list above"),
    }
}

/// A JSON value as TOML writes it inline (strings, numbers, booleans,
/// arrays and tables), as Codex's `-c KEY=VALUE` takes it.
pub fn toml_inline(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Null => "\"\"".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(toml_inline).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!(
                    "{} = {}",
                    serde_json::to_string(k).unwrap_or_default(),
                    toml_inline(v)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_written_as_inline_toml() {
        let v = serde_json::json!({"command": "/usr/bin/ocx", "args": ["--mcp", "a \"b\"\n"], "env": {"OCX_RECORD": "ab"}});
        assert_eq!(
            toml_inline(&v),
            r#"{"command" = "/usr/bin/ocx", "args" = ["--mcp", "a \"b\"\n"], "env" = {"OCX_RECORD" = "ab"}}"#
        );
    }

    #[test]
    fn claude_is_given_a_home_that_starts_at_its_prompt_and_says_when_it_waits() {
        let home = tempfile::tempdir().unwrap();
        let env = std::collections::BTreeMap::from([(
            "ANTHROPIC_API_KEY".to_string(),
            "ocx-run-0123456789abcdefghijKLMNOPQRST".to_string(),
        )]);
        prepare_home(
            InputMode::ClaudeInteractive,
            home.path(),
            Path::new("/w/ws"),
            &env,
        )
        .unwrap();
        let state: serde_json::Value =
            serde_json::from_slice(&std::fs::read(home.path().join(".claude.json")).unwrap())
                .unwrap();
        assert_eq!(state["hasCompletedOnboarding"], true);
        assert_eq!(
            state["customApiKeyResponses"]["approved"][0],
            "abcdefghijKLMNOPQRST"
        );
        assert_eq!(state["projects"]["/w/ws"]["hasTrustDialogAccepted"], true);
        let settings: serde_json::Value = serde_json::from_slice(
            &std::fs::read(home.path().join(".claude/settings.json")).unwrap(),
        )
        .unwrap();
        for event in ["SessionStart", "Stop"] {
            assert!(
                settings["hooks"][event][0]["hooks"][0]["command"]
                    .as_str()
                    .unwrap()
                    .contains("$OCX_TURNS")
            );
        }
    }
}
