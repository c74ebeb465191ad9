//! `ocx --mcp-tunnel`: every tool through a Secure MCP Tunnel, against a
//! tunnel service of the tests' own on 127.0.0.1 speaking the service's
//! wire protocol: commands long-polled, each answered by its kind, a
//! command of an unknown kind or past its deadline not answered, a
//! refused poll backed off, an answer refused for a time sent again, a
//! refused key ending it, and no key refused at the start.

use crate::support::Repo;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) const KEY: &str = "tunnel-key-of-the-test";
const ID: &str = "tunnel_0123456789abcdef";

/// What the tests' tunnel service holds.
#[derive(Default)]
struct State {
    queue: VecDeque<Value>,
    /// Each answer posted: its shard token header and body, refused ones too.
    answers: Vec<(String, Value, u16)>,
    /// When each poll came.
    polls: Vec<Instant>,
    /// Polls still to refuse with 503 and `Retry-After: 1`.
    refuse_polls: usize,
    /// Answers still to refuse with 503.
    refuse_answers: usize,
    /// Whether the key is refused now.
    key_refused: bool,
}

pub(crate) struct Service {
    port: u16,
    state: Arc<Mutex<State>>,
}

impl Service {
    pub(crate) fn start() -> Service {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let s = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let s = s.clone();
                std::thread::spawn(move || serve(stream, &s));
            }
        });
        Service { port, state }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn queue(&self, commands: &[Value]) {
        self.state
            .lock()
            .unwrap()
            .queue
            .extend(commands.iter().cloned());
    }

    /// Waits until `n` answers were accepted; all of them.
    fn accepted(&self, n: usize) -> Vec<(String, Value)> {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let got: Vec<(String, Value)> = self
                .state
                .lock()
                .unwrap()
                .answers
                .iter()
                .filter(|a| a.2 == 200)
                .map(|a| (a.0.clone(), a.1.clone()))
                .collect();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < until,
                "only {} answers: {got:#?}",
                got.len()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn serve(stream: TcpStream, state: &Mutex<State>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let (method, target) = {
            let mut w = line.split_whitespace();
            (
                w.next().unwrap_or("").to_string(),
                w.next().unwrap_or("").to_string(),
            )
        };
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end().to_string();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let header = |n: &str| headers.iter().find(|h| h.0 == n).map(|h| h.1.clone());
        let len: usize = header("content-length")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let reply = |out: &mut TcpStream, status: &str, extra: &str, body: &str| {
            let _ = write!(
                out,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}\r\n{body}",
                body.len()
            );
        };
        let authorized = header("authorization").as_deref() == Some(&format!("Bearer {KEY}"));
        let path = target.split('?').next().unwrap_or("");
        if !authorized || state.lock().unwrap().key_refused {
            reply(
                &mut out,
                "401 Unauthorized",
                "",
                r#"{"error":{"message":"bad key","code":"tunnel_use_forbidden"}}"#,
            );
            continue;
        }
        if method == "GET" && path == format!("/v1/tunnels/{ID}/poll") {
            state.lock().unwrap().polls.push(Instant::now());
            if state.lock().unwrap().refuse_polls > 0 {
                state.lock().unwrap().refuse_polls -= 1;
                reply(
                    &mut out,
                    "503 Service Unavailable",
                    "Retry-After: 1\r\n",
                    "{}",
                );
                continue;
            }
            let until = Instant::now() + Duration::from_millis(300);
            let commands = loop {
                let taken: Vec<Value> = state.lock().unwrap().queue.drain(..).collect();
                if !taken.is_empty() || Instant::now() >= until {
                    break taken;
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            if commands.is_empty() {
                let _ = write!(out, "HTTP/1.1 204 No Content\r\n\r\n");
            } else {
                reply(
                    &mut out,
                    "200 OK",
                    "",
                    &json!({"commands": commands}).to_string(),
                );
            }
        } else if method == "POST" && path == format!("/v1/tunnels/{ID}/response") {
            let shard = header("x-tunnel-shard-token").unwrap_or_default();
            let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let mut st = state.lock().unwrap();
            if st.refuse_answers > 0 {
                st.refuse_answers -= 1;
                st.answers.push((shard, parsed, 503));
                drop(st);
                reply(&mut out, "503 Service Unavailable", "", "{}");
            } else {
                st.answers.push((shard, parsed, 200));
                drop(st);
                reply(&mut out, "200 OK", "", r#"{"status":"ok"}"#);
            }
        } else {
            reply(&mut out, "404 Not Found", "", "{}");
        }
    }
}

fn command(
    request: &str,
    shard: &str,
    kind: &str,
    jsonrpc: Option<Value>,
    timeout: Option<&str>,
) -> Value {
    let mut c = json!({"request_id": request, "shard_token": shard, "command_type": kind,
        "channel": "main", "created_at": "2026-12-03T00:00:00Z", "headers": {}});
    if let Some(m) = jsonrpc {
        c["jsonrpc"] = m;
    }
    if let Some(t) = timeout {
        c["response_timeout"] = json!(t);
    }
    c
}

pub(crate) fn tunnel(repo: &Repo, service: &Service, key: Option<&str>) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ocx"));
    c.args([
        "--mcp-tunnel",
        ID,
        "--tunnel-url",
        &service.url(),
        "--repository",
    ])
    .arg(&repo.file)
    .args(["--user", "admin"])
    .env_remove("OCX_TUNNEL_KEY")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    if let Some(k) = key {
        c.env("OCX_TUNNEL_KEY", k);
    }
    c.spawn().unwrap()
}

/// Waits for `child` to end within `secs`; its exit code and standard error.
fn ended(mut child: Child, secs: u64) -> (Option<i32>, String) {
    let until = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            return (status.code(), err);
        }
        if Instant::now() >= until {
            let _ = child.kill();
            panic!("ocx --mcp-tunnel did not end");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn without_its_key_the_tunnel_is_refused_naming_where_the_key_goes() {
    let repo = Repo::new();
    let service = Service::start();
    let (code, err) = ended(tunnel(&repo, &service, None), 30);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("OCX_TUNNEL_KEY is not set"), "{err}");
    assert!(
        service.state.lock().unwrap().polls.is_empty(),
        "no poll without a key"
    );
}

#[test]
fn every_tool_is_served_through_the_tunnel_each_command_answered_by_its_kind() {
    let repo = Repo::new();
    let service = Service::start();
    service.state.lock().unwrap().refuse_polls = 1;
    let child = tunnel(&repo, &service, Some(KEY));
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "tunnel-test", "version": "1"}}});
    service.queue(&[
        command("req_init", "shard-a", "jsonrpc", Some(init), Some("30s")),
        command(
            "req_note",
            "shard-b",
            "jsonrpc",
            Some(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
            None,
        ),
        command(
            "req_list",
            "shard-c",
            "jsonrpc",
            Some(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})),
            Some("30s"),
        ),
        command(
            "req_call",
            "shard-d",
            "jsonrpc",
            Some(
                json!({"jsonrpc": "2.0", "id": "call-3", "method": "tools/call",
            "params": {"name": "ocx_status", "arguments": {}}}),
            ),
            None,
        ),
        command("req_odd", "shard-e", "oauth_discovery", None, None),
        command(
            "req_late",
            "shard-f",
            "jsonrpc",
            Some(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})),
            Some("0s"),
        ),
        command("req_end", "shard-g", "session_termination", None, None),
    ]);
    let got = service.accepted(5);
    let by = |id: &str| {
        got.iter()
            .find(|(_, a)| a["request_id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no answer to {id}: {got:#?}"))
    };
    let (shard, a) = by("req_init");
    assert_eq!(shard, "shard-a");
    assert_eq!(a["resp_type"], "jsonrpc_response");
    assert_eq!(a["resp_code"], 200);
    assert_eq!(a["channel"], "main");
    assert_eq!(a["resp_json"]["id"], 1);
    assert!(a["resp_json"]["result"]["serverInfo"].is_object(), "{a:#}");
    let (shard, a) = by("req_note");
    assert_eq!(shard, "shard-b");
    assert_eq!(a["resp_type"], "notify_ack");
    assert!(a.get("resp_json").is_none(), "{a:#}");
    let (_, a) = by("req_list");
    let tools: Vec<&str> = a["resp_json"]["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        tools.contains(&"ocx_status") && tools.contains(&"ocx_post"),
        "{tools:?}"
    );
    let (_, a) = by("req_call");
    assert_eq!(a["resp_json"]["id"], "call-3");
    assert!(
        a["resp_json"]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("admin"),
        "{a:#}"
    );
    let (shard, a) = by("req_end");
    assert_eq!(shard, "shard-g");
    assert_eq!(a["resp_type"], "session_termination_response");
    assert_eq!(a["resp_code"], 204);

    // The refused first poll was tried again no sooner than it was told.
    let polls = service.state.lock().unwrap().polls.clone();
    assert!(polls.len() >= 2);
    assert!(
        polls[1] - polls[0] >= Duration::from_millis(950),
        "{:?}",
        polls[1] - polls[0]
    );

    // An answer refused for a time is sent again, the same.
    service.state.lock().unwrap().refuse_answers = 1;
    service.queue(&[command(
        "req_again",
        "shard-h",
        "jsonrpc",
        Some(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"})),
        Some("60s"),
    )]);
    let got = service.accepted(6);
    let accepted = got
        .iter()
        .find(|(_, a)| a["request_id"] == "req_again")
        .unwrap()
        .1
        .clone();
    let refused = service
        .state
        .lock()
        .unwrap()
        .answers
        .iter()
        .find(|a| a.2 == 503)
        .map(|a| a.1.clone())
        .unwrap();
    assert_eq!(refused, accepted, "the same answer, sent again");

    std::thread::sleep(Duration::from_millis(700));
    let answered: Vec<String> = service
        .state
        .lock()
        .unwrap()
        .answers
        .iter()
        .map(|a| a.1["request_id"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        !answered.iter().any(|r| r == "req_odd" || r == "req_late"),
        "{answered:?}"
    );

    // A refused key ends it, saying so.
    service.state.lock().unwrap().key_refused = true;
    let (code, err) = ended(child, 60);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("refused the key in OCX_TUNNEL_KEY (HTTP 401)"),
        "{err}"
    );
}
