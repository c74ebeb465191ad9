//! What `register`, `approve`, `collect` and `send_runs` share: the served
//! repository named outright, a login's name checked, the key an approval
//! keeps in its own `config` row, and the audit post every approval and
//! revocation writes in the one thread kept for logins.

use crate::answer::Op;
use crate::context::Who;
use crate::fossil::Repository;
use crate::fossil::caps::SPECIAL_LOGINS;
use crate::fossil::repo::{LOGINS_THREAD_ROW, Lookup, login_key_row};
use crate::place::{Place, Where};
use crate::stop::Stop;
use crate::tool::Call;
use serde::{Deserialize, Serialize};

/// The longest login `approve` makes, in characters.
pub const LOGIN_MAX: usize = 64;

/// The title of the thread approvals are recorded in.
pub const THREAD_TITLE: &str = "Logins let in";

/// How many tries `collect` answers for one login in a minute.
pub const TRIES_A_MINUTE: u32 = 5;

/// The minute `collect` counts tries in, in seconds.
pub const TRY_WINDOW: i64 = 60;

/// What an approval keeps in the `config` row `ocx-node-key-LOGIN`: the
/// key (the SHA-256 of the asker's code), what Fossil keeps of the
/// password approve or collect last set (never the password itself), and
/// what `collect` counts: its tries this minute and when the key expires.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Kept {
    pub key: String,
    /// Fossil's hash of the password approve or collect set (as its user
    /// table keeps it), to tell a password changed by hand since; none
    /// when it was changed before this was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pw: Option<String>,
    pub capabilities: String,
    /// Whether the login is an agent machine's node login (`--node`).
    #[serde(default)]
    pub node: bool,
    /// Who approved it.
    pub approved_by: String,
    /// When the key expires unless collected (Unix seconds).
    pub expires: i64,
    /// Whether the password was collected (the key then opens nothing more).
    #[serde(default)]
    pub collected: bool,
    /// Tries since `window` began (Unix seconds).
    #[serde(default)]
    pub tries: u32,
    #[serde(default)]
    pub window: i64,
}

impl Kept {
    /// What the row of `login` keeps, if it holds a key that reads (a row
    /// an earlier release wrote read as it is kept once its password is
    /// forgotten).
    pub fn read(repo: &Repository, login: &str) -> Result<Option<Kept>, Stop> {
        let Some(text) = repo.login_key(login)? else {
            return Ok(None);
        };
        let text = repo
            .without_password(&login_key_row(login), &text)?
            .unwrap_or(text);
        Ok(serde_json::from_str(&text).ok())
    }

    /// Keeps it in the row of `login`.
    pub fn keep(&self, call: &Call, login: &str) -> Result<(), Stop> {
        let text = serde_json::to_string(self).map_err(Stop::internal)?;
        call.fossil()?
            .config_set(call.repo()?.path(), &login_key_row(login), &text)
            .map_err(Stop::internal)
    }

    /// Whether `login` still holds the password this approval set: what
    /// Fossil keeps of it is what was kept here.
    pub fn holds_its_password(&self, repo: &Repository, login: &str) -> Result<bool, Stop> {
        let now = repo.password_hash(login)?;
        Ok(self.pw.is_some() && now == self.pw)
    }
}

/// Forgets the passwords an earlier release kept in `config` rows, before
/// a call that writes reads one (a dry run leaves them to the next).
pub fn forget_kept_passwords(call: &Call) -> Result<(), Stop> {
    if call.dry_run {
        return Ok(());
    }
    crate::fossil::repo::forget_kept_passwords(call.fossil()?, call.repo()?)
        .map(|_| ())
        .map_err(Stop::internal)
}

/// Now, in Unix seconds.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Refuses a call not made on the served repository itself: on the web
/// page it is; on the command line it must be named outright, since a
/// clone's logins are its own and reach no one.
pub fn on_served(call: &Call, tool: &str) -> Result<(), Stop> {
    match (&call.cx.who, &call.cx.repository) {
        (Who::Web { .. }, _) | (Who::Local { .. }, Some(_)) => Ok(()),
        (Who::Local { .. }, None) => Err(Stop::field(
            "repository",
            format!(
                "{tool} acts on the served repository, named outright: a clone's logins are its own"
            ),
        )
        .next("name the served repository's file with --repository FILE")),
        (Who::Run(_), _) => Err(Stop::new(format!("a run may not call {tool}"))
            .next("ask an administrator of the served repository")),
    }
}

/// Refuses a login that is not lowercase letters, digits and dashes
/// (beginning with a letter or digit, at most [`LOGIN_MAX`]), or that is
/// one of Fossil's own.
pub fn check_login(field: &str, login: &str) -> Result<(), Stop> {
    let well_formed = !login.is_empty()
        && login.len() <= LOGIN_MAX
        && login
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !login.starts_with('-');
    if !well_formed {
        return Err(Stop::field(
            field,
            format!(
                "{:?} is not a login of lowercase letters, digits and dashes (at most {LOGIN_MAX}, not beginning with a dash)",
                login.chars().take(80).collect::<String>()
            ),
        )
        .next("give a login such as build-box-1"));
    }
    if SPECIAL_LOGINS.contains(&login) {
        return Err(Stop::field(
            field,
            format!("{login} is one of Fossil's own logins, which OCX never changes"),
        )
        .next("give a login of its own to the machine or person"));
    }
    Ok(())
}

/// Writes `text` as the caller in the thread kept for logins (started with
/// the first approval, its first post named in the `config` row
/// `ocx-logins-thread`), so every clone can see who let whom in, by receipt.
pub fn audit_post(call: &mut Call, text: &str) -> Result<Option<String>, Stop> {
    let repo = call.repo()?;
    let _caller = call.caller()?.login.clone();
    let _policy = repo.hash_policy()?;
    let thread = match repo.logins_thread()? {
        Some(root) if root.len() >= 40 => match repo.resolve(&root)? {
            Lookup::One(..) => Place::resolve(repo, "thread", &root).ok(),
            _ => None,
        },
        _ => None,
    };
    let at = match &thread {
        Some(p) => Where::At(p.clone()),
        None => Where::NewThread(THREAD_TITLE.into()),
    };
    let hash = super::writing::post(call, &at, text, None, true)?;
    if thread.is_none() {
        if !call.dry_run {
            call.fossil()?
                .config_set(call.repo()?.path(), LOGINS_THREAD_ROW, &hash)?;
        }
        call.log(Op::Fossil {
            operation: "keep the thread for logins".into(),
            done: !call.dry_run,
        });
    }
    Ok((!call.dry_run).then_some(hash))
}
