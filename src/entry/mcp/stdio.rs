//! MCP on standard input and output (`ocx-mcp`, `ocx --mcp`): the one
//! transport on which the server may ask its client to elicit a choice.

use super::{Caller, McpError, Server, marked_lines, runtime};
use rmcp::ServiceExt;

/// Serves MCP on stdio as `caller` until the client closes it.
pub(super) fn serve(caller: Caller) -> Result<(), McpError> {
    runtime()?.block_on(async move {
        let reader = marked_lines(tokio::io::BufReader::new(tokio::io::stdin()), None);
        let running = Server::eliciting(caller)
            .serve((reader, tokio::io::stdout()))
            .await
            .map_err(|e| McpError::Start(e.to_string()))?;
        let _ = running.waiting().await;
        Ok(())
    })
}
