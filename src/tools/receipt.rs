//! `receipt`: for each artifact, whether this repository received it and
//! from which login, with that login's capabilities, as the served
//! repository's own receipts say ([`Receipts::served`]): the page's answer
//! a clone's reader and an agent machine ask over HTTP. Writes nothing.

use crate::node::receipts::{Receipts, Received};
use crate::stop::{Stop, full_hash};
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `receipt`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// Full hashes (40 or 64 hex digits) of the artifacts to ask about.
    #[serde(default)]
    pub artifacts: Vec<String>,
    /// A login whose capabilities to give as well.
    #[serde(default)]
    pub capabilities_of: Option<String>,
}

/// The receipts, in the order asked.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    pub artifacts: Vec<Received>,
    /// The capabilities of the login asked about, if any.
    pub capabilities_of: Option<UserCapabilities>,
}

/// A login's capabilities.
#[derive(Serialize, JsonSchema)]
pub struct UserCapabilities {
    pub user: String,
    /// Its capabilities, inherited ones included; null when there is no such login.
    pub capabilities: Option<String>,
}

/// The `receipt` tool.
pub struct ReceiptTool;

impl Tool for ReceiptTool {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "receipt";
    const SUMMARY: &'static str = "Whether this repository received each artifact, from which login, and what that login may do.";
    const NEEDS: Needs = Needs::Nothing;
    const WRITES: bool = false;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        for (i, h) in input.artifacts.iter().enumerate() {
            full_hash(&format!("artifacts[{i}]"), h)?;
        }
        let caller = call.caller()?.clone();
        let repo = call.repo()?;
        let may_read = caller.capabilities.has('o');
        let may_see_private = caller.capabilities.has('x');
        let receipts = Receipts::served(repo);
        let out: Vec<Received> = match may_read {
            true => receipts
                .received(&input.artifacts)
                .map_err(Stop::internal)?
                .into_iter()
                .map(|r| match r.private && !may_see_private {
                    true => Received::unreceived(&r.hash),
                    false => r,
                })
                .collect(),
            false => input
                .artifacts
                .iter()
                .map(|h| Received::unreceived(h))
                .collect(),
        };
        let capabilities_of = match input.capabilities_of {
            Some(user) => Some(UserCapabilities {
                capabilities: if may_read {
                    repo.capabilities(&user)?.map(|c| c.to_string())
                } else {
                    None
                },
                user,
            }),
            None => None,
        };
        call.read(format!("{} receipts", out.len()));
        Ok(Output {
            artifacts: out,
            capabilities_of,
        })
    }
}
