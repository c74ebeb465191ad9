//! `test`: runs a test the checkout's `ocx-tests.json` names (or every one)
//! in the checkout's top, and answers whether each passed and the last 100
//! lines it wrote. A pass is kept, so `save` knows it came after the last edit.

use crate::answer::Op;
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use crate::tools::workspace::{self, State, TEST_LINES};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one test may run before it is stopped and counted as failed.
pub const TEST_WALL: Duration = Duration::from_secs(600);

/// Input of `test`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// One of the tests context lists; every test without it.
    #[serde(default)]
    pub name: Option<String>,
}

/// How the tests went.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// Whether every test run passed.
    pub passed: bool,
    /// Each test run.
    pub tests: Vec<Ran>,
}

/// One test run.
#[derive(Serialize, JsonSchema)]
pub struct Ran {
    /// The test's name.
    pub name: String,
    /// Whether it exited 0.
    pub passed: bool,
    /// Its exit code (null when a signal ended it, or it ran too long).
    pub exit_code: Option<i32>,
    /// The last 100 lines it wrote, standard output and error together.
    pub output: String,
    /// How many earlier lines were left out.
    pub lines_left_out: usize,
}

/// The `test` tool.
pub struct Test;

impl Tool for Test {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "test";
    const SUMMARY: &'static str = "Run a test context lists (or every one): whether each passed, and the last 100 lines it wrote.";
    const NEEDS: Needs = Needs::Nothing;
    const WRITES: bool = true;
    const CHECKOUT: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let root = workspace::root(call)?;
        let all = workspace::tests(&root)?;
        let chosen: Vec<_> = match &input.name {
            None => all.clone(),
            Some(n) => all.iter().filter(|t| &t.name == n).cloned().collect(),
        };
        if chosen.is_empty() {
            let names: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
            return Err(match &input.name {
                Some(n) => Stop::field("name", format!("there is no test {n:?}")).next(
                    if names.is_empty() {
                        format!(
                            "the checkout names no test; add one to {}",
                            workspace::TESTS_FILE
                        )
                    } else {
                        format!("give one of: {}", names.join(", "))
                    },
                ),
                None => Stop::new(format!(
                    "the checkout names no test in {}",
                    workspace::TESTS_FILE
                ))
                .next(format!(
                    "add {{\"tests\": [{{\"name\": \"NAME\", \"command\": \"COMMAND\"}}]}} as {}",
                    workspace::TESTS_FILE
                )),
            });
        }
        let mut out = Output {
            passed: true,
            tests: Vec::new(),
        };
        if call.dry_run {
            for t in &chosen {
                call.log(Op::Fossil {
                    operation: format!("run test {}: {}", t.name, t.command),
                    done: false,
                });
            }
            out.passed = false;
            return Ok(out);
        }
        let mut state = State::load(&root);
        for t in chosen {
            let (exit_code, text) = run_one(&root, &t.command)?;
            let passed = exit_code == Some(0);
            if passed {
                state.passed.insert(t.name.clone(), state.edits);
            } else {
                state.passed.remove(&t.name);
            }
            call.log(Op::Fossil {
                operation: format!(
                    "ran test {}: {}",
                    t.name,
                    if passed { "passed" } else { "failed" }
                ),
                done: true,
            });
            let lines: Vec<&str> = text.lines().collect();
            let left_out = lines.len().saturating_sub(TEST_LINES);
            out.passed &= passed;
            out.tests.push(Ran {
                name: t.name,
                passed,
                exit_code,
                output: lines[left_out..].join("\n"),
                lines_left_out: left_out,
            });
        }
        state.save(&root)?;
        Ok(out)
    }
}

/// Runs `command` by `/bin/sh -c` in `root`: its exit code and everything
/// it wrote, output and errors interleaved as written.
#[allow(clippy::disallowed_methods)] // the caller's own test command, in the caller's own checkout
fn run_one(root: &Path, command: &str) -> Result<(Option<i32>, String), Stop> {
    let failed = |e: std::io::Error| Stop::failed(format!("cannot run the test: {e}"));
    let (mut reader, writer) = std::io::pipe().map_err(failed)?;
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(command)
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(writer.try_clone().map_err(failed)?)
        .stderr(writer)
        .process_group(0)
        .spawn()
        .map_err(failed)?;
    let collector = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = reader.read_to_end(&mut bytes);
        bytes
    });
    let started = Instant::now();
    let group = Pid::from_raw(child.id() as i32);
    let status = loop {
        if let Some(s) = child.try_wait().map_err(failed)? {
            break Some(s);
        }
        if started.elapsed() > TEST_WALL {
            let _ = killpg(group, Signal::SIGKILL);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // What the test left running would hold its output open: it ends with it.
    let _ = killpg(group, Signal::SIGKILL);
    let bytes = collector.join().unwrap_or_default();
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if status.is_none() {
        text += &format!("\n[stopped after {} s]", TEST_WALL.as_secs());
    }
    Ok((status.and_then(|s| s.code()), text))
}
