//! `find`: each line of the checkout holding a text, matched exactly, case
//! and all: its path, its line number and its text, at most 50, and how
//! many more there are. Walks and searches with ripgrep's own crates.

use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use crate::tools::workspace::{self, FIND_MATCHES};
use grep::regex::RegexMatcherBuilder;
use grep::searcher::{BinaryDetection, SearcherBuilder, sinks::Lossy};
use ignore::WalkState;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Mutex;

/// Input of `find`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The text to look for, matched exactly, case and all, within one line.
    pub text: String,
    /// A file or directory to search under, relative to the checkout's top; the whole checkout without it.
    #[serde(default)]
    pub path: Option<String>,
}

/// The lines found.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// Each line holding the text, at most 50, by path then line.
    pub matches: Vec<Match>,
    /// How many more lines hold it beyond those given.
    pub more: usize,
}

/// One line holding the text.
#[derive(Serialize, JsonSchema, Debug, Clone, PartialEq, Eq)]
pub struct Match {
    /// Its file, from the checkout's top.
    pub path: String,
    /// Its line number, from 1.
    pub line: u64,
    /// The line's text, without its line ending.
    pub text: String,
}

/// The `find` tool.
pub struct Find;

/// The longest line text `find` gives, in characters.
const LINE_MAX: usize = 300;

impl Tool for Find {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "find";
    const SUMMARY: &'static str = "Find each line of the checkout holding a text, exactly: path, line number and text, at most 50.";
    const NEEDS: Needs = Needs::Nothing;
    const WRITES: bool = false;
    const CHECKOUT: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let root = workspace::root(call)?;
        let under = match &input.path {
            Some(p) => workspace::confine(&root, "path", p)?,
            None => root.clone(),
        };
        call.read("the checkout's files");
        search(&root, &under, &input.text)
    }
}

/// Every line under `under` (inside the checkout at `root`) holding `text`:
/// the first [`FIND_MATCHES`] by path then line, and how many more.
pub fn search(root: &std::path::Path, under: &std::path::Path, text: &str) -> Result<Output, Stop> {
    if text.is_empty() {
        return Err(Stop::field("text", "is empty").next("give the text to look for"));
    }
    if text.contains('\n') {
        return Err(
            Stop::field("text", "holds a line break; find matches within one line")
                .next("give one line of the text, then read around what it finds"),
        );
    }
    let matcher = RegexMatcherBuilder::new()
        .fixed_strings(true)
        .build(text)
        .map_err(|e| Stop::field("text", format!("cannot be searched for: {e}")))?;
    let found: Mutex<Vec<(PathBuf, usize, Vec<Match>)>> = Mutex::new(Vec::new());
    ignore::WalkBuilder::new(under)
        .hidden(true)
        .git_ignore(true)
        .require_git(false)
        .follow_links(false)
        .build_parallel()
        .run(|| {
            let matcher = matcher.clone();
            let found = &found;
            let mut searcher = SearcherBuilder::new()
                .binary_detection(BinaryDetection::quit(0))
                .line_number(true)
                .build();
            Box::new(move |entry| {
                let Ok(entry) = entry else {
                    return WalkState::Continue;
                };
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    return WalkState::Continue;
                }
                let path = entry.path();
                let shown = workspace::shown(root, path);
                if crate::fossil::checkout::FILES.contains(&shown.as_str()) {
                    return WalkState::Continue;
                }
                let mut count = 0usize;
                let mut first = Vec::new();
                let _ = searcher.search_path(
                    &matcher,
                    path,
                    Lossy(|line, text: &str| {
                        count += 1;
                        if first.len() < FIND_MATCHES {
                            first.push(Match {
                                path: shown.clone(),
                                line,
                                text: text
                                    .trim_end_matches(['\n', '\r'])
                                    .chars()
                                    .take(LINE_MAX)
                                    .collect(),
                            });
                        }
                        Ok(true)
                    }),
                );
                if count > 0
                    && let Ok(mut f) = found.lock()
                {
                    f.push((path.to_path_buf(), count, first));
                }
                WalkState::Continue
            })
        });
    let mut files = found.into_inner().unwrap_or_default();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut matches = Vec::new();
    let mut more = 0usize;
    for (_, count, first) in files {
        let room = FIND_MATCHES - matches.len();
        more += count - count.min(room);
        matches.extend(first.into_iter().take(room));
    }
    Ok(Output { matches, more })
}
