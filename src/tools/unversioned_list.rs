//! `unversioned_list`: the repository's unversioned files (shared files
//! kept outside check-ins): name, size, hash and when each changed.

use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `unversioned_list`: nothing.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {}

/// The unversioned files.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// Each file, by name.
    pub files: Vec<File>,
}

/// One unversioned file.
#[derive(Serialize, JsonSchema)]
pub struct File {
    /// Its name.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// The first digits of its hash.
    pub hash: String,
    /// When it last changed, UTC.
    pub changed: String,
}

/// The `unversioned_list` tool.
pub struct UnversionedList;

impl Tool for UnversionedList {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "unversioned_list";
    const SUMMARY: &'static str =
        "List the repository's unversioned files: name, size, hash, when changed.";
    const NEEDS: Needs = Needs::Any("o");
    const WRITES: bool = false;

    fn run(_: Input, call: &mut Call) -> Result<Output, Stop> {
        let path = call.repo()?.path().to_path_buf();
        let files = call
            .fossil()?
            .uv_list(&path)?
            .into_iter()
            .map(|f| File {
                name: f.name,
                size: f.size,
                hash: f.hash,
                changed: f.changed,
            })
            .collect();
        call.read("the unversioned files");
        Ok(Output { files })
    }
}
