//! `ocx demo-agent`: the demo agent shipped with OCX, a `lines` session
//! runner's program that does what the example patterns ask with no model
//! behind it. For each post it hears it answers in the same thread, as the
//! run's login; for each check-in it is given it writes a verdict, `pass`,
//! against its record; and in a run held to a branch (a fixer) it first
//! saves the post's words as a file on that branch, through the workspace
//! tools. It posts from the run's clone, or, in a run holding no password,
//! through its node's socket (MCP). It reads its deliveries as lines on
//! stdin and ends when its input does.

#![allow(clippy::disallowed_methods)] // an entry point: it reads the run's variables and starts `ocx` for its tools, as docs/architecture.md says

use crate::context::{BRANCH_VAR, MCP_SOCKET_VAR, RECORD_VAR, RUN_USER_VAR};
use crate::node::inbox::Delivery;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

/// Runs the demo agent; answers its exit code.
pub fn main() -> i32 {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let agent = Agent {
        user: var(RUN_USER_VAR).unwrap_or_default(),
        record: var(RECORD_VAR).unwrap_or_default(),
        branch: var(BRANCH_VAR),
        socket: var(MCP_SOCKET_VAR).map(PathBuf::from),
        me: match std::env::current_exe() {
            Ok(me) => me,
            Err(_) => return 1,
        },
    };
    let cwd = std::env::current_dir().unwrap_or_default();
    let Some(checkout) = crate::fossil::checkout::find(&cwd) else {
        super::eprint("demo-agent: not in a checkout\n");
        return 1;
    };
    let Ok(fossil) = crate::fossil::Fossil::locate() else {
        super::eprint("demo-agent: no fossil program\n");
        return 1;
    };
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        let done = match Delivery::read(&line) {
            Ok(Delivery::Post { post, from, text }) => {
                let _ = fossil.pull(&checkout.repository);
                agent.answer(&post, &from, &text)
            }
            Ok(Delivery::CheckIn {
                checkin,
                branch,
                by,
            }) => {
                let _ = fossil.pull(&checkout.repository);
                agent.judge(&checkin, &branch, &by)
            }
            _ => Ok(()),
        };
        if let Err(e) = done {
            super::eprint(&format!("demo-agent: {e}\n"));
        }
    }
    0
}

/// Why the demo agent could not do what a delivery asked; said on its
/// standard error, where its run's log keeps it, and it goes on.
#[derive(Debug, thiserror::Error)]
enum DemoError {
    /// `ocx` could not be started for a tool.
    #[error("ocx {tool} could not start: {source}")]
    Start {
        tool: String,
        source: std::io::Error,
    },
    /// `ocx` ran a tool and stopped it, as its answer says.
    #[error("ocx {tool}: {said}")]
    Stopped { tool: String, said: String },
    /// The node's socket could not be used.
    #[error("the node's socket {}: {source}", socket.display())]
    Socket {
        socket: PathBuf,
        source: std::io::Error,
    },
    /// The node's socket closed before it answered.
    #[error("the node's socket {} closed before it answered", .0.display())]
    Closed(PathBuf),
    /// The tool called through the socket stopped, as its answer says.
    #[error("{tool}: {answer}")]
    Refused { tool: String, answer: Value },
}

/// The run as the demo agent knows it.
struct Agent {
    user: String,
    record: String,
    /// The one branch its record lets it check in on.
    branch: Option<String>,
    /// Its node's socket, in a run holding no password.
    socket: Option<PathBuf>,
    me: PathBuf,
}

impl Agent {
    /// Answers the post `post` from `from`; a fixer saves its words on
    /// its branch first.
    fn answer(&self, post: &str, from: &str, text: &str) -> Result<(), DemoError> {
        let mut reply = format!("Hello {from}, I heard you say: {}", text.replace('\n', " "));
        if let Some(branch) = &self.branch {
            let file = format!("fixes/{}.md", &post[..12.min(post.len())]);
            self.ocx(&[
                "edit",
                "--path",
                &file,
                "--old",
                "",
                "--new",
                &format!("{text}\n"),
            ])?;
            self.ocx(&[
                "save",
                "--title",
                &format!(
                    "The fix {from} asked for in {}",
                    &post[..10.min(post.len())]
                ),
                "--intent",
                "do what the post asked",
                "--expression",
                &format!("{file} holds the post's words"),
                "--demonstrates",
                "the file is in the check-in",
            ])?;
            reply.push_str(&format!(" I saved it as {file} on {branch}."));
        }
        self.post(post, &reply)
    }

    /// Writes a verdict on `checkin` against the run's record.
    fn judge(&self, checkin: &str, branch: &str, by: &str) -> Result<(), DemoError> {
        let reason = format!("the demo agent read {by}'s check-in on {branch}");
        self.ocx(&[
            "audit",
            "--checkin",
            checkin,
            "--verdict",
            "pass",
            "--reason",
            &reason,
            "--against",
            &self.record,
            "--user",
            &self.user,
        ])
    }

    /// Posts `text` in reply to `to` as the run: from its clone, or
    /// through its node's socket when it holds no password.
    fn post(&self, to: &str, text: &str) -> Result<(), DemoError> {
        match &self.socket {
            Some(socket) => mcp_call(socket, "ocx_post", json!({"to": to, "text": text})),
            None => self.ocx(&["post", "--user", &self.user, "--to", to, "--text", text]),
        }
    }

    /// `ocx ARGS` in the run's checkout; why not, when it was refused.
    fn ocx(&self, args: &[&str]) -> Result<(), DemoError> {
        let tool = || args.first().copied().unwrap_or("").to_string();
        let out = std::process::Command::new(&self.me)
            .args(args)
            .output()
            .map_err(|source| DemoError::Start {
                tool: tool(),
                source,
            })?;
        match out.status.success() {
            true => Ok(()),
            false => Err(DemoError::Stopped {
                tool: tool(),
                said: String::from_utf8_lossy(&out.stdout).trim().to_string(),
            }),
        }
    }
}

/// Calls `tool` with `arguments` on the MCP server at `socket`.
fn mcp_call(socket: &Path, tool: &str, arguments: Value) -> Result<(), DemoError> {
    let failed = |source: std::io::Error| DemoError::Socket {
        socket: socket.to_path_buf(),
        source,
    };
    let stream = std::os::unix::net::UnixStream::connect(socket).map_err(failed)?;
    let mut to = stream.try_clone().map_err(failed)?;
    let mut from = BufReader::new(stream);
    let mut send = |v: Value| writeln!(to, "{v}").map_err(failed);
    let mut answer = |id: i64| -> Result<Value, DemoError> {
        let mut line = String::new();
        loop {
            line.clear();
            if from.read_line(&mut line).map_err(failed)? == 0 {
                return Err(DemoError::Closed(socket.to_path_buf()));
            }
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && v["id"] == id
            {
                return Ok(v);
            }
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "ocx-demo-agent", "version": env!("CARGO_PKG_VERSION")}}}),
    )?;
    answer(1)?;
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}}))?;
    let called = answer(2)?;
    match called["result"]["isError"] == Value::Bool(true) || called.get("error").is_some() {
        true => Err(DemoError::Refused {
            tool: tool.to_string(),
            answer: called,
        }),
        false => Ok(()),
    }
}
