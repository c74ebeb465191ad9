//! The web page, `ocx-cgi`: run directly as Fossil runs it (its environment
//! and stdin), through a real `fossil server`, and in headless Chromium.

pub use crate::support::Ext;
use crate::support::{Repo, Served, ServedNode, fossil};
use serde_json::Value;
use std::borrow::Borrow;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What the page answered.
#[derive(Debug)]
pub struct Page {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

impl Page {
    pub fn answer(&self) -> Value {
        assert_eq!(self.content_type, "application/json", "{}", self.body);
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

pub const HOST: &str = "example.org:8080";
pub const OWN: &str = "http://example.org:8080/ext/ocx-cgi";

/// Signs `login` in with its password through `fossil http`, as the login
/// form does; answers its login cookie as a `Cookie` header gives it.
pub fn sign_in(repo: &Repo, login: &str) -> String {
    let body = format!("u={login}&p={login}-pw");
    let request = format!(
        "POST /login HTTP/1.0\r\nHost: {HOST}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut child = crate::support::piped(
        Command::new(fossil())
            .args(["http", "--nodelay", "--ipaddr", "127.0.0.1"])
            .arg(&repo.file),
    );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("Set-Cookie: "))
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("{login} did not sign in: {text}"))
        .to_string()
}

/// One request to the page, as Fossil makes it for a signed-in viewer:
/// when `env` names a `FOSSIL_USER` (not anonymous), that login signs in
/// and its cookie goes with the request, as a browser's would.
pub fn cgi(ext: &Ext, repo: &Repo, env: &[(&str, &str)], body: &[u8]) -> Page {
    let user = env
        .iter()
        .find(|(k, _)| *k == "FOSSIL_USER")
        .map(|(_, v)| *v)
        .filter(|u| *u != "anonymous");
    let cookie = user.map(|u| sign_in(repo, u));
    let mut env = env.to_vec();
    if let Some(c) = &cookie {
        env.push(("HTTP_COOKIE", c));
    }
    cgi_raw(ext, repo, &env, body)
}

/// One request to the page with exactly `env` over the variables every
/// request has, `body` on stdin.
pub fn cgi_raw(ext: &Ext, repo: &Repo, env: &[(&str, &str)], body: &[u8]) -> Page {
    let mut c = Command::new(ext.program());
    c.env_clear()
        .current_dir(repo.dir.path())
        .env("GATEWAY_INTERFACE", "CGI/1.0")
        .env("FOSSIL_REPOSITORY", "repo.fossil")
        .env("FOSSIL_URI", "")
        .env("HTTP_HOST", HOST)
        .env(
            "REQUEST_METHOD",
            if body.is_empty() { "GET" } else { "POST" },
        )
        .env("PATH_INFO", "")
        .env("QUERY_STRING", "")
        .env("FOSSIL_NONCE", "0123456789abcdef");
    if !body.is_empty() {
        c.env("CONTENT_LENGTH", body.len().to_string())
            .env("CONTENT_TYPE", "application/x-www-form-urlencoded");
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(body);
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no headers: {text}"));
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name).map(str::trim).map(str::to_string))
            .unwrap_or_default()
    };
    // Every answer states its body's length, so Fossil takes the page as
    // soon as the body has come (HISTORY 481).
    assert_eq!(
        header("Content-Length:").parse::<usize>().ok(),
        Some(body.len()),
        "{head}"
    );
    Page {
        status: header("Status:")
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap(),
        content_type: header("Content-Type:"),
        body: body.to_string(),
    }
}

/// A POST of a form `body` to TOOL as `user`, from `referer`.
fn post(
    ext: &Ext,
    repo: &Repo,
    tool: &str,
    user: Option<&str>,
    referer: Option<&str>,
    body: &str,
) -> Page {
    let path = format!("/{tool}");
    let mut env = vec![("PATH_INFO", path.as_str()), ("QUERY_STRING", "json")];
    if let Some(u) = user {
        env.push(("FOSSIL_USER", u));
    }
    if let Some(r) = referer {
        env.push(("HTTP_REFERER", r));
    }
    cgi(ext, repo, &env, body.as_bytes())
}

/// A repository with alice (who may post) and bob (who may only check out),
/// its site's policy the one a node keeps.
pub fn repo() -> Repo {
    let repo = Repo::new();
    repo.user("alice", "v234").user("bob", "o");
    crate::support::site_as_a_node_keeps_it(&repo.file);
    repo
}

/// A new thread by alice; its first post's hash.
pub fn thread(repo: &Repo) -> String {
    repo.json(&crate::writes::PLANS).ok_str("hash")
}

#[test]
fn the_ocx_page_is_in_the_skin_with_a_card_for_each_tool() {
    let (ext, repo) = (Ext::new(), repo());
    let page = cgi(
        &ext,
        &repo,
        &[
            ("FOSSIL_USER", "alice"),
            ("FOSSIL_CAPABILITIES", "eghijorvz234"),
            ("PATH_INFO", "/tools"),
        ],
        b"",
    );
    assert_eq!(page.status, 200);
    assert_eq!(page.content_type, "text/html");
    assert!(
        page.body
            .starts_with("<div class=\"fossil-doc\" data-title=\"OCX\">"),
        "{}",
        page.body
    );
    for tool in ["list", "help", "status", "post", "thread", "receipt"] {
        assert!(
            page.body.contains(&format!("id=\"tool-{tool}\"")),
            "no card for {tool}"
        );
        assert!(
            page.body.contains(&format!("href=\"/ext/ocx-cgi/{tool}\"")),
            "no link to {tool}"
        );
    }
    assert!(page.body.contains("action=\"/ext/ocx-cgi/post\""));
    assert!(page.body.contains("name=\"dry_run\""));
    assert!(
        page.body
            .contains("class=\"ocx-held\" title=\"you hold 4\">post to the forum (4, yours)")
    );
    assert!(
        page.body
            .contains("class=\"ocx-not-held\" title=\"you do not hold c\">add to tickets (c)")
    );
    assert!(page.body.contains("Signed in as <b>alice</b>"));
    assert!(
        page.body
            .contains("; you may read threads, tickets and questions, post and decide"),
        "what alice may do, in words"
    );
    assert!(!page.body.contains("<script"), "the page needs no script");
    let style = page
        .body
        .split("<style>")
        .nth(1)
        .unwrap()
        .split("</style>")
        .next()
        .unwrap();
    assert!(
        !style.contains('#') && !style.contains("rgb"),
        "a colour of its own: {style}"
    );
}

#[test]
fn text_on_the_page_is_escaped() {
    let (ext, repo) = (Ext::new(), repo());
    let page = cgi(
        &ext,
        &repo,
        &[
            ("FOSSIL_USER", "alice"),
            ("PATH_INFO", "/help"),
            ("QUERY_STRING", "tool=%3Cb%3Ex"),
        ],
        b"",
    );
    assert_eq!(page.status, 400);
    assert!(page.body.contains("&lt;b&gt;x"), "{}", page.body);
    assert!(!page.body.contains("<b>x"));
}

#[test]
fn a_get_of_a_writing_tool_shows_its_dry_run_and_writes_nothing() {
    let (ext, repo) = (Ext::new(), repo());
    let before = repo.hashes();
    let page = cgi(
        &ext,
        &repo,
        &[
            ("FOSSIL_USER", "alice"),
            ("PATH_INFO", "/post"),
            ("QUERY_STRING", "title=Plans&text=hello"),
            ("HTTP_REFERER", OWN),
        ],
        b"",
    );
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("Dry run: nothing was written"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("would store 1 artifact as alice"),
        "{}",
        page.body
    );
    assert!(page.body.contains("&larr; All tools"));
    assert!(page.body.contains("id=\"tool-post\""), "its card again");
    assert!(
        page.body
            .contains("name=\"title\" aria-describedby=\"post-title-doc\" value=\"Plans\""),
        "the form is filled in again: {}",
        page.body
    );
    assert!(page.body.contains(">hello</textarea>"));
    assert_eq!(repo.hashes(), before);
    let page = cgi(
        &ext,
        &repo,
        &[("FOSSIL_USER", "alice"), ("PATH_INFO", "/post")],
        b"",
    );
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("Fill in the form to run post."),
        "{}",
        page.body
    );
    assert!(!page.body.contains("class=\"ocx-answer"));
    assert_eq!(repo.hashes(), before);
}

#[test]
fn a_post_from_ocxs_own_page_writes_as_the_viewer() {
    let (ext, repo) = (Ext::new(), repo());
    let root = thread(&repo);
    for referer in [OWN.to_string(), format!("{OWN}/post"), format!("{OWN}?x=1")] {
        let page = post(
            &ext,
            &repo,
            "post",
            Some("alice"),
            Some(&referer),
            &format!("to={root}&text=Agreed+%26+done"),
        );
        assert_eq!(page.status, 200, "{}", page.body);
        let a = page.answer();
        assert_eq!(a["ok"], true, "{a:#}");
        assert_eq!(a["dry_run"], false);
        let hash = a["result"]["hash"].as_str().unwrap();
        assert_eq!(repo.sender(hash).as_deref(), Some("alice"));
    }
    let thread = repo.json(&["thread", "--of", &root]).ok();
    assert!(thread.to_string().contains("Agreed & done"), "{thread:#}");
}

#[test]
fn a_post_from_any_other_page_writes_nothing() {
    let (ext, repo) = (Ext::new(), repo());
    let root = thread(&repo);
    let before = repo.hashes();
    let body = format!("to={root}&text=forged");
    for referer in [
        Some("http://example.org:8080/doc/tip/evil.html"),
        Some("http://example.org:8080/ext/ocx-cgi-next"),
        Some("http://example.org:8080/ext/ocx-cgix"),
        Some("http://other.example/ext/ocx-cgi"),
        Some("http://example.org:8080.other.example/ext/ocx-cgi"),
        None,
    ] {
        let page = post(&ext, &repo, "post", Some("alice"), referer, &body);
        let a = page.answer();
        assert_eq!(a["dry_run"], true, "{referer:?}: {a:#}");
        assert_eq!(repo.hashes(), before, "{referer:?} wrote");
    }
    let page = post(
        &ext,
        &repo,
        "post",
        Some("alice"),
        Some("http://example.org:8080/doc/tip/x"),
        &body,
    );
    let html = cgi(
        &ext,
        &repo,
        &[
            ("FOSSIL_USER", "alice"),
            ("PATH_INFO", "/post"),
            ("HTTP_REFERER", "http://example.org:8080/doc/tip/x"),
        ],
        body.as_bytes(),
    );
    assert!(
        html.body.contains("did not come from OCX's own page"),
        "{}",
        html.body
    );
    assert_eq!(page.answer()["ok"], true);
    assert_eq!(repo.hashes(), before);
}

#[test]
fn an_https_site_takes_only_an_https_referer() {
    let (ext, repo) = (Ext::new(), repo());
    let root = thread(&repo);
    let before = repo.hashes();
    let body = format!("to={root}&text=secure");
    let env = |referer: &'static str| {
        vec![
            ("FOSSIL_USER", "alice"),
            ("PATH_INFO", "/post"),
            ("QUERY_STRING", "json"),
            ("HTTPS", "on"),
            ("HTTP_REFERER", referer),
        ]
    };
    let page = cgi(
        &ext,
        &repo,
        &env("http://example.org:8080/ext/ocx-cgi"),
        body.as_bytes(),
    );
    assert_eq!(page.answer()["dry_run"], true);
    assert_eq!(repo.hashes(), before);
    let page = cgi(
        &ext,
        &repo,
        &env("https://example.org:8080/ext/ocx-cgi"),
        body.as_bytes(),
    );
    let a = page.answer();
    assert_eq!(a["dry_run"], false, "{a:#}");
    assert_eq!(
        repo.sender(a["result"]["hash"].as_str().unwrap())
            .as_deref(),
        Some("alice")
    );
}

#[test]
fn a_site_under_a_prefix_has_its_prefix_in_the_referer_and_links() {
    let (ext, repo) = (Ext::new(), repo());
    let root = thread(&repo);
    let body = format!("to={root}&text=prefixed");
    let env = |referer: &'static str| {
        vec![
            ("FOSSIL_USER", "alice"),
            ("FOSSIL_URI", "/proj"),
            ("PATH_INFO", "/post"),
            ("QUERY_STRING", "json"),
            ("HTTP_REFERER", referer),
        ]
    };
    let page = cgi(
        &ext,
        &repo,
        &env("http://example.org:8080/ext/ocx-cgi"),
        body.as_bytes(),
    );
    assert_eq!(page.answer()["dry_run"], true);
    let page = cgi(
        &ext,
        &repo,
        &env("http://example.org:8080/proj/ext/ocx-cgi"),
        body.as_bytes(),
    );
    assert_eq!(page.answer()["dry_run"], false);
    let index = cgi(
        &ext,
        &repo,
        &[
            ("FOSSIL_USER", "alice"),
            ("FOSSIL_URI", "/proj"),
            ("PATH_INFO", "/tools"),
        ],
        b"",
    );
    assert!(index.body.contains("action=\"/proj/ext/ocx-cgi/post\""));
}

#[test]
fn json_answers_the_one_answer() {
    let (ext, repo) = (Ext::new(), repo());
    let page = cgi(
        &ext,
        &repo,
        &[
            ("FOSSIL_USER", "alice"),
            ("PATH_INFO", "/status"),
            ("QUERY_STRING", "json"),
        ],
        b"",
    );
    assert_eq!(page.status, 200);
    let a = page.answer();
    assert_eq!(a["tool"], "status");
    assert_eq!(a["ok"], true);
    for key in [
        "ok",
        "tool",
        "dry_run",
        "log",
        "result",
        "stopped",
        "next_step",
        "took_ms",
    ] {
        assert!(a.get(key).is_some(), "no {key}");
    }
    let page = cgi(
        &ext,
        &repo,
        &[
            ("PATH_INFO", "/status"),
            ("HTTP_ACCEPT", "application/json"),
        ],
        b"",
    );
    assert_eq!(page.answer()["tool"], "status");
    let page = cgi(&ext, &repo, &[("QUERY_STRING", "json")], b"");
    let a = page.answer();
    assert_eq!(a["tool"], "list");
    assert_eq!(
        a["result"]["tools"].as_array().unwrap().len(),
        ocx::registry::TOOLS
            .iter()
            .filter(|t| !t.checkout()
                && !matches!(
                    t.reach(),
                    ocx::tool::Reach::CommandLine | ocx::tool::Reach::NotPage
                ))
            .count(),
        "every tool but those acting on a checkout and register"
    );
    let page = cgi(
        &ext,
        &repo,
        &[("PATH_INFO", "/nosuch"), ("QUERY_STRING", "json")],
        b"",
    );
    assert_eq!(page.status, 404);
    assert_eq!(page.answer()["stopped"]["field"], "tool");
}

#[test]
fn a_json_body_is_taken_as_the_input() {
    let (ext, repo) = (Ext::new(), repo());
    let root = thread(&repo);
    let body = serde_json::json!({"to": root, "text": "as JSON"}).to_string();
    let page = cgi(
        &ext,
        &repo,
        &[
            ("FOSSIL_USER", "alice"),
            ("PATH_INFO", "/post"),
            ("QUERY_STRING", "json"),
            ("HTTP_REFERER", OWN),
            ("CONTENT_TYPE", "application/json"),
        ],
        body.as_bytes(),
    );
    let a = page.answer();
    assert_eq!(a["ok"], true, "{a:#}");
    assert_eq!(
        repo.sender(a["result"]["hash"].as_str().unwrap())
            .as_deref(),
        Some("alice")
    );
}

#[test]
fn nobody_signed_in_writes_nothing() {
    let (ext, repo) = (Ext::new(), repo());
    repo.fossil(&["user", "capabilities", "nobody", "gjorz234"]);
    repo.fossil(&["user", "capabilities", "anonymous", "hz234"]);
    let root = thread(&repo);
    let before = repo.hashes();
    for user in [None, Some("anonymous")] {
        let page = post(
            &ext,
            &repo,
            "post",
            user,
            Some(OWN),
            &format!("to={root}&text=anon"),
        );
        let a = page.answer();
        assert_eq!(a["dry_run"], true, "{user:?}: {a:#}");
        assert_eq!(repo.hashes(), before, "{user:?} wrote");
        let mut env = vec![];
        if let Some(u) = user {
            env.push(("FOSSIL_USER", u));
        }
        let index = cgi(&ext, &repo, &env, b"");
        let card = index
            .body
            .split("id=\"tool-post\"")
            .nth(1)
            .unwrap()
            .split("</section>")
            .next()
            .unwrap();
        assert!(card.contains("No form: sign in to use it"), "{card}");
        assert!(!card.contains("<form"), "{card}");
    }
    let page = cgi(
        &ext,
        &repo,
        &[("PATH_INFO", "/status"), ("QUERY_STRING", "json")],
        b"",
    );
    assert_eq!(page.answer()["ok"], true, "reading needs nobody to sign in");
}

#[test]
fn a_card_leaves_out_a_form_its_viewer_cannot_use() {
    let (ext, repo) = (Ext::new(), repo());
    let root = thread(&repo);
    let before = repo.hashes();
    let index = cgi(
        &ext,
        &repo,
        &[("FOSSIL_USER", "bob"), ("PATH_INFO", "/tools")],
        b"",
    );
    let card = index
        .body
        .split("id=\"tool-post\"")
        .nth(1)
        .unwrap()
        .split("</section>")
        .next()
        .unwrap();
    assert!(
        card.contains("No form: you (bob) hold none of 3 or 4 or c or w"),
        "{card}"
    );
    assert!(!card.contains("<form"));
    let page = post(
        &ext,
        &repo,
        "post",
        Some("bob"),
        Some(OWN),
        &format!("to={root}&text=no"),
    );
    assert_eq!(page.status, 403);
    assert_eq!(page.answer()["ok"], false);
    let page = cgi(
        &ext,
        &repo,
        &[
            ("FOSSIL_USER", "bob"),
            ("FOSSIL_CAPABILITIES", "s"),
            ("PATH_INFO", "/post"),
            ("QUERY_STRING", "json"),
            ("HTTP_REFERER", OWN),
        ],
        format!("to={root}&text=no").as_bytes(),
    );
    assert_eq!(
        page.status, 403,
        "FOSSIL_CAPABILITIES is shown, never trusted"
    );
    assert_eq!(repo.hashes(), before);
    let thread_card = index
        .body
        .split("id=\"tool-thread\"")
        .nth(1)
        .unwrap()
        .split("</section>")
        .next()
        .unwrap();
    assert!(thread_card.contains("<form"), "bob reads: {thread_card}");
}

#[test]
fn bad_input_is_refused_naming_the_field_and_writes_nothing() {
    let (ext, repo) = (Ext::new(), repo());
    let root = thread(&repo);
    let before = repo.hashes();
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (
            format!("to={root}&text=x&colour=red").into_bytes(),
            "application/x-www-form-urlencoded",
            "colour",
        ),
        (
            format!("to={root}&text=a%00b").into_bytes(),
            "application/x-www-form-urlencoded",
            "text",
        ),
        (
            format!("to={root}&text=a%FFb").into_bytes(),
            "application/x-www-form-urlencoded",
            "text",
        ),
        (
            format!("to={root}&text=a\u{0}b").into_bytes(),
            "application/x-www-form-urlencoded",
            "text",
        ),
        (
            format!("{{\"to\":\"{root}\",\"text\":\"a\\u0000b\"}}").into_bytes(),
            "application/json",
            "text",
        ),
        (
            format!("{{\"to\":\"{root}\",\"text\":\"a\",\"x\":1}}").into_bytes(),
            "application/json",
            "x",
        ),
        (b"to=x&text=y".to_vec(), "text/plain", "input"),
        (
            b"--boundary\r\n".to_vec(),
            "multipart/form-data; boundary=boundary",
            "input",
        ),
    ];
    for (body, content_type, field) in cases {
        for json in [true, false] {
            let page = cgi(
                &ext,
                &repo,
                &[
                    ("FOSSIL_USER", "alice"),
                    ("PATH_INFO", "/post"),
                    ("QUERY_STRING", if json { "json" } else { "" }),
                    ("HTTP_REFERER", OWN),
                    ("CONTENT_TYPE", content_type),
                ],
                &body,
            );
            assert!(matches!(page.status, 400 | 403), "{field}: {page:?}");
            if json {
                let a = page.answer();
                assert_eq!(a["stopped"]["field"], field, "{a:#}");
            } else {
                assert!(
                    page.body
                        .contains(&format!("<b class=\"ocx-field\">{field}</b>")),
                    "{field}: {}",
                    page.body
                );
            }
            assert_eq!(repo.hashes(), before, "{field} wrote");
        }
    }
    let big = vec![b'a'; 1024 * 1024 + 1];
    let mut body = format!("to={root}&text=").into_bytes();
    body.extend(&big);
    let page = post(
        &ext,
        &repo,
        "post",
        Some("alice"),
        Some(OWN),
        std::str::from_utf8(&body).unwrap(),
    );
    assert_eq!(page.status, 400);
    assert_eq!(page.answer()["stopped"]["field"], "input");
    assert_eq!(repo.hashes(), before);

    let cut = format!("to={root}&text=cut+short");
    let announced = (cut.len() + 100).to_string();
    let page = cgi(
        &ext,
        &repo,
        &[
            ("FOSSIL_USER", "alice"),
            ("PATH_INFO", "/post"),
            ("QUERY_STRING", "json"),
            ("HTTP_REFERER", OWN),
            ("CONTENT_LENGTH", &announced),
        ],
        cut.as_bytes(),
    );
    assert_eq!(page.status, 400);
    let a = page.answer();
    assert_eq!(a["stopped"]["field"], "input", "{a:#}");
    assert!(
        a["stopped"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("shorter than it announced")),
        "{a:#}"
    );
    assert_eq!(repo.hashes(), before, "a body cut short wrote");
}

#[test]
fn the_page_runs_fossil_as_configured_never_from_path() {
    let (ext, repo) = (Ext::new(), repo());
    let root = thread(&repo);
    let fake = ext.dir.path().join("bin");
    std::fs::create_dir(&fake).unwrap();
    std::fs::write(fake.join("fossil"), "#!/bin/sh\nexit 1\n").unwrap();
    std::fs::write(
        ext.dir.path().join(".ocx-cgi.json"),
        serde_json::json!({"fossil": fake.join("fossil")}).to_string(),
    )
    .unwrap();
    let page = post(
        &ext,
        &repo,
        "post",
        Some("alice"),
        Some(OWN),
        &format!("to={root}&text=x"),
    );
    let a = page.answer();
    assert_eq!(a["stopped"]["field"], "fossil", "{a:#}");
    std::fs::remove_file(ext.dir.path().join(".ocx-cgi.json")).unwrap();
    let path = fake.to_str().unwrap();
    let page = cgi(
        &ext,
        &repo,
        &[
            ("FOSSIL_USER", "alice"),
            ("PATH_INFO", "/post"),
            ("QUERY_STRING", "json"),
            ("HTTP_REFERER", OWN),
            ("PATH", path),
            ("OCX_FOSSIL", path),
        ],
        format!("to={root}&text=default+fossil").as_bytes(),
    );
    let a = page.answer();
    assert_eq!(a["ok"], true, "{a:#}");
    assert_eq!(
        repo.sender(a["result"]["hash"].as_str().unwrap())
            .as_deref(),
        Some("alice")
    );
}

/// `repo` served by `fossil server` on a free loopback port, with `ext`
/// as its extroot and no backoffice (which would outlive it), made no
/// node; stopped when dropped.
pub fn served<R: Borrow<Repo>>(repo: R, ext: &Ext) -> ServedNode<R> {
    served_as(repo, ext, |s| s)
}

/// As [`served`], the builder told more by `more` first (logins, its
/// directory, its environment, `fossil ui`).
pub fn served_as<R: Borrow<Repo>>(
    repo: R,
    ext: &Ext,
    more: impl FnOnce(Served) -> Served,
) -> ServedNode<R> {
    more(Served::new())
        .page(crate::support::Page::At(ext.dir.path().into()))
        .without_backoffice()
        .without_node()
        .start_on(repo)
}

#[test]
fn through_fossil_server_a_signed_in_user_writes_and_others_do_not() {
    let ext = Ext::new();
    let server = served(repo(), &ext);
    let repo = &server.repo;
    let root = thread(repo);
    let own = format!("{}/ext/ocx-cgi", server.base());
    let (status, head, page) = server.request("GET", "/ext/ocx-cgi", &[], "");
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("Content-Type: text/html"));
    assert!(
        page.contains("<title>") && page.contains(": OCX</title>"),
        "not in the skin: {page}"
    );
    assert!(page.contains("class=\"mainmenu\""), "not in the skin");
    assert!(page.contains("Nobody is signed in"));
    let cookie = server.login("alice");
    let (_, _, landing) = server.request("GET", "/ext/ocx-cgi", &[("Cookie", &cookie)], "");
    assert!(
        landing.contains("OCX console"),
        "a signed-in person lands on the console"
    );
    assert!(landing.contains("href=\"/ext/ocx-cgi/tools\""), "{landing}");
    let (_, _, page) = server.request("GET", "/ext/ocx-cgi/tools", &[("Cookie", &cookie)], "");
    assert!(page.contains("Signed in as <b>alice</b>"), "{page}");
    assert!(page.contains("action=\"/ext/ocx-cgi/post\""));
    let before = repo.hashes();
    let body = format!("to={root}&text=via+the+server");
    let (status, _, _) = server.request(
        "POST",
        "/ext/ocx-cgi/post",
        &[
            ("Cookie", &cookie),
            ("Referer", &format!("{}/doc/tip/x.html", server.base())),
        ],
        &body,
    );
    assert_eq!(status, 200);
    let (status, _, _) = server.request("POST", "/ext/ocx-cgi/post", &[("Referer", &own)], &body);
    assert!(matches!(status, 200 | 403));
    assert_eq!(repo.hashes(), before, "a forged or anonymous post wrote");
    let (status, _, json) = server.request(
        "POST",
        "/ext/ocx-cgi/post?json",
        &[("Cookie", &cookie), ("Referer", &own)],
        &body,
    );
    assert_eq!(status, 200, "{json}");
    let a: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(a["dry_run"], false, "{a:#}");
    assert_eq!(
        repo.sender(a["result"]["hash"].as_str().unwrap())
            .as_deref(),
        Some("alice")
    );
}

/// The browser test's driver, beside the test suite.
fn driver() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

#[test]
fn in_chromium_a_person_signs_in_and_replies_through_the_form() {
    assert!(
        Path::new("/usr/bin/chromium").is_file(),
        "chromium is missing: run scripts/setup.sh"
    );
    assert!(
        driver().join("node_modules/playwright-core").is_dir(),
        "playwright-core is missing: run scripts/setup.sh"
    );
    let ext = Ext::new();
    let server = served(repo(), &ext);
    let repo = &server.repo;
    let root = thread(repo);
    let profile = tempfile::Builder::new()
        .prefix("ocx-chromium-")
        .tempdir()
        .unwrap();
    let shot = std::env::var_os("OCX_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| profile.path().join("ocx.png"));
    let out = Command::new("node")
        .arg(driver().join("ocx-cgi.mjs"))
        .env("OCX_BASE", server.base())
        .env("OCX_LOGIN", "alice")
        .env("OCX_PASSWORD", "alice-pw")
        .env("OCX_THREAD", &root)
        .env("OCX_PROFILE", profile.path().join("profile"))
        .env("OCX_SHOT", &shot)
        .env(
            "OCX_TOOLS",
            ocx::registry::TOOLS
                .iter()
                .filter(|t| {
                    !t.checkout()
                        && !matches!(
                            t.reach(),
                            ocx::tool::Reach::CommandLine | ocx::tool::Reach::NotPage
                        )
                })
                .count()
                .to_string(),
        )
        .output()
        .unwrap();
    let said = crate::support::said(&out);
    assert!(out.status.success(), "the browser test failed: {said}");
    assert!(shot.is_file(), "no screenshot: {said}");
    let thread = repo.json(&["thread", "--of", &root]).ok().to_string();
    assert!(thread.contains("Replied from Chromium"), "{thread}");
    assert!(!thread.contains("Forged from another page"), "{thread}");
    let posts = repo.hashes();
    let by_alice: Vec<_> = posts
        .iter()
        .filter(|h| repo.sender(h).as_deref() == Some("alice"))
        .collect();
    assert_eq!(
        by_alice.len(),
        2,
        "the thread's first post and the reply, nothing else"
    );
}

#[test]
fn a_page_that_starts_no_fossil_never_asks_fossil_its_version() {
    use std::os::unix::fs::PermissionsExt;
    let (ext, repo) = (Ext::new(), repo());
    let asked = ext.dir.path().join("asked");
    let wrapper = ext.dir.path().join("fossil-counted");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            asked.display(),
            fossil().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = serde_json::json!({ "fossil": wrapper });
    std::fs::write(ext.dir.path().join(".ocx-cgi.json"), config.to_string()).unwrap();
    let ran = || std::fs::read_to_string(&asked).unwrap_or_default();
    for (path, query) in [("/list", "json"), ("/help", "json&tool=post")] {
        let page = cgi(
            &ext,
            &repo,
            &[("PATH_INFO", path), ("QUERY_STRING", query)],
            b"",
        );
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert_eq!(ran(), "", "{path} started fossil");
    }
    let page = cgi(
        &ext,
        &repo,
        &[
            ("FOSSIL_USER", "alice"),
            ("PATH_INFO", "/status"),
            ("QUERY_STRING", "json"),
        ],
        b"",
    );
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        ran().contains("version"),
        "status, which reports fossil, finds it through the configured program: {:?}",
        ran()
    );
}

/// Damages `file`'s `config` table where SQLite reads it first: its root
/// page's header, as a disk or a killed copy might leave it.
fn damage(file: &Path) {
    let (page_size, root): (i64, i64) = {
        let db = rusqlite::Connection::open(file).unwrap();
        let size = db.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
        let root = db
            .query_row(
                "SELECT rootpage FROM sqlite_master WHERE name='config'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        (size, root)
    };
    use std::io::{Seek, SeekFrom};
    let mut f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    f.seek(SeekFrom::Start(((root - 1) * page_size) as u64))
        .unwrap();
    f.write_all(&[0x0d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff])
        .unwrap();
}

#[test]
fn a_damaged_repository_is_a_failure_on_the_command_line_and_500_on_the_page_and_no_file_a_refusal()
{
    let (ext, repo) = (Ext::new(), repo());
    let cookie = sign_in(&repo, "alice");
    damage(&repo.file);
    let failed = repo.json(&["status"]).failed();
    assert!(
        failed.contains("damaged") && failed.contains("malformed"),
        "{failed}"
    );
    let page = cgi_raw(
        &ext,
        &repo,
        &[
            ("HTTP_COOKIE", &cookie),
            ("PATH_INFO", "/status"),
            ("QUERY_STRING", "json"),
        ],
        b"",
    );
    assert_eq!(page.status, 500, "{}", page.body);
    assert_eq!(page.answer()["stopped"]["kind"], "failed");

    // A file that is no repository is the caller's to mend: a refusal naming it.
    let text = repo.dir.path().join("notes.txt");
    std::fs::write(&text, "not a repository\n").unwrap();
    let mut c = Command::new(crate::support::ocx_bin());
    c.args(["status", "--json", "--user", "admin", "--repository"])
        .arg(&text);
    assert_eq!(crate::support::run(c, None).refused(), "repository");
}
