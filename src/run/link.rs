//! The run's side of its node's socket: a tiny MCP client over a Unix
//! socket (initialize, initialized, one `tools/call`), so the tools that
//! run inside a run's sandbox can hand the node what only the node may do
//! (store check-ins as the run's user) without holding a password.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// How long the node may take to answer one call.
const WAIT: Duration = Duration::from_secs(600);

/// What goes wrong talking to the node.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The socket cannot be reached, or the conversation broke.
    #[error("the node's socket {0}")]
    Io(String),
    /// The node answered an MCP error rather than a tool's answer.
    #[error("the node refused the call: {0}")]
    Protocol(String),
}

/// Calls the node's tool `name` (as MCP names it, `ocx_NAME`) with
/// `arguments` over the socket at `socket`; answers the tool's Answer, the
/// call's structured content.
pub fn call(socket: &Path, name: &str, arguments: Value) -> Result<Value, LinkError> {
    call_result(socket, name, arguments)?
        .get("structuredContent")
        .cloned()
        .ok_or_else(|| LinkError::Protocol("the answer holds no structured content".into()))
}

/// The text an MCP tool result gives a reader (its text content, joined),
/// and whether it is a refusal (`isError`).
pub fn result_text(result: &Value) -> (String, bool) {
    let text = result
        .get("content")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    let refused = result.get("isError").and_then(Value::as_bool) == Some(true);
    (text, refused)
}

/// Like [`call`], answering the whole MCP tool result (content, structured
/// content, `isError`).
pub fn call_result(socket: &Path, name: &str, arguments: Value) -> Result<Value, LinkError> {
    let io = |e: std::io::Error| LinkError::Io(format!("{}: {e}", socket.display()));
    let stream = UnixStream::connect(socket).map_err(io)?;
    stream.set_read_timeout(Some(WAIT)).map_err(io)?;
    let mut writer = stream.try_clone().map_err(io)?;
    let mut reader = BufReader::new(stream);
    let mut send = |msg: Value| -> Result<(), LinkError> {
        writer
            .write_all(format!("{msg}\n").as_bytes())
            .and_then(|_| writer.flush())
            .map_err(io)
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "ocx-run", "version": env!("CARGO_PKG_VERSION")}}}),
    )?;
    answer(&mut reader, 1)?;
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}}))?;
    answer(&mut reader, 2)
}

/// Reads messages until the answer to request `id`; its result.
fn answer(reader: &mut impl BufRead, id: i64) -> Result<Value, LinkError> {
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader
            .read_line(&mut line)
            .map_err(|e| LinkError::Io(e.to_string()))?;
        if n == 0 {
            return Err(LinkError::Io("closed before answering".into()));
        }
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if msg.get("id").and_then(Value::as_i64) != Some(id) {
            continue;
        }
        if let Some(e) = msg.get("error") {
            let text = e.get("message").and_then(Value::as_str).unwrap_or("error");
            return Err(LinkError::Protocol(text.to_string()));
        }
        return Ok(msg.get("result").cloned().unwrap_or(Value::Null));
    }
}
