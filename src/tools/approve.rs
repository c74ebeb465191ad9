//! `approve`: an administrator lets a login in, as `register` asked: makes
//! the user with exactly the capabilities asked and a random password no
//! one is told, keeps the key in the login's own `config` row for
//! `collect` (which sets the password the asker collects), and records who
//! let whom in as a post in the thread kept for logins. No password is kept
//! anywhere: Fossil keeps only its hash. `--revoke` takes a login's
//! capabilities and password away.

use super::logins::{self, Kept};
use crate::answer::Op;
use crate::fossil::caps::{Capabilities, all_defined};
use crate::fossil::repo::login_key_row;
use crate::stop::Stop;
use crate::tool::{Call, Needs, Reach, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Letters `approve` never gives: admin, setup, and the two that inherit
/// another user's letters.
pub const NEVER_GIVEN: &str = "asuv";

/// How long a key waits to be collected unless told (a day), in minutes.
pub const VALID_MINUTES: u32 = 24 * 60;

/// The longest a key may wait to be collected (30 days), in minutes.
pub const VALID_MINUTES_MAX: u32 = 30 * 24 * 60;

/// Input of `approve`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The login asked for: lowercase letters, digits and dashes.
    pub login: String,
    /// The key `register` printed in its link: the SHA-256 of the asker's code, 64 hex digits.
    #[serde(default)]
    #[schemars(extend("x-positional" = true))]
    pub key: Option<String>,
    /// The capability letters to give, as the link asks (never a, s, u or v).
    #[serde(default)]
    #[schemars(extend("x-positional" = true))]
    pub capabilities: Option<String>,
    /// Mark the login as an agent machine's node login (named node- and the first 8 digits of its repository's server-code).
    #[serde(default)]
    pub node: bool,
    /// Take the login's capabilities and password away and forget its key, instead.
    #[serde(default)]
    pub revoke: bool,
    /// Minutes the key may wait to be collected (default 1440, a day; at most 43200).
    #[serde(default)]
    pub valid_minutes: Option<u32>,
}

/// What `approve` did.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    pub login: String,
    /// The letters the login holds of its own now.
    pub capabilities: String,
    /// Whether it is marked as an agent machine's node login.
    pub node: bool,
    /// Whether it was revoked.
    pub revoked: bool,
    /// The audit post recording it (null on a dry run).
    pub audit: Option<String>,
    /// What the asker does next.
    pub next: String,
}

/// The `approve` tool.
pub struct Approve;

impl Tool for Approve {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "approve";
    const SUMMARY: &'static str = "Let in a login `register` asked for, with exactly the capabilities asked; or --revoke one.";
    const NEEDS: Needs = Needs::Any("as");
    const WRITES: bool = true;
    const DESTRUCTIVE: bool = true;
    const REACH: Reach = Reach::NotMcp;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        logins::on_served(call, Self::NAME)?;
        logins::check_login("login", &input.login)?;
        if input.revoke {
            return revoke(input, call);
        }
        let login = input.login.clone();
        let key = check_key(input.key.as_deref())?;
        let capabilities = check_capabilities(input.capabilities.as_deref())?;
        check_node(&login, input.node)?;
        let minutes = input.valid_minutes.unwrap_or(VALID_MINUTES);
        if !(1..=VALID_MINUTES_MAX).contains(&minutes) {
            return Err(Stop::field(
                "valid_minutes",
                format!("{minutes} is not between 1 and {VALID_MINUTES_MAX}"),
            )
            .next("give the minutes a key may wait, a day by default"));
        }
        logins::forget_kept_passwords(call)?;
        call.read(format!("login {login} and its key"));
        let repo = call.repo()?;
        let existing = repo.own_capabilities(&login)?;
        let kept = match &existing {
            None => None,
            Some(own) => {
                let refuse = |reason: String| {
                    Stop::field("login", reason)
                        .next("approve a login of its own, not one made by hand")
                };
                let admin = own.contains(['a', 's'])
                    || repo.capabilities(&login)?.is_some_and(|c| c.is_admin());
                if admin {
                    return Err(refuse(format!("{login} holds admin or setup")));
                }
                let Some(kept) = Kept::read(repo, &login)? else {
                    return Err(refuse(format!(
                        "{login} exists and approve did not make it"
                    )));
                };
                if !kept.holds_its_password(repo, &login)? {
                    return Err(refuse(format!(
                        "{login}'s password changed since approve set it"
                    )));
                }
                Some(kept)
            }
        };
        let same_key = kept.as_ref().filter(|k| k.key == key);
        let approver = call.caller()?.login.clone();
        let mut row = Kept {
            key: key.clone(),
            pw: same_key.and_then(|k| k.pw.clone()),
            capabilities: capabilities.clone(),
            node: input.node,
            approved_by: approver.clone(),
            expires: logins::now() + i64::from(minutes) * 60,
            collected: same_key.is_some_and(|k| k.collected),
            tries: 0,
            window: 0,
        };
        if !call.dry_run {
            let path = call.repo()?.path().to_path_buf();
            let fossil = call.fossil()?;
            let password = crate::node::random_password();
            match &kept {
                None => fossil.user_new(&path, &login, &password),
                Some(_) if same_key.is_none() => fossil.user_password(&path, &login, &password),
                Some(_) => Ok(()),
            }?;
            fossil.user_capabilities(&path, &login, &capabilities)?;
            if same_key.is_none() {
                row.pw = call.repo()?.password_hash(&login)?;
            }
            row.keep(call, &login)?;
        }
        call.log(Op::Fossil {
            operation: format!(
                "{} {login} holding {capabilities}, its key kept in {}",
                if existing.is_some() { "set" } else { "make" },
                login_key_row(&login)
            ),
            done: !call.dry_run,
        });
        let what = if input.node {
            " as an agent machine's node login"
        } else {
            ""
        };
        let audit = logins::audit_post(
            call,
            &format!(
                "**Login approved**: `{login}`{what}, holding `{capabilities}`, let in by {approver} at {} UTC (key {}…).",
                crate::fossil::artifact::now().replace('T', " "),
                &key[..16]
            ),
        )?;
        Ok(Output {
            login,
            capabilities,
            node: input.node,
            revoked: false,
            audit,
            next: format!(
                "the asker runs `ocx register` again within {minutes} minutes to collect its password"
            ),
        })
    }
}

fn revoke(input: Input, call: &mut Call) -> Result<Output, Stop> {
    for (field, given) in [
        ("key", input.key.is_some()),
        ("capabilities", input.capabilities.is_some()),
        ("node", input.node),
        ("valid_minutes", input.valid_minutes.is_some()),
    ] {
        if given {
            return Err(Stop::field(field, "is not taken with revoke")
                .next(format!("leave {field} out to revoke a login")));
        }
    }
    let login = input.login;
    logins::forget_kept_passwords(call)?;
    call.read(format!("login {login} and its key"));
    let repo = call.repo()?;
    if repo.login_key(&login)?.is_none() {
        return Err(Stop::field(
            "login",
            format!(
                "{login} holds no key approve kept: approve did not make it, or it was revoked"
            ),
        )
        .next("revoke a login approve let in; change others with Fossil's own user editor"));
    }
    let exists = repo.own_capabilities(&login)?.is_some();
    if !call.dry_run {
        let path = call.repo()?.path().to_path_buf();
        let fossil = call.fossil()?;
        if exists {
            fossil.user_capabilities(&path, &login, "")?;
            fossil.user_password(&path, &login, &crate::node::random_password())?;
        }
        fossil.config_delete(&path, &login_key_row(&login))?;
    }
    call.log(Op::Fossil {
        operation: format!(
            "take {login}'s capabilities and password away, remove {}",
            login_key_row(&login)
        ),
        done: !call.dry_run,
    });
    let revoker = call.caller()?.login.clone();
    let audit = logins::audit_post(
        call,
        &format!(
            "**Login revoked**: `{login}`, its capabilities and password taken away by {revoker} at {} UTC.",
            crate::fossil::artifact::now().replace('T', " ")
        ),
    )?;
    Ok(Output {
        login,
        capabilities: String::new(),
        node: false,
        revoked: true,
        audit,
        next: "the login can no longer sign in; a new one is asked for with `ocx register`".into(),
    })
}

/// The key, lowercased: exactly 64 hex digits.
fn check_key(key: Option<&str>) -> Result<String, Stop> {
    let Some(key) = key else {
        return Err(Stop::field("key", "is missing")
            .next("give the key the asker's link names (64 hex digits)"));
    };
    if key.len() != 64 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Stop::field("key", "is not 64 hex digits")
            .next("give the key exactly as the asker's link names it"));
    }
    Ok(key.to_ascii_lowercase())
}

/// The letters to give, in Fossil's order: at least one, each one Fossil
/// defines or OCX's `R`, none of [`NEVER_GIVEN`].
fn check_capabilities(given: Option<&str>) -> Result<String, Stop> {
    let given = given.unwrap_or("");
    if given.is_empty() {
        return Err(Stop::field("capabilities", "names no capability")
            .next("give the letters the asker's link names, such as goC4w"));
    }
    for c in given.chars() {
        if NEVER_GIVEN.contains(c) {
            return Err(Stop::field(
                "capabilities",
                format!("approve never gives {c} (admin, setup, or another user's letters)"),
            )
            .next("give the login the letters it needs alone; make an administrator by hand"));
        }
        if !(c == super::send_runs::SEND_RUNS
            || c.is_ascii_alphanumeric() && all_defined(&c.to_string()))
        {
            return Err(Stop::field(
                "capabilities",
                format!("{c:?} is no capability Fossil defines, nor OCX's R"),
            )
            .next("give letters from Fossil's list of capabilities"));
        }
    }
    Ok(Capabilities::exact(given).as_str().to_string())
}

/// Refuses `--node` for a login not named as a node's own (`node-` and 8
/// hex digits, as the protocol finds a node's user), and a login named so
/// without `--node`.
fn check_node(login: &str, node: bool) -> Result<(), Stop> {
    let named = login
        .strip_prefix("node-")
        .is_some_and(|code| code.len() == 8 && code.bytes().all(|b| b.is_ascii_hexdigit()));
    match (node, named) {
        (true, false) => Err(Stop::field(
            "login",
            format!("{login} is not named as a node's own login: node- and the first 8 digits of its repository's server-code"),
        )
        .next("ask for the login `ocx status` names as the agent machine's node login")),
        (false, true) => Err(Stop::field(
            "node",
            format!("{login} is named as a node's own login, whose answers count as its node's"),
        )
        .next("approve it with --node if it is an agent machine's node login")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_letters_fossil_defines_or_r_are_given_and_never_asuv() {
        assert_eq!(check_capabilities(Some("goC4w")).unwrap(), "gow4C");
        assert_eq!(check_capabilities(Some("wR")).unwrap(), "wR");
        for bad in ["", "a", "gs", "ou", "ov", "Q", "g!", "gé"] {
            let stop = check_capabilities(Some(bad)).unwrap_err();
            assert_eq!(stop.field.as_deref(), Some("capabilities"), "{bad:?}");
        }
    }

    #[test]
    fn a_key_is_64_hex_digits_kept_in_lower_case() {
        assert_eq!(check_key(Some(&"AB".repeat(32))).unwrap(), "ab".repeat(32));
        for bad in ["", "ab", &"g".repeat(64), &"a".repeat(65)] {
            assert_eq!(
                check_key(Some(bad)).unwrap_err().field.as_deref(),
                Some("key")
            );
        }
    }

    #[test]
    fn a_node_login_is_named_as_the_protocol_finds_it() {
        assert!(check_node("node-0a1b2c3d", true).is_ok());
        assert!(check_node("build-1", false).is_ok());
        assert!(check_node("build-1", true).is_err());
        assert!(check_node("node-0a1b2c3d", false).is_err());
        assert!(check_node("node-0a1b2c3", true).is_err());
    }
}
