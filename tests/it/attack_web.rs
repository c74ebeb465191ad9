//! Attacks on the web page and on MCP over HTTP, made as a visitor or a
//! host account would: real HTTP requests to a real `fossil server` (or
//! `fossil ui`) serving `ocx-cgi` from its extroot, and to a real
//! `ocx --mcp-http`. Each asserts the attack failed and nothing changed.

use crate::cgi::{Ext, repo, served, served_as, thread};
use crate::mcp::{post_with, response_of, serve_as, status_of};
use crate::support::{Repo, ServedNode, fossil};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// Every forum post the repository holds.
fn forum_posts(repo: &Repo) -> i64 {
    let db = rusqlite::Connection::open(&repo.file).unwrap();
    db.query_row("SELECT count(*) FROM forumpost", [], |r| r.get(0))
        .unwrap()
}

/// A POST of a form `body` to the page's `tool`, answered as JSON.
fn post_tool(
    server: &ServedNode<&Repo>,
    tool: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Value, String) {
    let (status, head, text) =
        server.request("POST", &format!("/ext/ocx-cgi/{tool}?json"), headers, body);
    let answer = serde_json::from_str(&text).unwrap_or(Value::Null);
    (status, answer, format!("{head}\n{text}"))
}

fn own_page(server: &ServedNode<&Repo>) -> String {
    format!("{}/ext/ocx-cgi", server.base())
}

/// A CGI script beside `ocx-cgi` printing the environment Fossil gives
/// an extension, so a test sees what Fossil passed on.
fn add_probe(ext: &Ext) {
    let probe = ext.dir.path().join("probe");
    std::fs::write(
        &probe,
        "#!/bin/sh\necho 'Content-Type: application/json'\necho\nenv\n",
    )
    .unwrap();
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_visitor_not_signed_in_writes_as_nobody_though_the_server_was_started_with_fossil_user_admin() {
    let (ext, repo) = (Ext::new(), repo());
    add_probe(&ext);
    repo.fossil(&["user", "capabilities", "nobody", "gjorz234"]);
    let root = thread(&repo);
    let server = served_as(&repo, &ext, |s| s.server_env("FOSSIL_USER", "admin"));
    let (_, _, env) = server.request("GET", "/ext/probe", &[], "");
    assert!(
        env.lines().any(|l| l == "FOSSIL_USER=admin"),
        "Fossil did not pass its FOSSIL_USER on, so this attack is not made: {env}"
    );
    let (before, posts) = (repo.hashes(), forum_posts(&repo));
    let own = own_page(&server);
    let (status, answer, said) = post_tool(
        &server,
        "post",
        &[("Referer", &own)],
        &format!("to={root}&text=written+as+admin"),
    );
    assert_eq!(status, 200, "{said}");
    assert_eq!(answer["dry_run"], true, "{answer:#}");
    let (_, _, page) = server.request("GET", "/ext/ocx-cgi", &[], "");
    assert!(page.contains("Nobody is signed in"), "{page}");
    assert!(!page.contains("Signed in as"), "{page}");
    let (status, answer, _) = post_tool(
        &server,
        "wiki_edit",
        &[("Referer", &own)],
        "page=Planted&old=&new=by+admin",
    );
    assert!(answer["dry_run"] == true || status == 403, "{answer:#}");
    assert_eq!(repo.hashes(), before, "a visitor wrote as admin");
    assert_eq!(forum_posts(&repo), posts);
}

/// A login whose capabilities Fossil cannot tell apart from a visitor's
/// (bob holds `o`, which nobody's letters already hold) is not believed
/// from the server's environment either: its name would be all the proof.
#[test]
fn a_visitor_not_signed_in_does_not_post_as_a_login_named_in_the_servers_environment() {
    let (ext, repo) = (Ext::new(), repo());
    repo.fossil(&["user", "capabilities", "nobody", "gjorz234"]);
    let root = thread(&repo);
    let server = served_as(&repo, &ext, |s| s.server_env("FOSSIL_USER", "bob"));
    let (before, posts) = (repo.hashes(), forum_posts(&repo));
    let (_, _, page) = server.request("GET", "/ext/ocx-cgi", &[], "");
    assert!(page.contains("Nobody is signed in"), "{page}");
    let (_, answer, said) = post_tool(
        &server,
        "post",
        &[
            ("Referer", &own_page(&server)),
            ("X-Forwarded-For", "127.0.0.1"),
        ],
        &format!("to={root}&text=written+as+bob"),
    );
    assert_eq!(answer["dry_run"], true, "{said}");
    assert_eq!(repo.hashes(), before, "a visitor wrote as bob");
    assert_eq!(forum_posts(&repo), posts);
}

/// A checkout of `repo` in its own directory holding a secret file and an
/// `ocx-tests.json` whose test would make `marker`; answers the checkout.
fn checkout_with_a_test(repo: &Repo, marker: &Path) -> tempfile::TempDir {
    let co = tempfile::Builder::new()
        .prefix("ocx-co-")
        .tempdir()
        .unwrap();
    crate::support::succeeds(
        Command::new(fossil())
            .args(["open", "--nosync"])
            .arg(&repo.file)
            .current_dir(co.path())
            .env("USER", "admin"),
    );
    std::fs::write(co.path().join("secret.txt"), "TOP-SECRET-4711\n").unwrap();
    let tests = serde_json::json!({"tests": [{"name": "m", "command": format!("touch {}", marker.display())}]});
    std::fs::write(co.path().join("ocx-tests.json"), tests.to_string()).unwrap();
    co
}

const CHECKOUT_TOOLS: [&str; 6] = ["context", "find", "read", "edit", "test", "save"];

/// The page served from a checkout lists no checkout tool, and `read`,
/// `test` and `edit` through it are refused, naming why.
fn no_checkout_tool_through(
    server: &ServedNode<&Repo>,
    viewer: &str,
    headers: &[(&str, &str)],
    co: &Path,
) {
    let (_, _, page) = server.request("GET", "/ext/ocx-cgi/tools", headers, "");
    assert!(
        page.contains(&format!("Signed in as <b>{viewer}</b>")),
        "the viewer is not who the attack needs: {page}"
    );
    assert!(page.contains("id=\"tool-status\""), "{page}");
    for tool in CHECKOUT_TOOLS {
        assert!(
            !page.contains(&format!("id=\"tool-{tool}\"")),
            "{tool} is offered"
        );
        assert!(
            !page.contains(&format!("href=\"/ext/ocx-cgi/{tool}\"")),
            "{tool} is linked"
        );
    }
    let (_, _, json) = server.request("GET", "/ext/ocx-cgi?json", headers, "");
    let listed: Value = serde_json::from_str(&json).unwrap();
    let names = crate::support::tool_names(&listed);
    assert!(names.contains(&"status"), "{names:?}");
    for tool in CHECKOUT_TOOLS {
        assert!(!names.contains(&tool), "{tool} is listed: {names:?}");
    }
    let own = own_page(server);
    let mut with_referer = headers.to_vec();
    with_referer.push(("Referer", &own));
    let tests_before = std::fs::read(co.join("ocx-tests.json")).unwrap();
    for (tool, body) in [
        ("read", "path=secret.txt"),
        ("test", ""),
        ("edit", "path=ocx-tests.json&old=touch&new=rm+-rf"),
        ("find", "text=SECRET"),
        ("context", ""),
    ] {
        let (status, answer, said) = post_tool(server, tool, &with_referer, body);
        assert_eq!(status, 403, "{tool}: {said}");
        assert_eq!(answer["ok"], false, "{tool}: {answer:#}");
        assert_eq!(answer["stopped"]["field"], "tool", "{tool}: {answer:#}");
        assert!(
            answer["stopped"]["reason"]
                .as_str()
                .unwrap()
                .contains("acts on a checkout"),
            "{tool}: {answer:#}"
        );
        assert!(!said.contains("TOP-SECRET-4711"), "{tool} read the file");
        let (_, _, got) = server.request(
            "GET",
            &format!("/ext/ocx-cgi/{tool}?path=secret.txt"),
            headers,
            "",
        );
        assert!(!got.contains("TOP-SECRET-4711"), "{tool} read the file");
    }
    assert_eq!(
        std::fs::read(co.join("ocx-tests.json")).unwrap(),
        tests_before,
        "ocx-tests.json was edited"
    );
}

#[test]
fn the_page_of_fossil_ui_in_a_checkout_reads_edits_and_tests_nothing_of_it() {
    let (ext, repo) = (Ext::new(), repo());
    let marks = tempfile::tempdir().unwrap();
    let marker = marks.path().join("ran");
    let co = checkout_with_a_test(&repo, &marker);
    let server = served_as(&repo, &ext, |s| s.ui_in(co.path()));
    no_checkout_tool_through(&server, "admin", &[], co.path());
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!marker.exists(), "the checkout's test ran");
}

#[test]
fn the_page_of_fossil_server_in_a_checkout_gives_a_viewer_without_capabilities_nothing_of_it() {
    let (ext, repo) = (Ext::new(), repo());
    let marks = tempfile::tempdir().unwrap();
    let marker = marks.path().join("ran");
    let co = checkout_with_a_test(&repo, &marker);
    let server = served_as(&repo, &ext, |s| s.in_dir(co.path()));
    let cookie = server.login("bob");
    no_checkout_tool_through(&server, "bob", &[("Cookie", &cookie)], co.path());
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!marker.exists(), "the checkout's test ran");
}

#[test]
fn a_forged_login_cookie_is_nobody() {
    let (ext, repo) = (Ext::new(), repo());
    let root = thread(&repo);
    let server = served_as(&repo, &ext, |s| s.server_env("FOSSIL_USER", "alice"));
    let real = server.login("alice");
    let (_, _, page) = server.request("GET", "/ext/ocx-cgi", &[("Cookie", &real)], "");
    assert!(
        page.contains("Signed in as <b>alice</b>"),
        "the real cookie must sign in, or this test proves nothing: {page}"
    );
    let (name, value) = real.split_once('=').unwrap();
    let mut hash: Vec<u8> = value.split("%2F").next().unwrap().bytes().collect();
    hash[0] = if hash[0] == b'A' { b'B' } else { b'A' };
    let wrong_hash = format!(
        "{name}={}{}",
        String::from_utf8(hash).unwrap(),
        &value[value.find("%2F").unwrap()..]
    );
    let code = name.strip_prefix("fossil-").unwrap();
    let forged = [
        format!("{name}=0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF01%2F{code}%2Falice"),
        format!("{name}=made-up"),
        wrong_hash,
        format!("{name}=%2F{code}%2Fadmin"),
        format!("{name}=x%2F{code}%2Fnobody"),
    ];
    let (before, posts) = (repo.hashes(), forum_posts(&repo));
    let own = own_page(&server);
    for cookie in &forged {
        let (_, _, page) = server.request("GET", "/ext/ocx-cgi", &[("Cookie", cookie)], "");
        assert!(page.contains("Nobody is signed in"), "{cookie}: {page}");
        let (_, answer, said) = post_tool(
            &server,
            "post",
            &[("Cookie", cookie), ("Referer", &own)],
            &format!("to={root}&text=forged"),
        );
        assert_eq!(answer["dry_run"], true, "{cookie}: {said}");
    }
    assert_eq!(repo.hashes(), before, "a forged cookie wrote");
    assert_eq!(forum_posts(&repo), posts);
}

#[test]
fn an_expired_login_cookie_is_nobody() {
    let (ext, repo) = (Ext::new(), repo());
    let root = thread(&repo);
    let server = served_as(&repo, &ext, |s| s.server_env("FOSSIL_USER", "alice"));
    let cookie = server.login("alice");
    let (_, _, page) = server.request("GET", "/ext/ocx-cgi", &[("Cookie", &cookie)], "");
    assert!(page.contains("Signed in as <b>alice</b>"), "{page}");
    let db = rusqlite::Connection::open(&repo.file).unwrap();
    let changed = db
        .execute(
            "UPDATE user SET cexpire=julianday('now')-1 WHERE login='alice'",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(db);
    let (before, posts) = (repo.hashes(), forum_posts(&repo));
    let (_, _, page) = server.request("GET", "/ext/ocx-cgi", &[("Cookie", &cookie)], "");
    assert!(page.contains("Nobody is signed in"), "{page}");
    let (_, answer, said) = post_tool(
        &server,
        "post",
        &[("Cookie", &cookie), ("Referer", &own_page(&server))],
        &format!("to={root}&text=expired"),
    );
    assert_eq!(answer["dry_run"], true, "{said}");
    assert_eq!(repo.hashes(), before, "an expired cookie wrote");
    assert_eq!(forum_posts(&repo), posts);
}

#[test]
fn a_signed_in_viewer_without_the_capability_writes_nothing() {
    let (ext, repo) = (Ext::new(), repo());
    let root = thread(&repo);
    let server = served(&repo, &ext);
    let cookie = server.login("bob");
    let (before, posts) = (repo.hashes(), forum_posts(&repo));
    let own = own_page(&server);
    let headers = [("Cookie", cookie.as_str()), ("Referer", own.as_str())];
    for (tool, body) in [
        ("post", format!("to={root}&text=bob+was+here")),
        ("wiki_edit", "page=Bob&old=&new=planted".to_string()),
        ("unversioned_put", "name=bob.txt&text=planted".to_string()),
    ] {
        let (status, answer, said) = post_tool(&server, tool, &headers, &body);
        assert_eq!(status, 403, "{tool}: {said}");
        assert_eq!(answer["ok"], false, "{tool}: {answer:#}");
    }
    assert_eq!(repo.hashes(), before, "bob wrote");
    assert_eq!(forum_posts(&repo), posts);
    assert!(!repo.fossil(&["uv", "list"]).contains("bob.txt"));
}

#[test]
fn a_cross_site_post_with_a_valid_cookie_writes_nothing() {
    let (ext, repo) = (Ext::new(), repo());
    let root = thread(&repo);
    let server = served(&repo, &ext);
    let cookie = server.login("alice");
    let (before, posts) = (repo.hashes(), forum_posts(&repo));
    let own = own_page(&server);
    let body = format!("to={root}&text=cross+site");
    let foreign: [&[(&str, &str)]; 4] = [
        &[("Referer", "http://evil.example/ext/ocx-cgi")],
        &[("Origin", "http://evil.example")],
        &[
            ("Origin", "http://evil.example"),
            ("Referer", "http://evil.example/"),
        ],
        &[(
            "Referer",
            &format!("{}/doc/tip/planted.html", server.base()),
        )],
    ];
    for extra in foreign {
        let mut headers = vec![("Cookie", cookie.as_str())];
        headers.extend_from_slice(extra);
        let (_, answer, said) = post_tool(&server, "post", &headers, &body);
        assert_eq!(answer["dry_run"], true, "{extra:?}: {said}");
    }
    assert_eq!(repo.hashes(), before, "a cross-site post wrote");
    assert_eq!(forum_posts(&repo), posts);
    let (_, answer, said) = post_tool(
        &server,
        "post",
        &[("Cookie", &cookie), ("Referer", &own)],
        &body,
    );
    assert_eq!(
        answer["dry_run"], false,
        "from the page itself it writes, or this test proves nothing: {said}"
    );
}

/// MCP over HTTP as any account of the host reaches it (and any run with
/// network, whose requests are the same): without the token, or with a
/// wrong one, 401 and no tool runs; with it, the tools act as the login it
/// was made for, not the repository's default administrator.
#[test]
fn mcp_over_http_without_its_token_runs_nothing_and_with_it_acts_as_its_login() {
    let repo = repo();
    let root = thread(&repo);
    let http = serve_as(&repo, &["--user", "alice"]);
    let a = http.addr.as_str();
    let mode = std::fs::metadata(&http.token_file)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the token file is {mode:o}");
    let dir_mode = std::fs::metadata(http.token_file.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700, "its directory is {dir_mode:o}");
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"ocx_post","arguments":{{"to":"{root}","text":"from anyone"}}}}}}"#
    );
    let (before, posts) = (repo.hashes(), forum_posts(&repo));
    let mut wrong = http.token.clone().into_bytes();
    wrong[0] = if wrong[0] == b'0' { b'1' } else { b'0' };
    let wrong = String::from_utf8(wrong).unwrap();
    for token in [
        None,
        Some(wrong.as_str()),
        Some(""),
        Some("Basic YWRtaW46eA=="),
    ] {
        assert_eq!(
            status_of(a, &post_with(a, token, call.as_bytes())),
            401,
            "{token:?}"
        );
    }
    let raw = format!(
        "POST /mcp HTTP/1.1\r\nHost: {a}\r\nAuthorization: Basic {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{call}",
        http.token,
        call.len()
    );
    assert_eq!(status_of(a, raw.as_bytes()), 401, "the token as Basic");
    assert_eq!(repo.hashes(), before, "a call without the token wrote");
    assert_eq!(forum_posts(&repo), posts);
    let status = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ocx_status","arguments":{}}}"#;
    let answer = response_of(
        a,
        &post_with(a, Some(&http.token), status.as_bytes()),
        usize::MAX,
    );
    assert!(answer.contains(r#""login":"alice""#), "{answer}");
    assert!(!answer.contains(r#""login":"admin""#), "{answer}");
    let answer = response_of(
        a,
        &post_with(a, Some(&http.token), call.as_bytes()),
        usize::MAX,
    );
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    let reply: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"));
    let hash = reply["result"]["structuredContent"]["result"]["hash"]
        .as_str()
        .unwrap_or_else(|| panic!("{reply:#}"));
    assert_eq!(repo.sender(hash).as_deref(), Some("alice"));
}

#[test]
fn mcp_over_http_keeps_its_token_owner_only_by_default_and_refuses_another_logins() {
    let repo = repo();
    let home = tempfile::tempdir().unwrap();
    let start = |user: &str| {
        let mut child = Command::new(crate::support::ocx_bin())
            .args(["--mcp-http", "127.0.0.1:0", "--user", user, "--repository"])
            .arg(&repo.file)
            .env("HOME", home.path())
            .env_remove("XDG_CONFIG_HOME")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut said = String::new();
        let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
        for _ in 0..2 {
            std::io::BufRead::read_line(&mut err, &mut said).unwrap();
        }
        let _ = child.kill();
        let _ = child.wait();
        said
    };
    let said = start("alice");
    let dir = home.path().join(".config/ocx/mcp-tokens");
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert!(
        said.contains(file.to_str().unwrap()),
        "the path is not printed at start: {said}"
    );
    assert!(said.contains("Authorization: Bearer"), "{said}");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(&dir), 0o700);
    let kept: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(kept["login"], "alice");
    let token = kept["token"].as_str().unwrap().to_string();
    start("alice");
    let kept: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(
        kept["token"],
        token.as_str(),
        "a second start made a new token"
    );
    // Serving as `login` with the token file is refused at the start
    // (exit 2); what it said.
    let refused_as = |login: &str| {
        let out = Command::new(crate::support::ocx_bin())
            .args(["--mcp-http", "127.0.0.1:0", "--user", login, "--token-file"])
            .arg(&file)
            .arg("--repository")
            .arg(&repo.file)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = refused_as("admin");
    assert!(err.contains("was made for login \"alice\""), "{err}");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = refused_as("alice");
    assert!(err.contains("readable or writable by others"), "{err}");
}
