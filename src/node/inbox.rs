//! The run's input, one line each, as every runner's author reads it: a
//! [`Delivery`] written by the node and the watcher ([`Delivery::line`])
//! and read back by OCX's own runners ([`Delivery::read`]). The first
//! line is `Record HASH: OBJECTIVE`, then each delivery: `Post HASH from
//! LOGIN: TEXT`, `Change HASH to TICKET from LOGIN: TEXT`, `Check-in
//! HASH on BRANCH by LOGIN` or, at a slot of the record's schedule, the
//! JSON object `{"schedule": TIME}`; a run under review is told how each
//! held write was decided, `{"approved": QUESTION, ...}` or
//! `{"declined": QUESTION, ...}`. A line's newlines are written `\n`,
//! its carriage returns `\r` and its backslashes `\\` ([`escape`]).

use super::NodeError;

/// The line a delivery's text is written as.
pub fn escape(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
}

/// An inbox line back to its text, for a runner that takes JSON; a lone
/// or unknown escape stands for itself.
pub fn unescape(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut it = line.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(o) => out.push(o),
            None => out.push('\\'),
        }
    }
    out
}

/// One line of the run's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The first line: the record the run answers and its objective.
    Record { record: String, objective: String },
    /// A post in the run's thread, by a login its record hears.
    Post {
        post: String,
        from: String,
        text: String,
    },
    /// A change of the run's ticket, by a login its record hears.
    Change {
        change: String,
        ticket: String,
        from: String,
        text: String,
    },
    /// A check-in on a branch the record names.
    CheckIn {
        checkin: String,
        branch: String,
        by: String,
    },
    /// A slot of the record's schedule (its `wake`): its time (RFC 3339,
    /// UTC), and, when it came late, how many slots it stands for
    /// (`missed`: the node was down over their time, and gives the latest
    /// once).
    Schedule { at: String, missed: Option<u64> },
    /// A held write of the run decided (`restrict.review`): the question
    /// it waited on, whether it was approved, who decided (by receipt) and
    /// their note, what the node wrote (nothing when declined), and why it
    /// wrote nothing of an approved push its checks, made again, refused.
    Decided {
        question: String,
        approved: bool,
        by: String,
        note: String,
        written: Vec<String>,
        refused: Option<String>,
    },
}

impl Delivery {
    /// The line as the run reads it, before [`escape`].
    pub fn line(&self) -> String {
        match self {
            Delivery::Record { record, objective } => format!("Record {record}: {objective}"),
            Delivery::Post { post, from, text } => format!("Post {post} from {from}: {text}"),
            Delivery::Change {
                change,
                ticket,
                from,
                text,
            } => format!("Change {change} to {ticket} from {from}: {text}"),
            Delivery::CheckIn {
                checkin,
                branch,
                by,
            } => format!("Check-in {checkin} on {branch} by {by}"),
            Delivery::Schedule { at, missed } => {
                let mut line = serde_json::json!({ "schedule": at });
                if let Some(n) = missed {
                    line["missed"] = (*n).into();
                }
                line.to_string()
            }
            Delivery::Decided {
                question,
                approved,
                by,
                note,
                written,
                refused,
            } => {
                let key = if *approved { "approved" } else { "declined" };
                let mut line = serde_json::json!({ key: question, "by": by, "note": note });
                if *approved {
                    line["written"] = written.clone().into();
                }
                if let Some(why) = refused {
                    line["refused"] = why.clone().into();
                }
                line.to_string()
            }
        }
    }

    /// Reads a line as the run got it (escaped), its text unescaped; a
    /// line of none of the five forms is refused, saying which it is not.
    pub fn read(line: &str) -> Result<Delivery, NodeError> {
        let hash = |h: &str| {
            (matches!(h.len(), 40 | 64) && h.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| h.to_ascii_lowercase())
        };
        let said = |rest: &str| -> Option<(String, String)> {
            let (from, text) = match rest.split_once(": ") {
                Some(said) => said,
                None => (rest.strip_suffix(':')?, ""),
            };
            (!from.is_empty() && !from.contains(' ')).then(|| (from.to_string(), unescape(text)))
        };
        if let Some(rest) = line.strip_prefix("Record ") {
            let (h, objective) = rest
                .split_once(": ")
                .ok_or(NodeError::Line("a `Record` line has no objective"))?;
            let record = hash(h).ok_or(NodeError::Line("a `Record` line names no record"))?;
            return Ok(Delivery::Record {
                record,
                objective: unescape(objective),
            });
        }
        if let Some(rest) = line.strip_prefix("Post ") {
            let (h, rest) = rest
                .split_once(" from ")
                .ok_or(NodeError::Line("a `Post` line names no sender"))?;
            let post = hash(h).ok_or(NodeError::Line("a `Post` line names no post"))?;
            let (from, text) =
                said(rest).ok_or(NodeError::Line("a `Post` line names no sender"))?;
            return Ok(Delivery::Post { post, from, text });
        }
        if let Some(rest) = line.strip_prefix("Change ") {
            let (h, rest) = rest
                .split_once(" to ")
                .ok_or(NodeError::Line("a `Change` line names no ticket"))?;
            let change =
                hash(h).ok_or(NodeError::Line("a `Change` line names no ticket change"))?;
            let (t, rest) = rest
                .split_once(" from ")
                .ok_or(NodeError::Line("a `Change` line names no sender"))?;
            let ticket = hash(t).ok_or(NodeError::Line("a `Change` line names no ticket"))?;
            let (from, text) =
                said(rest).ok_or(NodeError::Line("a `Change` line names no sender"))?;
            return Ok(Delivery::Change {
                change,
                ticket,
                from,
                text,
            });
        }
        if let Some(rest) = line.strip_prefix("Check-in ") {
            let (h, rest) = rest
                .split_once(" on ")
                .ok_or(NodeError::Line("a `Check-in` line names no branch"))?;
            let checkin = hash(h).ok_or(NodeError::Line("a `Check-in` line names no check-in"))?;
            let (branch, by) = rest
                .rsplit_once(" by ")
                .ok_or(NodeError::Line("a `Check-in` line names no author"))?;
            return Ok(Delivery::CheckIn {
                checkin,
                branch: unescape(branch),
                by: by.to_string(),
            });
        }
        if line.starts_with('{') {
            return json_line(&unescape(line));
        }
        Err(NodeError::Line(
            "the line is no delivery (`Record`, `Post`, `Change`, `Check-in` or a schedule's)",
        ))
    }
}

/// A JSON line: a schedule's or a held write's decision.
fn json_line(line: &str) -> Result<Delivery, NodeError> {
    let keys: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(line).map_err(|_| NodeError::Line("a JSON line is not an object"))?;
    if keys.contains_key("schedule") {
        return schedule(line);
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Decided {
        #[serde(default)]
        approved: Option<String>,
        #[serde(default)]
        declined: Option<String>,
        by: String,
        #[serde(default)]
        note: String,
        #[serde(default)]
        written: Vec<String>,
        #[serde(default)]
        refused: Option<String>,
    }
    let d: Decided = serde_json::from_str(line).map_err(|_| {
        NodeError::Line("a JSON line is neither a schedule's nor a held write's decision")
    })?;
    let (question, approved) = match (d.approved, d.declined) {
        (Some(q), None) => (q, true),
        (None, Some(q)) => (q, false),
        _ => {
            return Err(NodeError::Line(
                "a decision's line names its question as approved or declined, once",
            ));
        }
    };
    Ok(Delivery::Decided {
        question,
        approved,
        by: d.by,
        note: d.note,
        written: d.written,
        refused: d.refused,
    })
}

/// A schedule's line, `{"schedule": TIME}` with perhaps `"missed": N`;
/// any other JSON refused.
fn schedule(line: &str) -> Result<Delivery, NodeError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Slot {
        schedule: String,
        #[serde(default)]
        missed: Option<u64>,
    }
    let slot: Slot = serde_json::from_str(line)
        .map_err(|_| NodeError::Line("a JSON line is not a schedule's `{\"schedule\": TIME}`"))?;
    Ok(Delivery::Schedule {
        at: slot.schedule,
        missed: slot.missed,
    })
}

/// One line of the run's input, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The line's text, as the model is given it (unescaped).
    pub text: String,
    /// Where the model's last words go: the delivered post or ticket
    /// change, else the record (the run's place).
    pub reply_to: String,
}

/// Reads a run's line: the first must be `Record HASH: OBJECTIVE`, every
/// later one `Post HASH from …`, `Change HASH to …`, `Check-in HASH on …`
/// or a schedule's `{"schedule": TIME}` (answered in the record's place).
pub fn read(line: &str, record: Option<&str>) -> Result<Line, NodeError> {
    let text = unescape(line);
    let reply_to = match (record, Delivery::read(line)) {
        (None, Ok(Delivery::Record { record, .. })) => record,
        (None, _) => {
            return Err(NodeError::Line(
                "the first line is not `Record HASH: OBJECTIVE`",
            ));
        }
        (Some(_), Err(e)) => return Err(e),
        (Some(_), Ok(Delivery::Record { .. })) => {
            return Err(NodeError::Line(
                "the line is no delivery (`Post`, `Change` or `Check-in`)",
            ));
        }
        (Some(_), Ok(Delivery::Post { post, .. })) => post,
        (Some(_), Ok(Delivery::Change { change, .. })) => change,
        (
            Some(record),
            Ok(Delivery::CheckIn { .. } | Delivery::Schedule { .. } | Delivery::Decided { .. }),
        ) => record.to_string(),
    };
    Ok(Line { text, reply_to })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const H: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn each_line_reads_back_as_it_was_written() {
        let all = [
            Delivery::Record {
                record: H.into(),
                objective: "Fix it: now\nplease".into(),
            },
            Delivery::Post {
                post: H.into(),
                from: "stone".into(),
                text: "a: b \\ c\r\nd".into(),
            },
            Delivery::Change {
                change: H.into(),
                ticket: H.into(),
                from: "pat".into(),
                text: String::new(),
            },
            Delivery::CheckIn {
                checkin: H.into(),
                branch: "release by friday".into(),
                by: "pat".into(),
            },
            Delivery::Schedule {
                at: "2026-12-05T00:00:00Z".into(),
                missed: None,
            },
            Delivery::Schedule {
                at: "2026-12-05T00:00:00Z".into(),
                missed: Some(3),
            },
            Delivery::Decided {
                question: H.into(),
                approved: true,
                by: "stone".into(),
                note: "Approve: \"fine\" \\ here".into(),
                written: vec![H.into()],
                refused: None,
            },
            Delivery::Decided {
                question: H.into(),
                approved: true,
                by: "stone".into(),
                note: "Approve".into(),
                written: vec![],
                refused: Some("abc is on trunk".into()),
            },
            Delivery::Decided {
                question: H.into(),
                approved: false,
                by: "stone".into(),
                note: "Decline".into(),
                written: vec![],
                refused: None,
            },
        ];
        for d in all {
            assert_eq!(
                Delivery::read(&escape(&d.line())).ok(),
                Some(d.clone()),
                "{}",
                d.line()
            );
        }
    }

    #[test]
    fn a_line_of_no_form_is_refused_saying_which_it_is_not() {
        for line in [
            "",
            "Hello",
            "Post xyz from a: b",
            &format!("Post {H} from : b"),
            &format!("Check-in {H} on trunk"),
            &format!("Record {H}"),
            "{\"schedule\": 5}",
            "{\"schedules\": \"2026-12-05T00:00:00Z\"}",
            "{\"approved\": \"a\", \"declined\": \"b\", \"by\": \"c\"}",
            "{\"declined\": \"b\"}",
            "{",
        ] {
            assert!(Delivery::read(line).is_err(), "{line:?}");
        }
        assert!(read(&format!("Post {H} from a: b"), None).is_err());
        assert!(read(&format!("Record {H}: x"), Some(H)).is_err());
    }

    proptest! {
        #[test]
        fn any_post_reads_back_and_any_line_reads_without_panic(
            text in ".{0,200}", login in "[a-z][a-z0-9-]{0,20}", junk in "\\PC{0,300}"
        ) {
            let d = Delivery::Post { post: H.into(), from: login, text };
            prop_assert_eq!(Delivery::read(&escape(&d.line())).ok(), Some(d));
            let _ = Delivery::read(&junk);
            let _ = read(&junk, Some(H));
        }
    }
}
