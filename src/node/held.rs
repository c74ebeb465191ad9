//! Held writes (`restrict.review`): what a run under review would write,
//! kept in its run's directory on the node (never in a repository, never
//! where the run reaches) under the question the node asks in the
//! record's place of whoever reviews the run, until one of them decides
//! it. Approved, the node stores it as the run's login, byte for byte as
//! the tool composed it; declined, it is dropped, and either way the run
//! is told in its next line.

use super::config::NodeConfig;
use crate::context::RunScope;
use crate::fossil::store::{self, Batch};
use crate::fossil::{Fossil, FossilError, Repository};
use crate::place::Where;
use crate::protocol::ask::{self, Ask, Question};
use crate::protocol::found;
use crate::stop::Stop;
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The option a reviewer chooses to have a held write written; any other
/// decision of theirs declines it.
pub const APPROVE: &str = "Approve";
/// The option that declines it.
pub const DECLINE: &str = "Decline";

/// Why a write could not be held, or a held one settled.
#[derive(Debug, thiserror::Error)]
pub enum HeldError {
    /// A Fossil operation failed.
    #[error(transparent)]
    Fossil(#[from] FossilError),
    /// The run's directory could not keep it.
    #[error("the held write's file: {0}")]
    Io(#[from] std::io::Error),
    /// The node's configuration is gone.
    #[error("this is no node: its root holds no node.json")]
    NotANode,
    /// The run's record, or its sender, cannot be read.
    #[error("the run's record {0} names no one to review its writes")]
    NoReviewer(String),
    /// The question does not read back as the one composed.
    #[error("the held write's question does not read back as composed")]
    Unreadable,
    /// A held write's file does not read.
    #[error("the held write's file does not read: {0}")]
    Corrupt(#[from] serde_json::Error),
}

impl From<HeldError> for super::NodeError {
    fn from(e: HeldError) -> Self {
        match e {
            HeldError::Fossil(f) => f.into(),
            HeldError::Io(io) => io.into(),
            other => std::io::Error::other(other.to_string()).into(),
        }
    }
}

impl From<HeldError> for Stop {
    fn from(e: HeldError) -> Stop {
        match e {
            HeldError::Fossil(f) => Stop::from(f),
            HeldError::NoReviewer(_) => Stop::field("restrict.review_by", e.to_string())
                .next("the record's sender is unknown here: nothing was written"),
            other => Stop::internal(other).next("nothing was written; try the write again"),
        }
    }
}

/// One artifact held: what it is, its full hash, its bytes (base64).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Kept {
    pub what: String,
    pub hash: String,
    pub content: String,
}

/// A write held for review, as its run's directory keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeldWrite {
    /// The question it waits on, by full hash.
    pub question: String,
    /// The run's record.
    pub record: String,
    /// The run's login, as whom it is written.
    pub user: String,
    /// Whether it is written published (false: to the moderators' queue).
    pub published: bool,
    /// What is written, in order.
    pub artifacts: Vec<Kept>,
}

impl HeldWrite {
    /// The artifacts as a batch to store.
    pub fn batch(&self) -> Result<Batch, HeldError> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut batch = Batch::default();
        for k in &self.artifacts {
            let bytes = b64
                .decode(k.content.as_bytes())
                .map_err(|e| HeldError::Io(std::io::Error::other(e)))?;
            batch
                .artifacts
                .push((k.what.clone(), k.hash.clone(), bytes));
        }
        Ok(batch)
    }
}

/// The file a run's held write waiting on `question` is kept in.
pub fn file(root: &Path, record: &str, question: &str) -> PathBuf {
    NodeConfig::run_dir(root, record)
        .join("held")
        .join(format!("{question}.json"))
}

/// Who decides a held write of the record `r`: the logins its
/// `review_by` names, else its sender by receipt (none when unknown).
pub fn reviewers(r: &found::StandingRecord) -> Vec<String> {
    match &r.record.restrict.review_by {
        Some(by) if !by.is_empty() => by.clone(),
        _ => r.said.from.clone().into_iter().collect(),
    }
}

/// Whether a decision's note approves: its option is [`APPROVE`].
pub fn approves(note: &str) -> bool {
    note == APPROVE || note.starts_with(&format!("{APPROVE}: "))
}

/// `text` in a fence no line of it closes.
fn fenced(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    let end = if text.ends_with('\n') { "" } else { "\n" };
    format!("{fence}text\n{text}{end}{fence}\n")
}

/// What a held batch would write, shown exactly: each artifact whole.
fn shown(batch: &Batch) -> String {
    let mut out = String::new();
    for (what, hash, bytes) in &batch.artifacts {
        out.push_str(&format!("\n{} `{hash}`, exactly:\n\n", ask::escape(what)));
        out.push_str(&fenced(&String::from_utf8_lossy(bytes)));
    }
    out
}

/// Holds `batch`, which the run `scope` would write as its login: keeps
/// it in the run's directory, then asks its reviewers in the record's
/// place, as the node's login, whether to write it. Answers the
/// question's hash. Nothing of it reaches the repository.
pub fn hold(
    fossil: &Fossil,
    repo: &Repository,
    scope: &RunScope,
    batch: &Batch,
    published: bool,
) -> Result<String, HeldError> {
    let cfg = NodeConfig::load(&scope.root).ok_or(HeldError::NotANode)?;
    let record = match repo.resolve(&scope.record)? {
        crate::fossil::repo::Lookup::One(rid, hash) => found::record(repo, rid, &hash)?,
        _ => None,
    };
    let reviewers = record.as_ref().map(reviewers).unwrap_or_default();
    let Some((first, also)) = reviewers.split_first() else {
        return Err(HeldError::NoReviewer(scope.record.clone()));
    };
    let n = batch.artifacts.len();
    let q = Question {
        ocx: 1,
        kind: "question".into(),
        for_login: first.clone(),
        question: format!(
            "The run {} would write what follows ({n} artifact{}). Approve, and the node writes it as {}; decline, and the run is told.",
            scope.user,
            if n == 1 { "" } else { "s" },
            scope.user
        ),
        options: vec![APPROVE.into(), DECLINE.into()],
        stakes: Some("what the repository receives from this run".into()),
        references: Vec::new(),
        run: Some(scope.record.clone()),
        also: also.to_vec(),
    };
    let mut text = ask::question_text(&q, &[]);
    text.push_str(&shown(batch));
    if !ask::reads_back(&text, &Ask::Question(q)) {
        return Err(HeldError::Unreadable);
    }
    let mut asked = Batch::default();
    let question = crate::place::compose_message(
        &mut asked,
        repo.hash_policy()?,
        &cfg.login,
        &Where::At(scope.place.clone()),
        &text,
        "question",
    );
    let b64 = base64::engine::general_purpose::STANDARD;
    let held = HeldWrite {
        question: question.clone(),
        record: scope.record.clone(),
        user: scope.user.clone(),
        published,
        artifacts: batch
            .artifacts
            .iter()
            .map(|(what, hash, bytes)| Kept {
                what: what.clone(),
                hash: hash.clone(),
                content: b64.encode(bytes),
            })
            .collect(),
    };
    let path = file(&scope.root, &scope.record, &question);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    super::write_whole(
        &path,
        &path.with_extension("new"),
        &serde_json::to_vec(&held)?,
    )?;
    if let Err(e) = store::store(fossil, repo, &cfg.login, &asked, true) {
        let _ = std::fs::remove_file(&path);
        return Err(e.into());
    }
    Ok(question)
}

/// The held write of `record` waiting on `question`, if one waits.
pub fn waiting(root: &Path, record: &str, question: &str) -> Result<Option<HeldWrite>, HeldError> {
    match std::fs::read(file(root, record, question)) {
        Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Settles `held`: approved, stores it as the run's login (all of it or
/// none) and answers what was written; declined, writes nothing. Either
/// way its file goes, so it is settled once.
pub fn settle(
    fossil: &Fossil,
    repo: &Repository,
    root: &Path,
    held: &HeldWrite,
    approved: bool,
) -> Result<Vec<String>, HeldError> {
    let mut written = Vec::new();
    if approved {
        let batch = held.batch()?;
        store::store(fossil, repo, &held.user, &batch, held.published)?;
        written = batch.hashes();
    }
    std::fs::remove_file(file(root, &held.record, &held.question))?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_is_longer_than_any_run_of_backticks_inside() {
        assert_eq!(fenced("a"), "```text\na\n```\n");
        let inner = "x\n````json\n{}\n````\n";
        assert!(
            fenced(inner).starts_with("`````text\n"),
            "{}",
            fenced(inner)
        );
    }

    #[test]
    fn only_the_approve_option_approves() {
        assert!(approves("Approve"));
        assert!(approves("Approve: looks right"));
        assert!(!approves("Decline"));
        assert!(!approves("Approved"));
        assert!(!approves("approve"));
    }
}
