//! `ocx-mcp` (and `ocx --mcp`): every tool of the registry over MCP. This
//! file is the entry: its command line, and which transport serves. The
//! transports are [`stdio`], [`http`] (`ocx --mcp-http 127.0.0.1:PORT`,
//! loopback alone, each request bearing the [`token`] made for its
//! repository and login), [`socket`] (a run's node socket, serving only
//! the tools that need the run's login), [`connect`] (the relay to that
//! socket) and [`tunnel`] (`ocx --mcp-tunnel TUNNEL-ID`, through OpenAI's
//! Secure MCP Tunnel). One adapter, [`server`], serves every tool: its schemas come
//! from the registry ([`schema`]) and each call goes through
//! `registry::call_shown`; on stdio a `decide` may be asked of a
//! person ([`elicit`]). Logs go to standard error only.

pub mod connect;
mod elicit;
pub mod http;
pub mod schema;
pub mod server;
pub mod socket;
mod stdio;
pub mod token;
pub mod tunnel;

pub use connect::relay;
pub use http::{MAX_BODY, loopback};
pub use schema::{output_schema, result, tool};
pub use server::{Inside, NODE_TOOLS, Server, WORKSPACE_TOOLS};
pub use socket::{MAX_LINE, serve_unix};
pub use token::default_token_file;

use crate::context::{Context, Who};
use crate::input::mark_invalid;
use clap::builder::{PathBufValueParser, StringValueParser};
use clap::{Arg, ArgAction, ArgMatches, Command};
use std::path::PathBuf;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

/// What goes wrong starting the server, for the person who started it.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// `--repository` or `--user` is not UTF-8.
    #[error("--{0} is not UTF-8")]
    NotText(String),
    /// The address is not a loopback `HOST:PORT`.
    #[error("{0} is not a loopback address: serve on 127.0.0.1:PORT or [::1]:PORT alone")]
    NotLoopback(String),
    /// The runtime or the listener could not start.
    #[error("cannot start the server: {0}")]
    Start(String),
    /// The bearer token's file cannot be made, read, or is not this
    /// server's.
    #[error("token file {path}: {reason}")]
    Token { path: PathBuf, reason: String },
}

impl McpError {
    /// The server cannot act as the caller it was started as: the field
    /// at fault (`user` when it names none) and why.
    fn caller_refused(s: crate::stop::Stop) -> Self {
        McpError::Start(format!(
            "{}: {}",
            s.field.as_deref().unwrap_or("user"),
            s.reason
        ))
    }
}

/// Whom and where a call over MCP acts as: the same as the command line
/// would in the same place, or, on a run's node socket, the run's user.
#[derive(Debug, Clone)]
pub struct Caller {
    /// `--repository`, when given.
    pub repository: Option<PathBuf>,
    /// `--user`, when given.
    pub user: Option<String>,
    /// The directory the server was started in, where a checkout is looked for.
    pub cwd: PathBuf,
    /// The run whose tools these are, when a run's watcher serves them.
    pub run: Option<crate::context::RunScope>,
}

impl Caller {
    /// A fresh context for one call, built exactly as the command line
    /// builds it; for a run, the run's user on the served repository.
    pub fn context(&self) -> Context {
        let who = match &self.run {
            Some(scope) => Who::Run(scope.clone()),
            None => Who::Local {
                user: self.user.clone(),
            },
        };
        Context::new(self.repository.clone(), self.cwd.clone(), who)
    }
}

/// `ocx-mcp`'s command line, which `ocx --mcp` takes too: whom to act as,
/// and where to serve (stdio when neither `--mcp-http` nor `--connect`).
pub fn command() -> Command {
    let cmd = Command::new("ocx-mcp")
        .about("Every OCX tool over MCP: on stdio, over HTTP on loopback, or relayed to a run's node socket")
        .disable_version_flag(true)
        .arg(
            Arg::new("mcp")
                .long("mcp")
                .action(ArgAction::SetTrue)
                .hide(true)
                .help("Serve MCP (what `ocx --mcp` says; `ocx-mcp` needs no flag)"),
        )
        .arg(
            Arg::new("connect")
                .long("connect")
                .value_name("SOCKET")
                .value_parser(PathBufValueParser::new())
                .conflicts_with_all(["repository", "user", "mcp_http"])
                .help("Relay stdio to the node socket a run's watcher serves"),
        );
    http_args(super::cli::acting_args(cmd))
}

/// Adds `--mcp-http ADDR` and `--token-file FILE`, the flags of MCP over
/// HTTP, to `cmd`: `ocx-mcp`'s command line and `ocx`'s both take them.
pub fn http_args(cmd: Command) -> Command {
    cmd.arg(
        Arg::new("mcp_http")
            .long("mcp-http")
            .value_name("127.0.0.1:PORT")
            .value_parser(StringValueParser::new())
            .help("Serve every tool over MCP's streamable HTTP, on loopback, to requests bearing its token"),
    )
    .arg(
        Arg::new("token_file")
            .long("token-file")
            .value_name("FILE")
            .requires("mcp_http")
            .value_parser(PathBufValueParser::new())
            .help("With --mcp-http: the file keeping its bearer token (made 0600 when missing)"),
    )
    .arg(
        Arg::new("mcp_tunnel")
            .long("mcp-tunnel")
            .value_name("TUNNEL-ID")
            .conflicts_with("mcp_http")
            .value_parser(StringValueParser::new())
            .help("Serve every tool over MCP through OpenAI's Secure MCP Tunnel TUNNEL-ID, its key in OCX_TUNNEL_KEY"),
    )
    .arg(
        Arg::new("tunnel_url")
            .long("tunnel-url")
            .value_name("URL")
            .requires("mcp_tunnel")
            .value_parser(StringValueParser::new())
            .help("With --mcp-tunnel: the tunnel service (default https://api.openai.com)"),
    )
}

/// `ocx-mcp [--repository FILE] [--user LOGIN] [--mcp-http ADDR
/// [--token-file FILE]]`, `ocx-mcp --connect SOCKET`, and `ocx --mcp ...`:
/// serves MCP until its client closes it (or, over HTTP, until it fails);
/// answers the exit code, 2 for a command line that does not parse and
/// for a server that cannot start.
pub fn main() -> i32 {
    let matches = match command().try_get_matches_from(std::env::args_os()) {
        Ok(m) => m,
        Err(e) => return super::usage(e),
    };
    if let Some(code) = serve_tunnel(&matches) {
        return code;
    }
    let served = match matches.get_one::<PathBuf>("connect") {
        Some(socket) => relay(socket),
        None => caller(&matches).and_then(|caller| match http_of(&matches) {
            Some((addr, token_file)) => http::serve(addr, caller, token_file),
            None => stdio::serve(caller),
        }),
    };
    ended("ocx-mcp", served)
}

/// `ocx --mcp-tunnel TUNNEL-ID [--tunnel-url URL]`, its key read from
/// `OCX_TUNNEL_KEY`: serves MCP through the tunnel when `--mcp-tunnel` is
/// given, answering the exit code; `None` when it is not.
pub fn serve_tunnel(matches: &ArgMatches) -> Option<i32> {
    let id = matches.get_one::<String>("mcp_tunnel")?;
    let service = matches
        .get_one::<String>("tunnel_url")
        .map_or(tunnel::SERVICE, String::as_str);
    #[allow(clippy::disallowed_methods)]
    // an entry point: the tunnel's key is read from the environment alone
    let key = std::env::var(tunnel::KEY_VAR).ok();
    let served = caller(matches).and_then(|caller| tunnel::serve(id, caller, service, key));
    Some(ended("ocx --mcp-tunnel", served))
}

/// `ocx --mcp-http ADDR [--token-file FILE]`, read by the command line's
/// parser ([`http_args`]): serves MCP over HTTP when `--mcp-http` is
/// given, answering the exit code; `None` when it is not.
pub fn serve_http(matches: &ArgMatches) -> Option<i32> {
    let (addr, token_file) = http_of(matches)?;
    let served = caller(matches).and_then(|caller| http::serve(addr, caller, token_file));
    Some(ended("ocx --mcp-http", served))
}

/// `--mcp-http`'s address and `--token-file`'s file, when serving HTTP.
fn http_of(matches: &ArgMatches) -> Option<(&str, Option<PathBuf>)> {
    let addr = matches.get_one::<String>("mcp_http")?;
    Some((addr, matches.get_one::<PathBuf>("token_file").cloned()))
}

/// The caller the command line names, in the directory it started in.
fn caller(matches: &ArgMatches) -> Result<Caller, McpError> {
    let (repository, user) =
        super::cli::acting(matches).map_err(|s| McpError::NotText(s.field.unwrap_or_default()))?;
    Ok(Caller {
        repository,
        user,
        cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        run: None,
    })
}

/// The exit code of a server that ended, saying why on standard error.
fn ended(who: &str, served: Result<(), McpError>) -> i32 {
    match served {
        Ok(()) => 0,
        Err(e) => {
            super::eprint(&format!("{who}: {e}\n"));
            2
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, McpError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| McpError::Start(e.to_string()))
}

/// The lines `input` sends, each marked where it is not UTF-8 (so the
/// registry refuses it naming its field rather than the JSON reader
/// dropping the message), as a reader for the server; a line longer than
/// `max` bytes, when given, ends them.
fn marked_lines(
    input: impl tokio::io::AsyncBufRead + Unpin + Send + 'static,
    max: Option<usize>,
) -> tokio::io::DuplexStream {
    let (server_side, mut feed) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        let mut input = input;
        let limit = max.map_or(u64::MAX, |m| m as u64 + 1);
        let mut line = Vec::new();
        loop {
            line.clear();
            let mut limited = (&mut input).take(limit);
            match limited.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(n) if max.is_some_and(|m| n > m) => break,
                Ok(_) => {
                    if feed
                        .write_all(mark_invalid(&line).as_bytes())
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    server_side
}
