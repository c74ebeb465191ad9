//! Messages as they stand in a repository: what a post or ticket change
//! holds, the records, stops and responses of a place, and whether a
//! record is answered. The sender of each is its receipt's login.

use super::kinds::{self, Kind, Message, Record};
use super::message::{self, Reading};
use crate::fossil::repo::Said;
use crate::fossil::{FossilError, Repository};
use crate::place::Place;

/// A message found in a post or ticket change.
#[derive(Debug, Clone)]
pub struct Found {
    pub said: Said,
    pub kind: Kind,
}

/// The text of a post (its W card) or of a ticket change (its comment).
pub fn text(repo: &Repository, said: &Said) -> Result<Vec<u8>, FossilError> {
    Ok(match &said.comment {
        Some(c) => c.clone().into_bytes(),
        None => repo
            .parsed(said.rid)?
            .and_then(|p| p.text)
            .unwrap_or_default(),
    })
}

/// What `text`, said in `said`, holds, read as a message of its kind. An
/// edit of a post is never a message (C1).
pub fn kind(said: &Said, text: &[u8]) -> Option<Kind> {
    if said.edit {
        return None;
    }
    match message::read(text) {
        Reading::Message { message } => Some(kinds::read(&message)),
        Reading::Refused { field, reason } => {
            Some(Kind::Malformed(kinds::Problem { field, reason }))
        }
        Reading::NotAMessage { .. } => None,
    }
}

/// What a post or ticket change holds, read as a message of its kind.
/// A post's is read once a process: its artifact's hash names its whole
/// content, so what it holds is kept by that hash ([`KINDS_KEPT`]).
pub fn read(repo: &Repository, said: &Said) -> Result<Option<Kind>, FossilError> {
    if said.edit {
        return Ok(None);
    }
    // A ticket change's text is its comment, read with it.
    if said.comment.is_some() {
        return Ok(kind(said, &text(repo, said)?));
    }
    if let Some(kind) = kept_kinds().get(&said.hash) {
        return Ok(kind.clone());
    }
    // A phantom (its content not yet received) holds nothing yet: never
    // kept, so once it is filled it is read.
    let Some(parsed) = repo.parsed(said.rid)? else {
        return Ok(kind(said, b""));
    };
    let kind = kind(said, &parsed.text.unwrap_or_default());
    let mut kept = kept_kinds();
    if kept.len() >= KINDS_KEPT {
        kept.clear();
    }
    kept.insert(said.hash.clone(), kind.clone());
    Ok(kind)
}

/// The most posts whose message is kept at once. A node reads the place
/// of every open record at each wake: a thread holding 500 records and
/// their answers is read from here, not inflated, checked and parsed
/// again each time. Past it, all are forgotten and read again.
const KINDS_KEPT: usize = 4096;

/// The message each post read holds, by the post's artifact hash.
fn kept_kinds() -> std::sync::MutexGuard<'static, std::collections::HashMap<String, Option<Kind>>> {
    static KEPT: std::sync::LazyLock<
        std::sync::Mutex<std::collections::HashMap<String, Option<Kind>>>,
    > = std::sync::LazyLock::new(Default::default);
    KEPT.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Every message said at `place`, in received order.
pub fn at(repo: &Repository, place: &Place) -> Result<Vec<Found>, FossilError> {
    let said = match place {
        Place::Thread { root_rid, .. } => repo.thread(*root_rid)?,
        Place::Ticket { tkt_id, .. } => repo.ticket_changes(*tkt_id)?,
    };
    let mut out = Vec::new();
    for s in said {
        if let Some(kind) = read(repo, &s)? {
            out.push(Found { said: s, kind });
        }
    }
    Ok(out)
}

/// The first 8 digits of a server-code, as a node is named to people; cut
/// by characters, since a refused record's `node` may be any text.
pub fn code_prefix(server_code: &str) -> String {
    server_code.chars().take(8).collect()
}

/// The login a node acts as: `node-` and the first 8 digits of its server-code.
pub fn node_login(server_code: &str) -> String {
    format!("node-{}", code_prefix(server_code))
}

/// Who sent a message, as its reader knows it: the login its receipt
/// names, whether that login holds admin or setup, and whether it speaks
/// for a node (this repository's own node's login, or one `approve
/// --node` marked as an agent machine's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sender {
    pub login: Option<String>,
    pub admin: bool,
    pub node: bool,
}

/// Of `found`, a place's messages in received order, the response to
/// record `record` for node `node` that counts, each one's sender as
/// `sender` says: one the node's login sent, that login speaking for a
/// node; or a `lost` an administrator sent once the run's start (the
/// record among `found`) and its `wall` have passed.
pub fn counting_response<E>(
    found: Vec<Found>,
    record: &str,
    node: &str,
    mut sender: impl FnMut(&Found) -> Result<Sender, E>,
) -> Result<Option<Found>, E> {
    let node_user = node_login(node);
    let started = found
        .iter()
        .find(|f| f.said.hash == record)
        .map(|f| (f.said.when, &f.kind));
    let deadline = match started {
        Some((when, Kind::Known(Message::Record(r)))) => {
            super::kinds::wall_seconds(&r.budget.wall).map(|w| when + w as f64 / 86400.0)
        }
        _ => None,
    };
    for f in found {
        let Kind::Known(Message::Response(r)) = &f.kind else {
            continue;
        };
        if r.answers != record || r.node != node {
            continue;
        }
        let from = sender(&f)?;
        if from.node && from.login.as_deref() == Some(node_user.as_str()) {
            return Ok(Some(f));
        }
        if r.outcome == "lost" && from.admin && deadline.is_some_and(|d| f.said.when >= d) {
            return Ok(Some(f));
        }
    }
    Ok(None)
}

/// A record as it stands: its post or change, its place and its fields.
#[derive(Debug, Clone)]
pub struct StandingRecord {
    pub hash: String,
    pub said: Said,
    pub place: Place,
    pub record: Record,
    /// Why the node must refuse it, if it must.
    pub problem: Option<kinds::Problem>,
}

/// The record `rid` (with full hash `hash`), or `None` when that artifact holds no record.
pub fn record(
    repo: &Repository,
    rid: i64,
    hash: &str,
) -> Result<Option<StandingRecord>, FossilError> {
    let Some(said) = repo.said(rid)? else {
        return Ok(None);
    };
    let (record, problem) = match read(repo, &said)? {
        Some(Kind::Known(Message::Record(r))) => (*r, None),
        Some(Kind::Refused(Message::Record(r), p)) => (*r, Some(p)),
        _ => return Ok(None),
    };
    let place = place_of(repo, rid)?;
    Ok(place.map(|place| StandingRecord {
        hash: hash.to_string(),
        said,
        place,
        record,
        problem,
    }))
}

/// The place of post or ticket change `rid`.
pub fn place_of(repo: &Repository, rid: i64) -> Result<Option<Place>, FossilError> {
    if let Some(root_rid) = repo.thread_root(rid)? {
        return Ok(Some(Place::Thread {
            root_rid,
            root: repo.hash_of(root_rid)?,
            post_rid: rid,
            post: repo.hash_of(rid)?,
        }));
    }
    let Some(k) = repo.parsed(rid)?.and_then(|p| p.arg(b'K')) else {
        return Ok(None);
    };
    Ok(match repo.resolve_ticket(&k)? {
        crate::fossil::repo::Lookup::One(tkt_id, ticket) => Some(Place::Ticket { tkt_id, ticket }),
        _ => None,
    })
}

/// Every record carrying OCX's `ocx-message` tag, in received order.
pub fn tagged_records(repo: &Repository) -> Result<Vec<StandingRecord>, FossilError> {
    let mut out = Vec::new();
    for (rid, hash) in repo.tagged(crate::protocol::MESSAGE_TAG)? {
        if let Some(r) = record(repo, rid, &hash)? {
            out.push(r);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::node_login;

    #[test]
    fn a_node_login_is_cut_by_characters_never_inside_one() {
        assert_eq!(node_login("0123456789abcdef"), "node-01234567");
        assert_eq!(node_login("abcdefgé-and-more"), "node-abcdefgé");
        assert_eq!(node_login("ab"), "node-ab");
    }
}
