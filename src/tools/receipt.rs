//! `receipt`: for each artifact, whether this repository received it and
//! from which login, with that login's capabilities. Writes nothing.

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
    pub artifacts: Vec<Receipt>,
    /// The capabilities of the login asked about, if any.
    pub capabilities_of: Option<UserCapabilities>,
}

/// One artifact's receipt.
#[derive(Serialize, JsonSchema)]
pub struct Receipt {
    /// The hash asked about.
    pub hash: String,
    /// Whether this repository received it (a phantom it has only heard of was not).
    pub received: bool,
    /// The login its receipt names: its sender.
    pub user: Option<String>,
    /// That login's capabilities, inherited ones included.
    pub capabilities: Option<String>,
    /// Whether that login speaks for a node here: this repository's own
    /// node's login, or an agent machine's `approve --node` marked.
    pub node: bool,
    /// The receipt's number.
    pub rcvid: Option<i64>,
    /// The artifact's row, which orders the artifacts of one receipt.
    pub rid: Option<i64>,
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
        let own_node =
            crate::protocol::found::node_login(&repo.server_code().map_err(Stop::internal)?);
        let mut out = Vec::with_capacity(input.artifacts.len());
        for hash in &input.artifacts {
            let receipt = if may_read {
                repo.receipt(hash).map_err(Stop::internal)?
            } else {
                None
            };
            let receipt = receipt.filter(|r| !r.private || may_see_private);
            out.push(match receipt {
                Some(r) => Receipt {
                    hash: hash.clone(),
                    received: true,
                    capabilities: match &r.login {
                        Some(l) => repo
                            .capabilities(l)
                            .map_err(Stop::internal)?
                            .map(|c| c.to_string()),
                        None => None,
                    },
                    node: match &r.login {
                        Some(l) => {
                            *l == own_node || repo.is_node_login(l).map_err(Stop::internal)?
                        }
                        None => false,
                    },
                    user: r.login,
                    rcvid: Some(r.rcvid),
                    rid: Some(r.rid),
                },
                None => Receipt {
                    hash: hash.clone(),
                    received: false,
                    user: None,
                    capabilities: None,
                    node: false,
                    rcvid: None,
                    rid: None,
                },
            });
        }
        let capabilities_of = match input.capabilities_of {
            Some(user) => Some(UserCapabilities {
                capabilities: if may_read {
                    repo.capabilities(&user)
                        .map_err(Stop::internal)?
                        .map(|c| c.to_string())
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
