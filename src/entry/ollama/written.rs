//! A tool call a model wrote as text instead of calling: taken only when
//! the whole content is one JSON object holding exactly `name` (a string)
//! and `arguments` (an object), bare, in one fenced block, or in one
//! `<tool_call>` element. Whether the name is offered and the arguments
//! fit its schema is the caller's to judge. Total on any text.

use serde_json::{Map, Value};

/// The call `content` is, when it is wholly one call written as text.
pub fn written_call(content: &str) -> Option<(String, Map<String, Value>)> {
    let body = content.trim();
    let inner = if let Some(rest) = body.strip_prefix("<tool_call>") {
        let inner = rest.strip_suffix("</tool_call>")?;
        if inner.contains("<tool_call>") || inner.contains("</tool_call>") {
            return None;
        }
        inner
    } else if body.starts_with("```") {
        fenced(body)?
    } else {
        body
    };
    let Ok(Value::Object(mut obj)) = serde_json::from_str::<Value>(inner.trim()) else {
        return None;
    };
    if obj.len() != 2 {
        return None;
    }
    let Some(Value::String(name)) = obj.remove("name") else {
        return None;
    };
    let Some(Value::Object(arguments)) = obj.remove("arguments") else {
        return None;
    };
    Some((name, arguments))
}

/// The inside of `body` when it is exactly one fenced block (its info
/// string empty or `json`).
fn fenced(body: &str) -> Option<&str> {
    let rest = body.strip_prefix("```")?;
    let (info, rest) = rest.split_once('\n')?;
    if !matches!(info.trim(), "" | "json" | "JSON") {
        return None;
    }
    let inner = rest.trim_end().strip_suffix("```")?;
    if inner.contains("```") {
        return None;
    }
    Some(inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CALL: &str = r#"{"name": "ocx_read", "arguments": {"path": "a.txt"}}"#;

    #[test]
    fn each_of_the_three_shapes_is_taken() {
        for text in [
            CALL.to_string(),
            format!("  {CALL}\n"),
            format!("```json\n{CALL}\n```"),
            format!("```\n{CALL}\n```\n"),
            format!("<tool_call>\n{CALL}\n</tool_call>"),
        ] {
            let (name, args) = written_call(&text).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(name, "ocx_read");
            assert_eq!(args["path"], "a.txt");
        }
    }

    #[test]
    fn anything_ambiguous_is_words() {
        for text in [
            format!("I will call {CALL}"),
            format!("{CALL} and then more"),
            format!("{CALL}\n{CALL}"),
            format!("```json\n{CALL}\n```\n```json\n{CALL}\n```"),
            format!("Here:\n```json\n{CALL}\n```"),
            format!("<tool_call>{CALL}</tool_call><tool_call>{CALL}</tool_call>"),
            format!("```python\n{CALL}\n```"),
            r#"{"name": "ocx_read", "parameters": {"path": "a"}}"#.to_string(),
            r#"{"name": "ocx_read", "arguments": "{\"path\": \"a\"}"}"#.to_string(),
            r#"{"name": "ocx_read", "arguments": {}, "id": 1}"#.to_string(),
            r#"{"name": 3, "arguments": {}}"#.to_string(),
            "[]".to_string(),
            String::new(),
        ] {
            assert_eq!(written_call(&text), None, "{text}");
        }
    }

    proptest! {
        #[test]
        fn any_text_gets_a_reading(text in ".{0,200}") {
            let _ = written_call(&text);
            let _ = written_call(&format!("```\n{text}"));
            let _ = written_call(&format!("<tool_call>{text}"));
        }
    }
}
