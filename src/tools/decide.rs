//! `decide`: the caller's decision on a question waiting on them (or one
//! an administrator closes): one of its options by number, or a note,
//! written as `post` writes a decision, in the question's place.

use super::asking;
use super::post::{self, Post};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `decide`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The question, by hash or a prefix of 10+ hex digits.
    pub question: String,
    /// The option chosen, by its number (1 is the recommended one).
    #[serde(default)]
    pub option: Option<u32>,
    /// Words of your own: the decision, or what goes with the option.
    #[serde(default)]
    pub note: Option<String>,
}

/// What `decide` wrote.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The question decided, by full hash.
    pub question: String,
    /// The decision as written.
    pub note: String,
    /// decided (you are its login) or closed (you closed it as an administrator).
    pub counts: String,
    /// The decision's post or ticket change (null on a dry run).
    pub hash: Option<String>,
}

/// The `decide` tool.
pub struct Decide;

/// The note a decision carries: the option's words, then the caller's.
pub fn note_of(
    options: &[String],
    option: Option<u32>,
    note: Option<&str>,
) -> Result<String, Stop> {
    let chosen = match option {
        None => None,
        Some(n) if n >= 1 && (n as usize) <= options.len() => Some(options[n as usize - 1].clone()),
        Some(n) => {
            return Err(Stop::field(
                "option",
                format!("{n} is not one of the question's {} options", options.len()),
            )
            .next("give the number of an option, or a note"));
        }
    };
    let note = note.map(str::trim).filter(|n| !n.is_empty());
    match (chosen, note) {
        (Some(o), Some(n)) => Ok(format!("{o}: {n}")),
        (Some(o), None) => Ok(o),
        (None, Some(n)) => Ok(n.to_string()),
        (None, None) => Err(
            Stop::field("option", "a decision needs an option or a note")
                .next("give option, the number of your choice, or note"),
        ),
    }
}

impl Tool for Decide {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "decide";
    const SUMMARY: &'static str = "Decide a question waiting on you (or close one, as an administrator): an option by number, or a note.";
    const NEEDS: Needs = Needs::Any("34cw");
    const WRITES: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let asked = asking::the_question(call, "question", &input.question)?;
        let caller = call.caller()?.clone();
        let counts = match asking::standing_of(&asked, &caller) {
            crate::protocol::ask::Standing::Decided => "decided",
            crate::protocol::ask::Standing::Closed => "closed",
            crate::protocol::ask::Standing::Nothing => {
                return Err(asking::not_theirs("question", "it", &asked, &caller));
            }
        };
        let note = note_of(&asked.question.options, input.option, input.note.as_deref())?;
        let out = Post::run(
            post::Input {
                to: Some(asked.said.hash.clone()),
                title: None,
                text: note.clone(),
                for_login: None,
                options: Vec::new(),
                stakes: None,
                references: Vec::new(),
                decision: true,
            },
            call,
        )
        .map_err(|s| {
            if s.field.as_deref() == Some("to") {
                Stop {
                    field: Some("question".into()),
                    ..s
                }
            } else {
                s
            }
        })?;
        Ok(Output {
            question: asked.said.hash,
            note,
            counts: counts.into(),
            hash: out.hash,
        })
    }
}

/// The question `question` names, when it waits on the caller of `cx` (or
/// the caller may close it): its words (a held write's with what would be
/// written) and its options. What an entry point asks before it asks the
/// person to choose.
pub fn waiting_on(
    cx: &crate::context::Context,
    question: &str,
) -> Result<(String, Vec<String>), Stop> {
    let mut call = Call {
        cx,
        dry_run: true,
        log: Vec::new(),
        tools: &[],
    };
    let asked = asking::the_question(&mut call, "question", question)?;
    let caller = call.caller()?.clone();
    if asking::standing_of(&asked, &caller) == crate::protocol::ask::Standing::Nothing
        || asked.settled().is_some()
    {
        return Err(Stop::field("question", "it does not wait on you"));
    }
    let words = match asking::held_shown(call.repo()?, &asked)? {
        Some(held) => format!(
            "{}\n\nWhat would be written, exactly:\n{held}",
            asked.question.question
        ),
        None => asked.question.question,
    };
    Ok((words, asked.question.options))
}
