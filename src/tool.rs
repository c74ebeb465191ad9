//! What a tool is and what it is given: the [`Tool`] trait (typed Input
//! and Output, what it needs, its run), the [`Entry`] it is held as with its
//! types erased, and the [`Call`] under way. The tools import this; the
//! list of them (`registry`) is above them.

use crate::answer::{Op, value_text};
use crate::context::{Caller, Context};
use crate::fossil::repo::Lookup;
use crate::fossil::{Fossil, Repository};
use crate::place::Place;
use crate::stop::{Stop, hash_prefix};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The capabilities a tool needs before it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing: anyone may call it.
    Nothing,
    /// Any one of these letters.
    Any(&'static str),
    /// Any one of these letters, or a run whose record's restrictions
    /// allow the one named (its tools served by its node).
    AnyOrRun(&'static str, &'static str),
}

impl Needs {
    /// The letters, as a person reads them ("a or s").
    pub fn describe(self) -> String {
        match self {
            Needs::Nothing => "nothing".into(),
            Needs::Any(l) => Self::either(l),
            Needs::AnyOrRun(l, allowed) => {
                format!(
                    "{}, or a run whose record allows {allowed}",
                    Self::either(l)
                )
            }
        }
    }

    fn either(letters: &str) -> String {
        letters
            .chars()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(" or ")
    }

    /// What it needs in words, each letter named for what it lets its
    /// holder do ("post to the forum (3), or ..."), as the tools page and
    /// the help say it.
    pub fn in_words(self) -> String {
        let either = |letters: &str| {
            letters
                .chars()
                .map(|c| format!("{} ({c})", capability_words(c)))
                .collect::<Vec<_>>()
                .join(", or ")
        };
        match self {
            Needs::Nothing => "nothing: anyone may use it".into(),
            Needs::Any(l) => format!("the right to {}", either(l)),
            Needs::AnyOrRun(l, allowed) => format!(
                "the right to {}; or a run whose record allows {allowed}",
                either(l)
            ),
        }
    }

    /// The letters any one of which suffices, if any are needed.
    pub fn letters(self) -> Option<&'static str> {
        match self {
            Needs::Nothing => None,
            Needs::Any(l) | Needs::AnyOrRun(l, _) => Some(l),
        }
    }

    /// Whether `cx` is a run its record lets call the tool without the letters.
    pub fn allows_run(self, cx: &crate::context::Context) -> bool {
        match (self, &cx.who) {
            (Needs::AnyOrRun(_, allowed), crate::context::Who::Run(scope)) => {
                scope.restrict.asked().contains(&allowed)
            }
            _ => false,
        }
    }
}

/// What a capability letter lets its holder do, in words after "may"
/// ("post to the forum"); Fossil's letters and OCX's own `R`.
pub fn capability_words(letter: char) -> &'static str {
    match letter {
        'a' => "administer the repository",
        's' => "set up the repository",
        'R' => "send runs to a node",
        'b' => "add attachments",
        'c' => "add to tickets",
        'd' => "delete",
        'e' => "see email addresses",
        'f' => "make wiki pages",
        'g' => "clone the repository",
        'h' => "follow links",
        'i' => "check in",
        'j' => "read the wiki",
        'k' => "edit the wiki",
        'l' => "moderate the wiki",
        'm' => "add to wiki pages",
        'n' => "make tickets",
        'o' => "check out files",
        'p' => "change their own password",
        'q' => "moderate tickets",
        'r' => "read tickets",
        't' => "make ticket reports",
        'w' => "edit tickets",
        'x' => "see private branches",
        'y' => "write unversioned files",
        'z' => "download archives",
        '2' => "read the forum",
        '3' => "post to the forum, held for a moderator",
        '4' => "post to the forum",
        '5' => "moderate the forum",
        '6' => "administer the forum",
        '7' => "get email alerts",
        'A' => "send announcements",
        'C' => "chat",
        'D' => "debug",
        _ => "do what this repository gives that letter",
    }
}

/// What OCX lets the holder of `capabilities` do, in words ("create
/// records, stop runs, ..."): each tool's summary is too long for that, so
/// these are the acts a person looks for, each by the letters that allow it.
pub fn what_may_be_done(has: impl Fn(char) -> bool) -> Vec<&'static str> {
    const ACTS: &[(&str, &str)] = &[
        ("2r", "read threads, tickets and questions"),
        ("34cw", "post and decide the questions put to you"),
        ("asR", "create records and stop runs"),
        (
            "as",
            "run nodes and runners, approve logins and join runs' terminals",
        ),
        ("s", "set up hooks, exports, upstreams and releases"),
        ("i", "check in and audit check-ins"),
        ("j", "read the wiki and its patterns"),
        ("k", "edit the wiki"),
        ("o", "read files and unversioned files"),
        ("y", "write unversioned files"),
    ];
    ACTS.iter()
        .filter(|(letters, _)| letters.chars().any(&has))
        .map(|(_, act)| *act)
        .collect()
}

/// A group of tools by who uses them, as `ocx --help` and the tools page
/// show them.
pub struct Group {
    /// Who uses them, as a heading.
    pub title: &'static str,
    /// What they are for, in one line.
    pub about: &'static str,
    /// The tools, by name, in the order shown.
    pub tools: &'static [&'static str],
}

/// Every tool in one group, by who uses it: a person, an administrator
/// (of the repository or of a node's host), a run.
pub static GROUPS: &[Group] = &[
    Group {
        title: "For a person",
        about: "what is said and asked, the console, verdicts, the wiki and your own login",
        tools: &[
            "status",
            "console",
            "run",
            "post",
            "thread",
            "questions",
            "decide",
            "verdicts",
            "unaudited",
            "audit",
            "patterns",
            "receipt",
            "register",
            "collect",
            "wiki_read",
            "wiki_edit",
            "unversioned_list",
            "unversioned_get",
            "unversioned_put",
            "list",
            "help",
        ],
    },
    Group {
        title: "For an administrator",
        about: "records and runs, nodes and agent machines, logins, the git export and releases",
        tools: &[
            "create",
            "stop",
            "attach",
            "node",
            "runner",
            "credential",
            "lost",
            "adopt",
            "machine",
            "approve",
            "send_runs",
            "tag_messages",
            "hook",
            "project",
            "upstream",
            "export",
            "stage",
            "accept",
            "rollback",
            "release",
        ],
    },
    Group {
        title: "For a run",
        about: "an agent's own tools in its checkout, and an agent machine's",
        tools: &[
            "context",
            "find",
            "read",
            "edit",
            "test",
            "save",
            "push",
            "run_login",
            "run_report",
        ],
    },
];

/// The tools a person starts with, as `ocx` alone names them.
pub const FIRST_TOOLS: &[&str] = &[
    "status",
    "console",
    "post",
    "thread",
    "questions",
    "decide",
    "create",
    "stop",
    "audit",
    "help",
];

/// Where a tool is offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// The command line, the web page and MCP.
    Everywhere,
    /// The command line and the web page, never MCP.
    NotMcp,
    /// The command line, and the web page to a POST from anyone, signed in
    /// or not and from any page; never MCP.
    UnsignedPost,
    /// The command line, and the web page to a POST alone (the tool checks
    /// who signed in, by the login cookie); never MCP.
    SignedPost,
    /// The asker's own command line alone.
    CommandLine,
    /// The command line and MCP (a run's tools among them), never the web
    /// page: its work outlasts a page's request.
    NotPage,
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
    /// Where it is offered.
    const REACH: Reach = Reach::Everywhere;
    /// Runs it; with `call.dry_run` it checks everything, logs what it
    /// would write and writes nothing.
    fn run(input: Self::Input, call: &mut Call) -> Result<Self::Output, Stop>;
    /// The result as text for a person.
    fn text(output: &Self::Output) -> String {
        value_text(&serde_json::to_value(output).unwrap_or(Value::Null))
    }
}

/// A tool as the registry holds it, its types erased (`registry::Def`).
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
    /// Where it is offered ([`Tool::REACH`]).
    fn reach(&self) -> Reach;
    /// The input's JSON schema, `dry_run` included.
    fn input_schema(&self) -> &'static Value;
    /// The result's JSON schema.
    fn output_schema(&self) -> &'static Value;
    /// Checks `input` against the tool's Input type, naming the field at fault.
    fn check(&self, input: &Value) -> Result<(), Stop>;
    /// Deserializes `input` and runs the tool: the result as JSON and as
    /// text, each only when `shown` asks for it.
    fn invoke(
        &self,
        input: Value,
        call: &mut Call,
        shown: Shown,
    ) -> Result<(Option<Value>, Option<String>), Stop>;
}

/// What an entry point shows of a result: its JSON, its text for a person,
/// or both. Each is made only where it is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    /// The JSON alone (`--json`, the page's `?json`).
    Json,
    /// The text alone (the command line, OCX's agent for local models).
    Text,
    /// Both (MCP, the page).
    Both,
}

impl Shown {
    /// Whether the JSON is shown.
    pub fn json(self) -> bool {
        self != Shown::Text
    }
    /// Whether the text is shown.
    pub fn text(self) -> bool {
        self != Shown::Json
    }
}

/// A tool call under way: where, whether a dry run, and the log so far.
pub struct Call<'a> {
    pub cx: &'a Context,
    pub dry_run: bool,
    pub log: Vec<Op>,
    /// Every tool the call was made among (what `list` and `help` show).
    pub tools: &'static [&'static dyn Entry],
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
        match self.repo()?.resolve(&prefix)? {
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
    /// The place (a thread or a ticket) a hash or prefix in `field` names.
    pub fn place(&mut self, field: &str, given: &str) -> Result<Place, Stop> {
        hash_prefix(field, given)?;
        self.read(format!("the post or ticket {field} names"));
        Place::resolve(self.repo()?, field, given)
    }

    /// The check-in a hash or prefix in `field` names.
    pub fn checkin(
        &mut self,
        field: &str,
        given: &str,
    ) -> Result<crate::fossil::repo::CheckIn, Stop> {
        let (rid, _) = self.artifact(field, given)?;
        self.repo()?.checkin(rid)?.ok_or_else(|| {
            Stop::field(field, format!("{given} is not a check-in")).next("give a check-in's hash")
        })
    }
}
