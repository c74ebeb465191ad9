//! `attach`: joins a run's terminal at its node (protocol v1, C3), to
//! watch its agent work and take the keyboard. Only on the node's host,
//! as a login holding admin or setup and as the account the node runs as
//! (the terminal's socket is under the node's root, its owner's alone).
//! The tool checks who, where and which run, and answers the terminal's
//! place; the command line then joins it, since only a person's own
//! terminal can (`crate::entry::attach`). The node posts each attachment
//! in the record's place when it ends: who, when, for how long.

use crate::stop::Stop;
use crate::tool::{Call, Needs, Reach, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Input of `attach`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The run: its record, by hash or a prefix of 10+ hex digits.
    pub run: String,
}

/// The terminal to join.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The run's record, in full.
    pub record: String,
    /// The login that joins, which the node's post names.
    pub login: String,
    /// The run's directory at the node, which holds its terminal's socket.
    pub dir: String,
    /// The key that leaves.
    pub leave: String,
}

/// The `attach` tool.
pub struct Attach;

impl Tool for Attach {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "attach";
    const SUMMARY: &'static str = "Join a run's terminal at its node: see what it shows, type to it; Ctrl-] leaves, and the node posts who attached and for how long.";
    const NEEDS: Needs = Needs::Any("as");
    const WRITES: bool = true;
    const REACH: Reach = Reach::CommandLine;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let standing = super::stop::open_record(call, "run", &input.run)?;
        let login = call.caller()?.login.clone();
        let repo = call.repo()?;
        let root = crate::node::root_of(repo)?
            .or_else(|| crate::node::machine_root(repo))
            .ok_or_else(|| {
                Stop::field("run", "this repository is no node's: a run's terminal is joined on the node's host, in its served repository")
                    .next("run ocx attach on the host that serves the repository, naming it with --repository")
            })?;
        node_account(&root)?;
        let dir = crate::node::config::NodeConfig::run_dir(&root, &standing.hash);
        call.read("the run's terminal at the node");
        if !is_socket(&dir.join(crate::run::terminal::SOCKET)) {
            let why = match crate::node::watcher_alive(&dir) {
                true => {
                    "the run has no terminal: its runner's page does not say \"terminal\": true"
                }
                false => "the run is not running at this node",
            };
            return Err(Stop::field("run", why).next(
                "ocx console lists the running runs; those with a terminal say how to attach",
            ));
        }
        Ok(Output {
            record: standing.hash,
            login,
            dir: dir.display().to_string(),
            leave: "Ctrl-]".into(),
        })
    }

    fn text(o: &Output) -> String {
        format!(
            "joins the terminal of the run {} as {} ({} leaves)\n",
            &o.record[..16.min(o.record.len())],
            o.login,
            o.leave
        )
    }
}

/// Refuses a caller that is not the account the node at `root` runs as.
fn node_account(root: &Path) -> Result<(), Stop> {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(root).map(|m| m.uid()).map_err(|e| {
        Stop::field(
            "run",
            format!("the node's root {} cannot be read: {e}", root.display()),
        )
        .next("run ocx attach as the account the node runs as")
    })?;
    let me = nix::unistd::geteuid().as_raw();
    if owner != me {
        return Err(Stop::field(
            "run",
            format!(
                "only the account the node runs as (uid {owner}) may join a run's terminal; this is uid {me}"
            ),
        )
        .next("run ocx attach as the node's account"));
    }
    Ok(())
}

/// Whether `path` is a socket, looked at and never followed.
fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}
