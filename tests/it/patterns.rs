//! Patterns (`run/NAME`): `create --pattern` from the version of a page an
//! administrator sent last (a later version from anyone else ignored),
//! from a URL (Markdown, Fossil's rendered page, a JSON object; a page of
//! this server read in the repository), and from a clone's checkout; a
//! pattern that does not read refused naming the page and its field;
//! `patterns` listing those that count; `tag_messages`.

use crate::support::{Repo, Served, ServedNode, runner_page};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::time::Duration;

/// The pattern page `run/NAME` holding `block`, written by `admin`.
/// `run/pats`, a pattern page only pat (no administrator) wrote: it
/// counts for nothing.
fn pats_own_page(repo: &Repo) {
    repo.json(&[
        "wiki_edit",
        "--page",
        "run/pats",
        "--old",
        "",
        "--new",
        &format!("```json\n{REVIEWER}\n```\n"),
        "--user",
        "pat",
    ])
    .ok();
}

/// Writes the pattern `run/NAME` holding `block`, as the repository's
/// administrator.
pub fn pattern_page(repo: &Repo, name: &str, block: &Value) {
    let file = repo.dir.path().join(format!("run-{name}.md"));
    std::fs::write(
        &file,
        format!("# {name}\n\nA pattern.\n\n```json\n{block:#}\n```\n"),
    )
    .unwrap();
    let page = format!("run/{name}");
    let verb = match repo.fossil(&["wiki", "list"]).lines().any(|l| l == page) {
        true => "commit",
        false => "create",
    };
    repo.fossil(&[
        "wiki",
        verb,
        &page,
        file.to_str().unwrap(),
        "--mimetype",
        "text/x-markdown",
    ]);
}

/// A node with a `lines` runner `echo` (so records of it are offered) and
/// the login `pat` (developer and wiki writer, no admin).
fn node() -> ServedNode {
    let repo = Repo::new();
    repo.user("pat", "v234jk");
    runner_page(
        &repo,
        "echo",
        &json!({"command": ["/bin/cat"], "input": "lines"}),
    );
    Served::on(repo).start()
}

/// A record's fields as `create` answered them.
fn fields(run: &crate::support::Run) -> Value {
    run.ok()["fields"].clone()
}

const REVIEWER: &str = r#"{"runner": "echo", "objective": "Review each check-in on dev; pass when its tests pass.",
  "checkins": ["dev"], "new_branch": true, "hears": [], "budget": {"wall": "2h", "cpu": 600}, "sandbox": {"network": false}}"#;

/// The pattern `run/reviewer` holding [`REVIEWER`], written by admin.
fn reviewer_page(repo: &Repo) {
    pattern_page(
        repo,
        "reviewer",
        &serde_json::from_str::<Value>(REVIEWER).unwrap(),
    );
}

/// pat, no administrator, edits `run/reviewer` to say `to` where it said
/// `from`.
fn pat_edits_reviewer(repo: &Repo, from: &str, to: &str) {
    let current = repo.json(&["wiki_read", "--page", "run/reviewer"]).ok();
    let old = current["text"].as_str().unwrap().to_string();
    repo.json(&[
        "wiki_edit",
        "--page",
        "run/reviewer",
        "--old",
        &old,
        "--new",
        &old.replace(from, to),
        "--user",
        "pat",
    ])
    .ok();
}

#[test]
fn a_record_is_written_whole_from_the_version_an_administrator_sent_and_the_calls_fields_win() {
    let node = node();
    let repo = &node.repo;
    let block: Value = serde_json::from_str(REVIEWER).unwrap();
    pattern_page(repo, "reviewer", &block);
    // pat, no administrator, writes a newer version: it is ignored.
    pat_edits_reviewer(
        repo,
        "\"network\": false",
        "\"network\": true, \"read_write\": [\"/etc\"]",
    );

    let dry = repo.json(&["create", "--pattern", "reviewer", "--dry-run"]);
    let f = fields(&dry);
    assert_eq!(f["runner"], "echo");
    assert_eq!(f["objective"], block["objective"]);
    assert_eq!(f["checkins"], json!(["dev"]));
    assert_eq!(f["hears"], json!([]));
    assert_eq!(
        f["sandbox"]["network"], false,
        "pat's version is ignored: {f:#}"
    );
    assert_eq!(
        f["sandbox"]["read_write"],
        json!([]),
        "every field written out"
    );
    assert_eq!(f["budget"], json!({"wall": "2h", "cpu": 600}));
    assert_eq!(f["restrict"], json!({}));
    assert!(f["user"].as_str().unwrap().starts_with("echo-"), "{f:#}");
    assert_eq!(f["pattern"]["page"], "run/reviewer");
    let version = f["pattern"]["version"].as_str().unwrap().to_string();
    assert_eq!(version.len(), 64);
    let sent = repo.json(&["receipt", "--artifacts", &version]).ok();
    assert_eq!(sent["artifacts"][0]["user"], "admin", "{sent:#}");

    let run = repo.json(&[
        "create",
        "--pattern",
        "reviewer",
        "--objective",
        "Review dev for the release",
        "--wall",
        "30m",
        "--checkins",
        "dev release",
    ]);
    let f = fields(&run);
    assert_eq!(f["objective"], "Review dev for the release");
    assert_eq!(f["checkins"], json!(["dev", "release"]));
    assert_eq!(
        f["budget"],
        json!({"wall": "30m", "cpu": 600}),
        "the call's wall, the pattern's cpu"
    );
    let record = run.ok_str("record");
    let thread = repo.json(&["thread", "--of", &record]).ok();
    let text = thread["posts"][0]["text"].as_str().unwrap();
    let read = ocx::protocol::message::read(text.as_bytes());
    let ocx::protocol::message::Reading::Message { message } = read else {
        panic!("{text}")
    };
    assert_eq!(message["pattern"]["page"], "run/reviewer");
    assert_eq!(message["sandbox"]["network"], false);
    crate::support::until_logged(&repo.node_root(), 30, |e| {
        crate::support::is(e, "opened", &record)
    });
}

#[test]
fn a_pattern_that_does_not_read_is_refused_naming_the_page_and_its_field() {
    let node = node();
    let repo = &node.repo;
    let file = repo.dir.path().join("bad.md");
    let cases = [
        (
            "broken",
            "```json\n{\"objective\": \n```\n",
            "pattern",
            "run/broken: its JSON block does not read",
        ),
        (
            "typo",
            "```json\n{\"objectve\": \"x\", \"budget\": {\"wall\": \"1h\"}}\n```\n",
            "pattern.objectve",
            "run/typo: ",
        ),
        (
            "wall",
            "```json\n{\"objective\": \"x\", \"budget\": {\"wall\": 60}}\n```\n",
            "pattern.budget.wall",
            "run/wall: ",
        ),
        (
            "plain",
            "No block at all.\n",
            "pattern",
            "run/plain holds no fenced JSON block",
        ),
    ];
    for (name, text, _, _) in cases {
        std::fs::write(&file, text).unwrap();
        repo.fossil(&[
            "wiki",
            "create",
            &format!("run/{name}"),
            file.to_str().unwrap(),
            "--mimetype",
            "text/x-markdown",
        ]);
    }
    // A page only pat wrote counts for nothing.
    pats_own_page(repo);
    let before = repo.hashes();
    for (name, _, field, words) in cases {
        let run = repo.json(&["create", "--pattern", name]);
        assert_eq!(run.refused(), field, "{name}: {}", run.stdout);
        let reason = run.answer()["stopped"]["reason"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(reason.starts_with(words), "{name}: {reason}");
    }
    for name in ["nosuch", "../etc", "pats"] {
        let run = repo.json(&["create", "--pattern", name]);
        assert_eq!(run.refused(), "pattern", "{name}");
    }
    let pats = repo.json(&["create", "--pattern", "pats"]);
    assert_eq!(
        pats.refused(),
        "pattern",
        "a page pat wrote counts for nothing"
    );
    let missing = repo.json(&["create", "--runner", "echo", "--wall", "1h"]);
    assert_eq!(missing.refused(), "objective");
    let no_wall = repo.json(&["create", "--runner", "echo", "--objective", "x"]);
    assert_eq!(no_wall.refused(), "budget.wall");
    assert_eq!(repo.hashes(), before, "no refusal wrote anything");
}

/// Serves `body` once per connection on 127.0.0.1 as `content_type`,
/// for as long as the test lives; its URL.
fn serve_text(body: Vec<u8>, content_type: &'static str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut head = [0u8; 4096];
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = s.read(&mut head);
            let _ = s.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
            );
            let _ = s.write_all(&body);
        }
    });
    format!("http://127.0.0.1:{port}/pattern")
}

#[test]
fn a_pattern_at_a_url_is_fetched_and_one_of_this_server_is_read_in_the_repository() {
    let node = node();
    let repo = &node.repo;
    let markdown = format!("# A reviewer\n\n```json\n{REVIEWER}\n```\n");
    let url = serve_text(markdown.clone().into_bytes(), "text/markdown");
    let f = fields(&repo.json(&["create", "--pattern", &url, "--dry-run"]));
    assert_eq!(f["checkins"], json!(["dev"]));
    assert_eq!(f["pattern"]["url"], url);
    use sha2::Digest;
    assert_eq!(
        f["pattern"]["sha256"],
        hex::encode(sha2::Sha256::digest(markdown.as_bytes()))
    );

    let object = serve_text(REVIEWER.as_bytes().to_vec(), "application/json");
    assert_eq!(
        fields(&repo.json(&["create", "--pattern", &object, "--dry-run"]))["runner"],
        "echo"
    );

    // Fossil's own rendering of a page of another server.
    let other = Repo::new();
    other.fossil(&["user", "capabilities", "nobody", "gjor"]);
    pattern_page(
        &other,
        "elsewhere",
        &serde_json::from_str::<Value>(REVIEWER).unwrap(),
    );
    let mut server = crate::support::Served::new()
        .without_node()
        .start_on(&other);
    let port = server.port;
    let rendered = format!("http://127.0.0.1:{port}/wiki?name=run/elsewhere");
    let f = fields(&repo.json(&["create", "--pattern", &rendered, "--dry-run"]));
    assert_eq!(
        f["objective"],
        "Review each check-in on dev; pass when its tests pass."
    );
    assert_eq!(f["pattern"]["url"], rendered);
    server.halt();

    // A page of this very server is read in the repository, by receipt.
    pattern_page(
        repo,
        "here",
        &serde_json::from_str::<Value>(REVIEWER).unwrap(),
    );
    for here in [
        format!("http://127.0.0.1:{}/wiki?name=run/here", node.port),
        format!("http://127.0.0.1:{}/wiki/run/here", node.port),
    ] {
        let f = fields(&repo.json(&["create", "--pattern", &here, "--dry-run"]));
        assert_eq!(f["pattern"]["page"], "run/here", "{here}: {f:#}");
        assert!(f["pattern"]["url"].is_null());
    }

    let huge = serve_text(vec![b' '; (1 << 20) + 10], "text/plain");
    let run = repo.json(&["create", "--pattern", &huge, "--dry-run"]);
    assert_eq!(run.refused(), "pattern");
    assert!(run.stdout.contains("mebibyte"), "{}", run.stdout);
    let gone = format!("http://127.0.0.1:{}/nothing", crate::support::free_port());
    assert_eq!(
        repo.json(&["create", "--pattern", &gone, "--dry-run"])
            .refused(),
        "pattern"
    );
    let login = url.replace("http://", "http://pat:pw@");
    assert_eq!(
        repo.json(&["create", "--pattern", &login, "--dry-run"])
            .refused(),
        "pattern"
    );
}

#[test]
fn from_a_clones_checkout_the_pattern_is_read_as_the_server_received_it() {
    let node = node();
    let repo = &node.repo;
    reviewer_page(repo);
    pat_edits_reviewer(repo, "\"cpu\": 600", "\"cpu\": 1");
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let url = format!("http://admin:admin-pw@127.0.0.1:{}/", node.port);
    repo.fossil(&["user", "password", "admin", "admin-pw"]);
    let file = dir.path().join("mine.fossil");
    crate::support::fossil_as(
        "admin",
        dir.path(),
        &[
            "clone",
            &url,
            file.to_str().unwrap(),
            "--save-http-password",
        ],
    );
    crate::support::fossil_as("admin", &work, &["open", file.to_str().unwrap()]);
    crate::support::fossil_as("admin", &work, &["user", "default", "admin"]);
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_ocx"));
    c.args(["create", "--pattern", "reviewer", "--dry-run", "--json"])
        .current_dir(&work);
    let run = crate::support::run(c, None);
    let f = fields(&run);
    assert_eq!(
        f["budget"]["cpu"], 600,
        "pat's version counts for nothing there either: {f:#}"
    );
    assert_eq!(f["pattern"]["page"], "run/reviewer");
}

#[test]
fn patterns_lists_those_that_count_with_who_wrote_them() {
    let node = node();
    let repo = &node.repo;
    reviewer_page(repo);
    pattern_page(
        repo,
        "helper",
        &json!({"runner": "echo", "objective": "Answer posts in your thread", "hears": ["pat"], "budget": {"wall": "1h"}}),
    );
    pats_own_page(repo);
    let listed = repo.json(&["patterns"]).ok();
    let names: Vec<&str> = listed["patterns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["helper", "reviewer"], "{listed:#}");
    let reviewer = &listed["patterns"][1];
    assert_eq!(
        reviewer["objective"],
        "Review each check-in on dev; pass when its tests pass."
    );
    assert_eq!(reviewer["runner"], "echo");
    assert_eq!(reviewer["checkins"], json!(["dev"]));
    assert_eq!(reviewer["written_by"], "admin");
    assert!(reviewer["written_at"].as_str().unwrap().starts_with("20"));
    let text = repo.ocx(&["patterns"]);
    assert!(
        text.stdout.contains("helper: Answer posts in your thread"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("wakes on: posts of pat"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("wakes on: check-ins on dev"),
        "{}",
        text.stdout
    );
    let mcp_like = repo.json(&["patterns", "--user", "pat"]).ok();
    assert_eq!(mcp_like["patterns"].as_array().unwrap().len(), 2);
}

#[test]
fn tag_messages_tags_each_message_that_lacks_its_tag_once() {
    let repo = Repo::new();
    let code = repo.server_code();
    // A record written by another program: a post with a message and no tag.
    let block = json!({"ocx": 1, "kind": "record", "node": code, "user": "echo-000001", "runner": "echo",
        "objective": "x", "checkins": [], "hears": [], "remote": false, "restrict": {},
        "sandbox": {"network": true, "read_only": [], "read_write": []}, "budget": {"wall": "1m"}});
    let hand = hand_post(
        &repo,
        "By hand",
        &format!("Written elsewhere.\n\n```json\n{block:#}\n```\n"),
    );
    let tagged = repo
        .command_record("CI", &["--wall", "1m"])
        .ok_str("record");
    let plain = hand_post(&repo, "Chat", "No message here.\n");
    let before = repo.hashes();
    let dry = repo.json(&["tag_messages", "--dry-run"]).ok();
    assert_eq!(repo.hashes(), before, "a dry run writes nothing");
    let listed: Vec<&str> = dry["untagged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["hash"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [hand.as_str()], "{dry:#}");
    assert_eq!(dry["untagged"][0]["kind"], "record");
    assert!(dry["control"].is_null());
    repo.user("pat", "v234");
    assert_eq!(
        repo.json(&["tag_messages", "--user", "pat"]).code,
        1,
        "needs admin or setup"
    );
    let done = repo.json(&["tag_messages"]).ok();
    assert!(done["control"].is_string());
    let now = ocx::fossil::Repository::open(&repo.file).unwrap();
    let tags = now.tagged_with("ocx-message", "record").unwrap();
    let hashes: Vec<&str> = tags.iter().map(|t| t.1.as_str()).collect();
    assert!(
        hashes.contains(&hand.as_str()) && hashes.contains(&tagged.as_str()),
        "{hashes:?}"
    );
    assert!(!hashes.contains(&plain.as_str()));
    let again = repo.json(&["tag_messages"]).ok();
    assert_eq!(again["untagged"], json!([]));
    assert!(again["control"].is_null());
}

/// A new thread's first post holding `text`, as another program would
/// write it: no tag. Its hash.
fn hand_post(repo: &Repo, title: &str, text: &str) -> String {
    let date = ocx::fossil::artifact::now();
    let bytes = ocx::fossil::artifact::ForumPost {
        date: &date,
        reply: None,
        title: Some(title),
        mimetype: "text/x-markdown",
        user: "admin",
        text,
    }
    .compose();
    repo.import_as("admin", &[bytes]).remove(0)
}

#[test]
fn in_chromium_an_administrator_starts_a_run_from_a_pattern_on_the_console() {
    let browser = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    assert!(
        browser.join("node_modules/playwright-core").is_dir(),
        "playwright-core is missing: run scripts/setup.sh"
    );
    let repo = Repo::new();
    repo.fossil(&["user", "password", "admin", "admin-pw"]);
    repo.user("pat", "v234jk");
    runner_page(
        &repo,
        "echo",
        &json!({"command": ["/bin/cat"], "input": "lines"}),
    );
    let block: Value = serde_json::from_str(REVIEWER).unwrap();
    pattern_page(&repo, "reviewer", &block);
    let ext = crate::cgi::Ext::new();
    let server = crate::cgi::served(&repo, &ext);
    let shot =
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ocx-console-new-run.png");
    let profile = tempfile::Builder::new()
        .prefix("ocx-chromium-")
        .tempdir()
        .unwrap();
    let out = std::process::Command::new("node")
        .arg(browser.join("new-run.mjs"))
        .env("OCX_BASE", server.base())
        .env("OCX_LOGIN", "admin")
        .env("OCX_PASSWORD", "admin-pw")
        .env("OCX_PATTERN", "reviewer")
        .env("OCX_OBJECTIVE", block["objective"].as_str().unwrap())
        .env("OCX_PROFILE", profile.path().join("profile"))
        .env("OCX_SHOT", &shot)
        .output()
        .unwrap();
    let said = crate::support::said(&out);
    assert!(out.status.success(), "the browser test failed: {said}");
    assert!(shot.is_file(), "no screenshot: {said}");
    let now = ocx::fossil::Repository::open(&repo.file).unwrap();
    let records = ocx::protocol::found::tagged_records(&now).unwrap();
    assert_eq!(records.len(), 1, "one record written");
    let r = &records[0];
    assert_eq!(
        r.said.from.as_deref(),
        Some("admin"),
        "written as the viewer"
    );
    assert_eq!(r.record.checkins, ["dev"]);
    assert!(!r.record.sandbox.network);
    assert_eq!(r.record.pattern.as_ref().unwrap()["page"], "run/reviewer");
    // pat, who may not send runs, sees no "New run".
    let page = crate::cgi::cgi(
        &ext,
        &repo,
        &[("FOSSIL_USER", "pat"), ("PATH_INFO", "/console")],
        b"",
    );
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("New run"), "{}", page.body);
    let page = crate::cgi::cgi(
        &ext,
        &repo,
        &[("FOSSIL_USER", "admin"), ("PATH_INFO", "/console")],
        b"",
    );
    assert!(page.body.contains("New run"), "{}", page.body);
    let record = &r.hash;
    assert!(
        page.body
            .contains(&format!("href=\"/forumpost/{record}\">its thread</a>"))
            && page
                .body
                .contains(&format!("href=\"/info/{record}\">{}</a>", &record[..10])),
        "the console links the run to its thread and its record: {}",
        page.body
    );
    drop(server);
}

/// Waits until the thread at `of` holds a post from `from` containing `text`.
fn said_in(repo: &Repo, of: &str, from: &str, text: &str) -> Value {
    let until = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let thread = repo.json(&["thread", "--of", of]).ok();
        if let Some(p) = thread["posts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["from"] == from && p["text"].as_str().is_some_and(|t| t.contains(text)))
        {
            return p.clone();
        }
        assert!(
            std::time::Instant::now() < until,
            "no post from {from} holding {text:?}: {thread:#}\n{}",
            crate::support::node_log_text(&repo.node_root())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The run login a record names.
fn run_user(repo: &Repo, record: &str) -> String {
    let r = ocx::fossil::Repository::open(&repo.file).unwrap();
    let rid = r.receipt(record).unwrap().unwrap().rid;
    ocx::protocol::found::record(&r, rid, record)
        .unwrap()
        .unwrap()
        .record
        .user
}

#[test]
fn the_example_patterns_ocx_runner_writes_run_end_to_end_with_the_demo_agent() {
    let repo = Repo::new();
    repo.user("pat", "v234");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(repo.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    repo.commit_as("admin", "README.md", "hello\n", None);
    let node = Served::on(repo).start();
    let repo = &node.repo;
    let offer = repo.json(&["runner", "--name", "demo"]).ok();
    assert!(
        offer["still_to_do"].as_array().unwrap().iter().any(|s| s
            .as_str()
            .unwrap()
            .contains("ocx runner --name demo --patterns")),
        "ocx runner offers the patterns: {offer:#}"
    );
    let written = repo.json(&["runner", "--name", "demo", "--patterns"]).ok();
    assert_eq!(
        written["patterns"],
        json!(["run/reviewer", "run/fixer", "run/helper"])
    );
    let listed = repo.json(&["patterns"]).ok();
    assert_eq!(
        listed["patterns"].as_array().unwrap().len(),
        3,
        "{listed:#}"
    );

    // The reviewer: a check-in on dev gets its verdict, which counts.
    let reviewer = repo
        .json(&["create", "--pattern", "reviewer"])
        .ok_str("record");
    let reviewer_user = run_user(repo, &reviewer);
    crate::support::until_logged(&repo.node_root(), 60, |e| {
        crate::support::is(e, "opened", &reviewer)
    });
    std::thread::sleep(Duration::from_millis(1500));
    let checkin = repo.commit_as("pat", "feature.txt", "a feature\n", Some("dev"));
    let until = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let v = repo.json(&["verdicts", "--checkin", &checkin]).ok();
        let found = v["counting"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|x| x["from"] == reviewer_user.as_str());
        if let Some(x) = found {
            assert_eq!(x["verdict"], "pass", "{v:#}");
            assert_eq!(x["against"], reviewer.as_str(), "{v:#}");
            break;
        }
        let log = std::fs::read_to_string(
            ocx::node::config::NodeConfig::run_dir(&repo.node_root(), &reviewer).join("output.log"),
        )
        .unwrap_or_default();
        assert!(
            std::time::Instant::now() < until,
            "no verdict by the reviewer: {v:#}\n{log}\n{}",
            crate::support::node_log_text(&repo.node_root())
        );
        std::thread::sleep(Duration::from_millis(300));
    }

    // The fixer: told in its thread, it commits on fixes, with no password, and says so.
    let fixer = repo
        .json(&["create", "--pattern", "fixer"])
        .ok_str("record");
    let fixer_user = run_user(repo, &fixer);
    crate::support::until_logged(&repo.node_root(), 60, |e| {
        crate::support::is(e, "opened", &fixer)
    });
    let ask = repo
        .json(&[
            "post",
            "--to",
            &fixer,
            "--text",
            "Please fix the typo in the README.",
        ])
        .ok_str("hash");
    said_in(repo, &fixer, &fixer_user, "I saved it as fixes/");
    let file = format!("fixes/{}.md", &ask[..12]);
    let r = ocx::fossil::Repository::open(&repo.file).unwrap();
    let tip = r.branch_tip("fixes").unwrap().expect("a check-in on fixes");
    let bytes = r.file_at(tip, &file).unwrap().expect("the fix's file");
    assert!(String::from_utf8_lossy(&bytes).contains("Please fix the typo"));
    let tip_hash = r.hash_of(tip).unwrap();
    assert_eq!(
        repo.sender(&tip_hash).as_deref(),
        Some(fixer_user.as_str()),
        "sent as the fixer"
    );

    // The helper: answers in its own thread, with no password.
    let helper = repo
        .json(&["create", "--pattern", "helper"])
        .ok_str("record");
    let helper_user = run_user(repo, &helper);
    crate::support::until_logged(&repo.node_root(), 60, |e| {
        crate::support::is(e, "opened", &helper)
    });
    repo.json(&["post", "--to", &helper, "--text", "How do I build it?"])
        .ok();
    said_in(
        repo,
        &helper,
        &helper_user,
        "I heard you say: How do I build it?",
    );
    for record in [&reviewer, &fixer, &helper] {
        repo.json(&["stop", record]).ok();
    }
}
