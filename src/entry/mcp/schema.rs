//! The registry's tools as MCP lists them: `ocx_NAME`, the input schema,
//! the Answer's schema holding the tool's result schema, and the hints
//! each tool's definition gives; and an Answer as MCP's tool result.

use crate::answer::Answer;
use crate::registry::TOOLS;
use crate::tool::{Entry, Needs};
use rmcp::model::{CallToolResult, ContentBlock, Tool, ToolAnnotations};
use serde_json::{Map, Value};
use std::sync::{Arc, OnceLock};

/// The answer as MCP's tool result: the Answer as structured content, its
/// text (result or refusal first) as content, `isError` on a refusal.
pub fn result(answer: &Answer, text: Option<String>) -> CallToolResult {
    let mut out = CallToolResult::default();
    out.content = vec![ContentBlock::text(answer.to_text(text))];
    out.structured_content = Some(serde_json::to_value(answer).unwrap_or(Value::Null));
    out.is_error = Some(!answer.ok);
    out
}

/// Every tool by name as MCP lists it, made once per process.
pub(super) fn listed() -> &'static [(&'static str, Tool)] {
    static LISTED: OnceLock<Vec<(&'static str, Tool)>> = OnceLock::new();
    LISTED.get_or_init(|| TOOLS.iter().map(|t| (t.name(), tool(*t))).collect())
}

/// A registry entry as MCP lists it: `ocx_NAME`, its summary, its input
/// schema, the Answer's schema holding its result's, and its hints.
pub fn tool(entry: &dyn Entry) -> Tool {
    let input = match entry.input_schema().clone() {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let mut annotations = ToolAnnotations::new()
        .read_only(!entry.writes())
        .destructive(entry.destructive())
        .idempotent(entry.idempotent())
        .open_world(false);
    annotations.title = Some(entry.name().to_string());
    let description = match entry.needs() {
        Needs::Nothing => entry.summary().to_string(),
        needs => format!("{} Needs capability {}.", entry.summary(), needs.describe()),
    };
    Tool::new(
        format!("ocx_{}", entry.name()),
        description,
        Arc::new(input),
    )
    .with_raw_output_schema(Arc::new(output_schema(entry)))
    .with_annotations(annotations)
}

/// The Answer's schema with `result` the tool's own result schema (or
/// null), the tool's definitions renamed so none meets the Answer's.
pub fn output_schema(entry: &dyn Entry) -> Map<String, Value> {
    let mut answer = match serde_json::to_value(schemars::schema_for!(Answer)) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    let mut own = entry.output_schema().clone();
    rename_refs(&mut own);
    let mut own = match own {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    own.remove("$schema");
    let defs = own.remove("$defs");
    if let Some(Value::Object(defs)) = defs {
        let target = answer
            .entry("$defs")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(target) = target.as_object_mut() {
            for (k, v) in defs {
                target.insert(format!("result_{k}"), v);
            }
        }
    }
    if let Some(props) = answer.get_mut("properties").and_then(Value::as_object_mut) {
        props.insert(
            "result".into(),
            serde_json::json!({
                "description": "What the tool answered, when it ran to the end.",
                "anyOf": [Value::Object(own), {"type": "null"}]
            }),
        );
    }
    answer
}

fn rename_refs(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, item) in m.iter_mut() {
                if k == "$ref"
                    && let Value::String(s) = item
                    && let Some(name) = s.strip_prefix("#/$defs/")
                {
                    *s = format!("#/$defs/result_{name}");
                } else {
                    rename_refs(item);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(rename_refs),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry;

    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, item) in m {
                    match (k.as_str(), item) {
                        ("$ref", Value::String(r)) => out.push(r.clone()),
                        _ => refs(item, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|i| refs(i, out)),
            _ => {}
        }
    }

    #[test]
    fn hints_come_from_each_tools_definition() {
        let hints = |name: &str| tool(registry::find(name).unwrap()).annotations.unwrap();
        let read = hints("read");
        assert_eq!(read.read_only_hint, Some(true));
        assert_eq!(read.idempotent_hint, Some(true));
        let edit = hints("edit");
        assert_eq!(
            (edit.read_only_hint, edit.destructive_hint),
            (Some(false), Some(true))
        );
        let post = hints("post");
        assert_eq!(
            (post.destructive_hint, post.idempotent_hint),
            (Some(false), Some(false))
        );
    }

    #[test]
    fn every_tool_lists_with_object_schemas_whose_refs_resolve() {
        for t in TOOLS {
            let tool = tool(*t);
            assert_eq!(tool.input_schema.get("type"), Some(&Value::from("object")));
            let out = Value::Object((*tool.output_schema.unwrap()).clone());
            assert!(
                out["properties"]["result"]["anyOf"].is_array(),
                "{}",
                t.name()
            );
            let mut found = Vec::new();
            refs(&out, &mut found);
            for r in found {
                let name = r.strip_prefix("#/$defs/").unwrap_or(&r);
                assert!(out["$defs"].get(name).is_some(), "{}: {r}", t.name());
            }
        }
    }
}
