//! What the tools that write share, so that a write is made one way: a
//! batch of composed artifacts stored as the caller ([`write`]), a post or
//! message composed at a place and stored ([`post`]), a message's block
//! written from its fields ([`message_text`]), and one line of text
//! checked ([`one_line`]).

use crate::answer::Op;
use crate::fossil::artifact;
use crate::fossil::store::{self, Batch};
use crate::place::{self, Where};
use crate::protocol::message;
use crate::stop::Stop;
use crate::tool::Call;
use serde::Serialize;

/// A one-line field's limit (a thread's title, a question's option), in characters.
pub const TITLE_MAX: usize = 200;

/// Composes `text` at `at` as the caller and stores it ([`write`]): a
/// message carrying OCX's tag for `kind` (`record`, `stop`, `question`...)
/// or, with no kind, a plain post. Answers the artifact's hash (the one it
/// would have, on a dry run).
pub fn post(
    call: &mut Call,
    at: &Where,
    text: &str,
    kind: Option<&str>,
    published: bool,
) -> Result<String, Stop> {
    let policy = call.repo()?.hash_policy()?;
    let login = call.caller()?.login.clone();
    let mut batch = Batch::default();
    let hash = match kind {
        Some(kind) => place::compose_message(&mut batch, policy, &login, at, text, kind),
        None => place::compose(&mut batch, policy, &artifact::now(), &login, at, text),
    };
    write(call, &batch, published)?;
    Ok(hash)
}

/// A message's fields as JSON and its fenced block, as a post carries it.
pub fn message_text<T: Serialize>(msg: &T) -> Result<(serde_json::Value, String), Stop> {
    let fields = serde_json::to_value(msg).map_err(Stop::internal)?;
    let block = match fields.as_object() {
        Some(object) => message::write(object),
        None => return Err(Stop::failed("a message's fields are not an object")),
    };
    Ok((fields, block))
}

/// Stores `batch` as the caller (or logs what it would store on a dry
/// run); a batch not `published` goes to the moderators' queue. A run
/// under review stores nothing: the node holds the batch for a decision
/// ([`crate::node::held::hold`]), and [`held`] names its question. On a node
/// the node is woken after (a write there starts no backoffice); in a
/// clone's checkout the write is pushed to the clone's server, so that
/// server records the caller as its sender, and counts as done only once
/// the server's receipt says it received each artifact from the caller;
/// a server serving no OCX page cannot say, and the write, pushed, is
/// refused as unconfirmed.
pub fn write(call: &mut Call, batch: &Batch, published: bool) -> Result<(), Stop> {
    for (what, hash, _) in &batch.artifacts {
        call.log(Op::Compose {
            artifact: what.clone(),
            hash: hash.clone(),
        });
    }
    if let Some(run) = call.cx.run().filter(|_| under_review(call))
        && !call.dry_run
    {
        let run = run.clone();
        let question =
            crate::node::held::hold(call.fossil()?, call.repo()?, &run, batch, published)?;
        call.log(Op::Held {
            artifacts: batch.hashes(),
            question,
        });
        let _ = crate::node::poke(&run.root);
        return Ok(());
    }
    let sender = call.caller()?.login.clone();
    if !call.dry_run {
        let (fossil, repo) = (call.fossil()?, call.repo()?);
        store::store(fossil, repo, &sender, batch, published)?;
        if !published {
            for h in batch.hashes() {
                fossil.queue_for_moderation(repo.path(), &h)?;
            }
        }
    }
    call.log(Op::Store {
        artifacts: batch.hashes(),
        sender,
        published,
        done: !call.dry_run,
    });
    if let Some(run) = call.cx.run() {
        let _ = crate::node::poke(&run.root);
        return Ok(());
    }
    let repo = call.repo()?;
    if crate::node::is_node(repo)? {
        crate::node::poke_repository(repo);
    } else if call.cx.repository.is_none()
        && let Some(remote) = repo.remote_url()?
    {
        let remote = crate::fossil::redact_password(&remote);
        if !call.dry_run {
            call.fossil()?
                .push_clone(call.repo()?.path())
                .map_err(|e| {
                    Stop::internal(e).next("it is kept in your clone; push it with `fossil push`")
                })?;
        }
        call.log(Op::Fossil {
            operation: format!("push to {remote}"),
            done: !call.dry_run,
        });
        if !call.dry_run && published {
            let receipts = super::served::receipts(call)?;
            if let Some(server) = receipts.asked() {
                let sender = call.caller()?.login.clone();
                super::served::confirm(call, server, &batch.hashes(), &sender)?;
            }
        }
    }
    Ok(())
}

/// Whether this call is a run's under review (`restrict.review`), whose
/// writes the node holds for a decision.
pub fn under_review(call: &Call) -> bool {
    call.cx
        .run()
        .is_some_and(|r| r.restrict.review == Some(true))
}

/// Refuses, for a run under review, a write the node cannot hold as it
/// would be written (`what`, said as the refusal names it).
pub fn refused_under_review(call: &Call, what: &str) -> Result<(), Stop> {
    if under_review(call) {
        return Err(Stop::new(format!(
            "this run's writes are held for review (restrict.review), and {what} cannot be held"
        ))
        .next("say in a post what you would write, which is held for review"));
    }
    Ok(())
}

/// The question a write of this call is held under (`restrict.review`),
/// if it was held rather than stored.
pub fn held(call: &Call) -> Option<String> {
    call.log.iter().rev().find_map(|op| match op {
        Op::Held { question, .. } => Some(question.clone()),
        _ => None,
    })
}

/// Refuses text in `field` that is not one line.
pub fn one_line(field: &str, text: &str) -> Result<(), Stop> {
    if text.trim().is_empty() {
        return Err(
            Stop::field(field, "is empty").next(format!("give {field} as one line of text"))
        );
    }
    if text.contains(['\n', '\r']) {
        return Err(Stop::field(field, "must be one line")
            .next(format!("give {field} as one line of text")));
    }
    if text.chars().count() > TITLE_MAX {
        return Err(
            Stop::field(field, format!("is longer than {TITLE_MAX} characters"))
                .next(format!("shorten {field}")),
        );
    }
    Ok(())
}
