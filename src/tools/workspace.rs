//! What the agent's tools share: the checkout they act on, paths confined
//! to it (each file opened once, beneath the checkout's top, never through
//! a symbolic link), the tests its `ocx-tests.json` names, the state kept
//! between calls (which tests passed since the last edit) in
//! `.ocx/agent.json`, and the one exact-match replacement `edit` and
//! `wiki_edit` use. The node serving a run never acts on its workspace.
//! This file finds the checkout; `paths`, `checks` (tests and state) and
//! `replace` hold the rest.

mod checks;
mod paths;
mod replace;

pub use checks::{State, TestDef, tests};
pub use paths::{confine, create_file, open_file, relative};
pub use replace::{Found, closest_lines, find_once, line_of, lines_from, replace_once};

use crate::stop::Stop;
use crate::tool::Call;
use std::path::{Path, PathBuf};

/// The file in a checkout's top directory naming its tests.
pub const TESTS_FILE: &str = "ocx-tests.json";
/// The directory, in the checkout's top, where the tools keep their state;
/// Fossil passes over it, as over every name starting with a dot.
pub const STATE_DIR: &str = ".ocx";
/// The state file inside [`STATE_DIR`].
pub const STATE_FILE: &str = "agent.json";
/// How many lines `read` gives at most.
pub const READ_LINES: usize = 200;
/// How many matches `find` gives at most.
pub const FIND_MATCHES: usize = 50;
/// How many of a test's last lines `test` gives.
pub const TEST_LINES: usize = 100;

/// The checkout the call is made in: its top directory, made canonical.
pub fn root(call: &Call) -> Result<PathBuf, Stop> {
    if call.cx.run().is_some() {
        return Err(Stop::new(
            "the node does not act on a run's workspace: its tools run inside the run's sandbox",
        )
        .next("call this tool on the run's own server (ocx --mcp in the workspace)"));
    }
    let c = call.cx.checkout().ok_or_else(|| {
        Stop::new("this directory is in no Fossil checkout")
            .next("start OCX inside a checkout (`fossil open REPO`), then call the tool again")
    })?;
    c.root
        .canonicalize()
        .map_err(|e| Stop::failed(format!("cannot read the checkout: {e}")))
}

/// A path inside `root` as the tools show it: relative, with `/`.
pub fn shown(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

/// Logs a change to the checkout's files (or, on a dry run, one it would make).
pub fn log_change(call: &mut Call, what: String) {
    let done = !call.dry_run;
    call.log(crate::answer::Op::Fossil {
        operation: what,
        done,
    });
}
