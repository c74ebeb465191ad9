//! `ocx-mcp --connect SOCKET`: the relay from a runner's stdio MCP
//! configuration to the node socket its run's watcher serves.

use super::McpError;

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
