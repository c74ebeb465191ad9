//! `thread`: what was said in a forum thread or on a ticket, in the order
//! the repository received it (rcvid, then rid), each with its sender.
//! In a clone's checkout it pulls first, reads the clone, and orders and
//! names each by the server's receipts. Writes nothing.

use crate::fossil::repo::{Said, julian_to_rfc3339};
use crate::node::receipts::{Receipts, in_received_order};
use crate::place::Place;
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// At most this many posts in one answer.
pub const PAGE: usize = 20;

/// Input of `thread`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// Any post of the thread, or the ticket (its id or any change of it), by hash or a prefix of 10+ hex digits.
    pub of: String,
    /// Only what was received after this post or change.
    #[serde(default)]
    pub after: Option<String>,
}

/// What was said, oldest first.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The thread's first post, for a thread.
    pub thread: Option<String>,
    /// The ticket's id, for a ticket.
    pub ticket: Option<String>,
    /// At most 20 posts or changes.
    pub posts: Vec<Saying>,
    /// How many more follow these.
    pub more: usize,
}

/// One post or ticket change.
#[derive(Serialize, JsonSchema)]
pub struct Saying {
    /// Its full hash.
    pub hash: String,
    /// Its sender: the login this repository received it from (never the name written inside it).
    pub from: Option<String>,
    /// When it was written, in UTC (RFC 3339).
    pub when: String,
    /// Its text.
    pub text: String,
}

/// The `thread` tool.
pub struct Thread;

impl Tool for Thread {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "thread";
    const SUMMARY: &'static str =
        "What was said in a thread or on a ticket, in the order received, with who sent each.";
    const NEEDS: Needs = Needs::Any("2r");
    const WRITES: bool = false;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let receipts = super::served::pull_first(call)?;
        let place = call.place("of", &input.of)?;
        let caller = call.caller()?.clone();
        let repo = call.repo()?;
        let (mut said, thread, ticket) = match &place {
            Place::Thread { root_rid, root, .. } => {
                if !caller.capabilities.has('2') {
                    return Err(Stop::field(
                        "of",
                        format!(
                            "reading the forum needs capability 2; {} lacks it",
                            caller.login
                        ),
                    )
                    .next("ask an administrator for 2 (read the forum)"));
                }
                (repo.thread(*root_rid)?, Some(root.clone()), None)
            }
            Place::Ticket { tkt_id, ticket } => {
                if !caller.capabilities.has('r') {
                    return Err(Stop::field(
                        "of",
                        format!(
                            "reading tickets needs capability r; {} lacks it",
                            caller.login
                        ),
                    )
                    .next("ask an administrator for r (read tickets)"));
                }
                (repo.ticket_changes(*tkt_id)?, None, Some(ticket.clone()))
            }
        };
        call.read("every post of the place, in received order");
        if !caller.capabilities.has('x') {
            said.retain(|s| !s.private);
        }
        if let Some(server) = receipts.asked() {
            said = by_server(call, &receipts, server.url(), said)?;
        }
        if let Some(after) = &input.after {
            let prefix = crate::stop::hash_prefix("after", after)?;
            let pos = said
                .iter()
                .position(|s| s.hash.starts_with(&prefix))
                .ok_or_else(|| {
                    Stop::field("after", format!("{after} is not a post of this place"))
                        .next("give a post of the same thread or ticket")
                })?;
            said.drain(..=pos);
        }
        let more = said.len().saturating_sub(PAGE);
        said.truncate(PAGE);
        let mut posts = Vec::with_capacity(said.len());
        for s in said {
            posts.push(text_of(call, s)?);
        }
        Ok(Output {
            thread,
            ticket,
            posts,
            more,
        })
    }

    fn text(out: &Output) -> String {
        let mut s = String::new();
        for p in &out.posts {
            s += &format!(
                "{} from {} at {}\n{}\n\n",
                &p.hash,
                p.from.as_deref().unwrap_or("(unknown)"),
                p.when,
                p.text
                    .lines()
                    .map(|l| format!("  {l}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        if out.more > 0 {
            s += &format!("{} more\n", out.more);
        }
        if out.posts.is_empty() {
            s += "nothing said\n";
        }
        s
    }
}

/// What was said, read in a clone, ordered and named by `server`'s
/// receipts: what it received in its order (receipt, then row), each from
/// whom it received it; what it has not received last, from no one.
/// Refused when it has not received the first post or change, and when
/// it serves no OCX page to ask (never the clone's own word).
fn by_server(
    call: &mut Call,
    receipts: &Receipts,
    server: &str,
    said: Vec<Said>,
) -> Result<Vec<Said>, Stop> {
    let hashes: Vec<String> = said.iter().map(|s| s.hash.clone()).collect();
    let got = receipts.by_hash(&hashes).map_err(super::served::stop)?;
    call.read(format!(
        "{server}'s receipts for {} posts or changes",
        hashes.len()
    ));
    if said
        .first()
        .is_some_and(|s| !got.get(&s.hash).is_some_and(|r| r.received))
    {
        return Err(Stop::field(
            "of",
            format!("{server} has not received the first post or change of this place"),
        )
        .next("push it to the server first, or name a place the server holds"));
    }
    Ok(in_received_order(&got, said, |s| s))
}

fn text_of(call: &Call, s: Said) -> Result<Saying, Stop> {
    let text = crate::protocol::found::text(call.repo()?, &s)?;
    let text = String::from_utf8_lossy(&text).into_owned();
    Ok(Saying {
        hash: s.hash,
        from: s.from,
        when: julian_to_rfc3339(s.when),
        text,
    })
}
