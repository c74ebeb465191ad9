//! Runners (design decision 10): `command` is built in; a session runner
//! is defined by the wiki page `sandbox/NAME`, read from its newest
//! version in received order among those sent by a login holding admin or
//! setup; every other version is ignored, whatever date its writer gave it.

use crate::fossil::{FossilError, Repository};
use crate::protocol::kinds::Problem;
use crate::protocol::message;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The built-in runner: a program run once per check-in.
pub const COMMAND: &str = "command";

/// How a session runner's program takes its deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InputMode {
    /// One line on stdin per delivery.
    Lines,
    /// Claude Code's stream-json user messages.
    ClaudeStreamJson,
}

/// A session runner as its page defines it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerPage {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Environment variables its runs get.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Host directories its runs share, bound read-write.
    #[serde(default)]
    pub homes: Vec<String>,
    /// Whether it offers remote control.
    #[serde(default)]
    pub remote: bool,
    /// How it takes deliveries.
    #[serde(default = "lines")]
    pub input: InputMode,
}

fn lines() -> InputMode {
    InputMode::Lines
}

/// The wiki page defining runner `name`.
pub fn page_name(name: &str) -> String {
    format!("sandbox/{name}")
}

/// Runner `name`'s page: the newest version received from a login holding
/// admin or setup (design decision 10), when its first fenced JSON block
/// reads; `None` when no such version is there or it does not read.
pub fn page(repo: &Repository, name: &str) -> Result<Option<RunnerPage>, FossilError> {
    let mut counting = None;
    for (rid, sender) in repo.wiki_versions_received(&page_name(name))? {
        if let Some(s) = sender
            && repo.capabilities(&s)?.is_some_and(|c| c.is_admin())
        {
            counting = Some(rid);
            break;
        }
    }
    let Some(rid) = counting else {
        return Ok(None);
    };
    let Some(text) = repo.parsed(rid)?.and_then(|p| p.text) else {
        return Ok(None);
    };
    Ok(read_page(&text).ok())
}

/// A runner page's definition: its first fenced JSON block, read as a
/// [`RunnerPage`]; refused naming the field at fault.
pub fn read_page(text: &[u8]) -> Result<RunnerPage, Problem> {
    let text = String::from_utf8_lossy(text);
    let block = message::json_blocks(&text)
        .into_iter()
        .next()
        .ok_or_else(|| Problem {
            field: "page".into(),
            reason: "holds no fenced JSON block".into(),
        })?;
    let mut de = serde_json::Deserializer::from_str(&block);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let (field, reason) = crate::stop::field_at_fault(&e);
        Problem { field, reason }
    })
}

/// Whether `name` can name a runner: lower-case letters, digits, `-` and `_`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 40
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}
