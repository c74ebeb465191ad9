//! The commands the node starts for itself, not tools: `ocx hook-poke
//! ROOT` (what Fossil's after-receive hook runs), `ocx node-daemon --root
//! ROOT` (the node's process), `ocx watch --root ROOT --record HASH
//! [--checkin HASH]` (a run's watcher), `ocx watchers --root ROOT --lock FD
//! --room ROOM` (the node's starter of watchers, which forks each), `ocx
//! workspace-ahead --root ROOT --into DIR` (the node's furnisher of
//! workspaces made ahead), `ocx forward PORT=SOCKET... --
//! PROGRAM...` (a run's ways out, before its program inside the sandbox)
//! `ocx demo-agent` (the demo runner's program) and `ocx page-server
//! SOCKET` (the page server `ocx-cgi` hands requests to). They have a clap parser of their own, reached only
//! by their names, so `ocx --help` lists tools alone.

#![allow(clippy::disallowed_methods)] // an entry point: it reads the run's variables and starts `ocx post`, as docs/architecture.md says

use clap::builder::{PathBufValueParser, StringValueParser};
use clap::{Arg, ArgMatches, Command};
use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;

/// The internal commands' names, which no tool takes.
const NAMES: &[&str] = &[
    "hook-poke",
    "node-daemon",
    "watch",
    crate::node::spawn::STARTER_COMMAND,
    crate::node::ahead::COMMAND,
    "forward",
    "demo-agent",
    super::cgi::handoff::SERVER_COMMAND,
];

/// The internal commands' own command line, hidden from `ocx --help`: the
/// node writes each of them itself (`node::hook_command`, `tools::node`,
/// `node::spawn_watcher`).
pub fn command() -> Command {
    let root = |required: bool| {
        Arg::new("root")
            .long("root")
            .value_name("ROOT")
            .required(required)
            .value_parser(PathBufValueParser::new())
            .help("The node's directory")
    };
    let hash = |id: &'static str, required: bool, help: &'static str| {
        Arg::new(id)
            .long(id)
            .value_name("HASH")
            .required(required)
            .value_parser(StringValueParser::new())
            .help(help)
    };
    Command::new("ocx")
        .about("The commands the node starts for itself")
        .disable_version_flag(true)
        .disable_help_subcommand(true)
        .subcommand_required(true)
        .subcommand(
            Command::new("hook-poke")
                .about("What Fossil's after-receive hook runs: wakes the node at ROOT")
                .arg(
                    Arg::new("root")
                        .value_name("ROOT")
                        .value_parser(PathBufValueParser::new())
                        .help("The node's directory"),
                ),
        )
        .subcommand(
            Command::new("node-daemon")
                .about("The node's process")
                .arg(root(true)),
        )
        .subcommand(
            Command::new("watch")
                .about("A run's watcher")
                .arg(root(true))
                .arg(hash("record", true, "The record the run answers"))
                .arg(hash(
                    "checkin",
                    false,
                    "The check-in the run was started for",
                )),
        )
        .subcommand(
            Command::new(crate::node::spawn::STARTER_COMMAND)
                .about("The node's starter of watchers: forks each run's watcher from itself")
                .arg(root(true))
                .arg(
                    Arg::new("lock")
                        .long("lock")
                        .value_name("FD")
                        .value_parser(clap::value_parser!(i32))
                        .help("The node's lock, held open while the starter runs"),
                )
                .arg(
                    Arg::new("room")
                        .long("room")
                        .value_name("ROOM")
                        .value_parser(StringValueParser::new())
                        .help("Room in the command line for each watcher's own"),
                ),
        )
        .subcommand(
            Command::new(crate::node::ahead::COMMAND)
                .about("The node's furnisher: makes a run's workspace ahead, for a filesystem made ahead")
                .arg(root(true))
                .arg(
                    Arg::new("into")
                        .long("into")
                        .value_name("DIR")
                        .required(true)
                        .value_parser(PathBufValueParser::new())
                        .help("An empty directory of the node's pool"),
                ),
        )
        .subcommand(
            Command::new("forward")
                .about("A run's ways out: each PORT on 127.0.0.1 forwarded to its SOCKET, then the program")
                .arg(
                    Arg::new("passage")
                        .value_name("PORT=SOCKET")
                        .num_args(0..)
                        .value_parser(StringValueParser::new())
                        .help("A loopback port inside and the socket it is forwarded to"),
                )
                .arg(
                    Arg::new("program")
                        .value_name("PROGRAM")
                        .num_args(1..)
                        .last(true)
                        .required(true)
                        .value_parser(StringValueParser::new())
                        .help("The run's program and its arguments"),
                ),
        )
        .subcommand(Command::new("demo-agent").about("The demo agent, a session runner's program"))
        .subcommand(
            Command::new(super::cgi::handoff::SERVER_COMMAND)
                .about("The page server ocx-cgi hands requests to, listening on SOCKET")
                .arg(
                    Arg::new("socket")
                        .value_name("SOCKET")
                        .required(true)
                        .value_parser(PathBufValueParser::new())
                        .help("The socket to listen on, in a directory only this account may enter"),
                ),
        )
}

/// Runs an internal command when `args` names one; `None` otherwise.
pub fn main(args: &[OsString]) -> Option<i32> {
    let word = args.get(1)?.to_str()?;
    if !NAMES.contains(&word) {
        return None;
    }
    let matches = match command().try_get_matches_from(args) {
        Ok(m) => m,
        Err(e) => return Some(super::usage(e)),
    };
    let (word, m) = matches.subcommand()?;
    Some(run(word, m))
}

fn run(word: &str, m: &ArgMatches) -> i32 {
    let path = |id: &str| m.get_one::<PathBuf>(id).cloned().unwrap_or_default();
    match word {
        "hook-poke" => {
            // Fossil holds the repository until the hook has read its input,
            // and closes the hook's output: read everything, print nothing.
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            // Where no node takes the poke, the hook keeps the git export
            // current itself, and C5 for the runs on agent machines.
            if let Some(root) = m.get_one::<PathBuf>("root")
                && !crate::node::poke(root)
            {
                crate::node::export_without_node(root, &sink);
                crate::node::keep_remote_without_node(root, &sink);
            }
            0
        }
        // Why it stopped is in the node's log, which is also its standard error.
        "node-daemon" => match crate::node::daemon::run(&path("root")) {
            Ok(()) => 0,
            Err(_) => 1,
        },
        "watch" => {
            let record = m.get_one::<String>("record").cloned().unwrap_or_default();
            let checkin = m.get_one::<String>("checkin").map(String::as_str);
            super::watch::main(&path("root"), &record, checkin)
        }
        crate::node::spawn::STARTER_COMMAND => {
            super::watch::starter::main(&path("root"), m.get_one::<i32>("lock").copied())
        }
        crate::node::ahead::COMMAND => {
            match crate::node::ahead::furnish(&path("root"), &path("into")) {
                Ok(()) => 0,
                Err(why) => {
                    super::eprint(&format!("ocx {}: {why}\n", crate::node::ahead::COMMAND));
                    1
                }
            }
        }
        "forward" => forward(m),
        "demo-agent" => super::demo::main(),
        super::cgi::handoff::SERVER_COMMAND => super::cgi::server::main(&path("socket")),
        _ => super::USAGE,
    }
}

/// `ocx forward`: becomes the run's program once its passages are bound;
/// returns only when it could not.
fn forward(m: &ArgMatches) -> i32 {
    let words = |id: &str| -> Vec<String> {
        m.get_many::<String>(id)
            .map(|v| v.cloned().collect())
            .unwrap_or_default()
    };
    let mut passages = Vec::new();
    for arg in words("passage") {
        match crate::run::egress::Passage::read(&arg) {
            Some(p) => passages.push(p),
            None => {
                super::eprint(&format!("ocx forward: {arg:?} is not PORT=SOCKET\n"));
                return super::USAGE;
            }
        }
    }
    let why = crate::run::egress::forward(&passages, &words("program"));
    super::eprint(&format!("ocx forward: {why}\n"));
    1
}
