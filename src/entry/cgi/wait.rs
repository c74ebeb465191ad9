//! `/ext/ocx-cgi/wait?after=N`: the long-poll an agent machine keeps open.
//! It answers `{"last": M, "received": [...]}`, M the newest receipt the
//! repository holds, as soon as M > N, with the receipts of what came
//! after N (as `receipt` says them), or after about 50 s (`within`
//! seconds, 1 to 50, when given) with M <= N and none; only to a viewer
//! signed in who may read (o). Asked with `artifacts=1`, it also answers
//! `artifacts`: the public artifacts received after N among the newest
//! [`AT_ONCE`] rows, each its hash and its bytes in base64, when they are
//! all that came and hold at most [`ARTIFACTS_BYTES`], so an agent machine
//! takes them without a pull; `null` otherwise (the machine pulls). At
//! most [`PER_LOGIN`] waits of one login and [`IN_ALL`] in all are open at
//! once, counted across the server's processes by slots of a lock file
//! beside the repository; the rest are answered 429 with a `Retry-After`.

use super::{Request, Response, refusal};
use crate::context::Context;
use crate::lock::{self, Slot};
use crate::node::receipts::{AT_ONCE, Receipts, Received};
use crate::node::remote::RemoteRun;
use crate::stop::Stop;
use sha2::Digest;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a wait lasts when nothing arrives, at most, in seconds.
pub const LONGEST: u64 = 50;

/// The most bytes the artifacts one wait answers may hold in all.
pub const ARTIFACTS_BYTES: usize = 256 << 10;

/// How many waits one login may hold open at once.
pub const PER_LOGIN: u64 = 4;

/// How many waits may be open at once in all, on one repository.
pub const IN_ALL: u64 = 32;

/// How many places for logins' waits the lock file has: logins share one
/// only when their names' hashes meet.
const LOGIN_PLACES: u64 = 1 << 16;

/// The lock file whose slots count the open waits of `repository`.
fn slots_file(repository: &Path) -> PathBuf {
    let mut name = repository.file_name().unwrap_or_default().to_os_string();
    name.push(".ocx-waits");
    repository.with_file_name(name)
}

/// The slots of `login`'s waits in the lock file.
fn login_slots(login: &str) -> std::ops::Range<u64> {
    let digest = sha2::Sha256::digest(login.as_bytes());
    let place = u64::from_be_bytes(digest[..8].try_into().unwrap_or_default()) % LOGIN_PLACES;
    let first = IN_ALL + place * PER_LOGIN;
    first..first + PER_LOGIN
}

/// The slots an open wait of `login` holds: one of its login's and one
/// of all; `None` when either is full.
fn take_slots(repository: &Path, login: &str) -> std::io::Result<Option<(Slot, Slot)>> {
    let file = slots_file(repository);
    let Some(own) = lock::slot(&file, login_slots(login))? else {
        return Ok(None);
    };
    Ok(lock::slot(&file, 0..IN_ALL)?.map(|all| (own, all)))
}

/// How many waits on `repository` are open now: of `login`, or in all.
pub fn open_waits(repository: &Path, login: Option<&str>) -> std::io::Result<u64> {
    let slots = login.map_or(0..IN_ALL, login_slots);
    lock::slots_held(&slots_file(repository), slots)
}

/// What the request asks: the receipt waited past and for how long.
#[derive(Debug, PartialEq, Eq)]
struct Asked {
    after: i64,
    within: u64,
    /// Whether the artifacts themselves are asked (`artifacts=1`).
    artifacts: bool,
}

/// The answer to `GET wait`.
pub(super) fn wait(request: &Request, cx: &Context) -> Response {
    if request.method != "GET" {
        let stop = Stop::field(
            "method",
            format!("wait answers a GET, not a {}", request.method),
        )
        .next("send GET /ext/ocx-cgi/wait?after=N");
        return refusal(request, true, 405, Some(cx), stop);
    }
    let may_read = request.signed_in() && cx.caller().is_ok_and(|c| c.capabilities.has('o'));
    if !may_read {
        let stop = Stop::field(
            "user",
            "wait answers only a viewer signed in who may read the repository (o)",
        )
        .next("sign in with a login holding Read (o), and send its login cookie");
        return refusal(request, true, 403, Some(cx), stop);
    }
    let asked = match parse(&request.query) {
        Ok(a) => a,
        Err(stop) => return refusal(request, true, 400, Some(cx), stop),
    };
    let login = request.user.clone().unwrap_or_default();
    let slots = cx.repo().map(|repo| take_slots(repo.path(), &login));
    let _held = match slots {
        Ok(Ok(Some(held))) => held,
        Ok(Ok(None)) => {
            let stop = Stop::field(
                "user",
                format!(
                    "too many waits are open: at most {PER_LOGIN} of one login and {IN_ALL} in all"
                ),
            )
            .next(format!(
                "wait again after {} seconds, keeping one wait open at a time",
                super::RETRY_AFTER
            ));
            return refusal(request, true, 429, Some(cx), stop);
        }
        Ok(Err(e)) => {
            let stop = Stop::field("repository", format!("cannot count the open waits: {e}")).next(
                "ask the server's administrator: the page makes a file beside the repository",
            );
            return refusal(request, true, 500, Some(cx), stop);
        }
        Err(stop) => return refusal(request, true, 500, Some(cx), stop),
    };
    let last = cx.repo().and_then(|repo| {
        repo.wait_for_receipt_after(asked.after, Duration::from_secs(asked.within))
            .map_err(|e| Stop::field("repository", e.to_string()))
    });
    let answer = last.and_then(|last| {
        let came = last > asked.after;
        let received = match came {
            true => cx
                .repo()
                .and_then(|repo| received_lately(repo, asked.after, &login))?,
            false => Vec::new(),
        };
        let mut answer = serde_json::json!({ "last": last, "received": received });
        if asked.artifacts {
            answer["artifacts"] = match came {
                true => cx.repo().and_then(|repo| arrived(repo, asked.after))?,
                false => serde_json::json!([]),
            };
        }
        Ok(answer)
    });
    match answer {
        Ok(answer) => Response {
            status: 200,
            content_type: "application/json",
            body: format!("{answer}\n"),
        },
        Err(stop) => refusal(request, true, 500, Some(cx), stop),
    }
}

/// The receipts of what arrived after receipt `after` (among the
/// repository's newest [`AT_ONCE`] rows) and of the records whose runs
/// `login`'s agent machine holds, as `receipt` would say them, so the
/// machine that waited asks nothing more at the wake that follows its
/// pull; a private artifact (an unmoderated post) is left out, its hash
/// unsaid.
fn received_lately(
    repo: &crate::fossil::Repository,
    after: i64,
    login: &str,
) -> Result<Vec<Received>, Stop> {
    let mut hashes = repo.received_lately(after, AT_ONCE)?;
    hashes.extend(RemoteRun::records_of(repo, login).map_err(Stop::internal)?);
    let received = Receipts::served(repo)
        .received(&hashes)
        .map_err(Stop::internal)?;
    Ok(received.into_iter().filter(|r| !r.private).collect())
}

/// What arrived after receipt `after`, as the answer's `artifacts`:
/// each `{hash, content}`, the bytes in base64; `null` when there is
/// more than one answer should carry.
fn arrived(repo: &crate::fossil::Repository, after: i64) -> Result<serde_json::Value, Stop> {
    use base64::Engine;
    let Some(arrived) = repo.arrived_after(after, AT_ONCE, ARTIFACTS_BYTES)? else {
        return Ok(serde_json::Value::Null);
    };
    let engine = base64::engine::general_purpose::STANDARD;
    Ok(arrived
        .iter()
        .map(|(hash, bytes)| serde_json::json!({ "hash": hash, "content": engine.encode(bytes) }))
        .collect())
}

/// The query's `after` (required, a receipt number), `within` (optional,
/// 1 to [`LONGEST`] seconds) and `artifacts` (optional, `1` to have them);
/// `json` is the page's own; any other field is refused, naming it.
fn parse(query: &str) -> Result<Asked, Stop> {
    let mut after = None;
    let mut within = LONGEST;
    let mut artifacts = false;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "json" => {}
            "after" => {
                after = Some(
                    number(value)
                        .and_then(|n| i64::try_from(n).ok())
                        .ok_or_else(|| {
                            Stop::field("after", "is not a receipt number (0 or more, in digits)")
                                .next("give after=N, N the last receipt number you heard")
                        })?,
                )
            }
            "artifacts" => {
                artifacts = match value {
                    "1" => true,
                    "0" => false,
                    _ => {
                        return Err(Stop::field("artifacts", "is 1 or 0")
                            .next("give artifacts=1 to have the artifacts themselves"));
                    }
                }
            }
            "within" => {
                within = number(value)
                    .filter(|n| (1..=LONGEST).contains(n))
                    .ok_or_else(|| {
                        Stop::field(
                            "within",
                            format!("is not a number of seconds from 1 to {LONGEST}"),
                        )
                        .next("leave within out to wait the longest")
                    })?
            }
            _ => {
                let shown: String = name.chars().filter(|c| !c.is_control()).take(40).collect();
                return Err(Stop::field(
                    shown.clone(),
                    format!("{shown:?} is not a field of wait"),
                )
                .next("give after=N and, to wait less, within=SECONDS"));
            }
        }
    }
    let after = after.ok_or_else(|| {
        Stop::field("after", "is missing")
            .next("give after=N, N the last receipt number you heard (0 at first)")
    })?;
    Ok(Asked {
        after,
        within,
        artifacts,
    })
}

/// Decimal digits alone, at most 18 of them.
fn number(text: &str) -> Option<u64> {
    (!text.is_empty() && text.len() <= 18 && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_after_and_within() {
        assert_eq!(
            parse("after=7").unwrap(),
            Asked {
                after: 7,
                within: LONGEST,
                artifacts: false
            }
        );
        assert_eq!(
            parse("json&after=0&within=2").unwrap(),
            Asked {
                after: 0,
                within: 2,
                artifacts: false
            }
        );
        assert!(parse("after=3&artifacts=1").unwrap().artifacts);
        assert_eq!(
            parse("after=3&artifacts=yes").unwrap_err().field.as_deref(),
            Some("artifacts")
        );
        assert_eq!(parse("").unwrap_err().field.as_deref(), Some("after"));
        assert_eq!(
            parse("after=-1").unwrap_err().field.as_deref(),
            Some("after")
        );
        assert_eq!(
            parse("after=1&within=0").unwrap_err().field.as_deref(),
            Some("within")
        );
        assert_eq!(
            parse("after=1&within=51").unwrap_err().field.as_deref(),
            Some("within")
        );
        assert_eq!(
            parse("after=1&more=2").unwrap_err().field.as_deref(),
            Some("more")
        );
    }

    proptest! {
        #[test]
        fn any_query_is_read_or_refused(query in ".{0,80}") {
            let _ = parse(&query);
        }
    }
}
