//! The commands the node starts for itself, not tools: `ocx hook-poke
//! ROOT` (what Fossil's after-receive hook runs), `ocx node-daemon --root
//! ROOT` (the node's process) and `ocx watch --root ROOT --record HASH
//! [--checkin HASH]` (a run's watcher).

#![allow(clippy::disallowed_methods)] // an entry point: it reads the run's variables and starts `ocx post`, as docs/architecture.md says

use crate::node::inbox::Delivery;
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
            // Where no node takes the poke, the hook keeps the git export
            // current itself, and C5 for the runs on agent machines.
            if let Some(root) = args.get(2).map(PathBuf::from)
                && !crate::node::poke(&root)
            {
                crate::node::export_without_node(&root, &sink);
                crate::node::keep_remote_without_node(&root, &sink);
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
            Some(super::watch::main(&root, &record, checkin.as_deref()))
        }
        "demo-agent" => Some(demo_agent()),
        _ => None,
    }
}

/// The demo agent shipped with OCX, a session runner's program: it answers
/// each post it is given with a post of its own in the same thread, as the
/// run's user, from the run's clone (`post` pushes it). It reads its deliveries
/// as lines on stdin and ends when its input does.
fn demo_agent() -> i32 {
    use std::io::BufRead;
    let user = std::env::var(crate::context::RUN_USER_VAR).unwrap_or_default();
    let Ok(fossil) = crate::fossil::Fossil::locate() else {
        super::eprint("demo-agent: no fossil program\n");
        return 1;
    };
    let Ok(me) = std::env::current_exe() else {
        return 1;
    };
    let cwd = std::env::current_dir().unwrap_or_default();
    let Some(checkout) = crate::fossil::checkout::find(&cwd) else {
        super::eprint("demo-agent: not in a checkout\n");
        return 1;
    };
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        let Ok(Delivery::Post {
            post: hash,
            from,
            text,
        }) = Delivery::read(&line)
        else {
            continue;
        };
        let reply = format!("Hello {from}, I heard you say: {}", text.replace('\n', " "));
        if let Err(e) = fossil.pull(&checkout.repository) {
            super::eprint(&format!("demo-agent: {e}\n"));
            continue;
        }
        let posted = std::process::Command::new(&me)
            .args(["post", "--user", &user, "--to", &hash, "--text", &reply])
            .output();
        match posted {
            Ok(out) if out.status.success() => {}
            Ok(out) => super::eprint(&format!(
                "demo-agent: {}",
                String::from_utf8_lossy(&out.stdout)
            )),
            Err(e) => super::eprint(&format!("demo-agent: {e}\n")),
        }
    }
    0
}
