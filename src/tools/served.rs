//! What the tools share about who sent what: the receipts a call believes
//! ([`crate::node::Receipts::of`]): in the served repository its own; in
//! a clone's checkout, the server the clone syncs with, pulled from first
//! and asked over HTTP through OCX's page, so a sender is whom the server
//! received each artifact from, never the clone's word. A server serving
//! no OCX page is refused naming `server`: the clone's own receipts name
//! whoever pulled, and are never read for a sender.

use crate::answer::Op;
use crate::node::NodeError;
use crate::node::page::{PAGE, PageError, SERVE_PAGE};
use crate::node::receipts::{Receipts, Server};
use crate::stop::Stop;
use crate::tool::Call;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::time::Duration;

/// How long a server is given to answer each request for receipts.
const WITHIN: Duration = Duration::from_secs(30);

/// The receipts the call believes: the repository's own when it is the
/// served one (named outright, a node's, or one remembering no server),
/// else its server's, asked unsigned.
pub fn receipts<'a>(call: &Call<'a>) -> Result<Receipts<'a>, Stop> {
    let cx = call.cx;
    let named = cx.repository.is_some() || cx.checkout().is_none();
    Receipts::of(cx.repo()?, named, WITHIN).map_err(stop)
}

/// The call's receipts ([`receipts`]), its clone pulled from its server
/// first (not on a dry run, which changes nothing).
pub fn pull_first<'a>(call: &mut Call<'a>) -> Result<Receipts<'a>, Stop> {
    let receipts = receipts(call)?;
    let Some(server) = receipts.asked().map(|s| s.url().to_string()) else {
        return Ok(receipts);
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
    Ok(receipts)
}

/// A failure to learn who sent what, as the call's refusal: a server
/// serving no OCX page refused as [`no_page`], any other answer of the
/// server naming `server`, a failure beneath as a failure.
pub fn stop(e: NodeError) -> Stop {
    match e {
        NodeError::Page(PageError::NoPage { server }) => no_page(&server),
        other => Stop::from(other),
    }
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

/// The result of the server's `tool` asked with `input`, read as `T`:
/// refused naming `server` when it serves no OCX page, when it stops (its
/// own reason given), and when its answer does not read.
pub fn ask<T: DeserializeOwned>(server: &Server, tool: &str, input: &Value) -> Result<T, Stop> {
    server
        .page()
        .call(tool, input)
        .map_err(|e| stop(NodeError::Page(e)))
}

/// The result of the server's `tool` asked with `input`, as [`ask`] reads
/// it: unsigned, and, where that is refused, signed in as the clone's own
/// login when the clone remembers one.
pub fn ask_as_clone<T: DeserializeOwned>(
    call: &mut Call,
    server: &Server,
    tool: &str,
    input: &Value,
) -> Result<T, Stop> {
    let unsigned = match server.unsigned_may_read() {
        true => ask(server, tool, input),
        false => Err(Stop::new("the server lets no one unsigned read")),
    };
    match unsigned {
        Ok(t) => Ok(t),
        Err(refused) => match signed_as_clone(call, server) {
            Some((signed, login)) => {
                call.read(format!("{}'s {tool}, signed in as {login}", server.url()));
                ask(&signed, tool, input)
            }
            None => Err(refused),
        },
    }
}

/// Counts a write from a clone done only once the server's receipt says
/// it received each of `hashes` from `sender`; a server serving no OCX
/// page cannot say, and the write, pushed, is refused as unconfirmed.
pub fn confirm(
    call: &mut Call,
    server: &Server,
    hashes: &[String],
    sender: &str,
) -> Result<(), Stop> {
    let url = server.url().to_string();
    let signed;
    let server = match server.unsigned_may_read() {
        true => server,
        false => match signed_as_clone(call, server) {
            Some((s, login)) => {
                call.read(format!("{url}'s receipts, signed in as {login}"));
                signed = s;
                &signed
            }
            None => server,
        },
    };
    let said = match server.received(hashes) {
        Ok(said) => said,
        Err(PageError::NoPage { .. }) => {
            return Err(Stop::field(
                "server",
                format!(
                    "{url} serves no OCX page at /ext/{PAGE}, so {} is pushed but cannot be confirmed as received from {sender}",
                    hashes.join(", ")
                ),
            )
            .next(
                "check the thread on the server's own pages, and have the server serve OCX's page (fossil server --extroot DIR, ocx-cgi linked there)",
            ));
        }
        Err(e) => return Err(e.into()),
    };
    call.read(format!("{url}'s receipts for what was pushed"));
    for r in said {
        if !r.received && !server.unsigned_may_read() {
            return Err(Stop::field(
                "server",
                format!(
                    "{url} lets no one unsigned read its receipts (Read, o), so {} is pushed but not confirmed as received from {sender}",
                    r.hash
                ),
            )
            .next("check the thread on the server's page, signed in"));
        }
        if r.sender() != Some(sender) {
            let from = match (r.received, &r.user) {
                (false, _) => "has not received it".to_string(),
                (true, Some(u)) => format!("received it from {u}"),
                (true, None) => "received it from no one it names".to_string(),
            };
            return Err(Stop::field(
                "server",
                format!(
                    "{url} {from}, not from {sender}: {} is written in your clone and not counted done",
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

/// `server` asked as the clone's own login, for a server that lets no one
/// unsigned read its receipts: the login the clone's remote names and the
/// password the clone remembers; none when it remembers no login.
fn signed_as_clone(call: &Call, server: &Server) -> Option<(Server, String)> {
    let repo = call.repo().ok()?;
    let login = crate::fossil::remote::login_of(&repo.remote_url().ok()??)?;
    let password = call
        .fossil()
        .ok()?
        .remembered_password(repo.path())
        .ok()??;
    let page = crate::node::page::Page::signed_in(server.url(), &login, &password, WITHIN);
    Some((Server::new(page), login))
}

/// Whether a node's served URL `url` serves OCX's page, asked once (an
/// unsigned `receipt` for no artifact, answered within 2 s): `None` when
/// it does, else the warning to show. Runs that hold their password work
/// in clones of `url` and learn who sent what only there.
pub fn page_warning(url: &str) -> Option<String> {
    let base = crate::fossil::remote::page_of(url, &[])?;
    let page = crate::node::page::Page::unsigned(&base, Duration::from_secs(2));
    let asked = serde_json::json!({ "artifacts": [] });
    let why = match page.call::<Value>("receipt", &asked) {
        Ok(_) => return None,
        Err(PageError::NoPage { .. }) => format!("serves no OCX page at /ext/{PAGE}"),
        Err(e) => format!(
            "did not answer as OCX's page at /ext/{PAGE} ({})",
            crate::fossil::redact_password(&Stop::from(e).reason)
        ),
    };
    Some(format!(
        "{url} {why}: runs that hold their password cannot learn who sent what; serve it with fossil server --extroot DIR (ocx-cgi linked there)"
    ))
}
