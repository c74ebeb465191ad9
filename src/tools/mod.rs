//! The tools, one file each: its Input, its Output, what it needs, its run.
//! A tool never knows which entry point called it and never prints.

pub mod accept;
pub mod adopt;
pub mod approve;
pub mod asking;
pub mod attach;
pub mod audit;
pub mod collect;
pub mod console;
pub mod context;
pub mod create;
pub mod credential;
pub mod decide;
pub mod edit;
pub mod export;
pub mod find;
pub mod help;
pub mod hook;
pub mod list;
pub mod logins;
pub mod lost;
pub mod machine;
pub mod node;
pub mod on_server;
pub mod pattern;
pub mod patterns;
pub mod post;
pub mod project;
pub mod push;
pub mod questions;
pub mod read;
pub mod receipt;
pub mod register;
pub mod release;
pub mod rollback;
pub mod run;
pub mod run_login;
pub mod run_report;
pub mod runner;
pub mod save;
pub mod send_runs;
pub mod served;
pub mod stage;
pub mod status;
pub mod stop;
pub mod tag_messages;
pub mod test;
pub mod thread;
pub mod unaudited;
pub mod unversioned_get;
pub mod unversioned_list;
pub mod unversioned_put;
pub mod upstream;
pub mod verdicts;
pub mod wiki_edit;
pub mod wiki_read;
pub mod workspace;
pub mod writing;

use crate::stop::Stop;
use schemars::JsonSchema;
use serde::Deserialize;

/// The input of a tool that acts on one record (`stop`, `lost`).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OneRecord {
    /// The record, by hash or a prefix of 10+ hex digits.
    pub record: String,
}

/// Refuses `value` of `field` when it begins with `-`: it reaches `fossil`'s
/// command line, where Fossil would read it as an option (`--chdir=DIR`
/// among them) wherever it stood.
pub fn not_an_option(field: &str, value: &str) -> Result<(), Stop> {
    if value.starts_with('-') {
        return Err(Stop::field(
            field,
            format!("{value:?} begins with '-', which fossil would read as an option"),
        )
        .next(format!("give {field} without a leading '-'")));
    }
    Ok(())
}

/// `command` (an `ocx` command line) as a person runs it next, as printed:
/// naming the repository the call acted on, and the caller with `--user`
/// where the repository's default user is someone else or no one.
pub fn as_run_next(call: &crate::tool::Call, command: &str) -> String {
    let Ok(repo) = call.repo() else {
        return command.to_string();
    };
    let mut line = format!(
        "{command} -R {}",
        shlex::try_quote(&repo.path().to_string_lossy()).unwrap_or_default()
    );
    if let Ok(caller) = call.cx.caller()
        && repo.default_user().ok().flatten().as_deref() != Some(caller.login.as_str())
    {
        line.push_str(&format!(" --user {}", caller.login));
    }
    line
}
