//! Logins asked for and given, over real HTTP to a real `fossil server`
//! serving OCX's page: `register` on the asking machine, `approve` through
//! the page's form (a POST from the page itself, as an administrator signed
//! in), `collect` as an unsigned POST, and `send_runs` with the node
//! telling senders with and without `R` apart.

use crate::cgi::{Ext, served_as};
use crate::node::{EchoNode, forged_record};
use crate::support::{self, Repo, Run, ServedNode, fossil, ocx_bin, run};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const REFUSAL: &str = ocx::tools::collect::REFUSAL;

/// A served repository whose administrator `admin` signs in with `admin-pw`.
pub(crate) struct Site {
    pub(crate) server: ServedNode,
    pub(crate) _ext: Ext,
    /// Where the asking machine keeps its credentials files.
    pub(crate) machine: tempfile::TempDir,
}

impl Site {
    pub(crate) fn new() -> Site {
        let ext = Ext::new();
        let server = served_as(Repo::new(), &ext, |s| {
            s.admin_password().login("pat", "v4").login("maint", "a")
        });
        Site {
            server,
            _ext: ext,
            machine: tempfile::tempdir().unwrap(),
        }
    }

    pub(crate) fn base(&self) -> String {
        self.server.base()
    }

    pub(crate) fn own(&self) -> String {
        format!("{}/ext/ocx-cgi", self.base())
    }

    /// `ocx register SERVER FILE ARGS` on the asking machine, with no
    /// repository of its own.
    pub(crate) fn register(&self, file: &str, args: &[&str]) -> Run {
        let mut c = Command::new(ocx_bin());
        c.args(["register", &self.base(), file])
            .args(args)
            .arg("--json")
            .current_dir(self.machine.path());
        run(c, None)
    }

    pub(crate) fn creds(&self, file: &str) -> Value {
        let path = self.machine.path().join(file);
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    pub(crate) fn mode(&self, file: &str) -> u32 {
        std::fs::metadata(self.machine.path().join(file))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    }

    /// The key the file's code stands for.
    pub(crate) fn key(&self, file: &str) -> String {
        hex::encode(Sha256::digest(
            self.creds(file)["code"].as_str().unwrap().as_bytes(),
        ))
    }

    /// A POST of a form to the page's `tool`, answered as JSON.
    pub(crate) fn post(&self, tool: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
        let (status, head, text) =
            self.server
                .request("POST", &format!("/ext/ocx-cgi/{tool}?json"), headers, body);
        let answer = serde_json::from_str(&text).unwrap_or_else(|_| json!({"raw": head + &text}));
        (status, answer)
    }

    /// `collect` asked as `register` asks it: an unsigned POST.
    pub(crate) fn collect(&self, login: &str, code: &str) -> (u16, Value) {
        self.post("collect", &[], &format!("login={login}&code={code}"))
    }

    /// Approves through the page's form, as `admin` signed in, from the page itself.
    pub(crate) fn approve_on_page(&self, body: &str) -> (u16, Value) {
        let cookie = self.server.login("admin");
        self.post(
            "approve",
            &[("Cookie", &cookie), ("Referer", &self.own())],
            body,
        )
    }

    /// Registers `login` and approves it on the command line; its key.
    pub(crate) fn approved(&self, login: &str, file: &str, extra: &[&str]) -> String {
        self.register(file, &["--login", login]).refused();
        let key = self.key(file);
        let mut args = vec!["approve", login, &key, "goC4w"];
        args.extend_from_slice(extra);
        self.server.repo.json(&args).ok();
        key
    }

    /// What the user table holds, every row: what nothing may change.
    pub(crate) fn users(&self) -> Vec<(String, String, String)> {
        let db = rusqlite::Connection::open(&self.server.repo.file).unwrap();
        let mut st = db
            .prepare("SELECT login, coalesce(cap,''), coalesce(pw,'') FROM user ORDER BY login")
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    pub(crate) fn row(&self, login: &str) -> Option<Value> {
        ocx::fossil::Repository::open(&self.server.repo.file)
            .unwrap()
            .login_key(login)
            .unwrap()
            .map(|t| serde_json::from_str(&t).unwrap())
    }

    pub(crate) fn own_caps(&self, login: &str) -> Option<String> {
        ocx::fossil::Repository::open(&self.server.repo.file)
            .unwrap()
            .own_capabilities(login)
            .unwrap()
    }

    pub(crate) fn holds(&self, login: &str, password: &str) -> bool {
        ocx::fossil::Repository::open(&self.server.repo.file)
            .unwrap()
            .holds_password(login, password)
            .unwrap()
    }

    /// Rewrites a field of `login`'s key row, as time passing or another
    /// writer would.
    pub(crate) fn set_row(&self, login: &str, field: &str, value: Value) {
        let mut row = self.row(login).unwrap();
        row[field] = value;
        let db = rusqlite::Connection::open(&self.server.repo.file).unwrap();
        db.execute(
            "UPDATE config SET value=?2 WHERE name=?1",
            [format!("ocx-node-key-{login}"), row.to_string()],
        )
        .unwrap();
    }
}

/// The text of the post `hash`, as `thread` reads it.
fn post_text(repo: &Repo, hash: &str) -> String {
    let thread = repo.json(&["thread", "--of", hash]).ok();
    thread["posts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["hash"] == hash)
        .map(|p| p["text"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("no post {hash} in {thread:#}"))
}

#[test]
fn a_machine_registers_is_approved_on_the_page_collects_its_password_and_clones() {
    let site = Site::new();
    let pending = site.register("creds.json", &["--login", "build-1"]);
    pending.refused();
    assert_eq!(
        site.mode("creds.json"),
        0o600,
        "readable by its owner alone"
    );
    let creds = site.creds("creds.json");
    assert_eq!(creds["user"], "build-1");
    assert_eq!(creds["capabilities"], "goC4w");
    assert_eq!(creds["code"].as_str().unwrap().len(), 64, "32 random bytes");
    let key = site.key("creds.json");
    let link = format!(
        "{}/ext/ocx-cgi/approve?login=build-1&key={key}&capabilities=goC4w",
        site.base()
    );
    let reason = pending.answer()["stopped"]["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(reason.ends_with(&link), "the exact link: {reason}");
    let again = site.register("creds.json", &[]);
    again.refused();
    assert_eq!(site.creds("creds.json"), creds, "the code is kept");
    assert_eq!(site.own_caps("build-1"), None);
    assert_eq!(
        site.register("creds.json", &["--capabilities", "goC4wk"])
            .refused(),
        "capabilities"
    );

    let cookie = site.server.login("admin");
    let path = link.strip_prefix(&site.base()).unwrap();
    let before = site.server.repo.hashes();
    let (status, _, page) = site.server.request("GET", path, &[("Cookie", &cookie)], "");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(&key), "the form holds the key: {page}");
    assert!(page.contains("build-1"));
    assert_eq!(site.own_caps("build-1"), None, "a GET changes nothing");
    assert_eq!(site.server.repo.hashes(), before);
    let body = format!("login=build-1&key={key}&capabilities=goC4w");
    let (_, elsewhere) = site.post(
        "approve",
        &[
            ("Cookie", &cookie),
            ("Referer", &format!("{}/doc/tip/x.html", site.base())),
        ],
        &body,
    );
    assert_eq!(elsewhere["dry_run"], true, "{elsewhere:#}");
    assert_eq!(
        site.own_caps("build-1"),
        None,
        "a POST from elsewhere changes nothing"
    );
    let (status, approved) = site.approve_on_page(&body);
    assert_eq!(status, 200, "{approved:#}");
    assert_eq!(approved["dry_run"], false, "{approved:#}");
    assert_eq!(site.own_caps("build-1").as_deref(), Some("gow4C"));
    let audit = approved["result"]["audit"].as_str().unwrap().to_string();
    assert_eq!(
        site.server.repo.sender(&audit).as_deref(),
        Some("admin"),
        "the audit post names the approver by receipt"
    );
    let text = post_text(&site.server.repo, &audit);
    assert!(
        text.contains("build-1") && text.contains("gow4C") && text.contains("admin"),
        "{text}"
    );
    let collected = site.register("creds.json", &[]).ok();
    assert_eq!(collected["state"], "collected");
    let creds = site.creds("creds.json");
    assert!(
        creds.get("code").is_none(),
        "the password takes the code's place"
    );
    let password = creds["password"].as_str().unwrap().to_string();
    assert_eq!(site.mode("creds.json"), 0o600);
    assert!(site.holds("build-1", &password));
    assert!(!text.contains(&password), "no password in the post");
    assert!(
        site.row("build-1").unwrap().get("password").is_none(),
        "no password in the row"
    );
    assert_eq!(
        site.register("creds.json", &[]).ok()["state"],
        "approved",
        "with a password it says it has one"
    );

    let clone = site.machine.path().join("clone.fossil");
    let url = format!("http://build-1:{password}@127.0.0.1:{}/", site.server.port);
    let mut c = Command::new(fossil());
    c.args(["clone", "--args", "-"])
        .current_dir(site.machine.path())
        .env("USER", "build-1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{url}\n{}\n", clone.display()).as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "a clone with the collected password: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let cloned = ocx::fossil::Repository::open(&clone).unwrap();
    assert_eq!(
        cloned.project_code().unwrap(),
        ocx::fossil::Repository::open(&site.server.repo.file)
            .unwrap()
            .project_code()
            .unwrap()
    );
}

#[test]
fn collect_refuses_a_wrong_code_an_expired_key_a_changed_password_a_revoked_login_and_too_many_tries()
 {
    let site = Site::new();

    // A wrong code, and a login never asked for: the one refusal.
    site.approved("wrong", "wrong.json", &[]);
    let (users, hashes) = (site.users(), site.server.repo.hashes());
    let (status, a) = site.collect("wrong", &"0".repeat(64));
    assert_eq!(
        (status, a["stopped"]["reason"].as_str()),
        (400, Some(REFUSAL)),
        "{a:#}"
    );
    assert!(a["result"].is_null());
    let (_, a) = site.collect("never-asked", &"0".repeat(64));
    assert_eq!(a["stopped"]["reason"], REFUSAL);
    assert_eq!((site.users(), site.server.repo.hashes()), (users, hashes));
    assert!(
        site.row("never-asked").is_none(),
        "no row made for a stranger"
    );
    let (status, _, _) = site.server.request(
        "GET",
        &format!(
            "/ext/ocx-cgi/collect?json&login=wrong&code={}",
            "0".repeat(64)
        ),
        &[],
        "",
    );
    assert_eq!(status, 400, "a GET is not answered");

    // An expired key: refused until approved again.
    site.approved("late", "late.json", &[]);
    site.set_row("late", "expires", json!(1));
    let users = site.users();
    site.register("late.json", &[]).refused();
    assert!(site.creds("late.json").get("password").is_none());
    assert_eq!(site.users(), users);

    // A password changed since approve set it: refused, and not approved again.
    site.approved("moved", "moved.json", &[]);
    site.server
        .repo
        .fossil(&["user", "password", "moved", "by-hand-pw"]);
    let users = site.users();
    site.register("moved.json", &[]).refused();
    let key = site.key("moved.json");
    assert_eq!(
        site.server
            .repo
            .json(&["approve", "moved", &key, "goC4w"])
            .refused(),
        "login"
    );
    assert_eq!(site.users(), users);
    assert!(site.holds("moved", "by-hand-pw"));

    // A revoked login: its capabilities and password gone, its row removed, an audit post.
    site.approved("gone", "gone.json", &[]);
    let pw =
        |users: Vec<(String, String, String)>| users.into_iter().find(|u| u.0 == "gone").unwrap().2;
    let set = pw(site.users());
    let revoked = site.server.repo.json(&["approve", "gone", "--revoke"]).ok();
    assert_eq!(site.own_caps("gone").as_deref(), Some(""));
    assert_ne!(pw(site.users()), set, "the password approve set is gone");
    assert!(site.row("gone").is_none());
    let audit = revoked["audit"].as_str().unwrap();
    assert_eq!(site.server.repo.sender(audit).as_deref(), Some("admin"));
    assert!(post_text(&site.server.repo, audit).contains("revoked"));
    let thread = site.server.repo.json(&["thread", "--of", audit]).ok();
    let posts = thread["posts"].as_array().unwrap();
    assert_eq!(
        posts.len(),
        5,
        "every approval and the revocation in one thread: {thread:#}"
    );
    assert!(posts.iter().all(|p| p["from"] == "admin"), "{thread:#}");
    site.register("gone.json", &[]).refused();
    assert_eq!(
        site.server
            .repo
            .json(&["approve", "gone", "--revoke"])
            .refused(),
        "login",
        "revoked once"
    );

    // Too many tries: even the right code is refused this minute.
    site.approved("busy", "busy.json", &[]);
    for _ in 0..ocx::tools::logins::TRIES_A_MINUTE {
        site.collect("busy", &"1".repeat(64));
    }
    let users = site.users();
    site.register("busy.json", &[]).refused();
    assert!(site.creds("busy.json").get("password").is_none());
    assert_eq!(site.users(), users);
    assert_eq!(site.row("busy").unwrap()["collected"], false);
    site.set_row("busy", "window", json!(1));
    assert_eq!(
        site.register("busy.json", &[]).ok()["state"],
        "collected",
        "a minute later the right code is answered"
    );
}

#[test]
fn approve_refuses_each_bad_request_by_field_and_changes_nothing() {
    let site = Site::new();
    let key = "ab".repeat(32);
    site.approved("grown", "grown.json", &[]);
    site.server
        .repo
        .fossil(&["user", "capabilities", "grown", "gos"]);
    let (users, hashes) = (site.users(), site.server.repo.hashes());
    let cases: &[(&[&str], &str)] = &[
        (&["approve", "Build-1", &key, "goC4w"], "login"),
        (&["approve", "build_1", &key, "goC4w"], "login"),
        (&["approve", "anonymous", &key, "goC4w"], "login"),
        (&["approve", "nobody", &key, "goC4w"], "login"),
        (&["approve", "fresh", &key[..63], "goC4w"], "key"),
        (&["approve", "fresh", &"zz".repeat(32), "goC4w"], "key"),
        (&["approve", "fresh", &key], "capabilities"),
        (&["approve", "fresh", &key, "goa"], "capabilities"),
        (&["approve", "fresh", &key, "gos"], "capabilities"),
        (&["approve", "fresh", &key, "gou"], "capabilities"),
        (&["approve", "fresh", &key, "gov"], "capabilities"),
        (&["approve", "fresh", &key, "goQ"], "capabilities"),
        (&["approve", "pat", &key, "goC4w"], "login"),
        (&["approve", "maint", &key, "goC4w"], "login"),
        (&["approve", "grown", &key, "goC4w"], "login"),
        (&["approve", "node-1234abcd", &key, "goC4w"], "node"),
        (&["approve", "build-2", &key, "goC4w", "--node"], "login"),
        (
            &["approve", "fresh", &key, "goC4w", "--valid-minutes", "0"],
            "valid_minutes",
        ),
    ];
    for (args, field) in cases {
        assert_eq!(&site.server.repo.json(args).refused(), field, "{args:?}");
    }
    let by_pat = site
        .server
        .repo
        .json(&["approve", "fresh", &key, "goC4w", "--user", "pat"]);
    by_pat.refused();
    assert!(
        by_pat.answer()["stopped"]["reason"]
            .as_str()
            .unwrap()
            .contains("needs capability a or s")
    );
    let no_repository = {
        let mut c = Command::new(ocx_bin());
        c.args(["approve", "fresh", &key, "goC4w", "--json"])
            .current_dir(site.machine.path());
        run(c, None)
    };
    assert_eq!(
        no_repository.refused(),
        "repository",
        "a clone's logins are its own"
    );
    assert_eq!((site.users(), site.server.repo.hashes()), (users, hashes));
    assert!(site.row("fresh").is_none());

    // R is OCX's own letter, and a node's login is marked.
    let node_key = "cd".repeat(32);
    let node = site
        .server
        .repo
        .json(&["approve", "node-1234abcd", &node_key, "goC4wR", "--node"])
        .ok();
    assert_eq!(node["capabilities"], "gow4CR");
    assert_eq!(node["node"], true);
    assert_eq!(site.row("node-1234abcd").unwrap()["node"], true);
}

#[test]
fn register_keeps_its_secret_to_its_owner_and_is_offered_nowhere_else() {
    let site = Site::new();
    let loose = site.machine.path().join("loose.json");
    std::fs::write(&loose, r#"{"user": "loose", "code": "00"}"#).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(site.register("loose.json", &[]).refused(), "credentials");
    std::os::unix::fs::symlink(&loose, site.machine.path().join("link.json")).unwrap();
    assert_eq!(site.register("link.json", &[]).refused(), "credentials");
    assert_eq!(site.register("x.json", &["--login=-x"]).refused(), "login");
    assert!(!site.machine.path().join("x.json").exists());
    let mut c = Command::new(ocx_bin());
    c.args(["register", "ftp://example.org/", "y.json", "--json"])
        .current_dir(site.machine.path());
    assert_eq!(run(c, None).refused(), "server");

    let (status, _, _) = site.server.request(
        "GET",
        "/ext/ocx-cgi/register?server=http://x/&credentials=c.json",
        &[],
        "",
    );
    assert_eq!(status, 403, "register is never on the page");
    let (status, _, page) = site.server.request("GET", "/ext/ocx-cgi", &[], "");
    assert_eq!(status, 200);
    assert!(
        !page.contains("/ext/ocx-cgi/register\""),
        "no card for register"
    );

    let thread = site
        .server
        .repo
        .json(&["post", "--title", "Hello", "--text", "first"])
        .ok_str("hash");
    let lines = crate::mcp::run_client_with(
        &[
            "stdio",
            ocx_bin().to_str().unwrap(),
            &thread,
            "--mcp",
            "--repository",
            site.server.repo.file.to_str().unwrap(),
            "--user",
            "admin",
        ],
        &[],
    );
    let tools = lines.iter().find(|l| l["label"] == "tools").unwrap();
    let names: Vec<&str> = tools["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(names.contains(&"ocx_send_runs"), "{names:?}");
    for withheld in ["ocx_register", "ocx_approve", "ocx_collect"] {
        assert!(!names.contains(&withheld), "{withheld} over MCP: {names:?}");
    }
}

#[test]
fn send_runs_refuses_fossils_own_users_and_strangers_and_writes_only_a_change() {
    let site = Site::new();
    let (users, hashes) = (site.users(), site.server.repo.hashes());
    for special in ["nobody", "anonymous", "reader", "developer"] {
        assert_eq!(
            site.server.repo.json(&["send_runs", special]).refused(),
            "user"
        );
    }
    assert_eq!(
        site.server.repo.json(&["send_runs", "stranger"]).refused(),
        "user"
    );
    site.server
        .repo
        .json(&["send_runs", "maint", "--user", "pat"])
        .refused();
    let mut c = Command::new(ocx_bin());
    c.args(["send_runs", "pat", "--json"])
        .current_dir(site.machine.path());
    assert_eq!(run(c, None).refused(), "repository");
    assert_eq!((site.users(), site.server.repo.hashes()), (users, hashes));

    let given = site.server.repo.json(&["send_runs", "pat"]).ok();
    assert_eq!(site.own_caps("pat").as_deref(), Some("v4R"));
    assert!(given["capabilities"].as_str().unwrap().contains('R'));
    assert!(given.get("note").is_none(), "{given:#}");
    let users = site.users();
    let again = site.server.repo.json(&["send_runs", "pat"]);
    again.ok();
    assert!(
        again.answer()["log"]
            .as_array()
            .unwrap()
            .iter()
            .all(|op| op["op"] == "read"),
        "nothing written when nothing changes"
    );
    assert_eq!(site.users(), users);
    site.server.repo.json(&["send_runs", "pat", "--off"]).ok();
    assert_eq!(site.own_caps("pat").as_deref(), Some("v4"));

    let admin = site.server.repo.json(&["send_runs", "maint"]).ok();
    assert!(admin["note"].as_str().unwrap().contains("admin or setup"));
    site.server
        .repo
        .fossil(&["user", "capabilities", "reader", "kptwR"]);
    site.server
        .repo
        .fossil(&["user", "capabilities", "pat", "v4uR"]);
    let still = site.server.repo.json(&["send_runs", "pat", "--off"]).ok();
    assert_eq!(site.own_caps("pat").as_deref(), Some("v4u"));
    assert!(
        still["note"]
            .as_str()
            .unwrap()
            .contains("Fossil's own users"),
        "{still:#}"
    );

    // On the page: a GET is its dry run; the form's POST from the page gives R.
    let cookie = site.server.login("admin");
    let (status, _, page) = site.server.request(
        "GET",
        "/ext/ocx-cgi/send_runs?user=maint",
        &[("Cookie", &cookie)],
        "",
    );
    assert_eq!(status, 200);
    assert!(page.contains("dry run"), "{page}");
    assert!(
        page.contains("Fossil&#39;s own user editor drops R")
            || page.contains("Fossil's own user editor drops R"),
        "the page says Fossil's editor drops R: {page}"
    );
    site.server
        .repo
        .fossil(&["user", "capabilities", "pat", "v4"]);
    let (status, a) = site.post(
        "send_runs",
        &[("Cookie", &cookie), ("Referer", &site.own())],
        "user=pat",
    );
    assert_eq!((status, &a["dry_run"]), (200, &json!(false)), "{a:#}");
    assert_eq!(site.own_caps("pat").as_deref(), Some("v4R"));
}

/// Whether a `fossil sql` on `file` is running (waiting on the lock).
fn fossil_sql_running(file: &Path) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    let file = file.to_str().unwrap();
    procs.flatten().any(|p| {
        std::fs::read(p.path().join("cmdline")).is_ok_and(|c| {
            let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
            args.contains(&b"sql".as_slice()) && args.contains(&file.as_bytes())
        })
    })
}

#[test]
fn a_capability_another_writer_gives_while_send_runs_runs_survives() {
    let repo = Repo::new();
    repo.user("pat", "v4");
    let file: PathBuf = repo.file.canonicalize().unwrap();
    let db = rusqlite::Connection::open(&file).unwrap();
    db.execute_batch("BEGIN IMMEDIATE; UPDATE user SET cap=cap||'k' WHERE login='pat';")
        .unwrap();
    let mut c = Command::new(ocx_bin());
    c.args(["send_runs", "pat", "--json", "--repository"])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while !fossil_sql_running(&file) {
        assert!(Instant::now() < until, "send_runs never reached its write");
        std::thread::sleep(Duration::from_millis(10));
    }
    db.execute_batch("COMMIT;").unwrap();
    let out = child.wait_with_output().unwrap();
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["ok"], true, "{answer:#}");
    let own = ocx::fossil::Repository::open(&file)
        .unwrap()
        .own_capabilities("pat")
        .unwrap()
        .unwrap();
    assert_eq!(
        own, "v4kR",
        "k, given after send_runs read pat's letters, stays"
    );
}

#[test]
fn fossils_own_user_editor_drops_r_when_an_administrator_saves_the_user() {
    let site = Site::new();
    site.server.repo.json(&["send_runs", "pat"]).ok();
    let uid: i64 = rusqlite::Connection::open(&site.server.repo.file)
        .unwrap()
        .query_row("SELECT uid FROM user WHERE login='pat'", [], |r| r.get(0))
        .unwrap();
    let cookie = site.server.login("admin");
    let path = format!("/setup_uedit?id={uid}");
    let (status, _, form) = site
        .server
        .request("GET", &path, &[("Cookie", &cookie)], "");
    assert_eq!(status, 200);
    let value_of = |name: &str| {
        let at = form.find(&format!("name=\"{name}\" value=\"")).unwrap();
        let rest = &form[at + name.len() + 15..];
        rest[..rest.find('"').unwrap()].to_string()
    };
    let mut body = format!(
        "csrf={}&referer=setup_ulist&id={uid}&login=pat&pw=**********&info=&apply=Apply+Changes",
        value_of("csrf")
    );
    for input in form
        .split("<input")
        .filter(|i| i.contains("type=\"checkbox\""))
    {
        if input.contains("checked") {
            let name = input.split("name=\"").nth(1).unwrap();
            body += &format!("&{}=on", &name[..name.find('"').unwrap()]);
        }
    }
    let (status, head, _) = site.server.request(
        "POST",
        "/setup_uedit",
        &[
            ("Cookie", &cookie),
            ("Referer", &format!("{}{path}", site.base())),
        ],
        &body,
    );
    assert_eq!(status, 302, "the editor saved: {head}");
    let own = site.own_caps("pat").unwrap();
    assert!(own.contains('v') && own.contains('4'), "{own}");
    assert!(
        !own.contains('R'),
        "Fossil 2.28's editor keeps only letters it defines; docs/operating.md says so: {own}"
    );
}

#[test]
fn the_node_tells_senders_with_and_without_r_apart() {
    let s = EchoNode::new();
    let node = s.node.repo.server_code();
    let repo = &s.node.repo;
    repo.user("lee", "4");
    let without = forged_record(&s, "pat", &node, json!({"wall": "1m"}));
    s.settled();
    assert!(
        support::logged(&s.root(), |e| support::is(e, "ignored", &without)) > 0,
        "{}",
        s.node_log()
    );
    repo.json(&["send_runs", "lee"]).ok();
    let narrow = forged_record(&s, "lee", &node, json!({"wall": "1m"}));
    let (outcome, note, _) = s.response(&narrow).expect("answered");
    assert_eq!(outcome, "refused");
    assert!(
        note.starts_with("user:") && note.contains("lee") && note.contains("lacks i"),
        "{note}"
    );
    assert_eq!(s.caps("echo-f0f0f0"), None, "no run user made for it");
    repo.json(&["send_runs", "pat"]).ok();
    s.let_senders_bind(&[&s.out]);
    let with = forged_record(&s, "pat", &node, json!({"wall": "1m"}));
    support::until_logged(&s.root(), 60, |e| support::is(e, "opened", &with));
    assert_eq!(
        repo.json(&["stop", "--record", &with, "--user", "lee"])
            .refused(),
        "record",
        "R stops only what its holder sent"
    );
    repo.json(&["stop", "--record", &with, "--user", "pat"])
        .ok();
    let (outcome, _, _) = s.response(&with).expect("answered");
    assert_eq!(outcome, "stopped");
}
