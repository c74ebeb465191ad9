//! `post`: a reply to a forum post, a new thread, or a change to a ticket,
//! stored so that Fossil records the caller as its sender.

use crate::answer::Op;
use crate::fossil::artifact;
use crate::fossil::store::{self, Batch};
use crate::place::{self, Place, Where};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use crate::tools::asking as ask;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `post`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The post to reply to, or the ticket to change, by hash or a prefix of 10+ hex digits. Leave it out to start a new thread.
    #[serde(default)]
    pub to: Option<String>,
    /// The new thread's title, one line; only without `to`.
    #[serde(default)]
    pub title: Option<String>,
    /// What to say, in Markdown; with `for`, the question; with `decision`, the decision's note.
    pub text: String,
    /// Ask this login to decide: the post is a question, `text` what is asked.
    #[serde(default, rename = "for")]
    pub for_login: Option<String>,
    /// With `for`: the choices, the first one recommended.
    #[serde(default)]
    pub options: Vec<String>,
    /// With `for`: what the decision changes, one line.
    #[serde(default)]
    pub stakes: Option<String>,
    /// With `for`: what to read first, each a hash or prefix, a ticket's or tech-note's id, or a link of this server.
    #[serde(default)]
    pub references: Vec<String>,
    /// The post is a decision on the question `to` names, `text` its note.
    #[serde(default)]
    pub decision: bool,
}

/// What `post` wrote.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The full hash of the post or ticket change (null on a dry run).
    pub hash: Option<String>,
    /// The thread's first post, for a post.
    pub thread: Option<String>,
    /// The ticket's id, for a ticket change.
    pub ticket: Option<String>,
    /// Whether the post awaits a moderator (the caller holds `3` but not `4`).
    pub moderated: bool,
}

/// The `post` tool.
pub struct Post;

/// A thread title's limit, in characters.
pub const TITLE_MAX: usize = 200;

impl Tool for Post {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "post";
    const SUMMARY: &'static str =
        "Reply to a forum post, start a thread, or add a comment to a ticket, as yourself.";
    const NEEDS: Needs = Needs::Any("34cw");
    const WRITES: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        if input.text.trim().is_empty() {
            return Err(Stop::field("text", "is empty").next("say something in text"));
        }
        if input.for_login.is_none()
            && (!input.options.is_empty() || input.stakes.is_some() || !input.references.is_empty())
        {
            return Err(Stop::field(
                "for",
                "options, stakes and references belong to a question, which names for",
            )
            .next("give for, the login to decide, or leave out options, stakes and references"));
        }
        if input.decision && input.for_login.is_some() {
            return Err(
                Stop::field("decision", "a post is a question or a decision, not both")
                    .next("leave out for, or leave out decision"),
            );
        }
        if input.decision && input.to.is_none() {
            return Err(Stop::field("to", "a decision names its question")
                .next("give to, the question's hash"));
        }
        super::served::pull_first(call)?;
        let place = match (&input.to, &input.title) {
            (Some(_), Some(_)) => {
                return Err(
                    Stop::field("title", "a reply has no title; only a new thread does")
                        .next("leave out title, or leave out to to start a thread"),
                );
            }
            (None, None) => {
                return Err(Stop::field("title", "a new thread needs a title")
                    .next("give title, or give to to reply to a post"));
            }
            (None, Some(t)) => {
                one_line("title", t)?;
                None
            }
            (Some(to), None) => Some(call.place("to", to)?),
        };
        if let Some(run) = call.cx.run()
            && run.restrict.own_thread == Some(true)
        {
            let same = match (&place, &run.place) {
                (Some(Place::Thread { root_rid: a, .. }), Place::Thread { root_rid: b, .. }) => {
                    a == b
                }
                (Some(Place::Ticket { tkt_id: a, .. }), Place::Ticket { tkt_id: b, .. }) => a == b,
                _ => false,
            };
            if !same {
                return Err(Stop::field(
                    "to",
                    "this run posts only in its record's place (own_thread)",
                )
                .next("reply to a post of the record's own thread"));
            }
        }
        let repo = call.repo()?;
        let caller = call.caller()?.clone();
        let policy = repo.hash_policy()?;
        let mut batch = Batch::default();
        let mut out = Output {
            hash: None,
            thread: None,
            ticket: None,
            moderated: false,
        };
        let at = match place {
            Some(Place::Ticket { ticket, tkt_id }) => {
                if !caller.capabilities.has_any("wc") {
                    return Err(Stop::field(
                        "to",
                        format!(
                            "a ticket comment needs capability w or c; {} holds neither",
                            caller.login
                        ),
                    )
                    .next("ask an administrator for c (append to tickets)"));
                }
                out.ticket = Some(ticket.clone());
                Where::At(Place::Ticket { ticket, tkt_id })
            }
            other => {
                if !caller.capabilities.has_any("34") {
                    return Err(Stop::new(format!(
                        "a forum post needs capability 3 or 4; {} holds neither",
                        caller.login
                    ))
                    .next("ask an administrator for 4 (write to the forum)"));
                }
                out.moderated = !caller.capabilities.has('4');
                match other {
                    Some(p) => {
                        if let Place::Thread { root, .. } = &p {
                            out.thread = Some(root.clone());
                        }
                        Where::At(p)
                    }
                    None => Where::NewThread(input.title.clone().unwrap_or_default()),
                }
            }
        };
        let asked = ask::compose_text(call, &input, &caller)?;
        let hash = match &asked {
            Some((text, kind)) => {
                place::compose_message(&mut batch, policy, &caller.login, &at, text, kind)
            }
            None => place::compose(
                &mut batch,
                policy,
                &artifact::now(),
                &caller.login,
                &at,
                &input.text,
            ),
        };
        if out.thread.is_none() && out.ticket.is_none() {
            out.thread = Some(hash.clone());
        }
        out.hash = Some(hash);
        write(call, &batch, !out.moderated)?;
        if call.dry_run {
            out.hash = None;
            if out.ticket.is_none() && input.to.is_none() {
                out.thread = None;
            }
        }
        Ok(out)
    }
}

/// Stores `batch` as the caller (or logs what it would store on a dry
/// run); a batch not `published` goes to the moderators' queue. On a node
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
