//! Attacks by a page committed to the repository, opened by a signed-in
//! administrator in headless Chromium: a script beside a committed page,
//! inside a committed SVG, or served by `/raw?m=text/html` tries to write
//! through OCX's page as its viewer, with a Referer of OCX's own page
//! (which a script of the site may send). The site's policy runs no such
//! script; where the policy still would, the page writes nothing.

use crate::cgi::{Ext, repo, served_as, thread};
use crate::support::{Repo, Served, ServedNode};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// What a committed script does: says it ran, then posts through OCX's
/// page as whoever views it, with OCX's page as its Referer.
fn hostile_script(root: &str) -> String {
    format!(
        "console.log('ocx-script-ran');\n\
         fetch('/ext/ocx-cgi/post?json', {{method: 'POST', credentials: 'include',\n\
           referrer: location.origin + '/ext/ocx-cgi/post',\n\
           headers: {{'Content-Type': 'application/x-www-form-urlencoded'}},\n\
           body: 'to={root}&text=planted+by+a+committed+page'}})\n\
           .then((r) => r.text()).then((t) => console.log('ocx-answer ' + t));\n"
    )
}

/// Commits, as the developer `dev`, a raw page with a script inline and
/// one beside it, a page Fossil wraps in its skin loading that script,
/// and an SVG holding the script; answers the paths that open them.
fn commit_hostile_pages(repo: &Repo, root: &str) -> Vec<String> {
    repo.user("dev", "ei");
    let script = hostile_script(root);
    repo.commit_as("dev", "evil.js", &script, None);
    repo.commit_as(
        "dev",
        "evil.html",
        &format!(
            "<html><body><p>Release notes</p><script src=\"/doc/trunk/evil.js\"></script>\n<script>{script}</script></body></html>\n"
        ),
        None,
    );
    repo.commit_as(
        "dev",
        "notes.html",
        "<div class=\"fossil-doc\" data-title=\"Notes\"><p>Notes</p><script src=\"evil.js\"></script></div>\n",
        None,
    );
    repo.commit_as(
        "dev",
        "logo.svg",
        &format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"10\" height=\"10\"><script><![CDATA[\n{script}]]></script></svg>\n"
        ),
        None,
    );
    vec![
        "/doc/trunk/evil.html".into(),
        "/doc/trunk/notes.html".into(),
        "/doc/trunk/logo.svg".into(),
        "/raw/evil.html?ci=trunk&m=text/html".into(),
    ]
}

/// What Chromium saw at each path, opened signed in as admin.
fn open_as_admin(base: &str, paths: &[String]) -> Vec<Value> {
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    assert!(
        Path::new("/usr/bin/chromium").is_file()
            && driver.join("node_modules/playwright-core").is_dir(),
        "chromium or playwright-core is missing: run scripts/setup.sh"
    );
    let profile = tempfile::Builder::new()
        .prefix("ocx-chromium-")
        .tempdir()
        .unwrap();
    let out = Command::new("node")
        .arg(driver.join("committed-page.mjs"))
        .env("OCX_BASE", base)
        .env("OCX_LOGIN", "admin")
        .env("OCX_PASSWORD", "admin-pw")
        .env("OCX_PROFILE", profile.path().join("profile"))
        .env("OCX_PATHS", paths.join("\n"))
        .output()
        .unwrap();
    let said = crate::support::said(&out);
    assert!(out.status.success(), "the browser failed: {said}");
    let seen: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(seen.len(), paths.len(), "{said}");
    seen
}

/// The posts of the thread `root` that a committed page planted.
fn planted(repo: &Repo, root: &str) -> usize {
    let thread = repo.json(&["thread", "--of", root]).ok().to_string();
    thread.matches("planted by a committed page").count()
}

/// A served site with a thread, an administrator who signs in, and the
/// committed pages, its policy Fossil's until `ocx hook install` makes the
/// repository a node; its server and the paths that open them.
fn site() -> (Ext, ServedNode, String, Vec<String>) {
    let (ext, repo) = (Ext::new(), repo());
    let root = thread(&repo);
    let paths = commit_hostile_pages(&repo, &root);
    let server = served_as(repo, &ext, Served::admin_password);
    let repo = &server.repo;
    repo.fossil(&["unset", ocx::fossil::csp::SETTING]);
    repo.json(&["hook", "install", "--url", &server.base()])
        .ok();
    (ext, server, root, paths)
}

#[test]
fn a_committed_page_svg_or_raw_file_opened_by_an_administrator_runs_no_script_and_writes_nothing() {
    let (_ext, server, root, paths) = site();
    let repo = &server.repo;
    let before = repo.hashes();
    let seen = open_as_admin(&server.base(), &paths);
    for s in &seen {
        assert_eq!(s["ran"], 0, "a committed script ran: {s:#}");
        assert!(
            s["refused"].as_u64().unwrap_or(0) >= 1,
            "the policy refused no script, so the attack was not made: {s:#}"
        );
    }
    assert_eq!(planted(repo, &root), 0);
    assert_eq!(repo.hashes(), before, "a committed page wrote as admin");
}

#[test]
fn on_a_site_whose_policy_still_runs_committed_scripts_the_page_writes_nothing_as_their_viewer() {
    let (_ext, server, root, paths) = site();
    let repo = &server.repo;
    repo.fossil(&["settings", "default-csp", ocx::fossil::csp::FOSSILS_DEFAULT]);
    let before = repo.hashes();
    let seen = open_as_admin(&server.base(), &paths[..1]);
    assert!(
        seen[0]["ran"].as_u64().unwrap_or(0) >= 1,
        "no committed script ran, so the attack was not made: {:#}",
        seen[0]
    );
    let answers: Vec<&str> = seen[0]["said"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t.as_str()?.strip_prefix("ocx-answer "))
        .collect();
    assert!(
        !answers.is_empty(),
        "the script had no answer: {:#}",
        seen[0]
    );
    for a in &answers {
        let answer: Value = serde_json::from_str(a).unwrap();
        assert_eq!(answer["dry_run"], true, "{answer:#}");
    }
    assert_eq!(planted(repo, &root), 0);
    assert_eq!(repo.hashes(), before, "a committed script wrote as admin");
    let cookie = server.login("alice");
    let (_, _, form) = server.request(
        "POST",
        "/ext/ocx-cgi/post",
        &[
            ("Cookie", &cookie),
            ("Referer", &format!("{}/ext/ocx-cgi/post", server.base())),
        ],
        &format!("to={root}&text=by+alice+herself"),
    );
    assert!(
        form.contains("Content-Security-Policy"),
        "the page does not say why nothing was written: {form}"
    );
    assert_eq!(repo.hashes(), before);
}

/// The site's policy, as the repository's setting holds it.
fn policy(file: &Path) -> Option<String> {
    ocx::fossil::Repository::open(file)
        .unwrap()
        .config(ocx::fossil::csp::SETTING)
        .unwrap()
}

#[test]
fn the_node_gives_its_site_the_policy_and_sets_it_back_when_it_is_loosened() {
    let cdn = "default-src 'self' data:; script-src 'self' https://cdn.example.org; img-src *";
    let kept = "default-src 'self' data:; script-src 'nonce-$nonce'; img-src *";
    let made = Repo::new();
    made.fossil(&["settings", "default-csp", cdn]);
    made.json(&["hook", "install", "--url", "http://127.0.0.1:9/"])
        .ok();
    assert_eq!(
        policy(&made.file).as_deref(),
        Some(kept),
        "hook install keeps the administrator's other directives and runs Fossil's scripts alone"
    );

    let s = Served::new().start();
    let status = s.repo.json(&["status"]).ok();
    assert_eq!(
        status["site"]["runs_only_fossils_scripts"], true,
        "{status:#}"
    );
    for (loosened, restored) in [
        (cdn, kept),
        (ocx::fossil::csp::FOSSILS_DEFAULT, ocx::fossil::csp::POLICY),
    ] {
        s.repo.fossil(&["settings", "default-csp", loosened]);
        let until = Instant::now() + Duration::from_secs(20);
        while policy(&s.repo.file).as_deref() != Some(restored) {
            assert!(
                Instant::now() < until,
                "the node left the site's policy loosened: {:?}",
                policy(&s.repo.file)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let out = Command::new("curl")
        .args(["-s", "-D", "-", "-o", "/dev/null"])
        .arg(format!("http://127.0.0.1:{}/timeline", s.port))
        .output()
        .unwrap();
    let header = String::from_utf8_lossy(&out.stdout);
    assert!(
        header
            .lines()
            .any(|l| l.starts_with("Content-Security-Policy:")
                && l.contains("script-src 'nonce-")
                && !l.contains("'self' 'nonce")),
        "{header}"
    );
}
