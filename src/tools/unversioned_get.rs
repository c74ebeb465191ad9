//! `unversioned_get`: one unversioned file's content: as text when it is
//! UTF-8, else as base64.

use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use base64::Engine;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The largest file `unversioned_get` answers, in bytes.
pub const GET_MAX: u64 = 4 * 1024 * 1024;

/// Input of `unversioned_get`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The file's name, as unversioned_list gives it.
    pub name: String,
}

/// A file's content.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The file's name.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its content when it is UTF-8 text; null otherwise.
    pub text: Option<String>,
    /// Its content as base64 when it is not UTF-8 text; null otherwise.
    pub base64: Option<String>,
}

/// The `unversioned_get` tool.
pub struct UnversionedGet;

impl Tool for UnversionedGet {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "unversioned_get";
    const SUMMARY: &'static str =
        "Get an unversioned file: its text, or base64 when it is not text.";
    const NEEDS: Needs = Needs::Any("o");
    const WRITES: bool = false;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        super::not_an_option("name", &input.name)?;
        let path = call.repo()?.path().to_path_buf();
        let fossil = call.fossil()?;
        let files = fossil.uv_list(&path)?;
        let Some(file) = files.iter().find(|f| f.name == input.name) else {
            return Err(Stop::field(
                "name",
                format!("there is no unversioned file {:?}", input.name),
            )
            .next("give a name unversioned_list gives"));
        };
        if file.size > GET_MAX {
            return Err(Stop::field(
                "name",
                format!(
                    "{:?} has {} bytes, more than {GET_MAX}",
                    input.name, file.size
                ),
            )
            .next("fetch it with fossil uv export from a clone"));
        }
        let bytes = fossil.uv_get(&path, &input.name)?;
        call.read(format!("unversioned file {:?}", input.name));
        let size = bytes.len() as u64;
        Ok(match String::from_utf8(bytes) {
            Ok(text) if !text.contains('\0') => Output {
                name: input.name,
                size,
                text: Some(text),
                base64: None,
            },
            Ok(text) => Output {
                name: input.name,
                size,
                text: None,
                base64: Some(base64::engine::general_purpose::STANDARD.encode(text)),
            },
            Err(e) => Output {
                name: input.name,
                size,
                text: None,
                base64: Some(base64::engine::general_purpose::STANDARD.encode(e.into_bytes())),
            },
        })
    }
}
