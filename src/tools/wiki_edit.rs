//! `wiki_edit`: a wiki page edited as a file: the one place a text appears
//! replaced, or with `old` empty text added at the page's end (making the
//! page). The new version is composed by OCX and stored as the caller.

use crate::fossil::artifact::{self, WikiPage};
use crate::fossil::store::Batch;
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use crate::tools::workspace;
use crate::tools::writing::write;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `wiki_edit`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The page's name, as the wiki shows it.
    pub page: String,
    /// The exact text to replace, copied from wiki_read's text; it must appear exactly once. Empty: add new at the page's end, making the page if there is none.
    pub old: String,
    /// What replaces old.
    pub new: String,
}

/// The page's new version.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The page's name.
    pub page: String,
    /// The new version's full hash (null on a dry run).
    pub version: Option<String>,
    /// The lines changed, as wiki_read gives them.
    pub text: String,
    /// The line text starts on.
    pub first_line: u64,
    /// The line text ends on.
    pub last_line: u64,
    /// How many lines the page has now.
    pub lines: u64,
}

/// The `wiki_edit` tool.
pub struct WikiEdit;

impl Tool for WikiEdit {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "wiki_edit";
    const SUMMARY: &'static str = "Edit a wiki page as a file: replace text that appears exactly once (copy old from wiki_read), or add to its end with old empty.";
    const NEEDS: Needs = Needs::Any("k");
    const WRITES: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        super::not_an_option("page", &input.page)?;
        if input.page.trim().is_empty() || input.page.contains(['\n', '\r']) {
            return Err(Stop::field("page", "must be one line, not empty")
                .next("give the page's name as the wiki shows it"));
        }
        call.read(format!("wiki page {:?}", input.page));
        let repo = call.repo()?;
        let current = repo.wiki_page(&input.page)?;
        if current.is_none() && !input.old.is_empty() {
            return Err(
                Stop::field("page", format!("there is no wiki page {:?}", input.page))
                    .next("give old empty to make the page, or a page that exists"),
            );
        }
        if input.old == input.new {
            return Err(Stop::field("new", "is the same as old")
                .next("give the text that should replace old"));
        }
        let text = current.as_ref().map(|p| p.text.as_str()).unwrap_or("");
        let what = format!("wiki page {:?}", input.page);
        let (out, first, last) = workspace::replace_once(text, &input.old, &input.new, &what)?;
        let caller = call.caller()?.clone();
        let policy = repo.hash_policy()?;
        let date = artifact::now();
        let bytes = WikiPage {
            date: &date,
            name: &input.page,
            mimetype: current
                .as_ref()
                .map(|p| p.mimetype.as_str())
                .unwrap_or("text/x-markdown"),
            parent: current.as_ref().map(|p| p.hash.as_str()),
            user: &caller.login,
            text: &out,
        }
        .compose();
        let mut batch = Batch::default();
        let hash = batch.add("wiki page", bytes, policy);
        write(call, &batch, true)?;
        let (t, _, _, total) = workspace::lines_from(&out, first);
        let keep = (last + 1).saturating_sub(first).max(1);
        Ok(Output {
            page: input.page,
            version: (!call.dry_run).then_some(hash),
            text: t.split_inclusive('\n').take(keep).collect(),
            first_line: first as u64,
            last_line: last as u64,
            lines: total as u64,
        })
    }

    fn text(o: &Output) -> String {
        format!(
            "{} lines {}-{} of {} now read:\n{}",
            o.page, o.first_line, o.last_line, o.lines, o.text
        )
    }
}
