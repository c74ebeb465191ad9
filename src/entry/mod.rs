//! The entry points: each turns its input into JSON, calls the registry,
//! and renders the one Answer. No logic of their own beyond that.

pub mod attach;
pub mod cgi;
pub mod cli;
pub mod demo;
pub mod git;

pub mod internal;
pub mod mcp;
pub mod ollama;
pub mod watch;

use std::io::Write;

/// Writes `text` to standard output, ignoring a closed pipe (a reader that
/// went away is no reason to panic).
pub fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// The exit status of a command line that does not parse.
pub const USAGE: i32 = 2;

/// Says what clap found wrong with a command line (or the help asked for)
/// and answers the exit status: [`USAGE`], or 0 for `--help`.
pub fn usage(e: clap::Error) -> i32 {
    let _ = e.print();
    if e.use_stderr() { USAGE } else { 0 }
}

/// Writes `text` to standard error, ignoring failure.
pub fn eprint(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}
