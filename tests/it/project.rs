//! From a git repository to an OCX node in one command (`project`), and
//! kept in step with its upstream (`upstream`), with real git and Fossil:
//! branches and tags imported, the git export made, the hook installed,
//! the node started, the runner pages and patterns written; then an
//! upstream that gains commits on a branch both sides changed, brought in
//! with nothing of either side lost, by hand and on the node's schedule.

use crate::support::{fossil, ocx_bin, run};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// `git ARGS` in `dir`, which must succeed; what it printed.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "Up Stream")
        .env("GIT_AUTHOR_EMAIL", "up@example.org")
        .env("GIT_COMMITTER_NAME", "Up Stream")
        .env("GIT_COMMITTER_EMAIL", "up@example.org")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        crate::support::said(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An upstream git repository in `dir/up`: `main` with two commits, `dev`
/// with one of its own, tagged `v1` (lightweight) and `v2` (annotated).
fn upstream(dir: &Path) -> PathBuf {
    let up = dir.join("up");
    std::fs::create_dir_all(&up).unwrap();
    git(&up, &["init", "-q", "-b", "main"]);
    std::fs::write(up.join("a.txt"), "one\n").unwrap();
    git(&up, &["add", "a.txt"]);
    git(&up, &["commit", "-qm", "one"]);
    git(&up, &["checkout", "-qb", "dev"]);
    std::fs::write(up.join("b.txt"), "two\n").unwrap();
    git(&up, &["add", "b.txt"]);
    git(&up, &["commit", "-qm", "two"]);
    git(&up, &["tag", "v1"]);
    git(&up, &["tag", "-a", "v2", "-m", "release two"]);
    git(&up, &["checkout", "-q", "main"]);
    std::fs::write(up.join("a.txt"), "one\nthree\n").unwrap();
    git(&up, &["commit", "-qam", "three"]);
    up
}

/// `ocx ARGS --json` in `dir`.
pub(crate) fn ocx(dir: &Path, args: &[&str]) -> crate::support::Run {
    let mut c = Command::new(ocx_bin());
    c.args(args).arg("--json").current_dir(dir);
    run(c, None)
}

/// `ocx ARGS` on `demo.fossil` in `dir` as admin; its result.
fn as_admin(dir: &Path, args: &[&str]) -> serde_json::Value {
    ocx(
        dir,
        &[args, &["-R", "demo.fossil", "--user", "admin"]].concat(),
    )
    .ok()
}

/// The comment of the newest check-in on `branch` of `repo`.
fn tip(repo: &Path, branch: &str) -> String {
    let r = ocx::fossil::Repository::open(repo).unwrap();
    let rid = r.branch_tip(branch).unwrap().expect(branch);
    r.checkin(rid).unwrap().unwrap().comment
}

/// Every tag name `repo` holds, but branch names' own.
fn tags(repo: &Path) -> Vec<String> {
    let out = Command::new(fossil())
        .args(["tag", "list", "-R"])
        .arg(repo)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .collect()
}

/// Stops the node of `demo.fossil` in `dir` as its administrator, and
/// holds that no node process or run watcher is left whose root lies in
/// `dir`: a test ends every process it starts.
fn stop_node(dir: &Path) {
    let root = ocx::node::config::default_root(&dir.join("demo.fossil").canonicalize().unwrap());
    let pid: i32 = std::fs::read_to_string(root.join("node.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let seen = crate::support::nodes_and_watchers_under(dir);
    assert!(
        seen.iter().any(|p| p.pid == pid),
        "its node's process {pid} is seen running before it is stopped: {seen:?}"
    );
    let stopped = as_admin(dir, &["node", "stop"]);
    assert_eq!(stopped["running"], false, "{stopped:#}");
    let left = crate::support::nodes_and_watchers_under(dir);
    assert!(left.is_empty(), "left running: {left:?}");
}

pub(crate) fn place() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("ocx-project-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

#[test]
fn a_git_repository_becomes_a_node_in_one_command_with_its_branches_tags_export_and_runners() {
    let dir = place();
    let up = upstream(dir.path());
    let url = format!("http://127.0.0.1:{}/", crate::support::free_port());
    let args = [
        "project",
        "demo",
        "--from",
        up.to_str().unwrap(),
        "--url",
        &url,
        "--runners",
        "demo",
        "--patterns",
    ];
    let dry = ocx(dir.path(), &[&args[..], &["--dry-run"]].concat());
    let log = dry.answer()["log"].to_string();
    for step in ["mirror", "git export", "hook", "node", "sandbox/demo"] {
        assert!(log.contains(step), "the dry run lists {step}: {log}");
    }
    assert!(
        !dir.path().join("demo.fossil").exists(),
        "a dry run makes nothing"
    );

    let made = ocx(dir.path(), &args).ok();
    let repo = dir.path().join("demo.fossil");
    assert!(repo.is_file(), "{made:#}");
    assert_eq!(tip(&repo, "trunk"), "three", "the default branch is trunk");
    assert_eq!(tip(&repo, "dev"), "two");
    let t = tags(&repo);
    assert!(
        t.contains(&"v1".into()) && t.contains(&"v2".into()),
        "{t:?}"
    );
    let export = PathBuf::from(made["git_export"].as_str().unwrap());
    assert!(
        export.join(".git").join("HEAD").is_file(),
        "the git export is made"
    );
    assert_eq!(
        made["pages"],
        json!(["sandbox/demo", "run/reviewer", "run/fixer", "run/helper"]),
        "{made:#}"
    );
    assert!(
        made["next"]
            .to_string()
            .contains("fossil user password admin"),
        "{made:#}"
    );
    let status = as_admin(dir.path(), &["status"]);
    assert_eq!(status["node"], true, "{status:#}");
    assert_eq!(status["upstream"]["from"], up.to_str().unwrap());
    let root = ocx::node::config::default_root(&repo.canonicalize().unwrap());
    assert!(root.join("node.pid").is_file(), "its node started");
    let patterns = as_admin(dir.path(), &["patterns"]);
    assert_eq!(patterns["patterns"].as_array().unwrap().len(), 3);
    stop_node(dir.path());

    // Without --from: a new empty repository.
    let empty = ocx(dir.path(), &["project", "blank"]).ok();
    assert!(dir.path().join("blank.fossil").is_file(), "{empty:#}");
    assert!(empty["upstream"].is_null());
}

#[test]
fn a_name_that_is_no_file_name_a_repository_already_there_and_an_upstream_git_cannot_read_are_refused()
 {
    let dir = place();
    let up = upstream(dir.path());
    let before: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    for (input, field) in [
        (json!({"name": "a/b"}), "name"),
        (json!({"name": "-x"}), "name"),
        (json!({"name": ".."}), "name"),
        (
            json!({"name": "ok", "from": dir.path().join("nothing-here").to_str().unwrap()}),
            "from",
        ),
        (
            json!({"name": "ok", "from": "http://127.0.0.1:9/none.git"}),
            "from",
        ),
        (json!({"name": "ok", "url": "ftp://host/"}), "url"),
        (json!({"name": "ok", "runners": ["nope"]}), "runners[0]"),
        (json!({"name": "ok", "patterns": true}), "patterns"),
        (json!({"name": "ok", "dir": "no-such-dir"}), "dir"),
    ] {
        let r = ocx(dir.path(), &["project", "--input", &input.to_string()]);
        assert_eq!(r.refused(), field, "{input}");
    }
    let after: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(before, after, "no refusal made anything");
    ocx(
        dir.path(),
        &["project", "demo", "--from", up.to_str().unwrap()],
    )
    .ok();
    let again = ocx(
        dir.path(),
        &["project", "demo", "--from", up.to_str().unwrap()],
    );
    assert_eq!(again.refused(), "name");
    assert!(
        again.stdout.contains("is there already"),
        "{}",
        again.stdout
    );
}

#[test]
fn upstream_brings_its_new_commits_onto_each_branch_or_beside_one_fossil_moved_and_loses_nothing() {
    let dir = place();
    let up = upstream(dir.path());
    ocx(
        dir.path(),
        &["project", "demo", "--from", up.to_str().unwrap()],
    )
    .ok();
    let repo = dir.path().join("demo.fossil");

    // Both sides change: upstream on main and dev, Fossil on trunk.
    git(&up, &["checkout", "-q", "dev"]);
    std::fs::write(up.join("c.txt"), "four\n").unwrap();
    git(&up, &["add", "c.txt"]);
    git(&up, &["commit", "-qm", "four"]);
    git(&up, &["checkout", "-q", "main"]);
    std::fs::write(up.join("a.txt"), "one\nthree\nfive\n").unwrap();
    git(&up, &["commit", "-qam", "five"]);
    git(&up, &["tag", "v3"]);
    let co = dir.path().join("co");
    std::fs::create_dir_all(&co).unwrap();
    crate::support::fossil_as("admin", &co, &["open", repo.to_str().unwrap(), "trunk"]);
    std::fs::write(co.join("local.txt"), "ours\n").unwrap();
    crate::support::fossil_as("admin", &co, &["add", "local.txt"]);
    crate::support::fossil_as(
        "admin",
        &co,
        &["commit", "-m", "a change of our own", "--no-warnings"],
    );
    assert_eq!(tip(&repo, "trunk"), "a change of our own");

    let dry = as_admin(dir.path(), &["upstream", "--dry-run"]);
    assert_eq!(
        dry["onto"],
        json!([{"branch": "main", "onto": "upstream/trunk"}, {"branch": "dev", "onto": "dev"}])
    );
    assert!(dry["brought"].is_null());
    let brought = as_admin(dir.path(), &["upstream"]);
    assert_eq!(
        brought["brought"]["branches"],
        json!([{"branch": "main", "onto": "upstream/trunk", "commits": 1}, {"branch": "dev", "onto": "dev", "commits": 1}]),
        "{brought:#}"
    );
    assert_eq!(brought["brought"]["tags"], json!(["v3"]));
    assert_eq!(
        tip(&repo, "trunk"),
        "a change of our own",
        "Fossil's own check-in kept"
    );
    assert_eq!(tip(&repo, "upstream/trunk"), "five", "upstream's beside it");
    assert_eq!(tip(&repo, "dev"), "four");
    assert!(tags(&repo).contains(&"v3".into()));
    let info = crate::support::fossil_as("admin", &co, &["update", "trunk"]);
    let _ = info;
    assert!(
        co.join("local.txt").is_file(),
        "trunk opens Fossil's own branch, not another"
    );

    let again = as_admin(dir.path(), &["upstream"]);
    assert_eq!(again["brought"]["branches"], json!([]), "nothing twice");
    let status = as_admin(dir.path(), &["status"]);
    assert_eq!(status["upstream"]["last"]["branches"], json!([]));
    assert!(status["upstream"]["last"]["when"].is_string());

    // On the node's schedule.
    as_admin(
        dir.path(),
        &["hook", "install", "--url", "http://127.0.0.1:9/"],
    );
    as_admin(dir.path(), &["upstream", "--every", "2s"]);
    as_admin(dir.path(), &["node", "start"]);
    std::fs::write(up.join("a.txt"), "one\nthree\nfive\nsix\n").unwrap();
    git(&up, &["commit", "-qam", "six"]);
    let until = Instant::now() + Duration::from_secs(60);
    let root = ocx::node::config::default_root(&repo.canonicalize().unwrap());
    while tip(&repo, "upstream/trunk") != "six" {
        assert!(
            Instant::now() < until,
            "the node never brought it:\n{}",
            crate::support::node_log_text(&root)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    crate::support::until_logged(&root, 30, |e: &Value| e["done"] == "upstream brought");
    stop_node(dir.path());
}

#[test]
fn project_and_upstream_count_each_commit_once_whatever_its_message_or_files_hold() {
    let dir = place();
    let up = dir.path().join("up");
    std::fs::create_dir_all(&up).unwrap();
    git(&up, &["init", "-q", "-b", "main"]);
    let lines = "commit refs/heads/main\ncommit 1\ncommit 2\n";
    for n in 0..3 {
        std::fs::write(up.join("log.txt"), lines.repeat(n + 1)).unwrap();
        git(&up, &["add", "log.txt"]);
        git(&up, &["commit", "-qm", &format!("change {n}\n\n{lines}")]);
    }
    let made = ocx(
        dir.path(),
        &["project", "demo", "--from", up.to_str().unwrap()],
    )
    .ok();
    assert_eq!(
        made["imported"]["branches"],
        json!([{"branch": "main", "onto": "trunk", "commits": 3}]),
        "{made:#}"
    );
    std::fs::write(up.join("log.txt"), lines.repeat(9)).unwrap();
    git(
        &up,
        &["commit", "-qam", &format!("change 3\n\n{lines}{lines}")],
    );
    let brought = as_admin(dir.path(), &["upstream"]);
    assert_eq!(
        brought["brought"]["branches"],
        json!([{"branch": "main", "onto": "trunk", "commits": 1}]),
        "{brought:#}"
    );
}

/// Stops the node of `dir/demo.fossil` as its administrator when dropped,
/// whatever the test did.
struct NodeStopped<'a>(&'a Path, &'a str);

impl Drop for NodeStopped<'_> {
    fn drop(&mut self) {
        let _ = ocx(
            self.0,
            &[
                "node",
                "stop",
                "--runs",
                "-R",
                "demo.fossil",
                "--user",
                self.1,
            ],
        );
    }
}

#[test]
fn each_ocx_command_project_prints_to_run_next_runs_as_printed_with_no_user_named() {
    let dir = place();
    let up = upstream(dir.path());
    let _stopped = NodeStopped(dir.path(), "admin");
    let made = ocx(
        dir.path(),
        &[
            "project",
            "demo",
            "--from",
            up.to_str().unwrap(),
            "--runners",
            "demo",
            "--patterns",
        ],
    )
    .ok();
    let url = format!("http://127.0.0.1:{}/", crate::support::free_port());
    let mut ran = Vec::new();
    for line in made["next"].as_array().unwrap() {
        let line = line.as_str().unwrap();
        let Some((_, command)) = line.split_once(": ocx ") else {
            continue;
        };
        let words = shlex::split(&command.replace("URL", &url)).expect(line);
        assert!(!words.iter().any(|w| w == "--user"), "{line}");
        // No USER, LOGNAME or FOSSIL_USER: who acts is the repository's default user.
        let done = ocx(
            dir.path(),
            &words.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        assert_eq!(done.code, 0, "{line}: {}{}", done.stdout, done.stderr);
        ran.push(words[0].clone());
    }
    assert_eq!(ran, ["hook", "node", "runner", "upstream"], "{made:#}");
}

#[test]
fn on_a_repository_fossil_new_made_hook_install_makes_its_installer_the_default_user_and_says_so() {
    let dir = place();
    let made = Command::new(fossil())
        .args(["new", "--admin-user", "keeper", "demo.fossil"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", crate::support::said(&made));
    let _stopped = NodeStopped(dir.path(), "keeper");
    // Not a node yet: what node start prints to run next names who runs it.
    let no_node = ocx(
        dir.path(),
        &["node", "start", "-R", "demo.fossil", "--user", "keeper"],
    );
    let a = no_node.answer();
    let next = a["next_step"].as_str().unwrap();
    assert!(
        next.contains("ocx hook install --url URL -R ") && next.contains("--user keeper"),
        "{a:#}"
    );
    let refused = ocx(
        dir.path(),
        &[
            "hook",
            "install",
            "--url",
            "http://127.0.0.1:9/",
            "-R",
            "demo.fossil",
        ],
    );
    assert_eq!(
        refused.refused(),
        "user",
        "no one named and no default user"
    );
    let url = format!("http://127.0.0.1:{}/", crate::support::free_port());
    let hooked = ocx(
        dir.path(),
        &[
            "hook",
            "install",
            "--url",
            &url,
            "-R",
            "demo.fossil",
            "--user",
            "keeper",
        ],
    )
    .ok();
    assert_eq!(hooked["default_user"], "keeper", "{hooked:#}");
    ocx(dir.path(), &["node", "start", "-R", "demo.fossil"]).ok();
    let again = ocx(
        dir.path(),
        &["hook", "install", "--url", &url, "-R", "demo.fossil"],
    )
    .ok();
    assert!(
        again.get("default_user").is_none(),
        "a default user is kept: {again:#}"
    );
}
