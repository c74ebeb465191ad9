//! `export`: brings the served repository's git export up to date, one run
//! at a time (`crate::git::export`), and answers the run with what `fossil
//! git status` says; its dry run lists the export without exporting. Needs
//! setup, acts only on the served repository named outright, and MCP does
//! not offer it.

use crate::answer::Op;
use crate::fossil::export::GitStatus;
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
    /// How many check-ins await export, as fossil git status says; absent where it cannot say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub awaiting: Option<u64>,
    /// Why what awaits could not be read (the next export mends it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
    /// When Fossil last exported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_export: Option<String>,
    /// The check-in the export last recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_exported_checkin: Option<String>,
    /// Where Fossil pushes after each export (OCX never sets one).
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
        Err(e) => Err(Stop::internal(e)),
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
                    Stop::new(e.to_string()).next(
                        "make the export's .git writable by this account, then run export again",
                    )
                })?;
            call.log(Op::Fossil {
                operation: format!("git export into {}", export.dir.display()),
                done: true,
            });
            if let Some(failure) = done.as_ref().and_then(|r| r.failure.clone()) {
                return Err(Stop::new(format!("the git export failed: {failure}")).next(
                    "mend what Fossil names, then run export again: it exports what awaits",
                ));
            }
            run = done;
        } else {
            call.log(Op::Fossil {
                operation: format!("git export into {}", export.dir.display()),
                done: false,
            });
        }
        let status = fossil.git_status(&path).unwrap_or_else(|e| GitStatus {
            unreadable: Some(e.to_string()),
            ..GitStatus::default()
        });
        call.read("what fossil git status says");
        let last_run = export.last_run();
        Ok(Output {
            mirror: export.dir.display().to_string(),
            run,
            last_failure: last_run.as_ref().and_then(|r| r.failure.clone()),
            last_run,
            awaiting: status.awaiting,
            unreadable: status.unreadable,
            last_export: status.last_export,
            last_exported_checkin: export.last_exported_checkin(),
            autopush: status.autopush,
            main_branch: status.main_branch,
        })
    }
}
