//! `list`: every tool, with its input schema. Writes nothing.

use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

/// Input of `list`: nothing.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {}

/// Every tool.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    pub tools: Vec<ToolSummary>,
}

/// One tool as `list` shows it.
#[derive(Serialize, JsonSchema)]
pub struct ToolSummary {
    /// Its name.
    pub name: String,
    /// What it does.
    pub summary: String,
    /// The capabilities it needs ("nothing", or letters any one of which will do).
    pub needs: String,
    /// Whether it may change the repository.
    pub writes: bool,
    /// The JSON schema of its input (derived once a process, and lent).
    pub input: &'static Value,
}

/// The `list` tool.
pub struct List;

impl Tool for List {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "list";
    const SUMMARY: &'static str = "Every tool, with its input schema.";
    const NEEDS: Needs = Needs::Nothing;
    const WRITES: bool = false;

    fn run(_: Input, call: &mut Call) -> Result<Output, Stop> {
        Ok(Output {
            tools: call
                .tools
                .iter()
                .map(|t| ToolSummary {
                    name: t.name().into(),
                    summary: t.summary().into(),
                    needs: t.needs().describe(),
                    writes: t.writes(),
                    input: t.input_schema(),
                })
                .collect(),
        })
    }

    fn text(out: &Output) -> String {
        out.tools.iter().map(block).collect()
    }
}

/// One tool's lines of `list`'s text, made once per process for each tool:
/// a tool's summary and schema never change while the program runs.
fn block(t: &ToolSummary) -> String {
    static MADE: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());
    let mut made = MADE.lock().unwrap_or_else(PoisonError::into_inner);
    made.entry(t.name.clone())
        .or_insert_with(|| {
            let mut s = format!("{:<10} {}  (needs {})\n", t.name, t.summary, t.needs);
            for (name, ty, doc) in fields(t.input) {
                s += &format!("    --{name:<18} {ty:<8} {doc}\n");
            }
            s
        })
        .clone()
}

/// Each field of an input schema as a flag: its name, kind and description
/// (the fields of a nested object among them, as the command line takes
/// them), `dry_run` left out.
pub fn fields(schema: &Value) -> Vec<(String, String, String)> {
    crate::fields::flags_of(schema, &["dry_run"])
        .into_iter()
        .map(|f| {
            let kind = match f.kind {
                crate::fields::Kind::Text => "text",
                crate::fields::Kind::Integer => "number",
                crate::fields::Kind::Boolean => "boolean",
                crate::fields::Kind::List => "list",
                crate::fields::Kind::Json => "json",
            };
            (f.name(), kind.to_string(), f.doc)
        })
        .collect()
}
