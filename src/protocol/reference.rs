//! A question's references: what a person should read before deciding.
//! Each given one (a hash or prefix, a ticket's or tech-note's id, or a
//! link of this server) is resolved to the one thing it names and kept as
//! the link Fossil serves it at; each is described, when shown, only as
//! far as the viewer may read it.

use crate::fossil::caps::Capabilities;
use crate::fossil::repo::{Lookup, Thing};
use crate::fossil::{FossilError, Repository};
use schemars::JsonSchema;
use serde::Serialize;

/// What a reference names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Post {
        rid: i64,
        hash: String,
    },
    Ticket {
        tkt_id: i64,
        id: String,
    },
    Technote {
        rid: i64,
        id: String,
    },
    Checkin {
        rid: i64,
        hash: String,
    },
    File {
        rid: i64,
        hash: String,
        lines: Option<(u32, u32)>,
    },
    Wiki {
        name: String,
    },
    Other {
        rid: i64,
        hash: String,
    },
}

impl Target {
    /// The link Fossil serves it at, from the repository's root.
    pub fn link(&self) -> String {
        match self {
            Target::Post { hash, .. } => format!("/forumpost/{hash}"),
            Target::Ticket { id, .. } => format!("/tktview/{id}"),
            Target::Technote { id, .. } => format!("/technote/{id}"),
            Target::Checkin { hash, .. } | Target::Other { hash, .. } => format!("/info/{hash}"),
            Target::File { hash, lines, .. } => match lines {
                Some((a, b)) => format!("/artifact/{hash}?ln={a}-{b}"),
                None => format!("/artifact/{hash}"),
            },
            Target::Wiki { name } => format!("/wiki?name={}", encode(name)),
        }
    }

    /// Its kind, as a description names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Target::Post { .. } => "forum",
            Target::Ticket { .. } => "ticket",
            Target::Technote { .. } => "technote",
            Target::Checkin { .. } => "checkin",
            Target::File { .. } | Target::Other { .. } => "file",
            Target::Wiki { .. } => "wiki",
        }
    }

    /// The capability that reads it: 2 a post, r a ticket, j a tech-note
    /// or a page, o a check-in or a file.
    pub fn needs(&self) -> char {
        match self {
            Target::Post { .. } => '2',
            Target::Ticket { .. } => 'r',
            Target::Technote { .. } | Target::Wiki { .. } => 'j',
            _ => 'o',
        }
    }
}

/// A reference described for a viewer.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct Described {
    /// Its title, or "not readable by you", or "not in the repository".
    pub title: String,
    /// forum, ticket, technote, checkin, file or wiki.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Its sender by receipt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// When its writer says it was written (UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// At most 300 characters of it, on one line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excerpt: Option<String>,
    /// The link from the repository's root.
    pub link: String,
    /// The link from the repository's public URL, when one is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// Why a reference was refused.
#[derive(Debug)]
pub enum Refused {
    /// It names nothing here, or is no link this server serves.
    Nothing(String),
    /// It names more than one thing.
    Several,
    /// It is a link of another server.
    Elsewhere,
    /// Fossil holds what it names private.
    Private,
    /// Reading the repository failed.
    Failed(FossilError),
}

impl From<FossilError> for Refused {
    fn from(e: FossilError) -> Refused {
        Refused::Failed(e)
    }
}

/// The most an excerpt holds, in characters.
pub const EXCERPT_MAX: usize = 300;

/// Resolves a reference as given: a hash or prefix (10 to 64 hex digits)
/// of an artifact, a ticket's or a tech-note's id, or a link of this
/// server, from its root (`/info/…`) or whole (one of its public URLs,
/// then the link).
pub fn resolve(repo: &Repository, given: &str) -> Result<Target, Refused> {
    let given = given.trim();
    if given.len() >= 10 && given.len() <= 64 && given.bytes().all(|b| b.is_ascii_hexdigit()) {
        return by_id(repo, &given.to_ascii_lowercase());
    }
    let link = if given.starts_with('/') {
        given.to_string()
    } else if given.starts_with("http://") || given.starts_with("https://") {
        let bases = repo.base_urls()?;
        match bases.iter().find_map(|b| {
            given
                .strip_prefix(b.trim_end_matches('/'))
                .filter(|rest| rest.starts_with('/'))
        }) {
            Some(rest) => rest.to_string(),
            None => return Err(Refused::Elsewhere),
        }
    } else {
        return Err(Refused::Nothing(
            "is neither a hash, an id, nor a link of this server".into(),
        ));
    };
    by_link(repo, &link)
}

fn by_id(repo: &Repository, prefix: &str) -> Result<Target, Refused> {
    let artifact = repo.resolve(prefix)?;
    let ticket = repo.resolve_ticket(prefix)?;
    let technote = repo.resolve_technote(prefix)?;
    let found: Vec<Target> = [
        match artifact {
            Lookup::One(rid, hash) => Some(artifact_target(repo, rid, hash)?),
            Lookup::Several => return Err(Refused::Several),
            Lookup::None => None,
        },
        match ticket {
            Lookup::One(tkt_id, id) => Some(Target::Ticket { tkt_id, id }),
            Lookup::Several => return Err(Refused::Several),
            Lookup::None => None,
        },
        match technote {
            Lookup::One(rid, id) => Some(Target::Technote { rid, id }),
            Lookup::Several => return Err(Refused::Several),
            Lookup::None => None,
        },
    ]
    .into_iter()
    .flatten()
    .collect();
    match found.len() {
        0 => Err(Refused::Nothing("names nothing in this repository".into())),
        1 => Ok(found.into_iter().next().expect("one")),
        _ => Err(Refused::Several),
    }
}

fn artifact_target(repo: &Repository, rid: i64, hash: String) -> Result<Target, Refused> {
    if repo.thread_root(rid)?.is_some() {
        return Ok(Target::Post { rid, hash });
    }
    if repo.is_checkin(rid)? {
        return Ok(Target::Checkin { rid, hash });
    }
    Ok(Target::Other { rid, hash })
}

fn one_artifact(repo: &Repository, prefix: &str) -> Result<(i64, String), Refused> {
    if prefix.len() < 4 || prefix.len() > 64 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Refused::Nothing(format!("{prefix:?} is not a hash")));
    }
    match repo.resolve(&prefix.to_ascii_lowercase())? {
        Lookup::One(rid, hash) => Ok((rid, hash)),
        Lookup::None => Err(Refused::Nothing("names nothing in this repository".into())),
        Lookup::Several => Err(Refused::Several),
    }
}

fn by_link(repo: &Repository, link: &str) -> Result<Target, Refused> {
    let (path, query) = link.split_once('?').unwrap_or((link, ""));
    let param = |name: &str| {
        query.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k == name).then(|| decode(v))
        })
    };
    let lines = match param("ln") {
        Some(ln) => Some(lines(&ln)?),
        None => None,
    };
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segs.as_slice() {
        ["forumpost", h] => {
            let (rid, hash) = one_artifact(repo, h)?;
            match artifact_target(repo, rid, hash)? {
                t @ Target::Post { .. } => Ok(t),
                _ => Err(Refused::Nothing("names no forum post".into())),
            }
        }
        ["info", h] => {
            let (rid, hash) = one_artifact(repo, h)?;
            artifact_target(repo, rid, hash)
        }
        ["artifact", h] => {
            let (rid, hash) = one_artifact(repo, h)?;
            Ok(Target::File { rid, hash, lines })
        }
        ["tktview", id] | ["technote", id] => {
            if id.len() < 4 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(Refused::Nothing(format!("{id:?} is not an id")));
            }
            let id = id.to_ascii_lowercase();
            if segs[0] == "tktview" {
                match repo.resolve_ticket(&id)? {
                    Lookup::One(tkt_id, id) => Ok(Target::Ticket { tkt_id, id }),
                    Lookup::None => Err(Refused::Nothing("names no ticket here".into())),
                    Lookup::Several => Err(Refused::Several),
                }
            } else {
                match repo.resolve_technote(&id)? {
                    Lookup::One(rid, id) => Ok(Target::Technote { rid, id }),
                    Lookup::None => Err(Refused::Nothing("names no tech-note here".into())),
                    Lookup::Several => Err(Refused::Several),
                }
            }
        }
        ["wiki"] => {
            let name = param("name").unwrap_or_default();
            match repo.wiki_page(&name)? {
                Some(_) => Ok(Target::Wiki { name }),
                None => Err(Refused::Nothing("names no wiki page here".into())),
            }
        }
        ["file"] => {
            let (Some(name), Some(ci)) = (param("name"), param("ci")) else {
                return Err(Refused::Nothing(
                    "a file's link needs name and ci (a check-in)".into(),
                ));
            };
            let (ci_rid, _) = one_artifact(repo, &ci)?;
            if !repo.is_checkin(ci_rid)? {
                return Err(Refused::Nothing("ci names no check-in".into()));
            }
            match repo.checkin_file(ci_rid, &name)? {
                Some((rid, hash)) => Ok(Target::File { rid, hash, lines }),
                None => Err(Refused::Nothing("the check-in holds no such file".into())),
            }
        }
        _ => Err(Refused::Nothing("is no page this server serves".into())),
    }
}

/// Lines as a link gives them: one line or one range, each line at most
/// nine ASCII digits.
fn lines(ln: &str) -> Result<(u32, u32), Refused> {
    let number = |s: &str| -> Option<u32> {
        (!s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
            .filter(|n| *n > 0)
    };
    let bad = || Refused::Nothing("ln is not one line or one range of lines".into());
    match ln.split_once('-') {
        None => number(ln).map(|n| (n, n)).ok_or_else(bad),
        Some((a, b)) => match (number(a), number(b)) {
            (Some(a), Some(b)) if a <= b => Ok((a, b)),
            _ => Err(bad()),
        },
    }
}

/// What `target` names, read whole; `None` when it is no longer there.
pub fn thing(repo: &Repository, target: &Target) -> Result<Option<Thing>, FossilError> {
    Ok(match target {
        Target::Post { rid, .. } => repo.post_thing(*rid)?,
        Target::Ticket { tkt_id, .. } => repo.ticket_thing(*tkt_id)?,
        Target::Technote { rid, .. } | Target::Checkin { rid, .. } => repo.event_thing(*rid)?,
        Target::Wiki { name } => repo.wiki_thing(name)?.map(|(_, t)| t),
        Target::File { rid, hash, .. } | Target::Other { rid, hash } => {
            let Some(bytes) = repo.content(*rid)? else {
                return Ok(None);
            };
            let text = String::from_utf8_lossy(&bytes);
            let (title, words) = match lines_of(target) {
                Some((a, b)) => {
                    let picked: Vec<&str> = text
                        .lines()
                        .skip(a as usize - 1)
                        .take(((b - a) as usize + 1).min(20))
                        .collect();
                    (format!("{} lines {a}-{b}", &hash[..10]), picked.join(" / "))
                }
                None => (hash[..10].to_string(), text.into_owned()),
            };
            let receipt = repo.receipt(hash)?;
            Some(Thing {
                title,
                by: receipt.as_ref().and_then(|r| r.login.clone()),
                at: None,
                text: words,
                private: receipt.is_some_and(|r| r.private),
            })
        }
    })
}

fn lines_of(target: &Target) -> Option<(u32, u32)> {
    match target {
        Target::File { lines, .. } => *lines,
        _ => None,
    }
}

/// Checks that `target` may be referenced: not private, readable by each
/// of `readers` (a login and its capabilities; the last is the one asked),
/// and a wiki page one the asked may also edit (k) without a moderator
/// holding the edit (`modreq-wiki` on, and no l); the login that may not
/// is named.
pub fn check(
    repo: &Repository,
    target: &Target,
    readers: &[(&str, &Capabilities)],
) -> Result<(), Refused> {
    if let (Target::Wiki { .. }, Some((login, caps))) = (target, readers.last()) {
        if !caps.has('k') {
            return Err(Refused::Nothing(format!(
                "{login} may not edit that page (it needs capability k)"
            )));
        }
        let moderated = repo
            .config("modreq-wiki")?
            .is_some_and(|v| matches!(v.trim(), "1" | "on" | "yes" | "true"));
        if moderated && !caps.has('l') {
            return Err(Refused::Nothing(format!(
                "a moderator would hold {login}'s edits of that page"
            )));
        }
    }
    let Some(t) = thing(repo, target)? else {
        return Err(Refused::Nothing("names nothing in this repository".into()));
    };
    if t.private {
        return Err(Refused::Private);
    }
    for (login, caps) in readers {
        if !caps.has(target.needs()) {
            return Err(Refused::Nothing(format!(
                "{login} may not read it (it needs capability {})",
                target.needs()
            )));
        }
    }
    Ok(())
}

/// The reference kept as `link`, described for a viewer holding `caps`.
/// A link that names nothing here is shown with no link at all (its
/// `link` empty), since whoever wrote it may have written anything.
pub fn describe(
    repo: &Repository,
    link: &str,
    caps: &Capabilities,
) -> Result<Described, FossilError> {
    let target = match by_link(repo, link) {
        Ok(t) if link.starts_with('/') => Some(t),
        Ok(_)
        | Err(Refused::Nothing(_) | Refused::Several | Refused::Elsewhere | Refused::Private) => {
            None
        }
        Err(Refused::Failed(e)) => return Err(e),
    };
    let link = target.as_ref().map(Target::link).unwrap_or_default();
    let url = match link.is_empty() {
        true => None,
        false => repo
            .base_urls()?
            .first()
            .map(|b| format!("{}{link}", b.trim_end_matches('/'))),
    };
    let bare = |title: &str| Described {
        title: title.into(),
        kind: None,
        by: None,
        at: None,
        excerpt: None,
        link: link.clone(),
        url: url.clone(),
    };
    let Some(target) = target else {
        return Ok(bare("not in the repository"));
    };
    if !caps.has(target.needs()) {
        return Ok(bare("not readable by you"));
    }
    let Some(t) = thing(repo, &target)? else {
        return Ok(bare("not in the repository"));
    };
    if t.private && !caps.has('x') {
        return Ok(bare("not readable by you"));
    }
    Ok(Described {
        title: t.title,
        kind: Some(target.kind().into()),
        by: t.by,
        at: t.at.map(crate::fossil::repo::julian_to_rfc3339),
        excerpt: Some(excerpt(&t.text)),
        link,
        url,
    })
}

/// At most [`EXCERPT_MAX`] characters of `text` on one line, an OCX
/// message's block left out.
pub fn excerpt(text: &str) -> String {
    let mut kept = text.to_string();
    for block in super::message::json_blocks(text) {
        if block.contains("\"ocx\"") {
            kept = kept.replace(&block, "");
        }
    }
    let one: String = kept
        .replace("```json", " ")
        .replace("```", " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    match one.char_indices().nth(EXCERPT_MAX) {
        Some(_) => {
            let (cut, _) = one.char_indices().nth(EXCERPT_MAX - 1).unwrap_or((0, ' '));
            format!("{}…", &one[..cut])
        }
        None => one,
    }
}

fn encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

fn decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("v={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_one_line_or_one_range_of_at_most_nine_digits() {
        assert_eq!(lines("3").ok(), Some((3, 3)));
        assert_eq!(lines("3-9").ok(), Some((3, 9)));
        for bad in ["", "0", "9-3", "1-2-3", "1234567890", "a", "1,2", " 1"] {
            assert!(lines(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_excerpt_is_one_line_of_at_most_300_characters_without_the_block() {
        let text = format!(
            "Hello\nworld\n\n```json\n{{\"ocx\": 1, \"kind\": \"question\"}}\n```\n{}",
            "é".repeat(400)
        );
        let e = excerpt(&text);
        assert!(e.starts_with("Hello world "), "{e}");
        assert!(!e.contains("ocx"), "{e}");
        assert!(e.chars().count() <= EXCERPT_MAX, "{}", e.chars().count());
    }
}
