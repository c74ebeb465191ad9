//! Codex's app-server protocol (`codex-app-server`): JSON-RPC on its
//! standard input and output. A handshake starts the run's thread; a turn
//! is a `turn/start` on it, one refused too long a `turn/interrupt`; each
//! request Codex makes of the watcher (an approval, a question) declined.

use super::{Driving, Event, Protocol, SessionError, Stdin, words_of, write_json};
use serde_json::{Value, json};
use std::sync::mpsc::Receiver;

/// Codex, driven as its app server; its thread once the handshake started it.
#[derive(Default)]
pub struct Codex {
    thread: Option<String>,
}

impl Protocol for Codex {
    fn read(&self, v: &Value) -> (Option<Event>, Option<Value>) {
        event(v)
    }

    fn begin(
        &mut self,
        d: &Driving,
        stdin: &Stdin,
        events: &Receiver<Event>,
    ) -> Result<(), SessionError> {
        self.thread = Some(handshake(d, stdin, events)?);
        Ok(())
    }

    fn turn(&self, id: i64, text: &str) -> Value {
        json!({"id": id, "method": "turn/start", "params": {"threadId": self.thread,
            "input": [{"type": "text", "text": text, "text_elements": []}]}})
    }

    fn interrupts(&self) -> bool {
        self.thread.is_some()
    }

    fn interrupt(&self, id: i64, turn: &str) -> Option<Value> {
        let thread = self.thread.as_ref()?;
        Some(json!({"id": id, "method": "turn/interrupt",
            "params": {"threadId": thread, "turnId": turn}}))
    }
}

/// What a line of Codex's output tells, if anything, and what the watcher
/// answers a request it carries.
fn event(v: &Value) -> (Option<Event>, Option<Value>) {
    let id = v.get("id").filter(|i| i.is_i64() || i.is_string()).cloned();
    match (id, v["method"].as_str()) {
        (Some(id), Some(method)) => {
            let result = match method {
                m if m.ends_with("/requestApproval") => json!({"decision": "decline"}),
                m if m.contains("elicitation") => json!({"action": "decline"}),
                _ => {
                    return (
                        None,
                        Some(json!({"id": id, "error": {"code": -32601,
                            "message": format!("a run's watcher answers no {method}")}})),
                    );
                }
            };
            (None, Some(json!({"id": id, "result": result})))
        }
        (Some(id), None) => {
            let Some(id) = id.as_i64() else {
                return (None, None);
            };
            let error = v.get("error").map(|e| words_of(&e["message"]));
            if error.is_none()
                && let Some(thread) = v["result"]["thread"]["id"].as_str()
            {
                return (Some(Event::Thread(thread.to_string())), None);
            }
            if error.is_none()
                && let Some(turn) = v["result"]["turn"]["id"].as_str()
            {
                return (Some(Event::TurnStarted(turn.to_string())), None);
            }
            (Some(Event::Answer { id, error }), None)
        }
        (None, Some("item/completed")) => {
            let item = &v["params"]["item"];
            match (item["type"].as_str(), item["text"].as_str()) {
                (Some("agentMessage"), Some(t)) => (Some(Event::Words(t.to_string())), None),
                _ => (None, None),
            }
        }
        (None, Some("turn/started")) => match v["params"]["turn"]["id"].as_str() {
            Some(t) => (Some(Event::TurnStarted(t.to_string())), None),
            None => (None, None),
        },
        (None, Some("turn/completed")) => {
            let turn = &v["params"]["turn"];
            let ok = turn["status"].as_str() == Some("completed");
            let text = if ok {
                String::new()
            } else {
                let error = service_words(&turn["error"]);
                if error.is_empty() {
                    format!("the turn ended {}", words_of(&turn["status"]))
                } else {
                    error
                }
            };
            (Some(Event::TurnEnded { ok, text }), None)
        }
        (None, Some("error")) => {
            let e = &v["params"]["error"];
            let words = service_words(e);
            let will_retry = v["params"]["willRetry"] == Value::Bool(true);
            match (will_retry, words.is_empty()) {
                (true, false) => (
                    Some(Event::Refused {
                        status: http_status(&e["codexErrorInfo"]),
                        text: words,
                    }),
                    None,
                ),
                _ => (None, None),
            }
        }
        _ => (None, None),
    }
}

/// Codex's error `e` in its service's own words: Codex's
/// `additionalDetails`, where it keeps what the service answered (its
/// `message` then says only "Reconnecting... 1/5"), else its `message`;
/// the HTTP status put first where the words do not say it.
fn service_words(e: &Value) -> String {
    let details = words_of(&e["additionalDetails"]);
    let words = if details.trim().is_empty() {
        words_of(&e["message"])
    } else {
        details
    };
    match http_status(&e["codexErrorInfo"]) {
        Some(s) if !words.is_empty() && !words.contains(&s.to_string()) => {
            format!("HTTP {s}: {words}")
        }
        _ => words,
    }
}

/// The HTTP status in Codex's error details, wherever it stands in them.
fn http_status(v: &Value) -> Option<i64> {
    match v {
        Value::Object(o) => o.iter().find_map(|(k, v)| {
            if k == "httpStatusCode" || k == "http_status_code" {
                v.as_i64()
            } else {
                http_status(v)
            }
        }),
        _ => None,
    }
}

/// Codex's handshake: `initialize`, `initialized`, then `thread/start` in
/// the workspace, with no approval asked, Codex's own sandbox off (OCX's is
/// the boundary, and allows no nested namespace), and the run's MCP
/// servers; answers the thread's id.
fn handshake(d: &Driving, stdin: &Stdin, events: &Receiver<Event>) -> Result<String, SessionError> {
    write_json(
        stdin,
        &json!({"id": 1, "method": "initialize", "params": {"clientInfo":
            {"name": "ocx", "title": "OCX", "version": env!("CARGO_PKG_VERSION")},
            "capabilities": null}}),
    )?;
    loop {
        match events.recv().map_err(|_| SessionError::Gone)? {
            Event::Answer { id: 1, error: None } => break,
            Event::Answer {
                id: 1,
                error: Some(e),
            } => {
                return Err(SessionError::Codex {
                    method: "initialize",
                    said: e,
                });
            }
            _ => {}
        }
    }
    write_json(stdin, &json!({"method": "initialized"}))?;
    let mut config = serde_json::Map::new();
    if let Some(servers) = d.servers.as_object() {
        for (name, server) in servers {
            config.insert(format!("mcp_servers.{name}"), server.clone());
        }
    }
    // An untrusted project: nothing checked in (`.codex/config.toml`, its
    // MCP servers, its instructions) configures the agent.
    config.insert(
        "projects".into(),
        json!({ d.workspace.display().to_string(): {"trust_level": "untrusted"} }),
    );
    let mut params = json!({
        "cwd": d.workspace,
        "approvalPolicy": "never",
        "sandbox": "danger-full-access",
        "config": config});
    if let Some(i) = &d.instructions {
        params["developerInstructions"] = json!(i);
    }
    write_json(
        stdin,
        &json!({"id": 2, "method": "thread/start", "params": params}),
    )?;
    loop {
        match events.recv().map_err(|_| SessionError::Gone)? {
            Event::Thread(t) => return Ok(t),
            Event::Answer { id: 2, error } => {
                return Err(SessionError::Codex {
                    method: "thread/start",
                    said: error.unwrap_or_else(|| "answered no thread".into()),
                });
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::entry::watch::agent::{Event, read_event};
    use crate::node::runner::InputMode;
    use serde_json::json;

    #[test]
    fn codex_s_requests_are_declined_and_its_turns_read() {
        let (e, reply) = read_event(
            InputMode::CodexAppServer,
            r#"{"id":7,"method":"item/commandExecution/requestApproval","params":{}}"#,
        );
        assert_eq!(e, None);
        assert_eq!(
            reply.unwrap(),
            json!({"id": 7, "result": {"decision": "decline"}})
        );
        let (_, reply) = read_event(
            InputMode::CodexAppServer,
            r#"{"id":"x","method":"item/tool/requestUserInput","params":{}}"#,
        );
        assert_eq!(reply.unwrap()["error"]["code"], -32601);
        let thread = r#"{"id":2,"result":{"thread":{"id":"th-1"}}}"#;
        assert_eq!(
            read_event(InputMode::CodexAppServer, thread).0,
            Some(Event::Thread("th-1".into()))
        );
        let words =
            r#"{"method":"item/completed","params":{"item":{"type":"agentMessage","text":"Hi."}}}"#;
        assert_eq!(
            read_event(InputMode::CodexAppServer, words).0,
            Some(Event::Words("Hi.".into()))
        );
        let refused = r#"{"method":"error","params":{"error":{"message":"Reconnecting... 1/5","codexErrorInfo":{"responseStreamDisconnected":{"httpStatusCode":401}},"additionalDetails":"unexpected status 401 Unauthorized: Incorrect API key provided, url: http://127.0.0.1:9/v1/responses"},"willRetry":true}}"#;
        assert_eq!(
            read_event(InputMode::CodexAppServer, refused).0,
            Some(Event::Refused {
                status: Some(401),
                text: "unexpected status 401 Unauthorized: Incorrect API key provided, url: http://127.0.0.1:9/v1/responses".into()
            }),
            "the service's words, not Codex's count of its tries"
        );
        let bare = r#"{"method":"error","params":{"error":{"message":"Rate limit reached","codexErrorInfo":{"httpConnectionFailed":{"httpStatusCode":429}}},"willRetry":true}}"#;
        assert_eq!(
            read_event(InputMode::CodexAppServer, bare).0,
            Some(Event::Refused {
                status: Some(429),
                text: "HTTP 429: Rate limit reached".into()
            })
        );
        let failed = r#"{"method":"turn/completed","params":{"turn":{"status":"failed","error":{"message":"unauthorized"}}}}"#;
        assert_eq!(
            read_event(InputMode::CodexAppServer, failed).0,
            Some(Event::TurnEnded {
                ok: false,
                text: "unauthorized".into()
            })
        );
    }
}
