//! `wiki_read`: up to 200 lines of a wiki page's newest version, exactly as
//! they are, so `wiki_edit`'s `old` can be copied from them.

use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use crate::tools::workspace;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `wiki_read`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The page's name, as the wiki shows it.
    pub page: String,
    /// The first line to give, from 1; 1 without it.
    #[serde(default)]
    pub from: Option<u64>,
}

/// Lines of a wiki page.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The page's name.
    pub page: String,
    /// Its newest version's full hash.
    pub version: String,
    /// Its mimetype.
    pub mimetype: String,
    /// Up to 200 lines from first_line, exactly as on the page: copy wiki_edit's old from here.
    pub text: String,
    /// The line text starts on.
    pub first_line: u64,
    /// The line text ends on.
    pub last_line: u64,
    /// How many lines the page has.
    pub lines: u64,
    /// Who stored the newest version, as the receipt names them (in a
    /// clone's checkout, the server's receipt).
    pub sent_by: Option<String>,
}

/// The `wiki_read` tool.
pub struct WikiRead;

impl Tool for WikiRead {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "wiki_read";
    const SUMMARY: &'static str =
        "Read up to 200 lines of a wiki page exactly as they are, to copy wiki_edit's old from.";
    const NEEDS: Needs = Needs::Any("j");
    const WRITES: bool = false;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        super::not_an_option("page", &input.page)?;
        call.read(format!("wiki page {:?}", input.page));
        let page = call
            .repo()?
            .wiki_page(&input.page)?
            .ok_or_else(|| no_page(call, &input.page))?;
        let (text, first, last, total) =
            workspace::lines_from(&page.text, input.from.unwrap_or(1).max(1) as usize);
        let receipts = super::served::receipts(call)?;
        let sent_by = receipts.sender(&page.hash).map_err(super::served::stop)?;
        if let Some(server) = receipts.asked() {
            call.read(format!("{}'s receipt for the version", server.url()));
        }
        Ok(Output {
            page: input.page,
            version: page.hash,
            mimetype: page.mimetype,
            text,
            first_line: first as u64,
            last_line: last as u64,
            lines: total as u64,
            sent_by,
        })
    }

    fn text(o: &Output) -> String {
        format!(
            "{} lines {}-{} of {}:\n{}",
            o.page, o.first_line, o.last_line, o.lines, o.text
        )
    }
}

/// The refusal for a page that does not exist, naming some that do.
fn no_page(call: &Call, page: &str) -> Stop {
    let names = call
        .repo()
        .ok()
        .and_then(|r| r.wiki_names().ok())
        .unwrap_or_default();
    let next = if names.is_empty() {
        "the wiki has no page yet; wiki_edit with old empty makes one".to_string()
    } else {
        format!(
            "give one of: {}",
            names.into_iter().take(20).collect::<Vec<_>>().join(", ")
        )
    };
    Stop::field("page", format!("there is no wiki page {page:?}")).next(next)
}
