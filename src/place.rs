//! A place, in the protocol's words: a forum thread or a ticket, where a
//! record is and where what is said about it goes.

use crate::fossil::Repository;
use crate::fossil::artifact::{self, ForumPost, HashPolicy};
use crate::fossil::repo::Lookup;
use crate::fossil::store::Batch;
use crate::stop::{Stop, hash_prefix};

/// A thread or a ticket, as a hash or prefix given in a field names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// A forum thread: its first post, and the post the hash named.
    Thread {
        root_rid: i64,
        root: String,
        post_rid: i64,
        post: String,
    },
    /// A ticket, by its row and its full id.
    Ticket { tkt_id: i64, ticket: String },
}

impl Place {
    /// The place `given` (in `field`) names: any post of a forum thread, a
    /// ticket's id, or any change of a ticket, in `repo`. Its caller logs
    /// the read.
    pub fn resolve(repo: &Repository, field: &str, given: &str) -> Result<Place, Stop> {
        let prefix = hash_prefix(field, given)?;
        let artifact = repo.resolve(&prefix)?;
        let ticket = repo.resolve_ticket(&prefix)?;
        let several = || {
            Stop::field(field, format!("{given} names several artifacts"))
                .next("give more digits of the hash")
        };
        match (artifact, ticket) {
            (Lookup::Several, _) | (_, Lookup::Several) | (Lookup::One(..), Lookup::One(..)) => {
                Err(several())
            }
            (Lookup::None, Lookup::One(tkt_id, ticket)) => Ok(Place::Ticket { tkt_id, ticket }),
            (Lookup::One(rid, hash), Lookup::None) => {
                if let Some(root_rid) = repo.thread_root(rid)? {
                    let root = if root_rid == rid {
                        hash.clone()
                    } else {
                        repo.hash_of(root_rid)?
                    };
                    return Ok(Place::Thread {
                        root_rid,
                        root,
                        post_rid: rid,
                        post: hash,
                    });
                }
                let parsed = repo.parsed(rid)?;
                if let Some(k) = parsed.as_ref().and_then(|p| p.arg(b'K'))
                    && let Lookup::One(tkt_id, ticket) = repo.resolve_ticket(&k)?
                {
                    return Ok(Place::Ticket { tkt_id, ticket });
                }
                Err(Stop::field(
                    field,
                    format!("{given} names neither a forum post nor a ticket"),
                )
                .next("give the hash of a forum post, or a ticket's id"))
            }
            (Lookup::None, Lookup::None) => Err(Stop::field(
                field,
                format!("{given} names nothing in this repository"),
            )
            .next("give the hash of a forum post this repository holds, or a ticket's id")),
        }
    }
}

/// Where something is to be said: a new thread, or an existing place.
#[derive(Debug, Clone)]
pub enum Where {
    /// A new thread with this title.
    NewThread(String),
    /// A reply in a thread (to the post the place names), or a change of a ticket.
    At(Place),
}

/// Composes what `user` says at `at` (a forum post, or a ticket change as
/// Fossil's ticket page writes a comment) into `batch`; answers its hash.
pub fn compose(
    batch: &mut Batch,
    policy: HashPolicy,
    date: &str,
    user: &str,
    at: &Where,
    text: &str,
) -> String {
    match at {
        Where::At(Place::Ticket { ticket, .. }) => {
            let bytes = artifact::ticket_change(
                date,
                ticket,
                user,
                &[
                    ("icomment", text),
                    ("login", user),
                    ("mimetype", "text/x-markdown"),
                ],
            );
            batch.add("ticket change", bytes, policy)
        }
        Where::At(Place::Thread { root, post, .. }) => {
            let bytes = post_in(date, user, Some((root, post)), None, text);
            batch.add("forum post", bytes, policy)
        }
        Where::NewThread(title) => {
            let bytes = post_in(date, user, None, Some(title), text);
            batch.add("forum post", bytes, policy)
        }
    }
}

/// A forum post's bytes: a reply to `reply` (its thread's root and the
/// post answered), or the first post of a thread titled `title`.
fn post_in(
    date: &str,
    user: &str,
    reply: Option<(&str, &str)>,
    title: Option<&str>,
    text: &str,
) -> Vec<u8> {
    ForumPost {
        date,
        reply,
        title,
        mimetype: "text/x-markdown",
        user,
        text,
    }
    .compose()
}

/// Composes a message at `at` with its `ocx-message` tag into `batch`, as
/// every OCX message is written; answers the message's hash.
pub fn compose_message(
    batch: &mut Batch,
    policy: HashPolicy,
    user: &str,
    at: &Where,
    text: &str,
    kind: &str,
) -> String {
    let date = artifact::now();
    let hash = compose(batch, policy, &date, user, at, text);
    let tag = artifact::control(
        &date,
        user,
        &[artifact::TagChange {
            op: '+',
            name: crate::protocol::MESSAGE_TAG.into(),
            target: hash.clone(),
            value: Some(kind.into()),
        }],
    );
    batch.add("ocx-message tag", tag, policy);
    hash
}
