//! MCP as a real client sees it: the Python `mcp` SDK over stdio and over
//! streamable HTTP, and the HTTP server's rules checked with plain requests.

use crate::support::{Repo, ocx_bin};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The client: lists the tools, calls a reading tool twice, a writing
/// tool's dry run and a call with an unknown field, printing one JSON line
/// per answer.
const CLIENT: &str = r#"
import asyncio, json, sys
from mcp import ClientSession
from mcp.client.stdio import stdio_client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
import os

def show(label, res):
    print(json.dumps({"label": label, "is_error": bool(res.is_error),
                      "text": res.content[0].text if res.content else "",
                      "structured": res.structured_content}), flush=True)

async def session(s, thread):
    await s.initialize()
    tools = await s.list_tools()
    print(json.dumps({"label": "tools", "names": [t.name for t in tools.tools],
                      "post": [t.model_dump(mode="json", by_alias=True) for t in tools.tools if t.name == "ocx_post"][0]}), flush=True)
    show("status", await s.call_tool("ocx_status", {}))
    show("thread", await s.call_tool("ocx_thread", {"of": thread}))
    show("dry_post", await s.call_tool("ocx_post", {"title": "Dry", "text": "nothing", "dry_run": True}))
    show("unknown", await s.call_tool("ocx_status", {"zz": 1}))
    show("nul", await s.call_tool("ocx_post", {"title": "t", "text": "a\u0000b", "dry_run": True}))
    show("again", await s.call_tool("ocx_status", {}))

async def main():
    mode, target, thread = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "stdio":
        params = StdioServerParameters(command=target, args=sys.argv[4:])
        async with stdio_client(params) as (r, w):
            async with ClientSession(r, w) as s:
                await session(s, thread)
    else:
        auth = {"Authorization": "Bearer " + os.environ["OCX_TOKEN"]}
        async with streamable_http_client(target, http_client=create_mcp_http_client(headers=auth)) as streams:
            async with ClientSession(streams[0], streams[1]) as s:
                await session(s, thread)

asyncio.run(main())
"#;

/// Fails, never skips, when the Python SDK is missing.
fn python_with_mcp() {
    let out = Command::new("python3")
        .args(["-c", "import mcp"])
        .output()
        .expect("python3 must be installed (scripts/setup.sh)");
    assert!(
        out.status.success(),
        "the Python mcp SDK must be installed (scripts/setup.sh): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the client with `args`; answers its lines by label.
fn run_client(args: &[&str]) -> Vec<Value> {
    run_client_with(args, &[])
}

/// Runs the client with `args`, and `env` set for it.
pub fn run_client_with(args: &[&str], env: &[(&str, &str)]) -> Vec<Value> {
    python_with_mcp();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("client.py");
    std::fs::write(&script, CLIENT).unwrap();
    crate::support::client_lines(
        Command::new("python3")
            .arg(&script)
            .args(args)
            .envs(env.iter().copied())
            .env_remove("FOSSIL_USER"),
    )
}

fn by_label<'a>(lines: &'a [Value], label: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["label"] == label)
        .unwrap_or_else(|| panic!("no {label} in {lines:#?}"))
}

/// A repository with one thread, and the thread's hash.
fn repo_with_thread() -> (Repo, String) {
    let repo = Repo::new();
    let thread = repo
        .json(&[
            "--user", "admin", "post", "--title", "Hello", "--text", "first",
        ])
        .ok_str("hash");
    (repo, thread)
}

fn check_session(lines: &[Value], repo: &Repo, before: &[String], thread: &str) {
    let tools = by_label(lines, "tools");
    let names: Vec<&str> = tools["names"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for t in ocx::registry::TOOLS {
        let everywhere = matches!(
            t.reach(),
            ocx::tool::Reach::Everywhere | ocx::tool::Reach::NotPage
        );
        assert_eq!(
            names.contains(&format!("ocx_{}", t.name()).as_str()),
            everywhere,
            "{} offered over MCP exactly when offered everywhere: {names:?}",
            t.name()
        );
    }
    let post = &tools["post"];
    assert_eq!(post["annotations"]["readOnlyHint"], false, "{post:#}");
    assert!(post["inputSchema"]["properties"]["text"].is_object());
    assert!(post["outputSchema"]["properties"]["result"].is_object());

    let status = by_label(lines, "status");
    assert_eq!(status["is_error"], false, "{status:#}");
    assert_eq!(status["structured"]["result"]["login"], "admin");
    assert!(status["text"].as_str().unwrap().starts_with("login: admin"));

    let t = by_label(lines, "thread");
    assert_eq!(t["is_error"], false, "{t:#}");
    assert!(t["text"].as_str().unwrap().contains("first"), "{t:#}");
    assert!(t["structured"]["result"].to_string().contains(thread));

    let dry = by_label(lines, "dry_post");
    assert_eq!(dry["is_error"], false, "{dry:#}");
    assert_eq!(dry["structured"]["dry_run"], true);
    assert_eq!(repo.hashes(), before, "a dry run wrote nothing");

    let unknown = by_label(lines, "unknown");
    assert_eq!(unknown["is_error"], true, "{unknown:#}");
    assert_eq!(unknown["structured"]["stopped"]["field"], "zz");
    assert!(unknown["text"].as_str().unwrap().starts_with("stopped: zz"));

    let nul = by_label(lines, "nul");
    assert_eq!(nul["is_error"], true, "{nul:#}");
    assert_eq!(nul["structured"]["stopped"]["field"], "text");

    assert_eq!(by_label(lines, "again")["is_error"], false);
}

#[test]
fn a_real_client_over_stdio_lists_calls_and_is_refused_by_field() {
    let (repo, thread) = repo_with_thread();
    let before = repo.hashes();
    let file = repo.file.to_str().unwrap();
    let lines = run_client(&[
        "stdio",
        ocx_bin().to_str().unwrap(),
        &thread,
        "--mcp",
        "--repository",
        file,
        "--user",
        "admin",
    ]);
    check_session(&lines, &repo, &before, &thread);
}

/// An `ocx --mcp-http 127.0.0.1:0` server, the address it serves, and
/// the bearer token it made in its token file.
pub struct Http {
    child: Child,
    pub addr: String,
    pub token: String,
    pub token_file: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Http {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(repo: &Repo) -> Http {
    serve_as(repo, &["--user", "admin"])
}

/// Serves `repo` over HTTP with `args`, its token kept in a file of a
/// fresh directory; answers once it said where it serves and the file.
pub fn serve_as(repo: &Repo, args: &[&str]) -> Http {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("tokens").join("mcp.json");
    let mut child = Command::new(ocx_bin())
        .args(["--mcp-http", "127.0.0.1:0"])
        .args(args)
        .arg("--token-file")
        .arg(&token_file)
        .arg("--repository")
        .arg(&repo.file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let (mut line, mut second) = (String::new(), String::new());
    err.read_line(&mut line).unwrap();
    err.read_line(&mut second).unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.strip_suffix("/mcp\n"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    assert!(
        second.contains(token_file.to_str().unwrap()),
        "the token's file is not named: {second:?}"
    );
    let kept: Value = serde_json::from_slice(&std::fs::read(&token_file).unwrap()).unwrap();
    let token = kept["token"].as_str().unwrap().to_string();
    Http {
        child,
        addr,
        token,
        token_file,
        _dir: dir,
    }
}

#[test]
fn a_real_client_over_http_lists_calls_and_is_refused_by_field() {
    let (repo, thread) = repo_with_thread();
    let before = repo.hashes();
    let http = serve(&repo);
    let url = format!("http://{}/mcp", http.addr);
    let lines = run_client_with(&["http", &url, &thread], &[("OCX_TOKEN", &http.token)]);
    check_session(&lines, &repo, &before, &thread);
}

/// Sends one raw HTTP request; answers the status code.
pub fn status_of(addr: &str, request: &[u8]) -> u16 {
    let text = response_of(addr, request, 12);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"))
}

/// Sends one raw HTTP request; answers the response, read to its end or
/// at least `enough` bytes of it.
pub fn response_of(addr: &str, request: &[u8], enough: usize) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = s.write_all(request);
    let mut buf = [0u8; 4096];
    let mut got = Vec::new();
    while got.len() < enough {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// A POST of `body` to `/mcp` naming `host`, bearing `token` when given.
pub fn post_with(host: &str, token: Option<&str>, body: &[u8]) -> Vec<u8> {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let mut r = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

#[test]
fn http_serves_loopback_alone_by_its_rules() {
    let repo = Repo::new();
    let http = serve(&repo);
    let a = http.addr.as_str();
    let post = |host: &str, body: &[u8]| post_with(host, Some(&http.token), body);
    let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(status_of(a, &post(a, note)), 202, "a notification");
    assert_eq!(
        status_of(a, &post("evil.example", note)),
        403,
        "a foreign Host"
    );
    assert_eq!(
        status_of(a, &post("10.1.2.3:80", note)),
        403,
        "a non-loopback Host"
    );
    let bearer = format!("Authorization: Bearer {}\r\n", http.token);
    for method in ["GET", "PUT", "DELETE"] {
        let r = format!("{method} /mcp HTTP/1.1\r\nHost: {a}\r\n{bearer}Connection: close\r\n\r\n");
        assert_eq!(status_of(a, r.as_bytes()), 405, "{method}");
    }
    let r = format!("GET /other HTTP/1.1\r\nHost: {a}\r\n{bearer}Connection: close\r\n\r\n");
    assert_eq!(status_of(a, r.as_bytes()), 404);
    let r = post(a, &vec![b' '; 10 * 1024 * 1024 + 1]);
    assert_eq!(status_of(a, &r), 413, "a body over 10 MiB");
    let init = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    assert_eq!(status_of(a, &post(a, init)), 200, "still serving");
    let mut call = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ocx_post","arguments":{"title":"ok","text":"a"#.to_vec();
    call.extend_from_slice(b"\xff");
    call.extend_from_slice(br#"b","dry_run":true}}}"#);
    let answer = response_of(a, &post(a, &call), usize::MAX);
    assert!(
        answer.contains(r#""field":"text""#),
        "bytes not UTF-8 refused by field: {answer}"
    );
    let call = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ocx_post","arguments":{"title":"\ud800","text":"x","dry_run":true}}}"#;
    let answer = response_of(a, &post(a, call), usize::MAX);
    assert!(
        answer.contains(r#""field":"title""#),
        "a lone surrogate refused by field: {answer}"
    );
}

/// Under the name `ocx-mcp`, raw JSON-RPC lines on stdin: text that is not
/// UTF-8 (raw bytes, a lone surrogate escape) refused naming its field,
/// and the next call still answered.
#[test]
fn stdio_under_its_own_name_refuses_text_that_is_not_utf8_by_field() {
    let repo = Repo::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("ocx-mcp");
    std::os::unix::fs::symlink(ocx_bin(), &exe).unwrap();
    let mut input = Vec::new();
    input.extend_from_slice(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#);
    input.extend_from_slice(b"\n");
    input.extend_from_slice(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    input.extend_from_slice(b"\n");
    input.extend_from_slice(br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ocx_post","arguments":{"title":"\ud800","text":"x","dry_run":true}}}"#);
    input.extend_from_slice(b"\n");
    input.extend_from_slice(br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ocx_post","arguments":{"title":"t","text":"a"#);
    input.extend_from_slice(b"\xff");
    input.extend_from_slice(br#"","dry_run":true}}}"#);
    input.extend_from_slice(b"\n");
    input.extend_from_slice(br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"ocx_status","arguments":{}}}"#);
    input.extend_from_slice(b"\n");
    let mut child = crate::support::piped(
        Command::new(&exe)
            .args(["--user", "admin", "--repository"])
            .arg(&repo.file),
    );
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&input).unwrap();
    let mut answers: Vec<Value> = Vec::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    while answers.len() < 4 {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        answers.push(serde_json::from_str(&line).unwrap());
    }
    drop(stdin);
    let _ = child.wait();
    let by_id = |id: i64| {
        answers
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("no answer {id} in {answers:#?}"))
    };
    let field = |id: i64| by_id(id)["result"]["structuredContent"]["stopped"]["field"].clone();
    assert_eq!(by_id(2)["result"]["isError"], true);
    assert_eq!(field(2), "title");
    assert_eq!(field(3), "text");
    assert_eq!(by_id(4)["result"]["isError"], false);
}

#[test]
fn http_off_loopback_is_refused_at_start() {
    let repo = Repo::new();
    for addr in ["0.0.0.0:0", "192.0.2.1:8080", "example.org:80"] {
        let out = Command::new(ocx_bin())
            .args(["--mcp-http", addr, "--repository"])
            .arg(&repo.file)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{addr}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("not a loopback address"), "{err}");
    }
}

/// The agent's tools through the real client, in a checkout: each answer's
/// structured content is checked by the client against its output schema.
const AGENT_CLIENT: &str = r#"
import asyncio, json, sys
from mcp import ClientSession
from mcp.client.stdio import stdio_client, StdioServerParameters

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=["--mcp", "--user", "admin"], cwd=sys.argv[2])
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            await s.list_tools()
            calls = [
                ("ocx_edit", {"path": "a.txt", "old": "", "new": "one\ntwo\n"}),
                ("ocx_context", {}),
                ("ocx_find", {"text": "two"}),
                ("ocx_read", {"path": "a.txt"}),
                ("ocx_edit", {"path": "a.txt", "old": "tow", "new": "2"}),
                ("ocx_test", {}),
                ("ocx_save", {"title": "t", "intent": "i", "expression": "e", "demonstrates": "d"}),
            ]
            for name, args in calls:
                res = await s.call_tool(name, args)
                print(json.dumps({"tool": name, "is_error": bool(res.is_error),
                                  "structured": res.structured_content}), flush=True)

asyncio.run(main())
"#;

#[test]
fn the_agent_tools_answer_a_real_client_as_their_schemas_say() {
    python_with_mcp();
    let repo = Repo::new();
    let dir = tempfile::tempdir().unwrap();
    let co = dir.path().join("co");
    std::fs::create_dir(&co).unwrap();
    let out = Command::new(crate::support::fossil())
        .args(["open", "--nosync"])
        .arg(&repo.file)
        .current_dir(&co)
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::write(
        co.join("ocx-tests.json"),
        r#"{"tests": [{"name": "two", "command": "grep two a.txt"}]}"#,
    )
    .unwrap();
    let script = dir.path().join("agent.py");
    std::fs::write(&script, AGENT_CLIENT).unwrap();
    let answers =
        crate::support::client_lines(Command::new("python3").arg(&script).arg(ocx_bin()).arg(&co));
    let errors: Vec<bool> = answers
        .iter()
        .map(|a| a["is_error"].as_bool().unwrap())
        .collect();
    assert_eq!(
        errors,
        [false, false, false, false, true, false, false],
        "{answers:#?}"
    );
    assert_eq!(answers[2]["structured"]["result"]["matches"][0]["line"], 2);
    assert_eq!(answers[3]["structured"]["result"]["text"], "one\ntwo\n");
    let miss = &answers[4]["structured"]["stopped"];
    assert_eq!(miss["field"], "old");
    assert!(
        miss["reason"].as_str().unwrap().contains("2: two"),
        "{miss}"
    );
    assert_eq!(answers[5]["structured"]["result"]["passed"], true);
    assert!(answers[6]["structured"]["result"]["checkin"].is_string());
}

/// One stdio session, raw JSON-RPC lines: the caller's capabilities are
/// read on every call, and a repository file renamed over the one the
/// server opened is the one it reads next.
#[test]
fn a_long_lived_server_reads_its_caller_afresh_and_follows_a_replaced_repository() {
    let repo = Repo::new();
    repo.user("alice", "v");
    let mut child = crate::support::piped(
        Command::new(ocx_bin())
            .args(["--mcp", "--user", "alice", "--repository"])
            .arg(&repo.file),
    );
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut ask = |id: i64, method: &str, params: Value| -> Value {
        let message =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        stdin.write_all(format!("{message}\n").as_bytes()).unwrap();
        let answer = loop {
            let mut line = String::new();
            assert!(out.read_line(&mut line).unwrap() > 0, "the server ended");
            let answer: Value = serde_json::from_str(&line).unwrap();
            if answer["id"] == id {
                break answer["result"].clone();
            }
        };
        if method == "initialize" {
            stdin
                .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
                .unwrap();
        }
        answer
    };
    ask(
        1,
        "initialize",
        serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "t", "version": "1"}}),
    );
    let mut status = |id: i64| -> Value {
        ask(
            id,
            "tools/call",
            serde_json::json!({"name": "ocx_status", "arguments": {}}),
        )["structuredContent"]["result"]
            .clone()
    };
    assert_eq!(status(2)["capabilities"], "eghijorvz");
    repo.fossil(&["user", "capabilities", "alice", "o"]);
    let now = repo.json(&["status", "--user", "alice"]).ok();
    assert_ne!(now["capabilities"], "eghijorvz");
    assert_eq!(
        status(3)["capabilities"],
        now["capabilities"],
        "the capabilities as they are now"
    );
    let other = Repo::new();
    other.user("alice", "v");
    let code = status(4)["project_code"].clone();
    std::fs::rename(&other.file, &repo.file).unwrap();
    let now = status(5);
    assert_ne!(now["project_code"], code, "the file now there is read");
    assert_eq!(now["capabilities"], "eghijorvz");
    drop(stdin);
    let _ = child.wait();
}
