//! `verdicts`: every verdict on a check-in by V2: each sender's latest
//! `audited` and `ci`, read from every tag change in the repository (not
//! the one value Fossil displays), those that count and those that do not,
//! with why. Writes nothing.

use crate::protocol::verdict::{self, Judged, RecordCache};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `verdicts`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The check-in, by hash or a prefix of 10+ hex digits.
    pub checkin: String,
}

/// The verdicts on a check-in.
#[derive(Serialize, JsonSchema)]
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
        let repo = call.repo()?;
        let changes = repo
            .tag_changes(verdict::TAGS, Some(&checkin.hash))
            .map_err(Stop::internal)?;
        let judged = verdict::judge(repo, &checkin, &changes, &mut RecordCache::default())
            .map_err(Stop::internal)?;
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
        })
    }
}
