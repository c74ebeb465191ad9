//! `ocx-mcp` (and `ocx --mcp`): MCP over stdio, and `--mcp-http`. Not
//! built yet: it says so and exits.

/// Says MCP is not built yet.
pub fn main() -> i32 {
    super::eprint("ocx-mcp: MCP is not built yet; use the ocx command line\n");
    2
}
