//! `questions`: what waits on a user, as data: the open questions for
//! them, those the caller may close, and how many are open, each with
//! where it was asked, by whom (receipt), its references described as far
//! as the caller may read them, and its decisions. Writes nothing.

use super::asking::{self, Shown};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `questions`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// Whose questions: a login (you, when left out).
    #[serde(default, rename = "for")]
    pub for_login: Option<String>,
}

/// What waits on a user.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The login whose questions these are.
    #[serde(rename = "for")]
    pub for_login: String,
    /// The open questions waiting on them.
    pub waiting: Vec<Shown>,
    /// Open questions for others that you, an administrator, may close.
    pub to_confirm: Vec<Shown>,
    /// How many questions you may read are open.
    pub open: usize,
}

/// The `questions` tool.
pub struct Questions;

impl Tool for Questions {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "questions";
    const SUMMARY: &'static str = "What waits on a user: the questions for them, with what to read first, and their decisions.";
    const NEEDS: Needs = Needs::Any("2r");
    const WRITES: bool = false;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let user = match input.for_login {
            Some(u) => u,
            None => call.caller()?.login.clone(),
        };
        let (waiting, to_confirm, open) = asking::waiting(call, &user)?;
        Ok(Output {
            for_login: user,
            waiting,
            to_confirm,
            open,
        })
    }
}
