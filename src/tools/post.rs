//! `post`: a reply to a forum post, a new thread, or a change to a ticket,
//! stored so that Fossil records the caller as its sender.

use crate::place::{Place, Where};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use crate::tools::asking as ask;
use crate::tools::writing;
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
    /// The full hash of the post or ticket change (null on a dry run, and while held).
    pub hash: Option<String>,
    /// The thread's first post, for a post.
    pub thread: Option<String>,
    /// The ticket's id, for a ticket change.
    pub ticket: Option<String>,
    /// Whether the post awaits a moderator (the caller holds `3` but not `4`).
    pub moderated: bool,
    /// For a run under review: the question it is held under; it is written only once approved, and the run's next line says how it was decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
}

/// The `post` tool.
pub struct Post;

/// A thread title's limit, in characters.
pub use super::writing::TITLE_MAX;

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
                writing::one_line("title", t)?;
                None
            }
            (Some(to), None) => Some(call.place("to", to)?),
        };
        own_place(call, place.as_ref())?;
        let _repo = call.repo()?;
        let caller = call.caller()?.clone();
        let mut out = Output {
            hash: None,
            thread: None,
            ticket: None,
            moderated: false,
            held: None,
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
        let (text, kind) = match &asked {
            Some((text, kind)) => (text.as_str(), Some(*kind)),
            None => (input.text.as_str(), None),
        };
        let hash = writing::post(call, &at, text, kind, !out.moderated)?;
        if out.thread.is_none() && out.ticket.is_none() {
            out.thread = Some(hash.clone());
        }
        out.hash = Some(hash);
        out.held = writing::held(call);
        if call.dry_run || out.held.is_some() {
            out.hash = None;
            if out.ticket.is_none() && input.to.is_none() {
                out.thread = None;
            }
        }
        Ok(out)
    }
}

/// For a run held to its own thread (`own_thread`): refuses a post
/// anywhere but its record's place (`place`, none for a new thread).
fn own_place(call: &Call, place: Option<&Place>) -> Result<(), Stop> {
    let Some(run) = call
        .cx
        .run()
        .filter(|r| r.restrict.own_thread == Some(true))
    else {
        return Ok(());
    };
    let same = match (place, &run.place) {
        (Some(Place::Thread { root_rid: a, .. }), Place::Thread { root_rid: b, .. }) => a == b,
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
    Ok(())
}
