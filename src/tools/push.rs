//! `push`: copies a run's new check-ins from its clone into the node's
//! repository as the run's user, so Fossil records the run's user as their
//! sender, then wakes the node. Only a run whose record restricts
//! `no_password` pushes so (C6); with `branch`, every check-in must be on it.

use crate::answer::Op;
use crate::fossil::Repository;
use crate::registry::{Call, Needs, Stop, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `push`: nothing.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {}

/// What `push` copied.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The check-ins copied (those the node's repository already had are left out).
    pub checkins: Vec<String>,
}

/// The `push` tool.
pub struct Push;

impl Tool for Push {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "push";
    const SUMMARY: &'static str =
        "Publish a no-password run's new check-ins from its clone, as the run's user.";
    const NEEDS: Needs = Needs::Any("i");
    const WRITES: bool = true;

    fn run(_: Input, call: &mut Call) -> Result<Output, Stop> {
        Ok(Output {
            checkins: publish(call)?,
        })
    }
}

/// Copies the run's check-ins the node's repository lacks into it, as the
/// run's user (nothing on a dry run but the log); answers their hashes.
/// Refused to anyone but a no-password run, and, with `branch`, when any
/// of them is on another branch, pushing none.
pub fn publish(call: &mut Call) -> Result<Vec<String>, Stop> {
    {
        let run = call
            .cx
            .run()
            .filter(|r| r.restrict.no_password == Some(true))
            .cloned()
            .ok_or_else(|| {
                Stop::new("push is for a run whose record restricts no_password")
                    .next("use fossil push from your own clone")
            })?;
        let clone = Repository::open(&run.clone).map_err(Stop::internal)?;
        let mut new = Vec::new();
        for c in clone.checkins().map_err(Stop::internal)? {
            if call
                .repo()?
                .receipt(&c.hash)
                .map_err(Stop::internal)?
                .is_none()
            {
                new.push(c);
            }
        }
        call.read(format!(
            "{} check-ins the node's repository lacks",
            new.len()
        ));
        if let Some(only) = &run.restrict.branch
            && let Some(c) = new
                .iter()
                .find(|c| c.branch.as_deref() != Some(only.as_str()))
        {
            return Err(Stop::new(format!(
                "check-in {} is on {}; this run checks in only on {only}: nothing was pushed",
                &c.hash[..10],
                c.branch.as_deref().unwrap_or("no branch")
            ))
            .next(format!("commit on {only} only, then push again")));
        }
        let hashes: Vec<String> = new.iter().map(|c| c.hash.clone()).collect();
        if !call.dry_run && !hashes.is_empty() {
            let fossil = call.fossil()?;
            let dir = tempfile::Builder::new()
                .prefix("ocx-push-")
                .tempdir()
                .map_err(|e| Stop::new(e.to_string()))?;
            let bundle = dir.path().join("push.bundle");
            for h in &hashes {
                fossil
                    .bundle_export(&run.clone, &bundle, h)
                    .map_err(Stop::internal)?;
            }
            fossil
                .import_bundle(call.repo()?.path(), &bundle, &run.user, true)
                .map_err(Stop::internal)?;
            crate::node::poke(&run.root);
        }
        call.log(Op::Store {
            artifacts: hashes.clone(),
            sender: run.user.clone(),
            published: true,
            done: !call.dry_run,
        });
        Ok(hashes)
    }
}
