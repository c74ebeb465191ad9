//! `list`: every tool, with its input schema. Writes nothing.

use crate::registry::{Call, Needs, Stop, TOOLS, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    /// The JSON schema of its input.
    pub input: Value,
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

    fn run(_: Input, _: &mut Call) -> Result<Output, Stop> {
        Ok(Output {
            tools: TOOLS
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
        let mut s = String::new();
        for t in &out.tools {
            s += &format!("{:<10} {}  (needs {})\n", t.name, t.summary, t.needs);
            for (name, ty, doc) in fields(&t.input).into_iter().filter(|f| f.0 != "dry_run") {
                s += &format!("    --{:<18} {:<8} {}\n", name.replace('_', "-"), ty, doc);
            }
        }
        s
    }
}

/// Each top-level field of an input schema: its name, type and description.
pub fn fields(schema: &Value) -> Vec<(String, String, String)> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    props
        .iter()
        .map(|(name, p)| {
            let ty = match p.get("type") {
                Some(Value::String(t)) => t.clone(),
                Some(Value::Array(ts)) => ts
                    .iter()
                    .filter_map(Value::as_str)
                    .find(|t| *t != "null")
                    .unwrap_or("value")
                    .to_string(),
                _ => "json".into(),
            };
            let doc = p
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .replace('\n', " ");
            (name.clone(), ty, doc)
        })
        .collect()
}
