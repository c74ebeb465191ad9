//! What the tools share in a clone's checkout: the server the clone syncs
//! with, pulled from first, and its receipts asked over HTTP (an unsigned
//! POST of JSON to OCX's page, 64 artifacts at a time), so a sender is
//! whom the server received each artifact from, never the clone's word.
//! A server serving no OCX page is refused naming `server`: the clone's
//! own receipts name whoever pulled, and are never read for a sender.

use super::logins::PAGE;
use crate::answer::Op;
use crate::fossil::caps::Capabilities;
use crate::fossil::repo::Said;
use crate::protocol::found::{self, Found, Sender, StandingRecord};
use crate::protocol::kinds::{Kind, Message};
use crate::stop::Stop;
use crate::tool::Call;
use serde_json::{Value, json};
use std::collections::HashMap;

/// At most this many artifacts are asked of the server at once.
pub const AT_ONCE: usize = 64;

/// One artifact's receipt, as the server says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub hash: String,
    pub received: bool,
    pub user: Option<String>,
    /// That login's capabilities on the server, inherited ones included.
    pub capabilities: Option<String>,
    /// Whether that login speaks for a node on the server (its own node's,
    /// or an agent machine's it marked).
    pub node: bool,
    pub rcvid: Option<i64>,
    pub rid: Option<i64>,
}

impl Received {
    /// Its sender, when the server received it.
    pub fn sender(&self) -> Option<&str> {
        self.user.as_deref().filter(|_| self.received)
    }

    /// Whether the server received it from a login holding admin or setup there.
    pub fn from_admin(&self) -> bool {
        self.sender().is_some()
            && self
                .capabilities
                .as_deref()
                .is_some_and(|c| Capabilities::exact(c).is_admin())
    }

    /// Where it stands in the server's received order (receipt, then
    /// row); `None` when the server has not received it.
    pub fn order(&self) -> Option<(i64, i64)> {
        self.received
            .then(|| (self.rcvid.unwrap_or(0), self.rid.unwrap_or(0)))
    }
}

/// The server's receipts for `hashes`, each asked once, by hash; refused
/// as [`receipts`] is.
pub fn by_hash(server: &str, hashes: &[String]) -> Result<HashMap<String, Received>, Stop> {
    let mut asked: Vec<String> = hashes.to_vec();
    asked.sort();
    asked.dedup();
    Ok(receipts(server, &asked)?
        .into_iter()
        .map(|r| (r.hash.clone(), r))
        .collect())
}

/// `items`, read in a clone, as the server received each (`got`, its
/// receipts): the sender of each one's `Said` the login its receipt
/// names and its receipt the server's (no one and none where it has not
/// received it), in the server's received order, what it has not
/// received last.
pub fn in_received_order<T>(
    got: &HashMap<String, Received>,
    items: Vec<T>,
    said: impl Fn(&mut T) -> &mut Said,
) -> Vec<T> {
    let mut out: Vec<(Option<(i64, i64)>, T)> = items
        .into_iter()
        .map(|mut item| (resent(got, said(&mut item)), item))
        .collect();
    out.sort_by_key(|(order, _)| order.map_or((1, 0, 0), |(c, r)| (0, c, r)));
    out.into_iter().map(|(_, item)| item).collect()
}

/// `s` as the server received it (`got`): its sender and receipt the
/// server's, none where it has not received it; where it stands in the
/// server's received order.
pub fn resent(got: &HashMap<String, Received>, s: &mut Said) -> Option<(i64, i64)> {
    let r = got.get(&s.hash).filter(|r| r.received);
    s.from = r.and_then(|r| r.user.clone());
    s.rcvid = r.and_then(|r| r.rcvid).unwrap_or(0);
    r.and_then(Received::order)
}

/// A record as a clone's server received it.
pub struct RecordReceived {
    /// Whether the server received the record.
    pub received: bool,
    /// The response to it that counts there, if one does.
    pub response: Option<Found>,
}

/// Record `r`, read in a clone, as `server` received it: its sender the
/// login the server's receipt names, and the response that counts by the
/// server's receipts ([`response_of`]), the messages at its place read
/// in the clone.
pub fn record_as_received(
    call: &mut Call,
    server: &str,
    r: &mut StandingRecord,
) -> Result<RecordReceived, Stop> {
    let here = found::at(call.repo()?, &r.place).map_err(Stop::internal)?;
    let hashes: Vec<String> = here
        .iter()
        .filter(|f| f.said.hash == r.hash || answers(f, &r.hash))
        .map(|f| f.said.hash.clone())
        .chain(std::iter::once(r.hash.clone()))
        .collect();
    let got = by_hash(server, &hashes)?;
    call.read(format!(
        "{server}'s receipts for the record and its responses"
    ));
    resent(&got, &mut r.said);
    let here = in_received_order(&got, here, |f| &mut f.said);
    Ok(RecordReceived {
        received: got.get(&r.hash).is_some_and(|x| x.received),
        response: response_of(&got, r, here),
    })
}

/// Whether `f` is a response to record `record`.
fn answers(f: &Found, record: &str) -> bool {
    matches!(&f.kind, Kind::Known(Message::Response(resp)) if resp.answers == record)
}

/// Of `here`, the messages at record `r`'s place read in a clone and put
/// in the server's received order, the response to `r` that counts by
/// the server's receipts (`got`): one the server received from the
/// record's node's login, that login speaking for a node there; or a
/// `lost` it received from an administrator once the run's wall passed.
/// What the server has not received counts for nothing.
pub fn response_of(
    got: &HashMap<String, Received>,
    r: &StandingRecord,
    here: Vec<Found>,
) -> Option<Found> {
    let received = |f: &Found| got.get(&f.said.hash).filter(|x| x.received);
    let kept: Vec<Found> = here
        .into_iter()
        .filter(|f| f.said.hash == r.hash || (answers(f, &r.hash) && received(f).is_some()))
        .collect();
    let counted = found::counting_response(kept, &r.hash, &r.record.node, |f| {
        let x = received(f);
        Ok::<_, std::convert::Infallible>(Sender {
            login: x.and_then(|x| x.user.clone()),
            admin: x.is_some_and(Received::from_admin),
            node: x.is_some_and(|x| x.node),
        })
    });
    match counted {
        Ok(found) => found,
        Err(never) => match never {},
    }
}

/// Runner `name`'s page, read in a clone, as its server received the
/// page's versions: the newest the server received from a login holding
/// admin or setup there, when its first fenced JSON block reads.
pub fn runner_page(
    call: &mut Call,
    server: &str,
    name: &str,
) -> Result<Option<crate::node::runner::RunnerPage>, Stop> {
    let repo = call.repo()?;
    let mut versions = Vec::new();
    for (rid, _) in repo
        .wiki_versions_received(&crate::node::runner::page_name(name))
        .map_err(Stop::internal)?
    {
        versions.push((rid, repo.hash_of(rid).map_err(Stop::internal)?));
    }
    let hashes: Vec<String> = versions.iter().map(|(_, h)| h.clone()).collect();
    let got = by_hash(server, &hashes)?;
    call.read(format!("{server}'s receipts for the runner's page"));
    let counting = versions
        .into_iter()
        .filter_map(|(rid, h)| {
            let r = got.get(&h).filter(|r| r.from_admin())?;
            Some((r.order()?, rid))
        })
        .max();
    let Some((_, rid)) = counting else {
        return Ok(None);
    };
    let text = call
        .repo()?
        .parsed(rid)
        .map_err(Stop::internal)?
        .and_then(|p| p.text);
    Ok(text.and_then(|t| crate::node::runner::read_page(&t).ok()))
}

/// The server the call's clone syncs with (its URL, no login or password
/// in it), when the call is in a clone's checkout: no repository named
/// outright, not the node's own repository, and an http or https remote
/// remembered. A run that holds its password works in such a clone, as
/// its own login, and asks its server like anyone's clone; the node's
/// socket tools of a no-password run name the served repository itself
/// (`--repository`, with no checkout) and ask no one.
pub fn server(call: &Call) -> Result<Option<String>, Stop> {
    if call.cx.repository.is_some() || call.cx.checkout().is_none() {
        return Ok(None);
    }
    let repo = call.repo()?;
    if crate::node::is_node(repo).map_err(Stop::internal)? {
        return Ok(None);
    }
    let Some(remote) = repo.remote_url().map_err(Stop::internal)? else {
        return Ok(None);
    };
    Ok(crate::fossil::remote::page_of(&remote, &[])
        .map(|u| u.trim_end_matches('/').to_string())
        .filter(|u| u.starts_with("http://") || u.starts_with("https://")))
}

/// Pulls the clone from its server first, when the call is in a clone's
/// checkout (not on a dry run, which changes nothing); answers the server.
pub fn pull_first(call: &mut Call) -> Result<Option<String>, Stop> {
    let Some(server) = server(call)? else {
        return Ok(None);
    };
    if !call.dry_run {
        call.fossil()?.pull(call.repo()?.path()).map_err(|e| {
            Stop::field("server", format!("the pull from {server} failed: {e}"))
                .next("check that the server answers, then try again")
        })?;
    }
    call.log(Op::Fossil {
        operation: format!("pull from {server}"),
        done: !call.dry_run,
    });
    Ok(Some(server))
}

/// What a server serving no OCX page is refused with: a clone never
/// reads who sent what from its own receipts, which name whoever pulled.
pub fn no_page(server: &str) -> Stop {
    Stop::field(
        "server",
        format!(
            "{server} serves no OCX page at /ext/{PAGE}, so who sent what cannot be learned from it (this clone's own receipts name only whoever pulled)"
        ),
    )
    .next(SERVE_PAGE)
}

/// How a server serves OCX's page, said where it does not.
pub const SERVE_PAGE: &str = "have the server serve OCX's page (fossil server --extroot DIR, ocx linked there as ocx-cgi), then try again";

/// The result of the server's `tool` asked with `input` (an unsigned POST
/// of JSON), answered within `within`; refused naming `server` when the
/// server serves no OCX page, and, with the server's own reason, when it
/// refuses.
pub fn ask(
    server: &str,
    tool: &str,
    input: &Value,
    within: std::time::Duration,
) -> Result<Value, Stop> {
    ask_page(server, tool, input, within)?.ok_or_else(|| no_page(server))
}

/// As [`ask`], `None` when the server serves no OCX page (a 404 that is
/// not OCX's answer).
fn ask_page(
    server: &str,
    tool: &str,
    input: &Value,
    within: std::time::Duration,
) -> Result<Option<Value>, Stop> {
    let agent = crate::http::agent(Some(within));
    let failed = |why: String| {
        Stop::field("server", format!("{server}'s {tool}: {why}"))
            .next("check that the server answers and serves OCX's page, then try again")
    };
    let mut response = agent
        .post(format!("{server}/ext/{PAGE}/{tool}?json"))
        .header("Content-Type", "application/json")
        .send(input.to_string())
        .map_err(|e| failed(e.to_string()))?;
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(4 << 20)
        .read_to_string()
        .map_err(|e| failed(e.to_string()))?;
    let answer: Value = match serde_json::from_str(&body) {
        Ok(a) => a,
        Err(_) if status == 404 => return Ok(None),
        Err(_) => return Err(failed(format!("its answer (HTTP {status}) is not OCX's"))),
    };
    if answer["ok"] != Value::Bool(true) || answer["tool"] != tool {
        return Err(failed(
            answer["stopped"]["reason"]
                .as_str()
                .unwrap_or("it refused")
                .to_string(),
        ));
    }
    Ok(Some(answer["result"].clone()))
}

/// The server's receipts for `hashes`, in the order asked; refused naming
/// `server` when the server serves no OCX page, does not answer, refuses
/// (its reason given as it says it), or answers for other artifacts than
/// those asked, or in another order.
pub fn receipts(server: &str, hashes: &[String]) -> Result<Vec<Received>, Stop> {
    receipts_page(server, hashes)?.ok_or_else(|| no_page(server))
}

/// As [`receipts`], `None` when the server serves no OCX page.
fn receipts_page(server: &str, hashes: &[String]) -> Result<Option<Vec<Received>>, Stop> {
    let failed = |why: String| {
        Stop::field("server", format!("{server}'s receipts: {why}"))
            .next("check that the server answers and serves OCX's page, then try again")
    };
    let mut out = Vec::with_capacity(hashes.len());
    for chunk in hashes.chunks(AT_ONCE) {
        let Some(result) = ask_page(
            server,
            "receipt",
            &json!({ "artifacts": chunk }),
            std::time::Duration::from_secs(30),
        )?
        else {
            return Ok(None);
        };
        let said = result["artifacts"].as_array().cloned().unwrap_or_default();
        if said.len() != chunk.len() {
            return Err(failed(
                "it answered for other artifacts than those asked".into(),
            ));
        }
        for (asked, a) in chunk.iter().zip(said) {
            if a["hash"].as_str() != Some(asked.as_str()) {
                return Err(failed(
                    "it answered for other artifacts than those asked, or in another order".into(),
                ));
            }
            out.push(Received {
                hash: asked.clone(),
                received: a["received"] == Value::Bool(true),
                user: a["user"].as_str().map(str::to_string),
                capabilities: a["capabilities"].as_str().map(str::to_string),
                node: a["node"] == Value::Bool(true),
                rcvid: a["rcvid"].as_i64(),
                rid: a["rid"].as_i64(),
            });
        }
    }
    Ok(Some(out))
}

/// Counts a write from a clone done only once the server's receipt says
/// it received each of `hashes` from `sender`; a server serving no OCX
/// page cannot say, and the write, pushed, is refused as unconfirmed.
pub fn confirm(call: &mut Call, server: &str, hashes: &[String], sender: &str) -> Result<(), Stop> {
    let Some(said) = receipts_page(server, hashes)? else {
        return Err(Stop::field(
            "server",
            format!(
                "{server} serves no OCX page at /ext/{PAGE}, so {} is pushed but cannot be confirmed as received from {sender}",
                hashes.join(", ")
            ),
        )
        .next(
            "check the thread on the server's own pages, and have the server serve OCX's page (fossil server --extroot DIR, ocx linked there as ocx-cgi)",
        ));
    };
    call.read(format!("{server}'s receipts for what was pushed"));
    for r in said {
        if !r.received && !unsigned_may_read(server) {
            return Err(Stop::field(
                "server",
                format!(
                    "{server} lets no one unsigned read its receipts (Read, o), so {} is pushed but not confirmed as received from {sender}",
                    r.hash
                ),
            )
            .next("check the thread on the server's page, signed in"));
        }
        if !r.received || r.user.as_deref() != Some(sender) {
            let from = match (&r.received, &r.user) {
                (false, _) => "has not received it".to_string(),
                (true, Some(u)) => format!("received it from {u}"),
                (true, None) => "received it from no one it names".to_string(),
            };
            return Err(Stop::field(
                "server",
                format!(
                    "{server} {from}, not from {sender}: {} is written in your clone and not counted done",
                    r.hash
                ),
            )
            .next(format!(
                "sync the clone as {sender} (fossil sync with its login), or let the server's receipt page be read unsigned"
            )));
        }
    }
    Ok(())
}

/// Whether the server lets one unsigned read its receipts: its `receipt`
/// gives nobody's capabilities only to a caller holding Read (o).
fn unsigned_may_read(server: &str) -> bool {
    let asked = json!({ "capabilities_of": "nobody" });
    matches!(
        ask_page(server, "receipt", &asked, std::time::Duration::from_secs(10)),
        Ok(Some(result)) if result["capabilities_of"]["capabilities"].is_string()
    )
}

/// Whether a node's served URL `url` serves OCX's page, asked once (an
/// unsigned POST of `receipt` for no artifact, answered within 2 s):
/// `None` when it does, else the warning to show. Runs that hold their
/// password work in clones of `url` and learn who sent what only there.
pub fn page_warning(url: &str) -> Option<String> {
    let base = crate::fossil::remote::page_of(url, &[])?;
    let asked = json!({ "artifacts": [] });
    let within = std::time::Duration::from_secs(2);
    let why = match ask_page(base.trim_end_matches('/'), "receipt", &asked, within) {
        Ok(Some(_)) => return None,
        Ok(None) => format!("serves no OCX page at /ext/{PAGE}"),
        Err(e) => format!(
            "did not answer as OCX's page at /ext/{PAGE} ({})",
            crate::fossil::redact_password(&e.reason)
        ),
    };
    Some(format!(
        "{url} {why}: runs that hold their password cannot learn who sent what; serve it with fossil server --extroot DIR (ocx linked there as ocx-cgi)"
    ))
}
