//! `accept`: makes the build staged as next the current release of OCX's
//! page, atomically (one link renamed over another), keeping the one
//! before as `previous`. A staged build whose files no longer match its
//! inventory is refused before anything changes, so the current one goes
//! on serving.

use crate::answer::Op;
use crate::stop::Stop;
use crate::tool::{Call, Needs, Reach, Tool};
use crate::tools::release::{self, Built, CURRENT, Input, NEXT, PREVIOUS, Root, Serving};

/// The `accept` tool.
pub struct Accept;

impl Tool for Accept {
    type Input = Input;
    type Output = Serving;
    const NAME: &'static str = "accept";
    const SUMMARY: &'static str = "Make the build staged as next the current release of OCX's page, keeping the one before as previous.";
    const NEEDS: Needs = Needs::Any("s");
    const WRITES: bool = true;
    const DESTRUCTIVE: bool = true;
    const REACH: Reach = Reach::NotMcp;

    fn run(input: Input, call: &mut Call) -> Result<Serving, Stop> {
        let root = Root::given_or_kept(call, input.root.as_deref())?;
        let _lock = (!call.dry_run).then(|| root.lock()).transpose()?;
        let next = root.linked(NEXT).ok_or_else(|| {
            Stop::new("nothing is staged as next").next("stage a check-in first: ocx stage CHECKIN")
        })?;
        let built = intact(&next)?;
        let current = root.linked(CURRENT);
        let previous = current.as_deref().and_then(Root::built);
        if let Some(c) = &current {
            swap(call, &root, PREVIOUS, c)?;
        }
        swap(call, &root, CURRENT, &next)?;
        call.log(Op::Fossil {
            operation: format!("unlink {NEXT}"),
            done: !call.dry_run,
        });
        if !call.dry_run {
            root.link(NEXT, None).map_err(Stop::internal)?;
            root.link_extroot().map_err(Stop::internal)?;
        }
        Ok(Serving {
            current: built,
            previous,
        })
    }
}

/// What the staged build in `dir` keeps of itself, refused unless its
/// files still match its inventory.
pub fn intact(dir: &std::path::Path) -> Result<Built, Stop> {
    let built = Root::built(dir).ok_or_else(|| {
        Stop::new(format!("{} keeps no record of its build", dir.display()))
            .next("stage its check-in again")
    })?;
    let now = release::inventory(dir).map_err(Stop::internal)?;
    if now != built.inventory {
        let changed: Vec<&str> = built
            .inventory
            .keys()
            .chain(now.keys())
            .filter(|k| built.inventory.get(*k) != now.get(*k))
            .map(String::as_str)
            .collect();
        return Err(Stop::new(format!(
            "the build of {} no longer matches its inventory ({} changed); nothing was changed",
            built.checkin.get(..10).unwrap_or(&built.checkin),
            changed.join(", ")
        ))
        .next("stage its check-in again"));
    }
    Ok(built)
}

/// Points link `name` at `dir`, logged.
pub fn swap(call: &mut Call, root: &Root, name: &str, dir: &std::path::Path) -> Result<(), Stop> {
    call.log(Op::Fossil {
        operation: format!(
            "link {name} to {}",
            dir.strip_prefix(&root.dir).unwrap_or(dir).display()
        ),
        done: !call.dry_run,
    });
    if !call.dry_run {
        root.link(name, Some(dir)).map_err(|e| {
            Stop::failed(format!("{name} could not be linked: {e}"))
                .next("what serves is whatever current led to before; mend the release root, then try again")
        })?;
    }
    Ok(())
}
