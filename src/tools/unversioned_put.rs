//! `unversioned_put`: stores an unversioned file, given as text or base64,
//! as the caller, replacing one of the same name.

use crate::answer::Op;
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use base64::Engine;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `unversioned_put`: the name and the content, as text or base64.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The file's name: no spaces, no leading slash, no `..`.
    pub name: String,
    /// The content as text; give this or base64.
    #[serde(default)]
    pub text: Option<String>,
    /// The content as base64, for a file that is not text; give this or text.
    #[serde(default)]
    pub base64: Option<String>,
}

/// What was stored.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The file's name.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// Whether a file of that name was replaced.
    pub replaced: bool,
}

/// The `unversioned_put` tool.
pub struct UnversionedPut;

impl Tool for UnversionedPut {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "unversioned_put";
    const SUMMARY: &'static str =
        "Store an unversioned file (text or base64) as yourself, replacing one of the same name.";
    const NEEDS: Needs = Needs::Any("y");
    const WRITES: bool = true;
    const DESTRUCTIVE: bool = true;
    const IDEMPOTENT: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        super::writing::refused_under_review(call, "an unversioned file")?;
        super::not_an_option("name", &input.name)?;
        let bad_name = input.name.is_empty()
            || input.name.chars().any(char::is_whitespace)
            || input.name.starts_with('/')
            || input.name.split('/').any(|p| p == ".." || p.is_empty());
        if bad_name {
            return Err(Stop::field(
                "name",
                format!("{:?} is not a name Fossil takes", input.name),
            )
            .next("give a name without spaces, like docs/notes.txt"));
        }
        let bytes = match (&input.text, &input.base64) {
            (Some(t), None) => t.as_bytes().to_vec(),
            (None, Some(b)) => base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .map_err(|e| {
                    Stop::field("base64", format!("is not base64: {e}"))
                        .next("give the content as standard base64, or as text")
                })?,
            _ => {
                return Err(Stop::field("text", "give exactly one of text and base64")
                    .next("give the content as text, or as base64 for a file that is not text"));
            }
        };
        let path = call.repo()?.path().to_path_buf();
        let login = call.caller()?.login.clone();
        let fossil = call.fossil()?.clone();
        let replaced = fossil.uv_list(&path)?.iter().any(|f| f.name == input.name);
        call.log(Op::Fossil {
            operation: format!(
                "store unversioned file {:?} ({} bytes) as {login}",
                input.name,
                bytes.len()
            ),
            done: !call.dry_run,
        });
        if !call.dry_run {
            fossil.uv_put(&path, &input.name, &bytes, &login)?;
        }
        Ok(Output {
            name: input.name,
            size: bytes.len() as u64,
            replaced,
        })
    }
}
