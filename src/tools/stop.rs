//! `stop`: writes a stop (C3) for an open record, at the record's place,
//! as the caller; its node ends the run and answers `stopped`.

use crate::place::Where;
use crate::protocol::found;
use crate::protocol::kinds::StopMessage;
use crate::protocol::message;
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::Serialize;

/// Input of `stop`: the record.
pub use super::OneRecord as Input;

/// What `stop` wrote.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The stop's full hash (null on a dry run).
    pub stop: Option<String>,
    /// The record it stops, in full.
    pub record: String,
}

/// The record `given` (in `field`) names, refused when it names
/// no record or the record is answered already. In a clone's checkout
/// (pulled first) the record and its responses stand as the clone's
/// server received them, and a record the server has not received is
/// refused.
pub fn open_record(
    call: &mut Call,
    field: &str,
    given: &str,
) -> Result<found::StandingRecord, Stop> {
    let receipts = super::served::pull_first(call)?;
    let (rid, hash) = call.artifact(field, given)?;
    call.read("the record and its place");
    let repo = call.repo()?;
    let mut standing = found::record(repo, rid, &hash)?.ok_or_else(|| {
        Stop::field(field, format!("{given} holds no record"))
            .next("give the hash of a record's post")
    })?;
    let got = receipts
        .record_as_received(repo, &mut standing)
        .map_err(super::served::stop)?;
    if let Some(server) = receipts.asked() {
        let server = server.url().to_string();
        call.read(format!(
            "{server}'s receipts for the record and its responses"
        ));
        if !got.received {
            return Err(Stop::field(
                field,
                format!("{server} has not received the record {given}"),
            )
            .next("push it to the server first, or name a record the server holds"));
        }
    }
    let answer = got.response;
    if let Some(r) = answer {
        return Err(Stop::field(
            field,
            format!("the record is answered already ({})", &r.said.hash[..10]),
        )
        .next("nothing to do; `ocx thread` shows its response"));
    }
    Ok(standing)
}

/// The `stop` tool.
pub struct StopTool;

impl Tool for StopTool {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "stop";
    const SUMMARY: &'static str = "Stop a record's run: its node ends it and answers `stopped`.";
    const NEEDS: Needs = Needs::Any("asR");
    const WRITES: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let standing = open_record(call, "record", &input.record)?;
        let caller = call.caller()?;
        if !caller.capabilities.is_admin()
            && standing.said.from.as_deref() != Some(caller.login.as_str())
        {
            return Err(Stop::field(
                "record",
                format!(
                    "{} holds R without admin, and stops only the records it sent itself",
                    caller.login
                ),
            )
            .next("ask the record's sender or an administrator to stop it"));
        }
        let hash = standing.hash.clone();
        let _repo = call.repo()?;
        let msg = StopMessage {
            ocx: message::VERSION,
            kind: "stop".into(),
            node: standing.record.node.clone(),
            stops: hash.clone(),
        };
        let (_, block) = super::writing::message_text(&msg)?;
        let text = format!(
            "OCX stop: asks node `{}` to stop this record's run.\n\n{block}",
            crate::protocol::found::code_prefix(&msg.node),
        );
        let stop =
            super::writing::post(call, &Where::At(standing.place), &text, Some("stop"), true)?;
        Ok(Output {
            stop: (!call.dry_run).then_some(stop),
            record: hash,
        })
    }
}
