//! `edit`: replaces the one place a text appears in a checkout's file, or
//! with `old` empty adds text at the file's end (making the file when there
//! is none). Never deletes or renames a file.

use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use crate::tools::read::{self, Output};
use crate::tools::workspace::{self, State};
use schemars::JsonSchema;
use serde::Deserialize;
use std::io::{Seek, Write};
use std::path::Path;

/// Input of `edit`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The file, relative to the checkout's top.
    pub path: String,
    /// The exact text to replace, copied from read's text; it must appear exactly once. Empty: add new at the file's end, making the file if there is none.
    pub old: String,
    /// What replaces old.
    pub new: String,
}

/// The `edit` tool.
pub struct Edit;

impl Tool for Edit {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "edit";
    const SUMMARY: &'static str = "Replace text that appears exactly once in a file (copy old from read), or add to its end with old empty.";
    const NEEDS: Needs = Needs::Nothing;
    const WRITES: bool = true;
    const CHECKOUT: bool = true;
    const DESTRUCTIVE: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let root = workspace::root(call)?;
        let rel = workspace::relative("path", &input.path)?;
        let shown = workspace::shown(Path::new(""), &rel);
        let mut file = workspace::open_file(&root, &rel, "path", !call.dry_run)?;
        let exists = file.is_some();
        let text = match file.as_mut() {
            Some(f) => read::read_text(f, &input.path)?,
            None if input.old.is_empty() => String::new(),
            None => {
                return Err(
                    Stop::field("path", format!("{:?} does not exist", input.path))
                        .next("give old empty to make the file, or a path find or context shows"),
                );
            }
        };
        if input.old == input.new {
            return Err(Stop::field("new", "is the same as old")
                .next("give the text that should replace old"));
        }
        let (out, first, last) = workspace::replace_once(&text, &input.old, &input.new, &shown)?;
        call.read(format!("{shown} from the checkout"));
        workspace::log_change(
            call,
            format!(
                "{} {shown} lines {first}-{last}",
                if exists { "edit" } else { "create" }
            ),
        );
        if !call.dry_run {
            let mut file = match file {
                Some(f) => f,
                None => workspace::create_file(&root, &rel, "path")?,
            };
            let cannot =
                |e: std::io::Error| Stop::field("path", format!("cannot write {shown:?}: {e}"));
            file.set_len(0).map_err(cannot)?;
            file.seek(std::io::SeekFrom::Start(0)).map_err(cannot)?;
            file.write_all(out.as_bytes()).map_err(cannot)?;
            if !exists {
                call.fossil()?.add(&root, &[root.join(&rel).as_path()])?;
            }
            let mut state = State::load(&root);
            state.edits += 1;
            state.save(&root)?;
        }
        let mut o = read::lines(&shown, &out, first);
        let (t, _, l, _) = workspace::lines_from(&out, first);
        let keep = (last + 1).saturating_sub(first).max(1);
        o.text = t.split_inclusive('\n').take(keep).collect();
        o.last_line = (l as u64).min(last as u64);
        Ok(o)
    }

    fn text(o: &Output) -> String {
        format!(
            "{} lines {}-{} of {} now read:\n{}",
            o.path, o.first_line, o.last_line, o.lines, o.text
        )
    }
}
