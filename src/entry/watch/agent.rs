//! The watcher's side of an agent's session (`claude-stream-json`,
//! `codex-app-server`), each agent's protocol a [`Protocol`] of its own
//! ([`claude`], [`codex`]): one turn a delivery, the next only once the
//! agent ended the one before; each turn's end read from the agent's own
//! events on its standard output (every line of which is kept in the
//! run's log); the turn's final words said where the delivery was asked,
//! unless the agent answered there itself during the turn; a refusal of
//! its model service said there at once, in the agent's words; and a run
//! whose agent never finished a turn without error ended, since it cannot
//! work at all.

use crate::context::{RunScope, Who};
use crate::node::inbox;
use crate::node::runner::InputMode;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::ops::ControlFlow::{self, Break, Continue};
use std::path::PathBuf;
use std::process::{ChildStdin, ChildStdout};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod claude;
mod codex;

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
    read_with(protocol(mode).as_deref(), line)
}

/// One line of the agent's output read by `agent`'s protocol (none: a
/// mode whose output tells the watcher nothing).
fn read_with(agent: Option<&dyn Protocol>, line: &str) -> (Option<Event>, Option<Value>) {
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        return (None, None);
    };
    agent.map_or((None, None), |a| a.read(&v))
}

/// An agent's protocol on its standard input and output, as the watcher
/// drives it: what a line of its output tells, how its session begins,
/// and the messages that ask it for a turn and interrupt one.
pub trait Protocol {
    /// What the JSON line `v` of the agent's output tells, and what the
    /// watcher answers a request it carries.
    fn read(&self, v: &Value) -> (Option<Event>, Option<Value>);

    /// Begins the session, before its first turn (Codex's handshake).
    fn begin(
        &mut self,
        _d: &Driving,
        _stdin: &Stdin,
        _events: &Receiver<Event>,
    ) -> Result<(), SessionError> {
        Ok(())
    }

    /// The message asking the agent for a turn of `text`, as request `id`.
    fn turn(&self, id: i64, text: &str) -> Value;

    /// Whether a turn under way may be interrupted.
    fn interrupts(&self) -> bool {
        false
    }

    /// The message interrupting the turn `turn`, as request `id`, where the
    /// agent takes one.
    fn interrupt(&self, _id: i64, _turn: &str) -> Option<Value> {
        None
    }
}

/// The protocol of an agent run in `mode`; none for a mode whose program
/// is not driven as an agent's session.
fn protocol(mode: InputMode) -> Option<Box<dyn Protocol>> {
    match mode {
        InputMode::ClaudeStreamJson => Some(Box::new(claude::Claude)),
        InputMode::CodexAppServer => Some(Box::new(codex::Codex::default())),
        InputMode::Lines | InputMode::ClaudeInteractive | InputMode::CodexInteractive => None,
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

/// Reads the agent's output until it ends: each line kept in the run's log
/// and what it tells in its transcript, each event sent to the driver,
/// each request answered on `stdin`.
pub fn read_output(
    mode: InputMode,
    stdout: ChildStdout,
    log: Log,
    transcript: Option<Arc<crate::node::transcript::Transcript>>,
    stdin: Stdin,
    events: Sender<Event>,
) {
    let agent = protocol(mode);
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
        if let (Some(t), true) = (&transcript, whole) {
            t.add_output(mode, line);
        }
        if !whole {
            // Cut: skip the rest of this line, read as no event, holding
            // no more of it than the reader's buffer.
            if !skip_line(&mut reader) {
                return;
            }
            continue;
        }
        let (event, reply) = read_with(agent.as_deref(), line);
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

/// Writes `v` to the agent, one line of JSON.
fn write_json(stdin: &Stdin, v: &Value) -> std::io::Result<()> {
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

/// The agent's standard input, shared by the reader of its output (which
/// answers its requests) and the driver.
pub type Stdin = Arc<Mutex<ChildStdin>>;

/// Drives the agent's session: its protocol's beginning first, then a turn
/// for the first line and one for each delivery, in order, each after the
/// one before ended. Returns when the deliveries end, the agent's output
/// ends, or the agent cannot work (`ending` then says why, and `kill` ends
/// the run).
pub fn drive(
    d: Driving,
    stdin: Stdin,
    events: Receiver<Event>,
    deliveries: Receiver<String>,
    ending: Ending,
    kill: impl Fn(),
) {
    let agent = protocol(d.mode).unwrap_or_else(|| Box::new(claude::Claude));
    let first = d.first.clone();
    let mut s = Session {
        d,
        agent,
        stdin,
        events,
        ending,
        kill,
        worked: false,
        request: 10,
    };
    if s.begin().is_break() || s.turn(&first, false).is_break() {
        return;
    }
    while let Ok(line) = deliveries.recv() {
        if s.turn(&line, true).is_break() {
            return;
        }
    }
    s.log("the deliveries ended");
}

/// An agent's session as the driver holds it.
struct Session<K: Fn()> {
    d: Driving,
    agent: Box<dyn Protocol>,
    stdin: Stdin,
    events: Receiver<Event>,
    ending: Ending,
    kill: K,
    /// Whether a turn ended without error yet.
    worked: bool,
    /// The id of the driver's last request.
    request: i64,
}

/// A turn under way, as the agent's events tell it.
#[derive(Default)]
struct Turn {
    /// Its id, once the agent started it (Codex).
    id: Option<String>,
    /// Since when its model service refuses it, and its last refusal.
    refused: Option<(Instant, String)>,
    /// Whether the driver interrupted it for being refused too long.
    interrupted: bool,
    /// The agent's words so far.
    words: String,
    /// What the driver itself said during it, which is not the agent answering.
    own: Vec<String>,
}

impl Turn {
    /// The turn's final words, as it ended with `text`.
    fn said(&self, text: String) -> String {
        match (&self.refused, self.interrupted) {
            (Some((_, last)), true) => {
                format!("the model service refused it for three minutes: {last}")
            }
            _ if text.is_empty() => self.words.clone(),
            _ => text,
        }
    }
}

impl<K: Fn()> Session<K> {
    fn log(&self, line: &str) {
        log_line(&self.d.log, &format!("ocx: {line}"));
    }

    /// Ends the run, `why` kept as its ending.
    fn end(&self, why: String) -> ControlFlow<()> {
        self.log(&format!("the run ends: {why}"));
        if let Ok(mut e) = self.ending.lock() {
            *e = Some(why);
        }
        (self.kill)();
        Break(())
    }

    /// Begins the session by the agent's protocol; a session that cannot
    /// begin says so where the record was asked and ends the run.
    fn begin(&mut self) -> ControlFlow<()> {
        let Err(why) = self.agent.begin(&self.d, &self.stdin, &self.events) else {
            return Continue(());
        };
        self.d.speaker.keep_error(&why.to_string());
        let _ = self
            .d
            .speaker
            .say(&self.d.record, &format!("The agent could not start: {why}"));
        self.end(format!("the agent could not start: {why}"))
    }

    /// One turn of `line` (a delivery, when `delivered`; else the first
    /// line): asked, awaited to its end, its words said where it was asked.
    fn turn(&mut self, line: &str, delivered: bool) -> ControlFlow<()> {
        let record = delivered.then_some(self.d.record.as_str());
        let to = inbox::read(line, record)
            .map(|l| l.reply_to)
            .unwrap_or_else(|_| self.d.record.clone());
        let text = inbox::unescape(line);
        let mark = self.d.speaker.mark(&to);
        self.request += 1;
        if write_json(&self.stdin, &self.agent.turn(self.request, &text)).is_err() {
            return Break(());
        }
        let mut turn = Turn::default();
        let (ok, said) = self.until_ended(&to, &mut turn)?;
        self.ended(ok, &said, &to, mark, &turn.own)
    }

    /// Reads the agent's events until `turn` ends: whether without error,
    /// and its final words or why. Only a turn refused and not yet
    /// interrupted has a deadline, the time left of the three minutes;
    /// otherwise the session sleeps until the agent says something.
    fn until_ended(&mut self, to: &str, turn: &mut Turn) -> ControlFlow<(), (bool, String)> {
        loop {
            let deadline = match (&turn.refused, &turn.id, turn.interrupted) {
                (Some((since, _)), Some(_), false) if self.agent.interrupts() => {
                    Some(REFUSED_TURN_MAX.saturating_sub(since.elapsed()))
                }
                _ => None,
            };
            let next = match deadline {
                Some(left) => self.events.recv_timeout(left),
                None => self
                    .events
                    .recv()
                    .map_err(|_| RecvTimeoutError::Disconnected),
            };
            let event = match next {
                Ok(e) => e,
                Err(RecvTimeoutError::Disconnected) => return Break(()),
                Err(RecvTimeoutError::Timeout) => {
                    self.interrupt(turn);
                    continue;
                }
            };
            match event {
                Event::Refused { status, text } => self.refused(to, turn, status, text)?,
                Event::TurnStarted(t) => turn.id = Some(t),
                Event::Words(w) => turn.words = w,
                Event::Answer { id, error: Some(e) } if id == self.request => {
                    return Continue((false, e));
                }
                Event::TurnEnded { ok, text } => return Continue((ok, turn.said(text))),
                _ => {}
            }
        }
    }

    /// Interrupts `turn`, refused for three minutes.
    fn interrupt(&self, turn: &mut Turn) {
        let id = self.request + 1_000_000;
        let Some(message) = turn.id.as_deref().and_then(|t| self.agent.interrupt(id, t)) else {
            return;
        };
        turn.interrupted = true;
        self.log("the turn was refused for three minutes: interrupted");
        let _ = write_json(&self.stdin, &message);
    }

    /// The model service refused `turn` (with `status`, saying `why`): the
    /// first refusal of the turn kept and said at `to`; a credential
    /// refused before any turn worked ends the run.
    fn refused(
        &self,
        to: &str,
        turn: &mut Turn,
        status: Option<i64>,
        why: String,
    ) -> ControlFlow<()> {
        if let Some((_, last)) = &mut turn.refused {
            last.clone_from(&why);
            return Continue(());
        }
        turn.refused = Some((Instant::now(), why.clone()));
        self.d.speaker.keep_error(&why);
        self.log(&format!("the model service refused the agent: {why}"));
        let cannot = !self.worked && refuses_credential(status);
        let words = if cannot {
            format!("The agent's model service refused its credential, so it cannot work: {why}")
        } else {
            format!("The agent's model service refused it, and the agent is trying again: {why}")
        };
        match self.d.speaker.say(to, &words) {
            Ok(h) => turn.own.push(h),
            Err(e) => self.log(&format!("could not say so: {e}")),
        }
        if cannot {
            return self.end(format!("the agent's credential was refused: {why}"));
        }
        Continue(())
    }

    /// A turn asked at `to` ended (`ok`: without error), `said` its final
    /// words or why: said there, unless the agent answered there itself
    /// after `mark` (other than the driver's `own` words); a turn in error
    /// before any worked ends the run.
    fn ended(
        &mut self,
        ok: bool,
        said: &str,
        to: &str,
        mark: i64,
        own: &[String],
    ) -> ControlFlow<()> {
        if ok {
            self.worked = true;
            if said.trim().is_empty() {
                self.log("the turn ended without words");
            } else if self.d.speaker.answered_since(to, mark, own) {
                self.log("the turn ended; the agent answered there itself");
            } else {
                match self.d.speaker.say(to, said) {
                    Ok(_) => self.log(&format!("the turn ended; its words said in reply to {to}")),
                    Err(e) => {
                        self.log(&format!("the turn ended; its words could not be said: {e}"))
                    }
                }
            }
            return Continue(());
        }
        self.d.speaker.keep_error(said);
        let words = format!("The agent's turn ended in error: {said}");
        match self.d.speaker.say(to, &words) {
            Err(e) => self.log(&format!(
                "the turn ended in error ({said}); could not say so: {e}"
            )),
            Ok(_) => self.log(&format!("the turn ended in error: {said}")),
        }
        if !self.worked {
            return self.end(format!("the agent could not work: {said}"));
        }
        Continue(())
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
}
