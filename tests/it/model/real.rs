//! The real `claude` and `codex` programs, started directly (not through
//! OCX) against the scripted model server, each with a small MCP server in
//! python3: two messages one after the other, a tool call on the way, the
//! answers read back, refused keys, and the files of a checkout that
//! configure them.

use super::{Model, Reply, Request};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CLAUDE_INSTALL: &str = "npm install -g @anthropic-ai/claude-code@2.1.197";
const CODEX_INSTALL: &str = "npm install -g @openai/codex@0.171.0";
/// The key every program is given; the server checks it arrives.
const KEY: &str = "sk-scripted-test-key";
/// The variable codex reads the key from (its provider's `env_key`).
const KEY_VAR: &str = "OCX_TEST_MODEL_KEY";
/// How long one step of a real program may take.
const STEP: Duration = Duration::from_secs(90);

/// A stdio MCP server with one tool, `ocx_post`, answering
/// "NAME posted: TEXT"; it appends a line to LOG when it starts and one
/// JSON line per call. Arguments: NAME LOG.
const MCP_SERVER: &str = r#"
import json, sys
name, log = sys.argv[1], sys.argv[2]
def note(line):
    with open(log, "a") as f:
        f.write(line + "\n")
note(json.dumps({"server": name, "started": True}))
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if "id" not in m:
        continue
    method = m.get("method")
    if method == "initialize":
        version = m.get("params", {}).get("protocolVersion", "2025-06-18")
        result = {"protocolVersion": version, "capabilities": {"tools": {}},
                  "serverInfo": {"name": name, "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "ocx_post", "description": "Post a message",
                  "inputSchema": {"type": "object",
                                  "properties": {"text": {"type": "string"}},
                                  "required": ["text"]}}]}
    elif method == "tools/call":
        args = m.get("params", {}).get("arguments") or {}
        note(json.dumps({"server": name, "arguments": args}))
        result = {"content": [{"type": "text",
                               "text": name + " posted: " + str(args.get("text", ""))}],
                  "isError": False}
    elif method == "ping":
        result = {}
    else:
        out = {"jsonrpc": "2.0", "id": m["id"],
               "error": {"code": -32601, "message": "no such method"}}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
        continue
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": result}) + "\n")
    sys.stdout.flush()
"#;

/// `program`, which must answer `--version`; otherwise the test fails
/// saying how to install it.
fn require(program: &'static str, install: &str) -> &'static str {
    match Command::new(program).arg("--version").output() {
        Ok(o) if o.status.success() => program,
        Ok(o) => panic!(
            "`{program} --version` failed ({}): reinstall it with `{install}`",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => panic!("{program} is not installed ({e}): install it with `{install}`"),
    }
}

/// A directory of the test's own, without dots in its name (codex reads
/// dotted keys of its configuration as paths).
fn dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .rand_bytes(8)
        .tempdir()
        .unwrap()
}

/// The stand-in MCP server written into `dir`; the command and arguments
/// that start it as `name`, logging to `log`.
fn mcp_server(dir: &Path, name: &str, log: &Path) -> (String, Vec<String>) {
    require("python3", "apt-get install python3");
    let script = dir.join("mcp_server.py");
    std::fs::write(&script, MCP_SERVER).unwrap();
    (
        "python3".into(),
        vec![
            script.display().to_string(),
            name.into(),
            log.display().to_string(),
        ],
    )
}

/// The JSON lines an MCP server's log holds (none when it never started).
fn mcp_log(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A real program with one JSON object a line on stdin and stdout, read
/// with time limits; killed when dropped.
struct Program {
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Every JSON line it printed so far.
    seen: Vec<Value>,
    /// Its requests to the client (messages with both `id` and `method`),
    /// each answered with a refusal.
    asked: Vec<Value>,
    stderr: Arc<Mutex<String>>,
}

impl Program {
    fn start(name: &'static str, mut command: Command) -> Program {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{name} did not start: {e}"));
        let (tx, lines) = channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let (err, e) = (child.stderr.take().unwrap(), stderr.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut e = e.lock().unwrap();
                if e.len() < 64 * 1024 {
                    e.push_str(&line);
                    e.push('\n');
                }
            }
        });
        Program {
            name,
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
            asked: Vec::new(),
            stderr,
        }
    }

    /// Writes `v` as one line.
    fn send(&mut self, v: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line for which `pred` holds, within `within`; panics
    /// naming `what`, with what the program printed.
    fn next(&mut self, what: &str, within: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let end = Instant::now() + within;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let Ok(v) = serde_json::from_str::<Value>(&line) else {
                        continue;
                    };
                    self.seen.push(v.clone());
                    if v.get("id").is_some() && v.get("method").is_some() {
                        self.asked.push(v.clone());
                        let method = v["method"].as_str().unwrap_or("");
                        let result = if method.ends_with("requestApproval") {
                            json!({"decision": "decline"})
                        } else {
                            json!({"action": "decline"})
                        };
                        self.send(&json!({"id": v["id"], "result": result}));
                        continue;
                    }
                    if pred(&v) {
                        return v;
                    }
                }
                Err(e) => {
                    let why = match e {
                        RecvTimeoutError::Timeout => format!("not within {within:?}"),
                        RecvTimeoutError::Disconnected => "its stdout closed".into(),
                    };
                    let tail: Vec<String> = self
                        .seen
                        .iter()
                        .rev()
                        .take(15)
                        .rev()
                        .map(|v| {
                            let s = v.to_string();
                            s.chars().take(600).collect()
                        })
                        .collect();
                    panic!(
                        "{}: no {what} ({why}); it printed last:\n{}\nstderr:\n{}",
                        self.name,
                        tail.join("\n"),
                        self.stderr.lock().unwrap()
                    );
                }
            }
        }
    }

    /// Whether it is still running.
    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Closes its stdin and waits for it to end.
    fn finish(&mut self, within: Duration) -> ExitStatus {
        drop(self.stdin.take());
        let end = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < end,
                "{} still running {within:?} after its stdin closed",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The environment of a program run: nothing of the test's own but PATH.
fn clean_env(c: &mut Command, home: &Path) {
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home);
}

/// `claude -p` reading messages as stream-json on stdin, in `cwd`, with
/// HOME at `home`, the scripted server as its API and `env` added.
fn claude(model: &Model, home: &Path, cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Program {
    let mut c = Command::new(require("claude", CLAUDE_INSTALL));
    c.args([
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
    ])
    .args(args)
    .current_dir(cwd);
    clean_env(&mut c, home);
    c.env("ANTHROPIC_BASE_URL", model.url())
        .env("ANTHROPIC_API_KEY", KEY)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .envs(env.iter().copied());
    Program::start("claude", c)
}

/// One user message as claude's stream-json input takes it.
fn user_message(text: &str) -> Value {
    json!({"type": "user", "message": {"role": "user",
        "content": [{"type": "text", "text": text}]}})
}

fn is_result(v: &Value) -> bool {
    v["type"] == "result"
}

/// The script of the tool tests: "post the greeting" calls
/// `mcp__ocx__ocx_post`, "post to the node" calls the server `ocx-node`'s
/// tool under `node_tool`; a tool's answer is quoted back (its last line:
/// codex puts a "Wall time" part first); any other text is echoed.
fn posting_script(node_tool: &'static str) -> impl Fn(&Request) -> Reply + Send + Sync {
    move |r: &Request| {
        if let Some(result) = r.new_tool_results().last() {
            return Reply::text(format!(
                "done: {}",
                result.text.lines().last().unwrap_or("")
            ));
        }
        match r.last_user_text().unwrap_or_default().as_str() {
            "post the greeting" => Reply::tool_after(
                "Posting it.",
                "mcp__ocx__ocx_post",
                json!({"text": "hello from the model"}),
            ),
            "post to the node" => Reply::tool(node_tool, json!({"text": "to the node"})),
            other => Reply::text(format!("echo: {other}")),
        }
    }
}

#[test]
fn claude_answers_two_messages_in_turn_calling_an_mcp_tool_on_the_way() {
    let model = Model::start(posting_script("mcp__ocx-node__ocx_post"));
    let (home, work, tools) = (dir("ocx-home-"), dir("ocx-work-"), dir("ocx-mcp-"));
    let (log, node_log) = (tools.path().join("ocx.log"), tools.path().join("node.log"));
    let (cmd, args) = mcp_server(tools.path(), "ocx", &log);
    let (_, node_args) = mcp_server(tools.path(), "ocx-node", &node_log);
    let config = json!({"mcpServers": {"ocx": {"command": cmd, "args": args},
        "ocx-node": {"command": cmd, "args": node_args}}})
    .to_string();
    let mut claude = claude(
        &model,
        home.path(),
        work.path(),
        &[
            "--mcp-config",
            &config,
            "--strict-mcp-config",
            "--allowedTools",
            "mcp__ocx,mcp__ocx-node",
            "--tools",
            "",
        ],
        &[],
    );

    claude.send(&user_message("post the greeting"));
    let init = claude.next("init event", STEP, |v| v["subtype"] == "init");
    assert_eq!(
        init["tools"],
        json!(["mcp__ocx__ocx_post", "mcp__ocx-node__ocx_post"]),
        "--tools \"\" leaves only the MCP servers' tools"
    );
    assert!(
        init["mcp_servers"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "ocx", "status": "connected"}))
    );
    let first = claude.next("first result", STEP, is_result);
    let first_read = Instant::now();
    assert_eq!(first["subtype"], "success");
    assert_eq!(first["is_error"], false);
    assert_eq!(first["result"], "done: ocx posted: hello from the model");
    let called: Vec<&Value> = claude
        .seen
        .iter()
        .filter(|v| v["type"] == "assistant")
        .flat_map(|v| v["message"]["content"].as_array().unwrap())
        .filter(|b| b["type"] == "tool_use")
        .collect();
    assert_eq!(called.len(), 1);
    assert_eq!(called[0]["name"], "mcp__ocx__ocx_post");
    assert_eq!(called[0]["input"], json!({"text": "hello from the model"}));

    claude.send(&user_message("post to the node"));
    let second = claude.next("second result", STEP, is_result);
    assert_eq!(second["is_error"], false);
    assert_eq!(
        second["result"], "done: ocx-node posted: to the node",
        "one --allowedTools argument, comma separated, grants both servers"
    );
    assert_eq!(claude.finish(STEP).code(), Some(0));

    let turns = model.conversation();
    assert!(turns.iter().all(|r| r.header("x-api-key") == Some(KEY)));
    assert!(
        turns
            .iter()
            .all(|r| r.tools() == ["mcp__ocx__ocx_post", "mcp__ocx-node__ocx_post"])
    );
    let answered = turns
        .iter()
        .find(|r| !r.new_tool_results().is_empty())
        .expect("the tool's answer reached the model");
    assert_eq!(
        answered.new_tool_results()[0].text,
        "ocx posted: hello from the model"
    );
    let asked_second = turns
        .iter()
        .find(|r| r.last_user_text().as_deref() == Some("post to the node"))
        .unwrap();
    assert!(
        asked_second.at >= first_read,
        "the second message was sent after the first turn's result"
    );
    assert_eq!(
        asked_second.tool_results().len(),
        1,
        "the whole conversation is sent again, the first tool result in it"
    );
    assert_eq!(
        mcp_log(&log)[1],
        json!({"server": "ocx", "arguments": {"text": "hello from the model"}})
    );
    assert_eq!(mcp_log(&node_log).len(), 2);
}

#[test]
fn claude_ends_a_turn_whose_key_is_refused_with_an_error_result_and_takes_the_next() {
    let model = Model::start(|r: &Request| match r.last_user_text().as_deref() {
        Some("refuse me") => Reply::Error(401),
        other => Reply::text(format!("echo: {}", other.unwrap_or(""))),
    });
    let (home, work) = (dir("ocx-home-"), dir("ocx-work-"));
    let mut claude = claude(
        &model,
        home.path(),
        work.path(),
        &["--tools", ""],
        &[("CLAUDE_CODE_MAX_RETRIES", "1")],
    );
    claude.send(&user_message("refuse me"));
    let retry = claude.next("api_retry event", STEP, |v| v["subtype"] == "api_retry");
    assert_eq!(retry["attempt"], 1);
    assert_eq!(retry["max_retries"], 1, "CLAUDE_CODE_MAX_RETRIES is taken");
    assert_eq!(retry["error_status"], 401);
    assert_eq!(retry["error"], "authentication_failed");
    let result = claude.next("error result", STEP, is_result);
    assert_eq!(result["is_error"], true);
    assert_eq!(result["api_error_status"], 401);
    assert!(
        result["result"]
            .as_str()
            .unwrap()
            .contains("Invalid API key"),
        "{result}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(claude.alive(), "a refused key does not end the process");
    let refused = model
        .conversation()
        .iter()
        .filter(|r| r.last_user_text().as_deref() == Some("refuse me"))
        .count();
    assert_eq!(refused, 2, "one request and one retry");

    claude.send(&user_message("and now?"));
    let result = claude.next("second result", STEP, is_result);
    assert_eq!(result["is_error"], false);
    assert_eq!(result["result"], "echo: and now?");
    claude.finish(STEP);
}

#[test]
fn claude_honours_a_checkouts_hook_mcp_json_and_claude_md_unless_told_user_settings_only() {
    let model = Model::start(|r: &Request| {
        Reply::text(format!("echo: {}", r.last_user_text().unwrap_or_default()))
    });
    let outside = dir("ocx-marks-");
    let hook_mark = outside.path().join("hook-ran");
    let mcp_mark = outside.path().join("proj.log");
    let work = dir("ocx-work-");
    let (cmd, args) = mcp_server(outside.path(), "proj", &mcp_mark);
    std::fs::create_dir(work.path().join(".claude")).unwrap();
    std::fs::write(
        work.path().join(".claude/settings.json"),
        json!({"hooks": {"SessionStart": [{"hooks": [{"type": "command",
            "command": format!("touch {}", hook_mark.display())}]}]}})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        work.path().join(".mcp.json"),
        json!({"mcpServers": {"proj": {"command": cmd, "args": args}}}).to_string(),
    )
    .unwrap();
    std::fs::write(
        work.path().join("CLAUDE.md"),
        "CHECKED-IN-INSTRUCTIONS: answer in rhyme\n",
    )
    .unwrap();

    for guarded in [false, true] {
        let _ = std::fs::remove_file(&hook_mark);
        let _ = std::fs::remove_file(&mcp_mark);
        let before = model.conversation().len();
        let home = dir("ocx-home-");
        let flags: &[&str] = if guarded {
            &["--setting-sources", "user", "--strict-mcp-config"]
        } else {
            &[]
        };
        let mut claude = claude(&model, home.path(), work.path(), flags, &[]);
        claude.send(&user_message("hello"));
        let result = claude.next("result", STEP, is_result);
        assert_eq!(result["result"], "echo: hello");
        claude.finish(STEP);
        let turn = &model.conversation()[before];
        let honoured = [
            hook_mark.exists(),
            mcp_mark.exists(),
            turn.tools().iter().any(|t| t == "mcp__proj__ocx_post"),
            turn.contains("CHECKED-IN-INSTRUCTIONS"),
        ];
        assert_eq!(
            honoured, [!guarded; 4],
            "hook ran, .mcp.json server started, its tool offered, CLAUDE.md sent \
             (guarded by --setting-sources user --strict-mcp-config: {guarded})"
        );
    }
}

/// `codex app-server` with CODEX_HOME (and HOME) at `home`, in `cwd`, the
/// scripted server as its model provider given by `-c` flags, `extra` added
/// to the provider's table.
fn codex(model: &Model, home: &Path, cwd: &Path, extra: &str) -> Program {
    codex_at(&model.url(), home, cwd, extra)
}

/// `codex` as above with the provider's API at `url` (without `/v1`).
fn codex_at(url: &str, home: &Path, cwd: &Path, extra: &str) -> Program {
    let mut c = Command::new(require("codex", CODEX_INSTALL));
    c.arg("app-server")
        .args(["-c", "model_provider=\"scripted\""])
        .args(["-c", "model=\"scripted-model\""])
        .arg("-c")
        .arg(format!(
            "model_providers.scripted={{name=\"scripted\", base_url=\"{url}/v1\", \
             wire_api=\"responses\", env_key=\"{KEY_VAR}\"{extra}}}"
        ))
        .current_dir(cwd);
    clean_env(&mut c, home);
    c.env("CODEX_HOME", home).env(KEY_VAR, KEY);
    Program::start("codex", c)
}

/// A codex app-server session: its thread started in `cwd` with
/// `approvalPolicy` never and `config` given to `thread/start`.
struct Session {
    codex: Program,
    thread: String,
    ids: u64,
}

impl Session {
    fn start(mut codex: Program, cwd: &Path, config: Value) -> Session {
        codex.send(&json!({"id": 1, "method": "initialize", "params": {
            "clientInfo": {"name": "ocx-test", "title": "OCX test", "version": "0"},
            "capabilities": null}}));
        let init = codex.next("initialize answer", STEP, |v| v["id"] == 1);
        assert!(init["result"]["userAgent"].is_string(), "{init}");
        codex.send(&json!({"method": "initialized"}));
        codex.send(&json!({"id": 2, "method": "thread/start", "params": {
            "cwd": cwd, "approvalPolicy": "never", "sandbox": "danger-full-access",
            "config": config}}));
        let started = codex.next("thread/start answer", STEP, |v| v["id"] == 2);
        let thread = started["result"]["thread"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no thread id: {started}"))
            .to_string();
        Session {
            codex,
            thread,
            ids: 3,
        }
    }

    /// Sends one message as a turn; the turn's id.
    fn start_turn(&mut self, text: &str) -> String {
        let id = self.ids;
        self.ids += 1;
        self.codex
            .send(&json!({"id": id, "method": "turn/start", "params": {
            "threadId": self.thread,
            "input": [{"type": "text", "text": text, "text_elements": []}]}}));
        let started = self
            .codex
            .next("turn/start answer", STEP, |v| v["id"] == id);
        started["result"]["turn"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no turn id: {started}"))
            .to_string()
    }

    /// Sends one message as a turn and waits for its `turn/completed`;
    /// that notification and the items completed in the turn.
    fn turn(&mut self, text: &str) -> (Value, Vec<Value>) {
        let from = self.codex.seen.len();
        self.start_turn(text);
        let done = self
            .codex
            .next("turn/completed", STEP, |v| v["method"] == "turn/completed");
        let items = self.codex.seen[from..]
            .iter()
            .filter(|v| v["method"] == "item/completed")
            .map(|v| v["params"]["item"].clone())
            .collect();
        (done["params"]["turn"].clone(), items)
    }
}

/// The text of the turn's last `agentMessage` item.
fn agent_text(items: &[Value]) -> String {
    items
        .iter()
        .rfind(|i| i["type"] == "agentMessage")
        .and_then(|i| i["text"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[test]
fn codex_app_server_takes_two_turns_in_order_calling_mcp_tools_without_asking() {
    let model = Model::start(posting_script("mcp__ocx_node__ocx_post"));
    let (home, work, tools) = (dir("ocx-codex-"), dir("ocx-work-"), dir("ocx-mcp-"));
    let (log, node_log) = (tools.path().join("ocx.log"), tools.path().join("node.log"));
    let (cmd, args) = mcp_server(tools.path(), "ocx", &log);
    let (_, node_args) = mcp_server(tools.path(), "ocx-node", &node_log);
    let codex = codex(&model, home.path(), work.path(), "");
    let mut session = Session::start(
        codex,
        work.path(),
        json!({"mcp_servers.ocx": {"command": cmd, "args": args},
            "mcp_servers.ocx-node": {"command": cmd, "args": node_args}}),
    );

    let (turn, items) = session.turn("post the greeting");
    let first_read = Instant::now();
    assert_eq!(turn["status"], "completed", "{turn}");
    let call = items
        .iter()
        .find(|i| i["type"] == "mcpToolCall")
        .expect("an mcpToolCall item");
    assert_eq!(call["server"], "ocx");
    assert_eq!(call["tool"], "ocx_post");
    assert_eq!(call["status"], "completed");
    assert_eq!(call["arguments"], json!({"text": "hello from the model"}));
    assert_eq!(
        call["result"]["content"][0]["text"],
        "ocx posted: hello from the model"
    );
    assert_eq!(agent_text(&items), "done: ocx posted: hello from the model");

    let (turn, items) = session.turn("post to the node");
    assert_eq!(turn["status"], "completed", "{turn}");
    assert!(
        items
            .iter()
            .any(|i| i["type"] == "mcpToolCall" && i["server"] == "ocx-node")
    );
    assert_eq!(agent_text(&items), "done: ocx-node posted: to the node");
    assert!(
        session.codex.asked.is_empty(),
        "codex asked the client nothing: {:?}",
        session.codex.asked
    );
    assert_eq!(session.codex.finish(STEP).code(), Some(0));

    let turns = model.conversation();
    assert!(
        turns
            .iter()
            .all(|r| r.header("authorization") == Some(&format!("Bearer {KEY}")[..]))
    );
    assert!(turns.iter().all(|r| r.model() == Some("scripted-model")));
    let offered = turns[0].tools();
    assert!(
        offered.contains(&"mcp__ocx__ocx_post".to_string())
            && offered.contains(&"mcp__ocx_node__ocx_post".to_string()),
        "MCP tools offered as namespaces mcp__ocx and mcp__ocx_node: {offered:?}"
    );
    let asked_second = turns
        .iter()
        .find(|r| r.last_user_text().as_deref() == Some("post to the node"))
        .unwrap();
    assert!(asked_second.at >= first_read);
    assert_eq!(asked_second.tool_results().len(), 1);
    assert_eq!(
        mcp_log(&node_log)[1],
        json!({"server": "ocx-node", "arguments": {"text": "to the node"}})
    );
    assert_eq!(mcp_log(&log).len(), 2);
}

#[test]
fn codex_fails_a_turn_whose_key_is_refused_and_takes_the_next() {
    let model = Model::start(|r: &Request| match r.last_user_text().as_deref() {
        Some("refuse me") => Reply::Error(401),
        other => Reply::text(format!("echo: {}", other.unwrap_or(""))),
    });
    let (home, work) = (dir("ocx-codex-"), dir("ocx-work-"));
    let codex = codex(&model, home.path(), work.path(), ", stream_max_retries=0");
    let mut session = Session::start(codex, work.path(), json!({}));
    let (turn, _) = session.turn("refuse me");
    assert_eq!(turn["status"], "failed", "{turn}");
    assert_eq!(
        turn["error"]["codexErrorInfo"]["httpConnectionFailed"]["httpStatusCode"], 401,
        "{turn}"
    );
    assert!(
        turn["error"]["message"]
            .as_str()
            .unwrap()
            .contains("401 Unauthorized")
    );
    let refused = model
        .conversation()
        .iter()
        .filter(|r| r.last_user_text().as_deref() == Some("refuse me"))
        .count();
    assert_eq!(refused, 1, "stream_max_retries=0: no retry");
    let (turn, items) = session.turn("and now?");
    assert_eq!(turn["status"], "completed");
    assert_eq!(agent_text(&items), "echo: and now?");
    session.codex.finish(STEP);
}

#[test]
fn codex_takes_a_checkouts_config_and_agents_md_unless_the_thread_marks_it_untrusted() {
    let model = Model::start(|r: &Request| {
        Reply::text(format!("echo: {}", r.last_user_text().unwrap_or_default()))
    });
    let (outside, work) = (dir("ocx-marks-"), dir("ocx-work-"));
    let mark = outside.path().join("proj.log");
    let (cmd, args) = mcp_server(outside.path(), "proj", &mark);
    std::fs::create_dir(work.path().join(".codex")).unwrap();
    std::fs::write(
        work.path().join(".codex/config.toml"),
        format!(
            "developer_instructions = \"CHECKED-IN-CONFIG\"\n\
             [mcp_servers.proj]\ncommand = {cmd:?}\nargs = {args:?}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        work.path().join("AGENTS.md"),
        "CHECKED-IN-AGENTS: be terse\n",
    )
    .unwrap();

    for untrusted in [false, true] {
        let _ = std::fs::remove_file(&mark);
        let before = model.conversation().len();
        let home = dir("ocx-codex-");
        let codex = codex(&model, home.path(), work.path(), "");
        let config = if untrusted {
            json!({"projects": {work.path().display().to_string(): {"trust_level": "untrusted"}}})
        } else {
            json!({})
        };
        let mut session = Session::start(codex, work.path(), config);
        let (turn, items) = session.turn("hello");
        assert_eq!(turn["status"], "completed", "{turn}");
        assert_eq!(agent_text(&items), "echo: hello");
        session.codex.finish(STEP);
        let request = &model.conversation()[before];
        let honoured = [
            request.contains("CHECKED-IN-CONFIG"),
            request.contains("CHECKED-IN-AGENTS"),
            mark.exists(),
            request.tools().iter().any(|t| t == "mcp__proj__ocx_post"),
        ];
        assert_eq!(
            honoured, [!untrusted; 4],
            "developer_instructions, AGENTS.md, the MCP server started and offered \
             (trust_level untrusted: {untrusted})"
        );
    }
}

#[test]
fn codex_waits_for_an_unreachable_model_until_the_turn_is_interrupted() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (home, work) = (dir("ocx-codex-"), dir("ocx-work-"));
    let codex = codex_at(
        &format!("http://127.0.0.1:{port}"),
        home.path(),
        work.path(),
        ", stream_max_retries=0, request_max_retries=0",
    );
    let mut session = Session::start(codex, work.path(), json!({}));
    let turn = session.start_turn("hello");
    let waiting = session
        .codex
        .next("error notification", STEP, |v| v["method"] == "error");
    assert_eq!(waiting["params"]["willRetry"], true, "{waiting}");
    assert_eq!(
        waiting["params"]["error"]["message"],
        "Reconnecting... waiting for network"
    );
    // Its next attempt comes 5 s later, and no retry setting bounds them.
    let again = session.codex.next("a second attempt", STEP, |v| {
        v["method"] == "error" || v["method"] == "turn/completed"
    });
    assert_eq!(again["method"], "error", "the turn did not end: {again}");
    assert_eq!(again["params"]["willRetry"], true);
    session
        .codex
        .send(&json!({"id": 99, "method": "turn/interrupt",
        "params": {"threadId": session.thread, "turnId": turn}}));
    let done = session
        .codex
        .next("turn/completed", STEP, |v| v["method"] == "turn/completed");
    assert_eq!(done["params"]["turn"]["status"], "interrupted", "{done}");
    assert!(session.codex.alive());
    session.codex.finish(STEP);
}
