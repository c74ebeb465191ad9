//! `stage`: builds OCX's page from a check-in of the served repository in
//! a sandbox, by the build and gate commands the release root's
//! `release.json` names (the administrator's, never the check-in's),
//! keeps all that both printed in `staged/CHECKIN/gate.log` as they run,
//! and offers the build as `ocx-cgi-next` beside the current page. A
//! build or gate that fails is refused with its last lines, and nothing
//! is offered. Setup may stage; so may a run whose record allows `stage`.

use crate::answer::Op;
use crate::fossil::repo::{CheckinFile, Lookup};
use crate::run::{BudgetLimits, Forbidden, Program, SandboxFields};
use crate::stop::{Stop, StopKind};
use crate::tool::{Call, Needs, Reach, Tool};
use crate::tools::release::{self, Built, CURRENT, NEXT, PREVIOUS, Root};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// How many of the log's last lines a refusal quotes.
pub const LAST_LINES: usize = 20;

/// Input of `stage`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The check-in to build: a hash or its prefix, or a branch (its newest check-in).
    pub checkin: String,
    /// The release root; without it, the one the repository's configuration names (set by the first stage given one).
    #[serde(default)]
    pub root: Option<String>,
}

/// What was staged.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The check-in built, in full.
    pub checkin: String,
    /// Where its staged build is.
    pub staged: String,
    /// The log of all its build and gate printed.
    pub gate_log: String,
    /// The build offered as next, with its inventory (absent in a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub built: Option<Built>,
}

/// The `stage` tool.
pub struct Stage;

impl Tool for Stage {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "stage";
    const SUMMARY: &'static str = "Build OCX's page from a check-in in a sandbox by the release root's build and gate commands, and offer it as ocx-cgi-next when its gate passes.";
    const NEEDS: Needs = Needs::AnyOrRun("s", "stage");
    const WRITES: bool = true;
    const REACH: Reach = Reach::NotPage;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let run = matches!(call.cx.who, crate::context::Who::Run(_));
        if call.cx.repository.is_none() && !run {
            return Err(Stop::field(
                "repository",
                "stage builds from the served repository named outright, never a checkout's",
            )
            .next("name the served repository with --repository FILE"));
        }
        let root = Root::given_or_kept(call, input.root.as_deref())?;
        if run && !root.is_kept() {
            return Err(Stop::field(
                "root",
                format!(
                    "a run stages only into the release root the repository's configuration names ({})",
                    root.kept.as_deref().unwrap_or("none")
                ),
            )
            .next("leave root out; an administrator names the root by staging once with --root"));
        }
        let (rid, checkin) = resolve_checkin(call.repo()?, &input.checkin)?;
        let dir = root.staged(&checkin);
        for link in [CURRENT, PREVIOUS] {
            if root.linked(link).is_some_and(|d| d == dir) {
                return Err(Stop::field(
                    "checkin",
                    format!(
                        "{} is already staged and is the {link} release",
                        &checkin[..10]
                    ),
                )
                .next("accept or roll back to it; a release in use is never built over"));
            }
        }
        let files = call.repo()?.checkin_files(rid)?;
        call.read(format!(
            "the {} files of check-in {}",
            files.len(),
            &checkin[..10]
        ));
        let log = dir.join(release::GATE_LOG);
        let root_text = root.dir.display().to_string();
        let keep_root = !run && !root.is_kept();
        if keep_root {
            call.log(Op::Fossil {
                operation: format!("config {} = {root_text}", release::ROOT_ROW),
                done: false,
            });
        }
        call.log(Op::Fossil {
            operation: format!(
                "build {} in a sandbox by {:?}, then its gate {:?}, printing to {}",
                &checkin[..10],
                root.config.build,
                root.config.gate,
                log.display()
            ),
            done: false,
        });
        call.log(Op::Fossil {
            operation: format!("offer it as {NEXT} (ocx-cgi-next)"),
            done: false,
        });
        let out = |built| Output {
            checkin: checkin.clone(),
            staged: dir.display().to_string(),
            gate_log: log.display().to_string(),
            built,
        };
        if call.dry_run {
            return Ok(out(None));
        }
        let _lock = root.lock()?;
        if keep_root {
            let path = call.repo()?.path().to_path_buf();
            call.fossil()?
                .config_set(&path, release::ROOT_ROW, &root_text)?;
        }
        if root.linked(NEXT).is_some_and(|d| d == dir) {
            root.link(NEXT, None).map_err(Stop::internal)?;
            root.link_extroot().map_err(Stop::internal)?;
        }
        let built = build(call, &root, &dir, &checkin, &files)?;
        root.link(NEXT, Some(&dir)).map_err(Stop::internal)?;
        root.link_extroot().map_err(Stop::internal)?;
        for op in call.log.iter_mut() {
            if let Op::Fossil { done, .. } = op {
                *done = true;
            }
        }
        Ok(out(Some(built)))
    }
}

/// The check-in `name` names: a hash or its prefix, else a branch's newest.
fn resolve_checkin(repo: &crate::fossil::Repository, name: &str) -> Result<(i64, String), Stop> {
    let unknown = || {
        Stop::field(
            "checkin",
            format!("{name:?} names no check-in of this repository"),
        )
        .next("give a check-in's hash (or its prefix) or a branch")
    };
    let hex = name.len() >= 4
        && name
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
    if hex {
        match repo.resolve(name)? {
            Lookup::One(rid, hash) if repo.is_checkin(rid)? => return Ok((rid, hash)),
            Lookup::Several => {
                return Err(Stop::field(
                    "checkin",
                    format!("{name:?} is the prefix of more than one artifact"),
                )
                .next("give more of the hash"));
            }
            _ => {}
        }
    }
    match repo.branch_tip(name)? {
        Some(rid) => Ok((rid, repo.hash_of(rid)?)),
        None => Err(unknown()),
    }
}

/// Writes the check-in's files where the build runs, builds and gates it
/// in a sandbox, and keeps the program it made with its inventory.
fn build(
    call: &mut Call,
    root: &Root,
    dir: &Path,
    checkin: &str,
    files: &[CheckinFile],
) -> Result<Built, Stop> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(Stop::internal)?;
    }
    std::fs::create_dir_all(dir).map_err(Stop::internal)?;
    let mut log = std::fs::OpenOptions::new()
        .create_new(true)
        .read(true)
        .append(true)
        .mode(0o644)
        .open(dir.join(release::GATE_LOG))
        .map_err(Stop::internal)?;
    let work = tempfile::Builder::new()
        .prefix("ocx-stage-")
        .tempdir()
        .map_err(Stop::internal)?;
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o711))
        .map_err(Stop::internal)?;
    let src = work.path().join("src");
    let home = work.path().join("home");
    std::fs::create_dir(&src).map_err(Stop::internal)?;
    std::fs::create_dir(&home).map_err(Stop::internal)?;
    write_checkin(call, &src, checkin, files)?;
    let wall = crate::protocol::kinds::wall_seconds(&root.config.wall)
        .map(Duration::from_secs)
        .ok_or_else(|| {
            Stop::field(
                "root",
                format!(
                    "release.json's wall {:?} is not a whole number then s, m, h or d",
                    root.config.wall
                ),
            )
        })?;
    let (network, wall) = within_record(call, root.config.network, wall)?;
    let forbidden = Forbidden {
        paths: [
            Some(root.dir.clone()),
            Some(call.repo()?.path().to_path_buf()),
            root.config.extroot.clone(),
        ]
        .into_iter()
        .flatten()
        .chain(crate::node::root_of(call.repo()?).ok().flatten())
        .collect(),
    };
    let (_claim, lease) = if nix::unistd::geteuid().is_root() {
        let claim = crate::run::uids::claim(&root.dir, None).map_err(Stop::internal)?;
        let lease = crate::run::uids::lease(&root.dir).map_err(Stop::internal)?;
        (Some(claim), Some(lease))
    } else {
        (None, None)
    };
    for (step, command) in [("build", &root.config.build), ("gate", &root.config.gate)] {
        writeln!(log, "== {step}: {}", command.join(" ")).map_err(Stop::internal)?;
        let program = Program {
            command: command.clone(),
            env: root.config.env.clone(),
            homes: Vec::new(),
            home: Some(home.clone()),
        };
        let sandbox = SandboxFields {
            network,
            read_only: root.config.read_only.clone(),
            read_write: Vec::new(),
        };
        let budget = BudgetLimits::wall(wall);
        let name = format!("stage-{}-{step}", &checkin[..16]);
        let mut plan = crate::run::plan(&name, &src, &sandbox, &budget, &program, &forbidden)
            .map_err(|e| not_started(format!("the {step} cannot be sandboxed: {e}"), &e))?;
        if let Some(l) = &lease {
            plan.run_as(l.account.clone());
            // The administrator's own paths (a toolchain under root's home) are
            // reached for the build's account when it may read them itself.
            plan.reach_closed(&work.path().join("reach"));
        }
        let out = log.try_clone().map_err(Stop::internal)?;
        let err = log.try_clone().map_err(Stop::internal)?;
        let ended = crate::run::spawn(&plan, std::process::Stdio::null(), out.into(), err.into())
            .map_err(|e| not_started(format!("the {step} did not start: {e}"), &e))?
            .wait()
            .map_err(|e| Stop::failed(format!("the {step} did not end as it should: {e}")))?;
        if ended.code != Some(0) || ended.limit.is_some() {
            let why = match (&ended.limit, ended.code) {
                (Some(l), _) => format!("reached its {l} limit"),
                (None, Some(c)) => format!("exited {c}"),
                (None, None) => "was ended by a signal".into(),
            };
            let _ = writeln!(log, "== the {step} {why}");
            return Err(Stop::field(
                "checkin",
                format!(
                    "the {step} of {} {why}; nothing is offered. Its last lines:\n{}",
                    &checkin[..10],
                    last_lines(&mut log, LAST_LINES)
                ),
            )
            .next(format!(
                "read all it printed in {}",
                dir.join(release::GATE_LOG).display()
            )));
        }
        writeln!(log, "== the {step} passed").map_err(Stop::internal)?;
    }
    keep_built(root, &src, dir, checkin)
}

/// The check-in's files written under `src`, each as its check-in holds
/// it (executable or not), none through a link or outside the tree.
fn write_checkin(
    call: &Call,
    src: &Path,
    checkin: &str,
    files: &[CheckinFile],
) -> Result<(), Stop> {
    let repo = call.repo()?;
    for f in files {
        let Some(relative) = safe_path(&f.path) else {
            return Err(Stop::field(
                "checkin",
                format!(
                    "check-in {} names a file {:?} that is no path inside its tree",
                    &checkin[..10],
                    f.path
                ),
            )
            .next("stage another check-in: this one's files cannot be written where it says"));
        };
        let bytes = repo.content(f.rid)?.ok_or_else(|| {
            Stop::new(format!(
                "this repository lacks the content of {} (a phantom)",
                f.path
            ))
            .next("pull the repository whole, then stage again")
        })?;
        let path = src.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(Stop::internal)?;
        }
        std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(if f.executable { 0o755 } else { 0o644 })
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&path)
            .and_then(|mut file| file.write_all(&bytes))
            .map_err(|e| Stop::new(format!("{}: {e}", f.path)))?;
    }
    Ok(())
}

/// The program the build made (and the page's hand-off program, when it
/// made one) kept in `dir`'s `bin/`, with the check-in, when and the
/// inventory written beside it.
fn keep_built(root: &Root, src: &Path, dir: &Path, checkin: &str) -> Result<Built, Stop> {
    let made = artifact(src, &root.config.artifact)?;
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).map_err(Stop::internal)?;
    copy_program(&made, &bin.join("ocx")).map_err(Stop::internal)?;
    // The page's hand-off program, when the build made one beside the program.
    let handoff = Path::new(&root.config.artifact).with_file_name(release::HANDOFF);
    if let Some(handoff) = handoff.to_str()
        && src.join(handoff).exists()
    {
        let made = artifact(src, handoff)?;
        copy_program(&made, &bin.join(release::HANDOFF)).map_err(Stop::internal)?;
    }
    let built = Built {
        checkin: checkin.to_string(),
        built: crate::fossil::artifact::now(),
        inventory: release::inventory(dir).map_err(Stop::internal)?,
    };
    std::fs::write(
        dir.join(release::CONFIG),
        serde_json::to_vec_pretty(&built).map_err(Stop::internal)?,
    )
    .map_err(Stop::internal)?;
    Ok(built)
}

/// The build or the gate not started, as `said` says: a refusal naming
/// `root` when the administrator's `release.json` cannot be honoured (a
/// path it names or its command, missing, forbidden or not usable by the
/// build's account, or that account itself), else a failure of the host
/// beneath it (bubblewrap, a cgroup, the directories OCX makes).
fn not_started(said: String, e: &crate::run::SandboxError) -> Stop {
    use crate::run::SandboxError as E;
    if e.kind() == StopKind::Failed {
        return Stop::failed(said);
    }
    match e {
        E::Path { field, .. } | E::Forbidden { field, .. }
            if matches!(*field, "sandbox.read_only" | "program.command") =>
        {
            Stop::field("root", said).next(
                "name in release.json paths that exist, lie outside the repository, the release root, the extroot and the node's root, and that other accounts may read (its commands, execute); a directory above them may stay closed",
            )
        }
        E::Command(_) | E::Env(_) => {
            Stop::field("root", said).next("correct the administrator's release.json")
        }
        E::Account { .. } | E::Probe { .. } => Stop::field("root", said).next(
            "stage as an account other than root: its build then runs as that account, not one of its own",
        ),
        _ => Stop::failed(said),
    }
}

/// A check-in's file name as a path inside its tree, or `None` when it
/// would lead out of it (absolute, `..`, or empty parts).
/// The network and wall a build may have: `release.json`'s, and for a run
/// no more than its own record allows it, since a run stages a check-in it
/// may have written: the host's network only where the record gives the
/// run the host's network with no list of hosts (a stage has no proxy to
/// hold one), and no longer than the record's wall.
fn within_record(call: &Call, network: bool, wall: Duration) -> Result<(bool, Duration), Stop> {
    let crate::context::Who::Run(scope) = &call.cx.who else {
        return Ok((network, wall));
    };
    let repo = call.repo()?;
    let Lookup::One(rid, hash) = repo.resolve(&scope.record)? else {
        return Err(Stop::failed(
            "the run's record cannot be found in the repository",
        ));
    };
    let Some(standing) = crate::protocol::found::record(repo, rid, &hash)? else {
        return Err(Stop::failed("the run's record cannot be read"));
    };
    let record = standing.record;
    let record_wall = crate::protocol::kinds::wall_seconds(&record.budget.wall)
        .map(Duration::from_secs)
        .unwrap_or(wall);
    Ok((
        network && record.sandbox.network && record.sandbox.hosts.is_none(),
        wall.min(record_wall),
    ))
}

fn safe_path(name: &str) -> Option<PathBuf> {
    let path = Path::new(name);
    if name.is_empty() || name.contains('\0') || name.split('/').any(str::is_empty) {
        return None;
    }
    path.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then(|| path.to_path_buf())
}

/// The program the build made: a regular file inside the built tree, named
/// by the administrator's `artifact`, never reached through a link.
fn artifact(src: &Path, named: &str) -> Result<PathBuf, Stop> {
    let refuse = |why: String| {
        Stop::field("root", format!("release.json's artifact {named:?} {why}"))
            .next("name the file the build makes, relative to the check-in's files")
    };
    let relative =
        safe_path(named).ok_or_else(|| refuse("is no path inside the check-in's files".into()))?;
    let real = src
        .join(&relative)
        .canonicalize()
        .map_err(|e| refuse(format!("was not made: {e}")))?;
    let top = src.canonicalize().map_err(Stop::internal)?;
    if real != top.join(&relative) {
        return Err(refuse("is reached through a symbolic link".into()));
    }
    let meta = std::fs::symlink_metadata(&real).map_err(Stop::internal)?;
    if !meta.file_type().is_file() {
        return Err(refuse("is not a regular file".into()));
    }
    Ok(real)
}

/// Copies the built program to `to`, opened without following a link, 0755.
fn copy_program(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut src = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(from)?;
    let mut dst = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o755)
        .open(to)?;
    std::io::copy(&mut src, &mut dst)?;
    dst.sync_all()
}

/// The last `n` lines of the log.
fn last_lines(log: &mut std::fs::File, n: usize) -> String {
    let len = log.seek(SeekFrom::End(0)).unwrap_or(0);
    let from = len.saturating_sub(64 * 1024);
    let mut text = String::new();
    if log.seek(SeekFrom::Start(from)).is_ok() {
        let mut bytes = Vec::new();
        let _ = log.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_name_leads_nowhere_outside_the_tree() {
        assert_eq!(safe_path("src/main.rs"), Some(PathBuf::from("src/main.rs")));
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            "a/",
            "a\0b",
        ] {
            assert_eq!(safe_path(bad), None, "{bad:?}");
        }
    }
}
