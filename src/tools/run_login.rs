//! `run_login`: a password for the run's login the served repository made
//! for a record addressed to an agent machine, handed to that machine's
//! node login alone: on the page to a POST signed in as it (its login
//! cookie), on the command line to that login; never over MCP. The
//! password is set when asked, fresh, and kept nowhere (Fossil keeps only
//! its hash): the machine asks once for each run it starts, so a later ask
//! (a lost answer asked again) leaves no run holding the earlier one. Any
//! failure is one refusal that does not say which part was wrong.

use crate::node::remote::RemoteRun;
use crate::node::run_user::{self, Standing};
use crate::protocol::found::node_login;
use crate::stop::Stop;
use crate::tool::{Call, Needs, Reach, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The one refusal, whatever was wrong.
pub const REFUSAL: &str = "no run login for this record and caller: the record is not addressed to an agent machine whose login you signed in as, its login is not made yet, or its response already arrived";

/// Input of `run_login`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The record, by its full hash.
    #[schemars(extend("x-positional" = true))]
    pub record: String,
}

/// The run's login for the record.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    pub record: String,
    /// The run's login.
    pub user: String,
    /// Its password, set for this ask (null on a dry run, which sets none).
    pub password: Option<String>,
}

/// The `run_login` tool.
pub struct RunLogin;

impl Tool for RunLogin {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "run_login";
    const SUMMARY: &'static str = "The run's login and password for a record addressed to your agent machine, to its node login alone.";
    const NEEDS: Needs = Needs::Nothing;
    const WRITES: bool = true;
    const REACH: Reach = Reach::SignedPost;

    fn text(output: &Output) -> String {
        format!(
            "{} runs record {}; its password is collected",
            output.user, output.record
        )
    }

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let refused = || {
            Stop::new(REFUSAL).next("sign in as the agent machine's node login, and ask again once the served repository has read the record")
        };
        super::logins::on_served(call, Self::NAME)?;
        let caller = call.caller()?.clone();
        call.read(format!("the run login kept for {}", input.record));
        let repo = call.repo()?;
        if !caller.signed_in || !repo.is_node_login(&caller.login)? {
            return Err(refused());
        }
        let Some(kept) = RemoteRun::read(repo, &input.record).map_err(Stop::internal)? else {
            return Err(refused());
        };
        let record = repo.receipt(&input.record)?;
        let node = match record {
            Some(r) => {
                crate::protocol::found::record(repo, r.rid, &input.record)?.map(|s| s.record.node)
            }
            None => None,
        };
        let still_a_run = matches!(
            run_user::check(repo, &kept.user, Some(&kept.machine), true)?,
            Ok(Standing::Marked)
        );
        let right = kept.machine == caller.login
            && kept.record == input.record
            && node.is_some_and(|n| node_login(&n) == caller.login)
            && still_a_run;
        if !right {
            return Err(refused());
        }
        let password = if call.dry_run {
            None
        } else {
            crate::fossil::repo::forget_kept_passwords(call.fossil()?, repo)?;
            let password = crate::node::random_password();
            call.fossil()?
                .user_password(repo.path(), &kept.user, &password)?;
            Some(password)
        };
        call.log(crate::answer::Op::Fossil {
            operation: format!("set {}'s password, to {} alone", kept.user, caller.login),
            done: !call.dry_run,
        });
        Ok(Output {
            record: kept.record,
            user: kept.user,
            password,
        })
    }
}
