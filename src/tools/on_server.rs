//! A run on an agent machine acts on the served repository, never on the
//! machine's clone: each call its node socket takes is first made here as
//! a dry run (its input checked, the run's record's restrictions held:
//! `branch` on `push` by OCX's own reading of each artifact, `own_thread`
//! on `post`), then made on the server's page signed in as the run's
//! login, whose password the machine's watcher holds and the run never
//! does; the server holds the same restrictions again, and a write counts
//! only once the server's receipt names that login. A `push` the server
//! gives no answer to is kept for the machine to push again before the
//! run's response.

use crate::answer::{Answer, Op, Stopped, value_text};
use crate::context::{RunScope, ServedAs};
use crate::node::config::NodeConfig;
use crate::node::machine::checkins;
use crate::node::machine::written::{confirm, written};
use crate::node::page::{Page, PageError};
use crate::node::receipts::Server;
use crate::stop::StopKind;
use serde_json::Value;
use std::time::Duration;

/// How long the server is given to answer a call.
const WITHIN: Duration = Duration::from_secs(120);

/// `name` (a tool that `writes`, or only reads) called with `input` by
/// `run` on the server `served` names, once `checked` (the same call made
/// here as a dry run) found nothing to refuse; its answer, and its result
/// as text when `text` asks for it. A `push` the server gives no answer to
/// is kept for the machine to push again ([`checkins`]); one it takes
/// forgets what it carried that was kept.
pub fn answer(
    name: &str,
    writes: bool,
    input: Value,
    (run, served): (&RunScope, &ServedAs),
    checked: Answer,
    text: bool,
) -> (Answer, Option<String>) {
    let pushes = name == <crate::tools::push::Push as crate::tool::Tool>::NAME;
    let dir = NodeConfig::run_dir(&run.root, &run.record);
    let checked_checkins = written(checked.result.as_ref());
    let server = Server::new(Page::signed_in(
        &served.url,
        &served.login,
        &served.password,
        WITHIN,
    ));
    let mut log = checked.log;
    log.push(Op::Fossil {
        operation: format!("{name} on {} as {}", served.url, served.login),
        done: true,
    });
    let mut answer = match server.page().answer(name, &input) {
        Ok(a) => a,
        Err(e) => {
            let kept = (pushes && e.away())
                .then(|| keep_push(&dir, &input, &checked_checkins, &e, &served.login))
                .flatten();
            let mut stop = crate::stop::Stop::from(e);
            if let Some((reason, next)) = kept {
                stop.reason = reason;
                stop.next_step = Some(next);
            }
            return (
                stopped(
                    name,
                    log,
                    stop.kind,
                    stop.field,
                    stop.reason,
                    stop.next_step,
                ),
                None,
            );
        }
    };
    answer.log.splice(0..0, log);
    if answer.ok && writes {
        let hashes = written(answer.result.as_ref());
        if !hashes.is_empty()
            && let Err(why) = confirm(&server, &hashes, &served.login)
        {
            let mut log = answer.log;
            log.push(Op::Read {
                what: format!("{}'s receipts for what was written", served.url),
            });
            return (
                stopped(
                    name,
                    log,
                    StopKind::Failed,
                    Some("server".into()),
                    why.to_string(),
                    Some("read the thread on the server; the machine's node tries nothing again by itself".into()),
                ),
                None,
            );
        }
        answer.log.push(Op::Read {
            what: format!("{}'s receipts, naming {}", served.url, served.login),
        });
        if pushes {
            let _ = checkins::taken(&dir, &sent(&input));
        }
    }
    let shown =
        (text && answer.ok).then(|| answer.result.as_ref().map(value_text).unwrap_or_default());
    (answer, shown)
}

/// `name` (a tool that writes) called with `input` by `run`, a run under
/// review on an agent machine, once `checked` (the same call made here as
/// a dry run) found nothing to refuse: held in the run's directory, made
/// on the server as the run's login only once a reviewer approves
/// ([`crate::node::held::hold_call`]); the answer is the dry run's, its
/// result's `held` naming the question.
pub fn hold(
    name: &str,
    input: Value,
    (cx, run): (&crate::context::Context, &RunScope),
    checked: Answer,
    text: bool,
) -> (Answer, Option<String>) {
    let checkins: Vec<String> = checked
        .result
        .as_ref()
        .and_then(|r| r["checkins"].as_array())
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(String::from)
        .collect();
    let held = cx.fossil().and_then(|fossil| {
        let repo = cx.repo()?;
        crate::node::held::hold_call(fossil, repo, run, name, &input, &checkins)
            .map_err(crate::stop::Stop::from)
    });
    let mut answer = checked;
    match held {
        Ok(question) => {
            answer.dry_run = false;
            answer.log.push(Op::Held {
                artifacts: Vec::new(),
                question: question.clone(),
            });
            if let Some(Value::Object(result)) = answer.result.as_mut() {
                result.insert("held".into(), Value::String(question));
                result.insert("hash".into(), Value::Null);
            }
            let _ = crate::node::poke(&run.root);
        }
        Err(stop) => {
            return (
                stopped(
                    name,
                    answer.log,
                    stop.kind,
                    stop.field,
                    stop.reason,
                    stop.next_step,
                ),
                None,
            );
        }
    }
    let shown = text.then(|| answer.result.as_ref().map(value_text).unwrap_or_default());
    (answer, shown)
}

/// The hashes of the artifacts `push`'s `input` carries.
fn sent(input: &Value) -> Vec<String> {
    input["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["hash"].as_str().map(String::from))
        .collect()
}

/// Keeps in the run's directory `dir` the artifacts of a push (its
/// `input`, the check-ins among them `checkins`) that the server gave no
/// answer to, as `e` says, for the machine to push again as `login`; the
/// refusal's reason and next step saying so, or none when it could not be
/// kept.
fn keep_push(
    dir: &std::path::Path,
    input: &Value,
    checkins: &[String],
    e: &PageError,
    login: &str,
) -> Option<(String, String)> {
    let artifacts: Vec<(String, String)> = input["artifacts"]
        .as_array()?
        .iter()
        .filter_map(|a| Some((a["hash"].as_str()?.into(), a["content"].as_str()?.into())))
        .collect();
    if artifacts.is_empty() {
        return None;
    }
    checkins::keep(dir, &artifacts, checkins).ok()?;
    let (which, them) = match checkins {
        [] => ("the artifacts it carried".to_string(), "them"),
        [one] => (format!("check-in {one}"), "it"),
        many => (format!("check-ins {}", many.join(", ")), "them"),
    };
    Some((
        format!(
            "{e}: the machine keeps {which} and pushes {them} to the server as {login} once the server answers, before the run's response (which names any the server does not take)"
        ),
        format!("go on with the run; push again to send {them} sooner"),
    ))
}

fn stopped(
    name: &str,
    log: Vec<Op>,
    kind: StopKind,
    field: Option<String>,
    reason: String,
    next_step: Option<String>,
) -> Answer {
    Answer {
        ok: false,
        tool: name.to_string(),
        dry_run: false,
        log,
        result: None,
        stopped: Some(Stopped {
            kind,
            field,
            reason,
        }),
        next_step,
        took_ms: 0,
    }
}
