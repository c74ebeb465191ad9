//! `ocx --mcp-tunnel TUNNEL-ID`: every tool over MCP, reached through
//! OpenAI's Secure MCP Tunnel, so a remote agent (ChatGPT, Codex in the
//! cloud, the Responses API) calls OCX's tools on a host that opens no
//! port. The tunnel's key is in `OCX_TUNNEL_KEY`, never on the command
//! line. The same MCP server `--mcp-http` is serves on a loopback port of
//! its own, behind a token only this process knows; the tunnel long-polls
//! the service (`GET /v1/tunnels/ID/poll`) for commands, forwards each
//! JSON-RPC message to that server, and answers the service (`POST
//! /v1/tunnels/ID/response`) by its kind: a request's answer as
//! `jsonrpc_response`, a notification as `notify_ack`, a session's end as
//! `session_termination_response`. A command of a kind it does not know,
//! or past its `response_timeout`, is not answered. A refused poll is
//! backed off (200 ms doubling to 10 s, at least what `Retry-After`
//! says, at most a minute); an answer refused for a time is tried again;
//! a refused key ends it, saying so.

use super::{Caller, McpError};
use crate::fossil::kept::Kept;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The variable holding the tunnel's API key.
pub const KEY_VAR: &str = "OCX_TUNNEL_KEY";

/// The tunnel service, unless `--tunnel-url` names another.
pub const SERVICE: &str = "https://api.openai.com";

/// How long a poll asks the service to hold it open.
const POLL_WAIT: Duration = Duration::from_secs(30);

/// The most commands under way at once.
const IN_FLIGHT: usize = 8;

/// The first wait after a refused poll, and the longest.
const BACKOFF_FIRST: Duration = Duration::from_millis(200);
const BACKOFF_MOST: Duration = Duration::from_secs(10);

/// The longest a `Retry-After` is honoured.
const RETRY_AFTER_MOST: Duration = Duration::from_secs(60);

/// How many times an answer the service refused for a time is sent.
const ANSWER_TRIES: usize = 3;

/// The headers of an MCP answer passed back to the service.
const ANSWER_HEADERS: &[&str] = &[
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "access-control-expose-headers",
    "www-authenticate",
];

/// The headers of a command passed on to the MCP server.
const COMMAND_HEADERS: &[&str] = &["mcp-session-id", "mcp-protocol-version", "last-event-id"];

/// Whether `id` can name a tunnel: letters, digits, `_` and `-`, at most 100.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 100
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Serves MCP through tunnel `id` of the service at `service`, as
/// `caller`, with `key`; returns when the key is refused or the local
/// server cannot start.
pub(super) fn serve(
    id: &str,
    caller: Caller,
    service: &str,
    key: Option<String>,
) -> Result<(), McpError> {
    let key = key.filter(|k| !k.trim().is_empty()).ok_or_else(|| {
        McpError::Start(format!(
            "{KEY_VAR} is not set: give the tunnel's API key in it (never on the command line)"
        ))
    })?;
    if !valid_id(id) {
        return Err(McpError::Start(format!(
            "{id:?} is not a tunnel's id (letters, digits, _ and -)"
        )));
    }
    let base = url::Url::parse(service)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
        .ok_or_else(|| {
            McpError::Start(format!(
                "--tunnel-url {service:?} is not an http or https URL"
            ))
        })?;
    let base = base.as_str().trim_end_matches('/').to_string();
    let local = Local::start(caller)?;
    crate::entry::eprint(&format!(
        "ocx --mcp-tunnel: serving MCP through tunnel {id} of {base}\n"
    ));
    let tunnel = Arc::new(Tunnel {
        poll: format!("{base}/v1/tunnels/{id}/poll"),
        answer: format!("{base}/v1/tunnels/{id}/response"),
        key,
        local,
        in_flight: AtomicUsize::new(0),
    });
    tunnel.run()
}

/// The MCP server the tunnel forwards to: on loopback, its own token.
struct Local {
    url: String,
    token: String,
}

impl Local {
    /// Starts it on a port of its own, in a thread of its own.
    fn start(caller: Caller) -> Result<Local, McpError> {
        let mut bytes = [0u8; 32];
        rand::fill(&mut bytes);
        let token = hex::encode(bytes);
        let kept = Kept::new();
        {
            let cx = caller.context().keeping(kept.clone());
            cx.caller().map_err(McpError::caller_refused)?;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let app = super::http::router(caller, kept, Arc::new(token.clone()));
        std::thread::spawn(move || {
            let started = tx.clone();
            let served = super::runtime().and_then(|rt| {
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                        .await
                        .map_err(|e| McpError::Start(e.to_string()))?;
                    let addr = listener
                        .local_addr()
                        .map_err(|e| McpError::Start(e.to_string()))?;
                    let _ = started.send(Ok(addr));
                    axum::serve(listener, app)
                        .await
                        .map_err(|e| McpError::Start(e.to_string()))
                })
            });
            if let Err(e) = served {
                let _ = tx.send(Err(e));
            }
        });
        let addr = rx
            .recv()
            .map_err(|_| McpError::Start("the local MCP server ended".into()))??;
        Ok(Local {
            url: format!("http://{addr}/mcp"),
            token,
        })
    }
}

struct Tunnel {
    poll: String,
    answer: String,
    key: String,
    local: Local,
    in_flight: AtomicUsize,
}

/// What one poll came to.
enum Polled {
    Commands(Vec<Value>),
    Nothing,
    /// Refused for a time: wait at least this long.
    Later(Option<Duration>),
    /// The key is refused: the tunnel ends.
    KeyRefused(u16),
}

impl Tunnel {
    fn run(self: &Arc<Tunnel>) -> Result<(), McpError> {
        let mut backoff = BACKOFF_FIRST;
        loop {
            let free = IN_FLIGHT.saturating_sub(self.in_flight.load(Ordering::SeqCst));
            if free == 0 {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            match self.poll_once(free.min(25)) {
                Polled::Commands(commands) => {
                    backoff = BACKOFF_FIRST;
                    let received = Instant::now();
                    for c in commands {
                        self.in_flight.fetch_add(1, Ordering::SeqCst);
                        let tunnel = self.clone();
                        std::thread::spawn(move || {
                            tunnel.handle(&c, received);
                            tunnel.in_flight.fetch_sub(1, Ordering::SeqCst);
                        });
                    }
                }
                Polled::Nothing => backoff = BACKOFF_FIRST,
                Polled::Later(at_least) => {
                    let wait = jittered(backoff).max(at_least.unwrap_or_default());
                    crate::entry::eprint(&format!(
                        "ocx --mcp-tunnel: the service refused the poll for now; polling again in {} ms\n",
                        wait.as_millis()
                    ));
                    std::thread::sleep(wait);
                    backoff = (backoff * 2).min(BACKOFF_MOST);
                }
                Polled::KeyRefused(status) => {
                    return Err(McpError::Start(format!(
                        "the tunnel service refused the key in {KEY_VAR} (HTTP {status}): the tunnel has ended"
                    )));
                }
            }
        }
    }

    fn poll_once(&self, limit: usize) -> Polled {
        let agent = crate::http::agent(Some(POLL_WAIT + Duration::from_secs(5)));
        let asked = agent
            .get(&self.poll)
            .query("limit", limit.to_string())
            .query("timeout_ms", POLL_WAIT.as_millis().to_string())
            .header("Authorization", &format!("Bearer {}", self.key))
            .header("Accept", "application/json")
            .header("X-Tunnel-Client-Name", "ocx")
            .header("X-Tunnel-Client-Version", env!("CARGO_PKG_VERSION"))
            .call();
        let mut answer = match asked {
            Ok(a) => a,
            Err(_) => return Polled::Later(None),
        };
        let status = answer.status().as_u16();
        match status {
            204 => Polled::Nothing,
            200 => {
                let body: Value = answer
                    .body_mut()
                    .with_config()
                    .limit(super::MAX_BODY as u64 * 4)
                    .read_to_vec()
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .unwrap_or(Value::Null);
                match body["commands"].as_array() {
                    Some(c) if !c.is_empty() => Polled::Commands(c.clone()),
                    _ => Polled::Nothing,
                }
            }
            401 | 403 => Polled::KeyRefused(status),
            _ => Polled::Later(retry_after(&answer)),
        }
    }

    /// Forwards one command and answers it, unless it is of a kind not
    /// known, names no request, or is past its deadline.
    fn handle(&self, c: &Value, received: Instant) {
        let (Some(request_id), Some(shard)) = (c["request_id"].as_str(), c["shard_token"].as_str())
        else {
            return;
        };
        let deadline = match c["response_timeout"].as_str().map(timeout) {
            Some(Some(d)) => Some(received + d),
            _ => None,
        };
        let late = || deadline.is_some_and(|d| Instant::now() >= d);
        if late() {
            return;
        }
        let channel = c["channel"].as_str().unwrap_or("main");
        let answer = match c["command_type"].as_str() {
            Some("jsonrpc") => {
                let message = &c["jsonrpc"];
                if !message.is_object() {
                    return;
                }
                let (status, headers, body) = self.forward(message, &c["headers"], deadline);
                if message.get("id").is_some() && message.get("method").is_some() {
                    let resp = match serde_json::from_slice::<Value>(&body) {
                        Ok(v) if v.is_object() => v,
                        _ => json!({"jsonrpc": "2.0", "id": message["id"], "error": {
                            "code": -32603,
                            "message": "the MCP server gave no JSON-RPC answer",
                            "data": {"tunnel_failure": {"version": 1, "source": "upstream",
                                "upstream_response_received": status != 0}}}}),
                    };
                    json!({"request_id": request_id, "channel": channel, "resp_json": resp,
                        "resp_headers": headers, "resp_code": if status == 0 { 502 } else { status },
                        "resp_type": "jsonrpc_response"})
                } else {
                    json!({"request_id": request_id, "channel": channel,
                        "resp_code": if status == 0 { 502 } else { status }, "resp_type": "notify_ack"})
                }
            }
            Some("session_termination") => json!({"request_id": request_id, "channel": channel,
                "resp_code": 204, "resp_type": "session_termination_response"}),
            _ => return,
        };
        if late() {
            return;
        }
        self.send_answer(&answer, shard, deadline);
    }

    /// Posts `message` to the local MCP server; its status (0: none came),
    /// the headers passed back, and its body.
    fn forward(
        &self,
        message: &Value,
        headers: &Value,
        deadline: Option<Instant>,
    ) -> (u16, Value, Vec<u8>) {
        let within = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let agent = crate::http::agent(within.or(Some(Duration::from_secs(3600))));
        let mut request = agent
            .post(&self.local.url)
            .header("Authorization", &format!("Bearer {}", self.local.token))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        for (name, values) in headers.as_object().into_iter().flatten() {
            let lower = name.to_ascii_lowercase();
            if !COMMAND_HEADERS.contains(&lower.as_str()) {
                continue;
            }
            if let Some(v) = values
                .as_array()
                .and_then(|a| a.first())
                .and_then(Value::as_str)
                && !v.contains(['\r', '\n'])
            {
                request = request.header(name.as_str(), v);
            }
        }
        let mut answer = match request.send(message.to_string()) {
            Ok(a) => a,
            Err(_) => return (0, json!({}), Vec::new()),
        };
        let status = answer.status().as_u16();
        let mut passed = serde_json::Map::new();
        for (name, value) in answer.headers() {
            let lower = name.as_str().to_ascii_lowercase();
            if let (true, Ok(v)) = (ANSWER_HEADERS.contains(&lower.as_str()), value.to_str()) {
                passed.insert(canonical(&lower), json!([v]));
            }
        }
        let body = answer
            .body_mut()
            .with_config()
            .limit(super::MAX_BODY as u64 * 4)
            .read_to_vec()
            .unwrap_or_default();
        (status, Value::Object(passed), body)
    }

    /// Posts `answer` to the service, again while it is refused for a time.
    fn send_answer(&self, answer: &Value, shard: &str, deadline: Option<Instant>) {
        let agent = crate::http::agent(Some(Duration::from_secs(30)));
        let mut wait = BACKOFF_FIRST;
        for _ in 0..ANSWER_TRIES {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return;
            }
            let sent = agent
                .post(&self.answer)
                .header("Authorization", &format!("Bearer {}", self.key))
                .header("Content-Type", "application/json")
                .header("X-Tunnel-Shard-Token", shard)
                .header("X-Tunnel-Client-Name", "ocx")
                .header("X-Tunnel-Client-Version", env!("CARGO_PKG_VERSION"))
                .send(answer.to_string());
            let at_least = match sent {
                Ok(a) => match a.status().as_u16() {
                    200..=299 | 404 => return,
                    408 | 429 | 502 | 503 | 504 => retry_after(&a),
                    status => {
                        crate::entry::eprint(&format!(
                            "ocx --mcp-tunnel: the service refused the answer to {} (HTTP {status})\n",
                            answer["request_id"].as_str().unwrap_or("")
                        ));
                        return;
                    }
                },
                Err(_) => None,
            };
            std::thread::sleep(jittered(wait).max(at_least.unwrap_or_default()));
            wait = (wait * 2).min(BACKOFF_MOST);
        }
    }
}

/// A header's name as the service's examples write it (`Content-Type`).
fn canonical(lower: &str) -> String {
    match lower {
        "www-authenticate" => "WWW-Authenticate".into(),
        "last-event-id" => "Last-Event-ID".into(),
        _ => lower
            .split('-')
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("-"),
    }
}

/// `Retry-After` in seconds, at most a minute; none when absent or not a number.
fn retry_after<B>(answer: &ureq::http::Response<B>) -> Option<Duration> {
    answer
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| Duration::from_secs(s).min(RETRY_AFTER_MOST))
}

/// `d` with up to a fifth taken off at random, so many clients spread out.
fn jittered(d: Duration) -> Duration {
    use rand::Rng;
    let cut = rand::rng().random_range(0..=d.as_millis() as u64 / 5);
    d.saturating_sub(Duration::from_millis(cut))
}

/// A command's `response_timeout` (`1*DIGIT` then `ns`, `us`, `ms`, `s`,
/// `m` or `h`); none when it does not read, which means no deadline.
pub fn timeout(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() || digits.len() > 15 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "ns" => Duration::from_nanos(n),
        "us" => Duration::from_micros(n),
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.checked_mul(60)?),
        "h" => Duration::from_secs(n.checked_mul(3600)?),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_reads_as_the_service_writes_it_or_not_at_all() {
        assert_eq!(timeout("30s"), Some(Duration::from_secs(30)));
        assert_eq!(timeout("4500ms"), Some(Duration::from_millis(4500)));
        assert_eq!(timeout("0s"), Some(Duration::ZERO));
        assert_eq!(timeout("2m"), Some(Duration::from_secs(120)));
        for bad in [
            "",
            "s",
            "1.5s",
            "-1s",
            "30",
            "30 s",
            "1e3ms",
            "5d",
            "99999999999999999999h",
        ] {
            assert_eq!(timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_tunnels_id_is_letters_digits_and_dashes() {
        assert!(valid_id("tunnel_0123abc"));
        for bad in ["", "a/b", "a b", "../x", &"x".repeat(101)] {
            assert!(!valid_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn header_names_are_written_as_the_service_writes_them() {
        assert_eq!(canonical("content-type"), "Content-Type");
        assert_eq!(canonical("mcp-session-id"), "Mcp-Session-Id");
        assert_eq!(canonical("www-authenticate"), "WWW-Authenticate");
    }
}
