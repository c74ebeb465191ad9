//! `tag_messages`: adds the `ocx-message` tag (its value the message's
//! kind) to every OCX message in the repository that lacks it: one
//! written before OCX tagged its messages, or by another program. The tag
//! is a hint for readers that look messages up by it (`console`,
//! `questions`); the node and watchers read every message regardless. One
//! control artifact as the caller; a dry run lists what it would tag.

use crate::fossil::artifact::{self, TagChange};
use crate::fossil::store::Batch;
use crate::protocol::MESSAGE_TAG;
use crate::protocol::message::{self, Reading};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `tag_messages`: nothing.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {}

/// A message that lacked its tag.
#[derive(Serialize, JsonSchema, Clone, Debug)]
pub struct Untagged {
    /// The post or ticket change holding it (full hash).
    pub hash: String,
    /// Its kind, the tag's value.
    pub kind: String,
    /// Who sent it, by receipt.
    pub from: Option<String>,
}

/// What `tag_messages` tagged.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The messages that lacked the tag, oldest received first.
    pub untagged: Vec<Untagged>,
    /// The control artifact that tags them (none when nothing lacked it, or on a dry run).
    pub control: Option<String>,
}

/// The kinds of OCX message, each the tag's value.
const KINDS: &[&str] = &["record", "stop", "response", "question", "decision"];

/// The `tag_messages` tool.
pub struct TagMessages;

impl Tool for TagMessages {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "tag_messages";
    const SUMMARY: &'static str = "Add the ocx-message tag to every OCX message that lacks it (one written before OCX tagged them, or by another program).";
    const NEEDS: Needs = Needs::Any("as");
    const WRITES: bool = true;
    const IDEMPOTENT: bool = true;

    fn run(_: Input, call: &mut Call) -> Result<Output, Stop> {
        super::served::pull_first(call)?;
        call.read("every post and ticket change without the ocx-message tag");
        let repo = call.repo()?;
        let mut untagged = Vec::new();
        for said in repo.untagged_said(MESSAGE_TAG)? {
            let text = crate::protocol::found::text(repo, &said)?;
            if !text.windows(5).any(|w| w == b"\"ocx\"") {
                continue;
            }
            let Reading::Message { message } = message::read(&text) else {
                continue;
            };
            let Some(kind) = message
                .get("kind")
                .and_then(|k| k.as_str())
                .filter(|k| KINDS.contains(k))
            else {
                continue;
            };
            untagged.push(Untagged {
                hash: said.hash,
                kind: kind.to_string(),
                from: said.from,
            });
        }
        if untagged.is_empty() {
            return Ok(Output {
                untagged,
                control: None,
            });
        }
        let login = call.caller()?.login.clone();
        let tags: Vec<TagChange> = untagged
            .iter()
            .map(|u| TagChange {
                op: '+',
                name: MESSAGE_TAG.into(),
                target: u.hash.clone(),
                value: Some(u.kind.clone()),
            })
            .collect();
        let mut batch = Batch::default();
        let control = batch.add(
            "ocx-message tags",
            artifact::control(&artifact::now(), &login, &tags),
            call.repo()?.hash_policy()?,
        );
        super::writing::write(call, &batch, true)?;
        Ok(Output {
            untagged,
            control: (!call.dry_run).then_some(control),
        })
    }

    fn text(o: &Output) -> String {
        if o.untagged.is_empty() {
            return "every OCX message bears its ocx-message tag\n".into();
        }
        let mut t = format!(
            "{} OCX message{} lacked the ocx-message tag:\n",
            o.untagged.len(),
            if o.untagged.len() == 1 { "" } else { "s" }
        );
        for u in &o.untagged {
            t.push_str(&format!(
                "- {} {} (from {})\n",
                &u.hash[..16.min(u.hash.len())],
                u.kind,
                u.from.as_deref().unwrap_or("no one")
            ));
        }
        match &o.control {
            Some(c) => t.push_str(&format!("tagged by {c}\n")),
            None => t.push_str("(a dry run: nothing tagged)\n"),
        }
        t
    }
}
