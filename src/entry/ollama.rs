//! `ocx --mcp-ollama URL --model NAME --steps N --system TEXT [--context
//! TOKENS] [--max-output BYTES]`: OCX's own agent for local models, run as
//! a session's command. It reads the run's lines (`Record HASH: OBJECTIVE`,
//! then each delivery) and, for each, asks Ollama's `/api/chat` with the
//! run's tools until the model calls none, then posts the model's last
//! words as the run's user. Every request and reply, and every call's
//! answer, is a JSON line on standard output, within `--max-output`; a
//! request that may not fit the model's context is never sent. The run's
//! tools run in this process where they run in the sandbox, and through
//! the node's socket where the node serves them (a run without a password).

#![allow(clippy::disallowed_methods)] // an entry point: it reads the run's variables, as docs/architecture.md says

mod chat;
mod written;

pub use chat::{NotChat, Reply, read_reply};
pub use written::written_call;

use crate::context::{Context, RUN_USER_VAR, Who};
use crate::fossil::kept::Kept;
use crate::registry;
use crate::run::link;
use chat::{ChatError, Client};
use clap::{Arg, Command, value_parser};
use serde_json::{Value, json};
use std::ffi::OsString;
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Arc;

/// The context asked for when `--context` is not given, in tokens.
pub const DEFAULT_CONTEXT: u64 = 32768;
/// The transcript's bound when `--max-output` is not given: 1 MiB.
pub const DEFAULT_MAX_OUTPUT: u64 = 1024 * 1024;
/// What ends an answer cut to fit the transcript.
pub const CUT: &str = "[cut: the run keeps no more of its standard output]";

/// The run's tools, as the model is offered them: the workspace tools
/// (which run in the sandbox) and the tools that need the run's login
/// (which the node serves to a run without a password).
pub fn offered() -> Vec<&'static str> {
    let mut names = super::mcp::WORKSPACE_TOOLS.to_vec();
    names.extend(super::mcp::NODE_TOOLS.iter().copied());
    names
}

/// Why the agent stopped, for the one line it says on standard error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A line of standard input does not read as the run's line or a delivery.
    #[error("standard input: {0}")]
    Input(String),
    /// Ollama gave no answer.
    #[error("Ollama at {url} cannot be reached: {reason}")]
    Unreachable { url: String, reason: String },
    /// Ollama answered other than 2xx.
    #[error("Ollama answered {status}: {said}")]
    Status { status: u16, said: String },
    /// Ollama's answer is not a chat reply.
    #[error("Ollama's answer is not a chat reply: {0}")]
    NotChat(#[from] chat::NotChat),
    /// The model still called tools when the step budget was spent.
    #[error(
        "the step budget is spent: the model still called tools after {0} requests for one line (--steps {0})"
    )]
    Steps(u32),
    /// The next request might not fit the model's context.
    #[error(
        "the conversation grew to about {tokens} tokens ({bytes} bytes) against a context of {context} tokens, {reserve} of them kept for the reply (--context): the request was not sent"
    )]
    Outgrew {
        tokens: u64,
        bytes: u64,
        context: u64,
        reserve: u64,
    },
    /// The transcript would pass `--max-output`.
    #[error("the transcript would pass --max-output ({limit} bytes): {what}")]
    Bytes { limit: u64, what: String },
    /// The post of the model's last words was refused.
    #[error("the post of the model's words was refused: {0}")]
    Post(String),
}

/// The command line's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Ollama's chat endpoint: the URL given, then `/api/chat`.
    pub endpoint: String,
    pub model: String,
    pub steps: u32,
    pub system: String,
    pub context: u64,
    pub max_output: u64,
}

/// Why a URL is not Ollama's base URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// The text does not parse as a URL.
    #[error("it is not a URL: {0}")]
    NotUrl(#[from] url::ParseError),
    /// Neither http nor https.
    #[error("the scheme {0} is not http or https")]
    Scheme(String),
    /// No host to ask.
    #[error("it names no host")]
    NoHost,
    /// A login or password in the URL.
    #[error("it holds a login: a command line holds no secret")]
    Login,
    /// A query or a fragment, which the endpoint's path would not take.
    #[error("it holds a query or a fragment")]
    Query,
}

/// `ocx --mcp-ollama`'s command line: the base URL and each setting,
/// `--NAME VALUE` once each, in any order.
pub fn command() -> Command {
    let positive = |id: &'static str, name: &'static str, help: &'static str| {
        Arg::new(id)
            .long(id)
            .value_name(name)
            .value_parser(value_parser!(u64).range(1..))
            .help(help)
    };
    Command::new("ocx")
        .no_binary_name(true)
        .about("OCX's own agent for local models, run as a session's command: it reads the run's lines on stdin")
        .disable_version_flag(true)
        .arg(
            Arg::new("mcp-ollama")
                .long("mcp-ollama")
                .value_name("URL")
                .required(true)
                .value_parser(endpoint)
                .help("Ollama's base URL: http or https, with a host and no login, query or fragment"),
        )
        .arg(
            Arg::new("model")
                .long("model")
                .value_name("NAME")
                .required(true)
                .allow_hyphen_values(true)
                .value_parser(|m: &str| match m.trim() {
                    "" => Err("it is empty"),
                    _ => Ok(m.to_string()),
                })
                .help("The model to ask"),
        )
        .arg(
            Arg::new("steps")
                .long("steps")
                .value_name("N")
                .required(true)
                .value_parser(value_parser!(u32).range(1..))
                .help("The most requests for one line before the run stops"),
        )
        .arg(
            Arg::new("system")
                .long("system")
                .value_name("TEXT")
                .required(true)
                .allow_hyphen_values(true)
                .help("The system prompt"),
        )
        .arg(
            positive("context", "TOKENS", "The model's context, in tokens")
                .default_value(DEFAULT_CONTEXT.to_string()),
        )
        .arg(
            positive("max-output", "BYTES", "The transcript's bound on standard output")
                .default_value(DEFAULT_MAX_OUTPUT.to_string()),
        )
}

/// Reads the command line after the program's name (`--mcp-ollama URL`
/// and each setting); clap's refusal, naming the flag, when it does not
/// parse.
pub fn settings(args: &[OsString]) -> Result<Settings, clap::Error> {
    let m = command().try_get_matches_from(args)?;
    let text = |id: &str| m.get_one::<String>(id).cloned().unwrap_or_default();
    let number = |id: &str| m.get_one::<u64>(id).copied().unwrap_or_default();
    Ok(Settings {
        endpoint: text("mcp-ollama"),
        model: text("model"),
        steps: m.get_one::<u32>("steps").copied().unwrap_or_default(),
        system: text("system"),
        context: number("context"),
        max_output: number("max-output"),
    })
}

/// The chat endpoint under `url`: http or https, with a host, and no
/// login, query or fragment (a password is never put on a command line).
fn endpoint(url: &str) -> Result<String, EndpointError> {
    let parsed = url::Url::parse(url)?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(EndpointError::Scheme(parsed.scheme().to_string()));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(EndpointError::NoHost);
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(EndpointError::Login);
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(EndpointError::Query);
    }
    let base = parsed.as_str().trim_end_matches('/');
    Ok(format!("{base}/api/chat"))
}

/// `ocx --mcp-ollama ...`: `args` is the command line after the program's
/// name; answers the exit code (0 when the input ended, 1 on any other
/// end, said on standard error, 2 when the command line does not parse).
pub fn main(args: &[OsString]) -> i32 {
    let s = match settings(args) {
        Ok(s) => s,
        Err(e) => return super::usage(e),
    };
    let stdin = std::io::stdin();
    match Agent::new(s).run(stdin.lock()) {
        Ok(()) => 0,
        Err(e) => {
            super::eprint(&format!("ocx --mcp-ollama: {e}\n"));
            1
        }
    }
}

pub use crate::node::inbox::{Line, read as read_line};

/// The agent: its settings, the conversation so far, and the transcript.
struct Agent {
    s: Settings,
    client: Client,
    tools: Vec<Value>,
    names: Vec<String>,
    messages: Vec<Value>,
    /// How many messages the previous request's line already showed.
    shown: usize,
    /// The first prompt's tokens over its estimate, once known.
    calibration: Option<f64>,
    out: Transcript,
    kept: Arc<Kept>,
    cwd: PathBuf,
    user: Option<String>,
    socket: Option<PathBuf>,
}

impl Agent {
    fn new(s: Settings) -> Agent {
        let names: Vec<String> = offered().iter().map(|n| format!("ocx_{n}")).collect();
        let tools = offered()
            .iter()
            .filter_map(|n| registry::find(n))
            .map(|e| {
                let t = super::mcp::tool(e);
                json!({"type": "function", "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": Value::Object((*t.input_schema).clone()),
                }})
            })
            .collect();
        let messages = vec![json!({"role": "system", "content": s.system})];
        Agent {
            client: Client::new(s.endpoint.clone()),
            out: Transcript {
                limit: s.max_output,
                written: 0,
            },
            s,
            tools,
            names,
            messages,
            shown: 0,
            calibration: None,
            kept: Kept::new(),
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            user: std::env::var(RUN_USER_VAR).ok().filter(|u| !u.is_empty()),
            socket: std::env::var_os(crate::context::MCP_SOCKET_VAR)
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
        }
    }

    fn run(&mut self, input: impl BufRead) -> Result<(), AgentError> {
        let mut record: Option<String> = None;
        for (n, line) in input.split(b'\n').enumerate() {
            let line = line.map_err(|e| AgentError::Input(e.to_string()))?;
            let line = String::from_utf8(line)
                .map_err(|_| AgentError::Input(format!("line {} is not UTF-8", n + 1)))?;
            let line = line.strip_suffix('\r').unwrap_or(&line);
            let read = read_line(line, record.as_deref())
                .map_err(|why| AgentError::Input(format!("line {}: {why}", n + 1)))?;
            if record.is_none() {
                record = Some(read.reply_to.clone());
            }
            self.turn(&read)?;
        }
        Ok(())
    }

    /// One line's turn: the model asked until it calls no tool, then its
    /// words posted.
    fn turn(&mut self, line: &Line) -> Result<(), AgentError> {
        self.pull();
        self.messages
            .push(json!({"role": "user", "content": line.text}));
        for step in 1..=self.s.steps {
            let reply = self.ask()?;
            self.messages.push(reply.message.clone());
            let calls = self.calls(&reply);
            if calls.is_empty() {
                return self.post(&line.reply_to, &reply.content);
            }
            if step == self.s.steps {
                return Err(AgentError::Steps(self.s.steps));
            }
            for c in calls {
                let (text, _refused) = self.answer(&c)?;
                self.messages
                    .push(json!({"role": "tool", "tool_name": c.name, "content": text}));
            }
        }
        Err(AgentError::Steps(self.s.steps))
    }

    /// Brings the run's clone up to date with its server, so that the
    /// delivered post, ticket change or check-in is there for its tools
    /// (a pull that fails leaves the clone as it was; a tool then says
    /// what it misses).
    fn pull(&self) {
        let cx = Context::new(None, self.cwd.clone(), Who::Local { user: None })
            .keeping(self.kept.clone());
        if let (Some(checkout), Ok(fossil)) = (cx.checkout(), cx.fossil()) {
            let _ = fossil.pull(&checkout.repository);
        }
    }

    /// Sends the conversation and reads the reply, both on the record.
    fn ask(&mut self) -> Result<Reply, AgentError> {
        let request = json!({
            "model": self.s.model,
            "messages": self.messages,
            "tools": self.tools,
            "stream": false,
            "options": {"num_ctx": self.s.context},
        });
        let body = serde_json::to_vec(&request).unwrap_or_default();
        let tokens = self.estimate(&body);
        let reserve = self.s.context / 8;
        if tokens + reserve > self.s.context {
            return Err(AgentError::Outgrew {
                tokens,
                bytes: body.len() as u64,
                context: self.s.context,
                reserve,
            });
        }
        let sent = if self.shown == 0 {
            request
        } else {
            json!({"messages": self.messages[self.shown..]})
        };
        let bare = json_len(&json!({"sent": sent, "received": CUT}));
        if bare + 1 > self.out.room() {
            return Err(self.out.full("no room left to record the next request"));
        }
        let posted = self.client.post(&body, self.out.room() - 1);
        self.shown = self.messages.len();
        let (status, reply) = match posted {
            Ok(r) => r,
            Err(ChatError::TooLong(_)) => {
                self.out.write(&json!({"sent": sent, "received": CUT}));
                return Err(self.out.full("the reply is longer than the room left"));
            }
            Err(ChatError::Unreachable(reason)) => {
                return Err(AgentError::Unreachable {
                    url: self.client.endpoint().to_string(),
                    reason,
                });
            }
        };
        let received = serde_json::from_slice::<Value>(&reply)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&reply).into_owned()));
        if !self.out.write(&json!({"sent": sent, "received": received})) {
            self.out.write(&json!({"sent": sent, "received": CUT}));
            return Err(self.out.full("the reply is longer than the room left"));
        }
        if !(200..300).contains(&status) {
            return Err(AgentError::Status {
                status,
                said: chat::said(&reply),
            });
        }
        let read = read_reply(&received)?;
        if self.calibration.is_none()
            && let Some(count) = read.prompt_eval_count.filter(|c| *c > 0)
        {
            self.calibration = Some(count as f64 / uncalibrated(&body).max(1) as f64);
        }
        Ok(read)
    }

    /// The prompt's tokens, estimated from its bytes: before calibration
    /// an ASCII byte is half a token and any other byte a whole one; after
    /// it, that estimate times the first prompt's measured ratio, with a
    /// quarter more for margin.
    fn estimate(&self, body: &[u8]) -> u64 {
        estimate(body, self.calibration)
    }

    /// The calls the reply asks for: its `tool_calls`, else the one call
    /// its whole content is written as, when unambiguous.
    fn calls(&self, reply: &Reply) -> Vec<Asked> {
        if !reply.calls.is_empty() {
            return reply
                .calls
                .iter()
                .map(|c| Asked {
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                    from_text: false,
                })
                .collect();
        }
        match written_call(&reply.content) {
            Some((name, arguments)) if self.names.contains(&name) => {
                let arguments = Value::Object(arguments);
                let valid =
                    registry::find(&name[4..]).is_some_and(|e| valid_arguments(e, &arguments));
                if valid {
                    vec![Asked {
                        name,
                        arguments,
                        from_text: true,
                    }]
                } else {
                    Vec::new()
                }
            }
            _ => Vec::new(),
        }
    }

    /// Runs one call (a tool not offered refused, never run) and records
    /// its answer; answers the text the model is given and whether it was
    /// refused.
    fn answer(&mut self, c: &Asked) -> Result<(String, bool), AgentError> {
        let line = |text: &str, refused: bool| {
            json!({"name": c.name, "arguments": c.arguments, "text": text,
                "refused": refused, "from_text": c.from_text})
        };
        if json_len(&line(CUT, false)) + 1 > self.out.room() {
            return Err(self
                .out
                .full(&format!("no room left for the answer of {}", c.name)));
        }
        let (text, refused) = self.call_tool(&c.name, c.arguments.clone());
        let text = self.out.write_cut(|t| line(t, refused), &text)?;
        Ok((text, refused))
    }

    /// Calls tool `name` (as MCP names it) with `arguments`: through the
    /// node's socket when the node serves it to this run, else here.
    fn call_tool(&self, name: &str, arguments: Value) -> (String, bool) {
        if !self.names.iter().any(|n| n == name) {
            return (
                format!(
                    "stopped: tool: there is no tool {name:?} offered here; the tools are {}\n",
                    self.names.join(", ")
                ),
                true,
            );
        }
        let arguments = match arguments {
            Value::String(s) => match serde_json::from_str::<Value>(&s) {
                Ok(v @ Value::Object(_)) => v,
                _ => return ("stopped: arguments: not a JSON object\n".into(), true),
            },
            v @ Value::Object(_) => v,
            _ => return ("stopped: arguments: not a JSON object\n".into(), true),
        };
        let bare = &name[4..];
        if let Some(socket) = &self.socket
            && super::mcp::NODE_TOOLS.contains(&bare)
        {
            return match link::call_result(socket, name, arguments) {
                Ok(result) => link::result_text(&result),
                Err(e) => (format!("stopped: {e}\n"), true),
            };
        }
        let cx = Context::new(
            None,
            self.cwd.clone(),
            Who::Local {
                user: self.user.clone(),
            },
        )
        .keeping(self.kept.clone());
        let (answer, text) =
            registry::call_shown(bare, Ok(arguments), &cx, false, registry::Shown::Text);
        (answer.to_text(text), !answer.ok)
    }

    /// Posts the model's last words as the run's user, a reply to `to`.
    fn post(&mut self, to: &str, words: &str) -> Result<(), AgentError> {
        let post = Asked {
            name: "ocx_post".into(),
            arguments: json!({"to": to, "text": words}),
            from_text: false,
        };
        let (text, refused) = self.answer(&post)?;
        if refused {
            return Err(AgentError::Post(chat::one_line(
                text.trim_start_matches("stopped: "),
            )));
        }
        Ok(())
    }
}

/// A call the model asked for.
struct Asked {
    name: String,
    arguments: Value,
    from_text: bool,
}

/// Whether `arguments` would be taken by tool `entry` as its input (what
/// the registry checks before running it).
fn valid_arguments(entry: &dyn crate::tool::Entry, arguments: &Value) -> bool {
    let mut input = arguments.clone();
    let Some(obj) = input.as_object_mut() else {
        return false;
    };
    if !matches!(
        obj.remove("dry_run"),
        None | Some(Value::Null | Value::Bool(_))
    ) {
        return false;
    }
    crate::input::check_text(&input, "").is_ok() && entry.check(&input).is_ok()
}

/// A prompt's tokens before any calibration: an ASCII byte half a token,
/// any other byte a whole one (text of common tokenizers runs 3 to 5 bytes
/// a token; bytes of other scripts can be a token each).
pub fn uncalibrated(body: &[u8]) -> u64 {
    let ascii = body.iter().filter(|b| b.is_ascii()).count() as u64;
    ascii.div_ceil(2) + (body.len() as u64 - ascii)
}

/// A prompt's tokens, estimated conservatively: [`uncalibrated`], times the
/// measured ratio of the run's first prompt and a quarter more once known.
pub fn estimate(body: &[u8], calibration: Option<f64>) -> u64 {
    let raw = uncalibrated(body);
    match calibration {
        None => raw,
        Some(r) => (raw as f64 * r * 1.25).ceil() as u64,
    }
}

/// The run's standard output, bounded by `--max-output`.
struct Transcript {
    limit: u64,
    written: u64,
}

impl Transcript {
    fn room(&self) -> u64 {
        self.limit.saturating_sub(self.written)
    }

    fn full(&self, what: &str) -> AgentError {
        AgentError::Bytes {
            limit: self.limit,
            what: what.to_string(),
        }
    }

    /// Writes `line` when it fits; whether it did.
    fn write(&mut self, line: &Value) -> bool {
        let text = format!("{line}\n");
        if text.len() as u64 > self.room() {
            return false;
        }
        super::print(&text);
        self.written += text.len() as u64;
        true
    }

    /// Writes the line `make(text)`, `text` cut to fit and ending in
    /// [`CUT`] when the whole would pass the bound; answers the text written.
    fn write_cut(
        &mut self,
        make: impl Fn(&str) -> Value,
        text: &str,
    ) -> Result<String, AgentError> {
        if self.write(&make(text)) {
            return Ok(text.to_string());
        }
        let marker = format!("\n{CUT}");
        let fixed = json_len(&make(&marker)) + 1;
        let mut room = self.room().saturating_sub(fixed);
        let mut kept = String::new();
        for ch in text.chars() {
            let n = escaped_len(ch);
            if n > room {
                break;
            }
            room -= n;
            kept.push(ch);
        }
        kept.push_str(&marker);
        if self.write(&make(&kept)) {
            Ok(kept)
        } else {
            Err(self.full("no room left for an answer"))
        }
    }
}

/// The bytes `v` takes as one JSON line, without its newline.
fn json_len(v: &Value) -> u64 {
    v.to_string().len() as u64
}

/// The bytes `c` takes inside a JSON string, as serde_json writes it.
fn escaped_len(c: char) -> u64 {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    const GOOD: &[&str] = &[
        "--mcp-ollama",
        "http://127.0.0.1:11434",
        "--model",
        "qwen3:4b",
        "--steps",
        "20",
        "--system",
        "Be brief.",
    ];

    #[test]
    fn settings_read_in_any_order() {
        let s = settings(&args(GOOD)).unwrap();
        assert_eq!(s.endpoint, "http://127.0.0.1:11434/api/chat");
        assert_eq!(
            (s.context, s.max_output),
            (DEFAULT_CONTEXT, DEFAULT_MAX_OUTPUT)
        );
        let s = settings(&args(&[
            "--mcp-ollama",
            "https://gpu.example.org/ollama/",
            "--context",
            "8192",
            "--system",
            "x",
            "--steps",
            "3",
            "--max-output",
            "5000",
            "--model",
            "m",
        ]))
        .unwrap();
        assert_eq!(s.endpoint, "https://gpu.example.org/ollama/api/chat");
        assert_eq!((s.steps, s.context, s.max_output), (3, 8192, 5000));
    }

    #[test]
    fn any_other_command_line_is_a_usage_error() {
        let mut bad: Vec<Vec<&str>> = vec![
            vec!["--mcp-ollama"],
            GOOD[..6].to_vec(),
            [GOOD, &["--steps", "2"]].concat(),
            [GOOD, &["--verbose"]].concat(),
            [GOOD, &["--context"]].concat(),
            [GOOD, &["--context", "0"]].concat(),
            [GOOD, &["--max-output", "-1"]].concat(),
        ];
        for url in [
            "ftp://h/",
            "http://",
            "127.0.0.1:11434",
            "http://u:p@h/",
            "http://h/?q=1",
        ] {
            let mut v = GOOD.to_vec();
            v[1] = url;
            bad.push(v);
        }
        let mut v = GOOD.to_vec();
        v[5] = "zero";
        bad.push(v);
        for a in bad {
            let e = settings(&args(&a)).unwrap_err();
            assert!(e.use_stderr(), "{a:?}: {e}");
            assert!(
                e.to_string().contains("'--"),
                "names the flag at fault: {e}"
            );
        }
    }

    #[test]
    fn a_runs_lines_read_with_where_the_words_go() {
        let rec = "a".repeat(64);
        let post = "b".repeat(64);
        let first = read_line(&format!("Record {rec}: Fix it\\nnow"), None).unwrap();
        assert_eq!(first.reply_to, rec);
        assert_eq!(first.text, format!("Record {rec}: Fix it\nnow"));
        let p = read_line(&format!("Post {post} from stone: hi"), Some(&rec)).unwrap();
        assert_eq!(p.reply_to, post);
        let c = read_line(&format!("Check-in {post} on trunk by stone"), Some(&rec)).unwrap();
        assert_eq!(c.reply_to, rec);
        assert!(read_line("Hello", None).is_err());
        assert!(read_line(&format!("Post {post} from x: y"), None).is_err());
        assert!(read_line("Post zz from x: y", Some(&rec)).is_err());
        assert!(read_line(&format!("Record {rec}: again"), Some(&rec)).is_err());
    }

    #[test]
    fn the_estimate_never_falls_below_a_token_per_two_ascii_bytes_uncalibrated() {
        assert_eq!(uncalibrated(b"abcd"), 2);
        assert_eq!(uncalibrated("é".as_bytes()), 2);
        assert_eq!(estimate(&[b'a'; 1000], Some(0.5)), 313);
    }

    #[test]
    fn an_answer_past_the_bound_is_cut_with_the_marker() {
        let mut t = Transcript {
            limit: 200,
            written: 0,
        };
        let text = "x\"".repeat(200);
        let got = t
            .write_cut(|s| json!({"name": "ocx_read", "text": s}), &text)
            .unwrap();
        assert!(got.ends_with(CUT), "{got}");
        assert!(t.written <= 200 && t.written > 150, "{}", t.written);
        assert!(t.write_cut(|s| json!({"text": s}), "more").is_err());
    }
}
