//! `save`: commits every change of the checkout on the caller's working
//! branch, with the four-line comment, and pushes it as the caller;
//! refused unless every test the checkout names passed since the last edit.
//! In a no-password run it commits inside the sandbox and publishes through
//! the node's `push` (on its record's branch, when one is restricted).

use crate::answer::Op;
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use crate::tools::context::working_branch;
use crate::tools::workspace::{self, State};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `save`: the check-in's comment, one line each.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// What the check-in does, in one line.
    pub title: String,
    /// Why, in one line.
    pub intent: String,
    /// What changed, and where, in one line.
    pub expression: String,
    /// The test that shows it works, in one line.
    pub demonstrates: String,
}

/// The check-in saved and sent.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The check-in's full hash (null when nothing was changed, or on a dry run).
    pub checkin: Option<String>,
    /// The branch it is on.
    pub branch: String,
    /// Its page on the server, when the checkout has one.
    pub link: Option<String>,
    /// Whether it was pushed (false while held for review).
    pub pushed: bool,
    /// The login the push was made as, which the server's receipt names.
    pub sent_as: Option<String>,
    /// For a run under review: the question its check-in is held under; it is written only once approved, and the run's next line says how it was decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
}

/// The `save` tool.
pub struct Save;

impl Tool for Save {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "save";
    const SUMMARY: &'static str = "Commit every change on your working branch with a four-line comment and push it; needs every test passed since the last edit.";
    const NEEDS: Needs = Needs::Any("i");
    const WRITES: bool = true;
    const CHECKOUT: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let comment = comment(&input)?;
        let root = workspace::root(call)?;
        let login = call.caller()?.login.clone();
        let state = State::load(&root);
        let failing: Vec<String> = workspace::tests(&root)?
            .into_iter()
            .filter(|t| !state.passed_since_edit(&t.name))
            .map(|t| t.name)
            .collect();
        if !failing.is_empty() {
            return Err(Stop::new(format!(
                "not every test passed since the last edit: {}",
                failing.join(", ")
            ))
            .next("run test, fix what fails, then save again"));
        }
        let node = call.cx.node_socket();
        let branch = match call.cx.run_branch() {
            Some(only) => only,
            None => working_branch(&login, &root),
        };
        let fossil = call.fossil()?.clone();
        let changes = fossil.changes(&root)?;
        call.read("the checkout's changes");
        let remote = fossil.remote(&root)?;
        let mut out = Output {
            checkin: None,
            branch: branch.clone(),
            link: None,
            pushed: false,
            sent_as: remote.as_deref().and_then(crate::fossil::remote::login_of),
            held: None,
        };
        if !changes.is_empty() {
            let current = fossil.current_branch(&root)?;
            call.log(Op::Fossil {
                operation: format!(
                    "commit {} changed file{} on {branch} as {login}",
                    changes.len(),
                    if changes.len() == 1 { "" } else { "s" }
                ),
                done: !call.dry_run,
            });
            if !call.dry_run {
                let new_branch = (current != branch).then_some(branch.as_str());
                let hash = fossil.commit(&root, &login, &comment, new_branch)?;
                out.link = remote
                    .as_deref()
                    .and_then(|r| crate::fossil::remote::page_of(r, &["info", &hash]));
                out.checkin = Some(hash);
            }
        }
        if node.is_some() {
            let pushed = super::push::publish(call)?;
            out.held = super::writing::held(call);
            out.pushed = !call.dry_run && out.held.is_none();
            out.sent_as = Some(login.clone());
            if out.checkin.is_none() {
                out.checkin = pushed.last().cloned();
            }
        } else if let Some(r) = &remote {
            call.log(Op::Fossil {
                operation: format!("push to {r}"),
                done: !call.dry_run,
            });
            if !call.dry_run {
                fossil.push(&root).map_err(|e| {
                    Stop::internal(e).next(
                        "the check-in is kept in the checkout's repository; call save again to push it",
                    )
                })?;
                out.pushed = true;
            }
        }
        Ok(out)
    }
}

/// The four-line comment: the title, then `intent:`, `expression:` and
/// `demonstrates:` lines; a part given over several lines is read as one.
pub fn comment(input: &Input) -> Result<String, Stop> {
    let one = |field: &str, text: &str| -> Result<String, Stop> {
        let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if joined.is_empty() {
            return Err(Stop::field(field, "is empty").next(format!("say {field} in one line")));
        }
        if field == "title" {
            super::not_an_option(field, &joined)?;
        }
        Ok(joined)
    };
    Ok(format!(
        "{}\nintent: {}\nexpression: {}\ndemonstrates: {}",
        one("title", &input.title)?,
        one("intent", &input.intent)?,
        one("expression", &input.expression)?,
        one("demonstrates", &input.demonstrates)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comment_has_four_lines() {
        let c = comment(&Input {
            title: "Fix it".into(),
            intent: "because\nit broke".into(),
            expression: "src/a.rs".into(),
            demonstrates: "unit".into(),
        })
        .unwrap();
        assert_eq!(c.lines().count(), 4);
        assert!(c.contains("intent: because it broke"));
    }
}
