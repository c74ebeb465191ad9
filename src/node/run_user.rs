//! Which logins a run may act as (C5): only a run's own. Fossil's own
//! logins, a node's login, a login holding admin or setup, and a login
//! made by hand that no administrator adopted are refused, naming `user`;
//! a run's login is one the node made for runs or one adopted, each marked
//! by a row of the repository's own (`Repository::is_run_user`).

use crate::fossil::caps::SPECIAL_LOGINS;
use crate::fossil::{FossilError, Repository};
use crate::protocol::kinds::Problem;

/// Whether a login a record names may be a run's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// No such login yet: the node makes it, and marks it as a run's.
    New,
    /// A login marked as a run's.
    Marked,
    /// An existing login not marked as a run's: refused where the marks
    /// are kept (the node's repository), left to the node elsewhere.
    Unmarked,
}

/// Judges `login` as a run's user in `repo`, by all but the mark: refused
/// (naming `user`) when it is no login's name a run may have, one of
/// Fossil's own logins, a node's (`node_login`, or any `node-` login) or
/// one holding admin or setup.
pub fn judge(
    repo: &Repository,
    login: &str,
    node_login: Option<&str>,
) -> Result<Result<Standing, Problem>, FossilError> {
    let refuse = |reason: String| Ok(Err(Problem::new("user", reason)));
    if login.starts_with('-') {
        return refuse(format!(
            "{login:?} begins with '-', which fossil would read as an option"
        ));
    }
    if login.is_empty()
        || login.len() > 64
        || !login
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b))
    {
        return refuse(format!(
            "{login:?} is not a run's login: letters, digits, '-', '_', '.' and '@' only"
        ));
    }
    if SPECIAL_LOGINS.contains(&login) {
        return refuse(format!(
            "{login} is one of Fossil's own logins; a run never acts as one"
        ));
    }
    if Some(login) == node_login || login.starts_with("node-") {
        return refuse(format!("{login} is a node's own login"));
    }
    let Some(own) = repo.own_capabilities(login)? else {
        return Ok(Ok(Standing::New));
    };
    let admin = own.contains(['a', 's']) || repo.capabilities(login)?.is_some_and(|c| c.is_admin());
    if admin {
        return refuse(format!("{login} holds admin or setup; a run never may"));
    }
    Ok(Ok(if repo.is_run_user(login)? {
        Standing::Marked
    } else {
        Standing::Unmarked
    }))
}

/// [`judge`], refusing an unmarked login too when `marks_here` (`repo` is
/// the node's repository, which alone keeps the marks).
pub fn check(
    repo: &Repository,
    login: &str,
    node_login: Option<&str>,
    marks_here: bool,
) -> Result<Result<Standing, Problem>, FossilError> {
    Ok(match judge(repo, login, node_login)? {
        Ok(Standing::Unmarked) if marks_here => Err(Problem::new(
            "user",
            format!(
                "{login} is a login no node made for runs and no administrator adopted (`ocx adopt`)"
            ),
        )),
        other => other,
    })
}

/// The words a mark says of the login made for `record`, after who made it.
pub fn made_for(record: &str) -> String {
    format!(" for record {record}")
}

/// Whether `login` was made for `record` itself (its mark says so), so a
/// node opening that record again after a crash finds its own login.
pub fn made_for_record(repo: &Repository, login: &str, record: &str) -> Result<bool, FossilError> {
    Ok(repo
        .run_user_mark(login)?
        .is_some_and(|m| m.ends_with(&made_for(record))))
}

/// Refuses, naming `user`, a record whose sender holds `R` but not admin
/// or setup and whose login is not a new one (nor one made for this very
/// record): such a sender names only a login no one holds, so it can
/// never open, reset or withdraw a login another record's run holds or held.
pub fn check_sender_names_new(
    repo: &Repository,
    login: &str,
    standing: Standing,
    sender_is_admin: bool,
    record: &str,
) -> Result<Result<(), Problem>, FossilError> {
    if sender_is_admin || standing == Standing::New || made_for_record(repo, login, record)? {
        return Ok(Ok(()));
    }
    Ok(Err(Problem::new(
        "user",
        format!(
            "{login} is an existing login, and a sender holding R (not admin or setup) names only a new login for its run"
        ),
    )))
}

/// The open record among `held` (record, login) other than `record` whose
/// run holds `login`, if any.
pub fn held_by_another<'a>(
    held: &'a [(String, String)],
    login: &str,
    record: &str,
) -> Option<&'a str> {
    held.iter()
        .find(|(r, u)| u == login && r != record)
        .map(|(r, _)| r.as_str())
}
