//! `patterns`: the patterns that count, the wiki pages `run/NAME` whose
//! version an administrator sent last holds a record's fields: each with
//! its objective, runner, what wakes its run (its branches, logins and
//! schedules), and who wrote the version
//! that counts and when. `create --pattern NAME` starts from one. Writes
//! nothing.

use super::pattern::{self, PREFIX};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Input of `patterns`: nothing.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {}

/// A pattern as the list shows it.
#[derive(Serialize, JsonSchema, Clone, Debug)]
pub struct Listed {
    /// Its name, as `create --pattern` takes it.
    pub name: String,
    /// Its wiki page.
    pub page: String,
    /// The version that counts (its full hash).
    pub version: Option<String>,
    /// Who sent that version, by receipt.
    pub written_by: Option<String>,
    /// When its writer says it was written.
    pub written_at: Option<String>,
    /// The objective it gives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objective: Option<String>,
    /// The runner it names (claude when it names none).
    pub runner: String,
    /// The branches whose check-ins wake its run.
    pub checkins: Vec<String>,
    /// The logins whose posts wake its run (none given: every administrator).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hears: Option<Vec<String>>,
    /// What else wakes its run, when it says: its schedules, as the record's wake lists them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wake: Option<Value>,
    /// The login its runs act as, when it names one (none: a new login each time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Why the page cannot be used, when it cannot (its block, as the refusal names it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The patterns that count.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    pub patterns: Vec<Listed>,
}

/// The `patterns` tool.
pub struct Patterns;

impl Tool for Patterns {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "patterns";
    const SUMMARY: &'static str = "The patterns that count (wiki pages run/NAME an administrator wrote): what each would run, and who wrote it.";
    const NEEDS: Needs = Needs::Any("j");
    const WRITES: bool = false;

    fn run(_: Input, call: &mut Call) -> Result<Output, Stop> {
        Ok(Output {
            patterns: list(call)?,
        })
    }

    fn text(o: &Output) -> String {
        if o.patterns.is_empty() {
            return "no pattern counts: write the wiki page run/NAME as an administrator, its first ```json block a record's fields\n".into();
        }
        let mut t = String::new();
        for p in &o.patterns {
            t.push_str(&format!(
                "{}: {}\n",
                p.name,
                p.objective.as_deref().unwrap_or("(no objective)")
            ));
            t.push_str(&format!("  runner: {}\n", p.runner));
            t.push_str(&format!("  wakes on: {}\n", wakes(p)));
            t.push_str(&format!(
                "  written by {} at {}\n",
                p.written_by.as_deref().unwrap_or("no one"),
                p.written_at.as_deref().unwrap_or("an unknown time")
            ));
            if let Some(why) = &p.problem {
                t.push_str(&format!("  cannot be used: {why}\n"));
            }
        }
        t
    }
}

/// What wakes a pattern's run, in words.
pub fn wakes(p: &Listed) -> String {
    let checkins = match p.checkins.as_slice() {
        [] => None,
        b => Some(format!("check-ins on {}", b.join(", "))),
    };
    let posts = match &p.hears {
        None => Some("posts of every administrator".to_string()),
        Some(h) if h.is_empty() => None,
        Some(h) => Some(format!("posts of {}", h.join(", "))),
    };
    match (checkins, posts) {
        (None, None) => "its record alone".into(),
        (Some(c), None) => c,
        (None, Some(p)) => p,
        (Some(c), Some(p)) => format!("{c}; {p}"),
    }
}

/// Every pattern page that counts, read.
pub fn list(call: &mut Call) -> Result<Vec<Listed>, Stop> {
    let receipts = super::served::receipts(call)?;
    call.read("the wiki pages run/NAME");
    let names: Vec<String> = call
        .repo()?
        .wiki_names()?
        .into_iter()
        .filter_map(|n| n.strip_prefix(PREFIX).map(str::to_string))
        .filter(|n| pattern::valid_name(n))
        .collect();
    let mut out = Vec::new();
    for name in names {
        let page = format!("{PREFIX}{name}");
        let listed = match pattern::read_page(call, &receipts, &page) {
            Ok(p) => {
                let text = |k: &str| p.fields.get(k).and_then(Value::as_str).map(String::from);
                let list = |k: &str| {
                    p.fields.get(k).and_then(Value::as_array).map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(String::from)
                            .collect::<Vec<_>>()
                    })
                };
                Listed {
                    name,
                    page,
                    version: p.source.version,
                    written_by: p.sent_by,
                    written_at: p.written,
                    objective: text("objective"),
                    runner: text("runner").unwrap_or_else(|| "claude".into()),
                    checkins: list("checkins").unwrap_or_default(),
                    hears: list("hears"),
                    wake: wake_of(&p.fields),
                    user: text("user"),
                    problem: None,
                }
            }
            Err(stop) if stop.reason.starts_with("no version of the wiki page") => continue,
            Err(stop) => Listed {
                name,
                page,
                version: None,
                written_by: None,
                written_at: None,
                objective: None,
                runner: String::new(),
                checkins: Vec::new(),
                hears: None,
                wake: None,
                user: None,
                problem: Some(format!(
                    "{}{}",
                    stop.field.map(|f| format!("{f}: ")).unwrap_or_default(),
                    stop.reason
                )),
            },
        };
        out.push(listed);
    }
    Ok(out)
}

/// What else wakes a pattern's run: its `wake`, then a schedule of its
/// `every` and one of its `cron`, as `create` writes them; none when it
/// names none.
fn wake_of(fields: &serde_json::Map<String, Value>) -> Option<Value> {
    let mut wake = fields
        .get("wake")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(every) = fields.get("every").and_then(Value::as_str) {
        wake.push(serde_json::json!({"on": "schedule", "every": every}));
    }
    if let Some(cron) = fields.get("cron").and_then(Value::as_str) {
        let mut w = serde_json::json!({"on": "schedule", "cron": cron});
        if let Some(zone) = fields.get("zone") {
            w["zone"] = zone.clone();
        }
        wake.push(w);
    }
    (!wake.is_empty()).then_some(Value::Array(wake))
}
