//! OCX's own releases, with a small project of its own standing where OCX
//! would (its "page" a shell script Fossil runs as a CGI): staged from a
//! check-in of a real Fossil repository in a sandbox behind its gate,
//! served by a real `fossil server` as `/ext/ocx-cgi-next`, accepted as
//! `/ext/ocx-cgi`, rolled back; a failing gate refused with its last lines,
//! a build tampered with after staging refused mid-accept with the current
//! one still serving; the real page saying which release serves it; and a
//! run whose record allows `stage` staging through its node's tools.

use crate::cgi::{Ext, served};
use crate::support::{PY_RUNNER_PRELUDE, Repo, Served, ServedNode, fossil, ocx_bin};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const BUILD: &str = "mkdir -p out && cp page.sh out/page && chmod 755 out/page\n";
const GATE: &str =
    "echo 'gate: checking the page'\ngrep -q Content-Type page.sh && echo 'gate: passed'\n";

fn page(words: &str) -> String {
    format!("#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n{words}\\n'\n")
}

/// A release root in a directory of its own, its `release.json` naming
/// the project's build and gate, and `extroot` as Fossil's extroot.
fn release_root(extroot: &Path, config: Value) -> tempfile::TempDir {
    let root = tempfile::Builder::new()
        .prefix("ocx-release-")
        .tempdir()
        .unwrap();
    let mut config = config;
    config["extroot"] = json!(extroot);
    std::fs::write(root.path().join("release.json"), config.to_string()).unwrap();
    root
}

fn shell_project() -> Value {
    json!({"build": ["/bin/sh", "build.sh"], "gate": ["/bin/sh", "gate.sh"],
           "artifact": "out/page", "wall": "2m"})
}

/// What `GET path` answers: its status and body.
fn get(server: &ServedNode<&Repo>, path: &str) -> (u16, String) {
    let (status, _, body) = server.request("GET", path, &[], "");
    (status, body)
}

/// Asserts `path` is served, showing `words` (inside Fossil's skin).
fn shows(server: &ServedNode<&Repo>, path: &str, words: &str) {
    let (status, body) = get(server, path);
    assert_eq!(status, 200, "{path}: {body}");
    assert!(
        body.contains(&format!("{words}\n")),
        "{path} shows {words:?}: {body}"
    );
}

fn link(root: &Path, name: &str) -> Option<PathBuf> {
    std::fs::read_link(root.join(name)).ok()
}

#[test]
fn a_release_is_staged_behind_its_gate_accepted_and_rolled_back() {
    let repo = Repo::new();
    repo.commit_as("admin", "build.sh", BUILD, None);
    repo.commit_as("admin", "gate.sh", GATE, None);
    let one = repo.commit_as("admin", "page.sh", &page("version one"), None);
    let two = repo.commit_as("admin", "page.sh", &page("the second version"), None);
    let ext = Ext {
        dir: tempfile::tempdir().unwrap(),
    };
    let root = release_root(ext.dir.path(), shell_project());
    let r = root.path().to_str().unwrap();
    let server = served(&repo, &ext);

    let dry = repo
        .json(&["stage", &one[..12], "--root", r, "--dry-run"])
        .ok();
    assert_eq!(dry["checkin"], one.as_str());
    assert!(dry.get("built").is_none(), "{dry:#}");
    assert!(
        !root.path().join("staged").exists(),
        "a dry run builds nothing"
    );

    let staged = repo.json(&["stage", &one[..12], "--root", r]).ok();
    assert_eq!(staged["built"]["checkin"], one.as_str());
    let sha = staged["built"]["inventory"]["ocx"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(sha.len(), 64);
    let log = std::fs::read_to_string(staged["gate_log"].as_str().unwrap()).unwrap();
    assert!(
        log.contains("gate: checking the page") && log.contains("== the gate passed"),
        "{log}"
    );
    shows(&server, "/ext/ocx-cgi-next", "version one");
    assert_eq!(
        get(&server, "/ext/ocx-cgi").0,
        404,
        "nothing is current yet"
    );

    let accepted = repo.json(&["accept", "--root", r]).ok();
    assert_eq!(accepted["current"]["checkin"], one.as_str());
    shows(&server, "/ext/ocx-cgi", "version one");
    assert_eq!(get(&server, "/ext/ocx-cgi-next").0, 404, "next was taken");

    // Later stages need no root: the repository's configuration names it.
    repo.json(&["stage", "trunk"]).ok();
    shows(&server, "/ext/ocx-cgi-next", "the second version");
    shows(&server, "/ext/ocx-cgi", "version one");
    let dry = repo.json(&["accept", "--dry-run"]).ok();
    assert_eq!(dry["current"]["checkin"], two.as_str());
    shows(&server, "/ext/ocx-cgi", "version one");
    let accepted = repo.json(&["accept"]).ok();
    assert_eq!(accepted["current"]["checkin"], two.as_str());
    assert_eq!(accepted["previous"]["checkin"], one.as_str());
    shows(&server, "/ext/ocx-cgi", "the second version");

    let listed = repo.json(&["release"]).ok();
    let is = |which: &str| -> Value {
        listed["releases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["is"] == which)
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(is("current")["checkin"], two.as_str());
    assert_eq!(is("previous")["checkin"], one.as_str());
    assert_eq!(is("previous")["inventory"]["ocx"], sha.as_str());
    assert_eq!(is("current")["intact"], true);

    let rolled = repo.json(&["rollback"]).ok();
    assert_eq!(rolled["current"]["checkin"], one.as_str());
    shows(&server, "/ext/ocx-cgi", "version one");
    let listed = repo.json(&["release"]).ok();
    assert_eq!(listed["releases"][0]["is"], "current");
    assert_eq!(listed["releases"][0]["checkin"], one.as_str());
    assert_eq!(listed["releases"][1]["checkin"], two.as_str());

    // A check-in in use is never built over.
    let r2 = repo.json(&["stage", &two]);
    assert_eq!(r2.refused(), "checkin");

    // A gate that fails: refused with its last lines, nothing offered.
    let noisy = "for i in $(seq 1 40); do echo \"example $i ok\"; done\necho 'FAILED: 2 of 42 examples'\nexit 1\n";
    let three = repo.commit_as("admin", "gate.sh", noisy, None);
    let failed = repo.json(&["stage", &three]);
    let a = failed.answer();
    assert_eq!(a["ok"], false, "{a:#}");
    assert_eq!(a["stopped"]["field"], "checkin", "{a:#}");
    let why = a["stopped"]["reason"].as_str().unwrap();
    assert!(
        why.contains("the gate of") && why.contains("exited 1"),
        "{why}"
    );
    assert!(
        why.contains("FAILED: 2 of 42 examples") && why.contains("example 40 ok"),
        "{why}"
    );
    assert!(!why.contains("example 5 ok"), "only the last lines: {why}");
    let full = std::fs::read_to_string(
        root.path()
            .join("staged")
            .join(&three[..16])
            .join("gate.log"),
    )
    .unwrap();
    assert!(
        full.contains("example 1 ok"),
        "the log keeps all it printed"
    );
    assert!(
        link(root.path(), "next").is_none(),
        "a failed gate offers nothing"
    );
    assert_eq!(get(&server, "/ext/ocx-cgi-next").0, 404);
    shows(&server, "/ext/ocx-cgi", "version one");

    // A staged build changed after its gate passed: refused mid-accept,
    // the current one still serving, no link moved.
    repo.commit_as("admin", "gate.sh", GATE, None);
    let four = repo.commit_as("admin", "page.sh", &page("version four"), None);
    repo.json(&["stage", &four]).ok();
    shows(&server, "/ext/ocx-cgi-next", "version four");
    let program = root.path().join("staged").join(&four[..16]).join("bin/ocx");
    std::fs::write(&program, page("not what the gate passed")).unwrap();
    let (current, previous) = (link(root.path(), "current"), link(root.path(), "previous"));
    let tampered = repo.json(&["accept"]);
    assert!(
        tampered.answer()["stopped"]["reason"]
            .as_str()
            .unwrap()
            .contains("no longer matches its inventory")
    );
    shows(&server, "/ext/ocx-cgi", "version one");
    assert_eq!(link(root.path(), "current"), current);
    assert_eq!(link(root.path(), "previous"), previous);

    // One at a time: while another holds the root's lock, each is refused.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(root.path().join("lock"))
        .unwrap();
    let held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).unwrap();
    let busy = repo.json(&["rollback"]);
    assert!(
        busy.answer()["stopped"]["reason"]
            .as_str()
            .unwrap()
            .contains("lock"),
        "{}",
        busy.stdout
    );
    drop(held);
    drop(server);
}

#[test]
fn a_release_root_others_may_change_or_an_escaping_artifact_is_refused() {
    let repo = Repo::new();
    repo.commit_as(
        "admin",
        "build.sh",
        "mkdir -p out && ln -s /etc/passwd out/page\n",
        None,
    );
    let one = repo.commit_as("admin", "gate.sh", "true\n", None);
    let ext = tempfile::tempdir().unwrap();
    let root = release_root(ext.path(), shell_project());
    let r = root.path().to_str().unwrap();
    let config = root.path().join("release.json");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(repo.json(&["stage", &one, "--root", r]).refused(), "root");
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let linked = repo.json(&["stage", &one, "--root", r]);
    assert_eq!(linked.refused(), "root");
    assert!(
        linked.answer()["stopped"]["reason"]
            .as_str()
            .unwrap()
            .contains("symbolic link")
    );
    assert!(link(root.path(), "next").is_none());
    assert_eq!(
        repo.json(&["stage", "no-such-branch", "--root", r])
            .refused(),
        "checkin"
    );
    assert_eq!(repo.json(&["accept", "--root", r]).refused(), "");
}

#[test]
fn a_release_root_given_as_a_link_or_one_others_may_change_is_refused_and_nothing_is_staged() {
    let repo = Repo::new();
    repo.commit_as("admin", "build.sh", BUILD, None);
    repo.commit_as("admin", "gate.sh", GATE, None);
    let one = repo.commit_as("admin", "page.sh", &page("one"), None);
    let ext = tempfile::tempdir().unwrap();
    let root = release_root(ext.path(), shell_project());
    let refused = |given: &Path, says: &str| {
        let run = repo.json(&["stage", &one, "--root", given.to_str().unwrap()]);
        assert_eq!(run.refused(), "root", "{given:?}");
        let reason = run.answer()["stopped"]["reason"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(reason.contains(says), "{reason}");
    };
    // A link to the root: whoever may change it may point it elsewhere.
    let elsewhere = tempfile::tempdir().unwrap();
    let via = elsewhere.path().join("release");
    std::os::unix::fs::symlink(root.path(), &via).unwrap();
    refused(&via, "symbolic link");
    // A root others may write: they could swap the links that say what runs.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    refused(root.path(), "others may change it");
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    // release.json a link to a file of the caller's own elsewhere.
    let config = root.path().join("release.json");
    let moved = elsewhere.path().join("release.json");
    std::fs::rename(&config, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &config).unwrap();
    refused(root.path(), "symbolic link");
    assert!(!root.path().join("staged").exists(), "nothing was staged");
    assert!(link(root.path(), "next").is_none());
    std::fs::remove_file(&config).unwrap();
    std::fs::rename(&moved, &config).unwrap();
    repo.json(&["stage", &one, "--root", root.path().to_str().unwrap()])
        .ok();
}

#[test]
fn the_page_says_which_release_serves_it() {
    let repo = Repo::new();
    let one = repo.commit_as("admin", "README", "one\n", None);
    let ext = Ext {
        dir: tempfile::tempdir().unwrap(),
    };
    std::fs::write(
        ext.dir.path().join(".ocx-cgi.json"),
        json!({"fossil": fossil()}).to_string(),
    )
    .unwrap();
    // The build leaves the page's hand-off program beside OCX, as cargo
    // does, so the release serves through its own page server.
    let program = ocx_bin().canonicalize().unwrap();
    let handoff = program.with_file_name("ocx-cgi");
    let root = release_root(
        ext.dir.path(),
        json!({"build": ["/bin/sh", "-c", "mkdir -p out && cp \"$0\" out/ocx && cp \"$1\" out/ocx-cgi", program, handoff],
               "gate": ["/bin/sh", "-c", "echo the gate passes"],
               "artifact": "out/ocx", "read_only": [program, handoff]}),
    );
    let r = root.path().to_str().unwrap();
    repo.json(&["stage", &one, "--root", r]).ok();
    repo.json(&["accept"]).ok();
    let two = repo.commit_as("admin", "README", "two\n", None);
    repo.json(&["stage", &two]).ok();
    let server = served(&repo, &ext);
    for name in ["ocx-cgi", "ocx-cgi-next"] {
        let link = std::fs::read_link(ext.dir.path().join(name)).unwrap();
        assert!(
            link.ends_with("bin/ocx-cgi"),
            "{name} leads to {}",
            link.display()
        );
    }
    let _servers = PageServers(
        ["current", "next"].map(|l| root.path().join(l).join("bin/ocx").canonicalize().unwrap()),
    );
    let (status, body) = get(&server, "/ext/ocx-cgi");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(&format!(
            "by the release built from check-in <code>{}</code>",
            &one[..10]
        )),
        "{body}"
    );
    let (_, next) = get(&server, "/ext/ocx-cgi-next");
    assert!(
        next.contains("Served as <code>ocx-cgi-next</code>")
            && next.contains(&two[..10])
            && next.contains("staged as next"),
        "{next}"
    );
    let (status, body) = get(&server, "/ext/ocx-cgi/stage?checkin=trunk");
    assert_eq!(status, 403, "a stage outlasts a page's request: {body}");
    assert!(body.contains("never on the web page"), "{body}");
    assert!(!body.contains("id=\"tool-stage\""));
    assert!(
        next.contains("href=\"/ext/ocx-cgi-next/"),
        "its links stay on the next page"
    );
}

/// The page servers of these programs, ended when dropped.
struct PageServers<const N: usize>([PathBuf; N]);

impl<const N: usize> Drop for PageServers<N> {
    fn drop(&mut self) {
        self.0
            .iter()
            .for_each(|ocx| crate::page_server::end_page_server(ocx));
    }
}

const STAGING_RUNNER: &str = r#"
for line in sys.stdin:
    if not line.startswith("Record "):
        continue
    rpc = mcp("ocx-node")
    call = lambda tool, args: rpc("tools/call", {"name": tool, "arguments": args})["result"]
    note({"step": "stage", "result": call("ocx_stage", {"checkin": os.environ["OCX_TEST_CHECKIN"]})})
    note({"step": "done"})
"#;

/// The runner page `stager`, whose program ([`STAGING_RUNNER`]) stages
/// `checkin` through its node's tools; the directory it writes to.
fn stager(repo: &Repo, checkin: &str) -> PathBuf {
    let (runner, out) =
        crate::support::runner_script(repo, &format!("{PY_RUNNER_PRELUDE}{STAGING_RUNNER}"));
    let block = json!({"command": [runner], "input": "lines",
        "env": {"OCX_TEST_OUT": out, "OCX_TEST_FOSSIL": fossil(), "OCX_TEST_CHECKIN": checkin}});
    crate::support::runner_page(repo, "stager", &block);
    out
}

#[test]
fn a_run_whose_record_allows_it_stages_and_no_other_sender_may_allow_it() {
    let repo = Repo::new();
    repo.user("mallory", "aR");
    repo.commit_as("admin", "build.sh", BUILD, None);
    repo.commit_as("admin", "gate.sh", GATE, None);
    let one = repo.commit_as("admin", "page.sh", &page("staged by a run"), None);
    let out = stager(&repo, &one);
    let ext = tempfile::tempdir().unwrap();
    let root = release_root(ext.path(), shell_project());
    let s = Served::on(repo).start();
    let status = s.repo.json(&["status"]).ok();
    assert_eq!(
        status["restrictions_enforced"],
        json!(["no_password", "branch", "own_thread", "stage", "review"])
    );
    // An administrator's first stage names the root in the repository's
    // configuration, the only root a run may stage into.
    s.repo
        .json(&["stage", "trunk", "--root", root.path().to_str().unwrap()])
        .ok();
    std::fs::remove_file(root.path().join("next")).unwrap();
    let create = |user: &str, run_user: &str, stage: bool| {
        let mut args = vec![
            "create",
            "--runner",
            "stager",
            "--run-user",
            run_user,
            "--objective",
            "Stage it",
            "--no-password",
            "--wall",
            "5m",
            "--read-write",
            out.to_str().unwrap(),
            "--user",
            user,
        ];
        if stage {
            args.push("--stage");
        }
        s.repo.json(&args).ok_str("record")
    };

    create("admin", "plain", false);
    let all = crate::restricted::results(&out);
    let plain = &all
        .iter()
        .find(|s| s["step"] == "stage")
        .expect("the run tried")["result"];
    assert_eq!(
        plain["isError"], true,
        "a run its record does not allow may not stage: {plain:#}"
    );
    assert!(
        plain["structuredContent"]["stopped"]["reason"]
            .as_str()
            .unwrap()
            .contains("needs capability s"),
        "{plain:#}"
    );
    assert!(link(root.path(), "next").is_none());
    std::fs::remove_file(out.join("results")).unwrap();

    let refused = create("mallory", "stager-m", true);
    let (outcome, note) = crate::support::response_to(&s.repo, &refused);
    assert_eq!(outcome, "refused", "{note}");
    assert!(note.starts_with("restrict.stage:"), "{note}");

    create("admin", "stager", true);
    let all = crate::restricted::results(&out);
    let staged = crate::restricted::done_step(&all, "stage");
    assert_eq!(
        staged["structuredContent"]["result"]["built"]["checkin"],
        one.as_str()
    );
    assert!(
        link(root.path(), "next").is_some(),
        "the run's build is offered as next"
    );
}

#[test]
fn a_runs_stage_has_no_more_network_than_its_record_gives_the_run() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let reached = || {
        let mut n = 0;
        while listener.accept().is_ok() {
            n += 1;
        }
        n
    };
    let repo = Repo::new();
    // The check-in's own build reaches for the host's network: a run could
    // have written it.
    let build = format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3)\" && echo 'build: reached' || echo 'build: unreached'\n{BUILD}"
    );
    repo.commit_as("admin", "build.sh", &build, None);
    repo.commit_as("admin", "gate.sh", GATE, None);
    let one = repo.commit_as("admin", "page.sh", &page("staged by a run"), None);
    let out = stager(&repo, &one);
    let ext = tempfile::tempdir().unwrap();
    let mut project = shell_project();
    project["network"] = json!(true);
    let root = release_root(ext.path(), project);
    let s = Served::on(repo).start();
    // The administrator's stage has release.json's network: the control.
    s.repo
        .json(&["stage", &one, "--root", root.path().to_str().unwrap()])
        .ok();
    assert_eq!(
        reached(),
        1,
        "an administrator's build shares the host's network"
    );
    std::fs::remove_file(root.path().join("next")).unwrap();
    std::fs::remove_dir_all(root.path().join("staged")).unwrap();

    s.repo
        .json(&[
            "create",
            "--runner",
            "stager",
            "--run-user",
            "stager",
            "--objective",
            "Stage it",
            "--no-password",
            "--stage",
            "--network",
            "false",
            "--wall",
            "5m",
            "--read-write",
            out.to_str().unwrap(),
        ])
        .ok();
    let all = crate::restricted::results(&out);
    crate::restricted::done_step(&all, "stage");
    assert_eq!(
        reached(),
        0,
        "a run without the network staged a build that reached it"
    );
    let log = std::fs::read_to_string(root.path().join("staged").join(&one[..16]).join("gate.log"))
        .unwrap();
    assert!(log.contains("build: unreached"), "{log}");
}

/// Where the quick start's rustup (as root) leaves cargo.
const ROOTS_CARGO: &str = "/root/.cargo/bin/cargo";

/// The `release.json` docs/operating.md shows, under "Releases of OCX's own page".
fn documented_release_json() -> Value {
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operating.md"))
            .unwrap();
    let section = docs
        .split("## Releases of OCX's own page")
        .nth(1)
        .expect("the docs' section on releases");
    let block = section
        .split("```json\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the docs' release.json");
    serde_json::from_str(block).unwrap_or_else(|e| panic!("the docs' release.json: {e}\n{block}"))
}

/// Runs root's own cargo on the host in `dir`, with only the variables
/// the docs' `release.json` gives the build (and a `HOME` above `dir`).
fn roots_cargo(dir: &Path, env: &Value, args: &[&str]) {
    let mut c = std::process::Command::new(ROOTS_CARGO);
    c.args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", dir.parent().unwrap());
    for (k, v) in env.as_object().unwrap() {
        c.env(k, v.as_str().unwrap());
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "cargo {args:?}: {}",
        crate::support::said(&out)
    );
}

const HELLO: &str = "fn greeting() -> &'static str {
    \"hello from a staged build\"
}

fn main() {
    println!(\"{}\", greeting());
}

#[cfg(test)]
mod tests {
    #[test]
    fn it_greets() {
        assert_eq!(super::greeting(), \"hello from a staged build\");
    }
}
";

#[test]
fn the_documented_release_json_stages_a_crate_with_roots_own_cargo() {
    if !nix::unistd::geteuid().is_root() || !Path::new(ROOTS_CARGO).exists() {
        eprintln!(
            "NOT CHECKED ON THIS HOST, it needs root and rustup's cargo at {ROOTS_CARGO}, as the quick start leaves them"
        );
        return;
    }
    let mut config = documented_release_json();
    assert_eq!(config["build"][0], ROOTS_CARGO);
    assert_eq!(config["gate"][0], ROOTS_CARGO);
    config["artifact"] = json!("target/release/hello");

    // A tiny crate, made by root's cargo and committed.
    let home = tempfile::tempdir().unwrap();
    let made = home.path().join("hello");
    std::fs::create_dir(&made).unwrap();
    roots_cargo(
        &made,
        &config["env"],
        &["init", "--name", "hello", "--vcs", "none", "--offline"],
    );
    std::fs::write(made.join("src/main.rs"), HELLO).unwrap();
    roots_cargo(&made, &config["env"], &["generate-lockfile", "--offline"]);
    let repo = Repo::new();
    let mut head = String::new();
    for file in ["Cargo.toml", "Cargo.lock", "src/main.rs"] {
        let text = std::fs::read_to_string(made.join(file)).unwrap();
        head = repo.commit_as("admin", file, &text, None);
    }

    let ext = tempfile::tempdir().unwrap();
    let root = release_root(ext.path(), config);
    let staged = repo
        .json(&["stage", "trunk", "--root", root.path().to_str().unwrap()])
        .ok();
    assert_eq!(staged["built"]["checkin"], head.as_str());
    let log = std::fs::read_to_string(staged["gate_log"].as_str().unwrap()).unwrap();
    assert!(
        log.contains("test tests::it_greets ... ok") && log.contains("== the gate passed"),
        "the gate ran the crate's test: {log}"
    );
    let program = Path::new(staged["staged"].as_str().unwrap()).join("bin/ocx");
    let ran = std::process::Command::new(&program).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout),
        "hello from a staged build\n"
    );
    assert_eq!(
        link(root.path(), "next").map(|l| root.path().join(l)),
        Some(PathBuf::from(staged["staged"].as_str().unwrap())),
        "the build is offered as next"
    );
    assert!(
        std::fs::read_link(ext.path().join("ocx-cgi-next")).is_ok(),
        "the extroot leads to it"
    );
}

#[test]
fn a_read_only_path_closed_to_the_build_itself_or_an_env_ocx_sets_is_refused_naming_root() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("NOT CHECKED ON THIS HOST, only root builds as a uid of its own");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let mode =
        |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    // A directory closed to others, as root's home is, holding one
    // directory all may read and one closed itself.
    let closed = tempfile::tempdir().unwrap();
    let (open, shut) = (closed.path().join("open"), closed.path().join("shut"));
    for (dir, m) in [(&open, 0o755), (&shut, 0o700)] {
        std::fs::create_dir(dir).unwrap();
        std::fs::write(dir.join("words"), "read through a closed directory\n").unwrap();
        mode(dir, m);
    }
    mode(closed.path(), 0o700);
    let repo = Repo::new();
    let one = repo.commit_as("admin", "README", "one\n", None);
    let ext = tempfile::tempdir().unwrap();
    let reading = |dir: &Path| {
        let words = format!("mkdir -p out && cp {}/words out/page", dir.display());
        json!({"build": ["/bin/sh", "-c", words], "gate": ["/bin/cat", "out/page"],
               "artifact": "out/page", "wall": "2m", "read_only": [dir]})
    };

    let root = release_root(ext.path(), reading(&open));
    let r = root.path().to_str().unwrap();
    let staged = repo.json(&["stage", &one, "--root", r]).ok();
    let log = std::fs::read_to_string(staged["gate_log"].as_str().unwrap()).unwrap();
    assert!(log.contains("read through a closed directory"), "{log}");

    let root = release_root(ext.path(), reading(&shut));
    let r = root.path().to_str().unwrap();
    let refused = repo.json(&["stage", &one, "--root", r]);
    assert_eq!(refused.refused(), "root");
    let why = refused.answer()["stopped"]["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        why.contains(&format!(
            "sandbox.read_only: {} is not readable by the run account",
            shut.display()
        )),
        "{why}"
    );
    assert!(link(root.path(), "next").is_none(), "nothing is offered");

    for (env, named) in [
        (json!({"PATH": "/srv/bin:/usr/bin"}), "\"PATH\""),
        (json!({"HOME": "/root"}), "\"HOME\""),
        (json!({"CARGO-HOME": "/root/.cargo"}), "\"CARGO-HOME\""),
        (json!({"9LIVES": "x"}), "\"9LIVES\""),
    ] {
        let mut config = reading(&open);
        config["env"] = env;
        let root = release_root(ext.path(), config);
        let refused = repo.json(&["stage", &one, "--root", root.path().to_str().unwrap()]);
        assert_eq!(refused.refused(), "root");
        let why = refused.answer()["stopped"]["reason"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(why.contains(&format!("env names {named}")), "{why}");
    }
}
