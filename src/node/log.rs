//! The node's log, `node.log` under its root: one JSON object a line, each
//! an [`Event`] (when, the arrival that woke the node, the record, what
//! was done and why), written in one place whole, so a program or a test
//! reads its fields and `ocx node log` renders it for a person. A line
//! that is no event (the daemon's own stderr, or a log an earlier release
//! wrote) is read as the text it is.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether this process is a node in the foreground, its events also on
/// stderr, rendered.
static FOREGROUND: AtomicBool = AtomicBool::new(false);

/// What was done: the stable words an event's `done` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// A record's run started: its login made or given a password.
    Opened,
    /// A record answered `refused` by the node.
    Refused,
    /// A record answered `lost` (its watcher gone).
    Lost,
    /// The node's own response to a record arrived.
    Answered,
    /// A message the node does not act on (malformed, or its sender may not).
    Ignored,
    /// An arrival given to an open session.
    Delivered,
    /// A record's command run on a check-in.
    Ran,
    /// A stop sent to a running session's watcher.
    Stopping,
    /// A record answered `stopped` by a stop.
    Stopped,
    /// An open record's run found going after the node's state was lost.
    FoundRunning,
    /// An arrival left for a later wake.
    HeldBack,
    /// Something the node tried failed.
    Failed,
    /// The served side's run login for an agent machine's record.
    MadeLogin,
    /// No run login made for an agent machine's record.
    MadeNoLogin,
    /// A run login withdrawn, its record answered.
    Withdrew,
    /// Passwords an earlier release kept in rows forgotten.
    ForgotPasswords,
    /// The server confirmed a response an agent machine pushed.
    Confirmed,
    /// An agent machine's server stopped answering.
    ServerAway,
    /// An agent machine's server answers again.
    ServerAnswers,
    /// The check-ins an agent machine's run pushed while its server was
    /// away, pushed again as the run's login before its response.
    PushedAgain,
    /// The site's Content-Security-Policy set to run Fossil's scripts alone.
    KeptPolicy,
    /// The git export brought up to date.
    Exported,
    /// The git export left to another run of it.
    ExportHeld,
    /// The node's process ended on a fatal error.
    NodeStopped,
    /// Attachments to runs' terminals whose end the node did not see, posted.
    Attachments,
    /// The repository brought up to its git upstream, on its schedule.
    Upstream,
    /// Transcripts of runs ended past the node's keeping removed.
    Swept,
    /// A held write of a run under review decided by its reviewer:
    /// written as the run's login, or dropped.
    Decided,
    /// A run's trace sent to the node's OpenTelemetry collector.
    Traced,
}

impl Done {
    /// The word written in the log.
    pub fn word(self) -> &'static str {
        match self {
            Done::Opened => "opened",
            Done::Refused => "refused",
            Done::Lost => "lost",
            Done::Answered => "answered",
            Done::Ignored => "ignored",
            Done::Delivered => "delivered",
            Done::Ran => "ran",
            Done::Stopping => "stopping",
            Done::Stopped => "stopped",
            Done::FoundRunning => "found running",
            Done::HeldBack => "held back",
            Done::Failed => "failed",
            Done::MadeLogin => "made login",
            Done::MadeNoLogin => "made no login",
            Done::Withdrew => "withdrew",
            Done::ForgotPasswords => "forgot passwords",
            Done::Confirmed => "confirmed",
            Done::ServerAway => "server away",
            Done::ServerAnswers => "server answers",
            Done::PushedAgain => "pushed again",
            Done::KeptPolicy => "kept policy",
            Done::Exported => "exported",
            Done::ExportHeld => "export held",
            Done::NodeStopped => "node stopped",
            Done::Attachments => "attachments posted",
            Done::Upstream => "upstream brought",
            Done::Swept => "transcripts swept",
            Done::Decided => "decided",
            Done::Traced => "traced",
        }
    }
}

/// One thing the node did, a line of its log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Event {
    /// When it was written (RFC 3339, UTC).
    #[serde(default)]
    pub time: String,
    /// What was done (a [`Done`] word: "opened", "refused", "delivered"...).
    pub done: String,
    /// The artifact (full hash) whose arrival the node acted on, where one did.
    #[serde(default)]
    pub arrival: Option<String>,
    /// The record (full hash) it is about, where there is one.
    #[serde(default)]
    pub record: Option<String>,
    /// Why, or what of it, in words for a person.
    #[serde(default)]
    pub why: String,
    /// The login it made, gave or withdrew (a run's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
    /// The outcome of a response ("exited", "refused"...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// How many: check-ins exported, passwords forgotten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// The id of the run's trace (32 hex digits), where one was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
}

impl Event {
    /// An event of `done`, `why` it was done.
    pub fn new(done: Done, why: impl Into<String>) -> Event {
        Event {
            done: done.word().into(),
            why: why.into(),
            ..Event::default()
        }
    }

    /// The event, of the arrival `hash`.
    pub fn arrival(mut self, hash: &str) -> Event {
        self.arrival = Some(hash.into());
        self
    }

    /// The event, about the record `hash`.
    pub fn record(mut self, hash: &str) -> Event {
        self.record = Some(hash.into());
        self
    }

    /// The event, naming the login `login`.
    pub fn login(mut self, login: &str) -> Event {
        self.login = Some(login.into());
        self
    }

    /// The event, of a response whose outcome is `outcome`.
    pub fn outcome(mut self, outcome: &str) -> Event {
        self.outcome = Some(outcome.into());
        self
    }

    /// The event, of the trace `id`.
    pub fn trace(mut self, id: &str) -> Event {
        self.trace = Some(id.into());
        self
    }

    /// The event, counting `n`.
    pub fn count(mut self, n: u64) -> Event {
        self.count = Some(n);
        self
    }

    /// The event for a person, on one line: its time, what was done, the
    /// record (or else the arrival) by its first ten characters, and why.
    pub fn line(&self) -> String {
        let mut line = format!("{} {}", self.time, self.done);
        if let Some(hash) = self.record.as_ref().or(self.arrival.as_ref()) {
            line.push(' ');
            line.extend(hash.chars().take(10));
        }
        if let Some(login) = &self.login {
            line.push_str(" as ");
            line.push_str(login);
        }
        if let Some(trace) = &self.trace {
            line.push_str(" trace ");
            line.push_str(trace);
        }
        if !self.why.is_empty() {
            line.push_str(": ");
            line.push_str(&self.why);
        }
        one_line(&line)
    }
}

/// A line of the log as read: an event, or text that is none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Logged {
    /// An event.
    Event(Event),
    /// A line that is no event, as it was written.
    Text(String),
}

impl Logged {
    /// The line read: an event where it holds one.
    pub fn of(line: &str) -> Logged {
        match serde_json::from_str::<Event>(line) {
            Ok(e) => Logged::Event(e),
            Err(_) => Logged::Text(one_line(line)),
        }
    }

    /// The line for a person.
    pub fn line(&self) -> String {
        match self {
            Logged::Event(e) => e.line(),
            Logged::Text(t) => t.clone(),
        }
    }
}

/// The node's log under `root`.
pub fn file(root: &Path) -> PathBuf {
    root.join("node.log")
}

/// Makes this process's events go to stderr as well, rendered (a node in
/// the foreground, for systemd and the like).
pub fn to_stderr_too() {
    FOREGROUND.store(true, Ordering::Relaxed);
}

/// Appends `events` to the node's log under `root`, each stamped now and
/// one line, all in one write to the file opened for appending, so no
/// other writer's line falls inside one. Writing never fails its caller:
/// a log that cannot be written loses the events.
pub fn write(root: &Path, events: &[Event]) {
    write_to(root, events, true);
}

/// [`write`], only to a log that is there already: the node's last
/// words, which must not make a file in a root being removed.
pub fn write_if_kept(root: &Path, events: &[Event]) {
    write_to(root, events, false);
}

fn write_to(root: &Path, events: &[Event], create: bool) {
    if events.is_empty() {
        return;
    }
    let time = now();
    let foreground = FOREGROUND.load(Ordering::Relaxed);
    let mut text = String::new();
    let mut shown = String::new();
    for e in events {
        let mut e = e.clone();
        e.time.clone_from(&time);
        text.push_str(&json_line(&e));
        text.push('\n');
        if foreground {
            shown.push_str(&e.line());
            shown.push('\n');
        }
    }
    if foreground {
        let _ = std::io::stderr().lock().write_all(shown.as_bytes());
    }
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(create)
        .append(true)
        .mode(0o600)
        .open(file(root))
    {
        let _ = f.write_all(text.as_bytes());
    }
}

/// The last `n` lines of the node's log under `root` (none when it has
/// no log), read from its end: however long the log, no more than those
/// lines (and a block before them) is read.
pub fn last(root: &Path, n: usize) -> std::io::Result<Vec<Logged>> {
    let mut f = match std::fs::File::open(file(root)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut end = f.seek(SeekFrom::End(0))?;
    let mut tail: Vec<u8> = Vec::new();
    let mut newlines = 0;
    const BLOCK: u64 = 64 * 1024;
    while end > 0 && newlines <= n {
        let start = end.saturating_sub(BLOCK);
        let mut block = vec![0; usize::try_from(end - start).unwrap_or(0)];
        f.seek(SeekFrom::Start(start))?;
        f.read_exact(&mut block)?;
        newlines += block.iter().filter(|b| **b == b'\n').count();
        block.extend_from_slice(&tail);
        tail = block;
        end = start;
    }
    let text = String::from_utf8_lossy(&tail);
    let mut lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if end > 0 && !lines.is_empty() {
        lines.remove(0);
    }
    let from = lines.len().saturating_sub(n);
    Ok(lines[from..].iter().map(|l| Logged::of(l)).collect())
}

/// The time now, as an event holds it: RFC 3339 in UTC, always to the
/// millisecond, so every event's time is as long as every other's.
fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
        ))
        .unwrap_or_default()
}

/// An event as its line of JSON, each bidirectional override escaped as
/// well (JSON leaves them as they are), so none hides what follows from a
/// person reading the file itself.
fn json_line(e: &Event) -> String {
    let json = serde_json::to_string(e).unwrap_or_default();
    if !json.chars().any(is_bidi_override) {
        return json;
    }
    json.chars()
        .map(|c| {
            if is_bidi_override(c) {
                format!("\\u{:04x}", u32::from(c))
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn is_bidi_override(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A line for a person: each control character (and each bidirectional
/// override) escaped, so no text a poster wrote starts a line of its own
/// or hides what follows.
fn one_line(line: &str) -> String {
    line.chars()
        .map(|c| {
            if c.is_control() || is_bidi_override(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_one_line_of_json_whatever_its_words_hold() {
        let e = Event::new(Done::Refused, "budget.wall: no\nRecord x\u{202e}evil").record("abc");
        let line = json_line(&e);
        assert!(!line.contains('\n') && !line.contains('\u{202e}'), "{line}");
        assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), e);
        assert!(!e.line().contains('\n') && !e.line().contains('\u{202e}'));
    }

    #[test]
    fn an_events_time_is_rfc_3339_in_utc_to_the_millisecond() {
        let t = now();
        assert_eq!(t.len(), 24, "{t}");
        assert_eq!(
            (&t[4..5], &t[10..11], &t[19..20], &t[23..]),
            ("-", "T", ".", "Z"),
            "{t}"
        );
    }

    #[test]
    fn the_last_lines_are_read_from_the_end_and_a_line_that_is_no_event_is_text() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::new();
        for i in 0..5000 {
            text.push_str(&json_line(&Event::new(Done::Opened, format!("{i}"))));
            text.push('\n');
        }
        text.push_str("thread 'main' panicked\n");
        std::fs::write(file(dir.path()), text).unwrap();
        let read = last(dir.path(), 3).unwrap();
        assert_eq!(read.len(), 3);
        assert!(
            matches!(&read[0], Logged::Event(e) if e.why == "4998"),
            "{read:?}"
        );
        assert_eq!(read[2], Logged::Text("thread 'main' panicked".into()));
        assert_eq!(last(dir.path(), 100_000).unwrap().len(), 5001);
        assert!(last(&dir.path().join("none"), 3).unwrap().is_empty());
    }
}
