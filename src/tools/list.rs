//! `list`: every tool, with its input schema. Writes nothing.
//!
//! Its text (each tool's name, summary, needs and flags) is what the tools'
//! schemas make, kept in `list.txt` so that a plain `ocx list` derives no
//! schema; a test of the registry makes it anew from every tool's schema and
//! fails, writing it again, when the two differ.

use crate::stop::Stop;
use crate::tool::{Call, Entry, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use std::borrow::Cow;

/// The text every tool's [`block`] makes, kept; `list`'s text is made of it.
pub const KEPT: &str = include_str!("list.txt");

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
    pub name: &'static str,
    /// What it does.
    pub summary: &'static str,
    /// The capabilities it needs ("nothing", or letters any one of which will do).
    pub needs: String,
    /// Whether it may change the repository.
    pub writes: bool,
    /// The JSON schema of its input.
    #[schemars(with = "Value")]
    pub input: InputSchema,
}

/// A tool's input schema, derived (once a process) only when it is
/// serialized: `list`'s text shows it as the kept flags.
pub struct InputSchema(pub &'static dyn Entry);

impl Serialize for InputSchema {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.input_schema().serialize(s)
    }
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
                    name: t.name(),
                    summary: t.summary(),
                    needs: t.needs().describe(),
                    writes: t.writes(),
                    input: InputSchema(*t),
                })
                .collect(),
        })
    }

    fn text(out: &Output) -> String {
        let kept = kept_blocks();
        out.tools
            .iter()
            .map(|t| match kept.iter().find(|(name, _)| *name == t.name) {
                Some((_, block)) => Cow::Borrowed(*block),
                None => Cow::Owned(block(t.input.0)),
            })
            .collect()
    }
}

/// One tool's lines of `list`'s text: its name, summary and needs, then
/// each field of its input as a flag.
pub fn block(t: &dyn Entry) -> String {
    let mut s = format!(
        "{:<10} {}  (needs {})\n",
        t.name(),
        t.summary(),
        t.needs().describe()
    );
    for (name, ty, doc) in fields(t.input_schema()) {
        s += &format!("    --{name:<18} {ty:<8} {doc}\n");
    }
    s
}

/// Each tool's block of [`KEPT`] by its name: a block begins at a line
/// that does not begin with a space, with the tool's name.
pub fn kept_blocks() -> Vec<(&'static str, &'static str)> {
    let mut blocks = Vec::new();
    let mut rest = KEPT;
    while !rest.is_empty() {
        let end = rest
            .match_indices('\n')
            .map(|(i, _)| i + 1)
            .find(|&i| !rest[i..].starts_with(' '))
            .unwrap_or(rest.len());
        let (block, after) = rest.split_at(end);
        blocks.push((block.split(' ').next().unwrap_or(""), block));
        rest = after;
    }
    blocks
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
