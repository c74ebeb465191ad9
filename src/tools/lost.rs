//! `lost`: answers a record `lost` in its node's stead, once the run's
//! start and its `wall` have passed (C4), so a node that never returns
//! leaves no record open.

use crate::node::respond;
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::Serialize;

/// Input of `lost`: the record.
pub use super::OneRecord as Input;

/// What `lost` wrote.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The response's full hash (null on a dry run).
    pub response: Option<String>,
    /// The record, in full.
    pub record: String,
}

/// The `lost` tool.
pub struct Lost;

impl Tool for Lost {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "lost";
    const SUMMARY: &'static str =
        "Answer a record `lost` in its node's stead, once its run's wall has passed.";
    const NEEDS: Needs = Needs::Any("as");
    const WRITES: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let standing = super::stop::open_record(call, "record", &input.record)?;
        let hash = standing.hash.clone();
        let wall = crate::protocol::kinds::wall_seconds(&standing.record.budget.wall).unwrap_or(0);
        let deadline = standing.said.when + wall as f64 / 86400.0;
        let now = time::OffsetDateTime::now_utc().unix_timestamp_nanos() as f64 / 1e9 / 86400.0
            + 2440587.5;
        if now < deadline {
            return Err(Stop::field(
                "record",
                format!(
                    "its run may still be going: its wall passes at {}",
                    crate::fossil::repo::julian_to_rfc3339(deadline)
                ),
            )
            .next("wait until then, or ask its node"));
        }
        let caller = call.caller()?.login.clone();
        let note = format!(
            "answered lost by {caller} in the node's stead: the run's wall passed with no answer"
        );
        let batch = respond::compose(call.repo()?, &standing, &caller, "lost", &note)?;
        let written = batch.artifacts[0].1.clone();
        super::writing::write(call, &batch, true)?;
        Ok(Output {
            response: (!call.dry_run).then_some(written),
            record: hash,
        })
    }
}
