//! Attacks on the secrets OCX hands out, over real HTTP to a real `fossil
//! server` serving OCX's page: a host account reading the repository file
//! (which Fossil leaves readable by every account) for the password
//! `collect` hands an asker, or the one `run_login` hands an agent
//! machine's run; rows an earlier release wrote with passwords in them;
//! `collect` guessed at by many tries at once and by dry runs; and
//! `status` telling an administrator the file is open to others.

use crate::served::Enrolled;
use crate::support::Repo;
use crate::support::ServedNode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::Path;

const REFUSAL: &str = ocx::tools::collect::REFUSAL;

/// The enrolment site, with what these attacks read of its rows.
struct Site {
    site: crate::enrol::Site,
}

impl std::ops::Deref for Site {
    type Target = crate::enrol::Site;
    fn deref(&self) -> &crate::enrol::Site {
        &self.site
    }
}

impl Site {
    fn new() -> Site {
        Site {
            site: crate::enrol::Site::new(),
        }
    }

    /// Asks for `login` with `register` and approves it on the command
    /// line: the code the asker keeps.
    fn approved(&self, login: &str) -> String {
        let file = format!("{login}.json");
        self.register(&file, &["--login", login]).refused();
        let code = self.creds(&file)["code"].as_str().unwrap().to_string();
        let key = hex::encode(Sha256::digest(code.as_bytes()));
        self.server
            .repo
            .json(&["approve", login, &key, "goC4w"])
            .ok();
        code
    }

    /// `collect` as an unsigned POST of `body`, as `register` sends it.
    fn collect(&self, body: &str) -> (u16, Value) {
        collect_on(&self.server, body)
    }

    /// What `login`'s key row keeps, read as any account may read it.
    fn row(&self, login: &str) -> Value {
        let db = rusqlite::Connection::open(&self.server.repo.file).unwrap();
        let text: String = db
            .query_row(
                "SELECT value FROM config WHERE name=?1",
                [format!("ocx-node-key-{login}")],
                |r| r.get(0),
            )
            .unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// Writes the config row `name` as `value`, as an earlier release (or
    /// time passing) left it.
    fn set_config(&self, name: &str, value: &Value) {
        let db = rusqlite::Connection::open(&self.server.repo.file).unwrap();
        db.execute(
            "REPLACE INTO config(name,value,mtime) VALUES(?1,?2,0)",
            [name, &value.to_string()],
        )
        .unwrap();
    }

    fn holds(&self, login: &str, password: &str) -> bool {
        ocx::fossil::Repository::open(&self.server.repo.file)
            .unwrap()
            .holds_password(login, password)
            .unwrap()
    }
}

fn collect_on(server: &ServedNode, body: &str) -> (u16, Value) {
    let (status, head, text) = server.request("POST", "/ext/ocx-cgi/collect?json", &[], body);
    let answer = serde_json::from_str(&text).unwrap_or_else(|_| json!({"raw": head + &text}));
    (status, answer)
}

/// Whether `secret` is anywhere in the repository file's bytes, or in a
/// journal beside it: what a host account reading them finds.
fn in_file(file: &Path, secret: &str) -> bool {
    assert!(secret.len() >= 16, "a secret worth looking for: {secret:?}");
    let mut files = vec![file.to_path_buf()];
    for tail in ["-journal", "-wal"] {
        files.push(std::path::PathBuf::from(format!(
            "{}{tail}",
            file.display()
        )));
    }
    files
        .iter()
        .filter_map(|f| std::fs::read(f).ok())
        .any(|bytes| bytes.windows(secret.len()).any(|w| w == secret.as_bytes()))
}

#[test]
fn the_password_collect_hands_out_is_nowhere_in_the_repository_file() {
    let site = Site::new();
    let code = site.approved("build-1");
    let collected = site.register("build-1.json", &[]).ok();
    assert_eq!(collected["state"], "collected");
    let password = site.creds("build-1.json")["password"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(site.holds("build-1", &password), "the login's own");
    assert!(
        !in_file(&site.server.repo.file, &password),
        "the password the asker collected is in the repository file, where any host account reads it"
    );
    assert!(
        !in_file(&site.server.repo.file, &code),
        "nor the code that collects it"
    );
    assert!(site.row("build-1").get("password").is_none());
    let (_, again) = site.collect(&format!("login=build-1&code={code}"));
    assert_eq!(
        again["stopped"]["reason"], REFUSAL,
        "collected once: {again:#}"
    );
    assert!(site.holds("build-1", &password), "and still the asker's");
}

#[test]
fn the_password_run_login_hands_an_agent_machine_is_nowhere_in_the_repository_file() {
    let e = Enrolled::new(true);
    let record = e.record(&e.code, "build-a1b2c3");
    e.until("the run's login made", |r| {
        r.remote_run(&record).unwrap().is_some()
    });
    let (status, got) = e.run_login(&record, Some(&e.cookie()));
    assert_eq!(status, 200, "{got}");
    let password = got["result"]["password"].as_str().unwrap().to_string();
    let repo = e.repository();
    assert!(repo.holds_password("build-a1b2c3", &password).unwrap());
    assert!(
        !in_file(&e.site.server.repo.file, &password),
        "the run's password is in the served repository file, where any host account reads it"
    );
    assert!(
        !in_file(&e.site.server.repo.file, &e.password),
        "nor the machine's own"
    );
    let row: Value = serde_json::from_str(&repo.remote_run(&record).unwrap().unwrap()).unwrap();
    assert!(row.get("password").is_none(), "{row:#}");
}

#[test]
fn rows_an_earlier_release_kept_passwords_in_are_forgotten_and_still_serve() {
    let site = Site::new();
    site.server
        .repo
        .json(&["hook", "install", "--url", &site.server.base()])
        .ok();
    // As an earlier release kept them: an approval not yet collected (the
    // login holding the password in the row), and a remote run's login.
    let old = "legacy-approved-password-0001";
    let code = site.approved("old-1");
    site.server.repo.fossil(&["user", "password", "old-1", old]);
    let mut row = site.row("old-1");
    row["password"] = json!(old);
    row.as_object_mut().unwrap().remove("pw");
    site.set_config("ocx-node-key-old-1", &row);
    let run_pw = "legacy-remote-run-password-0002";
    let record = "ab".repeat(32);
    site.set_config(
        &format!("ocx-remote-run-{record}"),
        &json!({"record": record, "machine": "node-0a1b2c3d", "user": "build-x", "password": run_pw}),
    );
    assert!(in_file(&site.server.repo.file, old) && in_file(&site.server.repo.file, run_pw));

    // The node reads them once, at its start, and forgets what they kept.
    site.server.repo.json(&["node", "start"]).ok();
    let forgotten = || {
        let db = rusqlite::Connection::open(&site.server.repo.file).unwrap();
        let rows: Vec<String> = db
            .prepare("SELECT value FROM config WHERE name GLOB 'ocx-*'")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        rows.iter().all(|v| !v.contains("password"))
    };
    let started = std::time::Instant::now();
    while !forgotten() && started.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    site.server.repo.json(&["node", "stop"]).ok();
    assert!(forgotten(), "every row's password is forgotten");
    assert!(
        !in_file(&site.server.repo.file, old) && !in_file(&site.server.repo.file, run_pw),
        "overwritten in the file, not left in a free page"
    );
    let remote: Value = serde_json::from_str(
        &ocx::fossil::Repository::open(&site.server.repo.file)
            .unwrap()
            .remote_run(&record)
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(remote["user"], "build-x", "the rest of the row is kept");

    // The approval still serves its asker: a password of its own.
    assert!(site.holds("old-1", old));
    let collected = site.register("old-1.json", &[]).ok();
    assert_eq!(collected["state"], "collected");
    let password = site.creds("old-1.json")["password"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(site.holds("old-1", &password) && !site.holds("old-1", old));
    assert!(!in_file(&site.server.repo.file, &password));
    assert!(!in_file(&site.server.repo.file, &code));
}

#[test]
fn a_row_an_earlier_release_wrote_is_forgotten_when_collect_reads_it() {
    let site = Site::new();
    let old = "legacy-approved-password-0003";
    site.approved("old-2");
    site.server.repo.fossil(&["user", "password", "old-2", old]);
    let mut row = site.row("old-2");
    row["password"] = json!(old);
    site.set_config("ocx-node-key-old-2", &row);
    let collected = site.register("old-2.json", &[]).ok();
    assert_eq!(collected["state"], "collected");
    let password = site.creds("old-2.json")["password"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(password, old, "not the password the row kept");
    assert!(site.holds("old-2", &password) && !site.holds("old-2", old));
    assert!(!in_file(&site.server.repo.file, old) && !in_file(&site.server.repo.file, &password));
}

#[test]
fn twenty_wrong_tries_at_once_leave_the_right_code_refused_until_the_minute_passes() {
    let site = Site::new();
    let code = site.approved("busy");
    let tries = 20;
    let answers: Vec<(u16, Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..tries)
            .map(|i| {
                let server = &site.server;
                s.spawn(move || collect_on(server, &format!("login=busy&code={:064x}", i + 1)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (status, a) in &answers {
        assert_eq!(
            (*status, a["stopped"]["reason"].as_str()),
            (400, Some(REFUSAL)),
            "{a:#}"
        );
    }
    let (_, right) = site.collect(&format!("login=busy&code={code}"));
    assert_eq!(
        right["stopped"]["reason"], REFUSAL,
        "{tries} tries at once were counted as fewer than five: the right code was answered at once: {right:#}"
    );
    site.register("busy.json", &[]).refused();
    assert!(site.creds("busy.json").get("password").is_none());
    assert_eq!(site.row("busy")["collected"], false);

    // The minute passes (its window began a minute ago).
    let mut row = site.row("busy");
    row["window"] = json!(row["window"].as_i64().unwrap() - 61);
    site.set_config("ocx-node-key-busy", &row);
    assert_eq!(
        site.register("busy.json", &[]).ok()["state"],
        "collected",
        "a minute later the right code is answered"
    );
}

#[test]
fn a_dry_run_of_collect_tells_a_right_code_from_a_wrong_one_nowhere() {
    let site = Site::new();
    let code = site.approved("probe");
    let before = site.row("probe");
    let wrong = format!("{:064x}", 7);
    let mut seen = Vec::new();
    for c in [&code, &wrong] {
        let (status, a) = site.collect(&format!("login=probe&code={c}&dry_run=true"));
        assert_eq!(a["stopped"]["field"], "dry_run", "{a:#}");
        seen.push((status, a["stopped"].clone(), a["result"].clone()));
    }
    assert_eq!(
        seen[0], seen[1],
        "the right code and a wrong one answered alike"
    );
    let cli = site
        .server
        .repo
        .json(&["collect", "probe", "--code", &code, "--dry-run"]);
    assert_eq!(cli.refused(), "dry_run", "on the command line too");
    let after = site.row("probe");
    assert_eq!(
        (&after["tries"], &after["collected"]),
        (&before["tries"], &json!(false)),
        "nothing tried, nothing collected"
    );
    assert_eq!(
        site.register("probe.json", &[]).ok()["state"],
        "collected",
        "the asker still collects"
    );
}

#[test]
fn status_warns_while_the_repository_file_is_open_to_other_accounts() {
    use std::os::unix::fs::PermissionsExt;
    let repo = Repo::new();
    std::fs::set_permissions(&repo.file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let open = repo.json(&["status"]).ok();
    let warning = open["repository_warning"]
        .as_str()
        .unwrap_or_else(|| panic!("no warning for a file any account reads: {open:#}"));
    assert!(
        warning.contains("0644")
            && warning.contains("login cookies")
            && warning.contains("chmod 600"),
        "{warning}"
    );
    std::fs::set_permissions(&repo.file, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert!(
        repo.json(&["status"]).ok()["repository_warning"].is_string(),
        "its group's accounts read it too"
    );
    std::fs::set_permissions(&repo.file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let closed = repo.json(&["status"]).ok();
    assert!(closed.get("repository_warning").is_none(), "{closed:#}");
}
