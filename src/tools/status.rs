//! `status`: who and where the caller is: login, capabilities, repository,
//! its codes, the Fossil program, whether it is a node and which
//! restrictions the node enforces, its ceiling on each run's memory,
//! processes and disk, the host uids its runs run as, its site's policy
//! for scripts, its git export (what it last exported, what awaits, the
//! last failure), the last errors of its runs open and ended lately, and a
//! warning when the repository file is open to other accounts. Writes
//! nothing.

use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `status`: nothing.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {}

/// Who and where the caller is.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The caller's login.
    pub login: String,
    /// What the caller may do here: their letters with inherited ones.
    pub capabilities: String,
    /// The repository file.
    pub repository: String,
    /// The checkout the call was made in, if any.
    pub checkout: Option<String>,
    /// The project-code every clone of the project shares.
    pub project_code: String,
    /// This repository's server-code: a record names its node by it.
    pub server_code: String,
    /// The Fossil program OCX runs.
    pub fossil: FossilProgram,
    /// Whether this repository is a node (OCX's hook is installed in it).
    pub node: bool,
    /// The restrictions (C6) this node holds runs to (none where this is no node).
    pub restrictions_enforced: Vec<String>,
    /// What this host can enforce of a record's sandbox and budget now (on a node), as
    /// found at most a few seconds ago.
    #[schemars(with = "Option<serde_json::Value>")]
    pub preflight: Option<crate::run::Preflight>,
    /// The node's ceiling on each run's memory (bytes), processes and disk (bytes): a record
    /// naming no such limit gets it, one asking more is refused, and every run gets the disk's
    /// (on a node).
    #[schemars(with = "Option<serde_json::Value>")]
    pub ceiling: Option<crate::run::Ceiling>,
    /// The host paths a record from a sender without admin or setup may bind into its run's
    /// sandbox (each with what lies under it; `bindable` in node.json, none unless set), on a
    /// node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bindable: Option<Vec<String>>,
    /// The host uids the node's runs run as, one each, when it runs as root: its configured
    /// range, or the block it claimed at start (on a node).
    #[schemars(with = "Option<serde_json::Value>")]
    pub run_uids: Option<crate::run::uids::UidRange>,
    /// The repository's git export, when it has one: what it last exported, what awaits, and
    /// the last run's failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_export: Option<GitExport>,
    /// Where a repository imported from git keeps its upstream: the git
    /// repository, how often the node brings it up, and its last run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<UpstreamStatus>,
    /// The credentials the node keeps for its runners' runs, by name alone (on a node, as
    /// the node's own account sees them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<String>,
    /// The last error of each open run whose agent met one, and of the runs
    /// ended lately (their error kept within the last 7 days, the newest 10),
    /// newest first (on a node, as the node's own account sees them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_errors: Vec<RunError>,
    /// On a node (or an agent machine): whether the URL it is served at (its
    /// `node.json`'s `url`) serves OCX's page, asked once within 2 s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served_page: Option<bool>,
    /// Why the served URL does not serve OCX's page, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// What the served repository's site runs of scripts (on a node, or on the web page).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site: Option<Site>,
    /// Why the repository file is open to accounts other than its owner,
    /// when it is: Fossil keeps its login cookies there, each a way in as
    /// its login.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository_warning: Option<String>,
    /// On an agent machine's clone: its login, the server, the records in its care, and what
    /// it last heard from the server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<MachineStatus>,
}

/// The site's Content-Security-Policy, as status shows it.
#[derive(Serialize, JsonSchema)]
pub struct Site {
    /// The policy the site sends (`$nonce` as the setting holds it).
    pub content_security_policy: String,
    /// Whether it runs only the scripts Fossil writes, so no committed file can act as its
    /// viewer; the node keeps it so, and the page writes nothing for a signed-in viewer when it
    /// is not.
    pub runs_only_fossils_scripts: bool,
}

/// A run's last error, as status shows it.
#[derive(Serialize, JsonSchema)]
pub struct RunError {
    /// Its record, by full hash.
    pub record: String,
    /// Whether its record is still open (its run going); false once answered.
    pub open: bool,
    /// The last error its agent met.
    pub last_error: crate::node::runner::LastError,
}

/// An agent machine, as status shows it.
#[derive(Serialize, JsonSchema)]
pub struct MachineStatus {
    /// The machine's login on the server.
    pub login: String,
    /// The server it works for.
    pub server: String,
    /// Whether its node's process runs.
    pub running: bool,
    /// The records in its care (open), by full hash.
    pub records: Vec<String>,
    /// What it last heard from the server: its last wake and pull.
    pub heard: crate::node::machine::Heard,
}

/// The git export, as status shows it.
#[derive(Serialize, JsonSchema)]
pub struct GitExport {
    /// Its directory.
    pub mirror: String,
    /// The check-in it last recorded.
    pub last_exported_checkin: Option<String>,
    /// How many check-ins of the repository it has no commit of; absent where its state cannot be read.
    pub awaiting: Option<u64>,
    /// Why what awaits, or the export itself, could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
    /// When the last run let go of the export.
    pub last_run: Option<String>,
    /// Why the last run's export failed (Fossil's or git's words).
    pub last_failure: Option<String>,
}

/// The export `repo` names, shown; `None` when it names none.
/// A repository's upstream, as status shows it.
#[derive(Serialize, JsonSchema)]
pub struct UpstreamStatus {
    /// The git repository it came from.
    pub from: String,
    /// How often the node brings it up, when it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// What the last run did, its failure among it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<crate::git::upstream::Brought>,
}

fn upstream(repo: &crate::fossil::Repository) -> Result<Option<UpstreamStatus>, Stop> {
    let path = repo
        .path()
        .canonicalize()
        .unwrap_or_else(|_| repo.path().to_path_buf());
    let Some(up) = crate::git::upstream::Upstream::of(&path) else {
        return Ok(None);
    };
    Ok(Some(UpstreamStatus {
        from: up.kept.from,
        every: repo
            .config(super::upstream::EVERY_ROW)?
            .filter(|e| !e.is_empty()),
        last: up.kept.last,
    }))
}

fn git_export(repo: &crate::fossil::Repository) -> Option<GitExport> {
    let export = match crate::git::Export::of(repo) {
        Ok(Some(e)) => e,
        Ok(None) => return None,
        Err(e) => {
            return Some(GitExport {
                mirror: repo
                    .git_export_dir()
                    .ok()
                    .flatten()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default(),
                last_exported_checkin: None,
                awaiting: None,
                unreadable: Some(e.to_string()),
                last_run: None,
                last_failure: None,
            });
        }
    };
    let (last_exported_checkin, awaiting, unreadable) = match export.awaiting(repo) {
        Ok((state, n)) => (state.last_checkin, Some(n), None),
        Err(e) => (None, None, Some(e.to_string())),
    };
    let last = export.last_run();
    Some(GitExport {
        mirror: export.dir.display().to_string(),
        last_exported_checkin,
        awaiting,
        unreadable,
        last_run: last.as_ref().map(|r| r.when.clone()),
        last_failure: last.and_then(|r| r.failure),
    })
}

/// Why the repository file `path` is open to other accounts than its
/// owner's (its group or anyone may read it), when it is.
pub fn repository_warning(path: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o044 != 0).then(|| {
        format!(
            "{} may be read by other accounts than its owner (mode {mode:04o}): Fossil keeps its login cookies there, and whoever reads one signs in as its login; make it its owner's alone (chmod 600)",
            path.display()
        )
    })
}

/// The Fossil program.
#[derive(Serialize, JsonSchema)]
pub struct FossilProgram {
    pub path: String,
    pub version: String,
}

/// The `status` tool.
pub struct Status;

/// How long an ended run's last error is shown, counted from when it was kept.
const ENDED_WITHIN: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// How many ended runs' last errors are shown at most.
const ENDED_MAX: usize = 10;

/// The last errors kept in the run directories under the node's `root`:
/// each open run's, and those of the [`ENDED_MAX`] runs ended lately
/// whose error was kept within [`ENDED_WITHIN`], newest first. A run's
/// directory is kept once it ends; its record is named as its last error
/// names it, else (an error an earlier release kept) as `repo` resolves
/// its directory's name.
fn run_errors(root: &std::path::Path, repo: &crate::fossil::Repository) -> Vec<RunError> {
    use crate::node::config::NodeConfig;
    let open: std::collections::BTreeMap<std::path::PathBuf, String> =
        crate::node::wake::State::load(root)
            .open
            .into_keys()
            .map(|record| (NodeConfig::run_dir(root, &record), record))
            .collect();
    let Ok(dirs) = std::fs::read_dir(root.join("runs")) else {
        return Vec::new();
    };
    let now = std::time::SystemTime::now();
    let mut kept: Vec<(std::time::SystemTime, std::path::PathBuf)> = dirs
        .filter_map(|d| {
            let dir = d.ok()?.path();
            let at = std::fs::metadata(dir.join(crate::node::runner::LAST_ERROR))
                .ok()?
                .modified()
                .ok()?;
            let lately = now
                .duration_since(at)
                .map_or(true, |ago| ago <= ENDED_WITHIN);
            (open.contains_key(&dir) || lately).then_some((at, dir))
        })
        .collect();
    kept.sort_by_key(|k| std::cmp::Reverse(k.0));
    let mut shown = Vec::new();
    let mut ended = 0;
    for (_, dir) in kept {
        let is_open = open.contains_key(&dir);
        if !is_open && ended == ENDED_MAX {
            continue;
        }
        let Some((named, last_error)) = crate::node::runner::kept_error(&dir) else {
            continue;
        };
        let record = match (open.get(&dir), named) {
            (Some(r), _) => r.clone(),
            (None, Some(r)) => r,
            (None, None) => {
                let name = dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                match repo.resolve(&name) {
                    Ok(crate::fossil::repo::Lookup::One(_, hash)) => hash,
                    _ => name,
                }
            }
        };
        ended += usize::from(!is_open);
        shown.push(RunError {
            record,
            open: is_open,
            last_error,
        });
    }
    shown
}

impl Tool for Status {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "status";
    const SUMMARY: &'static str =
        "Who and where you are: login, capabilities, repository, Fossil, and whether it is a node.";
    const NEEDS: Needs = Needs::Nothing;
    const WRITES: bool = false;

    fn run(_: Input, call: &mut Call) -> Result<Output, Stop> {
        let repo = call.repo()?;
        let caller = call.caller()?;
        let fossil = call.fossil()?;
        let is_node = crate::node::is_node(repo)?;
        let machine = crate::node::machine_root(repo).and_then(|root| {
            let cfg = crate::node::config::NodeConfig::load(&root)?;
            Some(MachineStatus {
                login: cfg.login,
                server: cfg.url,
                running: matches!(crate::node::lock(&root.join("node.lock"), false), Ok(None)),
                records: crate::node::wake::State::load(&root)
                    .open
                    .into_keys()
                    .collect(),
                heard: crate::node::machine::Heard::load(&root),
            })
        });
        let root = crate::node::root_of(repo)?.or_else(|| crate::node::machine_root(repo));
        let cfg = root
            .as_deref()
            .and_then(crate::node::config::NodeConfig::load);
        let warning = cfg.as_ref().map(|c| super::served::page_warning(&c.url));
        let run_uids = cfg.as_ref().and_then(|c| {
            c.run_uids
                .or_else(|| root.as_deref().and_then(crate::run::uids::claimed))
        });
        let out = Output {
            login: caller.login.clone(),
            capabilities: caller.capabilities.to_string(),
            repository: repo.path().display().to_string(),
            checkout: call
                .cx
                .repository
                .is_none()
                .then(|| call.cx.checkout().map(|c| c.root.display().to_string()))
                .flatten(),
            project_code: repo.project_code()?,
            server_code: repo.server_code()?,
            fossil: FossilProgram {
                path: fossil.path().display().to_string(),
                version: fossil.version().to_string(),
            },
            node: is_node,
            restrictions_enforced: if machine.is_some() {
                crate::node::enforce::machine_restrictions_enforced()
            } else if is_node {
                crate::node::restrictions_enforced()
            } else {
                Vec::new()
            },
            preflight: is_node.then(crate::run::preflight_recent),
            bindable: is_node.then(|| {
                cfg.as_ref()
                    .map(|c| c.bindable.iter().map(|p| p.display().to_string()).collect())
                    .unwrap_or_default()
            }),
            ceiling: is_node.then(|| cfg.map(|c| c.ceiling).unwrap_or_default()),
            run_uids,
            git_export: git_export(repo),
            upstream: upstream(repo)?,
            credentials: root
                .as_deref()
                .map(crate::node::credentials::names)
                .unwrap_or_default(),
            run_errors: root
                .as_deref()
                .map(|root| run_errors(root, repo))
                .unwrap_or_default(),
            site: (is_node && machine.is_none()
                || matches!(call.cx.who, crate::context::Who::Web { .. }))
            .then(|| repo.content_security_policy().ok())
            .flatten()
            .map(|p| Site {
                runs_only_fossils_scripts: p.admits_only_fossils_scripts(),
                content_security_policy: p.text,
            }),
            served_page: warning.as_ref().map(Option::is_none),
            warning: warning.flatten(),
            repository_warning: repository_warning(repo.path()),
            machine,
        };
        call.read("the caller's login and capabilities, the repository's settings");
        Ok(out)
    }
}
