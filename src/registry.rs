//! The registry: every tool, each defined once by its typed Input and
//! Output, what it needs and its `run` (the [`Tool`] trait, below the
//! tools). `call` is the one road from any entry point to a tool: input
//! checked (unknown field, wrong type, NUL, not UTF-8: refused naming the
//! field), capabilities checked, the tool run or dry-run, and the one
//! [`Answer`] made.

use crate::answer::{Answer, Stopped};
use crate::context::Context;
use crate::input::check_text;
use crate::stop::{Stop, field_at_fault};
use crate::tool::{Call, Entry, Needs, Tool};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// A [`Tool`] made into an [`Entry`].
pub struct Def<T>(PhantomData<fn() -> T>);

impl<T> Def<T> {
    /// The entry for tool `T`.
    pub const fn new() -> Def<T> {
        Def(PhantomData)
    }
}

impl<T> Default for Def<T> {
    fn default() -> Self {
        Def::new()
    }
}

impl<T: Tool> Entry for Def<T> {
    fn name(&self) -> &'static str {
        T::NAME
    }
    fn summary(&self) -> &'static str {
        T::SUMMARY
    }
    fn needs(&self) -> Needs {
        T::NEEDS
    }
    fn writes(&self) -> bool {
        T::WRITES
    }
    fn destructive(&self) -> bool {
        T::DESTRUCTIVE
    }
    fn idempotent(&self) -> bool {
        T::IDEMPOTENT
    }
    fn checkout(&self) -> bool {
        T::CHECKOUT
    }
    fn reach(&self) -> crate::tool::Reach {
        T::REACH
    }
    fn input_schema(&self) -> &'static Value {
        derived_once(T::NAME, Schema::Input, input_schema::<T>)
    }
    fn output_schema(&self) -> &'static Value {
        derived_once(T::NAME, Schema::Output, || {
            serde_json::to_value(schemars::schema_for!(T::Output)).unwrap_or(Value::Null)
        })
    }
    fn check(&self, input: &Value) -> Result<(), Stop> {
        serde_path_to_error::deserialize::<_, T::Input>(input)
            .map(|_| ())
            .map_err(|e| refusal(T::NAME, e))
    }
    fn invoke(
        &self,
        input: Value,
        call: &mut Call,
        shown: Shown,
    ) -> Result<(Option<Value>, Option<String>), Stop> {
        let typed: T::Input =
            serde_path_to_error::deserialize(input).map_err(|e| refusal(T::NAME, e))?;
        let out = T::run(typed, call)?;
        let text = shown.text().then(|| T::text(&out));
        let value = shown
            .json()
            .then(|| serde_json::to_value(&out))
            .transpose()
            .map_err(|e| Stop::failed(format!("internal error: {e}")))?;
        Ok((value, text))
    }
}

/// Which of a tool's schemas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Schema {
    Input,
    Output,
}

/// A tool's schema, derived by `derive` the first time it is asked for and
/// kept for the life of the process: a schema never changes while the
/// program runs, and deriving one walks its types anew.
fn derived_once(
    name: &'static str,
    which: Schema,
    derive: impl FnOnce() -> Value,
) -> &'static Value {
    static DERIVED: Mutex<BTreeMap<(&'static str, Schema), &'static Value>> =
        Mutex::new(BTreeMap::new());
    let mut derived = DERIVED.lock().unwrap_or_else(PoisonError::into_inner);
    derived
        .entry((name, which))
        .or_insert_with(|| Box::leak(Box::new(derive())))
}

/// Tool `T`'s input schema, `dry_run` added.
fn input_schema<T: Tool>() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(T::Input)).unwrap_or(Value::Null);
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        props.insert(
            "dry_run".into(),
            serde_json::json!({"type": "boolean", "default": false,
                "description": "Check everything and say what would be written, writing nothing."}),
        );
    } else if let Some(obj) = schema.as_object_mut() {
        obj.insert(
            "properties".into(),
            serde_json::json!({"dry_run": {"type": "boolean", "default": false,
            "description": "Check everything and say what would be written, writing nothing."}}),
        );
    }
    schema
}

/// Turns serde's complaint about `tool`'s input into a refusal naming the
/// field and the tool, in words for a person (never serde's own).
fn refusal(tool: &str, e: serde_path_to_error::Error<serde_json::Error>) -> Stop {
    let (field, message) = field_at_fault(&e);
    let (reason, next) = if message.starts_with("unknown field") {
        (
            format!("{tool} takes no such field"),
            format!("leave it out; `ocx help {tool}` lists what {tool} takes"),
        )
    } else if message.starts_with("missing field") {
        (
            format!("{tool} needs it, and it was not given"),
            format!("give it; `ocx help {tool}` lists what {tool} takes"),
        )
    } else {
        (message, format!("give it as `ocx help {tool}` says"))
    };
    Stop::field(field, reason).next(next)
}

/// Every tool, in the order `ocx list` shows them.
pub static TOOLS: &[&dyn Entry] = &[
    &Def::<crate::tools::list::List>::new(),
    &Def::<crate::tools::help::Help>::new(),
    &Def::<crate::tools::status::Status>::new(),
    &Def::<crate::tools::post::Post>::new(),
    &Def::<crate::tools::thread::Thread>::new(),
    &Def::<crate::tools::questions::Questions>::new(),
    &Def::<crate::tools::decide::Decide>::new(),
    &Def::<crate::tools::console::Console>::new(),
    &Def::<crate::tools::receipt::ReceiptTool>::new(),
    &Def::<crate::tools::create::Create>::new(),
    &Def::<crate::tools::stop::StopTool>::new(),
    &Def::<crate::tools::run::RunTool>::new(),
    &Def::<crate::tools::attach::Attach>::new(),
    &Def::<crate::tools::patterns::Patterns>::new(),
    &Def::<crate::tools::tag_messages::TagMessages>::new(),
    &Def::<crate::tools::audit::Audit>::new(),
    &Def::<crate::tools::verdicts::Verdicts>::new(),
    &Def::<crate::tools::unaudited::Unaudited>::new(),
    &Def::<crate::tools::hook::Hook>::new(),
    &Def::<crate::tools::export::ExportTool>::new(),
    &Def::<crate::tools::project::Project>::new(),
    &Def::<crate::tools::upstream::UpstreamTool>::new(),
    &Def::<crate::tools::stage::Stage>::new(),
    &Def::<crate::tools::accept::Accept>::new(),
    &Def::<crate::tools::rollback::Rollback>::new(),
    &Def::<crate::tools::release::Release>::new(),
    &Def::<crate::tools::node::NodeTool>::new(),
    &Def::<crate::tools::lost::Lost>::new(),
    &Def::<crate::tools::adopt::Adopt>::new(),
    &Def::<crate::tools::runner::Runner>::new(),
    &Def::<crate::tools::credential::Credential>::new(),
    &Def::<crate::tools::send_runs::SendRuns>::new(),
    &Def::<crate::tools::register::Register>::new(),
    &Def::<crate::tools::machine::MachineTool>::new(),
    &Def::<crate::tools::approve::Approve>::new(),
    &Def::<crate::tools::collect::Collect>::new(),
    &Def::<crate::tools::run_login::RunLogin>::new(),
    &Def::<crate::tools::run_report::RunReport>::new(),
    &Def::<crate::tools::push::Push>::new(),
    &Def::<crate::tools::context::Context>::new(),
    &Def::<crate::tools::find::Find>::new(),
    &Def::<crate::tools::read::Read>::new(),
    &Def::<crate::tools::edit::Edit>::new(),
    &Def::<crate::tools::test::Test>::new(),
    &Def::<crate::tools::save::Save>::new(),
    &Def::<crate::tools::wiki_read::WikiRead>::new(),
    &Def::<crate::tools::wiki_edit::WikiEdit>::new(),
    &Def::<crate::tools::unversioned_list::UnversionedList>::new(),
    &Def::<crate::tools::unversioned_get::UnversionedGet>::new(),
    &Def::<crate::tools::unversioned_put::UnversionedPut>::new(),
];

pub use crate::tool::{FIRST_TOOLS, GROUPS, Group, Shown};

/// The tool called `name`.
pub fn find(name: &str) -> Option<&'static dyn Entry> {
    TOOLS.iter().copied().find(|t| t.name() == name)
}

/// Calls tool `name` with `input` as the caller `cx` names; `dry_run` from
/// the entry point (`--dry-run`), or `"dry_run": true` in the input.
pub fn call(name: &str, input: Result<Value, Stop>, cx: &Context, dry_run: bool) -> Answer {
    call_shown(name, input, cx, dry_run, Shown::Json).0
}

/// Like [`call`], its result made as JSON, as text, or both, as `shown`
/// asks (a tool's text is made for a person, its JSON for a program, and
/// only an entry showing one pays for it: with [`Shown::Text`] the
/// answer's `result` is left out, never made into JSON). A run on an agent machine's call is
/// checked here as a dry run, then made on the served repository as the
/// run's login ([`crate::tools::on_server`]).
pub fn call_shown(
    name: &str,
    input: Result<Value, Stop>,
    cx: &Context,
    dry_run: bool,
    shown: Shown,
) -> (Answer, Option<String>) {
    if let Some(run) = cx.run()
        && let Some(served) = run.server.as_ref()
        && let Ok(given) = &input
    {
        let given = given.clone();
        let (checked, text) = answer_here(name, input, (cx, true), shown);
        let dry = dry_run || given.get("dry_run") == Some(&Value::Bool(true));
        if !checked.ok || dry {
            return (checked, text);
        }
        let mut forwarded = given;
        if let Some(o) = forwarded.as_object_mut() {
            o.remove("dry_run");
        }
        let writes = find(name).is_some_and(|t| t.writes());
        if writes && run.restrict.review == Some(true) {
            return crate::tools::on_server::hold(
                name,
                forwarded,
                (cx, run),
                checked,
                shown.text(),
            );
        }
        return crate::tools::on_server::answer(
            name,
            writes,
            forwarded,
            (run, served),
            checked,
            shown.text(),
        );
    }
    answer_here(name, input, (cx, dry_run), shown)
}

/// [`call_shown`] where the call is made: on its repository, as its caller
/// (`cx`), a dry run when `dry_run` says.
fn answer_here(
    name: &str,
    input: Result<Value, Stop>,
    (cx, dry_run): (&Context, bool),
    shown: Shown,
) -> (Answer, Option<String>) {
    let started = Instant::now();
    let mut call = Call {
        cx,
        dry_run,
        log: Vec::new(),
        tools: TOOLS,
    };
    let outcome = run(name, input, &mut call, shown);
    let (outcome, text) = match outcome {
        Ok((value, text)) => (Ok(value), text),
        Err(stop) => (Err(stop), None),
    };
    (answered(name, call, outcome, started), text)
}

/// [`call`] for an entry that draws tool `T`'s answer itself (a run's
/// page): the same checks and the same answer, its result the tool's own
/// output, never made into JSON on the way. Made where it is asked, as
/// its caller: a run's call to its server never comes this way.
pub fn call_typed<T: Tool>(input: Result<Value, Stop>, cx: &Context) -> Answer<T::Output> {
    let started = Instant::now();
    let mut call = Call {
        cx,
        dry_run: false,
        log: Vec::new(),
        tools: TOOLS,
    };
    let outcome = checked(T::NAME, input, &mut call).and_then(|(_, input)| {
        let typed: T::Input =
            serde_path_to_error::deserialize(input).map_err(|e| refusal(T::NAME, e))?;
        T::run(typed, &mut call).map(Some)
    });
    answered(T::NAME, call, outcome, started)
}

/// The one answer of the call of tool `name` begun at `started`.
fn answered<R>(
    name: &str,
    call: Call,
    outcome: Result<Option<R>, Stop>,
    started: Instant,
) -> Answer<R> {
    let took_ms = started.elapsed().as_millis() as u64;
    let (result, stopped) = match outcome {
        Ok(value) => (value, None),
        Err(stop) => (None, Some(stop)),
    };
    Answer {
        ok: stopped.is_none(),
        tool: name.to_string(),
        dry_run: call.dry_run,
        log: call.log,
        result,
        next_step: stopped.as_ref().and_then(|s| s.next_step.clone()),
        stopped: stopped.map(|s| Stopped {
            kind: s.kind,
            field: s.field,
            reason: s.reason,
        }),
        took_ms,
    }
}

fn run(
    name: &str,
    input: Result<Value, Stop>,
    call: &mut Call,
    shown: Shown,
) -> Result<(Option<Value>, Option<String>), Stop> {
    let (tool, input) = checked(name, input, call)?;
    tool.invoke(input, call, shown)
}

/// Tool `name` and its input once every check before its run has passed:
/// the tool known, the input one object of clean text, `dry_run` taken
/// out of it, its fields read, and what the tool needs held by the caller.
fn checked(
    name: &str,
    input: Result<Value, Stop>,
    call: &mut Call,
) -> Result<(&'static dyn Entry, Value), Stop> {
    let tool = find(name).ok_or_else(|| {
        Stop::field("tool", format!("there is no tool {name:?}"))
            .next("`ocx list` names every tool")
    })?;
    let mut input = input?;
    check_text(&input, "")?;
    let obj: &mut Map<String, Value> = input.as_object_mut().ok_or_else(|| {
        Stop::field("input", "not a JSON object").next("give the input as one JSON object")
    })?;
    match obj.remove("dry_run") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(b)) => call.dry_run |= b,
        Some(_) => {
            return Err(Stop::field("dry_run", "invalid type: expected a boolean")
                .next("give dry_run as true or false"));
        }
    }
    tool.check(&input)?;
    if let Some(letters) = tool.needs().letters()
        && !tool.needs().allows_run(call.cx)
    {
        let caller = call.caller()?;
        if !caller.capabilities.has_any(letters) {
            return Err(Stop::new(format!(
                "{} needs capability {}; {} holds {}",
                tool.name(),
                tool.needs().describe(),
                caller.login,
                if caller.capabilities.as_str().is_empty() {
                    "none"
                } else {
                    caller.capabilities.as_str()
                }
            ))
            .next("ask an administrator for the capability, or act as a login that holds it"));
        }
    }
    Ok((tool, input))
}

#[cfg(test)]
mod tests {

    #[test]
    fn every_tool_stands_in_one_group_and_the_first_tools_are_tools() {
        let grouped: Vec<&str> = GROUPS
            .iter()
            .flat_map(|g| g.tools.iter().copied())
            .collect();
        for t in TOOLS {
            let n = grouped.iter().filter(|g| **g == t.name()).count();
            assert_eq!(n, 1, "{} stands in {n} groups", t.name());
        }
        assert_eq!(grouped.len(), TOOLS.len(), "a group names no tool");
        assert_eq!(FIRST_TOOLS.len(), 10);
        assert!(FIRST_TOOLS.iter().all(|n| find(n).is_some()));
    }

    use super::*;

    #[test]
    fn tool_names_are_mcp_safe_and_unique() {
        let mut seen = std::collections::HashSet::new();
        for t in TOOLS {
            assert!(
                t.name()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{}",
                t.name()
            );
            assert!(seen.insert(t.name()), "{} twice", t.name());
        }
    }

    /// `list`'s kept text is what every tool's schema makes now; when it is
    /// not, the file is written anew from the schemas, for its author to
    /// read and commit. Each tool's block is found in it by name.
    #[test]
    fn lists_kept_text_is_what_the_schemas_make() {
        use crate::tools::list::{KEPT, block, kept_blocks};
        let made: String = TOOLS.iter().map(|t| block(*t)).collect();
        if made != KEPT {
            let file = concat!(env!("CARGO_MANIFEST_DIR"), "/src/tools/list.txt");
            std::fs::write(file, &made).unwrap();
            panic!(
                "src/tools/list.txt is not what the tools' schemas make; it is written anew \
                 from them: read `git diff src/tools/list.txt`, commit it, and run the tests again"
            );
        }
        let kept = kept_blocks();
        for t in TOOLS {
            let found = kept.iter().find(|(name, _)| *name == t.name());
            assert_eq!(
                found.map(|(_, b)| *b),
                Some(block(*t).as_str()),
                "{}",
                t.name()
            );
        }
    }
}
