//! Writing: `post` stores what the caller says with the caller as its
//! sender, a dry run writes nothing, and every refusal writes nothing.

use crate::support::Repo;
use ocx::fossil::artifact;

/// alice's post that starts the thread "Plans".
pub const PLANS: [&str; 7] = [
    "post",
    "--user",
    "alice",
    "--title",
    "Plans",
    "--text",
    "Let us plan.",
];

fn forum() -> Repo {
    let r = Repo::new();
    r.user("alice", "v4").user("bob", "o").user("carol", "3");
    r
}

#[test]
fn a_posts_sender_in_rcvfrom_is_the_caller() {
    let r = forum();
    let root = r.json(&PLANS).ok();
    let hash = root["hash"].as_str().unwrap();
    assert_eq!(r.sender(hash).as_deref(), Some("alice"));
    let reply = r
        .json(&[
            "post",
            "--user",
            "admin",
            "--to",
            &hash[..12],
            "--text",
            "Agreed.",
        ])
        .ok();
    let reply_hash = reply["hash"].as_str().unwrap();
    assert_eq!(r.sender(reply_hash).as_deref(), Some("admin"));
    assert_eq!(reply["thread"], root["hash"]);
    let fossil_view = r.fossil(&["artifact", reply_hash]);
    assert!(
        fossil_view.contains(&format!("I {hash}")),
        "a reply names the post it answers: {fossil_view}"
    );
}

#[test]
fn a_dry_run_changes_nothing_and_says_what_it_would_write() {
    let r = forum();
    let before = r.hashes();
    let run = r.json(&[&PLANS[..], &["--dry-run"]].concat());
    let a = run.answer();
    assert_eq!(a["ok"], true);
    assert_eq!(a["dry_run"], true);
    let ops: Vec<&str> = a["log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["op"].as_str().unwrap())
        .collect();
    assert!(ops.contains(&"compose") && ops.contains(&"store"), "{a:#}");
    let store = a["log"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["op"] == "store")
        .unwrap();
    assert_eq!(store["done"], false);
    assert_eq!(r.hashes(), before);
    let via_input = r.json(&[
        "post",
        "--user",
        "alice",
        "--input",
        r#"{"title":"P","text":"x","dry_run":true}"#,
    ]);
    assert_eq!(via_input.answer()["dry_run"], true);
    assert_eq!(r.hashes(), before);
}

#[test]
fn posting_needs_forum_write_and_writes_nothing_without_it() {
    let r = forum();
    let before = r.hashes();
    let run = r.json(&["post", "--user", "bob", "--title", "Hi", "--text", "hello"]);
    run.refused();
    assert!(
        run.answer()["stopped"]["reason"]
            .as_str()
            .unwrap()
            .contains("needs capability")
    );
    assert_eq!(r.hashes(), before);
}

#[test]
fn a_post_by_a_moderated_poster_awaits_a_moderator() {
    let r = forum();
    let out = r
        .json(&[
            "post", "--user", "carol", "--title", "Hi", "--text", "hello",
        ])
        .ok();
    assert_eq!(out["moderated"], true);
    let hash = out["hash"].as_str().unwrap();
    assert_eq!(r.sender(hash).as_deref(), Some("carol"));
    let db = rusqlite::Connection::open(&r.file).unwrap();
    let (private, queued): (i64, i64) = db
        .query_row(
            "SELECT (SELECT count(*) FROM private WHERE rid=b.rid), (SELECT count(*) FROM modreq WHERE objid=b.rid) FROM blob b WHERE uuid=?1",
            [hash],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        (private, queued),
        (1, 1),
        "private and in the moderators' queue"
    );
    let seen_by_alice = r.json(&["thread", "--user", "alice", "--of", hash]).ok();
    assert_eq!(
        seen_by_alice["posts"].as_array().unwrap().len(),
        0,
        "others do not see it until approved"
    );
}

#[test]
fn a_post_to_a_ticket_is_a_change_of_it_with_the_caller_as_sender() {
    let r = forum();
    r.fossil(&["user", "capabilities", "alice", "v4w"]);
    let added = r.fossil(&["ticket", "add", "title", "Broken", "status", "Open"]);
    let ticket = added.split_whitespace().last().unwrap().to_string();
    let out = r
        .json(&[
            "post",
            "--user",
            "alice",
            "--to",
            &ticket[..12],
            "--text",
            "It is broken here too.",
        ])
        .ok();
    assert_eq!(out["ticket"].as_str(), Some(ticket.as_str()));
    let hash = out["hash"].as_str().unwrap();
    assert_eq!(r.sender(hash).as_deref(), Some("alice"));
    let said = r.json(&["thread", "--user", "alice", "--of", &ticket]).ok();
    let posts = said["posts"].as_array().unwrap();
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0]["text"], "It is broken here too.");
    assert_eq!(posts[0]["from"], "alice");
}

#[test]
fn every_refusal_names_its_field_and_writes_nothing() {
    let r = forum();
    let root = r
        .json(&["post", "--user", "alice", "--title", "T", "--text", "x"])
        .ok();
    let root = root["hash"].as_str().unwrap().to_string();
    let before = r.hashes();
    // Each case's arguments after `post`, and the field it is refused at.
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--input", r#"{"title":"T","text":"x","zz":1}"#], "zz"),
        (vec!["--input", r#"{"title":"T","text":5}"#], "text"),
        (vec!["--input", r#"{"title":"T"}"#], "text"),
        (
            vec!["--input", r#"{"title":"T","text":"a\u0000b"}"#],
            "text",
        ),
        (vec!["--input", r#"{"to":"abc","text":"x"}"#], "to"),
        (vec!["--input", r#"{"to":"0123456789","text":"x"}"#], "to"),
        (
            vec!["--to", &root[..10], "--title", "T", "--text", "x"],
            "title",
        ),
        (vec!["--title", "two\nlines", "--text", "x"], "title"),
        (vec!["--title", "T", "--text", "  "], "text"),
        (
            vec!["--input", r#"{"title":"T","text":"x","dry_run":"yes"}"#],
            "dry_run",
        ),
        (vec!["--input", r#"["not an object"]"#], "input"),
    ];
    for (more, field) in cases {
        let args = [&["post"], &more[..], &["--user", "alice"]].concat();
        let run = r.json(&args);
        assert_eq!(run.refused(), field, "{args:?}: {}", run.stdout);
        assert_eq!(r.hashes(), before, "{args:?} wrote something");
    }
    let stdin = r.json_stdin(
        &["post", "--user", "alice", "--input", "-"],
        b"{\"title\":\"T\",\"text\":\"caf\xe9\"}",
    );
    assert_eq!(stdin.refused(), "text");
    let surrogate = r.json(&[
        "post",
        "--user",
        "alice",
        "--input",
        r#"{"title":"\udc00","text":"x"}"#,
    ]);
    assert_eq!(surrogate.refused(), "title");
    assert_eq!(r.hashes(), before);
}

#[test]
fn a_prefix_naming_several_is_refused() {
    let r = forum();
    let id_a = format!("abcdef0123{}", "0".repeat(30));
    let id_b = format!("abcdef0123{}", "1".repeat(30));
    let date = artifact::now();
    let a = artifact::ticket_change(
        &date,
        &id_a,
        "admin",
        &[("title", "A"), ("icomment", "first")],
    );
    let b = artifact::ticket_change(
        &date,
        &id_b,
        "admin",
        &[("title", "B"), ("icomment", "second")],
    );
    r.import_as("admin", &[a, b]);
    let before = r.hashes();
    let run = r.json(&[
        "post",
        "--user",
        "admin",
        "--to",
        "abcdef0123",
        "--text",
        "which?",
    ]);
    assert_eq!(run.refused(), "to");
    assert!(
        run.answer()["stopped"]["reason"]
            .as_str()
            .unwrap()
            .contains("several")
    );
    assert_eq!(r.hashes(), before);
    let one = r
        .json(&["thread", "--user", "admin", "--of", "abcdef01231"])
        .ok();
    assert_eq!(one["posts"][0]["text"], "second");
}

#[test]
fn a_post_in_a_clones_checkout_is_pushed_and_its_server_names_the_caller() {
    use std::process::Command;
    let r = forum();
    let mut server = crate::support::Served::new().without_node().start_on(&r);
    let port = server.port;
    let clone = r.dir.path().join("alice.fossil");
    let work = r.dir.path().join("alice");
    crate::support::succeeds(
        Command::new(crate::support::fossil())
            .arg("clone")
            .arg(format!("http://alice:alice-pw@127.0.0.1:{port}/"))
            .arg(&clone)
            .args(["--save-http-password", "--workdir"])
            .arg(&work)
            .env("USER", "alice"),
    );
    let mut c = Command::new(crate::support::ocx_bin());
    c.args([
        "post",
        "--json",
        "--user",
        "alice",
        "--title",
        "From my clone",
        "--text",
        "pushed as me",
    ])
    .current_dir(&work);
    let run = crate::support::run(c, None);
    server.halt();
    let posted = run.ok();
    let hash = posted["hash"].as_str().unwrap();
    assert!(
        run.answer()["log"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["op"] == "fossil" && o["done"] == true)
    );
    assert_eq!(
        r.sender(hash).as_deref(),
        Some("alice"),
        "the served repository received it from alice"
    );
}

#[test]
fn a_post_keeps_fossils_version_for_the_next_and_a_corrupt_file_of_it_is_written_anew() {
    use std::os::unix::fs::PermissionsExt;
    let r = forum();
    let home = tempfile::tempdir().unwrap();
    let post = |text: &str| {
        let mut c = std::process::Command::new(crate::support::ocx_bin());
        c.args(["post", "--json", "--user", "alice", "--title", "Plans"])
            .args(["--text", text, "--repository"])
            .arg(&r.file)
            .env("HOME", home.path())
            .env_remove("XDG_CACHE_HOME");
        crate::support::run(c, None).ok()
    };
    let fossil = ocx::fossil::Fossil::locate().unwrap();
    let kept = home.path().join(".cache/ocx/fossil-versions.json");
    let names_the_program = || {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&kept).unwrap()).unwrap();
        assert_eq!(
            v["programs"][0]["path"],
            fossil.path().to_str().unwrap(),
            "{v}"
        );
        assert_eq!(v["programs"][0]["version"], fossil.version(), "{v}");
    };
    post("Let us plan.");
    names_the_program();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&kept), 0o600);
    assert_eq!(mode(kept.parent().unwrap()), 0o700);
    std::fs::write(&kept, b"{\"programs\": [{\"path\": 7").unwrap();
    post("Let us plan again.");
    names_the_program();
}
