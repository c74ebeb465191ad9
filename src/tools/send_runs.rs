//! `send_runs`: lets a user send records and stops (OCX's letter `R`), or
//! no longer. `R` is added to the letters the user holds of its own, or
//! every `R` taken out, in one statement that leaves every other letter as
//! it stands at that moment; nothing is written when the letters already
//! say what is asked.

use crate::answer::Op;
use crate::fossil::caps::SPECIAL_LOGINS;
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::node::wake::SEND_RUNS;

/// Input of `send_runs`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The login to give R (may send records and stops). Fossil's own user editor drops R when an administrator saves the user there: give it again after.
    #[schemars(extend("x-flag" = "login"))]
    pub user: String,
    /// Take every R the user holds away instead.
    #[serde(default)]
    pub off: bool,
}

/// What the user holds now.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    pub user: String,
    /// Its capabilities as `receipt` reads them, inherited ones included.
    pub capabilities: String,
    /// Said when R changes nothing it may do (it holds admin or setup), or
    /// when it still holds R from Fossil's own users.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The `send_runs` tool.
pub struct SendRuns;

impl Tool for SendRuns {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "send_runs";
    const SUMMARY: &'static str = "Let a user send records and stops (OCX's capability R), or with --off no longer; Fossil's own user editor drops R when it saves that user.";
    const NEEDS: Needs = Needs::Any("as");
    const WRITES: bool = true;
    const IDEMPOTENT: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        super::logins::on_served(call, Self::NAME)?;
        let user = input.user;
        if SPECIAL_LOGINS.contains(&user.as_str()) {
            return Err(Stop::field(
                "user",
                format!(
                    "{user} is one of Fossil's own users, whose capabilities OCX never changes"
                ),
            )
            .next("give R to the login of the person or machine itself"));
        }
        let repo = call.repo()?;
        let Some(own) = repo.own_capabilities(&user)? else {
            return Err(
                Stop::field("user", format!("the repository has no login {user:?}"))
                    .next("name a login of this repository; `approve` makes one"),
            );
        };
        call.read(format!("login {user}"));
        let asked = !input.off;
        if own.contains(SEND_RUNS) != asked {
            let operation = if asked {
                format!("give {user} R")
            } else {
                format!("take R from {user}")
            };
            if !call.dry_run {
                let path = call.repo()?.path().to_path_buf();
                call.fossil()?.send_runs(&path, &user, asked)?;
            }
            call.log(Op::Fossil {
                operation,
                done: !call.dry_run,
            });
        }
        let repo = call.repo()?;
        let mut capabilities = repo.capabilities(&user)?.unwrap_or_default();
        if call.dry_run {
            let own = own.replace(SEND_RUNS, "");
            let own = if asked { format!("{own}R") } else { own };
            let special = repo.special()?;
            capabilities = crate::fossil::caps::Capabilities::effective(&own, &special, true);
        }
        let note = if capabilities.is_admin() {
            Some(format!(
                "{user} holds admin or setup, which may send records and stops already: R changes nothing it may do"
            ))
        } else if !asked && capabilities.has(SEND_RUNS) {
            Some(format!(
                "{user} still holds R from Fossil's own users (nobody, anonymous, reader or developer): take it from them to take it away"
            ))
        } else {
            None
        };
        Ok(Output {
            user,
            capabilities: capabilities.as_str().to_string(),
            note,
        })
    }
}
