//! `adopt`: marks a login made by hand as a run's (C5), so records may
//! name it as their run user. The node then resets its password and gives
//! it a run's capabilities while a record is open, and none after. Only a
//! login that could be a run's is adopted: never one of Fossil's own, a
//! node's, or one holding admin or setup.

use crate::answer::Op;
use crate::node::run_user::{self, Standing};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `adopt`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The login to mark as a run's: it must exist, hold neither admin nor setup, and be no node's.
    pub login: String,
}

/// What `adopt` did.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The login.
    pub login: String,
    /// Whether it was a run's already, made by the node or adopted before.
    pub already: bool,
}

/// The `adopt` tool.
pub struct Adopt;

impl Tool for Adopt {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "adopt";
    const SUMMARY: &'static str =
        "Mark a login made by hand as a run's, so a record may name it as its run user.";
    const NEEDS: Needs = Needs::Any("as");
    const WRITES: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let repo = call.repo()?;
        if !crate::node::is_node(repo)? {
            return Err(Stop::new(
                "this repository is no node: only the node's repository keeps which logins are runs'",
            )
            .next("adopt the login on the node's own repository"));
        }
        let node_login = crate::protocol::found::node_login(&repo.server_code()?);
        let login = input.login.clone();
        let refuse = |reason: String| {
            Stop::field("login", reason)
                .next("adopt a login made for a program, holding neither admin nor setup")
        };
        let already = match run_user::judge(repo, &login, Some(&node_login))? {
            Ok(Standing::New) => {
                return Err(refuse(format!("the repository has no login {login:?}")));
            }
            Ok(Standing::Marked) => true,
            Ok(Standing::Unmarked) => false,
            Err(p) => return Err(refuse(p.reason)),
        };
        call.read(format!("login {login}"));
        if !already {
            let caller = call.caller()?.login.clone();
            if !call.dry_run {
                let path = call.repo()?.path().to_path_buf();
                call.fossil()?
                    .mark_run_user(&path, &login, &format!("adopted by {caller}"))?;
            }
            call.log(Op::Fossil {
                operation: format!("mark {login} as a run's login"),
                done: !call.dry_run,
            });
        }
        Ok(Output { login, already })
    }
}
