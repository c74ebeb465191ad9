//! `runner`: writes one of the runner pages OCX ships and tests, as the
//! caller, an administrator on the node: `sandbox/claude` (Claude Code,
//! headless, in stream-json), `sandbox/codex` (Codex's app-server),
//! `sandbox/local` (OCX's own agent on an Ollama) or `sandbox/demo` (OCX's
//! demo agent, no model behind it); with `terminal`,
//! `sandbox/claude-terminal` and `sandbox/codex-terminal` (each agent's own
//! interactive interface on the run's terminal, which a person may join
//! with `ocx attach`); and, asked, three example patterns for it
//! (`run/reviewer`, `run/fixer`, `run/helper`). It says what the
//! administrator still has to give (the login, the model). The page names
//! credentials by name only: the node keeps them (`ocx credential`).

use crate::fossil::artifact::{self, WikiPage};
use crate::fossil::store::Batch;
use crate::node::runner::{CredentialUse, InputMode, ModelKind, ModelService, RunnerPage};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use crate::tools::writing::write;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Input of `runner`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// Which shipped runner: claude, codex, local or demo.
    pub name: String,
    /// The model its agent asks for (local: required, an Ollama model such as qwen3:4b).
    pub model: Option<String>,
    /// The model service's URL: Claude Code's ANTHROPIC_BASE_URL, Codex's provider base_url (ending /v1), the Ollama's URL (local; default http://127.0.0.1:11434).
    pub base_url: Option<String>,
    /// The node's credential holding the service's API key, which the run's relay holds and the run never does (over a plain http base_url, a stand-in on this host, it is given to the run as ANTHROPIC_API_KEY or OPENAI_API_KEY); without it, claude gets the login credential claude-login and codex codex-auth, written into each run's home.
    pub api_key: Option<String>,
    /// The node's credential holding the program's login file (claude: .claude/.credentials.json; codex: .codex/auth.json); default claude-login or codex-auth.
    pub login: Option<String>,
    /// Offer the program's remote control to records that ask for it (claude: --remote-control).
    #[serde(default)]
    pub remote: bool,
    /// Its own interactive interface on a terminal of the run's (claude, codex), which a person with admin or setup may join at the node with ocx attach, rather than its headless mode: written as sandbox/NAME-terminal, beside the headless page.
    #[serde(default)]
    pub terminal: bool,
    /// Also write three example patterns for it (run/reviewer: a reviewer of dev that writes verdicts; run/fixer: a fixer held to the branch fixes, without a password; run/helper: a forum helper that answers posts in its own thread).
    #[serde(default)]
    pub patterns: bool,
}

/// The page written, and what is left to do.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The wiki page.
    pub page: String,
    /// Its new version's full hash (null on a dry run).
    pub version: Option<String>,
    /// The runner's definition, as the page's JSON block holds it.
    #[schemars(with = "serde_json::Value")]
    pub definition: RunnerPage,
    /// What the administrator still has to give before its runs can work.
    pub still_to_do: Vec<String>,
    /// The example patterns written beside it (`patterns`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub patterns: Vec<String>,
}

/// The `runner` tool.
pub struct Runner;

/// What a shipped runner is, before it is written.
struct Shipped {
    title: &'static str,
    about: String,
    page: RunnerPage,
    still: Vec<String>,
}

impl Tool for Runner {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "runner";
    const SUMMARY: &'static str = "Write a shipped runner page (sandbox/claude, sandbox/codex, sandbox/local or sandbox/demo), and the example patterns when asked, and say what is left to give it.";
    const NEEDS: Needs = Needs::Any("as");
    const WRITES: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let repo = call.repo()?;
        let Some(root) = crate::node::root_of(repo)? else {
            return Err(Stop::new(
                "this repository is no node: a runner page is written where its runs run",
            )
            .next("run it on the node's own repository, after ocx hook install"));
        };
        check_lines(&input)?;
        let shipped = match input.name.as_str() {
            "claude" => claude(&input)?,
            "codex" => codex(&input)?,
            "local" => local(&input)?,
            "demo" => demo(&input)?,
            other => {
                return Err(
                    Stop::field("name", format!("OCX ships no runner {other:?}"))
                        .next("give claude, codex, local or demo"),
                );
            }
        };
        let mut still = shipped.still;
        still.extend(credentials_to_keep(&root, &shipped.page));
        shipped
            .page
            .check()
            .map_err(|p| Stop::internal(format!("{}: {}", p.field, p.reason)))?;
        let json = serde_json::to_string_pretty(&shipped.page).map_err(Stop::internal)?;
        let text = format!(
            "# {}\n\n{}\n\nWritten by `ocx runner {}{}`. Its credentials are named here, never held: the node keeps them.\n\n```json\n{json}\n```\n",
            shipped.title,
            shipped.about,
            input.name,
            if input.terminal { " --terminal" } else { "" }
        );
        let runner = match input.terminal {
            true => format!("{}-terminal", input.name),
            false => input.name.clone(),
        };
        let page = crate::node::runner::page_name(&runner);
        call.read(format!("wiki page {page:?}"));
        let repo = call.repo()?;
        let caller = call.caller()?.clone();
        let policy = repo.hash_policy()?;
        let date = artifact::now();
        let version = |page: &str, text: &str| -> Result<Vec<u8>, Stop> {
            let current = repo.wiki_page(page)?;
            Ok(WikiPage {
                date: &date,
                name: page,
                mimetype: "text/x-markdown",
                parent: current.as_ref().map(|p| p.hash.as_str()),
                user: &caller.login,
                text,
            }
            .compose())
        };
        let mut batch = Batch::default();
        let hash = batch.add("wiki page", version(&page, &text)?, policy);
        let mut patterns = Vec::new();
        if input.patterns {
            for (name, text) in example_patterns(&runner) {
                let page = format!("{}{name}", super::pattern::PREFIX);
                let bytes = version(&page, &text)?;
                batch.add("wiki page", bytes, policy);
                patterns.push(page);
            }
        } else {
            let command = format!(
                "ocx runner --name {}{} --patterns",
                input.name,
                if input.terminal { " --terminal" } else { "" }
            );
            still.push(format!(
                "write the example patterns for it, a reviewer of dev, a fixer on fixes and a forum helper: {}",
                super::as_run_next(call, &command)
            ));
        }
        write(call, &batch, true)?;
        Ok(Output {
            page,
            version: (!call.dry_run).then_some(hash),
            definition: shipped.page,
            still_to_do: still,
            patterns,
        })
    }
}

/// The input's values written into the page refused unless each is one
/// plain line, and the service's URL unless it is http or https.
fn check_lines(input: &Input) -> Result<(), Stop> {
    for (field, v) in [
        ("model", &input.model),
        ("base_url", &input.base_url),
        ("api_key", &input.api_key),
        ("login", &input.login),
    ] {
        if let Some(v) = v
            && (v.is_empty() || v.contains(['\n', '\r', '"', '\0']))
        {
            return Err(
                Stop::field(field, "must be one line, not empty, without a quote")
                    .next(format!("give {field} as one plain line")),
            );
        }
    }
    if let Some(u) = &input.base_url
        && !(u.starts_with("http://") || u.starts_with("https://"))
    {
        return Err(
            Stop::field("base_url", format!("{u:?} is not an http or https URL"))
                .next("give the service's URL, such as https://api.example.org"),
        );
    }
    Ok(())
}

/// The command keeping each credential `page` names that the node at
/// `root` does not keep yet, saying what it is.
fn credentials_to_keep(root: &Path, page: &RunnerPage) -> Vec<String> {
    let mut still = Vec::new();
    for c in &page.credentials {
        if !crate::node::credentials::names(root).contains(&c.name) {
            still.push(format!(
                "keep the credential {} on the node: ocx credential --name {} --file FILE{}",
                c.name,
                c.name,
                match (&c.file, &c.env) {
                    (Some(f), _) => format!(" (the file each run finds at ~/{f})"),
                    (None, Some(v)) => format!(" (a file holding the key, given as {v})"),
                    _ => String::new(),
                }
            ));
        }
    }
    if let Some(m) = &page.model
        && !crate::node::credentials::names(root).contains(&m.credential)
    {
        still.push(format!(
            "keep the credential {} on the node: ocx credential --name {} --file FILE (a file holding the API key, which the run's relay holds and the run never sees)",
            m.credential, m.credential
        ));
    }
    still
}

/// The absolute path of `program` on this host's PATH, or why not.
fn installed(program: &str, install: &str) -> Result<String, Stop> {
    let found = crate::run::sandbox::on_path(program);
    found.map(|p| p.display().to_string()).ok_or_else(|| {
        Stop::field("name", format!("{program} is not installed on this host"))
            .next(format!("install it first: {install}"))
    })
}

fn credential(name: String, file: Option<&str>, env: Option<&str>) -> CredentialUse {
    CredentialUse {
        name,
        file: file.map(str::to_string),
        env: env.map(str::to_string),
    }
}

/// The model service a page names when its key is an API key: the
/// watcher's relay then holds the key and the run only a token of its own.
/// A service over plain http (a stand-in on this host) cannot be relayed,
/// and its key is given to the run as before.
fn relayed(input: &Input, kind: ModelKind, default: &str) -> Option<ModelService> {
    let credential = input.api_key.clone()?;
    let upstream = match &input.base_url {
        None => default.to_string(),
        Some(u) if u.starts_with("https://") => {
            let root = u.trim_end_matches('/');
            root.strip_suffix("/v1").unwrap_or(root).to_string()
        }
        Some(_) => return None,
    };
    Some(ModelService {
        kind,
        upstream,
        credential,
    })
}

/// The hosts a relayed page's records default to: the model service's
/// host alone (its port when not 443), so a record naming none reaches
/// nothing but its node, its relay and that host. None for a service
/// named by a number (a stand-in on this host) or for a page not relayed:
/// its records keep the network they ask for.
fn service_host(model: Option<&ModelService>) -> Vec<String> {
    let Some(u) = model.and_then(|m| url::Url::parse(&m.upstream).ok()) else {
        return Vec::new();
    };
    let Some(url::Host::Domain(name)) = u.host() else {
        return Vec::new();
    };
    let entry = match u.port() {
        Some(p) if p != 443 => format!("{name}:{p}"),
        _ => name.to_string(),
    };
    match crate::protocol::kinds::host_port(&entry) {
        Ok(_) => vec![entry],
        Err(_) => Vec::new(),
    }
}

fn claude(input: &Input) -> Result<Shipped, Stop> {
    let program = installed("claude", "npm install -g @anthropic-ai/claude-code@2.1.197")?;
    let mut command: Vec<String> = if input.terminal {
        vec![program]
    } else {
        [
            program.as_str(),
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
        ]
        .map(String::from)
        .to_vec()
    };
    if let Some(m) = &input.model {
        command.extend(["--model".to_string(), m.clone()]);
    }
    let mut env = BTreeMap::from([(
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".to_string(),
        "1".to_string(),
    )]);
    if input.terminal {
        env.insert("TERM".into(), "xterm-256color".into());
    }
    let model = relayed(
        input,
        ModelKind::AnthropicMessages,
        "https://api.anthropic.com",
    );
    if let (Some(u), None) = (&input.base_url, &model) {
        env.insert("ANTHROPIC_BASE_URL".into(), u.clone());
    }
    let credentials = sign_in(
        input,
        model.as_ref(),
        "ANTHROPIC_API_KEY",
        ("claude-login", ".claude/.credentials.json"),
    );
    let text = if input.terminal {
        (
            "Claude Code, on a terminal",
            "Claude Code's own interactive interface on the run's terminal, which a person with admin or setup may join at the node (ocx attach): the record's line its first prompt, each delivery typed in once it waits for input again. It posts through its tools; a tool its MCP servers do not give asks whoever is joined. The node gives it the run's MCP servers and tools, and settings from the run's fresh home alone.",
        )
    } else {
        (
            "Claude Code",
            "Claude Code, headless: each delivery a turn of one session, its final words posted where the delivery was asked. The node gives it the run's MCP servers and tools, and settings from the run's fresh home alone.",
        )
    };
    let mode = if input.terminal {
        InputMode::ClaudeInteractive
    } else {
        InputMode::ClaudeStreamJson
    };
    let mut shipped = agent(input, text, (command, env, credentials), mode, model);
    if input.remote {
        shipped.page.remote = vec!["--remote-control".into()];
    }
    Ok(shipped)
}

fn codex(input: &Input) -> Result<Shipped, Stop> {
    let program = installed("codex", "npm install -g @openai/codex@0.171.0")?;
    let mut command = if input.terminal {
        [
            program.as_str(),
            "--no-daemon",
            "--ask-for-approval",
            "never",
            "--sandbox",
            "danger-full-access",
        ]
        .map(String::from)
        .to_vec()
    } else {
        vec![program, "app-server".to_string()]
    };
    let key_var = "OPENAI_API_KEY";
    if let Some(m) = &input.model {
        command.extend(["-c".to_string(), format!("model=\"{m}\"")]);
    }
    let model = relayed(input, ModelKind::OpenaiResponses, "https://api.openai.com");
    if let (Some(u), None) = (&input.base_url, &model) {
        command.extend([
            "-c".to_string(),
            "model_provider=\"ocx\"".to_string(),
            "-c".to_string(),
            format!(
                "model_providers.ocx={{name=\"ocx\", base_url=\"{u}\", wire_api=\"responses\", env_key=\"{key_var}\"}}"
            ),
        ]);
    }
    let credentials = sign_in(
        input,
        model.as_ref(),
        key_var,
        ("codex-auth", ".codex/auth.json"),
    );
    if input.remote {
        return Err(Stop::field(
            "remote",
            "Codex's remote control is its own daemon (codex remote-control), not a flag of app-server",
        )
        .next("leave remote out for codex"));
    }
    let text = if input.terminal {
        (
            "Codex, on a terminal",
            "Codex's own interactive interface on the run's terminal, which a person with admin or setup may join at the node (ocx attach): the record's line its first prompt, each delivery typed in once it waits for input again. It posts through its tools. OCX's sandbox is the boundary (Codex's own is off, approvals never asked); the checkout is not a trusted project, so its .codex/config.toml is not read.",
        )
    } else {
        (
            "Codex",
            "Codex's app-server: one thread a run, each delivery a turn, its final words posted where the delivery was asked. OCX's sandbox is the boundary (Codex's own is off, approvals never asked); the checkout is not a trusted project, so its .codex/config.toml is not read.",
        )
    };
    let env = if input.terminal {
        BTreeMap::from([("TERM".to_string(), "xterm-256color".to_string())])
    } else {
        BTreeMap::new()
    };
    let mode = if input.terminal {
        InputMode::CodexInteractive
    } else {
        InputMode::CodexAppServer
    };
    Ok(agent(input, text, (command, env, credentials), mode, model))
}

/// What a shipped agent is given its key by: none when the model service
/// is relayed, the API key given as `key_var`, else the agent's own
/// sign-in kept as the credential `login` (unless the input names
/// another) and found by each run at `~/FILE`.
fn sign_in(
    input: &Input,
    model: Option<&ModelService>,
    key_var: &str,
    (login, file): (&str, &str),
) -> Vec<CredentialUse> {
    match &input.api_key {
        _ if model.is_some() => Vec::new(),
        Some(k) => vec![credential(k.clone(), None, Some(key_var))],
        None => vec![credential(
            input.login.clone().unwrap_or_else(|| login.into()),
            Some(file),
            None,
        )],
    }
}

/// A shipped agent (Claude Code or Codex) as its page names it: no home
/// of its own, no remote control, its records defaulting to the model
/// service's host when that is relayed.
fn agent(
    input: &Input,
    (title, about): (&'static str, &str),
    (command, env, credentials): (Vec<String>, BTreeMap<String, String>, Vec<CredentialUse>),
    mode: InputMode,
    model: Option<ModelService>,
) -> Shipped {
    Shipped {
        title,
        about: about.into(),
        page: RunnerPage {
            command,
            env,
            homes: Vec::new(),
            credentials,
            remote: Vec::new(),
            input: mode,
            hosts: service_host(model.as_ref()),
            model,
            prices: None,
            terminal: input.terminal,
        },
        still: Vec::new(),
    }
}

fn local(input: &Input) -> Result<Shipped, Stop> {
    let model = input.model.clone().ok_or_else(|| {
        Stop::field("model", "give the Ollama model its agent asks for")
            .next("give --model, such as qwen3:4b")
    })?;
    if input.api_key.is_some() || input.login.is_some() || input.remote || input.terminal {
        return Err(Stop::field(
            "name",
            "OCX's agent on a local model takes no key, login, remote control or terminal",
        )
        .next("leave api_key, login, remote and terminal out"));
    }
    let ocx = this_ocx()?;
    let url = input
        .base_url
        .clone()
        .unwrap_or_else(|| "http://127.0.0.1:11434".into());
    Ok(Shipped {
        title: "A local model",
        about: format!("OCX's own agent (ocx --mcp-ollama) on {model} at {url}, at most 30 requests a delivery."),
        page: RunnerPage::of(vec![
                ocx,
                "--mcp-ollama".into(),
                url.clone(),
                "--model".into(),
                model.clone(),
                "--steps".into(),
                "30".into(),
                "--context".into(),
                "32768".into(),
                "--system".into(),
                "You work on this repository through your tools. Read before you edit, run the tests, save, then say in a few lines what you did.".into(),
            ]),
        still: vec![
            format!("serve {model} on the Ollama at {url} (ollama pull {model})"),
        ],
    })
}

/// This program, by the absolute path a page names it by.
fn this_ocx() -> Result<String, Stop> {
    std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .map(|p: PathBuf| p.display().to_string())
        .map_err(|e| Stop::failed(format!("cannot tell where ocx is: {e}")))
}

/// OCX's demo agent (`ocx demo-agent`): it answers each post it hears,
/// writes a verdict on each check-in it is given, and, held to a branch,
/// saves a post's words there; no model behind it.
fn demo(input: &Input) -> Result<Shipped, Stop> {
    if input.model.is_some()
        || input.base_url.is_some()
        || input.api_key.is_some()
        || input.login.is_some()
        || input.remote
        || input.terminal
    {
        return Err(Stop::field(
            "name",
            "the demo agent takes no model, service, key, login, remote control or terminal",
        )
        .next("leave them out"));
    }
    let ocx = this_ocx()?;
    Ok(Shipped {
        title: "The demo agent",
        about: "OCX's demo agent, with no model behind it: it answers each post it hears in the same thread, writes a verdict (pass) on each check-in it is given, and, in a run held to a branch, first saves the post's words as a file there.".into(),
        page: RunnerPage::of(vec![ocx, "demo-agent".into()]),
        still: Vec::new(),
    })
}

/// The example patterns for runner `runner`: each page's name and text.
pub fn example_patterns(runner: &str) -> Vec<(&'static str, String)> {
    let page = |title: &str, about: &str, block: serde_json::Value| {
        format!(
            "# {title}

{about}

A pattern for `ocx create --pattern NAME`: the fields below are written into the record, each of the call's own in its place; the record, not this page, states the run's boundary.

```json
{}
```
",
            serde_json::to_string_pretty(&block).unwrap_or_default()
        )
    };
    vec![
        (
            "reviewer",
            page(
                "A reviewer of dev",
                "Given each check-in on the branch dev, it judges it and writes a verdict (audited, pass or fail, with its reason) against its record. It hears no one's posts.",
                serde_json::json!({
                    "runner": runner,
                    "objective": "Review each check-in on dev: write a verdict on it (pass or fail, with its reason) against this record.",
                    "checkins": ["dev"],
                    "new_branch": true,
                    "hears": [],
                    "budget": {"wall": "8h"}
                }),
            ),
        ),
        (
            "fixer",
            page(
                "A fixer on fixes",
                "Told in its thread what to fix, it commits the fix on the branch fixes and says what it did. It holds no password: its check-ins reach the repository only through its node, and only on fixes.",
                serde_json::json!({
                    "runner": runner,
                    "objective": "Fix what you are asked in this thread: commit the fix on the branch fixes, then say in the thread what you did.",
                    "restrict": {"no_password": true, "branch": "fixes"},
                    "new_branch": true,
                    "budget": {"wall": "2h"}
                }),
            ),
        ),
        (
            "helper",
            page(
                "A forum helper",
                "It answers each post it hears in its own thread, and posts nowhere else. It holds no password.",
                serde_json::json!({
                    "runner": runner,
                    "objective": "Answer each post you hear in this thread, here and nowhere else.",
                    "restrict": {"no_password": true, "own_thread": true},
                    "budget": {"wall": "8h"}
                }),
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(upstream: &str) -> ModelService {
        ModelService {
            kind: ModelKind::AnthropicMessages,
            upstream: upstream.into(),
            credential: "k".into(),
        }
    }

    #[test]
    fn a_relayed_page_defaults_its_records_to_the_model_services_host_alone() {
        let host = |u: &str| service_host(Some(&service(u)));
        assert_eq!(host("https://api.anthropic.com"), ["api.anthropic.com"]);
        assert_eq!(host("https://API.openai.com/"), ["api.openai.com"]);
        assert_eq!(host("https://models.example:8443"), ["models.example:8443"]);
        assert!(
            host("https://127.0.0.1:9443").is_empty(),
            "a number is no host name"
        );
        assert!(host("https://[::1]").is_empty());
        assert!(
            service_host(None).is_empty(),
            "a page not relayed keeps its records' network"
        );
    }
}
