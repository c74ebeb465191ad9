//! The commands the node starts for itself, not tools: `ocx hook-poke
//! ROOT` (what Fossil's after-receive hook runs), `ocx node-daemon --root
//! ROOT` (the node's process) and `ocx watch --root ROOT --record HASH
//! [--checkin HASH]` (a run's watcher).

use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;

/// Runs an internal command when `args` names one; `None` otherwise.
pub fn main(args: &[OsString]) -> Option<i32> {
    let word = args.get(1)?.to_str()?;
    let value = |flag: &str| -> Option<PathBuf> {
        let i = args.iter().position(|a| a == flag)?;
        args.get(i + 1).map(PathBuf::from)
    };
    match word {
        "hook-poke" => {
            // Fossil holds the repository until the hook has read its input,
            // and closes the hook's output: read everything, print nothing.
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            if let Some(root) = args.get(2) {
                crate::node::poke(&PathBuf::from(root));
            }
            Some(0)
        }
        "node-daemon" => {
            let root = value("--root")?;
            Some(match crate::node::daemon::run(&root) {
                Ok(()) => 0,
                Err(e) => {
                    super::eprint(&format!("ocx node-daemon: {e}\n"));
                    1
                }
            })
        }
        "watch" => {
            let root = value("--root")?;
            let record = value("--record")?.to_str()?.to_string();
            let checkin = value("--checkin").and_then(|c| c.to_str().map(str::to_string));
            Some(crate::run::watch::main(&root, &record, checkin.as_deref()))
        }
        _ => None,
    }
}
