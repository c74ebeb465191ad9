//! `ocx --mcp-http 127.0.0.1:PORT`: MCP over streamable HTTP at `/mcp`,
//! on loopback alone, answering only requests that bear the token kept
//! in the token file ([`token`](super::token)) for its repository and login.

use super::token::{default_token_file, token_for};
use super::{Caller, McpError, Server, runtime};
use crate::fossil::kept::Kept;
use crate::input::mark_invalid;
use crate::stop::Stop;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// The largest request body the HTTP server reads: 10 MiB.
pub const MAX_BODY: usize = 10 * 1024 * 1024;

/// A loopback socket address, or why not.
pub fn loopback(addr: &str) -> Result<SocketAddr, McpError> {
    match addr.parse::<SocketAddr>() {
        Ok(a) if a.ip().is_loopback() => Ok(a),
        _ => Err(McpError::NotLoopback(addr.to_string())),
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

/// Serves MCP over streamable HTTP at `/mcp` on the loopback address
/// `addr`, as `caller`'s login, to requests bearing the token kept in
/// `token_file` (by default [`default_token_file`]); returns only when it
/// cannot start or the listener fails.
pub(super) fn serve(
    addr: &str,
    caller: Caller,
    token_file: Option<PathBuf>,
) -> Result<(), McpError> {
    let addr = loopback(addr)?;
    let kept = Kept::new();
    let (project, login) = {
        let cx = caller.context().keeping(kept.clone());
        let who = cx.caller().map_err(McpError::caller_refused)?;
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
        let app = router(caller, kept, token);
        crate::entry::eprint(&format!(
            "ocx-mcp: serving MCP at http://{bound}/mcp\nocx-mcp: as {login}, to requests with the header Authorization: Bearer TOKEN, TOKEN from {}\n",
            path.display()
        ));
        axum::serve(listener, app)
            .await
            .map_err(|e| McpError::Start(e.to_string()))
    })
}

/// MCP's streamable HTTP at `/mcp`, every call as `caller`, answering only
/// requests that bear `token`.
pub(super) fn router(
    caller: Caller,
    kept: std::sync::Arc<Kept>,
    token: Arc<String>,
) -> axum::Router {
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
    axum::Router::new()
        .route_service("/mcp", service)
        .layer(axum::middleware::map_request(mark_body))
        .layer(axum::middleware::from_fn_with_state(token, bearer))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_is_served() {
        assert!(loopback("127.0.0.1:0").is_ok());
        assert!(loopback("[::1]:8080").is_ok());
        assert!(loopback("0.0.0.0:8080").is_err());
        assert!(loopback("192.168.1.2:80").is_err());
        assert!(loopback("localhost").is_err());
    }
}
