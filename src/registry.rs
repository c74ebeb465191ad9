//! The registry: every tool, each defined once by its typed Input and
//! Output, what it needs and its `run`. `call` is the one road from any
//! entry point to a tool: input checked (unknown field, wrong type, NUL,
//! not UTF-8: refused naming the field), capabilities checked, the tool run
//! or dry-run, and the one [`Answer`] made.

use crate::answer::{Answer, Op, Stopped, value_text};
use crate::context::{Caller, Context};
use crate::fossil::repo::Lookup;
use crate::fossil::{Fossil, FossilError, Repository};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// Why a tool stopped: the field at fault, the reason, what to do instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    pub field: Option<String>,
    pub reason: String,
    pub next_step: Option<String>,
}

impl Stop {
    /// A refusal naming `field`.
    pub fn field(field: impl Into<String>, reason: impl Into<String>) -> Stop {
        Stop {
            field: Some(field.into()),
            reason: reason.into(),
            next_step: None,
        }
    }

    /// A refusal no one field is at fault for.
    pub fn new(reason: impl Into<String>) -> Stop {
        Stop {
            field: None,
            reason: reason.into(),
            next_step: None,
        }
    }

    /// The same refusal, saying what to do instead.
    pub fn next(mut self, next_step: impl Into<String>) -> Stop {
        self.next_step = Some(next_step.into());
        self
    }

    /// An operation that failed, kept to its first line so no backtrace
    /// or dump reaches the caller.
    pub fn internal(e: FossilError) -> Stop {
        let text = e.to_string();
        Stop::new(text.lines().next().unwrap_or("internal error").to_string())
    }
}

/// The capabilities a tool needs before it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing: anyone may call it.
    Nothing,
    /// Any one of these letters.
    Any(&'static str),
}

impl Needs {
    /// The letters, as a person reads them ("a or s").
    pub fn describe(self) -> String {
        match self {
            Needs::Nothing => "nothing".into(),
            Needs::Any(l) => l
                .chars()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(" or "),
        }
    }
}

/// One tool: its Input and Output types, what it needs, and its run.
pub trait Tool: 'static {
    /// Its typed input: `deny_unknown_fields`, each field documented.
    type Input: DeserializeOwned + JsonSchema;
    /// Its typed result.
    type Output: Serialize + JsonSchema;
    /// Its name (`ocx NAME`, `ocx_NAME` over MCP).
    const NAME: &'static str;
    /// What it does, in one line.
    const SUMMARY: &'static str;
    /// The capabilities it needs.
    const NEEDS: Needs;
    /// Whether it may change the repository or the checkout (false: it only reads).
    const WRITES: bool;
    /// Whether a write may replace or remove what was there (MCP's
    /// destructive hint); adding to the record is not.
    const DESTRUCTIVE: bool = false;
    /// Whether calling it twice with the same input does no more than once
    /// (MCP's idempotent hint); a tool that only reads always is.
    const IDEMPOTENT: bool = !Self::WRITES;
    /// Whether it acts on a checkout (its files, its tests, its commits):
    /// never offered on the web page, whatever checkout the server is in.
    const CHECKOUT: bool = false;
    /// Runs it; with `call.dry_run` it checks everything, logs what it
    /// would write and writes nothing.
    fn run(input: Self::Input, call: &mut Call) -> Result<Self::Output, Stop>;
    /// The result as text for a person.
    fn text(output: &Self::Output) -> String {
        value_text(&serde_json::to_value(output).unwrap_or(Value::Null))
    }
}

/// A tool as the registry holds it, its types erased.
pub trait Entry: Sync {
    fn name(&self) -> &'static str;
    fn summary(&self) -> &'static str;
    fn needs(&self) -> Needs;
    fn writes(&self) -> bool;
    /// Whether a write may replace what was there ([`Tool::DESTRUCTIVE`]).
    fn destructive(&self) -> bool;
    /// Whether a second identical call does nothing more ([`Tool::IDEMPOTENT`]).
    fn idempotent(&self) -> bool;
    /// Whether it acts on a checkout ([`Tool::CHECKOUT`]).
    fn checkout(&self) -> bool;
    /// The input's JSON schema, `dry_run` included (derived once per process).
    fn input_schema(&self) -> &'static Value;
    /// The result's JSON schema (derived once per process).
    fn output_schema(&self) -> &'static Value;
    /// Checks `input` against the tool's Input type, naming the field at fault.
    fn check(&self, input: &Value) -> Result<(), Stop>;
    /// Deserializes `input` and runs the tool: the result and its text.
    fn invoke(&self, input: Value, call: &mut Call) -> Result<(Value, String), Stop>;
}

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
            .map_err(refusal)
    }
    fn invoke(&self, input: Value, call: &mut Call) -> Result<(Value, String), Stop> {
        let typed: T::Input = serde_path_to_error::deserialize(input).map_err(refusal)?;
        let out = T::run(typed, call)?;
        let text = T::text(&out);
        let value =
            serde_json::to_value(&out).map_err(|e| Stop::new(format!("internal error: {e}")))?;
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
        obj.insert("properties".into(), serde_json::json!({"dry_run": {"type": "boolean", "default": false,
                "description": "Check everything and say what would be written, writing nothing."}}));
    }
    schema
}

/// The field a serde complaint is about (a path such as `budget.wall`) and
/// the complaint, without serde's line and column.
pub fn field_at_fault(e: &serde_path_to_error::Error<serde_json::Error>) -> (String, String) {
    let path = e.path().to_string();
    let message = e.inner().to_string();
    let message = message
        .split(" at line ")
        .next()
        .unwrap_or(&message)
        .to_string();
    let named = message.split('`').nth(1).unwrap_or("").to_string();
    let field = if message.starts_with("unknown field") && path != "." {
        path
    } else if message.starts_with("unknown field") || message.starts_with("missing field") {
        if path == "." {
            named
        } else {
            format!("{path}.{named}")
        }
    } else if path == "." {
        "input".to_string()
    } else {
        path
    };
    (field, message)
}

/// Turns serde's complaint into a refusal naming the field.
fn refusal(e: serde_path_to_error::Error<serde_json::Error>) -> Stop {
    let (field, message) = field_at_fault(&e);
    let next = if message.starts_with("unknown field") {
        "leave the field out; `ocx help TOOL` lists the fields"
    } else if message.starts_with("missing field") {
        "give the field; `ocx help TOOL` lists what it takes"
    } else {
        "give the field as its schema says; `ocx help TOOL` shows it"
    };
    Stop::field(field, message).next(next)
}

/// A tool call under way: where, whether a dry run, and the log so far.
pub struct Call<'a> {
    pub cx: &'a Context,
    pub dry_run: bool,
    pub log: Vec<Op>,
}

impl Call<'_> {
    /// The repository.
    pub fn repo(&self) -> Result<&Repository, Stop> {
        self.cx.repo()
    }
    /// The caller.
    pub fn caller(&self) -> Result<&Caller, Stop> {
        self.cx.caller()
    }
    /// The `fossil` program.
    pub fn fossil(&self) -> Result<&Fossil, Stop> {
        self.cx.fossil()
    }
    /// Adds `op` to the log.
    pub fn log(&mut self, op: Op) {
        self.log.push(op);
    }
    /// Logs a read.
    pub fn read(&mut self, what: impl Into<String>) {
        self.log.push(Op::Read { what: what.into() });
    }

    /// The artifact a hash or prefix in `field` names: at least 10 hex
    /// digits, naming exactly one artifact here.
    pub fn artifact(&mut self, field: &str, given: &str) -> Result<(i64, String), Stop> {
        let prefix = hash_prefix(field, given)?;
        self.read(format!("the artifact {field} names"));
        match self.repo()?.resolve(&prefix).map_err(Stop::internal)? {
            Lookup::One(rid, hash) => Ok((rid, hash)),
            Lookup::None => Err(Stop::field(
                field,
                format!("{given} names no artifact in this repository"),
            )
            .next("give the hash of an artifact this repository holds")),
            Lookup::Several => Err(
                Stop::field(field, format!("{given} names several artifacts"))
                    .next("give more digits of the hash"),
            ),
        }
    }
}

impl Call<'_> {
    /// The check-in a hash or prefix in `field` names.
    pub fn checkin(
        &mut self,
        field: &str,
        given: &str,
    ) -> Result<crate::fossil::repo::CheckIn, Stop> {
        let (rid, _) = self.artifact(field, given)?;
        self.repo()?
            .checkin(rid)
            .map_err(Stop::internal)?
            .ok_or_else(|| {
                Stop::field(field, format!("{given} is not a check-in"))
                    .next("give a check-in's hash")
            })
    }
}

/// Checks a hash or prefix given in `field`: hex digits only, 10 to 64 of
/// them; answers it in lower case.
pub fn hash_prefix(field: &str, given: &str) -> Result<String, Stop> {
    if !given.bytes().all(|b| b.is_ascii_hexdigit()) || given.is_empty() {
        return Err(
            Stop::field(field, format!("{given:?} is not a hash: hex digits only"))
                .next("give a full hash or a prefix of at least 10 hex digits"),
        );
    }
    if given.len() < 10 || given.len() > 64 {
        return Err(Stop::field(
            field,
            format!(
                "{given:?} has {} hex digits; a hash or prefix has 10 to 64",
                given.len()
            ),
        )
        .next("give a full hash or a prefix of at least 10 hex digits"));
    }
    Ok(given.to_ascii_lowercase())
}

/// Checks that a hash in `field` is given in full: 40 or 64 lower-case hex digits.
pub fn full_hash(field: &str, given: &str) -> Result<(), Stop> {
    let ok = (given.len() == 40 || given.len() == 64)
        && given
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if ok {
        Ok(())
    } else {
        Err(Stop::field(
            field,
            format!("{given:?} is not a full hash: 40 or 64 lower-case hex digits"),
        )
        .next("give each hash in full"))
    }
}

/// Every tool, in the order `ocx list` shows them.
pub static TOOLS: &[&dyn Entry] = &[
    &Def::<crate::tools::list::List>::new(),
    &Def::<crate::tools::help::Help>::new(),
    &Def::<crate::tools::status::Status>::new(),
    &Def::<crate::tools::post::Post>::new(),
    &Def::<crate::tools::thread::Thread>::new(),
    &Def::<crate::tools::receipt::ReceiptTool>::new(),
    &Def::<crate::tools::create::Create>::new(),
    &Def::<crate::tools::stop::StopTool>::new(),
    &Def::<crate::tools::audit::Audit>::new(),
    &Def::<crate::tools::verdicts::Verdicts>::new(),
    &Def::<crate::tools::unaudited::Unaudited>::new(),
    &Def::<crate::tools::hook::Hook>::new(),
    &Def::<crate::tools::node::NodeTool>::new(),
    &Def::<crate::tools::lost::Lost>::new(),
    &Def::<crate::tools::adopt::Adopt>::new(),
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

/// The tool called `name`.
pub fn find(name: &str) -> Option<&'static dyn Entry> {
    TOOLS.iter().copied().find(|t| t.name() == name)
}

/// A character standing where input bytes were not UTF-8, so the field
/// holding them can be named; a noncharacter, never in text people write.
const NOT_UTF8: char = '\u{FDD0}';

/// Reads a tool's whole input given as JSON text (`--input`, a web form's
/// body, an MCP call's arguments).
pub fn parse_input(bytes: &[u8]) -> Result<Value, Stop> {
    let text = mark_invalid(bytes);
    let value: Value = serde_json::from_str(&text).map_err(|e| {
        Stop::field("input", format!("not a JSON object: {e}"))
            .next("give the input as one JSON object")
    })?;
    if !value.is_object() {
        return Err(
            Stop::field("input", "not a JSON object").next("give the input as one JSON object")
        );
    }
    Ok(value)
}

/// JSON text whose bytes that are not UTF-8, and whose escapes of half a
/// surrogate pair, are each replaced by a mark [`check_text`] refuses, so
/// such text still parses and the field holding it can be named. Valid
/// text comes back unchanged.
pub fn mark_invalid(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        text.push_str(chunk.valid());
        if !chunk.invalid().is_empty() {
            text.push(NOT_UTF8);
        }
    }
    mark_lone_surrogates(&text)
}

/// Replaces each `\uD800`–`\uDFFF` escape that is not half of a pair with
/// an escape of [`NOT_UTF8`], since such a string has no UTF-8 form.
fn mark_lone_surrogates(text: &str) -> String {
    let b = text.as_bytes();
    let hex4 = |i: usize| -> Option<u32> {
        let s = text.get(i..i + 4)?;
        u32::from_str_radix(s, 16).ok()
    };
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut last = 0;
    while i + 1 < b.len() {
        if b[i] == b'\\' {
            if b[i + 1] == b'u'
                && let Some(cp) = hex4(i + 2)
                && (0xD800..0xE000).contains(&cp)
            {
                let paired = (0xD800..0xDC00).contains(&cp)
                    && b.get(i + 6) == Some(&b'\\')
                    && b.get(i + 7) == Some(&b'u')
                    && hex4(i + 8).is_some_and(|lo| (0xDC00..0xE000).contains(&lo));
                if paired {
                    i += 12;
                } else {
                    out.push_str(&text[last..i]);
                    out.push_str("\\uFDD0");
                    i += 6;
                    last = i;
                }
                continue;
            }
            i += 2;
            continue;
        }
        i += 1;
    }
    out.push_str(&text[last..]);
    out
}

/// The first string (or key) in `value` holding a NUL or bytes that were
/// not UTF-8, as a refusal naming its path.
pub fn check_text(value: &Value, path: &str) -> Result<(), Stop> {
    let bad = |s: &str, p: &str| -> Result<(), Stop> {
        if s.contains('\0') {
            return Err(
                Stop::field(p, "holds a NUL character").next("remove the NUL from the text")
            );
        }
        if s.contains(NOT_UTF8) {
            return Err(Stop::field(p, "is not UTF-8").next("give the text as UTF-8"));
        }
        Ok(())
    };
    match value {
        Value::String(s) => bad(s, if path.is_empty() { "input" } else { path }),
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                check_text(v, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        Value::Object(map) => {
            for (k, v) in map {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                bad(k, &p)?;
                check_text(v, &p)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Calls tool `name` with `input` as the caller `cx` names; `dry_run` from
/// the entry point (`--dry-run`), or `"dry_run": true` in the input.
pub fn call(name: &str, input: Result<Value, Stop>, cx: &Context, dry_run: bool) -> Answer {
    call_with_text(name, input, cx, dry_run).0
}

/// Like [`call`], also giving the result's text for a person.
pub fn call_with_text(
    name: &str,
    input: Result<Value, Stop>,
    cx: &Context,
    dry_run: bool,
) -> (Answer, Option<String>) {
    let started = Instant::now();
    let mut call = Call {
        cx,
        dry_run,
        log: Vec::new(),
    };
    let outcome = run(name, input, &mut call);
    let took_ms = started.elapsed().as_millis() as u64;
    let (result, text, stopped) = match outcome {
        Ok((value, text)) => (Some(value), Some(text), None),
        Err(stop) => (None, None, Some(stop)),
    };
    let answer = Answer {
        ok: stopped.is_none(),
        tool: name.to_string(),
        dry_run: call.dry_run,
        log: call.log,
        result,
        next_step: stopped.as_ref().and_then(|s| s.next_step.clone()),
        stopped: stopped.map(|s| Stopped {
            field: s.field,
            reason: s.reason,
        }),
        took_ms,
    };
    (answer, text)
}

fn run(name: &str, input: Result<Value, Stop>, call: &mut Call) -> Result<(Value, String), Stop> {
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
    if let Needs::Any(letters) = tool.needs() {
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
    tool.invoke(input, call)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_bytes_and_lone_surrogates_are_marked() {
        let v = parse_input(b"{\"text\": \"a\xff\"}").unwrap();
        assert_eq!(
            check_text(&v, "").unwrap_err().field.as_deref(),
            Some("text")
        );
        let v = parse_input(br#"{"to": "\ud800x"}"#).unwrap();
        assert_eq!(check_text(&v, "").unwrap_err().field.as_deref(), Some("to"));
        let v = parse_input(br#"{"to": "\ud83d\ude00"}"#).unwrap();
        assert!(check_text(&v, "").is_ok());
        let v = parse_input(br#"{"a": {"b": ["x\u0000"]}}"#).unwrap();
        assert_eq!(
            check_text(&v, "").unwrap_err().field.as_deref(),
            Some("a.b[0]")
        );
    }

    #[test]
    fn hash_prefixes_are_checked() {
        assert!(hash_prefix("to", "abc").is_err());
        assert!(hash_prefix("to", "zzzzzzzzzzzz").is_err());
        assert_eq!(hash_prefix("to", "ABCDEF0123").unwrap(), "abcdef0123");
    }

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
}
