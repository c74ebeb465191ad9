//! Attacks on `ocx project --from` and `ocx upstream` by the git repository
//! they are given: a URL naming a transport that runs a command or talks
//! on a descriptor, a local repository whose config or hooks would run
//! one, submodules whose URLs would, and names (refs, files, links) meant
//! to reach outside or to confuse Fossil. Each is made for real with git
//! and Fossil; each plants a marker command whose file, in the test's
//! own directory, must never appear.

use crate::project::{git, ocx, place};
use crate::support::{fossil, fossil_as};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

/// `ocx project` with `input` in `dir`, ended if it has not answered in
/// 30 seconds: its answer, or `None` when it had to be ended.
fn project_within(dir: &Path, input: &serde_json::Value, dry: bool) -> Option<crate::support::Run> {
    within_30s(
        Command::new(crate::support::ocx_bin())
            .args(["project", "--input", &input.to_string(), "--json"])
            .args(dry.then_some("--dry-run"))
            .current_dir(dir)
            .env_remove("FOSSIL_USER")
            .env("USER", "nobody-here"),
    )
}

/// Runs `c`, ended if it has not answered in 30 seconds: what it did, or
/// `None` when it had to be ended.
fn within_30s(c: &mut Command) -> Option<crate::support::Run> {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    Some(crate::support::Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// A git repository in `dir/NAME` with one commit on `main`.
fn repository(dir: &Path, name: &str) -> PathBuf {
    let up = dir.join(name);
    std::fs::create_dir_all(&up).unwrap();
    git(&up, &["init", "-q", "-b", "main"]);
    std::fs::write(up.join("a.txt"), "one\n").unwrap();
    git(&up, &["add", "a.txt"]);
    git(&up, &["commit", "-qm", "one"]);
    up
}

/// `fossil ARGS` on `repo`, which must succeed; what it printed.
fn fossil_on(repo: &Path, args: &[&str]) -> String {
    let out = Command::new(fossil())
        .args(args)
        .arg("-R")
        .arg(repo)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fossil {args:?}: {}",
        crate::support::said(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ocx upstream` on `dir/demo.fossil`, as its administrator.
fn bring_up(dir: &Path) -> serde_json::Value {
    ocx(dir, &["upstream", "-R", "demo.fossil", "--user", "admin"]).ok()
}

/// Git's `ext::` runs a command and `fd::` talks on a descriptor (`fd::0`
/// waited forever on the old code, which left git's defaults to decide:
/// they allow `fd::` from a URL the person gave); an ssh URL or scp-like
/// address whose host begins with `-` would be an option to ssh (git
/// itself blocks it; now refused before git). Each is refused naming
/// `from`, in a dry run too, runs nothing and makes nothing.
#[test]
fn a_from_naming_a_transport_that_runs_a_command_or_an_option_is_refused_naming_from() {
    let dir = place();
    let marker = dir.path().join("pwned");
    let m = marker.to_str().unwrap();
    let before = names(dir.path());
    for from in [
        format!("ext::sh -c touch% {m}"),
        format!("ext::sh -c 'touch {m}'"),
        "fd::0".to_string(),
        "fd::1,0".to_string(),
        "testgit::/nowhere".to_string(),
        format!("ssh://-oProxyCommand=touch% {m}/x"),
        format!("-oProxyCommand=touch {m}:x"),
        "git@-oProxyCommand=true:x".to_string(),
        "ftp://127.0.0.1/x.git".to_string(),
        "/tmp/x\nhooks".to_string(),
    ] {
        for dry in [true, false] {
            let input = serde_json::json!({"name": "demo", "from": from});
            let r = project_within(dir.path(), &input, dry)
                .unwrap_or_else(|| panic!("{from:?} kept project waiting, ended after 30 s"));
            assert_eq!(r.refused(), "from", "{from:?}: {}", r.stdout);
            let reason = r.answer()["stopped"]["reason"].to_string();
            assert!(
                !reason.contains("git ls-remote failed"),
                "{from:?} is refused before git is asked: {reason}"
            );
        }
        assert!(!marker.exists(), "{from:?} ran its command");
        assert_eq!(names(dir.path()), before, "{from:?} made nothing");
    }
}

/// A local repository (as a directory and as a `file://` URL) whose own
/// config names commands (`core.fsmonitor`, `core.sshCommand`,
/// `uploadpack.packObjectsHook`, `core.alternateRefsCommand`,
/// `core.pager`, an `[include] path` naming a file that sets more) and
/// whose hooks would run on a checkout, a fetch or an upload: project
/// mirrors it and upstream fetches it, and none runs. This held on the
/// old code too (git reads no hook of the repository it reads from and
/// takes packObjectsHook only from protected config); OCX now also reads
/// a directory as a URL (`--no-local`) and pins `core.hooksPath` and
/// `core.fsmonitor` on every command line.
#[test]
fn a_local_upstream_whose_config_and_hooks_name_commands_runs_none() {
    let dir = place();
    let marker = |what: &str| dir.path().join(format!("pwned-{what}"));
    let up = repository(dir.path(), "up");
    let included = dir.path().join("included.cfg");
    std::fs::write(
        &included,
        format!(
            "[core]\n\tfsmonitor = touch {}\n\tsshCommand = touch {}\n[uploadpack]\n\tpackObjectsHook = touch {};\n",
            marker("included-fsmonitor").display(),
            marker("included-ssh").display(),
            marker("included-hook").display()
        ),
    )
    .unwrap();
    let hooks = dir.path().join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for (key, value) in [
        (
            "core.fsmonitor",
            format!("touch {}", marker("fsmonitor").display()),
        ),
        (
            "core.sshCommand",
            format!("touch {}", marker("ssh").display()),
        ),
        (
            "uploadpack.packObjectsHook",
            format!("touch {};", marker("pack-hook").display()),
        ),
        (
            "core.alternateRefsCommand",
            format!("touch {}", marker("alternate-refs").display()),
        ),
        ("core.pager", format!("touch {}", marker("pager").display())),
        ("protocol.ext.allow", "always".into()),
        ("core.hooksPath", hooks.display().to_string()),
        ("include.path", included.display().to_string()),
    ] {
        git(&up, &["config", key, &value]);
    }
    use std::os::unix::fs::PermissionsExt;
    for hook in [
        "pre-upload-pack",
        "post-checkout",
        "post-merge",
        "reference-transaction",
        "post-update",
        "pre-receive",
        "update",
        "post-receive",
        "fsmonitor-watchman",
    ] {
        for at in [hooks.join(hook), up.join(".git/hooks").join(hook)] {
            std::fs::write(
                &at,
                format!("#!/bin/sh\ntouch {}\n", marker(hook).display()),
            )
            .unwrap();
            std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    let url = format!("file://{}", up.display());
    for (name, from) in [("demo", up.to_str().unwrap()), ("byurl", url.as_str())] {
        ocx(dir.path(), &["project", name, "--from", from]).ok();
    }
    std::fs::write(up.join("a.txt"), "one\ntwo\n").unwrap();
    // The upstream's own commit, its hooks and monitor kept from running.
    git(
        &up,
        &[
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "commit",
            "-qam",
            "two",
        ],
    );
    let brought = bring_up(dir.path());
    assert_eq!(
        brought["brought"]["branches"][0]["commits"], 1,
        "{brought:#}"
    );
    let ran: Vec<String> = names(dir.path())
        .into_iter()
        .filter(|n| n.starts_with("pwned-"))
        .collect();
    assert!(ran.is_empty(), "ran: {ran:?}");
}

/// A repository whose submodules' URLs would run a command (`ext::`,
/// an ssh host beginning with `-`) and whose paths would lead out of
/// it: project and upstream never clone a submodule, its gitlink is no
/// file of Fossil's, and `.gitmodules` is only a file. This held on the
/// old code (a mirror is bare and never recurses).
#[test]
fn submodules_whose_urls_would_run_a_command_are_never_followed() {
    let dir = place();
    let marker = dir.path().join("pwned");
    let up = repository(dir.path(), "up");
    std::fs::write(
        up.join(".gitmodules"),
        format!(
            "[submodule \"x\"]\n\tpath = sub\n\turl = ext::sh -c touch% {m}\n[submodule \"../../escape\"]\n\tpath = ../escape\n\turl = ssh://-oProxyCommand=touch% {m}/x\n",
            m = marker.display()
        ),
    )
    .unwrap();
    let head = git(&up, &["rev-parse", "HEAD"]);
    git(
        &up,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{},sub", head.trim()),
        ],
    );
    git(&up, &["add", ".gitmodules"]);
    git(&up, &["commit", "-qm", "submodules"]);
    ocx(
        dir.path(),
        &["project", "demo", "--from", up.to_str().unwrap()],
    )
    .ok();
    git(&up, &["commit", "-q", "--allow-empty", "-m", "more"]);
    bring_up(dir.path());
    let repo = dir.path().join("demo.fossil");
    let files = fossil_on(&repo, &["ls", "-r", "trunk"]);
    assert_eq!(
        files.lines().collect::<Vec<_>>(),
        [".gitmodules", "a.txt"],
        "{files}"
    );
    assert!(!marker.exists(), "a submodule's URL ran its command");
    assert!(
        !dir.path().join("escape").exists()
            && !dir.path().parent().unwrap().join("escape").exists()
    );
}

/// A commit of `up` on `HEAD` whose tree holds `a.txt` and the file
/// `name` (any bytes, as git's transfer does not check a tree), on the
/// new branch `branch`.
fn commit_naming(dir: &Path, up: &Path, name: &[u8], branch: &str) {
    let blob = git(up, &["hash-object", "-w", "a.txt"]);
    let blob = hex::decode(blob.trim()).unwrap();
    let mut entries: Vec<&[u8]> = vec![name, b"a.txt"];
    entries.sort();
    let mut tree = Vec::new();
    for entry in entries {
        tree.extend_from_slice(b"100644 ");
        tree.extend_from_slice(entry);
        tree.push(0);
        tree.extend_from_slice(&blob);
    }
    let raw = dir.join("tree.bin");
    std::fs::write(&raw, &tree).unwrap();
    let tree = git(
        up,
        &[
            "hash-object",
            "-t",
            "tree",
            "--literally",
            "-w",
            raw.to_str().unwrap(),
        ],
    );
    std::fs::remove_file(&raw).unwrap();
    let commit = git(
        up,
        &["commit-tree", tree.trim(), "-p", "HEAD", "-m", "named"],
    );
    git(
        up,
        &["update-ref", &format!("refs/heads/{branch}"), commit.trim()],
    );
}

/// Names meant to confuse: a branch `-x` and a tag `-t` (refs git itself
/// allows), files Fossil reserves (`.fslckout`, `_FOSSIL_`), and a link
/// pointing out of the checkout at a secret. Fossil gets no such branch
/// or tag, nor the reserved files, and a link is a file holding its
/// target's name in a checkout: these held on the old code. A repository
/// whose default branch is named `-x` was imported with no trunk of its
/// own on the old code; now it is refused naming `from`, as is one whose
/// ref names a commit it lacks, and nothing is left of either (the old
/// code left the upstream's directory, half made). Git makes no ref
/// holding a line break or `..`.
#[test]
fn hostile_names_reach_no_fossil_branch_tag_or_file_and_a_hostile_default_leaves_nothing() {
    let dir = place();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "the host's secret\n").unwrap();
    let up = repository(dir.path(), "up");
    std::fs::write(up.join(".fslckout"), "not Fossil's\n").unwrap();
    std::fs::write(up.join("_FOSSIL_"), "not Fossil's\n").unwrap();
    std::os::unix::fs::symlink(&secret, up.join("out")).unwrap();
    git(&up, &["add", "-A"]);
    git(&up, &["commit", "-qm", "names"]);
    git(&up, &["update-ref", "refs/heads/-x", "HEAD"]);
    git(&up, &["update-ref", "refs/tags/-t", "HEAD"]);

    let made = ocx(
        dir.path(),
        &["project", "demo", "--from", up.to_str().unwrap()],
    )
    .ok();
    let repo = dir.path().join("demo.fossil");
    let branches = fossil_on(&repo, &["branch", "list"]);
    assert!(!branches.contains("-x"), "{branches}");
    let tags = fossil_on(&repo, &["tag", "list"]);
    assert!(!tags.contains("-t"), "{tags}");
    let files = fossil_on(&repo, &["ls", "-r", "trunk"]);
    assert_eq!(
        files.lines().collect::<Vec<_>>(),
        ["a.txt", "out"],
        "{files} {made:#}"
    );
    let co = dir.path().join("co");
    std::fs::create_dir_all(&co).unwrap();
    fossil_as("admin", &co, &["open", repo.to_str().unwrap(), "trunk"]);
    let out = std::fs::symlink_metadata(co.join("out")).unwrap();
    assert!(out.is_file(), "the link is a plain file in a checkout");
    assert_eq!(
        std::fs::read_to_string(co.join("out")).unwrap(),
        secret.to_str().unwrap()
    );
    fossil_as("admin", &co, &["close", "--force"]);

    git(&up, &["symbolic-ref", "HEAD", "refs/heads/-x"]);
    let before = names(dir.path());
    let r = ocx(
        dir.path(),
        &["project", "hostile", "--from", up.to_str().unwrap()],
    );
    assert_eq!(r.refused(), "from", "{}", r.stdout);
    assert!(r.stdout.contains("default branch"), "{}", r.stdout);
    assert_eq!(names(dir.path()), before, "nothing of it is left");

    let broken = repository(dir.path(), "broken");
    std::fs::write(
        broken.join(".git/refs/heads/gone"),
        "1234567890123456789012345678901234567890\n",
    )
    .unwrap();
    let before = names(dir.path());
    let r = ocx(
        dir.path(),
        &["project", "broken", "--from", broken.to_str().unwrap()],
    );
    assert_eq!(r.refused(), "from", "{}", r.stdout);
    assert_eq!(names(dir.path()), before, "nothing of it is left");
}

/// Paths git's transfer does not check, in a tree made by hand: `../x`
/// (on the old code Fossil silently dropped the commit while OCX said it
/// brought it), and names holding a line break, a terminal's title
/// sequence (ESC ] ... BEL) or C1's CSI in UTF-8 (on the old code the
/// escape reached Fossil's file names whole, for `fossil ls` to write to a
/// person's terminal). Each is refused naming `from`, and nothing of the
/// project is left. Brought later by `upstream`, such a commit is refused
/// naming the repository, and Fossil takes none of what came with it.
#[test]
fn a_path_holding_a_control_character_or_leading_out_is_refused_and_nothing_of_it_imported() {
    let dir = place();
    let up = repository(dir.path(), "up");
    let hostile: [&[u8]; 4] = [b"../x", b"a\nb", b"e\x1b]0;owned\x07", b"\xc2\x9b31m"];
    for (i, name) in hostile.iter().enumerate() {
        let branch = format!("hostile{i}");
        commit_naming(dir.path(), &up, name, &branch);
        let before = names(dir.path());
        let r = ocx(
            dir.path(),
            &["project", "demo", "--from", up.to_str().unwrap()],
        );
        assert_eq!(r.refused(), "from", "{name:?}: {}", r.stdout);
        assert!(r.stdout.contains("no plain path"), "{}", r.stdout);
        assert_eq!(names(dir.path()), before, "{name:?}: nothing is left");
        git(&up, &["update-ref", "-d", &format!("refs/heads/{branch}")]);
    }

    ocx(
        dir.path(),
        &["project", "demo", "--from", up.to_str().unwrap()],
    )
    .ok();
    let repo = dir.path().join("demo.fossil");
    let count = || {
        fossil_on(
            &repo,
            &["sql", "SELECT count(*) FROM event WHERE type='ci'"],
        )
    };
    let before = count();
    std::fs::write(up.join("a.txt"), "one\ntwo\n").unwrap();
    git(&up, &["commit", "-qam", "fine"]);
    commit_naming(dir.path(), &up, b"e\x1b]0;owned\x07", "main");
    let r = ocx(
        dir.path(),
        &["upstream", "-R", "demo.fossil", "--user", "admin"],
    );
    assert_eq!(r.refused(), "repository", "{}", r.stdout);
    assert!(r.stdout.contains("no plain path"), "{}", r.stdout);
    assert_eq!(count(), before, "Fossil took nothing of what came with it");
    let files = fossil_on(&repo, &["ls", "-r", "trunk"]);
    assert!(!files.contains('\x1b'), "{files:?}");
}

/// A local upstream another host account owns: git reads no repository
/// another account owns (its config could name commands), so project is
/// refused naming `from`, nothing is made and nothing of its config runs.
/// This held on the old code (git's own ownership check).
#[test]
fn a_local_upstream_another_account_owns_is_refused_and_runs_nothing() {
    let dir = place();
    let marker = dir.path().join("pwned");
    let up = repository(dir.path(), "up");
    git(
        &up,
        &[
            "config",
            "core.fsmonitor",
            &format!("touch {}", marker.display()),
        ],
    );
    let chowned = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(&up)
        .status()
        .unwrap();
    assert!(chowned.success());
    let before = names(dir.path());
    let r = ocx(
        dir.path(),
        &["project", "demo", "--from", up.to_str().unwrap()],
    );
    assert_eq!(r.refused(), "from", "{}", r.stdout);
    assert!(r.stdout.contains("ownership"), "{}", r.stdout);
    assert_eq!(names(dir.path()), before);
    assert!(!marker.exists());
}

/// A mirror whose own config names a transport that runs a command
/// (`ext::`, with `protocol.allow=always` beside it) or talks on a
/// descriptor (`fd::0`): `upstream` runs nothing and does not wait. On
/// the old code the `ext::` command ran and `fd::0` waited for ever; git
/// is now given `GIT_ALLOW_PROTOCOL`, which no config overrides. Only the
/// mirror's owner can write its config: this holds what a config says,
/// whoever wrote it.
#[test]
fn a_mirror_whose_config_names_ext_or_fd_runs_nothing_and_waits_for_nothing() {
    let dir = place();
    let marker = dir.path().join("pwned");
    let up = repository(dir.path(), "up");
    ocx(
        dir.path(),
        &["project", "demo", "--from", up.to_str().unwrap()],
    )
    .ok();
    let mirror = dir.path().join("demo.fossil.upstream/mirror.git");
    git(&mirror, &["config", "protocol.allow", "always"]);
    for url in [
        format!("ext::sh -c touch% {}", marker.display()),
        "fd::0".into(),
    ] {
        git(&mirror, &["config", "remote.origin.url", &url]);
        let out = within_30s(
            Command::new(crate::support::ocx_bin())
                .args(["upstream", "-R", "demo.fossil", "--user", "admin", "--json"])
                .current_dir(dir.path()),
        )
        .unwrap_or_else(|| panic!("{url:?} kept upstream waiting, ended after 30 s"));
        assert_eq!(out.code, 3, "{url:?}: {}", out.stdout);
        let reason = out.failed();
        assert!(reason.contains("not allowed"), "{url:?}: {reason}");
        assert!(!marker.exists(), "{url:?} ran its command");
    }
}
