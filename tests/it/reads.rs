//! Reading: `thread` and `receipt` name each artifact's sender by the
//! repository's receipt, never the name written inside it, the hot
//! queries are answered by indexes, and a writer killed mid-write stops no
//! read.

use crate::support::Repo;
use ocx::fossil::artifact::{self, ForumPost};

#[test]
fn thread_gives_posts_in_received_order_with_their_senders() {
    let r = Repo::new();
    r.user("alice", "v4").user("bob", "u4");
    let root = r
        .json(&[
            "post", "--user", "alice", "--title", "Order", "--text", "one",
        ])
        .ok_str("hash");
    let two = r
        .json(&["post", "--user", "bob", "--to", &root, "--text", "two"])
        .ok_str("hash");
    let three = r
        .json(&["post", "--user", "admin", "--to", &two, "--text", "three"])
        .ok_str("hash");
    let out = r
        .json(&["thread", "--user", "bob", "--of", &three[..10]])
        .ok();
    let posts = out["posts"].as_array().unwrap();
    let seen: Vec<(&str, &str, &str)> = posts
        .iter()
        .map(|p| {
            (
                p["hash"].as_str().unwrap(),
                p["from"].as_str().unwrap(),
                p["text"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (root.as_str(), "alice", "one"),
            (two.as_str(), "bob", "two"),
            (three.as_str(), "admin", "three")
        ]
    );
    assert_eq!(out["more"], 0);
    assert!(posts[0]["when"].as_str().unwrap().ends_with('Z'));
    let after = r
        .json(&["thread", "--user", "bob", "--of", &root, "--after", &two])
        .ok();
    assert_eq!(after["posts"].as_array().unwrap().len(), 1);
    assert_eq!(after["posts"][0]["hash"].as_str(), Some(three.as_str()));
}

#[test]
fn thread_pages_at_twenty_and_counts_the_rest() {
    let r = Repo::new();
    let root = r
        .json(&["post", "--title", "Long", "--text", "0"])
        .ok_str("hash");
    for i in 1..25 {
        r.json(&["post", "--to", &root, "--text", &i.to_string()])
            .ok();
    }
    let out = r.json(&["thread", "--of", &root]).ok();
    assert_eq!(out["posts"].as_array().unwrap().len(), 20);
    assert_eq!(out["more"], 5);
    let last = out["posts"][19]["hash"].as_str().unwrap().to_string();
    let rest = r.json(&["thread", "--of", &root, "--after", &last]).ok();
    assert_eq!(rest["posts"].as_array().unwrap().len(), 5);
    assert_eq!(rest["posts"][4]["text"], "24");
}

#[test]
fn a_u_card_naming_admin_sent_by_another_is_reported_as_the_other() {
    let r = Repo::new();
    r.user("mallory", "i4");
    let date = artifact::now();
    let forged = ForumPost {
        date: &date,
        reply: None,
        title: Some("From the admin, honestly"),
        mimetype: "text/x-markdown",
        user: "admin",
        text: "trust me",
    }
    .compose();
    let hash = r.import_as("mallory", &[forged]).remove(0);
    let receipt = r.json(&["receipt", "--artifacts", &hash]).ok();
    assert_eq!(receipt["artifacts"][0]["received"], true);
    assert_eq!(receipt["artifacts"][0]["user"], "mallory");
    assert!(
        !receipt["artifacts"][0]["capabilities"]
            .as_str()
            .unwrap()
            .contains('a'),
        "mallory is no admin"
    );
    let thread = r.json(&["thread", "--of", &hash]).ok();
    assert_eq!(thread["posts"][0]["from"], "mallory");
    assert!(
        r.fossil(&["artifact", &hash]).contains("U admin"),
        "the artifact itself claims admin"
    );
}

#[test]
fn receipt_answers_in_the_order_asked_and_refuses_prefixes() {
    let r = Repo::new();
    r.user("alice", "v4").user("zed", "");
    let h = r
        .json(&["post", "--user", "alice", "--title", "R", "--text", "x"])
        .ok_str("hash");
    let unknown = "f".repeat(64);
    let out = r
        .json(&[
            "receipt",
            "--artifacts",
            &format!("{unknown} {h}"),
            "--capabilities-of",
            "alice",
        ])
        .ok();
    assert_eq!(out["artifacts"][0]["received"], false);
    assert_eq!(out["artifacts"][1]["hash"].as_str(), Some(h.as_str()));
    assert_eq!(out["artifacts"][1]["user"], "alice");
    let rcvid = out["artifacts"][1]["rcvid"].as_i64().unwrap();
    assert!(rcvid > 1);
    assert_eq!(out["capabilities_of"]["capabilities"], "eghijorvz234");
    let prefix = r.json(&["receipt", "--artifacts", &h[..12]]);
    assert_eq!(prefix.refused(), "artifacts[0]");
    r.fossil(&["user", "capabilities", "nobody", "gz"]);
    let blind = r
        .json(&["receipt", "--user", "zed", "--artifacts", &h])
        .ok();
    assert_eq!(
        blind["artifacts"][0]["received"], false,
        "a caller who may not read learns nothing"
    );
}

#[test]
fn the_hot_queries_use_indexes() {
    let r = Repo::new();
    r.json(&["post", "--title", "make the forum table", "--text", "x"])
        .ok();
    // First with the statistics `fossil new` left (a row or so in each
    // table), as a new repository keeps them while it grows past them:
    // then without any, as SQLite plans for tables of any size. With the
    // first, SQLite reads a range of row numbers as a scan of a table it
    // believes holds one row whatever the query says, so the arrivals
    // (a range of rows) are held to their plan without statistics alone.
    for stats in ["as fossil new left them", "none"] {
        if stats == "none" {
            r.fossil(&["sql", "DELETE FROM sqlite_stat1"]);
        }
        let repo = ocx::fossil::Repository::open(&r.file).unwrap();
        let mut scanning = Vec::new();
        for (name, sql) in ocx::fossil::repo::HOT_QUERIES {
            if stats != "none" && name.starts_with("arrivals_") {
                continue;
            }
            let plan = repo.query_plan(sql).unwrap();
            // A table is scanned by its name or by the alias the query
            // gives it (`blob b`), so every scan counts but a list's.
            if plan.iter().any(|step| {
                step.starts_with("SCAN ")
                    && !step.starts_with("SCAN json_each")
                    && !step.ends_with("VALUES CLAUSE")
            }) {
                scanning.push(format!("{name}: {plan:?}"));
            }
        }
        assert!(
            scanning.is_empty(),
            "with statistics {stats}, these scan a table:\n{}",
            scanning.join("\n")
        );
    }
    let repo = ocx::fossil::Repository::open(&r.file).unwrap();
    let (_, caller) = ocx::fossil::repo::HOT_QUERIES
        .iter()
        .find(|(name, _)| *name == "capabilities")
        .unwrap();
    let plan = repo.query_plan(caller).unwrap();
    assert!(
        plan.iter()
            .any(|s| s.starts_with("SEARCH u USING INDEX sqlite_autoindex_user_1")),
        "the caller is found by the login's index, though the user table is small: {plan:?}"
    );
}

#[test]
fn status_says_who_and_where() {
    let r = Repo::new();
    r.user("alice", "v");
    let out = r.json(&["status", "--user", "alice"]).ok();
    assert_eq!(out["login"], "alice");
    assert_eq!(
        out["capabilities"], "eghijorvz",
        "developer's letters inherited"
    );
    assert_eq!(out["node"], false);
    assert_eq!(out["restrictions_enforced"], serde_json::json!([]));
    assert_eq!(out["server_code"].as_str().unwrap().len(), 40);
    assert!(out["fossil"]["version"].as_str().is_some());
    let admin = r.json(&["status"]).ok();
    assert_eq!(admin["login"], "admin", "the repository's default user");
}

/// A `fossil` killed in the middle of a write leaves its journal beside
/// the repository; SQLite answers a connection opened read-only "attempt
/// to write a readonly database" for as long as it lies there (and, now
/// and then, while any writer commits). The node, the page and every
/// tool read on: what the writer had begun is put back.
#[test]
fn a_read_after_a_fossil_killed_mid_write_sees_the_repository_as_before() {
    use std::io::{BufRead, Write};
    let r = Repo::new();
    let before = ocx::fossil::Repository::open(&r.file)
        .unwrap()
        .project_code()
        .unwrap();
    let mut writer = std::process::Command::new(crate::support::fossil())
        .args(["sql", "-R"])
        .arg(&r.file)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // A cache of one page spills the change to the file, as a long write does.
    writer
        .stdin
        .as_mut()
        .unwrap()
        .write_all(
            b"PRAGMA cache_size=1; BEGIN; UPDATE config SET value='half' WHERE name='project-code'; \
              WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i<100) \
              INSERT INTO config SELECT 'filler-'||i, randomblob(4000), 0 FROM n; SELECT 'begun';\n",
        )
        .unwrap();
    let mut said = String::new();
    std::io::BufReader::new(writer.stdout.as_mut().unwrap())
        .read_line(&mut said)
        .unwrap();
    assert!(said.contains("begun"), "{said}");
    writer.kill().unwrap();
    writer.wait().unwrap();
    let journal = r.file.with_file_name(format!(
        "{}-journal",
        r.file.file_name().unwrap().to_string_lossy()
    ));
    assert!(journal.exists(), "the killed write left no journal");

    let repo = ocx::fossil::Repository::open(&r.file).unwrap();
    assert_eq!(repo.project_code().unwrap(), before);
    assert_eq!(repo.config("filler-1").unwrap(), None);
    assert!(!journal.exists(), "the half-done write was not put back");
    assert_eq!(r.json(&["status"]).ok()["login"], "admin");
}
