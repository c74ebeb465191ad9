//! A run's transcript: each delivery and each turn of its agent, in
//! order, as the agent reported it (its words, each tool call with its
//! arguments and result, each command with its output, each refusal and
//! error), and how the run ended. The watcher keeps it in the run's
//! directory as JSON lines (`transcript.jsonl`, its owner's alone), every
//! secret it knows masked before a line is written, for the node's
//! retention; `run` reads it, and its page waits on it for what comes.
//!
//! What an agent prints is hostile: a line that is no event it knows adds
//! nothing, and each text kept is bounded.

use crate::node::runner::InputMode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The transcript's file in a run's directory.
pub const FILE: &str = "transcript.jsonl";

/// The most of one text an entry keeps; the rest is said folded.
pub const TEXT_MAX: usize = 16 << 10;

/// The most entries one read answers.
pub const READ_MAX: usize = 2000;

/// How long the node keeps an ended run's transcript unless its
/// configuration says otherwise.
pub const KEEP_DAYS: u64 = 30;

/// One thing the transcript tells, in the order it came.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Said {
    /// What the node fed the agent: a delivery, or the record's first line.
    Delivery { text: String },
    /// The agent's own words.
    Words { text: String },
    /// A tool the agent called: its name and arguments.
    ToolCall {
        id: String,
        name: String,
        arguments: Value,
    },
    /// What a tool call answered; `error` when it failed.
    ToolResult {
        id: String,
        output: String,
        error: bool,
    },
    /// A command the agent ran, its output and its exit status.
    Command {
        command: String,
        output: String,
        exit: Option<i64>,
    },
    /// A line of a plain command's output (a CI run, a lines runner).
    Output { text: String },
    /// The model service refused the agent; it tries again.
    Refused { text: String },
    /// A turn ended in error, in the agent's words.
    Error { text: String },
    /// A turn ended; its usage, when the agent told it.
    TurnEnded { ok: bool },
    /// The run ended: its outcome and its response's note.
    Ended { outcome: String, note: String },
}

impl Said {
    /// Its kind, as its JSON names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Said::Delivery { .. } => "delivery",
            Said::Words { .. } => "words",
            Said::ToolCall { .. } => "tool_call",
            Said::ToolResult { .. } => "tool_result",
            Said::Command { .. } => "command",
            Said::Output { .. } => "output",
            Said::Refused { .. } => "refused",
            Said::Error { .. } => "error",
            Said::TurnEnded { .. } => "turn_ended",
            Said::Ended { .. } => "ended",
        }
    }
}

/// One line of the transcript: its number (from 1), when (UTC), and what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Entry {
    pub seq: u64,
    pub at: String,
    #[serde(flatten)]
    pub said: Said,
}

/// What one line of an agent's output of `mode` tells, in order (none
/// for a line that is no event of the agent's). Total on any text.
pub fn said_in(mode: InputMode, line: &str) -> Vec<Said> {
    match mode {
        InputMode::ClaudeStreamJson => match serde_json::from_str::<Value>(line) {
            Ok(v) => claude(&v),
            Err(_) => Vec::new(),
        },
        InputMode::CodexAppServer => match serde_json::from_str::<Value>(line) {
            Ok(v) => codex(&v),
            Err(_) => Vec::new(),
        },
        InputMode::Lines => vec![Said::Output {
            text: bounded(line),
        }],
        InputMode::ClaudeInteractive | InputMode::CodexInteractive => Vec::new(),
    }
}

/// Claude Code's stream-json: `assistant` events' text and tool calls,
/// `user` events' tool results, `api_retry` and the turn's `result`.
fn claude(v: &Value) -> Vec<Said> {
    let content = || v["message"]["content"].as_array().into_iter().flatten();
    match (v["type"].as_str(), v["subtype"].as_str()) {
        (Some("assistant"), _) => content()
            .filter_map(|c| match c["type"].as_str() {
                Some("text") => text_of(&c["text"]).map(|text| Said::Words { text }),
                Some("tool_use") => Some(Said::ToolCall {
                    id: bounded(c["id"].as_str().unwrap_or("")),
                    name: bounded(c["name"].as_str().unwrap_or("")),
                    arguments: bounded_value(&c["input"]),
                }),
                _ => None,
            })
            .collect(),
        (Some("user"), _) => content()
            .filter(|c| c["type"] == "tool_result")
            .map(|c| Said::ToolResult {
                id: bounded(c["tool_use_id"].as_str().unwrap_or("")),
                output: bounded(&flat_text(&c["content"])),
                error: c["is_error"] == Value::Bool(true),
            })
            .collect(),
        (Some("system"), Some("api_retry")) => vec![Said::Refused {
            text: bounded(&format!(
                "{}{}",
                v["error_status"]
                    .as_i64()
                    .map(|s| format!("HTTP {s} "))
                    .unwrap_or_default(),
                flat_text(&v["error"])
            )),
        }],
        (Some("result"), _) => {
            let ok = v["is_error"] != Value::Bool(true);
            let mut said = Vec::new();
            if !ok {
                said.push(Said::Error {
                    text: bounded(&flat_text(&v["result"])),
                });
            }
            said.push(Said::TurnEnded { ok });
            said
        }
        _ => Vec::new(),
    }
}

/// Codex's app-server: completed items (its messages, MCP tool calls with
/// their results, commands with their output), errors and turns' ends.
fn codex(v: &Value) -> Vec<Said> {
    let params = &v["params"];
    match v["method"].as_str() {
        Some("item/completed") => {
            let item = &params["item"];
            match item["type"].as_str() {
                Some("agentMessage") => text_of(&item["text"])
                    .map(|text| vec![Said::Words { text }])
                    .unwrap_or_default(),
                Some("mcpToolCall") => {
                    let id = bounded(item["id"].as_str().unwrap_or(""));
                    let name = format!(
                        "{}/{}",
                        item["server"].as_str().unwrap_or(""),
                        item["tool"].as_str().unwrap_or("")
                    );
                    vec![
                        Said::ToolCall {
                            id: id.clone(),
                            name: bounded(&name),
                            arguments: bounded_value(&item["arguments"]),
                        },
                        Said::ToolResult {
                            id,
                            output: bounded(&flat_text(&item["result"])),
                            error: !item["error"].is_null()
                                || item["status"].as_str() == Some("failed"),
                        },
                    ]
                }
                Some("commandExecution") => vec![Said::Command {
                    command: bounded(&flat_text(&item["command"])),
                    output: bounded(item["aggregatedOutput"].as_str().unwrap_or("")),
                    exit: item["exitCode"].as_i64(),
                }],
                _ => Vec::new(),
            }
        }
        Some("error") => vec![Said::Refused {
            text: bounded(
                params["error"]["additionalDetails"]
                    .as_str()
                    .or(params["error"]["message"].as_str())
                    .unwrap_or("an error"),
            ),
        }],
        Some("turn/completed") => {
            let turn = &params["turn"];
            let ok = turn["status"].as_str() == Some("completed");
            let mut said = Vec::new();
            if !ok && !turn["error"].is_null() {
                said.push(Said::Error {
                    text: bounded(&flat_text(&turn["error"])),
                });
            }
            said.push(Said::TurnEnded { ok });
            said
        }
        _ => Vec::new(),
    }
}

/// A string's text, when it holds any.
fn text_of(v: &Value) -> Option<String> {
    v.as_str().filter(|t| !t.trim().is_empty()).map(bounded)
}

/// A value as text: a string as itself, a list of content blocks as their
/// texts, anything else as its JSON.
fn flat_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(|i| match i.get("text").and_then(Value::as_str) {
                Some(t) => t.to_string(),
                None => flat_text(i),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(o) => match (
            o.get("content"),
            o.get("message").or(o.get("text")).and_then(Value::as_str),
        ) {
            (Some(content), _) if !content.is_null() => flat_text(content),
            (_, Some(t)) => t.to_string(),
            _ => v.to_string(),
        },
        other => other.to_string(),
    }
}

/// `text` cut to [`TEXT_MAX`] bytes on a character's edge, saying how much
/// was left out.
pub fn bounded(text: &str) -> String {
    if text.len() <= TEXT_MAX {
        return text.to_string();
    }
    let mut end = TEXT_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n… ({} more bytes not kept)",
        &text[..end],
        text.len() - end
    )
}

/// A value kept whole when its JSON is within [`TEXT_MAX`], else as its
/// bounded text.
fn bounded_value(v: &Value) -> Value {
    let json = v.to_string();
    if json.len() <= TEXT_MAX {
        v.clone()
    } else {
        Value::String(bounded(&json))
    }
}

/// Replaces, in every string of `v`, each secret's value by its mask.
fn mask(v: &mut Value, secrets: &[(String, String)]) {
    match v {
        Value::String(s) => {
            for (name, secret) in secrets {
                if s.contains(secret.as_str()) {
                    *s = s.replace(secret.as_str(), &format!("[{name} masked]"));
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|i| mask(i, secrets)),
        Value::Object(o) => o.values_mut().for_each(|i| mask(i, secrets)),
        _ => {}
    }
}

/// The shortest secret masked: a shorter value would mask ordinary words.
const SECRET_MIN: usize = 8;

/// A run's transcript as its watcher writes it.
pub struct Transcript {
    file: Mutex<(std::fs::File, u64)>,
    secrets: Mutex<Vec<(String, String)>>,
    /// The run's relay's count, and the run's directory: at each turn's
    /// end the tokens spent so far are added to its [`TURNS`].
    turns: Mutex<Option<(crate::run::relay::Meter, PathBuf)>>,
}

/// The file in a run's directory saying the tokens spent by each turn's
/// end: a line each, the turn's end's entry number, tokens in and out.
pub const TURNS: &str = "turns";

impl Transcript {
    /// Opens (or goes on with) the transcript in the run's directory
    /// `dir`, its owner's alone, masking each of `secrets` (a name for the
    /// reader, and the value) wherever it appears.
    pub fn open(
        dir: &Path,
        secrets: impl IntoIterator<Item = (String, String)>,
    ) -> std::io::Result<Transcript> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = dir.join(FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)?;
        let seq = last_seq(dir).unwrap_or(0);
        let t = Transcript {
            file: Mutex::new((file, seq)),
            secrets: Mutex::new(Vec::new()),
            turns: Mutex::new(None),
        };
        for (name, value) in secrets {
            t.mask_also(&name, &value);
        }
        Ok(t)
    }

    /// Masks `value` too, named `name`, in every entry added from now on
    /// (a secret the run is given once it is made: its relay's token).
    pub fn mask_also(&self, name: &str, value: &str) {
        let value = value.trim();
        if value.len() < SECRET_MIN {
            return;
        }
        let mut secrets = self.secrets.lock().unwrap_or_else(|e| e.into_inner());
        secrets.push((name.to_string(), value.to_string()));
        // A longer secret first, so one holding another is masked whole.
        secrets.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
    }

    /// Counts each turn's tokens from now on as `meter` says, in the run's
    /// directory `dir`.
    pub fn count_turns(&self, meter: crate::run::relay::Meter, dir: &Path) {
        *self.turns.lock().unwrap_or_else(|e| e.into_inner()) = Some((meter, dir.to_path_buf()));
    }

    /// Adds `said`, masked, as the next entry.
    pub fn add(&self, said: Said) {
        let Ok(mut value) = serde_json::to_value(&said) else {
            return;
        };
        mask(
            &mut value,
            &self.secrets.lock().unwrap_or_else(|e| e.into_inner()),
        );
        let Ok(said) = serde_json::from_value::<Said>(value) else {
            return;
        };
        let mut held = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let entry = Entry {
            seq: held.1 + 1,
            at: crate::fossil::artifact::now(),
            said,
        };
        let Ok(mut line) = serde_json::to_vec(&entry) else {
            return;
        };
        line.push(b'\n');
        if held.0.write_all(&line).is_ok() {
            held.1 += 1;
            if matches!(entry.said, Said::TurnEnded { .. }) {
                self.turn_ended(held.1);
            }
        }
    }

    /// Adds to the run's [`TURNS`] the tokens spent by the turn that
    /// ended at entry `seq`, where they are counted.
    fn turn_ended(&self, seq: u64) {
        use std::os::unix::fs::OpenOptionsExt;
        let turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
        let Some((meter, dir)) = turns.as_ref() else {
            return;
        };
        let (tokens_in, tokens_out) = meter.in_out();
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(dir.join(TURNS))
            .and_then(|mut f| f.write_all(format!("{seq} {tokens_in} {tokens_out}\n").as_bytes()));
    }

    /// The tokens spent by each turn's end in the run's directory `dir`:
    /// the entry number of the turn's end, tokens in and out so far.
    pub fn turns(dir: &Path) -> Vec<(u64, u64, u64)> {
        std::fs::read_to_string(dir.join(TURNS))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut n = l.split(' ').map(|w| w.parse::<u64>().ok());
                Some((n.next()??, n.next()??, n.next()??))
            })
            .collect()
    }

    /// Adds each thing `line` of the agent's output of `mode` tells.
    pub fn add_output(&self, mode: InputMode, line: &str) {
        for said in said_in(mode, line) {
            self.add(said);
        }
    }
}

/// `entries` as the transcript's lines, each its own, as they are kept.
pub fn lines(entries: &[Entry]) -> std::io::Result<Vec<u8>> {
    let mut lines = Vec::new();
    for e in entries {
        serde_json::to_writer(&mut lines, e).map_err(std::io::Error::other)?;
        lines.push(b'\n');
    }
    Ok(lines)
}

/// Adds `lines` ([`lines`] of what an agent machine reported) to the
/// transcript in the run's directory `dir` (the node's alone).
pub fn keep_reported(dir: &Path, lines: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(dir.join(FILE))?
        .write_all(lines)
}

/// The spend file in a run's directory: what the run has spent so far,
/// written by its watcher as it goes and when it ends.
pub const SPEND_FILE: &str = "spend.json";

/// What a run has spent, as its watcher last measured it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Spend {
    /// When it was measured (UTC).
    pub at: String,
    /// Seconds since the run started.
    pub wall_seconds: u64,
    /// CPU seconds its processes used, where its cgroup counts them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
    /// The most memory its processes held at once, in bytes, where its
    /// cgroup counts it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_peak_bytes: Option<u64>,
    /// Model tokens in, as its relay counted the service's usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_in: Option<u64>,
    /// Model tokens out, as its relay counted the service's usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_out: Option<u64>,
    /// What its model tokens cost, at its runner page's prices (runs whose
    /// page gives them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<f64>")]
    pub cost: Option<crate::protocol::money::Money>,
    /// The currency of `cost`, as the runner page's prices name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// Connections its proxy refused (runs held to `sandbox.hosts`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections_refused: Option<u64>,
    /// The model service's errors its relay saw, by status (`unreached`
    /// where it gave no answer).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub model_errors: std::collections::BTreeMap<String, u64>,
}

/// Writes `spend` as the run's spend in its directory `dir`, whole.
pub fn write_spend(dir: &Path, spend: &Spend) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(spend).map_err(std::io::Error::other)?;
    crate::file::write_whole_unsynced(
        &dir.join(SPEND_FILE),
        &dir.join(".spend.json.new"),
        &bytes,
        0o600,
    )
}

/// The run's spend as its watcher last wrote it in `dir`, when it did.
pub fn read_spend(dir: &Path) -> Option<Spend> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(dir.join(SPEND_FILE))
        .ok()?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(&mut file, 64 << 10), &mut bytes).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Why a transcript could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    /// The run has none (it never started here, or it was swept).
    #[error("the run keeps no transcript on this host")]
    Missing,
    /// This account may not read it: it is the node's account's alone.
    #[error("the transcript is the node's account's alone to read")]
    NotYours,
    /// Reading it failed.
    #[error("the transcript cannot be read: {0}")]
    Unreadable(std::io::Error),
}

/// A transcript's line as it is read back: every field of every kind in
/// one flat shape, which reads in one pass where [`Entry`]'s own shape
/// (its kind's fields beside its number) is buffered whole first.
#[derive(Deserialize)]
struct Line {
    seq: u64,
    at: String,
    kind: String,
    text: Option<String>,
    id: Option<String>,
    name: Option<String>,
    arguments: Option<Value>,
    output: Option<String>,
    error: Option<bool>,
    command: Option<String>,
    exit: Option<i64>,
    ok: Option<bool>,
    outcome: Option<String>,
    note: Option<String>,
}

impl Line {
    /// `bytes` as an entry, when they read as one: its kind known and
    /// every field that kind has present.
    fn read(bytes: &[u8]) -> Option<Entry> {
        let l: Line = serde_json::from_slice(bytes).ok()?;
        let said = match l.kind.as_str() {
            "delivery" => Said::Delivery { text: l.text? },
            "words" => Said::Words { text: l.text? },
            "tool_call" => Said::ToolCall {
                id: l.id?,
                name: l.name?,
                arguments: l.arguments.unwrap_or(Value::Null),
            },
            "tool_result" => Said::ToolResult {
                id: l.id?,
                output: l.output?,
                error: l.error?,
            },
            "command" => Said::Command {
                command: l.command?,
                output: l.output?,
                exit: l.exit,
            },
            "output" => Said::Output { text: l.text? },
            "refused" => Said::Refused { text: l.text? },
            "error" => Said::Error { text: l.text? },
            "turn_ended" => Said::TurnEnded { ok: l.ok? },
            "ended" => Said::Ended {
                outcome: l.outcome?,
                note: l.note?,
            },
            _ => return None,
        };
        Some(Entry {
            seq: l.seq,
            at: l.at,
            said,
        })
    }
}

/// The transcript in run directory `dir`, opened to read (never through
/// a link).
fn opened(dir: &Path) -> Result<std::fs::File, TranscriptError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(dir.join(FILE))
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => TranscriptError::Missing,
            std::io::ErrorKind::PermissionDenied => TranscriptError::NotYours,
            _ => TranscriptError::Unreadable(e),
        })
}

/// The number of the last entry of the transcript in run directory
/// `dir` (0 when none reads as one), read from the file's end.
pub fn last_seq(dir: &Path) -> Result<u64, TranscriptError> {
    Ok(read_last(dir, 1)?.last().map_or(0, |e| e.seq))
}

/// The last `most` entries of the transcript in run directory `dir`,
/// read from the file's end: a tail four times longer each time it holds
/// fewer whole lines that read as entries (a page draws the newest and
/// never parses the rest of a long transcript).
pub fn read_last(dir: &Path, most: usize) -> Result<Vec<Entry>, TranscriptError> {
    use std::os::unix::fs::FileExt;
    if most == 0 {
        return Ok(Vec::new());
    }
    let file = opened(dir)?;
    let length = file.metadata().map_err(TranscriptError::Unreadable)?.len();
    let mut tail: u64 = 16 * 1024;
    loop {
        let start = length.saturating_sub(tail);
        let mut bytes = vec![0u8; usize::try_from(length - start).unwrap_or(0)];
        file.read_exact_at(&mut bytes, start)
            .map_err(TranscriptError::Unreadable)?;
        // The first line of a tail that begins inside the file may be cut.
        let whole = match start {
            0 => &bytes[..],
            _ => bytes
                .iter()
                .position(|b| *b == b'\n')
                .map_or(&[][..], |i| &bytes[i + 1..]),
        };
        let mut entries: Vec<Entry> = whole
            .split(|b| *b == b'\n')
            .rev()
            .filter_map(Line::read)
            .take(most)
            .collect();
        if entries.len() >= most || start == 0 {
            entries.reverse();
            return Ok(entries);
        }
        tail = tail.saturating_mul(4);
    }
}

/// The entries of the transcript in run directory `dir` numbered above
/// `after`, at most `most`; a line that does not read as an entry is
/// passed over.
pub fn read_after(dir: &Path, after: u64, most: usize) -> Result<Vec<Entry>, TranscriptError> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut opened(dir)?, &mut bytes)
        .map_err(TranscriptError::Unreadable)?;
    let mut entries = Vec::new();
    for line in bytes.split(|b| *b == b'\n') {
        match Line::read(line) {
            Some(e) if e.seq > after => {
                entries.push(e);
                if entries.len() >= most {
                    break;
                }
            }
            _ => {}
        }
    }
    Ok(entries)
}

/// [`read_after`], waiting up to `within` for an entry when there is
/// none yet (the page's long-poll): the file's length looked at every
/// 100 ms, and read again only once it has grown.
pub fn wait_after(dir: &Path, after: u64, within: Duration) -> Result<Vec<Entry>, TranscriptError> {
    let until = Instant::now() + within;
    let length = || {
        std::fs::symlink_metadata(dir.join(FILE))
            .map(|m| m.len())
            .ok()
    };
    let mut read_at = length();
    let entries = read_after(dir, after, READ_MAX)?;
    if !entries.is_empty() {
        return Ok(entries);
    }
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
        let now = length();
        if now == read_at {
            continue;
        }
        read_at = now;
        let entries = read_after(dir, after, READ_MAX)?;
        if !entries.is_empty() {
            return Ok(entries);
        }
    }
    Ok(Vec::new())
}

/// Removes the transcripts of ended runs under `runs` (the node's run
/// directories) last written over `keep_days` days ago: what was swept.
pub fn sweep(runs: &Path, keep_days: u64) -> Vec<PathBuf> {
    let keep = Duration::from_secs(keep_days.saturating_mul(86_400));
    let Ok(dirs) = std::fs::read_dir(runs) else {
        return Vec::new();
    };
    dirs.flatten()
        .map(|d| d.path())
        .filter(|d| !crate::node::watcher_alive(d))
        .map(|d| d.join(FILE))
        .filter(|f| {
            std::fs::symlink_metadata(f)
                .ok()
                .filter(|m| m.is_file())
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > keep)
        })
        .filter(|f| std::fs::remove_file(f).is_ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn claude_code_s_turn_reads_as_words_calls_results_and_its_end() {
        let lines = [
            r#"{"type":"system","subtype":"init","tools":[]}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Looking."},{"type":"tool_use","id":"t1","name":"mcp__ocx__ocx_post","input":{"text":"hi"}}]}}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"posted"}],"is_error":false}]}}"#,
            r#"{"type":"system","subtype":"api_retry","error_status":529,"error":"overloaded"}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"done"}"#,
        ];
        let said: Vec<Said> = lines
            .iter()
            .flat_map(|l| said_in(InputMode::ClaudeStreamJson, l))
            .collect();
        assert_eq!(
            said,
            vec![
                Said::Words {
                    text: "Looking.".into()
                },
                Said::ToolCall {
                    id: "t1".into(),
                    name: "mcp__ocx__ocx_post".into(),
                    arguments: serde_json::json!({"text": "hi"})
                },
                Said::ToolResult {
                    id: "t1".into(),
                    output: "posted".into(),
                    error: false
                },
                Said::Refused {
                    text: "HTTP 529 overloaded".into()
                },
                Said::TurnEnded { ok: true },
            ]
        );
    }

    #[test]
    fn codex_s_items_read_as_words_calls_commands_and_errors() {
        let lines = [
            r#"{"method":"item/completed","params":{"item":{"type":"agentMessage","id":"m","text":"On it."}}}"#,
            r#"{"method":"item/completed","params":{"item":{"type":"mcpToolCall","id":"c1","server":"ocx","tool":"ocx_post","arguments":{"text":"x"},"result":{"content":[{"type":"text","text":"ok"}]}}}}"#,
            r#"{"method":"item/completed","params":{"item":{"type":"commandExecution","id":"x","command":"ls","aggregatedOutput":"a\nb\n","exitCode":0}}}"#,
            r#"{"method":"error","params":{"error":{"message":"Reconnecting... 1/5","additionalDetails":"401 Unauthorized"}}}"#,
            r#"{"method":"turn/completed","params":{"turn":{"status":"failed","error":{"message":"no model"}}}}"#,
        ];
        let said: Vec<Said> = lines
            .iter()
            .flat_map(|l| said_in(InputMode::CodexAppServer, l))
            .collect();
        assert_eq!(said.len(), 7, "{said:?}");
        assert_eq!(
            said[0],
            Said::Words {
                text: "On it.".into()
            }
        );
        assert_eq!(
            said[2],
            Said::ToolResult {
                id: "c1".into(),
                output: "ok".into(),
                error: false
            }
        );
        assert_eq!(
            said[3],
            Said::Command {
                command: "ls".into(),
                output: "a\nb\n".into(),
                exit: Some(0)
            }
        );
        assert_eq!(
            said[4],
            Said::Refused {
                text: "401 Unauthorized".into()
            }
        );
        assert_eq!(
            said[5],
            Said::Error {
                text: "no model".into()
            }
        );
    }

    #[test]
    fn every_kind_reads_back_as_it_was_written_and_names_its_kind() {
        let all = [
            Said::Delivery { text: "d".into() },
            Said::Words { text: "w".into() },
            Said::ToolCall {
                id: "1".into(),
                name: "n".into(),
                arguments: serde_json::json!({"of": "x"}),
            },
            Said::ToolResult {
                id: "1".into(),
                output: "o".into(),
                error: true,
            },
            Said::Command {
                command: "c".into(),
                output: "o".into(),
                exit: None,
            },
            Said::Output { text: "o".into() },
            Said::Refused { text: "r".into() },
            Said::Error { text: "e".into() },
            Said::TurnEnded { ok: false },
            Said::Ended {
                outcome: "stopped".into(),
                note: "n".into(),
            },
        ];
        for (i, said) in all.into_iter().enumerate() {
            let entry = Entry {
                seq: i as u64 + 1,
                at: "2026-12-05T00:00:00Z".into(),
                said,
            };
            let line = serde_json::to_vec(&entry).unwrap();
            let value: Value = serde_json::from_slice(&line).unwrap();
            assert_eq!(value["kind"], entry.said.kind());
            assert_eq!(Line::read(&line), Some(entry.clone()));
            assert_eq!(serde_json::from_slice::<Entry>(&line).unwrap(), entry);
        }
        assert_eq!(Line::read(br#"{"seq":1,"at":"t","kind":"words"}"#), None);
        assert_eq!(Line::read(br#"{"seq":1,"at":"t","kind":"new"}"#), None);
    }

    #[test]
    fn every_secret_is_masked_before_a_line_is_written_and_entries_number_on() {
        let dir = tempfile::tempdir().unwrap();
        let t = Transcript::open(
            dir.path(),
            [
                ("relay token".to_string(), "tok-0123456789".to_string()),
                ("short".to_string(), "abc".to_string()),
            ],
        )
        .unwrap();
        t.add(Said::ToolCall {
            id: "1".into(),
            name: "Bash".into(),
            arguments: serde_json::json!({"command": "echo tok-0123456789", "list": ["xtok-0123456789x"]}),
        });
        t.add(Said::Words {
            text: "abc stays".into(),
        });
        drop(t);
        let raw = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert!(!raw.contains("tok-0123456789"), "{raw}");
        assert!(raw.contains("[relay token masked]"), "{raw}");
        let again = Transcript::open(dir.path(), []).unwrap();
        again.add(Said::Output {
            text: "third".into(),
        });
        let all = read_after(dir.path(), 0, READ_MAX).unwrap();
        assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(read_after(dir.path(), 2, READ_MAX).unwrap().len(), 1);
        assert!(matches!(
            read_after(&dir.path().join("none"), 0, 1),
            Err(TranscriptError::Missing)
        ));
    }

    #[test]
    fn a_wait_is_answered_by_the_entry_written_while_it_waits() {
        let dir = tempfile::tempdir().unwrap();
        let t = Transcript::open(dir.path(), []).unwrap();
        t.add(Said::Output { text: "one".into() });
        let waiting = {
            let dir = dir.path().to_path_buf();
            std::thread::spawn(move || wait_after(&dir, 1, Duration::from_secs(10)))
        };
        std::thread::sleep(Duration::from_millis(250));
        t.add(Said::Output { text: "two".into() });
        let got = waiting.join().unwrap().unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].said, Said::Output { text: "two".into() });
        assert!(
            wait_after(dir.path(), 2, Duration::from_millis(300))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_long_text_is_kept_bounded_on_a_character_s_edge() {
        let long = "é".repeat(TEXT_MAX);
        let kept = bounded(&long);
        assert!(kept.len() < TEXT_MAX + 64);
        assert!(kept.ends_with("more bytes not kept)"));
    }

    proptest! {
        #[test]
        fn any_line_of_an_agent_s_output_reads_without_panic(line in ".{0,400}") {
            for mode in [InputMode::ClaudeStreamJson, InputMode::CodexAppServer, InputMode::Lines] {
                let _ = said_in(mode, &line);
            }
        }

        #[test]
        fn the_last_entries_read_from_the_end_are_the_last_a_whole_read_gives(
            lines in proptest::collection::vec((proptest::bool::ANY, 0usize..12000, "[a-zé\\n]{0,3}"), 0..12),
            most in 0usize..14,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut text = String::new();
            for (i, (entry, long, tail)) in lines.iter().enumerate() {
                let words = format!("{}{tail}", "w".repeat(*long));
                match entry {
                    true => text.push_str(&serde_json::to_string(&Entry {
                        seq: i as u64 + 1,
                        at: "t".into(),
                        said: Said::Words { text: words },
                    }).unwrap()),
                    false => text.push_str(&words.replace('\n', " ")),
                }
                text.push('\n');
            }
            std::fs::write(dir.path().join(FILE), &text).unwrap();
            let all = read_after(dir.path(), 0, usize::MAX).unwrap();
            prop_assert_eq!(last_seq(dir.path()).unwrap(), all.last().map_or(0, |e| e.seq));
            prop_assert_eq!(
                read_last(dir.path(), most).unwrap(),
                all[all.len().saturating_sub(most)..].to_vec()
            );
        }

        #[test]
        fn any_json_event_reads_without_panic(kind in "[a-z/_]{0,20}", text in ".{0,40}") {
            for line in [
                format!(r#"{{"type":"{kind}","message":{{"content":[{{"type":"{kind}","text":{text:?},"input":[1]}}]}}}}"#),
                format!(r#"{{"method":"{kind}","params":{{"item":{{"type":"{kind}","text":{text:?}}},"turn":{{"status":{text:?}}}}}}}"#),
            ] {
                let _ = said_in(InputMode::ClaudeStreamJson, &line);
                let _ = said_in(InputMode::CodexAppServer, &line);
            }
        }
    }
}
