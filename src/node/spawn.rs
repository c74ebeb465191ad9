//! Starting a run's watcher: one of the node's own processes, in a
//! session of its own, its environment cleared. The one place OCX starts
//! itself.

use super::config::NodeConfig;
use super::spool::make_run_dir;
use std::ffi::OsString;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;

/// Starts the watcher of `record` (or a command run on `checkin`),
/// detached in a session of its own, its output in the run's directory.
pub fn spawn_watcher(
    root: &Path,
    cfg: &NodeConfig,
    record: &str,
    checkin: Option<&str>,
) -> std::io::Result<()> {
    let dir = NodeConfig::run_dir(root, record);
    make_run_dir(&dir)?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(dir.join("watch.log"))?;
    let mut args = vec![
        OsString::from("watch"),
        "--root".into(),
        root.into(),
        "--record".into(),
        record.into(),
    ];
    if let Some(c) = checkin {
        args.extend(["--checkin".into(), c.into()]);
    }
    let mut child = spawn_own(&cfg.ocx, &args, log)?;
    std::thread::spawn(move || child.wait());
    Ok(())
}

/// Starts one of the node's own processes: the `ocx` program `ocx` with
/// `args`, in a session of its own (so a signal to its starter's group
/// misses it), its environment cleared but for `PATH` and the starter's
/// `HOME`, its input empty and its output to `log`. The one place OCX
/// starts itself.
#[allow(clippy::disallowed_methods)] // the node's own processes, as docs/architecture.md says
pub fn spawn_own(
    ocx: &Path,
    args: &[OsString],
    log: std::fs::File,
) -> std::io::Result<std::process::Child> {
    let mut cmd = std::process::Command::new(ocx);
    cmd.args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    if let Some(home) = std::env::var_os("HOME") {
        cmd.env("HOME", home);
    }
    // SAFETY: setsid is async-signal-safe and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    cmd.spawn()
}
