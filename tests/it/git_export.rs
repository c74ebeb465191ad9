//! The git export: brought up to date by `export`, the node and the hook
//! under one lock, and served read-only over git's smart HTTP by the
//! program started as `git` in Fossil's extroot. Real `git` clones and
//! fetches through a real `fossil server --extroot`; plain HTTP requests
//! check each refusal.

use crate::support::{Ext, Repo, Run, Served, ServedNode, fossil, ocx_bin};
use serde_json::Value;
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Why `run` was refused: the field at fault and the reason, as one line.
fn refusal(run: &Run) -> String {
    let field = run.refused();
    let a = run.answer();
    format!("{field}: {}", a["stopped"]["reason"].as_str().unwrap_or(""))
}

/// The `git` program the tests clone with (and Fossil exports with).
fn git_program() -> PathBuf {
    ocx::git::Git::locate(None)
        .expect("git: run scripts/setup.sh")
        .path()
        .to_path_buf()
}

/// Runs `git ARGS` in `dir`, with no configuration of this machine's and no
/// prompt for a password.
fn git(dir: &Path, args: &[&str]) -> Output {
    Command::new(git_program())
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.org")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.org")
        .output()
        .unwrap()
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `git ARGS` in `dir`, which must succeed; its standard output.
fn git_ok(dir: &Path, args: &[&str]) -> String {
    let out = git(dir, args);
    assert!(out.status.success(), "git {args:?}: {}", said(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository with two check-ins on trunk, the second tagged `v1`, and
/// its git export made once (as an administrator does) in `mirror` beside it.
fn exported_repo() -> (Repo, PathBuf) {
    let repo = Repo::new();
    repo.commit_as("admin", "a.txt", "one\n", None);
    repo.commit_as("admin", "b.txt", "two\n", None);
    repo.fossil(&["tag", "add", "v1", "trunk"]);
    let mirror = repo.dir.path().join("mirror");
    repo.fossil(&["git", "export", mirror.to_str().unwrap()]);
    (repo, mirror)
}

/// Fossil's trunk: each check-in's comment, newest first.
fn trunk_comments(repo: &Repo) -> Vec<String> {
    let db = rusqlite::Connection::open(&repo.file).unwrap();
    let mut st = db
        .prepare(
            "SELECT coalesce(e.ecomment, e.comment) FROM event e JOIN tagxref x ON x.rid=e.objid
             WHERE e.type='ci' AND x.tagid=8 AND x.value='trunk' AND x.tagtype>0 ORDER BY e.mtime DESC",
        )
        .unwrap();
    st.query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|c| c.unwrap().trim().to_string())
        .collect()
}

/// The extroot: the binary linked as `git` (and as `ocx-cgi`), and its
/// configuration naming the tests' fossil and git.
fn ext() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("ocx-ext-git-")
        .tempdir()
        .unwrap();
    std::os::unix::fs::symlink(ocx_bin(), dir.path().join("git")).unwrap();
    let config = serde_json::json!({"fossil": fossil(), "git": git_program()});
    std::fs::write(dir.path().join(".ocx-cgi.json"), config.to_string()).unwrap();
    dir
}

/// `fossil server --extroot` of `repo` on a free loopback port, the
/// extroot [`ext`]; stopped when dropped. With `backoffice`, the server
/// runs its hooks after each reply (never queueing one behind a held
/// lease).
fn serve(repo: &Repo, backoffice: bool) -> ServedNode<&Repo> {
    let served = Served::new()
        .extroot(Ext { dir: ext() })
        .without_backoffice()
        .without_node()
        .start_on(repo);
    if backoffice {
        repo.fossil(&["settings", "backoffice-disable", "0"]);
        repo.fossil(&["settings", "backoffice-nodelay", "1"]);
    }
    served
}

/// Clones `url` into a new directory under `into`, `extra` given to git
/// first; the clone's directory, or git's words.
fn clone(into: &Path, url: &str, extra: &[&str]) -> Result<PathBuf, String> {
    let dir = into.join(format!("clone-{}", rand_suffix()));
    let mut args: Vec<&str> = extra.to_vec();
    args.extend(["clone", "--quiet", url, dir.to_str().unwrap()]);
    let out = git(into, &args);
    if out.status.success() {
        Ok(dir)
    } else {
        Err(said(&out))
    }
}

fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::Relaxed).to_string()
}

/// Commits `file` with `comment` in a Fossil clone of the server made as
/// `dev`, and pushes it, `before_push` done first; the check-in's hash as
/// the served repository holds it.
fn push_checkin(
    served: &Repo,
    server: &ServedNode<&Repo>,
    file: &str,
    comment: &str,
    before_push: &dyn Fn(),
) -> String {
    let work = tempfile::tempdir().unwrap();
    let clone_file = work.path().join("c.fossil");
    let url = format!("http://dev:dev-pw@127.0.0.1:{}/", server.port);
    let run = |args: &[&str], dir: &Path| {
        let out = Command::new(fossil())
            .args(args)
            .current_dir(dir)
            .env("USER", "dev")
            .output()
            .unwrap();
        assert!(out.status.success(), "fossil {args:?}: {}", said(&out));
        said(&out)
    };
    run(
        &[
            "clone",
            "--save-http-password",
            &url,
            clone_file.to_str().unwrap(),
        ],
        work.path(),
    );
    let co = work.path().join("co");
    std::fs::create_dir(&co).unwrap();
    run(&["open", "--nosync", clone_file.to_str().unwrap()], &co);
    std::fs::write(co.join(file), format!("{comment}\n")).unwrap();
    run(&["add", file], &co);
    run(
        &[
            "commit",
            "--nosync",
            "--no-warnings",
            "--user",
            "dev",
            "-m",
            comment,
        ],
        &co,
    );
    before_push();
    let pushed = run(&["push"], &co);
    assert!(!pushed.contains("Error"), "{pushed}");
    let db = rusqlite::Connection::open(&served.file).unwrap();
    db.query_row(
        "SELECT b.uuid FROM event e JOIN blob b ON b.rid=e.objid WHERE e.type='ci' AND e.comment=?1",
        [comment],
        |r| r.get(0),
    )
    .unwrap_or_else(|e| panic!("the push did not arrive: {e}"))
}

/// Fetches in `clone` until `origin/master`'s newest commit says `comment`,
/// for `within` at most; whether it did.
fn fetched_within(clone: &Path, comment: &str, within: Duration) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if git(clone, &["fetch", "--quiet", "--tags", "origin"])
            .status
            .success()
            && git_ok(clone, &["log", "-1", "--format=%s", "origin/master"]).trim() == comment
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// Makes the export's `dir` immutable (as root, `chmod` does not stop a
/// write; `chattr +i` does) until dropped.
struct Immutable(PathBuf);

impl Immutable {
    fn set(dir: &Path) -> Immutable {
        let out = Command::new("chattr")
            .arg("-R")
            .arg("+i")
            .arg(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "chattr: {}", said(&out));
        Immutable(dir.to_path_buf())
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr")
            .arg("-R")
            .arg("-i")
            .arg(&self.0)
            .output();
    }
}

#[test]
fn a_git_clone_gives_the_same_tree_and_commits_as_fossils_trunk() {
    let (repo, _mirror) = exported_repo();
    let server = serve(&repo, false);
    let work = tempfile::tempdir().unwrap();
    let cloned = clone(work.path(), &server.url("/ext/git/repo.git"), &[]).unwrap();
    assert_eq!(
        std::fs::read_to_string(cloned.join("a.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(
        std::fs::read_to_string(cloned.join("b.txt")).unwrap(),
        "two\n"
    );
    let mut files: Vec<String> = git_ok(&cloned, &["ls-files"])
        .lines()
        .map(str::to_string)
        .collect();
    files.sort();
    let mut fossils: Vec<String> = repo
        .fossil(&["ls", "-r", "trunk"])
        .lines()
        .map(|l| l.trim().to_string())
        .collect();
    fossils.sort();
    assert_eq!(files, fossils);
    let commits: Vec<String> = git_ok(&cloned, &["log", "--format=%s", "master"])
        .lines()
        .map(|l| l.trim().to_string())
        .collect();
    assert_eq!(commits, trunk_comments(&repo));
    assert_eq!(commits.len(), 3, "{commits:?}");
    assert_eq!(git_ok(&cloned, &["tag"]).trim(), "v1");
}

#[test]
fn a_checkin_pushed_to_fossil_is_in_the_next_fetch_through_the_node() {
    let (repo, _mirror) = exported_repo();
    repo.user("dev", "gioh");
    let server = serve(&repo, false);
    let installed = repo
        .json(&["hook", "install", "--url", &server.url("/")])
        .ok();
    assert!(installed.get("note").is_none(), "{installed}");
    repo.json(&["node", "start"]).ok();
    let work = tempfile::tempdir().unwrap();
    let cloned = clone(work.path(), &server.url("/ext/git/repo.git"), &[]).unwrap();
    push_checkin(&repo, &server, "c.txt", "pushed through the node", &|| {});
    let seen = fetched_within(&cloned, "pushed through the node", Duration::from_secs(30));
    let root = repo.node_root();
    let log = crate::support::node_log_text(&root);
    let exported = crate::support::logged(&root, |e| e["done"] == "exported" && e["count"] == 1);
    let _ = repo.json(&["node", "stop"]);
    assert!(
        seen,
        "the next fetch did not bring the check-in; the node's log:\n{log}"
    );
    assert!(exported > 0, "{log}");
    assert_eq!(
        std::fs::read_to_string(cloned.join("c.txt")).ok(),
        None,
        "a fetch changes no work tree"
    );
    git_ok(&cloned, &["merge", "--quiet", "--ff-only", "origin/master"]);
    assert_eq!(
        std::fs::read_to_string(cloned.join("c.txt")).unwrap(),
        "pushed through the node\n"
    );
    repo.json(&["node", "start"]).ok();
    repo.fossil(&["tag", "add", "v2", "trunk"]);
    let until = Instant::now() + Duration::from_secs(30);
    let mut tags = String::new();
    while Instant::now() < until && !tags.lines().any(|t| t == "v2") {
        std::thread::sleep(Duration::from_millis(200));
        let _ = git(&cloned, &["fetch", "--quiet", "--tags", "origin"]);
        tags = git_ok(&cloned, &["tag"]);
    }
    let _ = repo.json(&["node", "stop"]);
    assert!(
        tags.lines().any(|t| t == "v2"),
        "a tag alone is exported: {tags}"
    );
}

#[test]
fn where_no_node_runs_the_hook_exports_after_a_push() {
    let (repo, mirror) = exported_repo();
    repo.user("dev", "gioh");
    let server = serve(&repo, true);
    repo.json(&["hook", "install", "--url", &server.url("/")])
        .ok();
    let work = tempfile::tempdir().unwrap();
    let cloned = clone(work.path(), &server.url("/ext/git/repo.git"), &[]).unwrap();
    let hash = push_checkin(&repo, &server, "d.txt", "pushed with no node", &|| {
        // The clone's own requests ran the backoffice; the push's must not
        // find its lease held (the server queues none, by backoffice-nodelay).
        repo.fossil(&["test-backoffice-lease", "--reset"]);
    });
    let seen = fetched_within(&cloned, "pushed with no node", Duration::from_secs(30));
    assert!(seen, "the hook did not export the pushed check-in");
    let served = ocx::fossil::Repository::open(&repo.file).unwrap();
    let (state, _) = ocx::git::Export {
        dir: mirror.clone(),
    }
    .awaiting(&served)
    .unwrap();
    assert_eq!(state.last_checkin.as_deref(), Some(hash.as_str()));
    let last: Value = serde_json::from_slice(
        &std::fs::read(mirror.join(".git").join("ocx-export-last.json")).unwrap(),
    )
    .unwrap();
    // A push may wake the hook more than once; an export asked for while the
    // first ran finds nothing new and is kept as the last. Either way none
    // failed and none added more than the one check-in pushed.
    let added: Vec<u64> = serde_json::from_value(last["added"].clone()).unwrap();
    assert!(!added.is_empty() && added.iter().all(|n| *n <= 1), "{last}");
    assert!(last.get("failure").is_none(), "{last}");
}

#[test]
fn git_push_is_refused_and_changes_nothing() {
    let (repo, mirror) = exported_repo();
    let server = serve(&repo, false);
    let work = tempfile::tempdir().unwrap();
    let cloned = clone(work.path(), &server.url("/ext/git/repo.git"), &[]).unwrap();
    std::fs::write(cloned.join("e.txt"), "pushed with git\n").unwrap();
    git_ok(&cloned, &["add", "e.txt"]);
    git_ok(&cloned, &["commit", "--quiet", "-m", "from git"]);
    let before = git_ok(&mirror, &["rev-parse", "master"]);
    let pushed = git(&cloned, &["push", "origin", "master"]);
    assert!(!pushed.status.success());
    assert!(said(&pushed).contains("403"), "{}", said(&pushed));
    assert_eq!(git_ok(&mirror, &["rev-parse", "master"]), before);
    let (refs, _, _) = server.request_bytes(
        "GET",
        "/ext/git/repo.git/info/refs?service=git-receive-pack",
        &[],
        b"",
    );
    assert_eq!(refs, 403);
    let (post, _, _) = server.request_bytes(
        "POST",
        "/ext/git/repo.git/git-receive-pack",
        &[("Content-Type", "application/x-git-receive-pack-request")],
        b"0000",
    );
    assert_eq!(post, 403);
    assert!(!trunk_comments(&repo).contains(&"from git".to_string()));
}

#[test]
fn only_a_viewer_who_may_clone_and_read_gets_the_export() {
    let (repo, _mirror) = exported_repo();
    repo.user("cloner", "go");
    repo.user("peruser", "o");
    repo.user("lister", "g");
    let server = serve(&repo, false);
    let work = tempfile::tempdir().unwrap();
    let url = server.url("/ext/git/repo.git");
    clone(work.path(), &url, &[]).expect("nobody holds g and o by default");
    repo.fossil(&["user", "capabilities", "nobody", "jr"]);
    let refused = clone(work.path(), &url, &[]).unwrap_err();
    assert!(refused.contains("403"), "{refused}");
    let refs = "/ext/git/repo.git/info/refs?service=git-upload-pack";
    assert_eq!(server.request_bytes("GET", refs, &[], b"").0, 403);
    let cookie = server.login("cloner");
    let header = format!("http.extraHeader=Cookie: {cookie}");
    let cloned = clone(work.path(), &url, &["-c", &header]).unwrap();
    assert_eq!(
        std::fs::read_to_string(cloned.join("a.txt")).unwrap(),
        "one\n"
    );
    for login in ["peruser", "lister"] {
        let cookie = server.login(login);
        let header = format!("http.extraHeader=Cookie: {cookie}");
        let refused = clone(work.path(), &url, &["-c", &header]).unwrap_err();
        assert!(refused.contains("403"), "{login}: {refused}");
        assert_eq!(
            server
                .request_bytes("GET", refs, &[("Cookie", &cookie)], b"")
                .0,
            403,
            "{login}"
        );
    }
    let forged = cookie.replace('=', "=0");
    assert_eq!(
        server
            .request_bytes("GET", refs, &[("Cookie", &forged)], b"")
            .0,
        403
    );
}

#[test]
fn another_repositorys_export_or_none_is_not_found() {
    let (repo, _mirror) = exported_repo();
    let server = serve(&repo, false);
    for path in [
        "/ext/git/other.git/info/refs?service=git-upload-pack",
        "/ext/git/repo.fossil.git/info/refs?service=git-upload-pack",
        "/ext/git/repo/info/refs?service=git-upload-pack",
        "/ext/git/repo.git/HEAD",
        "/ext/git/repo.git/objects/info/packs",
    ] {
        assert_eq!(server.request_bytes("GET", path, &[], b"").0, 404, "{path}");
    }
    let plain = Repo::new();
    plain.commit_as("admin", "a.txt", "one\n", None);
    let other = serve(&plain, false);
    let (status, _, _) = other.request_bytes(
        "GET",
        "/ext/git/repo.git/info/refs?service=git-upload-pack",
        &[],
        b"",
    );
    assert_eq!(status, 404, "a repository without an export");
    let work = tempfile::tempdir().unwrap();
    let refused = clone(work.path(), &other.url("/ext/git/repo.git"), &[]).unwrap_err();
    assert!(
        refused.contains("404") || refused.contains("not found"),
        "{refused}"
    );
}

#[test]
fn a_body_over_50_mb_raw_or_expanded_is_413_and_bad_gzip_400() {
    let (repo, _mirror) = exported_repo();
    let server = serve(&repo, false);
    let path = "/ext/git/repo.git/git-upload-pack";
    let ct = [("Content-Type", "application/x-git-upload-pack-request")];
    let big = vec![b'0'; 50 * 1024 * 1024 + 1];
    assert_eq!(server.request_bytes("POST", path, &ct, &big).0, 413);
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(&big).unwrap();
    let bomb = e.finish().unwrap();
    assert!(bomb.len() < 1 << 20);
    assert_eq!(server.request_bytes("POST", path, &ct, &bomb).0, 413);
    let bad = [0x1f, 0x8b, 0x08, 0, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3];
    assert_eq!(server.request_bytes("POST", path, &ct, &bad).0, 400);
    let head = git_ok(&repo.dir.path().join("mirror"), &["rev-parse", "master"]);
    let want = format!("want {}", head.trim());
    let mut request = format!("{:04x}{want}\n", want.len() + 5).into_bytes();
    request.extend_from_slice(b"00000009done\n");
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(&request).unwrap();
    let gz = e.finish().unwrap();
    let (status, head, body) = server.request_bytes("POST", path, &ct, &gz);
    assert_eq!(status, 200, "{head}");
    assert!(
        head.contains("application/x-git-upload-pack-result"),
        "{head}"
    );
    assert!(
        body.windows(4).any(|w| w == b"PACK"),
        "a gzipped fetch gets its pack"
    );
}

#[test]
fn the_program_reads_its_body_to_the_announced_length_and_never_past() {
    let (repo, _mirror) = exported_repo();
    let ext = ext();
    let run = |length: &str| -> (String, u64) {
        let mut body = tempfile::tempfile().unwrap();
        body.write_all(b"0000").unwrap();
        body.write_all(&[b'X'; 100]).unwrap();
        body.rewind().unwrap();
        let out = Command::new(ext.path().join("git"))
            .env_clear()
            .current_dir(repo.dir.path())
            .env("GATEWAY_INTERFACE", "CGI/1.0")
            .env("FOSSIL_REPOSITORY", "repo.fossil")
            .env("REQUEST_METHOD", "POST")
            .env("PATH_INFO", "/repo.git/git-upload-pack")
            .env("CONTENT_LENGTH", length)
            .env("REMOTE_ADDR", "127.0.0.1")
            .stdin(Stdio::from(body.try_clone().unwrap()))
            .output()
            .unwrap();
        let at = body.stream_position().unwrap();
        (String::from_utf8_lossy(&out.stdout).into_owned(), at)
    };
    let (reply, at) = run("4");
    assert!(reply.starts_with("Status: "), "{reply}");
    assert_eq!(at, 4, "read past the announced length: {reply}");
    let (reply, at) = run(&(60 * 1024 * 1024).to_string());
    assert!(reply.starts_with("Status: 413"), "{reply}");
    assert_eq!(at, 0, "a body announced over the limit is never read");
}

#[test]
fn git_runs_with_path_alone_on_an_export_another_account_owns() {
    let (repo, mirror) = exported_repo();
    let server = serve(&repo, false);
    let chown = |owner: &str| {
        let out = Command::new("chown")
            .args(["-R", owner])
            .arg(&mirror)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", said(&out));
    };
    chown("65534");
    let work = tempfile::tempdir().unwrap();
    let cloned = clone(work.path(), &server.url("/ext/git/repo.git"), &[]);
    chown("0");
    let cloned = cloned.expect("git reads an export another account owns");
    assert_eq!(
        std::fs::read_to_string(cloned.join("b.txt")).unwrap(),
        "two\n"
    );
}

#[test]
fn a_failed_export_is_reported_and_mended_by_the_next() {
    let (repo, mirror) = exported_repo();
    let hash = repo.commit_as("admin", "c.txt", "three\n", None);
    let failed = {
        let _frozen = Immutable::set(&mirror.join(".mirror_state"));
        repo.json(&["export"]).failed()
    };
    assert!(
        failed.contains("the git export failed"),
        "a failure, never a refusal: {failed}"
    );
    assert!(
        failed.contains("readonly database"),
        "Fossil's own words: {failed}"
    );
    let status = repo.json(&["status"]).ok();
    let shown = &status["git_export"];
    assert!(
        shown["last_failure"]
            .as_str()
            .is_some_and(|f| f.contains("readonly database")),
        "{status}"
    );
    assert_eq!(shown["awaiting"], 1, "{status}");
    assert_ne!(shown["last_exported_checkin"], hash.as_str());
    let mended = repo.json(&["export"]).ok();
    let result = &mended;
    assert_eq!(result["run"]["added"], serde_json::json!([1]), "{mended}");
    assert_eq!(result["awaiting"], 0, "{mended}");
    assert!(result.get("last_failure").is_none(), "{mended}");
    assert_eq!(result["last_exported_checkin"], hash.as_str());
    assert_eq!(result["autopush"], "off", "nothing sets an autopush");
    let status = repo.json(&["status"]).ok();
    assert!(status["git_export"]["last_failure"].is_null(), "{status}");
    clone_holds_c_three(&repo);
}

/// A clone of the served repository's git export holds `c.txt` as
/// `three`.
fn clone_holds_c_three(repo: &Repo) {
    let server = serve(repo, false);
    let work = tempfile::tempdir().unwrap();
    let cloned = clone(work.path(), &server.url("/ext/git/repo.git"), &[]).unwrap();
    assert_eq!(
        std::fs::read_to_string(cloned.join("c.txt")).unwrap(),
        "three\n"
    );
}

#[test]
fn a_dry_run_lists_the_export_and_exports_nothing() {
    let (repo, mirror) = exported_repo();
    repo.commit_as("admin", "c.txt", "three\n", None);
    let before = git_ok(&mirror, &["rev-parse", "master"]);
    let dry = repo.json(&["export", "--dry-run"]).answer();
    assert_eq!(dry["dry_run"], true);
    let result = &dry["result"];
    assert_eq!(result["awaiting"], 1, "{dry}");
    assert_eq!(result["mirror"], mirror.to_str().unwrap());
    assert_eq!(result["autopush"], "off");
    assert!(result.get("run").is_none(), "{dry}");
    assert_eq!(git_ok(&mirror, &["rev-parse", "master"]), before);
    assert!(!mirror.join(".git/ocx-export-last.json").exists());
}

#[test]
fn export_needs_setup_the_served_repository_named_and_an_export() {
    let (repo, _mirror) = exported_repo();
    repo.user("dev", "gioh");
    let refused = refusal(&repo.json(&["--user", "dev", "export"]));
    assert!(refused.contains("needs capability s"), "{refused}");
    let work = repo.dir.path().join("work");
    let out = Command::new(ocx_bin())
        .args(["export", "--json"])
        .current_dir(&work)
        .output()
        .unwrap();
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["ok"], false);
    assert_eq!(answer["stopped"]["field"], "repository", "{answer}");
    let plain = Repo::new();
    let refused = refusal(&plain.json(&["export"]));
    assert!(refused.contains("no git export"), "{refused}");
    let elsewhere = tempfile::tempdir().unwrap();
    plain.fossil(&[
        "sql",
        &format!(
            "REPLACE INTO config(name,value,mtime) VALUES('last-git-export-repo','{}',now())",
            elsewhere.path().display()
        ),
    ]);
    let refused = refusal(&plain.json(&["export"]));
    assert!(refused.contains("holds no git repository"), "{refused}");
}

#[test]
fn a_run_that_finds_the_lock_held_leaves_its_mark_for_the_holder() {
    let (repo, mirror) = exported_repo();
    repo.commit_as("admin", "c.txt", "three\n", None);
    let export = ocx::git::Export {
        dir: mirror.clone(),
    };
    let fossil = ocx::fossil::Fossil::at(&fossil()).unwrap();
    let held = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(mirror.join(".git/ocx-export-lock"))
        .unwrap();
    let held = nix::fcntl::Flock::lock(held, nix::fcntl::FlockArg::LockExclusive).unwrap();
    let went = export
        .keep_current(&fossil, &repo.file, ocx::git::export::Wait::No)
        .unwrap();
    assert!(went.is_none(), "the lock is held, so this run goes");
    assert!(
        mirror.join(".git/ocx-export-again").exists(),
        "its mark is left"
    );
    assert!(export.last_run().is_none(), "and it exported nothing");
    let waiting = Command::new(ocx_bin())
        .args(["export", "--json", "--repository"])
        .arg(&repo.file)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(held);
    let out = waiting.wait_with_output().unwrap();
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["ok"], true, "{answer}");
    assert_eq!(
        answer["result"]["run"]["added"],
        serde_json::json!([1]),
        "{answer}"
    );
    assert_eq!(
        answer["result"]["run"]["runs"], 1,
        "one export for both marks: {answer}"
    );
    assert!(!mirror.join(".git/ocx-export-again").exists());
}

#[test]
fn hook_install_adds_no_export_of_fossils_own_and_names_one_there() {
    let (repo, _mirror) = exported_repo();
    let fossils_own = |repo: &Repo| {
        ocx::fossil::Repository::open(&repo.file)
            .unwrap()
            .fossil_export_hooks()
            .unwrap()
            .len()
    };
    repo.json(&["hook", "install", "--url", "http://127.0.0.1:1/"])
        .ok();
    assert_eq!(
        fossils_own(&repo),
        0,
        "OCX installs no export of Fossil's own"
    );
    repo.fossil(&[
        "hook",
        "add",
        "--type",
        "after-receive",
        "--command",
        "%F git export --if-mirrored -R %R",
    ]);
    let again = repo
        .json(&["hook", "install", "--url", "http://127.0.0.1:1/"])
        .ok();
    let note = again["note"].as_str().unwrap_or_default();
    assert!(note.contains("Fossil's own git export"), "{again}");
    assert!(note.contains("outside"), "{again}");
    assert_eq!(fossils_own(&repo), 1, "left as it was, and no second one");
}

#[test]
fn mcp_does_not_offer_export() {
    let (repo, _mirror) = exported_repo();
    let mut child = crate::support::piped(
        Command::new(ocx_bin())
            .args(["--mcp", "--repository"])
            .arg(&repo.file)
            .args(["--user", "admin"]),
    );
    let mut stdin = child.stdin.take().unwrap();
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ocx_export","arguments":{}}}"#,
    ];
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
    }
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut answers = Vec::new();
    while answers.len() < 3 {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut out, &mut line).unwrap() == 0 {
            break;
        }
        answers.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    let listed = answers.iter().find(|a| a["id"] == 2).unwrap();
    let names = crate::support::tool_names(listed);
    assert!(names.contains(&"ocx_status"), "{names:?}");
    assert!(!names.contains(&"ocx_export"), "{names:?}");
    let called = answers.iter().find(|a| a["id"] == 3).unwrap();
    assert!(called.get("error").is_some(), "{called}");
    assert!(
        !repo
            .dir
            .path()
            .join("mirror/.git/ocx-export-last.json")
            .exists()
    );
}

#[test]
fn where_fossil_cannot_say_what_awaits_the_export_says_why_and_mends_it() {
    let (repo, mirror) = exported_repo();
    repo.commit_as("admin", "c.txt", "three\n", None);
    std::fs::remove_file(mirror.join(".mirror_state/db")).unwrap();
    let dry = repo.json(&["export", "--dry-run"]).ok();
    assert!(dry.get("awaiting").is_none(), "{dry}");
    assert!(
        dry["unreadable"]
            .as_str()
            .is_some_and(|u| u.contains("the git export's state")),
        "{dry}"
    );
    let mended = repo.json(&["export"]).ok();
    assert_eq!(mended["awaiting"], 0, "{mended}");
    assert!(mended.get("unreadable").is_none(), "{mended}");
    clone_holds_c_three(&repo);
}

#[test]
fn an_export_git_cannot_read_is_500() {
    let (repo, mirror) = exported_repo();
    let server = serve(&repo, false);
    std::fs::write(mirror.join(".git/config"), "[core\nbroken = = =\n").unwrap();
    let (status, _, _) = server.request_bytes(
        "GET",
        "/ext/git/repo.git/info/refs?service=git-upload-pack",
        &[],
        b"",
    );
    assert_eq!(status, 500);
}

/// The hash of the newest control artifact (tag change) the repository holds.
fn newest_tag_change(repo: &Repo) -> String {
    let db = rusqlite::Connection::open(&repo.file).unwrap();
    db.query_row(
        "SELECT b.uuid FROM event e JOIN blob b ON b.rid=e.objid WHERE e.type='g' ORDER BY e.objid DESC LIMIT 1",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

#[test]
fn a_checkin_or_a_tag_on_one_changes_the_export_and_a_tag_on_a_post_does_not() {
    let repo = Repo::new();
    let checkin = repo.commit_as("admin", "a.txt", "one\n", None);
    let adds = |hash: &str| {
        ocx::fossil::Repository::open(&repo.file)
            .unwrap()
            .adds_to_export(&[hash.to_string()])
            .unwrap()
    };
    assert!(adds(&checkin));
    repo.fossil(&["tag", "add", "v1", &checkin]);
    assert!(adds(&newest_tag_change(&repo)), "a tag on a check-in");
    repo.json(&["post", "--title", "Hello", "--text", "a post"])
        .ok();
    let db = rusqlite::Connection::open(&repo.file).unwrap();
    let post: String = db
        .query_row(
            "SELECT b.uuid FROM forumpost f JOIN blob b ON b.rid=f.fpid",
            [],
            |r| r.get(0),
        )
        .unwrap();
    repo.fossil(&["tag", "add", "seen", &post]);
    assert!(!adds(&newest_tag_change(&repo)), "a tag on a post");
    assert!(!adds(&post), "a post");
    let file: String = db
        .query_row(
            "SELECT b.uuid FROM blob b WHERE NOT EXISTS(SELECT 1 FROM event e WHERE e.objid=b.rid) LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!adds(&file), "a file");
    assert!(!adds(&"0".repeat(64)), "nothing");
}

/// Commits `file` in `repo`'s checkout on `branch` (trunk when none),
/// dated `date` (UTC) whatever its parent's date; its hash.
fn commit_dated(
    repo: &Repo,
    file: &str,
    content: &str,
    branch: Option<&str>,
    date: &str,
) -> String {
    repo.commit_dated("admin", file, content, branch, Some(date))
}

/// The Fossil check-ins each commit reachable from git's `refname` in
/// `mirror` was exported from (their `FossilOrigin-Name` lines).
fn origins(mirror: &Path, refname: &str) -> std::collections::BTreeSet<String> {
    git_ok(mirror, &["log", "--format=%B", refname])
        .lines()
        .filter_map(|l| l.strip_prefix("FossilOrigin-Name: "))
        .map(|h| h.trim().to_string())
        .collect()
}

/// Every check-in of `repo` on `branch`, by hash.
fn branch_checkins(repo: &Repo, branch: &str) -> std::collections::BTreeSet<String> {
    let db = rusqlite::Connection::open(&repo.file).unwrap();
    let mut st = db
        .prepare(
            "SELECT b.uuid FROM event e JOIN blob b ON b.rid=e.objid JOIN tagxref x ON x.rid=e.objid
             WHERE e.type='ci' AND x.tagid=8 AND x.tagtype>0 AND x.value=?1",
        )
        .unwrap();
    st.query_map([branch], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn checkins_dated_before_the_last_export_reach_git_and_what_awaits_is_what_git_lacks() {
    let (repo, mirror) = exported_repo();
    // Dated before everything exported: Fossil's own export passes it over
    // (its watermark is the newest time it exported) and says all is current.
    let early = commit_dated(&repo, "early.txt", "early\n", None, "2020-01-01 05:00:00");
    let dry = repo.json(&["export", "--dry-run"]).ok();
    assert_eq!(dry["awaiting"], 1, "the early check-in awaits: {dry}");
    let done = repo.json(&["export"]).ok();
    assert_eq!(done["awaiting"], 0, "{done}");
    assert_eq!(done["run"]["added"], serde_json::json!([1]), "{done}");
    assert_eq!(origins(&mirror, "master"), branch_checkins(&repo, "trunk"));
    assert!(
        git_ok(&mirror, &["log", "-1", "--format=%B", "master"]).contains(&early),
        "git's master is trunk's newest check-in, the early one"
    );

    // A child dated after it, and a branch whose check-in is dated earlier
    // still, reach git in one export; each branch's head is its leaf.
    let later = commit_dated(&repo, "later.txt", "later\n", None, "2020-01-01 10:00:00");
    let side = commit_dated(
        &repo,
        "side.txt",
        "side\n",
        Some("side"),
        "2019-06-01 00:00:00",
    );
    assert_eq!(repo.json(&["export", "--dry-run"]).ok()["awaiting"], 2);
    let done = repo.json(&["export"]).ok();
    assert_eq!(done["awaiting"], 0, "{done}");
    let status = repo.json(&["status"]).ok();
    assert_eq!(status["git_export"]["awaiting"], 0, "{status}");
    assert_eq!(origins(&mirror, "master"), branch_checkins(&repo, "trunk"));
    assert!(origins(&mirror, "master").contains(&later));
    assert_eq!(
        origins(&mirror, "side")
            .difference(&origins(&mirror, "master"))
            .collect::<Vec<_>>(),
        vec![&side],
        "the side branch's one check-in is its head"
    );
    let again = repo.json(&["export"]).ok();
    assert_eq!(
        again["run"]["added"],
        serde_json::json!([0]),
        "nothing is sent twice: {again}"
    );

    // A clone of the export over HTTP has them all.
    let server = serve(&repo, false);
    let work = tempfile::tempdir().unwrap();
    let cloned = clone(work.path(), &server.url("/ext/git/repo.git"), &[]).unwrap();
    for file in ["early.txt", "later.txt"] {
        assert!(cloned.join(file).is_file(), "{file} is in the clone");
    }
}

/// Commits `name.txt` (holding `name`, its message too) in the git
/// repository `up`, authored and committed at `hour`:00 on 1 January 2026 (UTC).
fn commit_at(up: &Path, name: &str, hour: &str) {
    std::fs::write(up.join(format!("{name}.txt")), name).unwrap();
    let date = format!("2026-01-01T{hour}:00:00Z");
    for args in [&["add", "."][..], &["commit", "-qm", name]] {
        let out = Command::new(git_program())
            .args(args)
            .current_dir(up)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "Up Stream")
            .env("GIT_AUTHOR_EMAIL", "up@example.org")
            .env("GIT_COMMITTER_NAME", "Up Stream")
            .env("GIT_COMMITTER_EMAIL", "up@example.org")
            .env("GIT_AUTHOR_DATE", &date)
            .env("GIT_COMMITTER_DATE", &date)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", said(&out));
    }
}

#[test]
fn upstream_commits_dated_out_of_order_all_reach_the_export() {
    let dir = tempfile::tempdir().unwrap();
    let up = dir.path().join("up");
    std::fs::create_dir_all(&up).unwrap();
    git_ok(&up, &["init", "-q", "-b", "main"]);
    commit_at(&up, "one", "06");
    commit_at(&up, "two", "07");
    let ocx = |args: &[&str]| {
        let mut c = Command::new(ocx_bin());
        c.args(args).arg("--json").current_dir(dir.path());
        crate::support::run(c, None)
    };
    let made = ocx(&["project", "demo", "--from", up.to_str().unwrap()]).ok();
    let mirror = PathBuf::from(made["git_export"].as_str().unwrap());
    let repo = ["-R", "demo.fossil", "--user", "admin"];
    for (n, hour) in [("three", "05"), ("four", "10")] {
        commit_at(&up, n, hour);
        ocx(&[&["upstream"], &repo[..]].concat()).ok();
        let done = ocx(&[&["export"], &repo[..]].concat()).ok();
        assert_eq!(done["awaiting"], 0, "after {n}: {done}");
        let subjects = git_ok(&mirror, &["log", "--format=%s", "master"]);
        assert!(
            subjects.lines().next() == Some(n),
            "master's head is {n}, the upstream's newest: {subjects}"
        );
        assert!(
            subjects.contains("one") && subjects.contains("two"),
            "{subjects}"
        );
    }
    let subjects = git_ok(&mirror, &["log", "--format=%s", "master"]);
    assert_eq!(subjects.lines().count(), 4, "{subjects}");

    // Fossil's own check-in, dated now, then an upstream commit dated
    // before it, which goes beside it onto upstream/trunk: both reach git.
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let fossil_in = |args: &[&str]| crate::support::fossil_in(&work, args);
    fossil_in(&["open", dir.path().join("demo.fossil").to_str().unwrap()]);
    std::fs::write(work.join("mine.txt"), "mine").unwrap();
    fossil_in(&["add", "mine.txt"]);
    fossil_in(&["commit", "-m", "mine", "--user", "admin", "--no-warnings"]);
    fossil_in(&["close"]);
    commit_at(&up, "five", "11");
    let brought = ocx(&[&["upstream"], &repo[..]].concat()).ok();
    assert_eq!(
        brought["brought"]["branches"][0]["onto"], "upstream/trunk",
        "{brought}"
    );
    let done = ocx(&[&["export"], &repo[..]].concat()).ok();
    assert_eq!(done["awaiting"], 0, "{done}");
    let head = |branch: &str| git_ok(&mirror, &["log", "-1", "--format=%s", branch]);
    assert_eq!(head("master").trim(), "mine");
    assert_eq!(head("upstream/trunk").trim(), "five");
}
