//! `upstream`: brings a repository imported from git (`project --from`) up
//! to its upstream: what the upstream added since the last import, by the
//! marks kept beside the repository, onto each branch Fossil has not moved
//! past, and onto `upstream/BRANCH` where Fossil's branch has check-ins of
//! its own, so nothing of either side is lost; each new tag on its commit.
//! One run at a time; what it did is kept, and `status` shows it. With
//! `every`, the node runs it on that schedule (the repository's config row
//! `ocx-upstream-every`).

use crate::answer::Op;
use crate::git::upstream::{Brought, Upstream};
use crate::stop::{Stop, StopKind};
use crate::tool::{Call, Needs, Reach, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::git::upstream::EVERY_ROW;

/// Input of `upstream`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// How often the node brings it up from now on: a whole number and s, m, h or d (as 1h), or "never".
    #[serde(default)]
    pub every: Option<String>,
}

/// What was brought, and where it comes from.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The git repository it comes from.
    pub from: String,
    /// Each upstream branch and the Fossil branch it goes onto (a dry run: would go).
    pub onto: Vec<Onto>,
    /// What this run brought (absent in a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub brought: Option<Brought>,
    /// How often the node brings it up, when it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
}

/// An upstream branch and where it goes.
#[derive(Serialize, JsonSchema)]
pub struct Onto {
    pub branch: String,
    pub onto: String,
}

/// The `upstream` tool.
pub struct UpstreamTool;

impl Tool for UpstreamTool {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "upstream";
    const SUMMARY: &'static str = "Bring a repository imported from git up to its upstream: new commits onto each branch Fossil has not moved past, else onto upstream/BRANCH.";
    const NEEDS: Needs = Needs::Any("s");
    const WRITES: bool = true;
    const REACH: Reach = Reach::NotMcp;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        if call.cx.repository.is_none() {
            return Err(Stop::field(
                "repository",
                "upstream acts on the served repository named outright, never on a checkout's",
            )
            .next("name the served repository with --repository FILE"));
        }
        let every = match input.every.as_deref() {
            None => None,
            Some("never") => Some(String::new()),
            Some(e) => match crate::protocol::kinds::wall_seconds(e) {
                Some(s) if s >= 1 => Some(e.to_string()),
                _ => {
                    return Err(Stop::field(
                        "every",
                        format!("{e:?} is not a whole number, then s, m, h or d"),
                    )
                    .next("give every as 1h, 30m or 1d, or never"));
                }
            },
        };
        let repo = call.repo()?;
        let path = repo
            .path()
            .canonicalize()
            .unwrap_or_else(|_| repo.path().to_path_buf());
        let mut up = Upstream::of(&path).ok_or_else(|| {
            Stop::field(
                "repository",
                "this repository was not imported from git: it keeps no upstream beside it",
            )
            .next("make a repository from git with ocx project NAME --from UPSTREAM")
        })?;
        let git = crate::git::Git::locate(None).map_err(Stop::internal)?;
        let admin = call.caller()?.login.clone();
        let _lock = crate::lock::take(&up.dir.join(crate::git::upstream::LOCK), true)
            .map_err(Stop::internal)?;
        call.read(format!(
            "the upstream {} and the marks of what was imported",
            up.kept.from
        ));
        let fossil = call.fossil()?.clone();
        if let Some(e) = &every {
            call.log(Op::Fossil {
                operation: format!(
                    "config {EVERY_ROW} = {}",
                    if e.is_empty() { "never" } else { e }
                ),
                done: !call.dry_run,
            });
            if !call.dry_run {
                fossil.config_set(&path, EVERY_ROW, e)?;
            }
        }
        let (brought, onto) = if call.dry_run {
            let plan = up.plan(&git, call.repo()?).map_err(Stop::internal)?;
            call.log(Op::Fossil {
                operation: format!("fetch {} and import what it added", up.kept.from),
                done: false,
            });
            (None, plan)
        } else {
            let brought = up
                .bring_up(&git, &fossil, &path, &admin)
                .map_err(|e| match (e.kind(), e) {
                    (StopKind::Refused, e) => Stop::field("repository", format!("its upstream {}: {}", up.kept.from, refusal(e)))
                        .next("mend the upstream, then run upstream again: it brings what the marks say is new"),
                    (StopKind::Failed, e) => Stop::from(e).next("mend what it names, then run upstream again: it brings what the marks say is new"),
                })?;
            call.log(Op::Fossil {
                operation: format!(
                    "fetched {} and imported {} commit(s)",
                    up.kept.from,
                    brought.branches.iter().map(|b| b.commits).sum::<u64>()
                ),
                done: true,
            });
            crate::node::poke_repository(call.repo()?);
            let onto = brought
                .branches
                .iter()
                .map(|b| (b.branch.clone(), b.onto.clone()))
                .collect();
            (Some(brought), onto)
        };
        let every = call.repo()?.config(EVERY_ROW)?.filter(|e| !e.is_empty());
        Ok(Output {
            from: up.kept.from.clone(),
            onto: onto
                .into_iter()
                .map(|(branch, onto)| Onto { branch, onto })
                .collect(),
            brought,
            every,
        })
    }
}

/// What an upstream's refusal says, without the words every refusal of
/// git's layer begins with when it has none of its own.
fn refusal(e: crate::git::GitError) -> String {
    match e {
        crate::git::GitError::Refused(why) => why,
        other => other.to_string(),
    }
}
