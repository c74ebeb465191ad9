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

/// What opens the part of a held write's question that shows what would
/// be written, after the question's own block.
pub const SHOWN_MARK: &str = "\n**What would be written, exactly:**\n";

/// The part of a held write's question (its post's text) that shows
/// what would be written, if it has one.
pub fn shown_in(text: &str) -> Option<&str> {
    text.split_once(SHOWN_MARK).map(|(_, shown)| shown)
}

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
    /// For a push: the check-ins it holds (its artifacts are check-ins and
    /// their files, checked again and stored as `push` stores them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkins: Vec<String>,
    /// On an agent machine: the call held in place of artifacts, made on
    /// the server as the run's login once approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<HeldCall>,
}

/// A call of a run on an agent machine held for review: the tool and
/// its input as the run gave them, checked on the machine as a dry run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeldCall {
    /// The tool's name.
    pub tool: String,
    /// Its input.
    pub input: serde_json::Value,
}

/// What became of an approved held write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settled {
    /// What the node wrote: a push's check-ins, else every artifact.
    pub written: Vec<String>,
    /// Why the node wrote nothing of an approved push after all: its
    /// checks, made again, refused it.
    pub refused: Option<String>,
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

    /// The artifacts as `push` stores them: each hash and its bytes.
    fn items(&self) -> Result<Vec<(String, Vec<u8>)>, HeldError> {
        Ok(self
            .batch()?
            .artifacts
            .into_iter()
            .map(|(_, hash, bytes)| (hash, bytes))
            .collect())
    }
}

/// What is held and how it is shown, before it is kept.
struct Holding {
    artifacts: Vec<(String, String, Vec<u8>)>,
    published: bool,
    checkins: Vec<String>,
    call: Option<HeldCall>,
    /// What the question says follows (`what follows (2 artifacts)`).
    summary: String,
    /// The Markdown showing it exactly, after the question's block.
    shown: String,
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

/// `text` in a fence no line of it closes, marked as `lang`.
fn fenced(text: &str, lang: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    let end = if text.ends_with('\n') { "" } else { "\n" };
    format!("{fence}{lang}\n{text}{end}{fence}\n")
}

/// What a held batch would write, shown exactly: each artifact whole,
/// after the text it carries (a post's, a wiki page's) as a person reads
/// it, its title when it has one.
fn shown(batch: &Batch) -> String {
    let mut out = String::new();
    for (what, hash, bytes) in &batch.artifacts {
        if let Some(p) = crate::fossil::artifact::parse(bytes)
            && let Some(text) = &p.text
        {
            let title = p
                .arg(b'H')
                .map(|t| format!(" titled \"{}\"", ask::escape(&t)))
                .unwrap_or_default();
            out.push_str(&format!("\n{}{title}, its text:\n\n", ask::escape(what)));
            out.push_str(&fenced(&String::from_utf8_lossy(text), "text"));
        }
        out.push_str(&format!("\n{} `{hash}`, exactly:\n\n", ask::escape(what)));
        out.push_str(&fenced(&String::from_utf8_lossy(bytes), "text"));
    }
    out
}

/// Holds `batch`, which the run `scope` would write as its login
/// ([`keep_and_ask`]), showing each artifact whole. Answers the
/// question's hash.
pub fn hold(
    fossil: &Fossil,
    repo: &Repository,
    scope: &RunScope,
    batch: &Batch,
    published: bool,
) -> Result<String, HeldError> {
    let n = batch.artifacts.len();
    let holding = Holding {
        artifacts: batch.artifacts.clone(),
        published,
        checkins: Vec::new(),
        call: None,
        summary: format!(
            "what follows ({n} artifact{})",
            if n == 1 { "" } else { "s" }
        ),
        shown: shown(batch),
    };
    keep_and_ask(fossil, repo, scope, holding)
}

/// Holds a push of the run `scope` ([`keep_and_ask`]): `items`, checked
/// by `push`, holding the new `checkins`, each shown by its comment,
/// branch and diff against its parent. Answers the question's hash.
pub fn hold_push(
    fossil: &Fossil,
    repo: &Repository,
    scope: &RunScope,
    items: &[(String, Vec<u8>)],
    checkins: &[String],
) -> Result<String, HeldError> {
    let mut shown = String::new();
    for c in crate::fossil::diff::checkins(repo, items, checkins)? {
        shown.push_str(&format!(
            "\nCheck-in `{}` on {}: {}\n\n",
            c.hash,
            ask::escape(c.branch.as_deref().unwrap_or("its parent's branch")),
            ask::escape(&c.comment)
        ));
        shown.push_str(&fenced(&c.diff, "diff"));
    }
    let n = checkins.len();
    let holding = Holding {
        artifacts: items
            .iter()
            .map(|(h, b)| ("pushed".to_string(), h.clone(), b.clone()))
            .collect(),
        published: true,
        checkins: checkins.to_vec(),
        call: None,
        summary: format!(
            "the check-in{} that follow{}",
            if n == 1 { "" } else { "s" },
            if n == 1 { "s" } else { "" }
        ),
        shown,
    };
    keep_and_ask(fossil, repo, scope, holding)
}

/// Holds the call of `tool` with `input` that the run `scope`, on an
/// agent machine, would make on its server as its login ([`keep_and_ask`]):
/// shown as its input, and for a push by the diff of each of its new
/// `checkins` against its parent in the machine's clone. Answers the
/// question's hash.
pub fn hold_call(
    fossil: &Fossil,
    repo: &Repository,
    scope: &RunScope,
    tool: &str,
    input: &serde_json::Value,
    checkins: &[String],
) -> Result<String, HeldError> {
    let mut shown = String::new();
    if !checkins.is_empty() {
        let b64 = base64::engine::general_purpose::STANDARD;
        let items: Vec<(String, Vec<u8>)> = input["artifacts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| {
                let hash = a["hash"].as_str()?.to_string();
                let bytes = b64.decode(a["content"].as_str()?.as_bytes()).ok()?;
                Some((hash, bytes))
            })
            .collect();
        for c in crate::fossil::diff::checkins(repo, &items, checkins)? {
            shown.push_str(&format!(
                "\nCheck-in `{}` on {}: {}\n\n",
                c.hash,
                ask::escape(c.branch.as_deref().unwrap_or("its parent's branch")),
                ask::escape(&c.comment)
            ));
            shown.push_str(&fenced(&c.diff, "diff"));
        }
    } else {
        let mut words = input.clone();
        if let Some(o) = words.as_object_mut() {
            o.remove("artifacts");
        }
        if let Some(text) = words["text"].as_str() {
            shown.push_str("\nIts text:\n\n");
            shown.push_str(&fenced(text, "text"));
        }
        shown.push_str(&format!("\nThe call `{}`, exactly:\n\n", ask::escape(tool)));
        shown.push_str(&fenced(
            &serde_json::to_string_pretty(&words).unwrap_or_default(),
            "json",
        ));
    }
    let holding = Holding {
        artifacts: Vec::new(),
        published: true,
        checkins: checkins.to_vec(),
        call: Some(HeldCall {
            tool: tool.to_string(),
            input: input.clone(),
        }),
        summary: match checkins.len() {
            0 => format!("by the call `{tool}` that follows, on its server"),
            1 => "the check-in that follows, on its server".to_string(),
            _ => "the check-ins that follow, on its server".to_string(),
        },
        shown,
    };
    keep_and_ask(fossil, repo, scope, holding)
}

/// Keeps `holding` in the run's directory, then asks the run's reviewers
/// in the record's place, as the node's login, whether to write it.
/// Nothing of it reaches the repository.
fn keep_and_ask(
    fossil: &Fossil,
    repo: &Repository,
    scope: &RunScope,
    holding: Holding,
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
    let q = Question {
        ocx: 1,
        kind: "question".into(),
        for_login: first.clone(),
        question: format!(
            "The run {} would write {}. Approve, and the node writes it as {}; decline, and the run is told.",
            scope.user, holding.summary, scope.user
        ),
        options: vec![APPROVE.into(), DECLINE.into()],
        stakes: Some("what the repository receives from this run".into()),
        references: Vec::new(),
        run: Some(scope.record.clone()),
        also: also.to_vec(),
    };
    let mut text = ask::question_text(&q, &[]);
    text.push_str(SHOWN_MARK);
    text.push_str(&holding.shown);
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
        published: holding.published,
        artifacts: holding
            .artifacts
            .iter()
            .map(|(what, hash, bytes)| Kept {
                what: what.clone(),
                hash: hash.clone(),
                content: b64.encode(bytes),
            })
            .collect(),
        checkins: holding.checkins,
        call: holding.call,
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
    let stored = store::store(fossil, repo, &cfg.login, &asked, true).and_then(|()| {
        // On an agent machine the question is asked on its server.
        match cfg.machine {
            Some(_) => fossil.push_server(&cfg.repository),
            None => Ok(()),
        }
    });
    if let Err(e) = stored {
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
/// none; a push checked again as `push` checks it, `only` the record's
/// branch, and not stored again when the repository has it all, as after
/// a crash between storing and settling); declined, writes nothing.
/// Either way its file goes, so it is settled once.
pub fn settle(
    fossil: &Fossil,
    repo: &Repository,
    root: &Path,
    held: &HeldWrite,
    approved: Option<Option<&str>>,
) -> Result<Settled, HeldError> {
    let mut settled = Settled::default();
    match approved {
        None => {}
        Some(_) if held.call.is_some() => {
            return Err(HeldError::Io(std::io::Error::other(
                "a held call is settled on its server (settle_call)",
            )));
        }
        Some(only) if !held.checkins.is_empty() => {
            match crate::fossil::incoming::check(repo, &held.items()?, &held.user, only) {
                Ok(checked) if checked.artifacts.is_empty() => {
                    settled.written = held.checkins.clone();
                }
                Ok(checked) => {
                    store::store_checked(fossil, repo, &held.user, &checked.artifacts, true)?;
                    settled.written = checked.checkins;
                }
                Err(crate::fossil::incoming::Refused::Fossil(f)) => return Err(f.into()),
                Err(refused) => settled.refused = Some(refused.to_string()),
            }
        }
        Some(_) => {
            let batch = held.batch()?;
            store::store(fossil, repo, &held.user, &batch, held.published)?;
            settled.written = batch.hashes();
        }
    }
    std::fs::remove_file(file(root, &held.record, &held.question))?;
    Ok(settled)
}

/// Settles a held call of a run on an agent machine ([`HeldWrite::call`]):
/// approved, made on the server `url` signed in as the run's login with
/// its `password`, and counted written only once the server's receipts
/// name that login; declined, nothing is made. Either way its file goes,
/// so it is settled once.
pub fn settle_call(
    root: &Path,
    url: &str,
    password: &str,
    held: &HeldWrite,
    approved: bool,
) -> Result<Settled, HeldError> {
    use super::machine::written::{confirm, written};
    let mut settled = Settled::default();
    if let (true, Some(call)) = (approved, &held.call) {
        let server = super::receipts::Server::new(super::page::Page::signed_in(
            url,
            &held.user,
            password,
            std::time::Duration::from_secs(120),
        ));
        match server.page().answer(&call.tool, &call.input) {
            Ok(a) if a.ok => {
                let hashes = written(a.result.as_ref());
                match confirm(&server, &hashes, &held.user) {
                    Ok(()) => settled.written = hashes,
                    Err(why) => settled.refused = Some(why.to_string()),
                }
            }
            Ok(a) => {
                settled.refused = Some(
                    a.stopped
                        .map(|s| s.reason)
                        .unwrap_or_else(|| "the server refused it".into()),
                )
            }
            Err(e) => settled.refused = Some(format!("the server gave no answer: {e}")),
        }
    }
    std::fs::remove_file(file(root, &held.record, &held.question))?;
    Ok(settled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_is_longer_than_any_run_of_backticks_inside() {
        assert_eq!(fenced("a", "text"), "```text\na\n```\n");
        let inner = "x\n````json\n{}\n````\n";
        let fence = fenced(inner, "diff");
        assert!(fence.starts_with("`````diff\n"), "{fence}");
    }

    #[test]
    fn a_held_post_shows_its_text_as_it_reads_then_the_artifact_whole() {
        use crate::fossil::artifact::{ForumPost, HashPolicy};
        let post = ForumPost {
            date: "2026-12-05T00:00:00",
            reply: None,
            title: Some("A new thread"),
            mimetype: "text/x-markdown",
            user: "fixer",
            text: "The fix is on `fixes`.",
        }
        .compose();
        let mut batch = Batch::default();
        let hash = batch.add("forum post", post, HashPolicy::Sha3);
        let shown = shown(&batch);
        let text_at = shown
            .find("forum post titled \"A new thread\", its text:\n\n```text\nThe fix is on `fixes`.\n```")
            .expect(&shown);
        let whole_at = shown
            .find(&format!("forum post `{hash}`, exactly:"))
            .expect(&shown);
        assert!(text_at < whole_at, "{shown}");
        assert!(shown.contains("\nU fixer\n"), "{shown}");
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
