//! `audit`: writes a verdict (V1) on a check-in: a raw tag `audited` (or
//! `ci`) valued `pass: REASON (against X)`, as the caller, never on the
//! caller's own check-in.

use crate::fossil::artifact::{self, TagChange};
use crate::fossil::store::Batch;
use crate::protocol::{found, verdict};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The judgement.
#[derive(Deserialize, Serialize, JsonSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Judgement {
    Pass,
    Fail,
}

/// Which verdict tag.
#[derive(Deserialize, Serialize, JsonSchema, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum VerdictTag {
    /// A judgement, by a person or an agent.
    #[default]
    Audited,
    /// A program's check.
    Ci,
}

/// Input of `audit`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The check-in judged, by hash or a prefix of 10+ hex digits.
    pub checkin: String,
    /// pass or fail.
    pub verdict: Judgement,
    /// Why, on one line.
    pub reason: String,
    /// The objective it was judged against: a record's full hash, or the path of a file stating it (as PLAN.md).
    pub against: String,
    /// audited (the default) for a judgement, ci for a program's check.
    #[serde(default)]
    pub tag: Option<VerdictTag>,
}

/// What `audit` wrote.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The tag artifact's full hash (null on a dry run, and while held).
    pub hash: Option<String>,
    /// The check-in, in full.
    pub checkin: String,
    /// The tag written.
    pub tag: String,
    /// The value written.
    pub value: String,
    /// For a run under review: the question the verdict is held under; it is written only once approved, and the run's next line says how it was decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
}

/// The `audit` tool.
pub struct Audit;

/// A reason's limit, in characters.
pub const REASON_MAX: usize = 1000;

impl Tool for Audit {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "audit";
    const SUMMARY: &'static str =
        "Record a verdict on a check-in: pass or fail, why, against what objective.";
    const NEEDS: Needs = Needs::Any("i");
    const WRITES: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        line("reason", &input.reason, REASON_MAX)?;
        line("against", &input.against, 500)?;
        if input.against.contains("(against") || input.against.contains(char::is_whitespace) {
            return Err(Stop::field(
                "against",
                "must be a record's full hash or a path without spaces",
            )
            .next("give a record's full hash, or a path such as PLAN.md"));
        }
        let receipts = super::served::pull_first(call)?;
        let mut checkin = call.checkin("checkin", &input.checkin)?;
        if let Some(server) = receipts.asked().map(|s| s.url().to_string()) {
            let said = receipts
                .received(std::slice::from_ref(&checkin.hash))
                .map_err(super::served::stop)?;
            call.read(format!("{server}'s receipt for the check-in"));
            match said.into_iter().next() {
                Some(r) if r.received => checkin.sender = r.user,
                _ => {
                    return Err(Stop::field(
                        "checkin",
                        format!("{server} has not received {}", checkin.hash),
                    )
                    .next("judge a check-in the server holds"));
                }
            }
        }
        let repo = call.repo()?;
        let caller = call.caller()?.login.clone();
        if checkin.sender.as_deref() == Some(caller.as_str()) || checkin.user == caller {
            return Err(Stop::field(
                "checkin",
                format!(
                    "{caller} made this check-in; a verdict on one's own check-in never counts"
                ),
            )
            .next("let someone else judge it"));
        }
        let looks_hash = (input.against.len() == 40 || input.against.len() == 64)
            && input.against.bytes().all(|b| b.is_ascii_hexdigit());
        if looks_hash {
            let names_record = match repo.receipt(&input.against.to_ascii_lowercase())? {
                Some(r) => found::record(repo, r.rid, &input.against)?.is_some(),
                None => false,
            };
            if !names_record || input.against.bytes().any(|b| b.is_ascii_uppercase()) {
                return Err(Stop::field("against", "names no record in this repository (a hash must be a record's, in full, lower case)")
                    .next("give a record's full hash, or a path such as PLAN.md"));
            }
        }
        call.read("the check-in and its sender");
        let tag = match input.tag.unwrap_or_default() {
            VerdictTag::Audited => "audited",
            VerdictTag::Ci => "ci",
        };
        let value = verdict::format(
            input.verdict == Judgement::Pass,
            &input.reason,
            &input.against,
        );
        let repo = call.repo()?;
        let policy = repo.hash_policy()?;
        let bytes = artifact::control(
            &artifact::now(),
            &caller,
            &[TagChange {
                op: '+',
                name: tag.into(),
                target: checkin.hash.clone(),
                value: Some(value.clone()),
            }],
        );
        let mut batch = Batch::default();
        let written = batch.add("verdict", bytes, policy);
        super::writing::write(call, &batch, true)?;
        let held = super::writing::held(call);
        Ok(Output {
            hash: (!call.dry_run && held.is_none()).then_some(written),
            checkin: checkin.hash,
            tag: tag.into(),
            value,
            held,
        })
    }
}

fn line(field: &str, text: &str, max: usize) -> Result<(), Stop> {
    if text.trim().is_empty() {
        return Err(Stop::field(field, "is empty").next(format!("give {field} on one line")));
    }
    if text.contains(['\n', '\r']) {
        return Err(
            Stop::field(field, "must be one line").next(format!("give {field} on one line"))
        );
    }
    if text.chars().count() > max {
        return Err(
            Stop::field(field, format!("is longer than {max} characters"))
                .next(format!("shorten {field}")),
        );
    }
    Ok(())
}
