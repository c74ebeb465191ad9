//! `unaudited`: the check-ins that change files and have no verdict that
//! counts (V2), oldest first by receipt, at most 50, with how many in all.
//! Writes nothing.

use crate::protocol::verdict::{self, RecordCache};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// At most this many check-ins in one answer.
pub const PAGE: usize = 50;

/// Input of `unaudited`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// Only check-ins on this branch.
    #[serde(default)]
    pub branch: Option<String>,
}

/// The check-ins no verdict has judged.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct Output {
    pub checkins: Vec<Unjudged>,
    /// How many there are in all.
    pub count: usize,
    /// In a clone's checkout, the server whose answer this is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked: Option<String>,
}

/// One check-in without a counting verdict.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct Unjudged {
    pub checkin: String,
    pub branch: Option<String>,
    /// The user written in it.
    pub user: String,
    /// Its sender, by receipt.
    pub sender: Option<String>,
    pub comment: String,
}

/// The `unaudited` tool.
pub struct Unaudited;

impl Tool for Unaudited {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "unaudited";
    const SUMMARY: &'static str =
        "The check-ins that change files and have no verdict that counts, oldest first.";
    const NEEDS: Needs = Needs::Any("o");
    const WRITES: bool = false;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        if let Some(server) = super::served::receipts(call)?.asked() {
            return from_server(call, server, input);
        }
        let repo = call.repo()?;
        let checkins = repo.checkins_changing_files(input.branch.as_deref())?;
        let changes = repo.tag_changes(verdict::TAGS, None)?;
        let mut records = RecordCache::default();
        let mut unjudged = Vec::new();
        for c in checkins {
            let judged = verdict::judge(repo, &c, &changes, &mut records)?;
            if !judged.iter().any(|j| j.why_not.is_none()) {
                unjudged.push(Unjudged {
                    checkin: c.hash,
                    branch: c.branch,
                    user: c.user,
                    sender: c.sender,
                    comment: c.comment,
                });
            }
        }
        call.read(format!(
            "the check-ins changing files and {} verdict tag changes",
            changes.len()
        ));
        let count = unjudged.len();
        unjudged.truncate(PAGE);
        Ok(Output {
            checkins: unjudged,
            count,
            asked: None,
        })
    }
}

/// In a clone's checkout, the server's own answer (an unsigned POST of
/// JSON): only the server holds the receipts a verdict is judged by.
fn from_server(
    call: &mut Call,
    server: &crate::node::receipts::Server,
    input: Input,
) -> Result<Output, Stop> {
    let asked = match &input.branch {
        Some(b) => json!({ "branch": b }),
        None => json!({}),
    };
    let mut out: Output = super::served::ask(server, Unaudited::NAME, &asked)?;
    call.read(format!("{}'s unaudited check-ins", server.url()));
    out.asked = Some(server.url().to_string());
    Ok(out)
}
