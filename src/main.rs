//! One binary, four entry points chosen by the name it is started under:
//! `ocx` (the command line), `ocx-cgi` (Fossil's /ext page), `ocx-mcp`
//! (MCP over stdio) and `git` (the git export over smart HTTP, in Fossil's
//! extroot). `ocx --mcp` is `ocx-mcp` too; `ocx --mcp-ollama` is OCX's own
//! agent for local models, MCP's caller rather than its server.

use std::path::Path;

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let name = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("ocx")
        .to_string();
    let code = match name.as_str() {
        "ocx-cgi" | "ocx-cgi-next" => ocx::entry::cgi::main(),
        "ocx-mcp" => ocx::entry::mcp::main(),
        "git" => ocx::entry::git::main(),
        _ if args.get(1).is_some_and(|a| a == "--mcp") => ocx::entry::mcp::main(),
        _ if args.get(1).is_some_and(|a| a == "--mcp-ollama") => {
            ocx::entry::ollama::main(&args[1..])
        }
        _ if let Some(code) = ocx::entry::internal::main(&args) => code,
        _ => ocx::entry::cli::main(args),
    };
    std::process::exit(code);
}
