//! What the tools share in a clone's checkout: the server the clone syncs
//! with, pulled from first, and its receipts asked over HTTP (an unsigned
//! POST of JSON to OCX's page, 64 artifacts at a time), so a sender is
//! whom the server received each artifact from, never the clone's word.

use super::logins::PAGE;
use crate::answer::Op;
use crate::stop::Stop;
use crate::tool::Call;
use serde_json::{Value, json};

/// At most this many artifacts are asked of the server at once.
pub const AT_ONCE: usize = 64;

/// One artifact's receipt, as the server says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub hash: String,
    pub received: bool,
    pub user: Option<String>,
    pub rcvid: Option<i64>,
    pub rid: Option<i64>,
}

/// The server the call's clone syncs with (its URL, no login or password
/// in it), when the call is in a clone's checkout: no repository named
/// outright, no run, not the node's own repository, and a remote
/// remembered.
pub fn server(call: &Call) -> Result<Option<String>, Stop> {
    if call.cx.repository.is_some() || call.cx.run().is_some() || call.cx.checkout().is_none() {
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

/// The result of the server's `tool` asked with `input` (an unsigned POST
/// of JSON), answered within `within`; `None` when the server offers no
/// OCX page; refused, with the server's own reason, when it refuses.
pub fn ask(
    server: &str,
    tool: &str,
    input: &Value,
    within: std::time::Duration,
) -> Result<Option<Value>, Stop> {
    let agent = crate::http::agent(Some(within));
    let failed = |why: String| {
        Stop::field("server", format!("{server}'s {tool}: {why}"))
            .next("check that the server answers and offers OCX's page, then try again")
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

/// The server's receipts for `hashes`, in the order asked; `None` when the
/// server offers no OCX page (a 404 that is not OCX's answer); refused
/// when the server does not answer, refuses (its reason given as it says
/// it), or answers for other artifacts than those asked, or in another
/// order.
pub fn receipts(server: &str, hashes: &[String]) -> Result<Option<Vec<Received>>, Stop> {
    let failed = |why: String| {
        Stop::field("server", format!("{server}'s receipts: {why}"))
            .next("check that the server answers and offers OCX's page, then try again")
    };
    let mut out = Vec::with_capacity(hashes.len());
    for chunk in hashes.chunks(AT_ONCE) {
        let Some(result) = ask(
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
                rcvid: a["rcvid"].as_i64(),
                rid: a["rid"].as_i64(),
            });
        }
    }
    Ok(Some(out))
}

/// Counts a write from a clone done only once the server's receipt says
/// it received each of `hashes` from `sender`; a server offering no OCX
/// page cannot say, and the push's own word stands, the log saying so.
pub fn confirm(call: &mut Call, server: &str, hashes: &[String], sender: &str) -> Result<(), Stop> {
    let Some(said) = receipts(server, hashes)? else {
        call.read(format!(
            "no receipts: {server} offers no OCX page, so the push is not confirmed"
        ));
        return Ok(());
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
        ask(server, "receipt", &asked, std::time::Duration::from_secs(10)),
        Ok(Some(result)) if result["capabilities_of"]["capabilities"].is_string()
    )
}
