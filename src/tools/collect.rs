//! `collect`: the password an approval set, to the asker who holds the code
//! whose SHA-256 is the key kept: asked by `register`, with no login, as an
//! unsigned POST on the web page. Any failure is one refusal that does not
//! say which part was wrong. Tries are limited a minute a login, and a key
//! not collected expires; both are kept in the key's own `config` row, the
//! only thing `collect` writes.

use super::logins::{self, Kept, TRIES_A_MINUTE};
use crate::answer::Op;
use crate::stop::Stop;
use crate::tool::{Call, Needs, Reach, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The one refusal, whatever was wrong.
pub const REFUSAL: &str = "no password for this login and code: it is not approved yet, the code or key is wrong, expired or revoked, its password changed, or it was tried too often this minute";

/// Input of `collect`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The login asked for.
    pub login: String,
    /// The code `register` keeps, whose SHA-256 is the key approved.
    pub code: String,
}

/// The password, collected.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    pub login: String,
    /// The login's password (null on a dry run).
    pub password: Option<String>,
    /// The letters the approval gave.
    pub capabilities: String,
}

/// The `collect` tool.
pub struct Collect;

impl Tool for Collect {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "collect";
    const SUMMARY: &'static str =
        "Collect the password an administrator's approval set, with the code `register` keeps.";
    const NEEDS: Needs = Needs::Nothing;
    const WRITES: bool = true;
    const REACH: Reach = Reach::UnsignedPost;

    fn text(output: &Output) -> String {
        format!(
            "{} holds {}; its password is collected",
            output.login, output.capabilities
        )
    }

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let refused = || {
            Stop::new(REFUSAL).next("ask an administrator to open the link `ocx register` printed, then run it again in a minute")
        };
        logins::check_login("login", &input.login).map_err(|_| refused())?;
        let login = input.login;
        call.read(format!("the key kept for {login}"));
        let repo = call.repo()?;
        let Some(mut kept) = Kept::read(repo, &login)? else {
            return Err(refused());
        };
        let now = logins::now();
        if now - kept.window >= 60 || now < kept.window {
            kept.window = now;
            kept.tries = 0;
        }
        if kept.tries >= TRIES_A_MINUTE {
            return Err(refused());
        }
        kept.tries += 1;
        let key = hex::encode(Sha256::digest(input.code.as_bytes()));
        let right = key == kept.key
            && (kept.collected || now < kept.expires)
            && repo
                .holds_password(&login, &kept.password)
                .map_err(Stop::internal)?;
        if right {
            kept.collected = true;
            kept.tries = 0;
        }
        if !call.dry_run {
            kept.keep(call, &login)?;
        }
        call.log(Op::Fossil {
            operation: format!("count the try in {login}'s key"),
            done: !call.dry_run,
        });
        if !right {
            return Err(refused());
        }
        Ok(Output {
            login,
            password: (!call.dry_run).then_some(kept.password),
            capabilities: kept.capabilities,
        })
    }
}
