//! `verdicts`: every verdict on a check-in by V2: each sender's latest
//! `audited` and `ci`, read from every tag change in the repository (not
//! the one value Fossil displays), those that count and those that do not,
//! with why; in a clone's checkout, the server's own answer. Writes
//! nothing.

use crate::protocol::verdict::{self, Judged, RecordCache};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Input of `verdicts`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The check-in, by hash or a prefix of 10+ hex digits.
    pub checkin: String,
}

/// The verdicts on a check-in.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct Output {
    /// The check-in, in full.
    pub checkin: String,
    /// Its branch.
    pub branch: Option<String>,
    /// The user written in it.
    pub user: String,
    /// Its sender, by receipt.
    pub sender: Option<String>,
    /// Each sender's latest verdict that counts.
    pub counting: Vec<Judged>,
    /// Each sender's latest verdict that does not, with why.
    pub not_counting: Vec<Judged>,
    /// In a clone's checkout, the server whose answer this is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked: Option<String>,
}

/// The `verdicts` tool.
pub struct Verdicts;

impl Tool for Verdicts {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "verdicts";
    const SUMMARY: &'static str =
        "Every verdict on a check-in that counts, and those that do not with why.";
    const NEEDS: Needs = Needs::Any("o");
    const WRITES: bool = false;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let checkin = call.checkin("checkin", &input.checkin)?;
        if let Some(server) = super::served::receipts(call)?.asked() {
            return from_server(call, server, &checkin.hash);
        }
        let repo = call.repo()?;
        let changes = repo.tag_changes(verdict::TAGS, Some(&checkin.hash))?;
        let judged = verdict::judge(repo, &checkin, &changes, &mut RecordCache::default())?;
        call.read(format!("{} tag changes on the check-in", changes.len()));
        let (counting, not_counting): (Vec<Judged>, Vec<Judged>) =
            judged.into_iter().partition(|j| j.why_not.is_none());
        Ok(Output {
            checkin: checkin.hash,
            branch: checkin.branch,
            user: checkin.user,
            sender: checkin.sender,
            counting,
            not_counting,
            asked: None,
        })
    }
}

/// In a clone's checkout, the server's own answer for `checkin` (an
/// unsigned POST of JSON): only the server holds the receipts a verdict
/// is judged by.
fn from_server(
    call: &mut Call,
    server: &crate::node::receipts::Server,
    checkin: &str,
) -> Result<Output, Stop> {
    let mut out: Output =
        super::served::ask(server, Verdicts::NAME, &json!({ "checkin": checkin }))?;
    let server = server.url();
    call.read(format!("{server}'s verdicts on the check-in"));
    if out.checkin != checkin {
        return Err(Stop::field(
            "server",
            format!("{server} answered for another check-in than {checkin}"),
        )
        .next("check that the server runs the same OCX"));
    }
    out.asked = Some(server.to_string());
    Ok(out)
}
