//! `hook`: makes the served repository a node, or no longer one: installs
//! (or removes) OCX's after-receive hook, makes the node's own login and
//! records what the node needs under its root.

use crate::answer::Op;
use crate::node::{self, config::NodeConfig};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What to do.
#[derive(Deserialize, Serialize, JsonSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum HookAction {
    /// Install the hook: this repository becomes a node.
    Install,
    /// Remove it: the repository is no longer a node.
    Remove,
}

/// Input of `hook`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// install or remove.
    pub action: HookAction,
    /// The URL the repository is served at (http or https), which runs clone; for install.
    #[serde(default)]
    pub url: Option<String>,
    /// The node's root directory (runs, logs, state). Default: beside the repository, named REPO.ocx-node.
    #[serde(default)]
    pub root: Option<String>,
}

/// What `hook` did.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The node's root directory.
    pub root: Option<String>,
    /// The node's own login.
    pub login: Option<String>,
    /// The hook command installed.
    pub hook: Option<String>,
    /// How many OCX hooks were removed.
    pub removed: usize,
    /// What install found that works against it: Fossil's own git export
    /// hook, which OCX never installs, since it would export outside OCX's lock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// What install found of the URL: where it serves no OCX page, runs
    /// that hold their password cannot learn who sent what.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// The login install made the repository's default user, where it had
    /// none: who `ocx` acts as there without `--user`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_user: Option<String>,
}

/// The `hook` tool.
pub struct Hook;

/// The capabilities the node's own login holds: read, post to the forum
/// unmoderated, read and append to tickets. It writes on the node only.
pub const NODE_CAPABILITIES: &str = "cor4";

impl Tool for Hook {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "hook";
    const SUMMARY: &'static str =
        "Make the served repository a node (install OCX's after-receive hook), or no longer one.";
    const NEEDS: Needs = Needs::Any("s");
    const WRITES: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        match input.action {
            HookAction::Remove => remove(call),
            HookAction::Install => install(&input, call),
        }
    }
}

/// The indexes of OCX's after-receive hooks, last first (so deleting one
/// leaves the others' indexes as they were).
fn ocx_hooks(repo: &crate::fossil::Repository) -> Result<Vec<usize>, Stop> {
    Ok(repo
        .hooks()?
        .into_iter()
        .filter(|h| h.2.contains(node::HOOK_MARK))
        .map(|h| h.0)
        .rev()
        .collect())
}

/// OCX's hooks deleted: the repository no longer a node.
fn remove(call: &mut Call) -> Result<Output, Stop> {
    let repo = call.repo()?;
    let fossil = call.fossil()?.clone();
    let indexes = ocx_hooks(repo)?;
    let path = repo.path().to_path_buf();
    for i in &indexes {
        if !call.dry_run {
            fossil.hook_delete(&path, *i)?;
        }
        call.log(Op::Fossil {
            operation: format!("delete hook {i}"),
            done: !call.dry_run,
        });
    }
    Ok(Output {
        root: None,
        login: None,
        hook: None,
        removed: indexes.len(),
        note: None,
        warning: None,
        default_user: None,
    })
}

/// The repository made a node: OCX's hook installed in place of any
/// before it, the node's login made, its configuration written under its
/// root, the site's policy kept to Fossil's own scripts, and the
/// installer made the default user where there is none.
fn install(input: &Input, call: &mut Call) -> Result<Output, Stop> {
    let repo = call.repo()?;
    let fossil = call.fossil()?.clone();
    let indexes = ocx_hooks(repo)?;
    let path = repo.path().to_path_buf();
    let url = served_url(input)?;
    let root = root_of(input, &path)?;
    let server_code = repo.server_code()?;
    let login = crate::protocol::found::node_login(&server_code);
    let ocx = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .map_err(|e| Stop::failed(format!("cannot tell where ocx is: {e}")))?;
    let command = node::hook_command(&ocx, &root);
    let note = fossil_export_note(repo)?;
    let policy = repo.content_security_policy()?;
    let has_login = repo.own_capabilities(&login)?.is_some();
    // Commands printed for a person to run next name no --user:
    // where the repository has no default user, the installer becomes it.
    let default_user = match repo.default_user()? {
        Some(_) => None,
        None => Some(call.cx.caller()?.login.clone()),
    };
    if !call.dry_run {
        if let Some(user) = &default_user {
            fossil.user_default(&path, user)?;
        }
        for i in &indexes {
            fossil.hook_delete(&path, *i)?;
        }
        if !has_login {
            fossil.user_new(&path, &login, &node::random_password())?;
        }
        fossil.user_capabilities(&path, &login, NODE_CAPABILITIES)?;
        NodeConfig {
            repository: path.clone(),
            url: url.clone(),
            fossil: fossil.path().to_path_buf(),
            ocx: ocx.clone(),
            server_code,
            login: login.clone(),
            machine: None,
            ..NodeConfig::kept(&root)
        }
        .save(&root)
        .map_err(|e| Stop::field("root", format!("cannot write the node's root: {e}")))?;
        fossil.hook_add(&path, &command)?;
        node::site::keep_policy(&fossil, repo).map_err(Stop::internal)?;
    }
    let done = !call.dry_run;
    if !policy.admits_only_fossils_scripts() {
        call.log(Op::Fossil {
            operation: format!(
                "set {} to {:?}, so only the scripts Fossil writes run on the site",
                crate::fossil::csp::SETTING,
                policy.strict()
            ),
            done,
        });
    }
    if let Some(user) = &default_user {
        call.log(Op::Fossil {
            operation: format!(
                "make {user} the repository's default user, who ocx acts as there without --user"
            ),
            done,
        });
    }
    for operation in [
        format!("make the node's login {login} holding {NODE_CAPABILITIES}"),
        format!("write {}", NodeConfig::file(&root).display()),
        format!("add the after-receive hook {command}"),
    ] {
        call.log(Op::Fossil { operation, done });
    }
    Ok(Output {
        root: Some(root.display().to_string()),
        login: Some(login),
        hook: Some(command),
        removed: indexes.len(),
        note,
        warning: super::served::page_warning(&url),
        default_user,
    })
}

/// The URL the repository is served at, which install needs: http or
/// https, with a host and no login.
fn served_url(input: &Input) -> Result<String, Stop> {
    let url = input.url.clone().ok_or_else(|| {
        Stop::field("url", "install needs the URL the repository is served at")
            .next("give --url http://HOST/REPO")
    })?;
    if crate::fossil::remote::served_url(&url).is_none() {
        return Err(Stop::field(
            "url",
            format!("{url:?} is not an http or https URL with a host and no login"),
        )
        .next("give --url http://HOST/REPO"));
    }
    Ok(url)
}

/// The node's root: as given (an absolute path), else the default beside
/// the repository at `path`.
fn root_of(input: &Input, path: &std::path::Path) -> Result<PathBuf, Stop> {
    match &input.root {
        Some(r) if r.starts_with('/') => Ok(PathBuf::from(r)),
        Some(r) => Err(
            Stop::field("root", format!("{r:?} is not an absolute path"))
                .next("give an absolute path, or leave root out"),
        ),
        None => Ok(node::config::default_root(path)),
    }
}

/// What to say when Fossil's own export hook is installed: the node keeps
/// the git export current under OCX's lock, and a second exporter would run
/// outside it. OCX leaves that hook as it is and names it.
fn fossil_export_note(repo: &crate::fossil::Repository) -> Result<Option<String>, Stop> {
    let hooks = repo.fossil_export_hooks()?;
    if hooks.is_empty() {
        return Ok(None);
    }
    let named: Vec<String> = hooks
        .iter()
        .map(|(i, cmd)| format!("hook {i} ({cmd})"))
        .collect();
    Ok(Some(format!(
        "Fossil's own git export runs from {}: the node keeps the export current under OCX's lock, \
         and this second exporter runs outside it; remove it with `fossil hook delete N -R {}`",
        named.join(", "),
        repo.path().display()
    )))
}
