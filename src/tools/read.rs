//! `read`: up to 200 lines of a checkout's file, exactly as they are (no
//! line numbers inside the text), so `edit`'s `old` can be copied from it.

use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use crate::tools::workspace;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::Read as _;
use std::path::Path;

/// Input of `read`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The file, relative to the checkout's top.
    pub path: String,
    /// The first line to give, from 1; 1 without it.
    #[serde(default)]
    pub from: Option<u64>,
}

/// Lines of a file, exactly as they are.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The file, from the checkout's top.
    pub path: String,
    /// Up to 200 lines from first_line, exactly as in the file: copy edit's old from here.
    pub text: String,
    /// The line text starts on.
    pub first_line: u64,
    /// The line text ends on.
    pub last_line: u64,
    /// How many lines the file has.
    pub lines: u64,
}

/// The `read` tool.
pub struct Read;

impl Tool for Read {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "read";
    const SUMMARY: &'static str =
        "Read up to 200 lines of a file exactly as they are, to copy edit's old from.";
    const NEEDS: Needs = Needs::Nothing;
    const WRITES: bool = false;
    const CHECKOUT: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let root = workspace::root(call)?;
        let rel = workspace::relative("path", &input.path)?;
        let mut file = workspace::open_file(&root, &rel, "path", false)?
            .ok_or_else(|| missing(&input.path))?;
        let text = read_text(&mut file, &input.path)?;
        call.read(format!("{} from the checkout", input.path));
        let from = input.from.unwrap_or(1).max(1) as usize;
        Ok(lines(&workspace::shown(Path::new(""), &rel), &text, from))
    }

    fn text(o: &Output) -> String {
        format!(
            "{} lines {}-{} of {}:\n{}",
            o.path, o.first_line, o.last_line, o.lines, o.text
        )
    }
}

/// Lines of `text` from `from`, as `read` and `edit` answer them.
pub fn lines(path: &str, text: &str, from: usize) -> Output {
    let (t, first, last, total) = workspace::lines_from(text, from);
    Output {
        path: path.to_string(),
        text: t,
        first_line: first as u64,
        last_line: last as u64,
        lines: total as u64,
    }
}

/// The refusal of a path naming no file.
pub fn missing(given: &str) -> Stop {
    Stop::field("path", format!("{given:?} does not exist"))
        .next("give a file the checkout holds; context and find show paths")
}

/// An open file's text, refused naming `path` when it is not UTF-8.
pub fn read_text(file: &mut std::fs::File, given: &str) -> Result<String, Stop> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|e| {
        Stop::field("path", format!("cannot read {given:?}: {e}"))
            .next("give a file the checkout holds; context and find show paths")
    })?;
    String::from_utf8(bytes).map_err(|_| {
        Stop::field("path", format!("{given:?} is not UTF-8 text"))
            .next("read and edit text files only")
    })
}
