//! Runners (design decision 10): `command` is built in; a session runner
//! is defined by the wiki page `sandbox/NAME`, read from its newest
//! version in received order among those sent by a login holding admin or
//! setup; every other version is ignored, whatever date its writer gave it.
//!
//! A page names what its runs get and never holds a secret: anyone who
//! reads the wiki reads it. Credentials are named by name and kept by the
//! node ([`crate::node::credentials`]); homes named by name are the
//! node's own directories, copied into each run's fresh home.

use crate::protocol::kinds::Problem;
use crate::protocol::message;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

/// The built-in runner: a program run once per check-in.
pub const COMMAND: &str = "command";

/// How a session runner's program takes its deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InputMode {
    /// One line on stdin per delivery.
    Lines,
    /// Claude Code's stream-json user messages, one turn at a time, its
    /// events read back.
    ClaudeStreamJson,
    /// Codex's app-server JSON-RPC: one thread, one turn per delivery.
    CodexAppServer,
    /// Claude Code's own interactive interface on the run's terminal: the
    /// record's line its first prompt, each delivery typed once it waits
    /// for input again (its `Stop` hook says so).
    ClaudeInteractive,
    /// Codex's own interactive interface on the run's terminal: the
    /// record's line its first prompt, each delivery typed once it waits
    /// for input again (its `notify` program says so).
    CodexInteractive,
}

impl InputMode {
    /// Whether the watcher speaks to the program as an agent's session
    /// (one turn a delivery, the turn's end read back), not in plain lines.
    pub fn is_agent(self) -> bool {
        matches!(
            self,
            InputMode::ClaudeStreamJson | InputMode::CodexAppServer
        )
    }

    /// Whether it is an agent's own interface on a terminal, told of each
    /// time it waits for input again.
    pub fn is_interactive(self) -> bool {
        matches!(
            self,
            InputMode::ClaudeInteractive | InputMode::CodexInteractive
        )
    }

    /// Whether it is Claude Code, in either of its modes.
    pub fn is_claude(self) -> bool {
        matches!(
            self,
            InputMode::ClaudeStreamJson | InputMode::ClaudeInteractive
        )
    }
}

/// One credential a runner's runs are given: the node's credential `name`,
/// written into the run's fresh home at `file`, or given as the variable
/// `env`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialUse {
    /// The credential's name, as `ocx credential` keeps it on the node.
    pub name: String,
    /// Where in the run's home it is written (a relative path), if a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The variable it is given as, if a variable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
}

pub use crate::protocol::money::Prices;
pub use crate::run::relay::ModelKind;

/// The model service a runner's agent talks to, through its watcher's
/// relay ([`crate::run::relay`]): the run is given the relay's address and
/// a token of its own, never the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelService {
    /// The API it speaks.
    pub kind: ModelKind,
    /// The service's root URL, https (each request's path is added to it:
    /// `https://api.anthropic.com`, `https://api.openai.com`).
    pub upstream: String,
    /// The node's credential holding the key, by name; never given to the run.
    pub credential: String,
}

/// A session runner as its page defines it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerPage {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Environment variables its runs get (never a secret: see `credentials`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// What each run's fresh home starts from: a name is the node's
    /// directory `homes/NAME` under its root, copied into the home; an
    /// absolute path is a host directory bound at its own path, from a
    /// fresh copy.
    #[serde(default)]
    pub homes: Vec<String>,
    /// The node's credentials its runs are given, by name.
    #[serde(default)]
    pub credentials: Vec<CredentialUse>,
    /// The arguments that turn on its remote control, given only to a
    /// record whose `remote` is true (`false` or none: it offers none).
    #[serde(default, deserialize_with = "remote_args")]
    pub remote: Vec<String>,
    /// How it takes deliveries.
    #[serde(default = "lines")]
    pub input: InputMode,
    /// The hosts its runs need (its model service), as `sandbox.hosts`
    /// writes them: `create` writes them into a record that names none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// The model service its agent talks to through the watcher's relay,
    /// which alone holds the key (none: the run talks to what it reaches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelService>,
    /// What its model service's tokens cost, per million in and out, in
    /// a currency: a run's cost is reckoned from them, and a record's
    /// `budget.cost` held by the relay (none: its runs' cost is not told).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prices: Option<Prices>,
    /// Whether its program runs on a terminal of its own (50 rows by 200
    /// columns), which a person with admin or setup may join at the node
    /// (`ocx attach`); its deliveries are then typed in.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub terminal: bool,
}

fn lines() -> InputMode {
    InputMode::Lines
}

/// `remote` as arguments: a list of them, or `false` for none; `true` says
/// nothing of how, and is refused.
fn remote_args<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Given {
        Flag(bool),
        Args(Vec<String>),
    }
    match Given::deserialize(d)? {
        Given::Flag(false) => Ok(Vec::new()),
        Given::Flag(true) => Err(serde::de::Error::custom(
            "name the arguments that turn on its remote control, as a list (or false)",
        )),
        Given::Args(a) => Ok(a),
    }
}

/// The arguments the node gives a Claude Code runner itself (its MCP
/// servers, the tools it may use, where its settings come from): a page
/// naming one is refused, since what a run may use is the run's, never the
/// page's guess.
pub const NODE_GIVEN_CLAUDE_ARGS: &[&str] = &[
    "--mcp-config",
    "--strict-mcp-config",
    "--allowedTools",
    "--allowed-tools",
    "--setting-sources",
    "--dangerously-skip-permissions",
    "--permission-mode",
];

impl RunnerPage {
    /// The page whose block names `command` alone, every other field as
    /// a block that leaves it out reads it: lines on stdin, nothing else.
    pub fn of(command: Vec<String>) -> RunnerPage {
        RunnerPage {
            command,
            env: BTreeMap::new(),
            homes: Vec::new(),
            credentials: Vec::new(),
            remote: Vec::new(),
            input: InputMode::Lines,
            hosts: Vec::new(),
            model: None,
            prices: None,
            terminal: false,
        }
    }

    /// Whether it offers remote control.
    pub fn offers_remote(&self) -> bool {
        !self.remote.is_empty()
    }

    /// Checks what serde cannot: names that name, paths that stay where
    /// they are put, and no argument the node gives itself.
    pub fn check(&self) -> Result<(), Problem> {
        let bad = |field: String, reason: String| Err(Problem { field, reason });
        if self.command.is_empty() || self.command[0].is_empty() {
            return bad("command".into(), "names no program".into());
        }
        if self.input.is_interactive() && !self.terminal {
            return bad(
                "terminal".into(),
                "an agent's interactive interface runs on a terminal: say \"terminal\": true"
                    .into(),
            );
        }
        if self.input.is_agent() && self.terminal {
            return bad(
                "terminal".into(),
                format!(
                    "{} takes its input on a pipe, not a terminal: use its interactive mode, or leave terminal out",
                    serde_json::to_value(self.input)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default()
                ),
            );
        }
        if self.input.is_claude()
            && let Some(a) = self.command.iter().find(|a| {
                let flag = a.split('=').next().unwrap_or(a);
                NODE_GIVEN_CLAUDE_ARGS.contains(&flag)
            })
        {
            return bad(
                "command".into(),
                format!(
                    "{a:?} is the node's to give: it names the run's MCP servers and tools, and settings from the run's home alone"
                ),
            );
        }
        for (i, h) in self.homes.iter().enumerate() {
            if !h.starts_with('/') && !valid_name(h) {
                return bad(
                    format!("homes[{i}]"),
                    format!(
                        "{h:?} is neither an absolute path nor a name of the node's homes (a-z, 0-9, - and _)"
                    ),
                );
            }
        }
        for (i, h) in self.hosts.iter().enumerate() {
            if let Err(why) = crate::protocol::kinds::host_port(h) {
                return bad(format!("hosts[{i}]"), format!("{h:?} {why}"));
            }
        }
        self.check_service()?;
        for (i, c) in self.credentials.iter().enumerate() {
            if !valid_name(&c.name) {
                return bad(
                    format!("credentials[{i}].name"),
                    format!(
                        "{:?} is not a credential's name (a-z, 0-9, - and _)",
                        c.name
                    ),
                );
            }
            match (&c.file, &c.env) {
                (Some(f), None) => {
                    if !relative_inside(f) {
                        return bad(
                            format!("credentials[{i}].file"),
                            format!("{f:?} is not a relative path inside the run's home"),
                        );
                    }
                }
                (None, Some(v)) => {
                    if v.is_empty()
                        || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                        || v.as_bytes()[0].is_ascii_digit()
                    {
                        return bad(
                            format!("credentials[{i}].env"),
                            format!("{v:?} is not a variable's name"),
                        );
                    }
                }
                _ => {
                    return bad(
                        format!("credentials[{i}]"),
                        "names either a file or env, one of them".into(),
                    );
                }
            }
        }
        Ok(())
    }

    /// Checks the model service and its prices: a credential's name that
    /// the run is never also given, an https root, and prices only beside a
    /// model service, in a currency's code.
    fn check_service(&self) -> Result<(), Problem> {
        let bad = |field: String, reason: String| Err(Problem { field, reason });
        if let Some(m) = &self.model {
            if !valid_name(&m.credential) {
                return bad(
                    "model.credential".into(),
                    format!(
                        "{:?} is not a credential's name (a-z, 0-9, - and _)",
                        m.credential
                    ),
                );
            }
            if let Err(why) = upstream_url(&m.upstream) {
                return bad("model.upstream".into(), why.to_string());
            }
            if let Some(i) = self.credentials.iter().position(|c| c.name == m.credential) {
                return bad(
                    format!("credentials[{i}].name"),
                    format!(
                        "{:?} is the model's key, which the relay holds and the run never does",
                        m.credential
                    ),
                );
            }
        }
        if let Some(p) = &self.prices {
            if self.model.is_none() {
                return bad(
                    "prices".into(),
                    "prices the tokens of a model service, and the page names none (`model`)"
                        .into(),
                );
            }
            if let Some(why) = p.currency_refused() {
                return bad("prices.currency".into(), why);
            }
        }
        Ok(())
    }
}

pub use crate::run::relay::upstream_url;

/// Whether `path` is relative and stays inside where it is put: no `..`,
/// no empty or `.` part, no NUL.
pub fn relative_inside(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && !path.contains('\0')
        && path
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != "..")
}

/// The wiki page defining runner `name`.
pub fn page_name(name: &str) -> String {
    format!("sandbox/{name}")
}

/// A runner as a node finds it: its page, or why it offers none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offered {
    /// Its page counts and reads.
    Page(RunnerPage),
    /// No version of its page counts: none was written, or none by a
    /// login holding admin or setup.
    NoPage,
    /// Its counting version is refused: the page's field at fault, and why.
    Refused(Problem),
}

impl Offered {
    /// The page, when it counts and reads.
    pub fn page(self) -> Option<RunnerPage> {
        match self {
            Offered::Page(p) => Some(p),
            _ => None,
        }
    }

    /// The page, or why a record naming the runner `name` (the built-in
    /// `command` aside) cannot run here, naming the record's field
    /// `runner`.
    pub fn counting(self, name: &str) -> Result<RunnerPage, Problem> {
        let reason = match self {
            Offered::Page(p) => return Ok(p),
            Offered::NoPage => format!(
                "this node offers no runner {name:?} (no counting wiki page {})",
                page_name(name)
            ),
            Offered::Refused(p) => format!(
                "this node refuses the page {} that defines it, at {}: {}",
                page_name(name),
                p.field,
                p.reason
            ),
        };
        Err(Problem {
            field: "runner".into(),
            reason,
        })
    }

    /// Why a record naming the runner `name` cannot run here, as
    /// [`Offered::counting`] says; none when its page counts and reads.
    pub fn refusal(&self, name: &str) -> Option<Problem> {
        self.clone().counting(name).err()
    }
}

/// A runner page's definition: its first fenced JSON block, read as a
/// [`RunnerPage`]; refused naming the field at fault.
pub fn read_page(text: &[u8]) -> Result<RunnerPage, Problem> {
    let text = String::from_utf8_lossy(text);
    let block = message::json_blocks(&text)
        .into_iter()
        .next()
        .ok_or_else(|| Problem {
            field: "page".into(),
            reason: "holds no fenced JSON block".into(),
        })?;
    let mut de = serde_json::Deserializer::from_str(&block);
    let page: RunnerPage = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let (field, reason) = crate::stop::field_at_fault(&e);
        Problem { field, reason }
    })?;
    page.check()?;
    Ok(page)
}

/// Whether `name` can name a runner: lower-case letters, digits, `-` and `_`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 40
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// The file of a run's directory keeping its last error.
pub const LAST_ERROR: &str = "last-error.json";

/// A run's last error, as its watcher kept it: when (UTC), and the agent's
/// own words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LastError {
    /// When it was kept (UTC).
    pub at: String,
    /// The agent's words.
    pub error: String,
}

/// A run's last error as its directory keeps it: with its record, by full
/// hash (none in a file an earlier release wrote).
#[derive(Serialize, Deserialize)]
struct KeptError {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    record: Option<String>,
    #[serde(flatten)]
    error: LastError,
}

/// The last error kept in the run directory `dir`, if any (readable only by
/// the node's account).
pub fn last_error(dir: &std::path::Path) -> Option<LastError> {
    kept_error(dir).map(|(_, e)| e)
}

/// The last error kept in the run directory `dir`, with the record it
/// names (none when an earlier release kept it).
pub fn kept_error(dir: &std::path::Path) -> Option<(Option<String>, LastError)> {
    let kept: KeptError =
        serde_json::from_slice(&std::fs::read(dir.join(LAST_ERROR)).ok()?).ok()?;
    Some((kept.record, kept.error))
}

/// Keeps `error` as the last error of `record`'s run in `dir`, its owner's
/// alone.
pub fn keep_error(dir: &std::path::Path, record: &str, error: &str) {
    let kept = KeptError {
        record: Some(record.to_string()),
        error: LastError {
            at: crate::fossil::artifact::now(),
            error: error.to_string(),
        },
    };
    let _ = crate::file::write_whole(
        &dir.join(LAST_ERROR),
        &dir.join(format!("{LAST_ERROR}.new")),
        &serde_json::to_vec(&kept).unwrap_or_default(),
        0o600,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(block: &str) -> Result<RunnerPage, Problem> {
        read_page(format!("# A runner\n\n```json\n{block}\n```\n").as_bytes())
    }

    #[test]
    fn a_page_of_a_command_alone_is_what_its_block_reads() {
        assert_eq!(
            page(r#"{"command": ["/bin/agent", "--flag"]}"#).unwrap(),
            RunnerPage::of(vec!["/bin/agent".into(), "--flag".into()])
        );
    }

    #[test]
    fn the_modes_read_and_another_is_refused_naming_input() {
        for (mode, want) in [
            ("lines", InputMode::Lines),
            ("claude-stream-json", InputMode::ClaudeStreamJson),
            ("codex-app-server", InputMode::CodexAppServer),
        ] {
            let p = page(&format!(r#"{{"command": ["x"], "input": "{mode}"}}"#)).unwrap();
            assert_eq!(p.input, want);
        }
        for (mode, want) in [
            ("claude-interactive", InputMode::ClaudeInteractive),
            ("codex-interactive", InputMode::CodexInteractive),
            ("lines", InputMode::Lines),
        ] {
            let p = page(&format!(
                r#"{{"command": ["x"], "input": "{mode}", "terminal": true}}"#
            ))
            .unwrap();
            assert_eq!((p.input, p.terminal), (want, true));
        }
        for (input, terminal) in [
            ("claude-interactive", false),
            ("codex-interactive", false),
            ("claude-stream-json", true),
            ("codex-app-server", true),
        ] {
            let text =
                format!(r#"{{"command": ["x"], "input": "{input}", "terminal": {terminal}}}"#);
            assert_eq!(page(&text).unwrap_err().field, "terminal", "{text}");
        }
        assert_eq!(
            page(r#"{"command": ["claude", "--allowedTools", "Bash"], "input": "claude-interactive", "terminal": true}"#)
                .unwrap_err()
                .field,
            "command"
        );
        assert_eq!(
            page(r#"{"command": ["x"], "input": "codex-exec"}"#)
                .unwrap_err()
                .field,
            "input"
        );
    }

    #[test]
    fn what_the_node_gives_claude_code_is_refused_on_a_page() {
        for flag in [
            "--allowedTools",
            "--mcp-config=x.json",
            "--setting-sources",
            "--strict-mcp-config",
        ] {
            let p = page(&format!(
                r#"{{"command": ["claude", "-p", "{flag}", "mcp__ocx"], "input": "claude-stream-json"}}"#
            ));
            assert_eq!(p.unwrap_err().field, "command", "{flag}");
        }
        assert!(page(r#"{"command": ["x", "--allowedTools", "y"], "input": "lines"}"#).is_ok());
    }

    #[test]
    fn a_model_service_is_https_a_named_key_never_also_given_to_the_run() {
        let p = page(
            r#"{"command": ["x"], "model": {"kind": "anthropic-messages", "upstream": "https://api.anthropic.com", "credential": "claude-key"}}"#,
        )
        .unwrap();
        let m = p.model.unwrap();
        assert_eq!(m.kind, ModelKind::AnthropicMessages);
        assert_eq!(m.credential, "claude-key");
        for (model, field) in [
            (
                r#"{"kind": "gemini", "upstream": "https://x", "credential": "k"}"#,
                "model.kind",
            ),
            (
                r#"{"kind": "openai-responses", "upstream": "http://x", "credential": "k"}"#,
                "model.upstream",
            ),
            (
                r#"{"kind": "openai-responses", "upstream": "https://u:p@x", "credential": "k"}"#,
                "model.upstream",
            ),
            (
                r#"{"kind": "openai-responses", "upstream": "https://x", "credential": "../k"}"#,
                "model.credential",
            ),
            (
                r#"{"kind": "openai-responses", "upstream": "https://x", "credential": "k", "key": "sk"}"#,
                "model.key",
            ),
        ] {
            let p = page(&format!(r#"{{"command": ["x"], "model": {model}}}"#));
            assert_eq!(p.unwrap_err().field, field, "{model}");
        }
        let both = r#"{"command": ["x"], "credentials": [{"name": "k", "env": "OPENAI_API_KEY"}],
            "model": {"kind": "openai-responses", "upstream": "https://x", "credential": "k"}}"#;
        assert_eq!(page(both).unwrap_err().field, "credentials[0].name");
    }

    #[test]
    fn prices_are_read_beside_a_model_service_or_refused_naming_their_field() {
        let model = r#""model": {"kind": "anthropic-messages", "upstream": "https://x", "credential": "k"}"#;
        let p = page(&format!(
            r#"{{"command": ["x"], {model}, "prices": {{"currency": "USD", "input": 3.0, "output": 15}}}}"#
        ))
        .unwrap();
        let prices = p.prices.unwrap();
        assert_eq!(prices.cost(1_000_000, 1_000_000).to_string(), "18.00");
        for (prices, field) in [
            (
                r#"{"currency": "USD", "input": -3, "output": 15}"#,
                "prices.input",
            ),
            (
                r#"{"currency": "USD", "input": 3, "output": "15"}"#,
                "prices.output",
            ),
            (
                r#"{"currency": "USD", "input": 3, "output": 0.0000001}"#,
                "prices.output",
            ),
            (r#"{"input": 3, "output": 15}"#, "prices.currency"),
            (
                r#"{"currency": "dollars", "input": 3, "output": 15}"#,
                "prices.currency",
            ),
            (r#"{"currency": "USD", "input": 3}"#, "prices.output"),
            (
                r#"{"currency": "USD", "input": 3, "output": 15, "cache": 1}"#,
                "prices.cache",
            ),
        ] {
            let p = page(&format!(
                r#"{{"command": ["x"], {model}, "prices": {prices}}}"#
            ));
            assert_eq!(p.unwrap_err().field, field, "{prices}");
        }
        let alone =
            page(r#"{"command": ["x"], "prices": {"currency": "USD", "input": 3, "output": 15}}"#);
        assert_eq!(alone.unwrap_err().field, "prices");
    }

    #[test]
    fn a_refused_page_is_told_from_no_page_naming_runner_and_the_pages_field() {
        let refused = page(r#"{"command": ["x"], "hosts": ["10.0.0.1"]}"#).unwrap_err();
        let why = Offered::Refused(refused).counting("probe").unwrap_err();
        assert_eq!(why.field, "runner");
        assert!(
            why.reason.starts_with(
                "this node refuses the page sandbox/probe that defines it, at hosts[0]: "
            ),
            "{}",
            why.reason
        );
        let none = Offered::NoPage.refusal("probe").unwrap();
        assert_eq!(none.field, "runner");
        assert!(none.reason.contains("offers no runner"), "{}", none.reason);
        let p = RunnerPage::of(vec!["x".into()]);
        assert_eq!(Offered::Page(p.clone()).counting("probe"), Ok(p));
    }

    #[test]
    fn remote_names_its_arguments() {
        let p = page(r#"{"command": ["x"], "remote": ["--remote-control"]}"#).unwrap();
        assert_eq!(p.remote, vec!["--remote-control".to_string()]);
        assert!(p.offers_remote());
        assert!(
            !page(r#"{"command": ["x"], "remote": false}"#)
                .unwrap()
                .offers_remote()
        );
        assert_eq!(
            page(r#"{"command": ["x"], "remote": true}"#)
                .unwrap_err()
                .field,
            "remote"
        );
    }

    #[test]
    fn homes_and_credentials_are_named_or_refused_naming_their_field() {
        assert!(page(r#"{"command": ["x"], "homes": ["claude", "/srv/h"]}"#).is_ok());
        assert_eq!(
            page(r#"{"command": ["x"], "homes": ["../up"]}"#)
                .unwrap_err()
                .field,
            "homes[0]"
        );
        let ok = r#"{"command": ["x"], "credentials": [{"name": "k", "env": "API_KEY"}, {"name": "l", "file": ".claude/.credentials.json"}]}"#;
        assert_eq!(page(ok).unwrap().credentials.len(), 2);
        for (bad, field) in [
            (r#"[{"name": "k", "file": "../x"}]"#, "credentials[0].file"),
            (
                r#"[{"name": "k", "file": "/etc/x"}]"#,
                "credentials[0].file",
            ),
            (r#"[{"name": "K!", "env": "A"}]"#, "credentials[0].name"),
            (r#"[{"name": "k", "env": "1A"}]"#, "credentials[0].env"),
            (r#"[{"name": "k"}]"#, "credentials[0]"),
            (
                r#"[{"name": "k", "env": "A", "file": "a"}]"#,
                "credentials[0]",
            ),
        ] {
            let p = page(&format!(r#"{{"command": ["x"], "credentials": {bad}}}"#));
            assert_eq!(p.unwrap_err().field, field, "{bad}");
        }
    }
}
