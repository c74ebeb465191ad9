//! `context`: what the agent works on: the run's objective (none outside a
//! run), its working branch, the files changed and not saved, and the tests
//! it may run with whether each passed since the last edit.

use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use crate::tools::workspace::{self, State};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha3::{Digest, Sha3_256};
use std::path::Path;

/// Input of `context`: nothing.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {}

/// What the agent works on.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The run's objective; null outside a run.
    pub objective: Option<String>,
    /// The checkout the tools act on.
    pub checkout: String,
    /// The branch save commits on.
    pub working_branch: String,
    /// The branch the checkout is on now.
    pub current_branch: String,
    /// Each file changed and not saved: its state and its path.
    pub changed: Vec<Changed>,
    /// The tests test may run, from the checkout's ocx-tests.json.
    pub tests: Vec<TestState>,
}

/// A file changed and not saved.
#[derive(Serialize, JsonSchema)]
pub struct Changed {
    /// EDITED, ADDED, DELETED, ...
    pub state: String,
    /// Its path from the checkout's top.
    pub path: String,
}

/// A test and whether it passed since the last edit.
#[derive(Serialize, JsonSchema)]
pub struct TestState {
    /// Its name, as test takes it.
    pub name: String,
    /// Its command, run by /bin/sh -c in the checkout's top.
    pub command: String,
    /// Whether it passed since the last edit (save needs every test to).
    pub passed_since_edit: bool,
}

/// The `context` tool.
pub struct Context;

/// The branch `save` commits on for `login` in the checkout at `root`:
/// `agent/LOGIN-XXXXXXXX`, the eight hex digits the first of the SHA3-256
/// of the checkout's path, so each checkout keeps its own branch.
pub fn working_branch(login: &str, root: &Path) -> String {
    let digest = Sha3_256::digest(root.to_string_lossy().as_bytes());
    format!("agent/{login}-{}", &hex::encode(digest)[..8])
}

impl Tool for Context {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "context";
    const SUMMARY: &'static str = "What you work on: the objective, the working branch, the files changed and not saved, and the tests you may run.";
    const NEEDS: Needs = Needs::Nothing;
    const WRITES: bool = false;
    const CHECKOUT: bool = true;

    fn run(_: Input, call: &mut Call) -> Result<Output, Stop> {
        let root = workspace::root(call)?;
        let login = call.caller()?.login.clone();
        let fossil = call.fossil()?;
        let changed = fossil
            .changes(&root)?
            .into_iter()
            .map(|(state, path)| Changed { state, path })
            .collect();
        let current_branch = fossil.current_branch(&root)?;
        let state = State::load(&root);
        let tests = workspace::tests(&root)?
            .into_iter()
            .map(|t| TestState {
                passed_since_edit: state.passed_since_edit(&t.name),
                name: t.name,
                command: t.command,
            })
            .collect();
        call.read("the checkout's changes, branch and tests");
        Ok(Output {
            objective: None,
            checkout: root.display().to_string(),
            working_branch: working_branch(&login, &root),
            current_branch,
            changed,
            tests,
        })
    }
}
