//! Questions and decisions: what an asker (a person or a run) asks one
//! login to decide, and the decision. Read leniently (a key this reader
//! does not know is passed over); written after Markdown a person reads in
//! Fossil's forum, which no reader parses. No node acts on either.

use super::found;
use super::kinds::Problem;
use super::message;
use crate::fossil::repo::Said;
use crate::fossil::{FossilError, Repository};
use crate::place::Place;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A question (`kind: "question"`): asked of the login `for`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    pub ocx: u64,
    pub kind: String,
    /// The login whose decision it waits on.
    #[serde(rename = "for")]
    pub for_login: String,
    /// What is asked, one paragraph.
    pub question: String,
    /// The choices, the first one recommended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// What the decision changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stakes: Option<String>,
    /// What to read first: links from the repository's root.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<String>,
    /// The record of the run that asked, by full hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Other logins whose decision counts as `for`'s does (a held write's
    /// reviewers besides the first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<String>,
}

impl Question {
    /// Whether a decision by `login` decides it: it is `for`, or one of `also`.
    pub fn decides(&self, login: &str) -> bool {
        self.for_login == login || self.also.iter().any(|a| a == login)
    }
}

/// A decision (`kind: "decision"`) on the question it names by full hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub ocx: u64,
    pub kind: String,
    /// The question's full hash.
    pub question: String,
    /// The choice or the words of the decision.
    #[serde(default)]
    pub note: String,
}

/// A question or a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    Question(Question),
    Decision(Decision),
}

/// Reads a message's object as a question or a decision: `None` when it
/// is of another kind, a problem naming the field when it does not read.
pub fn read(map: &Map<String, Value>) -> Option<Result<Ask, Problem>> {
    let kind = map.get("kind").and_then(Value::as_str)?;
    let value = Value::Object(map.clone());
    let problem = |e: serde_path_to_error::Error<serde_json::Error>| {
        let (field, reason) = crate::stop::field_at_fault(&e);
        Problem::new(super::kinds::clip(&field), super::kinds::clip(&reason))
    };
    match kind {
        "question" => Some(
            serde_path_to_error::deserialize(value)
                .map(Ask::Question)
                .map_err(problem),
        ),
        "decision" => Some(
            serde_path_to_error::deserialize(value)
                .map(Ask::Decision)
                .map_err(problem),
        ),
        _ => None,
    }
}

/// Reads the question or decision a post's or ticket change's text holds.
pub fn read_text(text: &[u8]) -> Option<Result<Ask, Problem>> {
    match message::read(text) {
        message::Reading::Message { message } => read(&message),
        _ => None,
    }
}

/// Who a decision counts as, by its sender's receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    /// Sent by the question's `for`: the question is decided.
    Decided,
    /// Sent by an administrator (admin or setup) other than `for`: the
    /// question is closed.
    Closed,
    /// Sent by anyone else, or by no one a receipt names: it counts for nothing.
    Nothing,
}

/// How a decision sent by `sender` (its receipt's login) stands on
/// `question`; `sender_is_admin` is whether the sender holds admin or
/// setup now.
pub fn standing(sender: Option<&str>, question: &Question, sender_is_admin: bool) -> Standing {
    match sender {
        Some(s) if question.decides(s) => Standing::Decided,
        Some(_) if sender_is_admin => Standing::Closed,
        _ => Standing::Nothing,
    }
}

/// `text` escaped so Markdown shows it as written, on one line: every
/// mark Markdown may read (a fence's backticks and tildes among them)
/// backslashed, line breaks made spaces.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\r' => out.push(' '),
            c if MARKDOWN_MARKS.contains(c) => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// The marks Markdown may read as more than themselves.
const MARKDOWN_MARKS: &str = "\\`*_{}[]()#+-.!|<>~&$=:";

/// A reference as the Markdown links it: its title and its link.
#[derive(Debug, Clone)]
pub struct Linked {
    pub title: String,
    pub link: String,
}

/// The options as a person reads them: numbered, the first recommended.
pub fn option_label(i: usize, option: &str) -> String {
    if i == 0 {
        format!("{option} (recommended)")
    } else {
        option.to_string()
    }
}

/// The whole text of a post holding `q`: the Markdown a person reads, then
/// the message's block. `root` is the repository's root as links start
/// (empty: from the server's root, which Fossil's Markdown completes).
pub fn question_text(q: &Question, refs: &[Linked]) -> String {
    let mut md = format!(
        "**Question for {}:** {}\n\n",
        escape(&q.for_login),
        escape(&q.question)
    );
    for (i, o) in q.options.iter().enumerate() {
        md.push_str(&format!("{}. {}\n", i + 1, escape(&option_label(i, o))));
    }
    if !q.options.is_empty() {
        md.push('\n');
    }
    if let Some(s) = &q.stakes {
        md.push_str(&format!("What it changes: {}\n\n", escape(s)));
    }
    if !refs.is_empty() {
        let links: Vec<String> = refs
            .iter()
            .map(|r| format!("[{}]({})", escape(&r.title), link_target(&r.link)))
            .collect();
        md.push_str(&format!("Read first: {}\n\n", links.join(", ")));
    }
    md.push_str("Decide: on the OCX page\n\n");
    md.push_str(&message::write(&to_map(q)));
    md
}

/// The whole text of a post holding `d`, sent by `from`; `closed` when
/// `from` closes a question for another login.
pub fn decision_text(d: &Decision, from: &str, closed: bool) -> String {
    let head = if closed { "Closed by" } else { "Decision from" };
    format!(
        "**{head} {}:** {}\n\n{}",
        escape(from),
        escape(&d.note),
        message::write(&to_map(d))
    )
}

/// A link's target as Markdown takes it: `$ROOT` then the link, its
/// parentheses and spaces escaped.
fn link_target(link: &str) -> String {
    link.replace(' ', "%20")
        .replace('(', "%28")
        .replace(')', "%29")
}

fn to_map<T: Serialize>(t: &T) -> Map<String, Value> {
    match serde_json::to_value(t) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// Checks that `text` reads back as the message it was made from.
pub fn reads_back(text: &str, ask: &Ask) -> bool {
    matches!(read_text(text.as_bytes()), Some(Ok(a)) if &a == ask)
}

/// A question as it stands in a repository: where it was asked, by whom
/// (receipt), and each decision on it with how it counts.
#[derive(Debug, Clone)]
pub struct Asked {
    pub said: Said,
    pub place: Place,
    pub question: Question,
    /// Each decision naming it, at its place, in received order.
    pub decisions: Vec<(Said, Decision, Standing)>,
}

impl Asked {
    /// The decision that settled it, if one did: the first that counts.
    pub fn settled(&self) -> Option<&(Said, Decision, Standing)> {
        self.decisions.iter().find(|d| d.2 != Standing::Nothing)
    }
}

/// Every question OCX's tag marks here, public, with its decisions, in
/// received order.
pub fn asked(repo: &Repository) -> Result<Vec<Asked>, FossilError> {
    let mut out = Vec::new();
    for (rid, _) in repo.tagged_with(super::MESSAGE_TAG, "question")? {
        if let Some(a) = asked_at(repo, rid)? {
            out.push(a);
        }
    }
    Ok(out)
}

/// The question post or ticket change `rid` holds, with its decisions.
pub fn asked_at(repo: &Repository, rid: i64) -> Result<Option<Asked>, FossilError> {
    let Some(said) = repo.said(rid)? else {
        return Ok(None);
    };
    if said.private || said.edit {
        return Ok(None);
    }
    let Some(Ok(Ask::Question(question))) = read_text(&found::text(repo, &said)?) else {
        return Ok(None);
    };
    let Some(place) = found::place_of(repo, rid)? else {
        return Ok(None);
    };
    let here = match &place {
        Place::Thread { root_rid, .. } => repo.thread(*root_rid)?,
        Place::Ticket { tkt_id, .. } => repo.ticket_changes(*tkt_id)?,
    };
    let mut decisions = Vec::new();
    for s in here {
        if s.private || s.edit || s.rid == rid {
            continue;
        }
        let text = found::text(repo, &s)?;
        if !text.windows(8).any(|w| w == b"decision") {
            continue;
        }
        if let Some(Ok(Ask::Decision(d))) = read_text(&text)
            && d.question == said.hash
        {
            let admin = match s.from.as_deref() {
                Some(login) => repo.capabilities(login)?.is_some_and(|c| c.is_admin()),
                None => false,
            };
            let st = standing(s.from.as_deref(), &question, admin);
            decisions.push((s, d, st));
        }
    }
    Ok(Some(Asked {
        said,
        place,
        question,
        decisions,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(question: &str, options: &[&str]) -> Question {
        Question {
            ocx: 1,
            kind: "question".into(),
            for_login: "stone".into(),
            question: question.into(),
            options: options.iter().map(|s| s.to_string()).collect(),
            stakes: Some("the release date".into()),
            references: vec![],
            run: None,
            also: vec![],
        }
    }

    #[test]
    fn a_question_reads_back_with_its_markdown() {
        let question = q("Merge the `fix` branch?", &["Yes", "No"]);
        let text = question_text(&question, &[]);
        assert!(text.starts_with("**Question for stone:**"), "{text}");
        assert!(text.contains("1. Yes \\(recommended\\)"), "{text}");
        assert!(text.contains("2. No\n"), "{text}");
        assert!(text.contains("What it changes: the release date"));
        assert!(reads_back(&text, &Ask::Question(question)));
    }

    #[test]
    fn unknown_keys_are_passed_over_and_a_missing_for_is_named() {
        let m: Map<String, Value> = serde_json::from_str(
            r#"{"ocx":1,"kind":"question","for":"stone","question":"Go?","later":true}"#,
        )
        .unwrap();
        assert!(matches!(read(&m), Some(Ok(Ask::Question(_)))));
        let m: Map<String, Value> =
            serde_json::from_str(r#"{"ocx":1,"kind":"question","question":"Go?"}"#).unwrap();
        assert!(matches!(read(&m), Some(Err(p)) if p.field == "for"));
        let m: Map<String, Value> = serde_json::from_str(r#"{"ocx":1,"kind":"record"}"#).unwrap();
        assert!(read(&m).is_none());
    }

    #[test]
    fn a_decision_counts_only_from_for_also_or_an_administrator() {
        let mut q = q("Go?", &[]);
        assert_eq!(standing(Some("stone"), &q, false), Standing::Decided);
        assert_eq!(standing(Some("stone"), &q, true), Standing::Decided);
        assert_eq!(standing(Some("admin"), &q, true), Standing::Closed);
        assert_eq!(standing(Some("mallory"), &q, false), Standing::Nothing);
        assert_eq!(standing(None, &q, false), Standing::Nothing);
        q.also = vec!["pat".into()];
        assert_eq!(standing(Some("pat"), &q, false), Standing::Decided);
    }

    proptest! {
        #[test]
        fn any_words_read_back(question in "\\PC{1,80}", o in "\\PC{1,30}", note in "\\PC{0,60}") {
            let question = q(&question, &[&o, "No"]);
            let text = question_text(&question, &[Linked { title: "a ] title (x)".into(), link: "/wiki?name=A B".into() }]);
            prop_assert!(reads_back(&text, &Ask::Question(question)));
            let d = Decision { ocx: 1, kind: "decision".into(), question: "ab".repeat(20), note };
            let text = decision_text(&d, "stone", false);
            prop_assert!(reads_back(&text, &Ask::Decision(d)));
        }
    }
}
