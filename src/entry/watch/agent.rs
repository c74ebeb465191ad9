//! The watcher's side of an agent's session (`claude-stream-json`,
//! `codex-app-server`): one turn a delivery, the next only once the agent
//! ended the one before; each turn's end read from the agent's own events
//! on its standard output (every line of which is kept in the run's log);
//! the turn's final words said where the delivery was asked, unless the
//! agent answered there itself during the turn; a refusal of its model
//! service said there at once, in the agent's words; and a run whose agent
//! never finished a turn without error ended, since it cannot work at all.

use crate::context::{RunScope, Who};
use crate::node::inbox;
use crate::node::runner::InputMode;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{ChildStdin, ChildStdout};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest line of the agent's output read as an event; a longer one
/// is kept in the log cut, and read as no event.
const LINE_MAX: usize = 16 << 20;

/// Why the watcher could not start the agent's session or say something
/// as the run.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The run's words are the agent machine's to say, never its watcher's.
    #[error("on an agent machine the watcher posts nothing as the run")]
    OnMachine,
    /// The post was refused: the field at fault, when it names one, and why.
    #[error("{}{reason}", field.as_ref().map(|f| format!("{f}: ")).unwrap_or_default())]
    Refused {
        field: Option<String>,
        reason: String,
    },
    /// The agent's standard input could not be written.
    #[error(transparent)]
    Write(#[from] std::io::Error),
    /// The agent's output ended first.
    #[error("the agent ended before it answered")]
    Gone,
    /// Codex answered a request with an error.
    #[error("{method}: {said}")]
    Codex { method: &'static str, said: String },
}

/// What the watcher learns from the agent's output.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// An answer to the watcher's JSON-RPC request `id` (Codex).
    Answer { id: i64, error: Option<String> },
    /// Codex's thread, as `thread/start` answered it.
    Thread(String),
    /// The agent's model service refused it (with the HTTP status, when
    /// one came), and the agent tries again.
    Refused { status: Option<i64>, text: String },
    /// The agent's words so far in this turn (Codex's agent message).
    Words(String),
    /// Codex's turn, as it started: its id.
    TurnStarted(String),
    /// The turn ended: without error or not, with its final words or why.
    TurnEnded { ok: bool, text: String },
}

/// How long a turn may go on being refused before the watcher ends it:
/// about as long as Claude Code retries a refusal itself; Codex waits for
/// an unreachable service without end.
const REFUSED_TURN_MAX: Duration = Duration::from_secs(180);

/// One line of the agent's output read as an event of its `mode`, and
/// what the watcher answers a request it carries (Codex asks approvals and
/// questions; a run answers none of them). Total on any text.
pub fn read_event(mode: InputMode, line: &str) -> (Option<Event>, Option<Value>) {
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        return (None, None);
    };
    match mode {
        InputMode::Lines | InputMode::ClaudeInteractive | InputMode::CodexInteractive => {
            (None, None)
        }
        InputMode::ClaudeStreamJson => (claude_event(&v), None),
        InputMode::CodexAppServer => codex_event(&v),
    }
}

fn claude_event(v: &Value) -> Option<Event> {
    match (v["type"].as_str(), v["subtype"].as_str()) {
        (Some("result"), _) => {
            let ok = v["is_error"] != Value::Bool(true);
            let text = match v["result"].as_str() {
                Some(t) if !t.trim().is_empty() => t.to_string(),
                _ if ok => String::new(),
                _ => {
                    let errors: Vec<String> = v["errors"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(words_of)
                        .collect();
                    if errors.is_empty() {
                        format!("the turn ended as {}", words_of(&v["subtype"]))
                    } else {
                        errors.join("; ")
                    }
                }
            };
            Some(Event::TurnEnded { ok, text })
        }
        (Some("system"), Some("api_retry")) => {
            let status = v["error_status"]
                .as_i64()
                .map(|s| format!("HTTP {s}"))
                .unwrap_or_else(|| "no answer".into());
            let error = words_of(&v["error"]);
            Some(Event::Refused {
                status: v["error_status"].as_i64(),
                text: if error.is_empty() {
                    status
                } else {
                    format!("{status}: {error}")
                },
            })
        }
        _ => None,
    }
}

fn codex_event(v: &Value) -> (Option<Event>, Option<Value>) {
    let id = v.get("id").filter(|i| i.is_i64() || i.is_string()).cloned();
    match (id, v["method"].as_str()) {
        (Some(id), Some(method)) => {
            let result = match method {
                m if m.ends_with("/requestApproval") => json!({"decision": "decline"}),
                m if m.contains("elicitation") => json!({"action": "decline"}),
                _ => {
                    return (
                        None,
                        Some(json!({"id": id, "error": {"code": -32601,
                            "message": format!("a run's watcher answers no {method}")}})),
                    );
                }
            };
            (None, Some(json!({"id": id, "result": result})))
        }
        (Some(id), None) => {
            let Some(id) = id.as_i64() else {
                return (None, None);
            };
            let error = v.get("error").map(|e| words_of(&e["message"]));
            if error.is_none()
                && let Some(thread) = v["result"]["thread"]["id"].as_str()
            {
                return (Some(Event::Thread(thread.to_string())), None);
            }
            if error.is_none()
                && let Some(turn) = v["result"]["turn"]["id"].as_str()
            {
                return (Some(Event::TurnStarted(turn.to_string())), None);
            }
            (Some(Event::Answer { id, error }), None)
        }
        (None, Some("item/completed")) => {
            let item = &v["params"]["item"];
            match (item["type"].as_str(), item["text"].as_str()) {
                (Some("agentMessage"), Some(t)) => (Some(Event::Words(t.to_string())), None),
                _ => (None, None),
            }
        }
        (None, Some("turn/started")) => match v["params"]["turn"]["id"].as_str() {
            Some(t) => (Some(Event::TurnStarted(t.to_string())), None),
            None => (None, None),
        },
        (None, Some("turn/completed")) => {
            let turn = &v["params"]["turn"];
            let ok = turn["status"].as_str() == Some("completed");
            let text = if ok {
                String::new()
            } else {
                let error = codex_words(&turn["error"]);
                if error.is_empty() {
                    format!("the turn ended {}", words_of(&turn["status"]))
                } else {
                    error
                }
            };
            (Some(Event::TurnEnded { ok, text }), None)
        }
        (None, Some("error")) => {
            let e = &v["params"]["error"];
            let words = codex_words(e);
            let will_retry = v["params"]["willRetry"] == Value::Bool(true);
            match (will_retry, words.is_empty()) {
                (true, false) => (
                    Some(Event::Refused {
                        status: http_status(&e["codexErrorInfo"]),
                        text: words,
                    }),
                    None,
                ),
                _ => (None, None),
            }
        }
        _ => (None, None),
    }
}

/// Codex's error `e` in its service's own words: Codex's
/// `additionalDetails`, where it keeps what the service answered (its
/// `message` then says only "Reconnecting... 1/5"), else its `message`;
/// the HTTP status put first where the words do not say it.
fn codex_words(e: &Value) -> String {
    let details = words_of(&e["additionalDetails"]);
    let words = if details.trim().is_empty() {
        words_of(&e["message"])
    } else {
        details
    };
    match http_status(&e["codexErrorInfo"]) {
        Some(s) if !words.is_empty() && !words.contains(&s.to_string()) => {
            format!("HTTP {s}: {words}")
        }
        _ => words,
    }
}

/// The HTTP status in Codex's error details, wherever it stands in them.
fn http_status(v: &Value) -> Option<i64> {
    match v {
        Value::Object(o) => o.iter().find_map(|(k, v)| {
            if k == "httpStatusCode" || k == "http_status_code" {
                v.as_i64()
            } else {
                http_status(v)
            }
        }),
        _ => None,
    }
}

/// Whether a refusal with `status` says the agent's credential is refused:
/// given at the run's start, it will not mend during the run.
fn refuses_credential(status: Option<i64>) -> bool {
    matches!(status, Some(401 | 403))
}

/// A JSON value as words for a person: a string as it is, anything else
/// as compact JSON, at most 2,000 characters, control characters dropped.
fn words_of(v: &Value) -> String {
    let text = match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    text.chars()
        .filter(|c| !c.is_control() || *c == '\n')
        .take(2000)
        .collect()
}

/// The run's log, shared by the reader of the agent's output and the
/// watcher's own lines in it.
pub type Log = Arc<Mutex<std::fs::File>>;

/// Appends `line` to the run's log.
pub fn log_line(log: &Log, line: &str) {
    if let Ok(mut f) = log.lock() {
        let _ = f.write_all(line.as_bytes());
        let _ = f.write_all(b"\n");
    }
}

/// Reads the agent's output until it ends: each line kept in the run's log,
/// each event sent to the driver, each request answered on `stdin`.
pub fn read_output(
    mode: InputMode,
    stdout: ChildStdout,
    log: Log,
    stdin: Arc<Mutex<ChildStdin>>,
    events: Sender<Event>,
) {
    let mut reader = BufReader::new(stdout);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match (&mut reader)
            .take(LINE_MAX as u64)
            .read_until(b'\n', &mut buf)
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let whole = buf.ends_with(b"\n");
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        log_line(&log, line);
        if !whole {
            // Cut: skip the rest of this line, read as no event, holding
            // no more of it than the reader's buffer.
            if !skip_line(&mut reader) {
                return;
            }
            continue;
        }
        let (event, reply) = read_event(mode, line);
        if let Some(reply) = reply {
            log_line(
                &log,
                &format!(
                    "ocx: declined the agent's request {} (a run answers no approval or question)",
                    reply["id"]
                ),
            );
            if write_json(&stdin, &reply).is_err() {
                return;
            }
        }
        if let Some(e) = event
            && events.send(e).is_err()
        {
            return;
        }
    }
}

/// Skips what is left of a line, one buffer at a time; false when the
/// output ended or failed first.
fn skip_line(reader: &mut impl BufRead) -> bool {
    loop {
        let (done, used) = match reader.fill_buf() {
            Ok([]) | Err(_) => return false,
            Ok(buf) => match buf.iter().position(|b| *b == b'\n') {
                Some(at) => (true, at + 1),
                None => (false, buf.len()),
            },
        };
        reader.consume(used);
        if done {
            return true;
        }
    }
}

fn write_json(stdin: &Arc<Mutex<ChildStdin>>, v: &Value) -> std::io::Result<()> {
    let mut s = stdin
        .lock()
        .map_err(|_| std::io::Error::other("stdin poisoned"))?;
    s.write_all(format!("{v}\n").as_bytes())?;
    s.flush()
}

/// Where the driver says things, as the run's user, and learns whether the
/// agent said something itself.
pub struct Speaker {
    /// The served repository, opened anew by the driver.
    pub repository: PathBuf,
    /// The node's root (the run's tools run from it).
    pub root: PathBuf,
    /// The run, as its node socket acts for it.
    pub scope: RunScope,
    /// The run's directory, where its last error is kept.
    pub dir: PathBuf,
    /// Whether the run is on an agent machine, whose watcher posts nothing
    /// of its own as the run (its words stay in the run's log).
    pub on_machine: bool,
}

impl Speaker {
    /// What is said at `to`'s place, by whom and from which receipt on.
    fn said(&self, to: &str) -> Vec<(i64, Option<String>, String)> {
        let Ok(repo) = crate::fossil::Repository::open(&self.repository) else {
            return Vec::new();
        };
        let Ok(place) = crate::place::Place::resolve(&repo, "to", to) else {
            return Vec::new();
        };
        let said = match place {
            crate::place::Place::Thread { root_rid, .. } => repo.thread(root_rid),
            crate::place::Place::Ticket { tkt_id, .. } => repo.ticket_changes(tkt_id),
        };
        said.unwrap_or_default()
            .into_iter()
            .map(|s| (s.rcvid, s.from, s.hash))
            .collect()
    }

    /// The newest receipt at `to`'s place, from which a turn's own answers count.
    pub fn mark(&self, to: &str) -> i64 {
        self.said(to).iter().map(|s| s.0).max().unwrap_or(0)
    }

    /// Whether the run's user said something at `to`'s place after `mark`,
    /// other than what the watcher itself said (`own`).
    pub fn answered_since(&self, to: &str, mark: i64, own: &[String]) -> bool {
        self.said(to).iter().any(|(rcvid, from, hash)| {
            *rcvid > mark && from.as_deref() == Some(&self.scope.user) && !own.contains(hash)
        })
    }

    /// Posts `text` as the run's user, a reply to `to`; answers the post's
    /// hash, or why not.
    pub fn say(&self, to: &str, text: &str) -> Result<String, SessionError> {
        if self.on_machine {
            return Err(SessionError::OnMachine);
        }
        let cx = crate::context::Context::new(
            Some(self.repository.clone()),
            self.root.clone(),
            Who::Run(self.scope.clone()),
        );
        let answer = crate::registry::call("post", Ok(json!({"to": to, "text": text})), &cx, false);
        match (answer.ok, &answer.result) {
            (true, Some(r)) => Ok(r["hash"].as_str().unwrap_or("").to_string()),
            _ => Err(match answer.stopped {
                Some(s) => SessionError::Refused {
                    field: s.field,
                    reason: s.reason,
                },
                None => SessionError::Refused {
                    field: None,
                    reason: "the post was refused".into(),
                },
            }),
        }
    }

    /// Keeps `error` as the run's last error, for `status` and `console`.
    pub fn keep_error(&self, error: &str) {
        crate::node::runner::keep_error(&self.dir, &self.scope.record, error);
    }
}

/// What the driver needs of the run besides the agent.
pub struct Driving {
    pub mode: InputMode,
    pub record: String,
    pub first: String,
    /// The workspace as the agent sees it (Codex's `cwd`).
    pub workspace: PathBuf,
    /// The run's MCP servers, as `mcpServers` names them.
    pub servers: Value,
    /// What the repository says to its agent (Codex: `AGENTS.md` of the
    /// check-in the workspace holds), given as the thread's developer
    /// instructions, since the checkout is no trusted project.
    pub instructions: Option<String>,
    pub speaker: Speaker,
    pub log: Log,
}

/// Why the driver ended the run, when it did.
pub type Ending = Arc<Mutex<Option<String>>>;

/// Drives the agent's session: Codex's handshake first, then a turn for the
/// first line and one for each delivery, in order, each after the one
/// before ended. Returns when the deliveries end, the agent's output
/// ends, or the agent cannot work (`ending` then says why, and `kill` ends
/// the run).
pub fn drive(
    d: Driving,
    stdin: Arc<Mutex<ChildStdin>>,
    events: Receiver<Event>,
    deliveries: Receiver<String>,
    ending: Ending,
    kill: impl Fn(),
) {
    let say_log = |line: &str| log_line(&d.log, &format!("ocx: {line}"));
    let end = |why: String| {
        say_log(&format!("the run ends: {why}"));
        if let Ok(mut e) = ending.lock() {
            *e = Some(why);
        }
        kill();
    };
    let mut thread = None;
    if d.mode == InputMode::CodexAppServer {
        match codex_handshake(&d, &stdin, &events) {
            Ok(t) => thread = Some(t),
            Err(why) => {
                d.speaker.keep_error(&why.to_string());
                let _ = d
                    .speaker
                    .say(&d.record, &format!("The agent could not start: {why}"));
                return end(format!("the agent could not start: {why}"));
            }
        }
    }
    let mut worked = false;
    let mut next = Some(d.first.clone());
    let mut request = 10;
    loop {
        let (line, record) = match next.take() {
            Some(l) => (l, None),
            None => match deliveries.recv() {
                Ok(l) => (l, Some(d.record.as_str())),
                Err(_) => break,
            },
        };
        let to = inbox::read(&line, record)
            .map(|l| l.reply_to)
            .unwrap_or_else(|_| d.record.clone());
        let text = inbox::unescape(&line);
        let mark = d.speaker.mark(&to);
        request += 1;
        let sent = match (d.mode, &thread) {
            (InputMode::CodexAppServer, Some(t)) => write_json(
                &stdin,
                &json!({"id": request, "method": "turn/start", "params": {"threadId": t,
                    "input": [{"type": "text", "text": text, "text_elements": []}]}}),
            ),
            _ => write_json(
                &stdin,
                &json!({"type": "user", "message": {"role": "user",
                    "content": [{"type": "text", "text": text}]}}),
            ),
        };
        if sent.is_err() {
            return;
        }
        let mut own: Vec<String> = Vec::new();
        let mut refused: Option<(Instant, String)> = None;
        let mut turn_id: Option<String> = None;
        let mut interrupted = false;
        let mut words = String::new();
        let (ok, said) = loop {
            // Only a turn refused and not yet interrupted has a deadline,
            // the time left of the three minutes; otherwise the session
            // sleeps until the agent says something.
            let deadline = match (&refused, &turn_id, &thread, interrupted) {
                (Some((since, _)), Some(_), Some(_), false) => {
                    Some(REFUSED_TURN_MAX.saturating_sub(since.elapsed()))
                }
                _ => None,
            };
            let next = match deadline {
                Some(left) => events.recv_timeout(left),
                None => events.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            let event = match next {
                Ok(e) => e,
                Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {
                    if let (Some(t), Some(th)) = (&turn_id, &thread) {
                        interrupted = true;
                        say_log("the turn was refused for three minutes: interrupted");
                        let _ = write_json(
                            &stdin,
                            &json!({"id": request + 1_000_000, "method": "turn/interrupt",
                                "params": {"threadId": th, "turnId": t}}),
                        );
                    }
                    continue;
                }
            };
            match event {
                Event::Refused { status, text: why } => {
                    let first = refused.is_none();
                    if let Some((_, last)) = &mut refused {
                        last.clone_from(&why);
                    } else {
                        refused = Some((Instant::now(), why.clone()));
                    }
                    if !first {
                        continue;
                    }
                    d.speaker.keep_error(&why);
                    say_log(&format!("the model service refused the agent: {why}"));
                    let cannot = !worked && refuses_credential(status);
                    let words = if cannot {
                        format!(
                            "The agent's model service refused its credential, so it cannot work: {why}"
                        )
                    } else {
                        format!(
                            "The agent's model service refused it, and the agent is trying again: {why}"
                        )
                    };
                    match d.speaker.say(&to, &words) {
                        Ok(h) => own.push(h),
                        Err(e) => say_log(&format!("could not say so: {e}")),
                    }
                    if cannot {
                        return end(format!("the agent's credential was refused: {why}"));
                    }
                }
                Event::TurnStarted(t) => turn_id = Some(t),
                Event::Words(w) => words = w,
                Event::Answer { id, error: Some(e) } if id == request => {
                    break (false, e);
                }
                Event::TurnEnded { ok, text } => {
                    let text = match (&refused, interrupted) {
                        (Some((_, last)), true) => {
                            format!("the model service refused it for three minutes: {last}")
                        }
                        _ if text.is_empty() => words.clone(),
                        _ => text,
                    };
                    break (ok, text);
                }
                _ => {}
            }
        };
        if ok {
            worked = true;
            if said.trim().is_empty() {
                say_log("the turn ended without words");
            } else if d.speaker.answered_since(&to, mark, &own) {
                say_log("the turn ended; the agent answered there itself");
            } else {
                match d.speaker.say(&to, &said) {
                    Ok(_) => say_log(&format!("the turn ended; its words said in reply to {to}")),
                    Err(e) => say_log(&format!("the turn ended; its words could not be said: {e}")),
                }
            }
        } else {
            d.speaker.keep_error(&said);
            if let Err(e) = d
                .speaker
                .say(&to, &format!("The agent's turn ended in error: {said}"))
            {
                say_log(&format!(
                    "the turn ended in error ({said}); could not say so: {e}"
                ));
            } else {
                say_log(&format!("the turn ended in error: {said}"));
            }
            if !worked {
                return end(format!("the agent could not work: {said}"));
            }
        }
    }
    say_log("the deliveries ended");
}

/// Codex's handshake: `initialize`, `initialized`, then `thread/start` in
/// the workspace, with no approval asked, Codex's own sandbox off (OCX's is
/// the boundary, and allows no nested namespace), and the run's MCP
/// servers; answers the thread's id.
fn codex_handshake(
    d: &Driving,
    stdin: &Arc<Mutex<ChildStdin>>,
    events: &Receiver<Event>,
) -> Result<String, SessionError> {
    write_json(
        stdin,
        &json!({"id": 1, "method": "initialize", "params": {"clientInfo":
            {"name": "ocx", "title": "OCX", "version": env!("CARGO_PKG_VERSION")},
            "capabilities": null}}),
    )?;
    loop {
        match events.recv().map_err(|_| SessionError::Gone)? {
            Event::Answer { id: 1, error: None } => break,
            Event::Answer {
                id: 1,
                error: Some(e),
            } => {
                return Err(SessionError::Codex {
                    method: "initialize",
                    said: e,
                });
            }
            _ => {}
        }
    }
    write_json(stdin, &json!({"method": "initialized"}))?;
    let mut config = serde_json::Map::new();
    if let Some(servers) = d.servers.as_object() {
        for (name, server) in servers {
            config.insert(format!("mcp_servers.{name}"), server.clone());
        }
    }
    // An untrusted project: nothing checked in (`.codex/config.toml`, its
    // MCP servers, its instructions) configures the agent.
    config.insert(
        "projects".into(),
        json!({ d.workspace.display().to_string(): {"trust_level": "untrusted"} }),
    );
    let mut params = json!({
        "cwd": d.workspace,
        "approvalPolicy": "never",
        "sandbox": "danger-full-access",
        "config": config});
    if let Some(i) = &d.instructions {
        params["developerInstructions"] = json!(i);
    }
    write_json(
        stdin,
        &json!({"id": 2, "method": "thread/start", "params": params}),
    )?;
    loop {
        match events.recv().map_err(|_| SessionError::Gone)? {
            Event::Thread(t) => return Ok(t),
            Event::Answer { id: 2, error } => {
                return Err(SessionError::Codex {
                    method: "thread/start",
                    said: error.unwrap_or_else(|| "answered no thread".into()),
                });
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rest_of_a_cut_line_is_skipped_without_keeping_it() {
        let mut r = std::io::BufReader::with_capacity(4, &b"0123456789\nnext\n"[..]);
        assert!(skip_line(&mut r));
        let mut next = String::new();
        r.read_line(&mut next).unwrap();
        assert_eq!(next, "next\n");
        assert!(!skip_line(&mut r));
    }

    #[test]
    fn claude_s_turn_end_and_retry_are_read() {
        let ok = r#"{"type":"result","subtype":"success","is_error":false,"result":"Done."}"#;
        assert_eq!(
            read_event(InputMode::ClaudeStreamJson, ok).0,
            Some(Event::TurnEnded {
                ok: true,
                text: "Done.".into()
            })
        );
        let bad = r#"{"type":"result","subtype":"success","is_error":true,"result":"Not logged in · Please run /login"}"#;
        assert_eq!(
            read_event(InputMode::ClaudeStreamJson, bad).0,
            Some(Event::TurnEnded {
                ok: false,
                text: "Not logged in · Please run /login".into()
            })
        );
        let retry = r#"{"type":"system","subtype":"api_retry","attempt":1,"error_status":401,"error":"authentication_failed"}"#;
        assert_eq!(
            read_event(InputMode::ClaudeStreamJson, retry).0,
            Some(Event::Refused {
                status: Some(401),
                text: "HTTP 401: authentication_failed".into()
            })
        );
        assert_eq!(read_event(InputMode::ClaudeStreamJson, "not json").0, None);
    }

    #[test]
    fn codex_s_requests_are_declined_and_its_turns_read() {
        let (e, reply) = read_event(
            InputMode::CodexAppServer,
            r#"{"id":7,"method":"item/commandExecution/requestApproval","params":{}}"#,
        );
        assert_eq!(e, None);
        assert_eq!(
            reply.unwrap(),
            json!({"id": 7, "result": {"decision": "decline"}})
        );
        let (_, reply) = read_event(
            InputMode::CodexAppServer,
            r#"{"id":"x","method":"item/tool/requestUserInput","params":{}}"#,
        );
        assert_eq!(reply.unwrap()["error"]["code"], -32601);
        let thread = r#"{"id":2,"result":{"thread":{"id":"th-1"}}}"#;
        assert_eq!(
            read_event(InputMode::CodexAppServer, thread).0,
            Some(Event::Thread("th-1".into()))
        );
        let words =
            r#"{"method":"item/completed","params":{"item":{"type":"agentMessage","text":"Hi."}}}"#;
        assert_eq!(
            read_event(InputMode::CodexAppServer, words).0,
            Some(Event::Words("Hi.".into()))
        );
        let refused = r#"{"method":"error","params":{"error":{"message":"Reconnecting... 1/5","codexErrorInfo":{"responseStreamDisconnected":{"httpStatusCode":401}},"additionalDetails":"unexpected status 401 Unauthorized: Incorrect API key provided, url: http://127.0.0.1:9/v1/responses"},"willRetry":true}}"#;
        assert_eq!(
            read_event(InputMode::CodexAppServer, refused).0,
            Some(Event::Refused {
                status: Some(401),
                text: "unexpected status 401 Unauthorized: Incorrect API key provided, url: http://127.0.0.1:9/v1/responses".into()
            }),
            "the service's words, not Codex's count of its tries"
        );
        let bare = r#"{"method":"error","params":{"error":{"message":"Rate limit reached","codexErrorInfo":{"httpConnectionFailed":{"httpStatusCode":429}}},"willRetry":true}}"#;
        assert_eq!(
            read_event(InputMode::CodexAppServer, bare).0,
            Some(Event::Refused {
                status: Some(429),
                text: "HTTP 429: Rate limit reached".into()
            })
        );
        let failed = r#"{"method":"turn/completed","params":{"turn":{"status":"failed","error":{"message":"unauthorized"}}}}"#;
        assert_eq!(
            read_event(InputMode::CodexAppServer, failed).0,
            Some(Event::TurnEnded {
                ok: false,
                text: "unauthorized".into()
            })
        );
    }
}
