//! `export`: brings the served repository's git export up to date, one run
//! at a time (`crate::git::export`), and answers the run with what the
//! export's state says and how many check-ins it still lacks; its dry run
//! lists the export without exporting. Needs
//! setup, acts only on the served repository named outright, and MCP does
//! not offer it.

use crate::answer::Op;
use crate::git::{Export, GitError, LastRun, export::Wait};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `export`: nothing.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {}

/// The export, and what this call did to it.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The export's directory, as the repository's last-git-export-repo config row names it.
    pub mirror: String,
    /// What this call's exports did (absent in a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<LastRun>,
    /// The last run kept in the export (this call's own, unless a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run: Option<LastRun>,
    /// Fossil's words when the last run's export failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// How many check-ins of the repository the export has no commit of; absent where its state cannot be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub awaiting: Option<u64>,
    /// Why what awaits could not be read (the next export mends it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
    /// The newest check-in time the export holds (Fossil's watermark, which `fossil git status` calls its last export).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_export: Option<String>,
    /// The check-in the export last recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_exported_checkin: Option<String>,
    /// Where Fossil pushes after each export (`off`: nowhere; OCX never sets one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autopush: Option<String>,
    /// The git branch Fossil's trunk becomes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub main_branch: Option<String>,
}

/// The `export` tool.
pub struct ExportTool;

/// The export a repository names, or why there is none to use.
pub fn export_of(repo: &crate::fossil::Repository) -> Result<Export, Stop> {
    match Export::of(repo) {
        Ok(Some(e)) => Ok(e),
        Ok(None) => Err(Stop::field(
            "repository",
            "the repository has no git export: its last-git-export-repo config row names none",
        )
        .next("make the export once with `fossil git export DIR -R REPOSITORY`; export keeps it current after")),
        Err(e @ GitError::NotAMirror(_)) => Err(Stop::field("repository", e.to_string())
            .next("export into a new directory once with `fossil git export DIR -R REPOSITORY`")),
        Err(e) => Err(Stop::from(e)),
    }
}

impl Tool for ExportTool {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "export";
    const SUMMARY: &'static str = "Bring the served repository's git export up to date (one run at a time), and say what awaits.";
    const NEEDS: Needs = Needs::Any("s");
    const WRITES: bool = true;
    const IDEMPOTENT: bool = true;
    const REACH: crate::tool::Reach = crate::tool::Reach::NotMcp;

    fn run(_: Input, call: &mut Call) -> Result<Output, Stop> {
        if call.cx.repository.is_none() {
            return Err(Stop::field(
                "repository",
                "export acts on the served repository named outright, never on a checkout's, which may be a clone",
            )
            .next("name the served repository with --repository FILE"));
        }
        let repo = call.repo()?;
        let export = export_of(repo)?;
        let fossil = call.fossil()?.clone();
        let path = repo.path().to_path_buf();
        call.read("the repository's git export and its last run");
        let mut run = None;
        if !call.dry_run {
            let done = export
                .keep_current(&fossil, &path, Wait::ForOwnRun)
                .map_err(|e| {
                    Stop::failed(e.to_string()).next(
                        "make the export's .git writable by this account, then run export again",
                    )
                })?;
            call.log(Op::Fossil {
                operation: format!("git export into {}", export.dir.display()),
                done: true,
            });
            if let Some(failure) = done.as_ref().and_then(|r| r.failure.clone()) {
                return Err(
                    Stop::failed(format!("the git export failed: {failure}")).next(
                        "mend what Fossil names, then run export again: it exports what awaits",
                    ),
                );
            }
            run = done;
        } else {
            call.log(Op::Fossil {
                operation: format!("git export into {}", export.dir.display()),
                done: false,
            });
        }
        let repo = call.repo()?;
        let (state, awaiting, unreadable) = match export.awaiting(repo) {
            Ok((state, n)) => (Some(state), Some(n), None),
            Err(e) => (None, None, Some(e.to_string())),
        };
        call.read("what the export's state holds and what it lacks");
        let last_run = export.last_run();
        Ok(Output {
            mirror: export.dir.display().to_string(),
            run,
            last_failure: last_run.as_ref().and_then(|r| r.failure.clone()),
            last_run,
            awaiting,
            unreadable,
            last_export: state.as_ref().and_then(|s| s.last_export.clone()),
            last_exported_checkin: state.as_ref().and_then(|s| s.last_checkin.clone()),
            autopush: state.as_ref().map(|s| s.autopush.clone()),
            main_branch: state.map(|s| s.main_branch),
        })
    }
}
