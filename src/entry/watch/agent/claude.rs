//! Claude Code's stream-json protocol (`claude-stream-json`): a turn is
//! one `user` message on its standard input; its `result` ends the turn,
//! and its `api_retry` says its model service refused it.

use super::{Event, Protocol, words_of};
use serde_json::{Value, json};

/// Claude Code, driven by stream-json.
pub struct Claude;

impl Protocol for Claude {
    fn read(&self, v: &Value) -> (Option<Event>, Option<Value>) {
        (event(v), None)
    }

    fn turn(&self, _id: i64, text: &str) -> Value {
        json!({"type": "user", "message": {"role": "user",
            "content": [{"type": "text", "text": text}]}})
    }
}

/// What a line of Claude Code's output tells, if anything.
fn event(v: &Value) -> Option<Event> {
    match (v["type"].as_str(), v["subtype"].as_str()) {
        (Some("result"), _) => {
            let ok = v["is_error"] != Value::Bool(true);
            let text = match v["result"].as_str() {
                Some(t) if !t.trim().is_empty() => t.to_string(),
                _ if ok => String::new(),
                _ => {
                    let errors: Vec<String> = v["errors"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(words_of)
                        .collect();
                    if errors.is_empty() {
                        format!("the turn ended as {}", words_of(&v["subtype"]))
                    } else {
                        errors.join("; ")
                    }
                }
            };
            Some(Event::TurnEnded { ok, text })
        }
        (Some("system"), Some("api_retry")) => {
            let status = v["error_status"]
                .as_i64()
                .map(|s| format!("HTTP {s}"))
                .unwrap_or_else(|| "no answer".into());
            let error = words_of(&v["error"]);
            Some(Event::Refused {
                status: v["error_status"].as_i64(),
                text: if error.is_empty() {
                    status
                } else {
                    format!("{status}: {error}")
                },
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::entry::watch::agent::{Event, read_event};
    use crate::node::runner::InputMode;

    #[test]
    fn claude_s_turn_end_and_retry_are_read() {
        let ok = r#"{"type":"result","subtype":"success","is_error":false,"result":"Done."}"#;
        assert_eq!(
            read_event(InputMode::ClaudeStreamJson, ok).0,
            Some(Event::TurnEnded {
                ok: true,
                text: "Done.".into()
            })
        );
        let bad = r#"{"type":"result","subtype":"success","is_error":true,"result":"Not logged in · Please run /login"}"#;
        assert_eq!(
            read_event(InputMode::ClaudeStreamJson, bad).0,
            Some(Event::TurnEnded {
                ok: false,
                text: "Not logged in · Please run /login".into()
            })
        );
        let retry = r#"{"type":"system","subtype":"api_retry","attempt":1,"error_status":401,"error":"authentication_failed"}"#;
        assert_eq!(
            read_event(InputMode::ClaudeStreamJson, retry).0,
            Some(Event::Refused {
                status: Some(401),
                text: "HTTP 401: authentication_failed".into()
            })
        );
        assert_eq!(read_event(InputMode::ClaudeStreamJson, "not json").0, None);
    }
}
