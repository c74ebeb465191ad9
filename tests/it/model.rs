//! A scripted model server on 127.0.0.1, in a thread of the test process,
//! speaking Anthropic's streamed Messages API and OpenAI's streamed
//! Responses API as the real `claude` and `codex` take them, each reply
//! chosen by the test's script from the request.

// The server is shared by tests of several modules; not every helper is used
// by every build of them.
#![allow(dead_code)]

#[cfg(test)]
#[path = "model/real.rs"]
mod real;

use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Connections served at once; one more is closed unanswered.
const MAX_CONNECTIONS: usize = 64;
/// Requests kept for `Model::requests`; later ones are served, not kept.
const MAX_KEPT: usize = 10_000;
/// The longest request line or header line read.
const MAX_LINE: u64 = 64 * 1024;
/// The most header lines read in one request.
const MAX_HEADERS: usize = 200;
/// The largest request body read (claude's first request is about 100 KB).
const MAX_BODY: usize = 32 * 1024 * 1024;
/// How long a kept-alive connection may stay idle before it is closed.
const IDLE: Duration = Duration::from_secs(120);

/// Which API a request spoke, from its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// Anthropic's Messages API: `POST /v1/messages` (claude adds `?beta=true`).
    Anthropic,
    /// OpenAI's Responses API: `POST /v1/responses` (codex).
    OpenAi,
}

/// One request the server received, kept whole.
#[derive(Clone, Debug)]
pub struct Request {
    /// `HEAD`, `POST`, ….
    pub method: String,
    /// The target as sent, query included (`/v1/messages?beta=true`).
    pub path: String,
    /// Every header in order, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON; `Null` when empty or not JSON.
    pub body: Value,
    /// When its last byte arrived.
    pub at: Instant,
}

/// A tool's answer as the program sent it back to the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolResult {
    /// The call it answers: Anthropic's `tool_use_id`, OpenAI's `call_id`.
    pub id: String,
    /// Its text parts joined by newlines (codex puts a "Wall time" part first).
    pub text: String,
    /// Anthropic's `is_error` (OpenAI's format has none: false).
    pub is_error: bool,
}

/// What the model answers to one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A text answer that ends the model's turn (`end_turn`).
    Text(String),
    /// A call of one tool, with text before it when `text` is not empty.
    /// `name` is spelled as `Request::tools` lists it: `mcp__ocx__ocx_post`
    /// for claude; for codex `NAMESPACE__TOOL` (`mcp__ocx__ocx_post`,
    /// `mcp__ocx_node__ocx_post`), sent as `namespace` and `name` when an
    /// offered namespace matches, else as the bare name.
    Tool {
        text: String,
        name: String,
        arguments: Value,
    },
    /// An error status with the API's own error body: 400, 401, 403, 404,
    /// 429, 500 or 529 (any other is sent as a 500-like error).
    Error(u16),
}

impl Reply {
    /// The text streamed and the tool called (name and arguments), if any.
    fn streamed(&self) -> (&str, Option<(&str, &Value)>) {
        match self {
            Reply::Text(t) => (t.as_str(), None),
            Reply::Tool {
                text,
                name,
                arguments,
            } => (text.as_str(), Some((name.as_str(), arguments))),
            Reply::Error(_) => unreachable!("errors are not streamed"),
        }
    }

    /// A text answer.
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::Text(text.into())
    }

    /// A tool call without text before it.
    pub fn tool(name: &str, arguments: Value) -> Reply {
        Reply::Tool {
            text: String::new(),
            name: name.into(),
            arguments,
        }
    }

    /// A tool call after some text.
    pub fn tool_after(text: &str, name: &str, arguments: Value) -> Reply {
        Reply::Tool {
            text: text.into(),
            name: name.into(),
            arguments,
        }
    }
}

/// The script: the reply to each conversation request.
type Script = dyn Fn(&Request) -> Reply + Send + Sync;

/// What the server's threads share.
struct Shared {
    script: Box<Script>,
    kept: Mutex<Vec<Request>>,
    open: Mutex<HashMap<u64, TcpStream>>,
    connections: AtomicUsize,
    serial: AtomicU64,
    stop: AtomicBool,
    ids: AtomicU64,
}

/// The scripted model server: listening on 127.0.0.1 from `start` until
/// dropped. `HEAD` on any path is answered 200 (claude's reachability
/// check); `POST /v1/messages/count_tokens` with a count; claude's side
/// requests for structured output (the session title) with an object whose
/// required string fields say "Scripted session", without the script;
/// `POST /v1/messages` and `POST /v1/responses` by the script, as a stream
/// of server-sent events sent with a length; anything else 404. Connections
/// are kept alive, request bodies may be chunked, and each connection has a
/// thread of its own, at most 64 at once. Every request is kept, in order.
pub struct Model {
    port: u16,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Model {
    /// Starts the server, answering each conversation request with
    /// `script(&request)`.
    pub fn start(script: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Model {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            script: Box::new(script),
            kept: Mutex::new(Vec::new()),
            open: Mutex::new(HashMap::new()),
            connections: AtomicUsize::new(0),
            serial: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            ids: AtomicU64::new(1),
        });
        let s = shared.clone();
        let accept = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                if s.connections.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
                    s.connections.fetch_sub(1, Ordering::SeqCst);
                    continue;
                }
                let serial = s.serial.fetch_add(1, Ordering::SeqCst);
                if let Ok(clone) = stream.try_clone() {
                    s.open.lock().unwrap().insert(serial, clone);
                }
                let s = s.clone();
                std::thread::spawn(move || {
                    serve_connection(stream, &s);
                    s.open.lock().unwrap().remove(&serial);
                    s.connections.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Model {
            port,
            shared,
            accept: Some(accept),
        }
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL`; codex's
    /// `base_url` is this with `/v1` after it.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.kept.lock().unwrap().clone()
    }

    /// The requests that went to the script: the conversation's turns.
    pub fn conversation(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(Request::is_conversation)
            .collect()
    }

    /// Waits up to `timeout` for a request for which `pred` holds and
    /// answers the first; panics naming `what` and listing the paths seen.
    pub fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Request) -> bool,
    ) -> Request {
        let end = Instant::now() + timeout;
        loop {
            if let Some(r) = self.requests().into_iter().find(|r| pred(r)) {
                return r;
            }
            if Instant::now() > end {
                let seen: Vec<String> = self
                    .requests()
                    .iter()
                    .map(|r| format!("{} {}", r.method, r.path))
                    .collect();
                panic!("no request {what} within {timeout:?}; received: {seen:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
        for (_, s) in self.shared.open.lock().unwrap().drain() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Request {
    /// The value of header `name` (any case), the first if repeated.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The API this request spoke, if it is a model request.
    pub fn wire(&self) -> Option<Wire> {
        let path = self.path.split('?').next().unwrap_or("");
        match (self.method.as_str(), path) {
            ("POST", "/v1/messages") => Some(Wire::Anthropic),
            ("POST", "/v1/responses") => Some(Wire::OpenAi),
            _ => None,
        }
    }

    /// Whether this is claude's side request for structured output (its
    /// session title: `output_config.format` of type `json_schema`).
    pub fn is_side_request(&self) -> bool {
        self.wire() == Some(Wire::Anthropic)
            && self.body["output_config"]["format"]["type"] == "json_schema"
    }

    /// Whether the script answered it: a model request, not a side request.
    pub fn is_conversation(&self) -> bool {
        self.wire().is_some() && !self.is_side_request()
    }

    /// The `model` the program asked for.
    pub fn model(&self) -> Option<&str> {
        self.body["model"].as_str()
    }

    /// The names of the tools offered, as `Reply::Tool` takes them: Anthropic's
    /// `name`s; OpenAI's function `name`s, `NAMESPACE__NAME` for the tools
    /// of a `namespace` (codex's MCP servers: `mcp__ocx__ocx_post`), and
    /// the `type` of a built-in tool (`web_search`).
    pub fn tools(&self) -> Vec<String> {
        let mut out = Vec::new();
        for t in self.body["tools"].as_array().into_iter().flatten() {
            match (t["type"].as_str(), t["name"].as_str()) {
                (Some("namespace"), Some(ns)) => {
                    for inner in t["tools"].as_array().into_iter().flatten() {
                        if let Some(n) = inner["name"].as_str() {
                            out.push(format!("{ns}__{n}"));
                        }
                    }
                }
                (_, Some(n)) => out.push(n.to_string()),
                (Some(ty), None) => out.push(ty.to_string()),
                (None, None) => {}
            }
        }
        out
    }

    /// The conversation as the program sent it, flattened: each text a
    /// person wrote and each tool result, oldest first. Texts the programs
    /// add themselves are left out: claude's `<system-reminder>` blocks,
    /// codex's `<environment_context>` and its `# AGENTS.md instructions`.
    pub fn turns(&self) -> Vec<Turn> {
        let mut out = Vec::new();
        match self.wire() {
            Some(Wire::Anthropic) => {
                for m in self.body["messages"].as_array().into_iter().flatten() {
                    if m["role"] != "user" {
                        continue;
                    }
                    if let Some(s) = m["content"].as_str() {
                        out.push(Turn::User(s.to_string()));
                        continue;
                    }
                    for b in m["content"].as_array().into_iter().flatten() {
                        match b["type"].as_str() {
                            Some("text") => {
                                let t = b["text"].as_str().unwrap_or("");
                                if !t.starts_with("<system-reminder>") {
                                    out.push(Turn::User(t.to_string()));
                                }
                            }
                            Some("tool_result") => out.push(Turn::Tool(ToolResult {
                                id: b["tool_use_id"].as_str().unwrap_or("").into(),
                                text: joined_text(&b["content"]),
                                is_error: b["is_error"] == true,
                            })),
                            _ => {}
                        }
                    }
                }
            }
            Some(Wire::OpenAi) => {
                for it in self.body["input"].as_array().into_iter().flatten() {
                    match it["type"].as_str() {
                        Some("message") if it["role"] == "user" => {
                            for c in it["content"].as_array().into_iter().flatten() {
                                let t = c["text"].as_str().unwrap_or("");
                                if c["type"] == "input_text"
                                    && !t.starts_with("<environment_context>")
                                    && !t.starts_with("# AGENTS.md instructions")
                                {
                                    out.push(Turn::User(t.to_string()));
                                }
                            }
                        }
                        Some("function_call_output") => out.push(Turn::Tool(ToolResult {
                            id: it["call_id"].as_str().unwrap_or("").into(),
                            text: joined_text(&it["output"]),
                            is_error: false,
                        })),
                        _ => {}
                    }
                }
            }
            None => {}
        }
        out
    }

    /// The newest text a person wrote (see `turns`).
    pub fn last_user_text(&self) -> Option<String> {
        self.turns().into_iter().rev().find_map(|t| match t {
            Turn::User(s) => Some(s),
            Turn::Tool(_) => None,
        })
    }

    /// Every tool result in the conversation, oldest first.
    pub fn tool_results(&self) -> Vec<ToolResult> {
        self.turns()
            .into_iter()
            .filter_map(|t| match t {
                Turn::Tool(r) => Some(r),
                Turn::User(_) => None,
            })
            .collect()
    }

    /// The tool results after the newest text a person wrote: what this
    /// request brings the model back from its own calls (empty when it
    /// starts a turn).
    pub fn new_tool_results(&self) -> Vec<ToolResult> {
        let turns = self.turns();
        let start = turns
            .iter()
            .rposition(|t| matches!(t, Turn::User(_)))
            .map_or(0, |i| i + 1);
        turns[start..]
            .iter()
            .filter_map(|t| match t {
                Turn::Tool(r) => Some(r.clone()),
                Turn::User(_) => None,
            })
            .collect()
    }

    /// Whether any string in the body (system prompt, messages, tools…)
    /// contains `needle`.
    pub fn contains(&self, needle: &str) -> bool {
        fn walk(v: &Value, needle: &str) -> bool {
            match v {
                Value::String(s) => s.contains(needle),
                Value::Array(a) => a.iter().any(|v| walk(v, needle)),
                Value::Object(o) => o.values().any(|v| walk(v, needle)),
                _ => false,
            }
        }
        walk(&self.body, needle)
    }
}

/// One step of a conversation as `Request::turns` reads it.
#[derive(Clone, Debug, PartialEq)]
pub enum Turn {
    /// A text a person wrote.
    User(String),
    /// A tool's answer.
    Tool(ToolResult),
}

/// A string, or the `text` of each part of an array, joined by newlines.
fn joined_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Serves one connection's requests until it closes, errs or idles.
fn serve_connection(stream: TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(IDLE));
    let Ok(write) = stream.try_clone() else {
        return;
    };
    let mut out = write;
    let mut reader = BufReader::new(stream);
    while !shared.stop.load(Ordering::SeqCst) {
        let Some((request, close)) = read_request(&mut reader, &mut out) else {
            return;
        };
        let response = answer(&request, shared);
        {
            let mut kept = shared.kept.lock().unwrap();
            if kept.len() < MAX_KEPT {
                kept.push(request);
            }
        }
        if out.write_all(&response).and_then(|()| out.flush()).is_err() || close {
            return;
        }
    }
}

/// One line, at most `MAX_LINE` bytes, without its line end; `None` at
/// the end of the stream or on an error.
fn read_line(reader: &mut BufReader<TcpStream>) -> Option<String> {
    let mut line = Vec::new();
    let n = reader
        .by_ref()
        .take(MAX_LINE)
        .read_until(b'\n', &mut line)
        .ok()?;
    if n == 0 || !line.ends_with(b"\n") {
        return None;
    }
    while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        line.pop();
    }
    Some(String::from_utf8_lossy(&line).into_owned())
}

/// Reads one request (answering `Expect: 100-continue`); with it, whether
/// the client asked to close the connection after it.
fn read_request(reader: &mut BufReader<TcpStream>, out: &mut TcpStream) -> Option<(Request, bool)> {
    let mut start = read_line(reader)?;
    while start.is_empty() {
        start = read_line(reader)?;
    }
    let mut parts = start.split(' ');
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let version = parts.next().unwrap_or("HTTP/1.1").to_string();
    let mut headers = Vec::new();
    loop {
        let h = read_line(reader)?;
        if h.is_empty() {
            break;
        }
        if headers.len() >= MAX_HEADERS {
            return None;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.to_ascii_lowercase())
    };
    if get("expect").as_deref() == Some("100-continue") {
        out.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").ok()?;
    }
    let body = if get("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        read_chunked(reader)?
    } else {
        let n: usize = get("content-length").map_or(Some(0), |v| v.parse().ok())?;
        if n > MAX_BODY {
            return None;
        }
        let mut b = vec![0; n];
        reader.read_exact(&mut b).ok()?;
        b
    };
    let close = match get("connection").as_deref() {
        Some(c) if c.contains("close") => true,
        Some(c) if c.contains("keep-alive") => false,
        _ => version == "HTTP/1.0",
    };
    let request = Request {
        method,
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        at: Instant::now(),
    };
    Some((request, close))
}

/// A chunked body, trailers skipped.
fn read_chunked(reader: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let size = read_line(reader)?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            while !read_line(reader)?.is_empty() {}
            return Some(body);
        }
        if body.len() + size > MAX_BODY {
            return None;
        }
        let at = body.len();
        body.resize(at + size, 0);
        reader.read_exact(&mut body[at..]).ok()?;
        read_line(reader)?;
    }
}

/// The whole HTTP response to `request`.
fn answer(request: &Request, shared: &Shared) -> Vec<u8> {
    let id = shared.ids.fetch_add(1, Ordering::SeqCst);
    let path = request.path.split('?').next().unwrap_or("");
    if request.method == "HEAD" {
        return response(200, "text/plain", id, b"", false);
    }
    if request.method == "POST" && path == "/v1/messages/count_tokens" {
        let n = estimate_tokens(request);
        let body = json!({"input_tokens": n}).to_string();
        return response(200, "application/json", id, body.as_bytes(), false);
    }
    let Some(wire) = request.wire() else {
        let body = json!({"type": "error", "error": {"type": "not_found_error",
            "message": format!("no {} {} here", request.method, path)}});
        return response(
            404,
            "application/json",
            id,
            body.to_string().as_bytes(),
            false,
        );
    };
    let reply = if request.is_side_request() {
        Reply::Text(side_answer(&request.body["output_config"]["format"]["schema"]).to_string())
    } else {
        (shared.script)(request)
    };
    match (reply, wire) {
        (Reply::Error(status), wire) => {
            let body = error_body(status, wire, id);
            response(
                status,
                "application/json",
                id,
                body.to_string().as_bytes(),
                false,
            )
        }
        (reply, Wire::Anthropic) => {
            let body = anthropic_stream(request, &reply, id);
            response(200, "text/event-stream", id, body.as_bytes(), true)
        }
        (reply, Wire::OpenAi) => {
            let body = openai_stream(request, &reply, id);
            response(200, "text/event-stream", id, body.as_bytes(), true)
        }
    }
}

/// The body of the error `status` as the service of `wire` words it.
fn error_body(status: u16, wire: Wire, id: u64) -> Value {
    match wire {
        Wire::Anthropic => {
            let (kind, message) = match status {
                400 => ("invalid_request_error", "invalid request"),
                401 => ("authentication_error", "invalid x-api-key"),
                403 => ("permission_error", "permission denied"),
                404 => ("not_found_error", "not found"),
                429 => ("rate_limit_error", "rate limited"),
                529 => ("overloaded_error", "Overloaded"),
                _ => ("api_error", "Internal server error"),
            };
            json!({"type": "error", "error": {"type": kind, "message": message},
                "request_id": format!("req_{id}")})
        }
        Wire::OpenAi => {
            let (kind, code, message) = match status {
                401 => (
                    "invalid_request_error",
                    json!("invalid_api_key"),
                    "Incorrect API key provided",
                ),
                429 => (
                    "requests",
                    json!("rate_limit_exceeded"),
                    "Rate limit reached",
                ),
                400..=499 => ("invalid_request_error", Value::Null, "invalid request"),
                _ => (
                    "server_error",
                    Value::Null,
                    "The server had an error while processing your request",
                ),
            };
            json!({"error": {"message": message, "type": kind, "param": null,
                "code": code}})
        }
    }
}

/// A response with a length, kept alive.
fn response(status: u16, content_type: &str, id: u64, body: &[u8], stream: bool) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        529 => "Overloaded",
        _ => "Internal Server Error",
    };
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: keep-alive\r\nrequest-id: req_{id}\r\n\
         x-request-id: req_{id}\r\n",
        body.len()
    );
    if stream {
        head.push_str("Cache-Control: no-cache\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    out
}

/// A rough count of the request's tokens: its body's bytes over four.
fn estimate_tokens(request: &Request) -> u64 {
    (request.body.to_string().len() / 4).max(1) as u64
}

/// An object for claude's structured side request: each required string
/// property (its session `title`) "Scripted session".
fn side_answer(schema: &Value) -> Value {
    let mut out = Map::new();
    for name in schema["required"].as_array().into_iter().flatten() {
        if let Some(n) = name.as_str() {
            out.insert(n.into(), json!("Scripted session"));
        }
    }
    Value::Object(out)
}

/// One server-sent event.
fn event(out: &mut String, name: &str, data: &Value) {
    out.push_str("event: ");
    out.push_str(name);
    out.push_str("\ndata: ");
    out.push_str(&data.to_string());
    out.push_str("\n\n");
}

/// A Messages API stream for `reply` (text or a tool call), ids unique per
/// server: claude joins assistant messages that share an id.
fn anthropic_stream(request: &Request, reply: &Reply, id: u64) -> String {
    let (text, call) = reply.streamed();
    let mut out = String::new();
    let input = estimate_tokens(request);
    event(
        &mut out,
        "message_start",
        &json!({"type": "message_start", "message": {"id": format!("msg_scripted_{id}"),
            "type": "message", "role": "assistant", "model": request.model().unwrap_or(""),
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input, "output_tokens": 1}}}),
    );
    let mut index = 0;
    if !text.is_empty() || call.is_none() {
        event(
            &mut out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "text", "text": ""}}),
        );
        event(
            &mut out,
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "text_delta", "text": text}}),
        );
        event(
            &mut out,
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        );
        index += 1;
    }
    if let Some((name, arguments)) = call {
        event(
            &mut out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "tool_use", "id": format!("toolu_scripted_{id}"),
                    "name": name, "input": {}}}),
        );
        let args = arguments.to_string();
        let (a, b) = args.split_at(split_point(&args));
        for part in [a, b] {
            event(
                &mut out,
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": part}}),
            );
        }
        event(
            &mut out,
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        );
    }
    let stop = if call.is_some() {
        "tool_use"
    } else {
        "end_turn"
    };
    event(
        &mut out,
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": 5}}),
    );
    event(&mut out, "message_stop", &json!({"type": "message_stop"}));
    out
}

/// Where to cut `s` in two, on a character boundary: arguments arrive in
/// pieces, as from the real API.
fn split_point(s: &str) -> usize {
    let mut i = s.len() / 2;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// A Responses API stream for `reply`: a message item with its text, then
/// a function call item (with `namespace` when the name is `NAMESPACE__TOOL`
/// of an offered namespace), then `response.completed` with usage.
fn openai_stream(request: &Request, reply: &Reply, id: u64) -> String {
    let (text, call) = reply.streamed();
    let response_id = format!("resp_scripted_{id}");
    let mut out = String::new();
    event(
        &mut out,
        "response.created",
        &json!({"type": "response.created", "response": {"id": response_id,
            "object": "response", "status": "in_progress", "output": []}}),
    );
    let mut output = Vec::new();
    if !text.is_empty() || call.is_none() {
        let item_id = format!("msg_scripted_{id}");
        let index = output.len();
        event(
            &mut out,
            "response.output_item.added",
            &json!({"type": "response.output_item.added", "output_index": index,
                "item": {"type": "message", "id": item_id, "role": "assistant",
                    "status": "in_progress", "content": []}}),
        );
        event(
            &mut out,
            "response.output_text.delta",
            &json!({"type": "response.output_text.delta", "output_index": index,
                "item_id": item_id, "content_index": 0, "delta": text}),
        );
        let done = json!({"type": "message", "id": item_id, "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]});
        event(
            &mut out,
            "response.output_item.done",
            &json!({"type": "response.output_item.done", "output_index": index, "item": done}),
        );
        output.push(done);
    }
    if let Some((name, arguments)) = call {
        let item_id = format!("fc_scripted_{id}");
        let index = output.len();
        let mut item = json!({"type": "function_call", "id": item_id,
            "call_id": format!("call_scripted_{id}"), "name": name, "arguments": "",
            "status": "in_progress"});
        let namespace = request
            .body
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|t| t["type"] == "namespace")
            .filter_map(|t| t["name"].as_str())
            .filter(|ns| name.len() > ns.len() + 2 && name.starts_with(&format!("{ns}__")))
            .max_by_key(|ns| ns.len());
        if let Some(ns) = namespace {
            item["name"] = json!(name[ns.len() + 2..]);
            item["namespace"] = json!(ns);
        }
        event(
            &mut out,
            "response.output_item.added",
            &json!({"type": "response.output_item.added", "output_index": index,
                "item": item}),
        );
        let args = arguments.to_string();
        let (a, b) = args.split_at(split_point(&args));
        for part in [a, b] {
            event(
                &mut out,
                "response.function_call_arguments.delta",
                &json!({"type": "response.function_call_arguments.delta",
                    "output_index": index, "item_id": item_id, "delta": part}),
            );
        }
        event(
            &mut out,
            "response.function_call_arguments.done",
            &json!({"type": "response.function_call_arguments.done", "output_index": index,
                "item_id": item_id, "arguments": args}),
        );
        item["arguments"] = json!(args);
        item["status"] = json!("completed");
        event(
            &mut out,
            "response.output_item.done",
            &json!({"type": "response.output_item.done", "output_index": index,
                "item": item}),
        );
        output.push(item);
    }
    let input = estimate_tokens(request);
    event(
        &mut out,
        "response.completed",
        &json!({"type": "response.completed", "response": {"id": response_id,
            "object": "response", "status": "completed", "output": output,
            "usage": {"input_tokens": input, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input + 5}}}),
    );
    out
}

/// A bare HTTP/1.1 client for the server's own tests: sends `raw` on
/// `stream` and reads one response with a length; its status, headers
/// (names in lower case) and body.
fn exchange(stream: &mut BufReader<TcpStream>, raw: &[u8]) -> (u16, Vec<(String, String)>, String) {
    stream.get_mut().write_all(raw).unwrap();
    let mut line = String::new();
    stream.read_line(&mut line).unwrap();
    let status = line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        stream.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').unwrap();
        headers.push((k.to_ascii_lowercase(), v.trim().to_string()));
    }
    let n: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; n];
    stream.read_exact(&mut body).unwrap();
    (status, headers, String::from_utf8(body).unwrap())
}

/// The `data` of each server-sent event, in order, with its event name.
fn events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap_or("");
            let data = e
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap_or("null");
            (name.to_string(), serde_json::from_str(data).unwrap())
        })
        .collect()
}

fn connect(model: &Model) -> BufReader<TcpStream> {
    let s = TcpStream::connect(("127.0.0.1", model.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    BufReader::new(s)
}

fn post(path: &str, body: &Value, extra: &str) -> Vec<u8> {
    let body = body.to_string();
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The script the server's own tests use: a call of `mcp__ocx__ocx_post`
/// when asked to post, the tool's answer quoted after it, an error status
/// when asked for one, else the text echoed.
fn echo_script(r: &Request) -> Reply {
    if let Some(result) = r.new_tool_results().last() {
        return Reply::text(format!("tool said: {}", result.text));
    }
    let text = r.last_user_text().unwrap_or_default();
    match text.strip_prefix("status ") {
        Some(s) => Reply::Error(s.parse().unwrap()),
        None if text.starts_with("post ") => Reply::tool_after(
            "Posting.",
            "mcp__ocx__ocx_post",
            json!({"text": &text[5..]}),
        ),
        None => Reply::text(format!("echo: {text}")),
    }
}

#[test]
fn messages_api_streams_text_then_a_tool_call_and_reads_the_tool_result_back() {
    let model = Model::start(echo_script);
    let mut c = connect(&model);
    let (status, headers, _) = exchange(&mut c, b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, 200);
    assert!(
        headers
            .iter()
            .any(|(k, v)| k == "content-length" && v == "0")
    );

    let first = json!({"model": "claude-test", "stream": true, "max_tokens": 100,
        "tools": [{"name": "mcp__ocx__ocx_post", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>\ncontext\n</system-reminder>"},
            {"type": "text", "text": "post héllo"}]}]});
    let (status, headers, body) = exchange(
        &mut c,
        &post("/v1/messages?beta=true", &first, "x-api-key: sk-one\r\n"),
    );
    assert_eq!(status, 200);
    assert!(
        headers
            .iter()
            .any(|(k, v)| k == "content-type" && v == "text/event-stream")
    );
    let ev = events(&body);
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for (name, data) in &ev {
        assert_eq!(data["type"], name.as_str(), "each event names itself");
    }
    assert_eq!(
        ev[2].1["delta"],
        json!({"type": "text_delta", "text": "Posting."})
    );
    assert_eq!(ev[4].1["content_block"]["name"], "mcp__ocx__ocx_post");
    let args: String = [&ev[5].1, &ev[6].1]
        .iter()
        .map(|d| d["delta"]["partial_json"].as_str().unwrap())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap(),
        json!({"text": "héllo"})
    );
    assert_eq!(ev[8].1["delta"]["stop_reason"], "tool_use");
    assert!(ev[8].1["usage"]["output_tokens"].is_u64());
    let tool_id = ev[4].1["content_block"]["id"].as_str().unwrap().to_string();

    // The tool's answer comes back in the user message that also holds the
    // next text, as claude sends it; the text is newer.
    let second = json!({"model": "claude-test", "stream": true, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "post héllo"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": tool_id,
            "name": "mcp__ocx__ocx_post", "input": {"text": "héllo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id,
            "content": [{"type": "text", "text": "posted"}]}]}]});
    let chunked = second.to_string();
    let (a, b) = chunked.split_at(10);
    let raw = format!(
        "POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
         {:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    );
    let (status, _, body) = exchange(&mut c, raw.as_bytes());
    assert_eq!(status, 200);
    let ev = events(&body);
    assert_eq!(
        ev[2].1["delta"]["text"], "tool said: posted",
        "a chunked body on the same connection is read whole"
    );
    assert_eq!(ev[ev.len() - 2].1["delta"]["stop_reason"], "end_turn");
    assert_ne!(
        events(&exchange(&mut c, &post("/v1/messages", &first, "")).2)[0].1["message"]["id"],
        ev[0].1["message"]["id"],
        "every message has an id of its own"
    );

    let kept = model.conversation();
    assert_eq!(kept.len(), 3);
    assert_eq!(kept[0].header("X-Api-Key"), Some("sk-one"));
    assert_eq!(kept[0].model(), Some("claude-test"));
    assert_eq!(kept[0].tools(), ["mcp__ocx__ocx_post"]);
    assert_eq!(kept[0].last_user_text().as_deref(), Some("post héllo"));
    assert!(kept[0].new_tool_results().is_empty());
    assert_eq!(
        kept[1].new_tool_results(),
        [ToolResult {
            id: tool_id,
            text: "posted".into(),
            is_error: false
        }]
    );
    assert!(kept[0].at <= kept[1].at);
    assert_eq!(model.requests().len(), 4, "the HEAD is kept too");
}

#[test]
fn responses_api_streams_a_namespaced_call_and_reads_its_output_back() {
    let model = Model::start(echo_script);
    let mut c = connect(&model);
    let tools = json!([{"type": "function", "name": "exec_command", "parameters": {}},
        {"type": "namespace", "name": "mcp__ocx", "tools": [
            {"type": "function", "name": "ocx_post", "parameters": {}}]},
        {"type": "namespace", "name": "mcp__ocx_node", "tools": [
            {"type": "function", "name": "ocx_post", "parameters": {}}]},
        {"type": "web_search"}]);
    let first = json!({"model": "gpt-test", "stream": true, "tools": tools, "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "be brief"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text",
            "text": "<environment_context>\n</environment_context>"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "post hi"}]}]});
    let (status, _, body) = exchange(
        &mut c,
        &post("/v1/responses", &first, "Authorization: Bearer sk-two\r\n"),
    );
    assert_eq!(status, 200);
    let ev = events(&body);
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.output_item.added",
            "response.output_text.delta",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let call = &ev[8].1["item"];
    assert_eq!(call["name"], "ocx_post");
    assert_eq!(
        call["namespace"], "mcp__ocx",
        "the longest matching namespace"
    );
    assert_eq!(call["arguments"], r#"{"text":"hi"}"#);
    let completed = &ev[9].1["response"];
    assert_eq!(completed["output"].as_array().unwrap().len(), 2);
    assert!(completed["usage"]["total_tokens"].is_u64());

    let second = json!({"model": "gpt-test", "stream": true, "tools": tools, "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "post hi"}]},
        call,
        {"type": "function_call_output", "call_id": call["call_id"], "output": [
            {"type": "input_text", "text": "Wall time: 0.1 seconds\nOutput:"},
            {"type": "input_text", "text": "posted"}]}]});
    let (_, _, body) = exchange(&mut c, &post("/v1/responses", &second, ""));
    let ev = events(&body);
    assert_eq!(
        ev[2].1["delta"],
        "tool said: Wall time: 0.1 seconds\nOutput:\nposted"
    );

    let kept = model.conversation();
    assert_eq!(kept[0].header("authorization"), Some("Bearer sk-two"));
    assert_eq!(
        kept[0].tools(),
        [
            "exec_command",
            "mcp__ocx__ocx_post",
            "mcp__ocx_node__ocx_post",
            "web_search"
        ]
    );
    assert_eq!(kept[0].last_user_text().as_deref(), Some("post hi"));
    assert_eq!(kept[1].tool_results().len(), 1);
    assert!(kept[0].contains("be brief"));
}

#[test]
fn errors_come_in_each_apis_own_shape_and_other_paths_are_not_found() {
    let model = Model::start(echo_script);
    let mut c = connect(&model);
    let ask = |text: &str| {
        json!({"model": "m", "messages": [{"role": "user", "content": text}],
            "input": [{"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": text}]}]})
    };
    let (status, _, body) = exchange(&mut c, &post("/v1/messages", &ask("status 401"), ""));
    assert_eq!(status, 401);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "authentication_error");
    let (status, _, body) = exchange(&mut c, &post("/v1/responses", &ask("status 401"), ""));
    assert_eq!(status, 401);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["code"], "invalid_api_key");
    for (path, status, kind) in [
        ("/v1/messages", 429, "rate_limit_error"),
        ("/v1/messages", 500, "api_error"),
        ("/v1/messages", 529, "overloaded_error"),
    ] {
        let (got, _, body) = exchange(&mut c, &post(path, &ask(&format!("status {status}")), ""));
        assert_eq!(got, status);
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap()["error"]["type"],
            kind
        );
    }
    let (status, _, body) = exchange(&mut c, &post("/v1/responses", &ask("status 429"), ""));
    assert_eq!(status, 429);
    assert!(body.contains("rate_limit_exceeded"));
    let (status, _, body) = exchange(&mut c, &post("/v1/responses", &ask("status 500"), ""));
    assert_eq!(status, 500);
    assert!(body.contains("server_error"));
    let (status, _, _) = exchange(&mut c, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, 404);
    let (status, _, body) = exchange(
        &mut c,
        &post("/v1/messages/count_tokens", &ask("count me"), ""),
    );
    assert_eq!(status, 200);
    assert!(
        serde_json::from_str::<Value>(&body).unwrap()["input_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    let title = json!({"model": "m", "messages": [{"role": "user", "content": "name it"}],
        "output_config": {"format": {"type": "json_schema", "schema": {"type": "object",
            "properties": {"title": {"type": "string"}}, "required": ["title"]}}}});
    let (_, _, body) = exchange(&mut c, &post("/v1/messages", &title, ""));
    let text = events(&body)[2].1["delta"]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"title": "Scripted session"}),
        "claude's title request is answered without the script"
    );
    assert_eq!(model.conversation().len(), 7);
}

#[test]
fn many_connections_at_once_each_get_their_own_answer_and_dropping_stops_it() {
    let model = Model::start(echo_script);
    let url = model.url();
    let port = model.port;
    let answers: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let model = &model;
                s.spawn(move || {
                    let mut c = connect(model);
                    let body = json!({"model": "m",
                        "messages": [{"role": "user", "content": format!("n{i}")}]});
                    let (_, _, sse) = exchange(&mut c, &post("/v1/messages", &body, ""));
                    events(&sse)[2].1["delta"]["text"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, a) in answers.iter().enumerate() {
        assert_eq!(a, &format!("echo: n{i}"));
    }
    assert_eq!(model.conversation().len(), 16);
    let mut idle = connect(&model);
    drop(model);
    let mut buf = [0; 1];
    assert_eq!(
        idle.get_mut().read(&mut buf).unwrap_or(0),
        0,
        "an idle kept-alive connection is closed"
    );
    assert!(
        TcpStream::connect_timeout(
            &format!("127.0.0.1:{port}").parse().unwrap(),
            Duration::from_secs(1)
        )
        .is_err(),
        "{url} no longer listens"
    );
}
