//! The tests a checkout names in its `ocx-tests.json`, read from the
//! checkout's own file (never through a link), and the state the tools
//! keep between calls in `.ocx/agent.json`: which tests passed since the
//! last edit.

use super::paths::{beneath, open_dir, open_top, unreachable};
use super::{STATE_DIR, STATE_FILE, TESTS_FILE};
use crate::stop::Stop;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

/// One test the checkout names: `{"name": "unit", "command": "cargo test"}`,
/// the command run by `/bin/sh -c` in the checkout's top.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TestDef {
    /// The test's name, as `test` takes it.
    pub name: String,
    /// The command, run by `/bin/sh -c` in the checkout's top.
    pub command: String,
}

/// `ocx-tests.json`: `{"tests": [{"name", "command"}, ...]}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestsFile {
    tests: Vec<TestDef>,
}

/// The tests the checkout's `ocx-tests.json` names (none without the file).
/// A symbolic link there is refused: tests are read from the checkout's own file.
pub fn tests(root: &Path) -> Result<Vec<TestDef>, Stop> {
    let refuse = |why: String| {
        Stop::new(format!("cannot read {TESTS_FILE}: {why}"))
            .next(format!("make {TESTS_FILE} a file of the checkout"))
    };
    let top = open_top(root).map_err(|e| refuse(e.to_string()))?;
    let how = beneath(OFlag::O_RDONLY, Mode::empty());
    let mut file = match nix::fcntl::openat2(&top, TESTS_FILE, how) {
        Ok(fd) => std::fs::File::from(fd),
        Err(Errno::ENOENT) => return Ok(Vec::new()),
        Err(e) => return Err(refuse(unreachable(e.into()))),
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Err(refuse("it is not a regular file".into()));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| refuse(e.to_string()))?;
    let file: TestsFile = serde_json::from_slice(&bytes).map_err(|e| {
        Stop::new(format!("{TESTS_FILE} does not read: {e}")).next(format!(
            "write {TESTS_FILE} as {{\"tests\": [{{\"name\": \"NAME\", \"command\": \"COMMAND\"}}]}}"
        ))
    })?;
    Ok(file.tests)
}

/// What the tools keep between calls, in `.ocx/agent.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct State {
    /// How many edits the tools have made here; each edit adds one.
    pub edits: u64,
    /// Each test that passed, with the edit count it passed at.
    pub passed: BTreeMap<String, u64>,
}

impl State {
    /// The state kept in the checkout at `root` (empty when none is).
    pub fn load(root: &Path) -> State {
        let path = Path::new(STATE_DIR).join(STATE_FILE);
        let mut bytes = Vec::new();
        open_top(root)
            .ok()
            .and_then(|top| {
                nix::fcntl::openat2(&top, &path, beneath(OFlag::O_RDONLY, Mode::empty())).ok()
            })
            .map(std::fs::File::from)
            .filter(|f| f.metadata().is_ok_and(|m| m.is_file()))
            .and_then(|mut f| f.read_to_end(&mut bytes).ok())
            .and_then(|_| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Keeps the state in the checkout at `root`: written to a new file of
    /// its own (never through a link, never over another file) in `.ocx`
    /// (reached without following a link), then renamed into place.
    pub fn save(&self, root: &Path) -> Result<(), Stop> {
        let failed = |e: std::io::Error| {
            Stop::failed(format!("cannot keep the tools' state: {}", unreachable(e)))
        };
        let dir = open_dir(root, Path::new(STATE_DIR)).map_err(failed)?;
        let tmp = format!(
            "{STATE_FILE}.{}.tmp",
            hex::encode(rand::random::<[u8; 8]>())
        );
        let how = beneath(
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
            Mode::from_bits_truncate(0o600),
        );
        let fd = nix::fcntl::openat2(&dir, tmp.as_str(), how).map_err(|e| failed(e.into()))?;
        let mut file = std::fs::File::from(fd);
        let written = file
            .write_all(&serde_json::to_vec_pretty(self).unwrap_or_default())
            .and_then(|_| file.sync_all());
        let renamed = written.and_then(|_| {
            nix::fcntl::renameat(&dir, tmp.as_str(), &dir, STATE_FILE).map_err(Into::into)
        });
        if renamed.is_err() {
            let _ =
                nix::unistd::unlinkat(&dir, tmp.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
        }
        renamed.map_err(failed)
    }

    /// Whether test `name` passed since the last edit.
    pub fn passed_since_edit(&self, name: &str) -> bool {
        self.passed.get(name) == Some(&self.edits)
    }
}
