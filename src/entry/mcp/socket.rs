//! A run's node socket: the tools that need the run's login
//! ([`NODE_TOOLS`](super::NODE_TOOLS)), served by the run's watcher on a
//! Unix socket only its owner can open, each connection an MCP session
//! acting as the run's user.

use super::{Caller, McpError, Server, marked_lines, runtime};
use rmcp::ServiceExt;

/// The longest message a run's node socket reads (a push's artifacts, in
/// base64, among them): 64 MiB; a longer one ends the connection.
pub const MAX_LINE: usize = 64 * 1024 * 1024;

/// Serves a run's node tools ([`NODE_TOOLS`](super::NODE_TOOLS)) on the Unix socket `path`
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
                let reader = marked_lines(tokio::io::BufReader::new(r), Some(MAX_LINE));
                if let Ok(running) = server.serve((reader, w)).await {
                    let _ = running.waiting().await;
                }
            });
        }
    })
}
