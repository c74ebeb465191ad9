//! `collect`: a password for an approved login, to the asker who holds the
//! code whose SHA-256 is the key kept, once: asked by `register`, with no
//! login, as an unsigned POST on the web page. The password is set then,
//! fresh, and answered; Fossil keeps only its hash, and nothing of it is
//! kept anywhere else. Any failure is one refusal that does not say which
//! part was wrong. Every try is counted before anything is checked, in
//! one statement, so tries made at once are each counted; a few a minute
//! a login are answered, and a key not collected expires; both are kept
//! in the key's own `config` row. A dry run is refused: it would answer
//! whether a code is right without counting.

use super::logins::{self, Kept, TRIES_A_MINUTE, TRY_WINDOW};
use crate::answer::Op;
use crate::fossil::repo::login_key_row;
use crate::stop::Stop;
use crate::tool::{Call, Needs, Reach, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
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
    /// The login's password, set for this asker.
    pub password: String,
    /// The letters the approval gave.
    pub capabilities: String,
}

/// The `collect` tool.
pub struct Collect;

impl Tool for Collect {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "collect";
    const SUMMARY: &'static str = "Collect a password for a login an administrator approved, once, with the code `register` keeps.";
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
        if call.dry_run {
            return Err(Stop::field(
                "dry_run",
                "collect is never a dry run: every try is counted, and a dry run would say whether a code is right without counting it",
            )
            .next("leave dry_run out; `ocx register` asks collect as it should"));
        }
        let refused = || {
            Stop::new(REFUSAL).next("ask an administrator to open the link `ocx register` printed, then run it again in a minute")
        };
        logins::check_login("login", &input.login).map_err(|_| refused())?;
        let login = input.login;
        let row = login_key_row(&login);
        call.read(format!("the key kept for {login}"));
        if call.repo()?.login_key(&login)?.is_none() {
            return Err(refused());
        }
        logins::forget_kept_passwords(call)?;
        let now = logins::now();
        let path = call.repo()?.path().to_path_buf();
        let counted = call
            .fossil()?
            .count_try(&path, &row, TRIES_A_MINUTE, TRY_WINDOW, now)?;
        call.log(Op::Fossil {
            operation: format!("count the try in {login}'s key"),
            done: true,
        });
        if !counted {
            return Err(refused());
        }
        let repo = call.repo()?;
        let Some(kept) = Kept::read(repo, &login)? else {
            return Err(refused());
        };
        let key = hex::encode(Sha256::digest(input.code.as_bytes()));
        let right = key == kept.key
            && !kept.collected
            && now < kept.expires
            && kept.holds_its_password(repo, &login)?;
        if !right {
            return Err(refused());
        }
        let fossil = call.fossil()?;
        let unchanged = [
            ("key", &json!(kept.key)),
            ("pw", &json!(kept.pw)),
            ("collected", &json!(false)),
        ];
        let claimed =
            fossil.config_json_update(&path, &row, &[("collected", &json!(true))], &unchanged)?;
        if !claimed {
            return Err(refused());
        }
        let password = crate::node::random_password();
        if let Err(e) = fossil.user_password(&path, &login, &password) {
            let _ = fossil.config_json_update(
                &path,
                &row,
                &[("collected", &json!(false))],
                &[("key", &json!(kept.key))],
            );
            return Err(Stop::internal(e));
        }
        let pw = call.repo()?.password_hash(&login)?;
        call.fossil()?.config_json_update(
            &path,
            &row,
            &[("pw", &json!(pw))],
            &[("key", &json!(kept.key))],
        )?;
        call.log(Op::Fossil {
            operation: format!("set {login}'s password, to this asker alone"),
            done: true,
        });
        Ok(Output {
            login,
            password,
            capabilities: kept.capabilities,
        })
    }
}
