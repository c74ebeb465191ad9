//! `ocx-mcp` (and `ocx --mcp`): every tool of the registry over MCP, on
//! stdio, and `ocx --mcp-http 127.0.0.1:PORT`, the same over streamable
//! HTTP at `/mcp` on loopback alone, each request carrying the bearer
//! token made for its repository and login. One adapter serves every
//! tool: its schemas come from the registry and each call goes through
//! `registry::call_with_text`. A run's node socket serves only the tools
//! that need the run's login (`NODE_TOOLS`). Logs go to standard error only.

#![allow(clippy::disallowed_methods)] // an entry point: it reads where its clients keep their configuration, as docs/architecture.md says

use crate::answer::Answer;
use crate::context::{Context, Who};
use crate::fossil::kept::Kept;
use crate::input::mark_invalid;
use crate::registry::{self, TOOLS};
use crate::stop::Stop;
use crate::tool::{Entry, Needs, Reach};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

/// The largest request body the HTTP server reads: 10 MiB.
pub const MAX_BODY: usize = 10 * 1024 * 1024;

/// The longest message a run's node socket reads (a push's artifacts, in
/// base64, among them): 64 MiB; a longer one ends the connection.
pub const MAX_LINE: usize = 64 * 1024 * 1024;

/// What goes wrong starting the server, for the person who started it.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The command line does not parse.
    #[error("{0}")]
    Usage(String),
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

/// Serves a run's node tools ([`NODE_TOOLS`]) on the Unix socket `path`
/// (made afresh, readable and writable by its owner alone), each
/// connection an MCP session acting as `caller`; returns only when the
/// listener fails.
pub fn serve_unix(path: &std::path::Path, caller: Caller) -> Result<(), McpError> {
    let _ = std::fs::remove_file(path);
    runtime()?.block_on(async move {
        let listener = tokio::net::UnixListener::bind(path)
            .map_err(|e| McpError::Start(format!("{}: {e}", path.display())))?;
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
        }
        let serving = Server::new(caller);
        loop {
            let (stream, _) = listener
                .accept()
                .await
                .map_err(|e| McpError::Start(e.to_string()))?;
            let server = serving.clone();
            tokio::spawn(async move {
                let (r, w) = stream.into_split();
                let (server_side, mut feed) = tokio::io::duplex(1 << 20);
                tokio::spawn(async move {
                    let mut reader = tokio::io::BufReader::new(r);
                    let mut line = Vec::new();
                    loop {
                        line.clear();
                        let mut limited = (&mut reader).take(MAX_LINE as u64 + 1);
                        match limited.read_until(b'\n', &mut line).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) if n > MAX_LINE => break,
                            Ok(_) => {
                                let marked = mark_invalid(&line);
                                if feed.write_all(marked.as_bytes()).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                });
                let (reader, _unused) = tokio::io::split(server_side);
                if let Ok(running) = server.serve((reader, w)).await {
                    let _ = running.waiting().await;
                }
            });
        }
    })
}

/// `ocx-mcp --connect SOCKET`: relays standard input and output to the MCP
/// server a run's watcher serves on `socket`, so a runner's MCP
/// configuration names an ordinary stdio server.
pub fn relay(socket: &std::path::Path) -> Result<(), McpError> {
    use std::io::{Read, Write};
    let stream = std::os::unix::net::UnixStream::connect(socket)
        .map_err(|e| McpError::Start(format!("{}: {e}", socket.display())))?;
    let mut to_server = stream
        .try_clone()
        .map_err(|e| McpError::Start(e.to_string()))?;
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        let mut stdin = std::io::stdin();
        while let Ok(n) = stdin.read(&mut buf) {
            if n == 0 || to_server.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to_server.shutdown(std::net::Shutdown::Write);
    });
    let mut from_server = stream;
    let mut out = std::io::stdout();
    let mut buf = [0u8; 8192];
    while let Ok(n) = from_server.read(&mut buf) {
        if n == 0 || out.write_all(&buf[..n]).and_then(|_| out.flush()).is_err() {
            break;
        }
    }
    Ok(())
}

/// The tools a run's node socket serves: those that need the run's login
/// on the served repository. The agent's workspace tools (context, find,
/// read, edit, test, save) run inside the run's sandbox instead.
pub const NODE_TOOLS: &[&str] = &[
    "audit",
    "post",
    "push",
    "receipt",
    "status",
    "thread",
    "unaudited",
    "unversioned_get",
    "unversioned_list",
    "unversioned_put",
    "verdicts",
    "wiki_edit",
    "wiki_read",
];

/// The agent's workspace tools: they act on the run's checkout, and run
/// inside its sandbox as the run's own processes.
pub const WORKSPACE_TOOLS: &[&str] = &["context", "find", "read", "edit", "test", "save"];

/// Where an MCP server serves, which decides the tools that can work there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inside {
    /// Not in a run: every tool.
    Nowhere,
    /// A run's node socket, served by its watcher: [`NODE_TOOLS`].
    NodeSocket,
    /// A no-password run's sandbox: the workspace tools, and `push`, which
    /// hands the clone's new artifacts to the node's socket; the tools that
    /// need the run's login are the node socket's.
    RunWithoutPassword,
    /// The sandbox of a run holding its password: the workspace tools and
    /// those the run's login can use from its clone.
    RunWithPassword,
}

impl Inside {
    /// Where this process is, as its environment says: a run's program
    /// finds its record (and, without a password, its socket) there.
    pub fn here() -> Inside {
        let set = |v: &str| std::env::var_os(v).is_some_and(|x| !x.is_empty());
        if set(crate::context::MCP_SOCKET_VAR) {
            Inside::RunWithoutPassword
        } else if set(crate::context::RECORD_VAR) {
            Inside::RunWithPassword
        } else {
            Inside::Nowhere
        }
    }

    /// Whether the tool `name` can work here.
    pub fn offers(self, name: &str) -> bool {
        match self {
            Inside::Nowhere => true,
            Inside::NodeSocket => NODE_TOOLS.contains(&name),
            Inside::RunWithoutPassword => WORKSPACE_TOOLS.contains(&name) || name == "push",
            Inside::RunWithPassword => {
                WORKSPACE_TOOLS.contains(&name) || (NODE_TOOLS.contains(&name) && name != "push")
            }
        }
    }
}

/// The MCP server: lists the registry's tools and calls them. Every
/// session of one server shares what it keeps: the repository opened once
/// and `fossil` learned once; each call reads its caller afresh.
#[derive(Clone)]
pub struct Server {
    caller: Arc<Caller>,
    kept: Arc<Kept>,
    /// Whether it may ask its client to elicit a choice from a person: over
    /// stdio, where the server can send requests (never over stateless HTTP).
    elicits: bool,
}

impl Server {
    /// A server whose calls act as `caller`.
    pub fn new(caller: Caller) -> Server {
        Server::keeping(caller, Kept::new())
    }

    /// A server whose calls act as `caller`, keeping what `kept` holds.
    fn keeping(caller: Caller, kept: Arc<Kept>) -> Server {
        Server {
            caller: Arc::new(caller),
            kept,
            elicits: false,
        }
    }

    /// Whether this server offers the tool `name`: every tool offered
    /// everywhere (not `register`, `approve` or `collect`), and where it
    /// serves a run only those that work there ([`Inside::offers`]).
    fn offers(&self, name: &str) -> bool {
        let everywhere = registry::find(name).is_some_and(|t| t.reach() == Reach::Everywhere);
        let inside = match self.caller.run {
            Some(_) => Inside::NodeSocket,
            None => Inside::here(),
        };
        everywhere && inside.offers(name)
    }
}

/// `ocx-mcp [--repository FILE] [--user LOGIN]` and `ocx --mcp ...`: serves
/// MCP on stdio until the client closes it; answers the exit code.
pub fn main() -> i32 {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match parse_args(&args).and_then(
        |(caller, http, connect, token_file)| match (http, connect) {
            (_, Some(socket)) => relay(&socket),
            (Some(addr), None) => serve_http_at(&addr, caller, token_file),
            (None, None) => serve_stdio(caller),
        },
    ) {
        Ok(()) => 0,
        Err(e) => {
            super::eprint(&format!("ocx-mcp: {e}\n"));
            2
        }
    }
}

/// `ocx --mcp-http ADDR [--token-file FILE]`: serves MCP over streamable
/// HTTP at `/mcp` on the loopback address `addr`, as the command line's
/// caller, to requests bearing its token; answers the exit code (2 when it
/// cannot start, an address off loopback among them).
pub fn serve_http(
    addr: &OsString,
    repository: Option<PathBuf>,
    user: Option<String>,
    token_file: Option<PathBuf>,
) -> i32 {
    let caller = Caller {
        repository,
        user,
        cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        run: None,
    };
    let addr = addr.to_string_lossy().into_owned();
    match serve_http_at(&addr, caller, token_file) {
        Ok(()) => 0,
        Err(e) => {
            super::eprint(&format!("ocx --mcp-http: {e}\n"));
            2
        }
    }
}

type Parsed = (Caller, Option<String>, Option<PathBuf>, Option<PathBuf>);

fn parse_args(args: &[OsString]) -> Result<Parsed, McpError> {
    let mut repository = None;
    let mut user = None;
    let mut http = None;
    let mut connect = None;
    let mut token_file = None;
    let mut it = args.iter();
    let text = |v: Option<&OsString>, flag: &str| -> Result<String, McpError> {
        let v = v.ok_or_else(|| McpError::Usage(format!("{flag} needs a value")))?;
        v.to_str()
            .map(str::to_string)
            .ok_or_else(|| McpError::Usage(format!("{flag} is not UTF-8")))
    };
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--mcp") => {}
            Some("--repository" | "-R") => {
                repository = Some(PathBuf::from(text(it.next(), "--repository")?))
            }
            Some("--user" | "-U") => user = Some(text(it.next(), "--user")?),
            Some("--mcp-http") => http = Some(text(it.next(), "--mcp-http")?),
            Some("--connect") => connect = Some(PathBuf::from(text(it.next(), "--connect")?)),
            Some("--token-file") => {
                token_file = Some(PathBuf::from(text(it.next(), "--token-file")?))
            }
            _ => {
                return Err(McpError::Usage(format!(
                    "unexpected argument {}; usage: ocx-mcp [--repository FILE] [--user LOGIN] [--mcp-http ADDR [--token-file FILE]] | ocx-mcp --connect SOCKET",
                    a.to_string_lossy()
                )));
            }
        }
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    Ok((
        Caller {
            repository,
            user,
            cwd,
            run: None,
        },
        http,
        connect,
        token_file,
    ))
}

fn runtime() -> Result<tokio::runtime::Runtime, McpError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| McpError::Start(e.to_string()))
}

fn serve_stdio(caller: Caller) -> Result<(), McpError> {
    runtime()?.block_on(async move {
        let (server_side, mut feed) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
            let mut line = Vec::new();
            loop {
                line.clear();
                match stdin.read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let marked = mark_invalid(&line);
                        if feed.write_all(marked.as_bytes()).await.is_err() {
                            break;
                        }
                    }
                }
            }
        });
        let (reader, _unused) = tokio::io::split(server_side);
        let server = Server {
            elicits: true,
            ..Server::new(caller)
        };
        let running = server
            .serve((reader, tokio::io::stdout()))
            .await
            .map_err(|e| McpError::Start(e.to_string()))?;
        let _ = running.waiting().await;
        Ok(())
    })
}

/// A loopback socket address, or why not.
pub fn loopback(addr: &str) -> Result<SocketAddr, McpError> {
    match addr.parse::<SocketAddr>() {
        Ok(a) if a.ip().is_loopback() => Ok(a),
        _ => Err(McpError::NotLoopback(addr.to_string())),
    }
}

/// A bearer token's file: the token, and the repository and login it was
/// made for.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    /// The repository's project-code.
    project: String,
    /// The login the token acts as.
    login: String,
    /// The token: 32 random bytes, in hex.
    token: String,
}

/// Where the token for `project` and `login` is kept when `--token-file`
/// names no other file: `$XDG_CONFIG_HOME/ocx/mcp-tokens/` (else
/// `~/.config/ocx/mcp-tokens/`), one file per repository and login.
pub fn default_token_file(project: &str, login: &str) -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".config"))
        })?;
    const KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'@');
    let login = percent_encoding::utf8_percent_encode(login, KEEP).to_string();
    let project: String = project.chars().take(16).collect();
    Some(
        base.join("ocx")
            .join("mcp-tokens")
            .join(format!("{project}-{login}.json")),
    )
}

/// The token kept in `path` for `project` and `login`, made (0600, in a
/// directory made 0700) when the file is not there yet. A file others can
/// read, not this account's, or made for another repository or login is
/// refused.
fn token_for(path: &Path, project: &str, login: &str) -> Result<String, McpError> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
    let refuse = |reason: String| McpError::Token {
        path: path.to_path_buf(),
        reason,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            if !meta.is_file() {
                return Err(refuse("is not a regular file".into()));
            }
            if meta.uid() != nix::unistd::geteuid().as_raw() {
                return Err(refuse("belongs to another account".into()));
            }
            if meta.permissions().mode() & 0o077 != 0 {
                return Err(refuse(format!(
                    "is readable or writable by others (mode {:o}): make it 0600",
                    meta.permissions().mode() & 0o777
                )));
            }
            let kept: TokenFile = std::fs::read(path)
                .map_err(|e| refuse(e.to_string()))
                .and_then(|b| {
                    serde_json::from_slice(&b).map_err(|e| refuse(format!("does not parse: {e}")))
                })?;
            if kept.project != project || kept.login != login {
                return Err(refuse(format!(
                    "was made for login {:?} of project {}, not {login:?} of {project}",
                    kept.login, kept.project
                )));
            }
            if kept.token.len() < 32 {
                return Err(refuse("holds a token too short to keep anyone out".into()));
            }
            Ok(kept.token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
                && !dir.is_dir()
            {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| refuse(format!("cannot make its directory: {e}")))?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| refuse(e.to_string()))?;
            }
            let mut bytes = [0u8; 32];
            rand::fill(&mut bytes);
            let made = TokenFile {
                project: project.to_string(),
                login: login.to_string(),
                token: hex::encode(bytes),
            };
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| refuse(format!("cannot make it: {e}")))?;
            let text = serde_json::to_string_pretty(&made).unwrap_or_default() + "\n";
            file.write_all(text.as_bytes())
                .map_err(|e| refuse(e.to_string()))?;
            Ok(made.token)
        }
        Err(e) => Err(refuse(e.to_string())),
    }
}

/// Lets a request through only when it bears the token, compared in
/// constant time; any other is answered 401.
async fn bearer(
    axum::extract::State(token): axum::extract::State<Arc<String>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let given = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        });
    match given {
        Some(t) if crate::fossil::login::same_secret(t.as_bytes(), token.as_bytes()) => {
            next.run(request).await
        }
        _ => axum::response::Response::builder()
            .status(axum::http::StatusCode::UNAUTHORIZED)
            .header(axum::http::header::WWW_AUTHENTICATE, "Bearer realm=\"ocx\"")
            .header(axum::http::header::CONTENT_TYPE, "text/plain")
            .body(axum::body::Body::from(
                "this MCP server needs its bearer token: send Authorization: Bearer TOKEN, TOKEN from the file it named at start\n",
            ))
            .unwrap_or_default(),
    }
}

fn serve_http_at(addr: &str, caller: Caller, token_file: Option<PathBuf>) -> Result<(), McpError> {
    let addr = loopback(addr)?;
    let kept = Kept::new();
    let (project, login) = {
        let cx = caller.context().keeping(kept.clone());
        let who = cx.caller().map_err(|s| {
            McpError::Start(format!(
                "{}: {}",
                s.field.as_deref().unwrap_or("user"),
                s.reason
            ))
        })?;
        let project = cx
            .repo()
            .and_then(|r| r.project_code().map_err(Stop::internal))
            .map_err(|s| McpError::Start(s.reason))?;
        (project, who.login.clone())
    };
    let caller = Caller {
        user: Some(login.clone()),
        ..caller
    };
    let path = match token_file {
        Some(p) => p,
        None => default_token_file(&project, &login).ok_or_else(|| {
            McpError::Start(
                "neither XDG_CONFIG_HOME nor HOME is set: name the token's file with --token-file FILE"
                    .into(),
            )
        })?,
    };
    let token = Arc::new(token_for(&path, &project, &login)?);
    runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| McpError::Start(format!("{addr}: {e}")))?;
        let bound = listener
            .local_addr()
            .map_err(|e| McpError::Start(e.to_string()))?;
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_sse_keep_alive(None)
            .with_max_request_body_bytes(MAX_BODY)
            .with_allowed_hosts(["localhost", "127.0.0.1", "::1", "[::1]"]);
        let server = Server::keeping(caller, kept);
        let service = StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let app = axum::Router::new()
            .route_service("/mcp", service)
            .layer(axum::middleware::map_request(mark_body))
            .layer(axum::middleware::from_fn_with_state(token, bearer));
        super::eprint(&format!(
            "ocx-mcp: serving MCP at http://{bound}/mcp\nocx-mcp: as {login}, to requests with the header Authorization: Bearer TOKEN, TOKEN from {}\n",
            path.display()
        ));
        axum::serve(listener, app)
            .await
            .map_err(|e| McpError::Start(e.to_string()))
    })
}

/// Reads a request's body (at most [`MAX_BODY`]: 413 past it) and marks
/// what in it is not UTF-8, so the registry refuses it naming its field
/// rather than the JSON reader dropping the whole message.
async fn mark_body(
    request: axum::extract::Request,
) -> Result<axum::extract::Request, axum::http::StatusCode> {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| axum::http::StatusCode::PAYLOAD_TOO_LARGE)?;
    let body = if std::str::from_utf8(&bytes).is_ok()
        && !bytes.windows(3).any(|w| w == b"\\ud" || w == b"\\uD")
    {
        axum::body::Body::from(bytes)
    } else {
        axum::body::Body::from(mark_invalid(&bytes))
    };
    Ok(axum::extract::Request::from_parts(parts, body))
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("ocx", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "OCX: every tool answers {ok, tool, dry_run, log, result, stopped, next_step, took_ms}; \
                 a refusal names the field at fault and says what to do instead.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            listed()
                .iter()
                .filter(|(name, _)| self.offers(name))
                .map(|(_, t)| t.clone())
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let entry = request
            .name
            .strip_prefix("ocx_")
            .and_then(registry::find)
            .filter(|e| self.offers(e.name()))
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    format!(
                        "there is no tool {:?}; tools/list names every tool",
                        request.name
                    ),
                    None,
                )
            })?;
        let mut input: Result<Value, Stop> =
            Ok(Value::Object(request.arguments.unwrap_or_default()));
        let name = entry.name();
        if name == "decide" && self.elicits && client_elicits(&context) {
            input = self.elicit_decision(input, &context).await;
        }
        let caller = self.caller.clone();
        let kept = self.kept.clone();
        let (answer, text) = tokio::task::spawn_blocking(move || {
            let cx = caller.context().keeping(kept);
            registry::call_with_text(name, input, &cx, false)
        })
        .await
        .map_err(|_| ErrorData::internal_error("the tool call did not finish", None))?;
        Ok(CallToolResponse::Complete(result(&answer, text)))
    }
}

/// Whether the client declared it can elicit a form from its person.
fn client_elicits(context: &RequestContext<RoleServer>) -> bool {
    context
        .peer
        .peer_info()
        .is_some_and(|info| info.capabilities.elicitation.is_some())
}

impl Server {
    /// A `decide` call naming neither an option nor a note, for a question
    /// waiting on the caller: asks the client to elicit the choice (the
    /// options as a titled single choice, the recommended one its default,
    /// and a note); accepted, the input with the choice; declined or
    /// cancelled, a refusal saying nothing was written. Any other call, or
    /// a question not waiting on the caller, is left as it was given.
    async fn elicit_decision(
        &self,
        input: Result<Value, Stop>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, Stop> {
        let given = input?;
        let Some(question) = given
            .get("question")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            return Ok(given);
        };
        let chosen = ["option", "note", "dry_run"]
            .iter()
            .any(|k| given.get(*k).is_some_and(|v| !v.is_null()));
        if chosen {
            return Ok(given);
        }
        let (caller, kept) = (self.caller.clone(), self.kept.clone());
        let q = question.clone();
        let pending = tokio::task::spawn_blocking(move || {
            let cx = caller.context().keeping(kept);
            crate::tools::decide::waiting_on(&cx, &q)
        })
        .await;
        let Ok(Ok((words, options))) = pending else {
            return Ok(given);
        };
        let mut properties = Map::new();
        let mut required = Vec::new();
        if !options.is_empty() {
            let choices: Vec<Value> = options
                .iter()
                .enumerate()
                .map(|(i, o)| {
                    serde_json::json!({"const": (i + 1).to_string(),
                        "title": crate::protocol::ask::option_label(i, o)})
                })
                .collect();
            properties.insert(
                "option".into(),
                serde_json::json!({"type": "string", "title": "Your choice", "oneOf": choices, "default": "1"}),
            );
            required.push(Value::from("option"));
        }
        properties.insert(
            "note".into(),
            serde_json::json!({"type": "string", "title": "A note",
                "description": "Words of your own to go with the decision"}),
        );
        if options.is_empty() {
            required.push(Value::from("note"));
        }
        let schema =
            serde_json::json!({"type": "object", "properties": properties, "required": required});
        let Ok(requested_schema) = serde_json::from_value(schema) else {
            return Ok(given);
        };
        let asked = context
            .peer
            .create_elicitation(rmcp::model::ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: format!("Decide: {words}"),
                requested_schema,
            })
            .await
            .map_err(|e| Stop::new(format!("the client did not elicit a choice: {e}")))?;
        match asked.action {
            rmcp::model::ElicitationAction::Accept => {
                let content = asked.content.unwrap_or(Value::Null);
                let mut input = given;
                if let Some(o) = content.get("option").and_then(Value::as_str) {
                    let n: u32 = o.parse().map_err(|_| {
                        Stop::field("option", format!("{o:?} is not one of the options"))
                            .next("choose one of the options")
                    })?;
                    input["option"] = Value::from(n);
                }
                if let Some(n) = content
                    .get("note")
                    .and_then(Value::as_str)
                    .filter(|n| !n.trim().is_empty())
                {
                    input["note"] = Value::from(n);
                }
                Ok(input)
            }
            _ => Err(Stop::field(
                "question",
                "you declined to decide it, so nothing was written",
            )
            .next("call ocx_decide again with option or note when you decide")),
        }
    }
}

/// The answer as MCP's tool result: the Answer as structured content, its
/// text (result or refusal first) as content, `isError` on a refusal.
pub fn result(answer: &Answer, text: Option<String>) -> CallToolResult {
    let mut out = CallToolResult::default();
    out.content = vec![ContentBlock::text(answer.to_text(text))];
    out.structured_content = Some(serde_json::to_value(answer).unwrap_or(Value::Null));
    out.is_error = Some(!answer.ok);
    out
}

/// Every tool by name as MCP lists it, made once per process.
fn listed() -> &'static [(&'static str, Tool)] {
    static LISTED: OnceLock<Vec<(&'static str, Tool)>> = OnceLock::new();
    LISTED.get_or_init(|| TOOLS.iter().map(|t| (t.name(), tool(*t))).collect())
}

/// A registry entry as MCP lists it: `ocx_NAME`, its summary, its input
/// schema, the Answer's schema holding its result's, and its hints.
pub fn tool(entry: &dyn Entry) -> Tool {
    let input = match entry.input_schema().clone() {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let mut annotations = ToolAnnotations::new()
        .read_only(!entry.writes())
        .destructive(entry.destructive())
        .idempotent(entry.idempotent())
        .open_world(false);
    annotations.title = Some(entry.name().to_string());
    let description = match entry.needs() {
        Needs::Nothing => entry.summary().to_string(),
        needs => format!("{} Needs capability {}.", entry.summary(), needs.describe()),
    };
    Tool::new(
        format!("ocx_{}", entry.name()),
        description,
        Arc::new(input),
    )
    .with_raw_output_schema(Arc::new(output_schema(entry)))
    .with_annotations(annotations)
}

/// The Answer's schema with `result` the tool's own result schema (or
/// null), the tool's definitions renamed so none meets the Answer's.
pub fn output_schema(entry: &dyn Entry) -> Map<String, Value> {
    let mut answer = match serde_json::to_value(schemars::schema_for!(Answer)) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    let mut own = entry.output_schema().clone();
    rename_refs(&mut own);
    let mut own = match own {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    own.remove("$schema");
    let defs = own.remove("$defs");
    if let Some(Value::Object(defs)) = defs {
        let target = answer
            .entry("$defs")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(target) = target.as_object_mut() {
            for (k, v) in defs {
                target.insert(format!("result_{k}"), v);
            }
        }
    }
    if let Some(props) = answer.get_mut("properties").and_then(Value::as_object_mut) {
        props.insert(
            "result".into(),
            serde_json::json!({
                "description": "What the tool answered, when it ran to the end.",
                "anyOf": [Value::Object(own), {"type": "null"}]
            }),
        );
    }
    answer
}

fn rename_refs(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, item) in m.iter_mut() {
                if k == "$ref"
                    && let Value::String(s) = item
                    && let Some(name) = s.strip_prefix("#/$defs/")
                {
                    *s = format!("#/$defs/result_{name}");
                } else {
                    rename_refs(item);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(rename_refs),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_socket_offers_no_workspace_tool() {
        for name in NODE_TOOLS {
            assert!(registry::find(name).is_some(), "{name} is a tool");
        }
        for name in WORKSPACE_TOOLS {
            assert!(registry::find(name).is_some(), "{name} is a tool");
            assert!(!NODE_TOOLS.contains(name), "{name}");
        }
    }

    #[test]
    fn a_run_s_sandbox_offers_only_what_works_there() {
        assert!(Inside::RunWithoutPassword.offers("edit"));
        assert!(Inside::RunWithoutPassword.offers("push"));
        assert!(!Inside::RunWithoutPassword.offers("post"));
        assert!(Inside::RunWithPassword.offers("post"));
        assert!(Inside::RunWithPassword.offers("save"));
        assert!(!Inside::RunWithPassword.offers("push"));
        for host_only in [
            "hook", "node", "create", "stop", "approve", "export", "adopt",
        ] {
            assert!(!Inside::RunWithPassword.offers(host_only), "{host_only}");
            assert!(!Inside::RunWithoutPassword.offers(host_only), "{host_only}");
        }
        assert!(Inside::Nowhere.offers("hook"));
    }

    #[test]
    fn only_loopback_is_served() {
        assert!(loopback("127.0.0.1:0").is_ok());
        assert!(loopback("[::1]:8080").is_ok());
        assert!(loopback("0.0.0.0:8080").is_err());
        assert!(loopback("192.168.1.2:80").is_err());
        assert!(loopback("localhost").is_err());
    }

    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, item) in m {
                    match (k.as_str(), item) {
                        ("$ref", Value::String(r)) => out.push(r.clone()),
                        _ => refs(item, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|i| refs(i, out)),
            _ => {}
        }
    }

    #[test]
    fn hints_come_from_each_tools_definition() {
        let hints = |name: &str| tool(registry::find(name).unwrap()).annotations.unwrap();
        let read = hints("read");
        assert_eq!(read.read_only_hint, Some(true));
        assert_eq!(read.idempotent_hint, Some(true));
        let edit = hints("edit");
        assert_eq!(
            (edit.read_only_hint, edit.destructive_hint),
            (Some(false), Some(true))
        );
        let post = hints("post");
        assert_eq!(
            (post.destructive_hint, post.idempotent_hint),
            (Some(false), Some(false))
        );
    }

    #[test]
    fn every_tool_lists_with_object_schemas_whose_refs_resolve() {
        for t in TOOLS {
            let tool = tool(*t);
            assert_eq!(tool.input_schema.get("type"), Some(&Value::from("object")));
            let out = Value::Object((*tool.output_schema.unwrap()).clone());
            assert!(
                out["properties"]["result"]["anyOf"].is_array(),
                "{}",
                t.name()
            );
            let mut found = Vec::new();
            refs(&out, &mut found);
            for r in found {
                let name = r.strip_prefix("#/$defs/").unwrap_or(&r);
                assert!(out["$defs"].get(name).is_some(), "{}: {r}", t.name());
            }
        }
    }
}
