//! Who keeps C5 for a run on an agent machine: the served repository's
//! side, which alone owns Fossil's user table. When a record addressed to
//! an agent machine arrives (its `node` a server-code whose node login
//! `approve --node` let in), it makes the run's login with the run's
//! capabilities, with a password no one is told, keeps a `config` row of
//! its own naming that machine (`run_login` sets the password the
//! machine's login alone is handed; the row keeps none), and, once the
//! record's response counts, takes the capabilities away and forgets the
//! row. Done by the served node at each wake, and by the hook where no
//! node takes its poke; each step may be done again without harm.

use super::log::{Done, Event};
use super::receipts::Receipts;
use super::wake::{RUN_CAPABILITIES, beyond_sender, may_send_requests};
use super::{NodeError, run_user};
use crate::fossil::repo::remote_run_row;
use crate::fossil::{Fossil, Repository};
use crate::protocol::found::{self, StandingRecord, node_login};
use serde::{Deserialize, Serialize};

/// What the row of a remote run keeps.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RemoteRun {
    /// The record, by full hash.
    pub record: String,
    /// The agent machine's node login, the only one a password is given to.
    pub machine: String,
    /// The run's login.
    pub user: String,
}

impl RemoteRun {
    /// What the row of record `record` keeps, when it reads.
    pub fn read(repo: &Repository, record: &str) -> Result<Option<RemoteRun>, NodeError> {
        Ok(repo
            .remote_run(record)?
            .and_then(|t| serde_json::from_str(&t).ok()))
    }

    /// The records whose runs agent machine `machine` (its node login)
    /// holds, by full hash.
    pub fn records_of(repo: &Repository, machine: &str) -> Result<Vec<String>, NodeError> {
        Ok(repo
            .remote_runs()?
            .into_iter()
            .filter_map(|(_, t)| serde_json::from_str::<RemoteRun>(&t).ok())
            .filter(|r| r.machine == machine)
            .map(|r| r.record)
            .collect())
    }
}

/// The run `login` is, when it is the login of an open record addressed to
/// an agent machine whose record restricts `no_password`: what the served
/// side holds its writes to, as a run's node socket is held on the node
/// (its branch on `push`, its place on `post`). Its machine calls the
/// served page signed in as that login, the run never.
pub fn scope_of(
    repo: &Repository,
    login: &str,
) -> Result<Option<crate::context::RunScope>, NodeError> {
    for (_, row) in repo.remote_runs()? {
        let Ok(run) = serde_json::from_str::<RemoteRun>(&row) else {
            continue;
        };
        if run.user != login {
            continue;
        }
        let Some(receipt) = repo.receipt(&run.record)? else {
            continue;
        };
        let Some(r) = found::record(repo, receipt.rid, &run.record)? else {
            continue;
        };
        if r.record.restrict.no_password != Some(true) || r.record.user != login {
            continue;
        }
        let root =
            super::root_of(repo)?.unwrap_or_else(|| super::config::default_root(repo.path()));
        // Its machine held each write under review and calls here only
        // once a reviewer approved it: held here again, it would wait on
        // a question no node of this host settles.
        let restrict = crate::protocol::kinds::Restrict {
            review: None,
            ..r.record.restrict
        };
        return Ok(Some(crate::context::RunScope {
            user: run.user,
            record: run.record,
            place: r.place,
            restrict,
            root,
            server: None,
        }));
    }
    Ok(None)
}

/// Keeps C5 for the remote runs: makes the run's login for each record
/// among `hashes` addressed to an agent machine, then withdraws it for
/// each kept run whose response counts. Answers what it did, a line each.
pub fn keep(
    fossil: &Fossil,
    repo: &Repository,
    hashes: &[String],
    held_here: &[(String, String)],
) -> Vec<Event> {
    let own = match repo.server_code() {
        Ok(own) => own,
        Err(e) => {
            return vec![Event::new(
                Done::Failed,
                format!("could not keep remote runs: {e}"),
            )];
        }
    };
    let mut report = open_all(fossil, repo, &own, hashes, held_here);
    report.extend(withdraw(fossil, repo));
    report
}

/// Makes the run's login for each record among `hashes` addressed to an
/// agent machine (not to `own`, the served repository's server-code),
/// never as a login another open record holds (there, or among
/// `held_here`, the served node's own open runs as (record, login)); a
/// line each for what it did.
pub fn open_all(
    fossil: &Fossil,
    repo: &Repository,
    own: &str,
    hashes: &[String],
    held_here: &[(String, String)],
) -> Vec<Event> {
    let mut report = Vec::new();
    for hash in hashes {
        match open(fossil, repo, hash, own, held_here) {
            Ok(Some(event)) => report.push(event.arrival(hash).record(hash)),
            Ok(None) => {}
            Err(e) => report.push(
                Event::new(Done::Failed, format!("could not keep its remote run: {e}"))
                    .arrival(hash)
                    .record(hash),
            ),
        }
    }
    report
}

/// Withdraws the run's login of each kept remote run whose response
/// counts, and forgets every password an earlier release kept in the rows
/// of remote runs and logins' keys; a line each for what it did.
pub fn withdraw(fossil: &Fossil, repo: &Repository) -> Vec<Event> {
    let mut report = match crate::fossil::repo::forget_kept_passwords(fossil, repo) {
        Ok(0) => Vec::new(),
        Ok(n) => vec![
            Event::new(Done::ForgotPasswords, format!("{n} rows kept passwords")).count(n as u64),
        ],
        Err(e) => vec![Event::new(
            Done::Failed,
            format!("could not forget the passwords rows keep: {e}"),
        )],
    };
    report.extend(withdraw_answered(fossil, repo).unwrap_or_else(|e| {
        vec![Event::new(
            Done::Failed,
            format!("could not withdraw remote runs: {e}"),
        )]
    }));
    report
}

/// The record `hash` as it stands, when it is one addressed to an enrolled
/// agent machine (not to `own`, the served repository's server-code).
fn remote_record(
    repo: &Repository,
    hash: &str,
    own: &str,
) -> Result<Option<(StandingRecord, String)>, NodeError> {
    let Some(receipt) = repo.receipt(hash)? else {
        return Ok(None);
    };
    if receipt.private {
        return Ok(None);
    }
    let Some(r) = found::record(repo, receipt.rid, hash)? else {
        return Ok(None);
    };
    if r.record.node == own {
        return Ok(None);
    }
    let machine = node_login(&r.record.node);
    if !repo.is_node_login(&machine)? {
        return Ok(None);
    }
    Ok(Some((r, machine)))
}

/// Makes the run's login for record `hash`, when it is addressed to an
/// enrolled agent machine, its sender may send it, it is unanswered, and
/// its user may be a run's; a record the machine must refuse gets nothing
/// here (the machine refuses it, naming why).
fn open(
    fossil: &Fossil,
    repo: &Repository,
    hash: &str,
    own: &str,
    held_here: &[(String, String)],
) -> Result<Option<Event>, NodeError> {
    let Some((r, machine)) = remote_record(repo, hash, own)? else {
        return Ok(None);
    };
    if repo.remote_run(hash)?.is_some()
        || r.problem.is_some()
        || Receipts::served(repo)
            .response(repo, &r.place, hash, &r.record.node)?
            .is_some()
    {
        return Ok(None);
    }
    if !may_send_requests(repo, r.said.from.as_deref())? {
        return Ok(Some(Event::new(
            Done::MadeNoLogin,
            "its sender may not send a record",
        )));
    }
    if let Some(reason) = beyond_sender(repo, &r)? {
        return Ok(Some(Event::new(Done::MadeNoLogin, reason)));
    }
    let user = r.record.user.clone();
    let standing = match run_user::check(repo, &user, Some(&machine), true)? {
        Ok(s) => s,
        Err(p) => {
            return Ok(Some(Event::new(
                Done::MadeNoLogin,
                format!("{}: {}", p.field, p.reason),
            )));
        }
    };
    let sender_is_admin = match r.said.from.as_deref() {
        Some(s) => repo.capabilities(s)?.is_some_and(|c| c.is_admin()),
        None => false,
    };
    if let Err(p) = run_user::check_sender_names_new(repo, &user, standing, sender_is_admin, hash)?
    {
        return Ok(Some(Event::new(
            Done::MadeNoLogin,
            format!("{}: {}", p.field, p.reason),
        )));
    }
    let mut held = held(repo)?;
    held.extend_from_slice(held_here);
    if let Some(other) = run_user::held_by_another(&held, &user, hash) {
        return Ok(Some(Event::new(
            Done::MadeNoLogin,
            format!("{user} has another open record ({})", short(other)),
        )));
    }
    let password = super::random_password();
    let mark = (standing == run_user::Standing::New)
        .then(|| format!("made for {machine}{}", run_user::made_for(hash)));
    fossil.give_run_login(
        repo.path(),
        &user,
        &password,
        RUN_CAPABILITIES,
        mark.as_deref(),
    )?;
    let kept = RemoteRun {
        record: hash.to_string(),
        machine: machine.clone(),
        user: user.clone(),
    };
    fossil.config_set(
        repo.path(),
        &remote_run_row(hash),
        &serde_json::to_string(&kept).unwrap_or_default(),
    )?;
    Ok(Some(
        Event::new(Done::MadeLogin, format!("for the agent machine {machine}")).login(&user),
    ))
}

/// The run logins the served side holds for agent machines' open
/// records, as (record, login).
pub fn held(repo: &Repository) -> Result<Vec<(String, String)>, NodeError> {
    Ok(repo
        .remote_runs()?
        .into_iter()
        .filter_map(|(record, text)| {
            let kept: RemoteRun = serde_json::from_str(&text).ok()?;
            Some((record, kept.user))
        })
        .collect())
}

/// Withdraws the run's login of each kept remote run whose record's
/// response counts (sent by the machine's login, or an administrator's
/// `lost` past the run's wall), and forgets its row.
fn withdraw_answered(fossil: &Fossil, repo: &Repository) -> Result<Vec<Event>, NodeError> {
    let mut report = Vec::new();
    for (hash, text) in repo.remote_runs()? {
        let Some(receipt) = repo.receipt(&hash)? else {
            continue;
        };
        let Some(r) = found::record(repo, receipt.rid, &hash)? else {
            continue;
        };
        if Receipts::served(repo)
            .response(repo, &r.place, &hash, &r.record.node)?
            .is_none()
        {
            continue;
        }
        let kept = serde_json::from_str::<RemoteRun>(&text).ok();
        let user = kept.as_ref().map_or(r.record.user.as_str(), |k| &k.user);
        let machine = node_login(&r.record.node);
        if matches!(
            run_user::check(repo, user, Some(&machine), true)?,
            Ok(run_user::Standing::Marked)
        ) {
            fossil.user_capabilities(repo.path(), user, "")?;
        }
        fossil.config_delete(repo.path(), &remote_run_row(&hash))?;
        report.push(
            Event::new(Done::Withdrew, "its record was answered")
                .record(&hash)
                .login(user),
        );
    }
    Ok(report)
}

/// The first ten characters of a hash, for the log.
fn short(hash: &str) -> String {
    hash.chars().take(10).collect()
}
