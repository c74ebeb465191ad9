//! The one shape every tool answers in, whichever entry point called it:
//! `{ok, tool, dry_run, log, result, stopped, next_step, took_ms}`, a
//! stop saying whether it was refused or failed. It reads back as it is
//! written, so a client of OCX's page reads the same type.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool's answer. `ok` is false exactly when `stopped` is set. Its
/// `result` is JSON, or the tool's own output where an entry draws it
/// itself (`registry::call_typed`), which reads and writes as the same JSON.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Answer<R = Value> {
    /// Whether the tool did what was asked.
    pub ok: bool,
    /// The tool's name.
    pub tool: String,
    /// Whether this was a dry run, which writes nothing.
    pub dry_run: bool,
    /// The operations performed, or for a dry run those it would perform.
    pub log: Vec<Op>,
    /// What the tool answered, when it ran to the end (left out where only
    /// its text is shown: `registry::call_shown` with `Shown::Text`).
    pub result: Option<R>,
    /// Why it stopped, naming the field at fault.
    pub stopped: Option<Stopped>,
    /// What to do instead, in one line, when it stopped.
    pub next_step: Option<String>,
    /// How long it took, in milliseconds.
    pub took_ms: u64,
}

/// Why a tool stopped.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema, PartialEq, Eq)]
pub struct Stopped {
    /// `refused` (what was asked may not, or cannot, be done as asked) or `failed` (something
    /// beneath the tool broke).
    pub kind: crate::stop::StopKind,
    /// The input field at fault, as a path (`budget.wall`), or null when no one field is.
    pub field: Option<String>,
    /// What was wrong, for the person who reads it.
    pub reason: String,
}

/// One typed operation in a tool's log.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Read from the repository.
    Read { what: String },
    /// Composed an artifact (not yet stored).
    Compose { artifact: String, hash: String },
    /// Stored artifacts with Fossil, as the sender named.
    Store {
        artifacts: Vec<String>,
        sender: String,
        published: bool,
        done: bool,
    },
    /// Another Fossil operation.
    Fossil { operation: String, done: bool },
    /// Held artifacts for review (`restrict.review`): nothing stored,
    /// until the question's reviewer approves.
    Held {
        artifacts: Vec<String>,
        question: String,
    },
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Read { what } => write!(f, "read {what}"),
            Op::Compose { artifact, hash } => write!(f, "composed {artifact} {hash}"),
            Op::Store {
                artifacts,
                sender,
                published,
                done,
            } => write!(
                f,
                "{} {} artifact{} as {sender}{}",
                if *done { "stored" } else { "would store" },
                artifacts.len(),
                if artifacts.len() == 1 { "" } else { "s" },
                if *published {
                    ""
                } else {
                    ", awaiting moderation"
                }
            ),
            Op::Fossil { operation, done } => {
                write!(f, "{}{operation}", if *done { "" } else { "would " })
            }
            Op::Held {
                artifacts,
                question,
            } => write!(
                f,
                "held {} artifact{} for review, under the question {question}",
                artifacts.len(),
                if artifacts.len() == 1 { "" } else { "s" }
            ),
        }
    }
}

impl<R> Answer<R> {
    /// The same answer with its result as `f` makes it.
    pub fn map_result<S>(self, f: impl FnOnce(R) -> S) -> Answer<S> {
        Answer {
            ok: self.ok,
            tool: self.tool,
            dry_run: self.dry_run,
            log: self.log,
            result: self.result.map(f),
            stopped: self.stopped,
            next_step: self.next_step,
            took_ms: self.took_ms,
        }
    }
}

impl Answer {
    /// The answer as text for a person: the result (or why it stopped)
    /// first, then what to do instead, then the log.
    pub fn to_text(&self, result_text: Option<String>) -> String {
        let mut out = String::new();
        if let Some(s) = &self.stopped {
            match &s.field {
                Some(f) => out += &format!("stopped: {f}: {}\n", s.reason),
                None => out += &format!("stopped: {}\n", s.reason),
            }
            if let Some(n) = &self.next_step {
                out += &format!("next: {n}\n");
            }
        } else if let Some(t) = result_text {
            out += &t;
            if !t.ends_with('\n') {
                out.push('\n');
            }
        }
        if self.dry_run {
            out += "dry run: nothing was written\n";
        }
        if !self.log.is_empty() {
            out += "log:\n";
            for op in &self.log {
                out += &format!("  {op}\n");
            }
        }
        out
    }
}

/// A JSON value as indented `key: value` lines for a person.
pub fn value_text(v: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, v, 0);
    out
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::Null => Some("-".into()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(if s.contains('\n') {
            format!(
                "|\n{}",
                s.lines()
                    .map(|l| format!("    {l}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        } else {
            s.clone()
        }),
        Value::Array(a) if a.is_empty() => Some("[]".into()),
        Value::Object(o) if o.is_empty() => Some("{}".into()),
        _ => None,
    }
}

fn write_value(out: &mut String, v: &Value, depth: usize) {
    let pad = "  ".repeat(depth);
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                match scalar(v) {
                    Some(s) => out.push_str(&format!("{pad}{k}: {s}\n")),
                    None => {
                        out.push_str(&format!("{pad}{k}:\n"));
                        write_value(out, v, depth + 1);
                    }
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                match scalar(item) {
                    Some(s) => out.push_str(&format!("{pad}- {s}\n")),
                    None => {
                        out.push_str(&format!("{pad}-\n"));
                        write_value(out, item, depth + 1);
                    }
                }
            }
        }
        other => out.push_str(&format!("{pad}{}\n", scalar(other).unwrap_or_default())),
    }
}
