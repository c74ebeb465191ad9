//! The agent's tools on a real checkout: a clone of a repository served by
//! `fossil server`, one edit walked from `context` to `save` (a miss, an
//! ambiguous match, a failing test blocking save, a passing one letting it
//! through), the push received as the caller; paths kept inside; the wiki
//! and unversioned files written as the caller.

use crate::support::{Page, Repo, Run, Served, ServedNode, fossil, ocx_bin, run};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A clone of the served repository as `login`, opened in a directory of
/// its own, its password remembered as a person's clone remembers it.
struct Clone {
    _dir: tempfile::TempDir,
    checkout: PathBuf,
}

fn fossil_in(dir: &Path, args: &[&str]) -> String {
    crate::support::succeeds(
        Command::new(fossil())
            .args(args)
            .current_dir(dir)
            .env("USER", "nobody-here")
            .stdin(Stdio::null()),
    )
}

fn clone_as(served: &ServedNode, login: &str, password: &str) -> Clone {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://{login}:{password}@127.0.0.1:{}/", served.port);
    fossil_in(dir.path(), &["clone", &url, "clone.fossil"]);
    let checkout = dir.path().join("work");
    std::fs::create_dir(&checkout).unwrap();
    fossil_in(&checkout, &["open", "--nosync", "../clone.fossil"]);
    // Fossil remembers a sync password only when a person says so at a
    // terminal; `script` gives it one.
    let out = Command::new("script")
        .args([
            "-qec",
            &format!("{} remote {url}", fossil().display()),
            "/dev/null",
        ])
        .current_dir(&checkout)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"y\n")?;
            c.wait()
        })
        .expect("script (util-linux) must be installed");
    assert!(out.success());
    Clone {
        _dir: dir,
        checkout,
    }
}

/// Runs `ocx TOOL ... --json --user LOGIN` in `dir`.
fn ocx_in(dir: &Path, login: &str, args: &[&str]) -> Run {
    let mut c = Command::new(ocx_bin());
    c.args(args)
        .args(["--json", "--user", login])
        .current_dir(dir);
    run(c, None)
}

/// The answer's refusal, asserting it stopped: (field, reason).
fn refusal(r: &Run) -> (String, String) {
    r.refused();
    let a = r.answer();
    (
        a["stopped"]["field"].as_str().unwrap_or("").to_string(),
        a["stopped"]["reason"].as_str().unwrap().to_string(),
    )
}

fn sql(repo: &Repo, query: &str, hash: &str) -> String {
    let db = rusqlite::Connection::open(&repo.file).unwrap();
    db.query_row(query, [hash], |r| r.get::<_, String>(0))
        .unwrap_or_default()
}

#[test]
fn one_edit_walks_from_context_to_save_and_is_pushed_as_the_caller() {
    let served = Served::new()
        .login("alice", "i")
        .page(Page::Fossil)
        .without_node()
        .start();
    let served_repo = &served.repo;
    let clone = clone_as(&served, "alice", "alice-pw");
    let co = clone.checkout.as_path();
    std::fs::write(
        co.join("ocx-tests.json"),
        r#"{"tests": [{"name": "fixed", "command": "grep -q 'gamma fixed' notes.txt && echo ok"}]}"#,
    )
    .unwrap();

    let made = ocx_in(
        co,
        "alice",
        &[
            "edit",
            "--path",
            "notes.txt",
            "--old",
            "",
            "--new",
            "alpha\nbeta\nbeta\ngamma\n",
        ],
    )
    .ok();
    assert_eq!(made["first_line"], 1);

    let cx = ocx_in(co, "alice", &["context"]).ok();
    let branch = cx["working_branch"].as_str().unwrap().to_string();
    assert!(
        branch.starts_with("agent/alice-") && branch.len() == "agent/alice-".len() + 8,
        "{branch}"
    );
    assert_eq!(cx["tests"][0]["name"], "fixed");
    assert_eq!(cx["changed"][0]["path"], "notes.txt");

    let found = ocx_in(co, "alice", &["find", "beta"]).ok();
    assert_eq!(found["matches"].as_array().unwrap().len(), 2);
    assert_eq!(found["matches"][1]["line"], 3);

    let read = ocx_in(co, "alice", &["read", "notes.txt", "--from", "3"]).ok();
    assert_eq!(read["text"], "beta\ngamma\n");
    assert_eq!(
        (read["first_line"].clone(), read["lines"].clone()),
        (3.into(), 4.into())
    );

    let miss = ocx_in(
        co,
        "alice",
        &[
            "edit",
            "--path",
            "notes.txt",
            "--old",
            "gamme",
            "--new",
            "x",
        ],
    );
    let (field, reason) = refusal(&miss);
    assert_eq!(field, "old");
    assert!(
        reason.contains("4: gamma"),
        "the closest line with its number: {reason}"
    );

    let several = ocx_in(
        co,
        "alice",
        &["edit", "--path", "notes.txt", "--old", "beta", "--new", "x"],
    );
    let (field, reason) = refusal(&several);
    assert_eq!(field, "old");
    assert!(reason.contains("lines 2, 3"), "{reason}");

    let failing = ocx_in(co, "alice", &["test"]).ok();
    assert_eq!(failing["passed"], false);
    let (_, reason) = refusal(&ocx_in(
        co,
        "alice",
        &[
            "save",
            "--title",
            "t",
            "--intent",
            "i",
            "--expression",
            "e",
            "--demonstrates",
            "fixed",
        ],
    ));
    assert!(reason.contains("fixed"), "{reason}");

    let dry = ocx_in(
        co,
        "alice",
        &[
            "edit",
            "--dry-run",
            "--path",
            "notes.txt",
            "--old",
            "gamma\n",
            "--new",
            "gamma fixed\n",
        ],
    )
    .ok();
    assert_eq!(dry["text"], "gamma fixed\n");
    assert_eq!(
        std::fs::read_to_string(co.join("notes.txt")).unwrap(),
        "alpha\nbeta\nbeta\ngamma\n",
        "a dry run changes nothing"
    );

    let edited = ocx_in(
        co,
        "alice",
        &[
            "edit",
            "--path",
            "notes.txt",
            "--old",
            "gamma\n",
            "--new",
            "gamma fixed\n",
        ],
    )
    .ok();
    assert_eq!(edited["text"], "gamma fixed\n");
    assert_eq!(edited["first_line"], 4);
    let passing = ocx_in(co, "alice", &["test", "--name", "fixed"]).ok();
    assert_eq!(passing["passed"], true, "{passing:#}");
    assert_eq!(passing["tests"][0]["output"], "ok");

    let dry = ocx_in(
        co,
        "alice",
        &[
            "save",
            "--dry-run",
            "--title",
            "t",
            "--intent",
            "i",
            "--expression",
            "e",
            "--demonstrates",
            "d",
        ],
    )
    .ok();
    assert!(dry["checkin"].is_null());

    let saved = ocx_in(
        co,
        "alice",
        &[
            "save",
            "--title",
            "Fix gamma",
            "--intent",
            "gamma was not fixed",
            "--expression",
            "notes.txt line 4",
            "--demonstrates",
            "the test fixed",
        ],
    )
    .ok();
    let hash = saved["checkin"].as_str().unwrap().to_string();
    assert_eq!(saved["pushed"], true);
    assert_eq!(saved["branch"], branch.as_str());
    assert_eq!(saved["sent_as"], "alice");
    assert!(
        saved["link"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/info/{hash}"))
    );

    assert_eq!(
        served_repo.sender(&hash).as_deref(),
        Some("alice"),
        "rcvfrom names the caller"
    );
    let comment = sql(
        served_repo,
        "SELECT comment FROM event JOIN blob ON blob.rid=event.objid WHERE blob.uuid=?1",
        &hash,
    );
    assert_eq!(
        comment,
        "Fix gamma\nintent: gamma was not fixed\nexpression: notes.txt line 4\ndemonstrates: the test fixed"
    );
    let on = sql(
        served_repo,
        "SELECT x.value FROM tagxref x JOIN tag t ON t.tagid=x.tagid JOIN blob b ON b.rid=x.rid WHERE t.tagname='branch' AND b.uuid=?1",
        &hash,
    );
    assert_eq!(on, branch);
    let user = sql(
        served_repo,
        "SELECT user FROM event JOIN blob ON blob.rid=event.objid WHERE blob.uuid=?1",
        &hash,
    );
    assert_eq!(user, "alice");

    // A new edit makes the old pass stale.
    ocx_in(
        co,
        "alice",
        &[
            "edit",
            "--path",
            "notes.txt",
            "--old",
            "alpha",
            "--new",
            "ALPHA",
        ],
    )
    .ok();
    refusal(&ocx_in(
        co,
        "alice",
        &[
            "save",
            "--title",
            "t",
            "--intent",
            "i",
            "--expression",
            "e",
            "--demonstrates",
            "d",
        ],
    ));

    // A push that fails keeps the check-in and says to save again.
    ocx_in(co, "alice", &["test"]).ok();
    drop(served);
    let args = [
        "save",
        "--title",
        "t",
        "--intent",
        "i",
        "--expression",
        "e",
        "--demonstrates",
        "d",
    ];
    let failed = ocx_in(co, "alice", &args);
    failed.failed();
    let next = failed.answer()["next_step"].as_str().unwrap().to_string();
    assert!(next.contains("save again"), "{next}");
    let changed = ocx_in(co, "alice", &["context"]).ok()["changed"].clone();
    assert_eq!(changed, Value::Array(vec![]), "the check-in is kept");
}

#[test]
fn paths_leading_out_of_the_checkout_are_refused() {
    let repo = Repo::new();
    let dir = tempfile::tempdir().unwrap();
    let co = dir.path().join("co");
    std::fs::create_dir(&co).unwrap();
    fossil_in(&co, &["open", repo.file.to_str().unwrap()]);
    let outside = dir.path().join("secret.txt");
    std::fs::write(&outside, "secret\n").unwrap();
    std::os::unix::fs::symlink(dir.path(), co.join("up")).unwrap();
    std::os::unix::fs::symlink(&outside, co.join("link.txt")).unwrap();
    for path in [
        "../secret.txt",
        outside.to_str().unwrap(),
        "up/secret.txt",
        "link.txt",
        "sub/../../secret.txt",
        ".fslckout",
    ] {
        let (field, _) = refusal(&ocx_in(&co, "admin", &["read", path]));
        assert_eq!(field, "path", "{path}");
        let (field, _) = refusal(&ocx_in(
            &co,
            "admin",
            &["edit", "--path", path, "--old", "", "--new", "x"],
        ));
        assert_eq!(field, "path", "{path}");
    }
    let (field, _) = refusal(&ocx_in(
        &co,
        "admin",
        &["edit", "--path", "up/new.txt", "--old", "", "--new", "x"],
    ));
    assert_eq!(field, "path");
    assert!(!dir.path().join("new.txt").exists());
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret\n");
    let (field, _) = refusal(&ocx_in(&co, "admin", &["find", "secret", "--path", "up"]));
    assert_eq!(field, "path");
    let found = ocx_in(&co, "admin", &["find", "secret"]).ok();
    assert_eq!(
        found["matches"],
        Value::Array(vec![]),
        "links are not followed"
    );
}

#[test]
fn wiki_and_unversioned_files_are_written_as_the_caller() {
    let repo = Repo::new();
    repo.user("carol", "jkoy");
    repo.user("dave", "jo");
    let page = repo
        .json(&[
            "--user",
            "carol",
            "wiki_edit",
            "--page",
            "Design Notes",
            "--old",
            "",
            "--new",
            "# Notes\nfirst\nsecond\n",
        ])
        .ok();
    let v1 = page["version"].as_str().unwrap().to_string();
    assert_eq!(repo.sender(&v1).as_deref(), Some("carol"));
    let read = repo
        .json(&["--user", "dave", "wiki_read", "Design Notes", "--from", "2"])
        .ok();
    assert_eq!(read["text"], "first\nsecond\n");
    let v2 = repo
        .json(&[
            "--user",
            "carol",
            "wiki_edit",
            "--page",
            "Design Notes",
            "--old",
            "first",
            "--new",
            "1st",
        ])
        .ok_str("version");
    assert_eq!(
        repo.fossil(&["wiki", "export", "Design Notes"]),
        "# Notes\n1st\nsecond\n"
    );
    assert_eq!(repo.sender(&v2).as_deref(), Some("carol"));
    repo.json(&[
        "--user",
        "dave",
        "wiki_edit",
        "--page",
        "Design Notes",
        "--old",
        "1st",
        "--new",
        "x",
    ])
    .refused();

    repo.json(&[
        "--user",
        "carol",
        "unversioned_put",
        "--name",
        "docs/a.bin",
        "--base64",
        "AAECAw==",
    ])
    .ok();
    repo.json(&[
        "--user",
        "dave",
        "unversioned_put",
        "--name",
        "docs/b.txt",
        "--text",
        "x",
    ])
    .refused();
    let list = repo.json(&["--user", "dave", "unversioned_list"]).ok();
    assert_eq!(list["files"][0]["name"], "docs/a.bin");
    let got = repo
        .json(&["--user", "dave", "unversioned_get", "docs/a.bin"])
        .ok();
    assert_eq!(got["base64"], "AAECAw==");
    let db = rusqlite::Connection::open(&repo.file).unwrap();
    let sender: String = db
        .query_row(
            "SELECT u.login FROM unversioned v JOIN rcvfrom r ON r.rcvid=v.rcvid JOIN user u ON u.uid=r.uid WHERE v.name='docs/a.bin'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(sender, "carol");
}
