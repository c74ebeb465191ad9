//! The `ocx` command line: `ocx [GLOBAL] TOOL [--FIELD VALUE ...]`. Each
//! tool's flags are derived from its Input's schema (no second definition);
//! `--input JSON` (or `--input -` for stdin) gives the whole input at once.
//! Exit 0 when the tool did its work, 1 when it was refused, 3 when
//! something beneath it failed, 2 when the command line does not parse.

use crate::context::{self, Context, Who};
use crate::fields::{Flag, Kind, flags_of, set, to_json};
use crate::fossil::Fossil;
use crate::input::parse_input;
use crate::registry::{self, TOOLS};
use crate::stop::Stop;
use crate::tool::Entry;
use clap::{
    Arg, ArgAction, ArgMatches, Command, builder::OsStringValueParser, parser::ValueSource,
};
use serde_json::{Map, Value};
use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;

const GLOBALS: &[&str] = &[
    "repository",
    "user",
    "json",
    "dry_run",
    "input",
    "mcp",
    "mcp_http",
    "token_file",
    "mcp_tunnel",
    "tunnel_url",
];

/// Runs the command line; answers the exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    let named = named_tool(&args);
    let ahead = named.and_then(|tool| fossil_ahead(tool, &args));
    let known = named.filter(|n| TOOLS.iter().any(|t| t.name() == *n));
    let flags: Vec<(&dyn Entry, Option<Vec<Flag>>)> = TOOLS
        .iter()
        .filter(|t| known.is_none_or(|n| n == t.name()))
        .map(|t| {
            let wanted = named.is_some_and(|n| n == t.name());
            (*t, wanted.then(|| flags_of(t.input_schema(), GLOBALS)))
        })
        .collect();
    let mut command = command(&flags);
    let matches = match command.try_get_matches_from_mut(args) {
        Ok(m) => m,
        Err(e) => return super::usage(e),
    };
    if let Some(code) = super::mcp::serve_http(&matches) {
        return code;
    }
    if let Some(code) = super::mcp::serve_tunnel(&matches) {
        return code;
    }
    let json = matches.get_flag("json");
    if matches.subcommand().is_none() && !json && matches.get_one::<OsString>("input").is_none() {
        super::print(&first_words());
        return 0;
    }
    let (tool, sub) = match matches.subcommand() {
        Some((name, sub)) => (name.to_string(), Some(sub)),
        None => ("list".to_string(), None),
    };
    let flags_of_tool = flags
        .iter()
        .find(|(t, _)| t.name() == tool)
        .and_then(|(_, f)| f.clone())
        .unwrap_or_default();
    let (repository, user, input) = match acting(&matches) {
        Ok((r, u)) => (r, u, build_input(&matches, sub, &flags_of_tool)),
        Err(stop) => (None, None, Err(stop)),
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let mut cx = Context::new(repository, cwd, Who::Local { user });
    if let Some(fossil) = ahead {
        cx = cx.with_found_fossil(fossil);
    }
    let dry_run = matches.get_flag("dry_run");
    if tool == <crate::tools::attach::Attach as crate::tool::Tool>::NAME && !dry_run {
        return attach(input, &cx, json);
    }
    // A field the command line takes as a flag is named as it is typed.
    let flag_of = |field: &str| {
        flags_of_tool
            .iter()
            .find(|f| f.path.join(".") == field)
            .map(|f| format!("--{}", f.name()))
    };
    let answer = if json {
        let answer = registry::call(&tool, input, &cx, dry_run);
        super::print(&format!(
            "{}\n",
            serde_json::to_string_pretty(&answer).unwrap_or_default()
        ));
        answer
    } else {
        let (mut answer, text) =
            registry::call_shown(&tool, input, &cx, dry_run, registry::Shown::Text);
        if let Some(stopped) = answer.stopped.as_mut()
            && let Some(flag) = stopped.field.as_deref().and_then(flag_of)
        {
            stopped.field = Some(flag);
        }
        super::print(&answer.to_text(text));
        answer
    };
    let code = exit_status(&answer);
    cx.end_fossil_ahead();
    // The process ends now: the parser, its matches, the context (its
    // repository's connection, read only, holding no lock between
    // statements) and the answer (a tree of values for `--json`) are left
    // to the exit, not freed a piece at a time.
    std::mem::forget((command, matches, cx, answer));
    code
}

/// `ocx attach`: the tool's answer, then, when it may, the run's terminal
/// joined from the person's own (the answer printed only when refused, or
/// with `--json` once the joining ends).
fn attach(input: Result<Value, Stop>, cx: &Context, json: bool) -> i32 {
    let answer = registry::call(
        <crate::tools::attach::Attach as crate::tool::Tool>::NAME,
        input,
        cx,
        false,
    );
    let joined = match (&answer.result, answer.ok) {
        (Some(r), true) => {
            let dir = PathBuf::from(r["dir"].as_str().unwrap_or_default());
            let login = r["login"].as_str().unwrap_or_default();
            Some(super::attach::join(&dir, login))
        }
        _ => None,
    };
    if json {
        super::print(&format!(
            "{}\n",
            serde_json::to_string_pretty(&answer).unwrap_or_default()
        ));
    }
    match joined {
        None => {
            if !json {
                super::print(&answer.to_text(None));
            }
            exit_status(&answer)
        }
        Some(Ok(true)) => 0,
        Some(Ok(false)) => REFUSED,
        Some(Err(e)) => {
            super::eprint(&format!("ocx attach: {e}\n"));
            REFUSED
        }
    }
}

/// The exit status a tool's answer makes: 0 when it did what was asked,
/// [`REFUSED`] when it was refused, [`FAILED`] when something beneath it
/// failed ([`USAGE`](super::USAGE) is for a command line clap cannot read).
pub fn exit_status(answer: &crate::answer::Answer) -> i32 {
    match &answer.stopped {
        None => 0,
        Some(s) if s.kind == crate::stop::StopKind::Failed => FAILED,
        Some(_) => REFUSED,
    }
}

/// The exit status of a refusal.
pub const REFUSED: i32 = 1;

/// The exit status of a failure.
pub const FAILED: i32 = 3;

/// Adds `--repository/-R FILE` and `--user/-U LOGIN`, whom and where a
/// call acts as, to `cmd`: every entry that calls tools takes them.
pub fn acting_args(cmd: Command) -> Command {
    let global = |id: &'static str, help: &'static str| {
        Arg::new(id)
            .long(id)
            .global(true)
            .value_parser(OsStringValueParser::new())
            .help(help)
            .help_heading(GLOBAL_HEADING)
    };
    cmd.arg(
        global(
            "repository",
            "The repository file (default: the checkout's)",
        )
        .short('R')
        .value_name("FILE"),
    )
    .arg(
        global(
            "user",
            "Act as this login (default: the repository's default user)",
        )
        .short('U')
        .value_name("LOGIN"),
    )
}

/// `--repository` and `--user` as [`acting_args`] read them, each refused
/// naming it when it is not UTF-8.
pub fn acting(m: &ArgMatches) -> Result<(Option<PathBuf>, Option<String>), Stop> {
    let repository = text_arg(m, "repository")?.map(PathBuf::from);
    let user = text_arg(m, "user")?;
    Ok((repository, user))
}

/// For a tool that writes and answers when done (not `attach`, which
/// holds a terminal), asked neither as a dry run nor inside a run's
/// sandbox (whose node makes its writes): `fossil`, found and started
/// now, first of all ([`Fossil::start_ahead`]), so that its start is made
/// while the command line is read and the write composed.
fn fossil_ahead(tool: &str, args: &[OsString]) -> Option<Fossil> {
    let writes = registry::find(tool).is_some_and(|t| t.writes())
        && tool != <crate::tools::attach::Attach as crate::tool::Tool>::NAME;
    if !writes || args.iter().any(|a| a == "--dry-run") || context::in_a_runs_sandbox() {
        return None;
    }
    let fossil = Fossil::locate().ok()?;
    fossil.start_ahead();
    Some(fossil)
}

/// The tool the command line names: its first word that is no global
/// option's and no global option's value, unless the help or the version
/// is asked for before it. Only that tool's flags are made, and when it is
/// a tool, only its subcommand, so a call pays for one tool's schema and
/// parser, not every tool's; otherwise every tool is named and summarized,
/// as the help lists them and clap suggests one for a misspelled name.
fn named_tool(args: &[OsString]) -> Option<&str> {
    const TAKE_A_VALUE: &[&str] = &[
        "--repository",
        "-R",
        "--user",
        "-U",
        "--input",
        "--mcp-http",
        "--token-file",
    ];
    let mut words = args.iter().skip(1).map(|a| a.to_str());
    while let Some(word) = words.next() {
        let Some(word) = word else { continue };
        if word == "--" {
            return words.next().flatten();
        }
        if TAKE_A_VALUE.contains(&word) {
            words.next();
        } else if ["-h", "--help", "-V", "--version"].contains(&word) {
            return None;
        } else if !word.starts_with('-') {
            return Some(word);
        }
    }
    None
}

/// Where the options every tool takes are listed, after the tool's own.
const GLOBAL_HEADING: &str = "Options of every tool";

/// What `ocx` alone prints: how a call is written, the tools a person
/// starts with, and where the rest are.
fn first_words() -> String {
    let mut out = String::from(
        "OCX: people and AI agents working together on a Fossil repository.\n\n\
         Usage: ocx [-R FILE] [-U LOGIN] [--json] [--dry-run] TOOL [--FIELD VALUE ...]\n\n\
         Start with:\n",
    );
    for name in registry::FIRST_TOOLS {
        if let Some(t) = registry::find(name) {
            out.push_str(&format!(
                "  {:<10} {}\n",
                t.name(),
                first_sentence(t.summary())
            ));
        }
    }
    out.push_str(
        "\nEvery tool, grouped by who uses it: ocx --help\n\
         One tool's fields: ocx TOOL --help; in full, with what it needs: ocx help TOOL\n",
    );
    out
}

/// A summary's first sentence, for a list a line a tool.
fn first_sentence(summary: &str) -> &str {
    summary
        .find(": ")
        .or_else(|| summary.find(". "))
        .map_or(summary, |i| &summary[..i])
        .trim_end_matches('.')
}

/// The tools as `ocx --help` lists them: by who uses them, a line a tool.
fn grouped_tools() -> String {
    let mut out = String::new();
    for g in registry::GROUPS {
        out.push_str(&format!("{} ({}):\n", g.title, g.about));
        for name in g.tools {
            if let Some(t) = registry::find(name) {
                out.push_str(&format!(
                    "  {:<17} {}\n",
                    t.name(),
                    first_sentence(t.summary())
                ));
            }
        }
        out.push('\n');
    }
    out
}

/// The command line's parser: every tool a subcommand, with its flags
/// where they were made (`None`: the tool is only named and summarized).
fn command(flags: &[(&dyn Entry, Option<Vec<Flag>>)]) -> Command {
    let cmd = Command::new("ocx")
        .about("OCX: people and AI agents working together on a Fossil repository")
        .after_help(
            "Also: ocx --mcp [--repository FILE] [--user LOGIN] (MCP over stdio), and \
             ocx --mcp-ollama URL --model NAME --steps N --system TEXT [--context TOKENS] \
             [--max-output BYTES] (OCX's agent for local models, a runner's command).",
        )
        .disable_help_subcommand(true)
        .version(env!("CARGO_PKG_VERSION"))
        .help_template(
            "{about-with-newline}\n{usage-heading} {usage}\n\n{before-help}Options:\n{options}\n{after-help}",
        )
        .before_help(grouped_tools())
        .subcommand_value_name("TOOL")
        .arg(
            Arg::new("input")
                .long("input")
                .global(true)
                .value_parser(OsStringValueParser::new())
                .value_name("JSON")
                .help("The tool's whole input as one JSON object, or - to read it from stdin")
                .help_heading(GLOBAL_HEADING),
        )
        .arg(
            Arg::new("json")
                .long("json")
                .global(true)
                .action(ArgAction::SetTrue)
                .help("Print the answer as JSON")
                .help_heading(GLOBAL_HEADING),
        )
        .arg(
            Arg::new("dry_run")
                .long("dry-run")
                .global(true)
                .action(ArgAction::SetTrue)
                .help("Check everything and say what would be written, writing nothing")
                .help_heading(GLOBAL_HEADING),
        );
    let mut cmd = super::mcp::http_args(acting_args(cmd));
    for (tool, fl) in flags {
        let mut sub = Command::new(tool.name()).about(tool.summary());
        for f in fl.iter().flatten() {
            let id = f.id();
            let long = f.name();
            let mut arg = Arg::new(id.clone())
                .long(long)
                .help(f.doc.clone())
                .value_parser(OsStringValueParser::new());
            arg = match f.kind {
                Kind::Boolean => arg
                    .num_args(0..=1)
                    .default_missing_value("true")
                    .value_name("true|false"),
                Kind::List => arg.action(ArgAction::Append).value_name("ITEMS"),
                Kind::Json => arg.value_name("JSON"),
                Kind::Integer => arg.value_name("N"),
                Kind::Text => arg.value_name("TEXT"),
            };
            sub = sub.arg(arg);
            if f.positional {
                sub = sub.arg(
                    Arg::new(format!("{id}#positional"))
                        .value_parser(OsStringValueParser::new())
                        .help(format!("the same as --{}", f.path[0].replace('_', "-")))
                        .value_name(f.path[0].to_uppercase())
                        .conflicts_with(id),
                );
            }
        }
        cmd = cmd.subcommand(sub);
    }
    cmd
}

/// A global argument's text, refused naming it when it is not UTF-8.
fn text_arg(m: &ArgMatches, id: &str) -> Result<Option<String>, Stop> {
    match m.get_one::<OsString>(id) {
        None => Ok(None),
        Some(v) => v.to_str().map(|s| Some(s.to_string())).ok_or_else(|| {
            Stop::field(id, "is not UTF-8").next(format!("give --{id} as UTF-8 text"))
        }),
    }
}

/// The tool's input: `--input`'s object, with each flag given set over it.
fn build_input(m: &ArgMatches, sub: Option<&ArgMatches>, flags: &[Flag]) -> Result<Value, Stop> {
    let mut input = match m.get_one::<OsString>("input") {
        None => Value::Object(Map::new()),
        Some(v) if v == "-" => {
            let mut bytes = Vec::new();
            std::io::stdin()
                .read_to_end(&mut bytes)
                .map_err(|e| Stop::field("input", format!("cannot read stdin: {e}")))?;
            parse_input(&bytes)?
        }
        Some(v) => parse_input(v.as_encoded_bytes())?,
    };
    let Some(sub) = sub else { return Ok(input) };
    for f in flags {
        let id = f.id();
        let field = f.path.join(".");
        let mut raw: Vec<&OsString> = Vec::new();
        for key in [id.clone(), format!("{id}#positional")] {
            if sub.try_contains_id(&key).unwrap_or(false)
                && sub.value_source(&key) == Some(ValueSource::CommandLine)
            {
                raw.extend(sub.get_many::<OsString>(&key).into_iter().flatten());
            }
        }
        if raw.is_empty() {
            continue;
        }
        let texts: Vec<&str> = raw
            .iter()
            .map(|v| {
                v.to_str().ok_or_else(|| {
                    Stop::field(field.clone(), "is not UTF-8").next("give the value as UTF-8 text")
                })
            })
            .collect::<Result<_, _>>()?;
        let value = to_json(&field, f.kind, &texts)?;
        set(&mut input, &f.path, value, &field)?;
    }
    Ok(input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_exits_1_and_a_failure_3() {
        let answer = |kind: Option<crate::stop::StopKind>| crate::answer::Answer {
            ok: kind.is_none(),
            tool: "post".into(),
            dry_run: false,
            log: Vec::new(),
            result: None,
            stopped: kind.map(|kind| crate::answer::Stopped {
                kind,
                field: None,
                reason: "why".into(),
            }),
            next_step: None,
            took_ms: 0,
        };
        assert_eq!(exit_status(&answer(None)), 0);
        assert_eq!(
            exit_status(&answer(Some(crate::stop::StopKind::Refused))),
            REFUSED
        );
        assert_eq!(
            exit_status(&answer(Some(crate::stop::StopKind::Failed))),
            FAILED
        );
    }

    #[test]
    fn every_tools_flags_build_a_valid_command_line() {
        let flags: Vec<(&dyn Entry, Option<Vec<Flag>>)> = TOOLS
            .iter()
            .map(|t| (*t, Some(flags_of(t.input_schema(), GLOBALS))))
            .collect();
        command(&flags).debug_assert();
    }

    #[test]
    fn the_tool_named_is_found_past_the_global_options_and_their_values() {
        let args = |a: &[&str]| -> Vec<OsString> { a.iter().map(OsString::from).collect() };
        let named = |a: &[&str]| named_tool(&args(a)).map(str::to_string);
        assert_eq!(
            named(&["ocx", "post", "--to", "x"]).as_deref(),
            Some("post")
        );
        assert_eq!(
            named(&["ocx", "-R", "list", "--user", "post", "thread"]).as_deref(),
            Some("thread")
        );
        assert_eq!(
            named(&["ocx", "--json", "--dry-run", "stop"]).as_deref(),
            Some("stop")
        );
        assert_eq!(
            named(&["ocx", "--repository=r.fossil", "list"]).as_deref(),
            Some("list")
        );
        assert_eq!(named(&["ocx", "--help"]), None);
        assert_eq!(named(&["ocx", "--help", "post"]), None);
        assert_eq!(named(&["ocx", "-V", "post"]), None);
        assert_eq!(named(&["ocx", "post", "--help"]).as_deref(), Some("post"));
        assert_eq!(named(&["ocx"]), None);
    }
}
