//! `rollback`: serves the previous release of OCX's page again, swapping
//! `current` and `previous` (each link renamed over the old), so a second
//! rollback undoes the first.

use crate::stop::Stop;
use crate::tool::{Call, Needs, Reach, Tool};
use crate::tools::accept::{intact, swap};
use crate::tools::release::{CURRENT, Input, PREVIOUS, Root, Serving};

/// The `rollback` tool.
pub struct Rollback;

impl Tool for Rollback {
    type Input = Input;
    type Output = Serving;
    const NAME: &'static str = "rollback";
    const SUMMARY: &'static str =
        "Serve the previous release of OCX's page again, keeping the current one as previous.";
    const NEEDS: Needs = Needs::Any("s");
    const WRITES: bool = true;
    const DESTRUCTIVE: bool = true;
    const IDEMPOTENT: bool = false;
    const REACH: Reach = Reach::NotMcp;

    fn run(input: Input, call: &mut Call) -> Result<Serving, Stop> {
        let root = Root::given_or_kept(call, input.root.as_deref())?;
        let _lock = (!call.dry_run).then(|| root.lock()).transpose()?;
        let previous = root.linked(PREVIOUS).ok_or_else(|| {
            Stop::new("there is no previous release to roll back to")
                .next("accept a staged build first; the one it replaces becomes previous")
        })?;
        let built = intact(&previous)?;
        let current = root.linked(CURRENT);
        swap(call, &root, CURRENT, &previous)?;
        if let Some(c) = &current {
            swap(call, &root, PREVIOUS, c)?;
        }
        if !call.dry_run {
            root.link_extroot().map_err(Stop::internal)?;
        }
        Ok(Serving {
            current: built,
            previous: current.as_deref().and_then(Root::built),
        })
    }
}
