//! `help`: one tool in full: its input and output schemas and what it
//! needs. Writes nothing.

use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Input of `help`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The tool's name, as `list` gives it.
    pub tool: String,
}

/// One tool in full.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    pub name: String,
    pub summary: String,
    /// The capabilities it needs, by letter.
    pub needs: String,
    /// What it needs, in words.
    pub needs_in_words: String,
    /// Who uses it, as `ocx --help` and the tools page group it.
    pub for_whom: String,
    /// Whether it may change the repository.
    pub writes: bool,
    /// The JSON schema of its input.
    pub input: Value,
    /// The JSON schema of its result.
    pub output: Value,
}

/// The `help` tool.
pub struct Help;

impl Tool for Help {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "help";
    const SUMMARY: &'static str =
        "One tool in full: input and output schemas, and the capabilities it needs.";
    const NEEDS: Needs = Needs::Nothing;
    const WRITES: bool = false;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let t = call
            .tools
            .iter()
            .find(|t| t.name() == input.tool)
            .ok_or_else(|| {
                Stop::field("tool", format!("there is no tool {:?}", input.tool))
                    .next("`ocx list` names every tool")
            })?;
        Ok(Output {
            name: t.name().into(),
            summary: t.summary().into(),
            needs: t.needs().describe(),
            needs_in_words: t.needs().in_words(),
            for_whom: crate::tool::GROUPS
                .iter()
                .find(|g| g.tools.contains(&t.name()))
                .map(|g| g.title.to_string())
                .unwrap_or_default(),
            writes: t.writes(),
            input: t.input_schema().clone(),
            output: t.output_schema().clone(),
        })
    }

    fn text(out: &Output) -> String {
        let mut s = format!(
            "{} — {}\n{}\nneeds {}\n{}\ninput:\n",
            out.name,
            out.summary,
            out.for_whom,
            out.needs_in_words,
            if out.writes {
                "may write to the repository"
            } else {
                "writes nothing"
            }
        );
        for (name, ty, doc) in super::list::fields(&out.input) {
            s += &format!("  --{name:<18} {ty:<8} {doc}\n");
        }
        s += &format!(
            "input schema:\n{}\noutput schema:\n{}\n",
            serde_json::to_string_pretty(&out.input).unwrap_or_default(),
            serde_json::to_string_pretty(&out.output).unwrap_or_default()
        );
        s
    }
}
