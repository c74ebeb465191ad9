//! Elicitation: a `decide` call that names no choice, for a question
//! waiting on its caller, asks the client to put the question's options
//! to its person as a form.

use super::Server;
use crate::stop::Stop;
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde_json::{Map, Value};

/// Whether the client declared it can elicit a form from its person.
pub(super) fn client_elicits(context: &RequestContext<RoleServer>) -> bool {
    context
        .peer
        .peer_info()
        .is_some_and(|info| info.capabilities.elicitation.is_some())
}

impl Server {
    /// A `decide` call naming neither an option nor a note, for a question
    /// waiting on the caller: asks the client to elicit the choice (the
    /// options as a titled single choice, the recommended one its default,
    /// and a note); accepted, the input with the choice; declined or
    /// cancelled, a refusal saying nothing was written. Any other call, or
    /// a question not waiting on the caller, is left as it was given.
    pub(super) async fn elicit_decision(
        &self,
        input: Result<Value, Stop>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, Stop> {
        let given = input?;
        let Some(question) = given
            .get("question")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            return Ok(given);
        };
        let chosen = ["option", "note", "dry_run"]
            .iter()
            .any(|k| given.get(*k).is_some_and(|v| !v.is_null()));
        if chosen {
            return Ok(given);
        }
        let (caller, kept) = (self.caller.clone(), self.kept.clone());
        let q = question.clone();
        let pending = tokio::task::spawn_blocking(move || {
            let cx = caller.context().keeping(kept);
            crate::tools::decide::waiting_on(&cx, &q)
        })
        .await;
        let Ok(Ok((words, options))) = pending else {
            return Ok(given);
        };
        let mut properties = Map::new();
        let mut required = Vec::new();
        if !options.is_empty() {
            let choices: Vec<Value> = options
                .iter()
                .enumerate()
                .map(|(i, o)| {
                    serde_json::json!({"const": (i + 1).to_string(),
                        "title": crate::protocol::ask::option_label(i, o)})
                })
                .collect();
            properties.insert(
                "option".into(),
                serde_json::json!({"type": "string", "title": "Your choice", "oneOf": choices, "default": "1"}),
            );
            required.push(Value::from("option"));
        }
        properties.insert(
            "note".into(),
            serde_json::json!({"type": "string", "title": "A note",
                "description": "Words of your own to go with the decision"}),
        );
        if options.is_empty() {
            required.push(Value::from("note"));
        }
        let schema =
            serde_json::json!({"type": "object", "properties": properties, "required": required});
        let Ok(requested_schema) = serde_json::from_value(schema) else {
            return Ok(given);
        };
        let asked = context
            .peer
            .create_elicitation(rmcp::model::ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: format!("Decide: {words}"),
                requested_schema,
            })
            .await
            .map_err(|e| Stop::new(format!("the client did not elicit a choice: {e}")))?;
        match asked.action {
            rmcp::model::ElicitationAction::Accept => {
                let content = asked.content.unwrap_or(Value::Null);
                let mut input = given;
                if let Some(o) = content.get("option").and_then(Value::as_str) {
                    let n: u32 = o.parse().map_err(|_| {
                        Stop::field("option", format!("{o:?} is not one of the options"))
                            .next("choose one of the options")
                    })?;
                    input["option"] = Value::from(n);
                }
                if let Some(n) = content
                    .get("note")
                    .and_then(Value::as_str)
                    .filter(|n| !n.trim().is_empty())
                {
                    input["note"] = Value::from(n);
                }
                Ok(input)
            }
            _ => Err(Stop::field(
                "question",
                "you declined to decide it, so nothing was written",
            )
            .next("call ocx_decide again with option or note when you decide")),
        }
    }
}
