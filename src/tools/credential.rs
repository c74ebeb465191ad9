//! `credential`: keeps a credential for the node's runners' runs (Claude
//! Code's login, an API key, Codex's `auth.json`), read from a file the
//! node's account can read, never from a command line or the wiki; or
//! removes one; or, with neither, lists them by name. Only the node's own
//! command line reaches it: the credentials live under the node's root,
//! readable by the node's account alone, and are never shown but by name.

use crate::answer::Op;
use crate::node::credentials;
use crate::stop::Stop;
use crate::tool::{Call, Needs, Reach, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Input of `credential`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The credential's name, as a runner page names it (a-z, 0-9, - and _).
    pub name: Option<String>,
    /// The file holding it (its whole content is kept; the file is left as it is). Absolute.
    pub file: Option<String>,
    /// Remove the credential instead.
    #[serde(default)]
    pub remove: bool,
}

/// The node's credentials after the call.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// What was done: kept, removed, or nothing (a listing).
    pub done: String,
    /// The names of the credentials the node keeps.
    pub credentials: Vec<String>,
}

/// The `credential` tool.
pub struct Credential;

impl Tool for Credential {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "credential";
    const SUMMARY: &'static str = "Keep a credential for the node's runners' runs (from a file, never a command line), remove one, or list them by name.";
    const NEEDS: Needs = Needs::Any("as");
    const WRITES: bool = true;
    const DESTRUCTIVE: bool = true;
    const IDEMPOTENT: bool = true;
    const REACH: Reach = Reach::CommandLine;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let repo = call.repo()?;
        let Some(root) = crate::node::root_of(repo)? else {
            return Err(Stop::new(
                "this repository is no node: credentials are kept by the node that runs the runs",
            )
            .next("run it on the node's own repository, after ocx hook install"));
        };
        let named = |n: &Option<String>| -> Result<String, Stop> {
            let n = n.clone().ok_or_else(|| {
                Stop::field("name", "give the credential's name").next("give --name NAME")
            })?;
            if !crate::node::runner::valid_name(&n) {
                return Err(Stop::field(
                    "name",
                    format!("{n:?} is not a credential's name (a-z, 0-9, - and _, at most 40)"),
                )
                .next("give a name such as claude-login"));
            }
            Ok(n)
        };
        let done = match (&input.file, input.remove) {
            (Some(_), true) => {
                return Err(
                    Stop::field("remove", "give either file or remove, not both")
                        .next("leave one out"),
                );
            }
            (Some(file), false) => {
                let name = named(&input.name)?;
                let path = PathBuf::from(file);
                if !path.is_absolute() {
                    return Err(
                        Stop::field("file", format!("{file:?} is not an absolute path"))
                            .next("give the file's absolute path"),
                    );
                }
                let bytes = std::fs::read(&path).map_err(|e| {
                    Stop::field("file", format!("{file} cannot be read: {e}"))
                        .next("give a file the node's account can read")
                })?;
                if bytes.is_empty() {
                    return Err(Stop::field("file", format!("{file} is empty"))
                        .next("give the file holding the credential"));
                }
                if !call.dry_run {
                    credentials::keep(&root, &name, &bytes).map_err(Stop::internal)?;
                }
                call.log(Op::Fossil {
                    operation: format!("keep credential {name} under the node's root"),
                    done: !call.dry_run,
                });
                format!("kept {name}")
            }
            (None, true) => {
                let name = named(&input.name)?;
                let kept = credentials::names(&root).contains(&name);
                if !kept {
                    return Err(Stop::field(
                        "name",
                        format!("the node keeps no credential {name:?}"),
                    )
                    .next("ocx credential lists those it keeps"));
                }
                if !call.dry_run {
                    credentials::remove(&root, &name).map_err(Stop::internal)?;
                }
                call.log(Op::Fossil {
                    operation: format!("remove credential {name}"),
                    done: !call.dry_run,
                });
                format!("removed {name}")
            }
            (None, false) => {
                if input.name.is_some() {
                    return Err(Stop::field(
                        "file",
                        "give the file holding the credential (or remove)",
                    )
                    .next("give --file FILE"));
                }
                "nothing".into()
            }
        };
        call.read("the names of the node's credentials");
        Ok(Output {
            done,
            credentials: credentials::names(&root),
        })
    }
}
