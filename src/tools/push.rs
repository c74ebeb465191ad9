//! `push`: publishes a no-password run's new check-ins as the run's user
//! (C6). Inside the run's sandbox it reads what its clone made and never
//! sent, and hands those artifacts, as bytes, to the node's `push` over
//! the run's socket. On the node, `push` takes those bytes and checks each
//! itself (`fossil::incoming`) before storing them in one bundle of its
//! own, so Fossil records the run's user as their sender; with `branch`,
//! one check-in on another branch refuses the whole push. A run under
//! review has its checked push held, its diff shown in the question.

use crate::answer::Op;
use crate::fossil::incoming::{self, Refused};
use crate::fossil::store;
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use base64::Engine;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Input of `push`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The artifacts to store, as the run's side of push sends them to the
    /// node; leave it out inside a run, where push reads them from the clone.
    #[serde(default)]
    pub artifacts: Vec<Sent>,
}

/// One artifact sent to the node: its full hash and its bytes.
#[derive(Deserialize, Serialize, JsonSchema, Clone)]
#[serde(deny_unknown_fields)]
pub struct Sent {
    /// Its full hash (SHA1 or SHA3-256), which must be the hash of its bytes.
    pub hash: String,
    /// Its bytes, in base64.
    pub content: String,
}

/// What `push` copied.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The check-ins copied (those the node's repository already had are left out); with held, those held instead.
    pub checkins: Vec<String>,
    /// For a run under review: the question its check-ins are held under; they are written only once approved, and the run's next line says how it was decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
}

/// The `push` tool.
pub struct Push;

impl Tool for Push {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "push";
    const SUMMARY: &'static str =
        "Publish a no-password run's new check-ins from its clone, as the run's user.";
    const NEEDS: Needs = Needs::Any("i");
    const WRITES: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let checkins = if call.cx.run().is_some() {
            store_sent(&input.artifacts, call)?
        } else {
            if !input.artifacts.is_empty() {
                return Err(
                    Stop::field("artifacts", "are taken only by the node serving a run")
                        .next("call push with no artifacts inside the run"),
                );
            }
            publish(call)?
        };
        Ok(Output {
            checkins,
            held: super::writing::held(call),
        })
    }
}

fn not_a_run() -> Stop {
    Stop::new("push is for a run whose record restricts no_password")
        .next("use fossil push from your own clone")
}

/// Inside a no-password run: sends what the clone made and never sent to
/// the node's `push` over the run's socket (nothing on a dry run but the
/// log); answers the check-ins the node stored (or, for a run under
/// review, held: the log then names the question).
pub fn publish(call: &mut Call) -> Result<Vec<String>, Stop> {
    let socket = call.cx.node_socket().ok_or_else(not_a_run)?;
    let unsent = call.repo()?.unsent()?;
    call.read(format!(
        "{} artifacts the clone made and never sent",
        unsent.len()
    ));
    if call.dry_run || unsent.is_empty() {
        call.log(Op::Fossil {
            operation: format!("send {} artifacts to the node", unsent.len()),
            done: false,
        });
        return Ok(Vec::new());
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let artifacts: Vec<Value> = unsent
        .iter()
        .map(|(hash, bytes)| json!({"hash": hash, "content": b64.encode(bytes)}))
        .collect();
    let answer = crate::run::link::call(&socket, "ocx_push", json!({ "artifacts": artifacts }))
        .map_err(|e| {
            Stop::new(e.to_string()).next("the check-in is kept in the clone; push again")
        })?;
    call.log(Op::Fossil {
        operation: format!("sent {} artifacts to the node", unsent.len()),
        done: true,
    });
    if answer["ok"] != true {
        let stopped = &answer["stopped"];
        let mut stop = Stop::new(
            stopped["reason"]
                .as_str()
                .unwrap_or("the node refused the push"),
        );
        stop.field = stopped["field"].as_str().map(str::to_string);
        if let Some(next) = answer["next_step"].as_str() {
            stop = stop.next(next);
        }
        return Err(stop);
    }
    if let Some(question) = answer["result"]["held"].as_str() {
        call.log(Op::Held {
            artifacts: unsent.into_iter().map(|(hash, _)| hash).collect(),
            question: question.to_string(),
        });
    }
    Ok(answer["result"]["checkins"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default())
}

/// On the node, for a no-password run: checks `sent` with OCX's own
/// parser and stores what the node lacks, in one bundle, as the run's
/// user; answers the check-ins stored.
fn store_sent(sent: &[Sent], call: &mut Call) -> Result<Vec<String>, Stop> {
    let run = call
        .cx
        .run()
        .filter(|r| r.restrict.no_password == Some(true))
        .cloned()
        .ok_or_else(not_a_run)?;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut items = Vec::with_capacity(sent.len());
    for (i, s) in sent.iter().enumerate() {
        let bytes = b64.decode(s.content.as_bytes()).map_err(|e| {
            Stop::field(
                format!("artifacts[{i}].content"),
                format!("is not base64: {e}"),
            )
            .next("send each artifact's bytes in base64")
        })?;
        items.push((s.hash.clone(), bytes));
    }
    let checked = incoming::check(
        call.repo()?,
        &items,
        &run.user,
        run.restrict.branch.as_deref(),
    )
    .map_err(|e| match e {
        Refused::Fossil(f) => Stop::from(f),
        Refused::Branch { ref only, .. } => {
            let next = format!("commit on {only} only, then push again");
            Stop::field("artifacts", e.to_string()).next(next)
        }
        Refused::Artifact { .. } => Stop::field("artifacts", format!("{e}: nothing was pushed"))
            .next("push only check-ins made by commit in your checkout, with their files"),
    })?;
    call.read(format!(
        "{} check-ins the node's repository lacks",
        checked.checkins.len()
    ));
    let hashes: Vec<String> = checked.artifacts.iter().map(|a| a.0.clone()).collect();
    if super::writing::under_review(call) && !call.dry_run && !hashes.is_empty() {
        let fossil = call.fossil()?.clone();
        let question = crate::node::held::hold_push(
            &fossil,
            call.repo()?,
            &run,
            &checked.artifacts,
            &checked.checkins,
        )?;
        let _ = crate::node::poke(&run.root);
        call.log(Op::Held {
            artifacts: hashes,
            question,
        });
        return Ok(checked.checkins);
    }
    if !call.dry_run && !hashes.is_empty() {
        let fossil = call.fossil()?.clone();
        store::store_checked(&fossil, call.repo()?, &run.user, &checked.artifacts, true)?;
        let _ = crate::node::poke(&run.root);
    }
    call.log(Op::Store {
        artifacts: hashes,
        sender: run.user.clone(),
        published: true,
        done: !call.dry_run,
    });
    Ok(checked.checkins)
}
