//! Restricted runs end to end (C5, C6): a fixer whose record says it holds
//! no password, checks in only on `fixes` and posts only in its own
//! thread. Its runner, a small program of ours, tries to write past each
//! restriction from inside its sandbox, through its tools (its own `ocx
//! --mcp` in the workspace, and MCP over the socket its watcher serves) and
//! around them.

use crate::support::{Repo, Served, fossil};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The runner's own part, after the shared prelude.
pub(crate) const RUNNER: &str = r#"
def server(name):
    rpc = mcp(name)
    call = lambda tool, args: rpc("tools/call", {"name": tool, "arguments": args})["result"]
    names = lambda: [t["name"] for t in rpc("tools/list", {})["result"]["tools"]]
    return call, names

for line in sys.stdin:
    if not line.startswith("Record "):
        continue
    seen = bytearray()
    for top, dirs, files in os.walk("."):
        for name in files:
            try:
                with open(os.path.join(top, name), "rb") as f:
                    seen += f.read()
            except OSError:
                pass
    for k, v in os.environ.items():
        seen += ("%s=%s\n" % (k, v)).encode()
    seen += " ".join(sys.argv).encode()
    with open(os.path.join(out, "seen.bin"), "wb") as f:
        f.write(seen)
    local, local_names = server("ocx")
    node, node_names = server("ocx-node")
    with open("fix.txt", "w") as f:
        f.write("fixed\n")
    fossil("add", "fix.txt")
    note({"step": "commit-fixes", "said": fossil("commit", "-m", "the fix", "--branch", "fixes", "--no-warnings")})
    note({"step": "push-fixes", "result": local("ocx_push", {})})
    note({"step": "update", "said": fossil("update", "trunk")})
    with open("trunk.txt", "w") as f:
        f.write("on trunk\n")
    fossil("add", "trunk.txt")
    note({"step": "commit-trunk", "said": fossil("commit", "-m", "straight onto trunk", "--no-warnings")})
    note({"step": "push-trunk", "result": local("ocx_push", {})})
    note({"step": "post-own", "result": node("ocx_post", {"to": os.environ["OCX_RECORD"], "text": "fixed on the fixes branch"})})
    note({"step": "post-other", "result": node("ocx_post", {"to": os.environ["OCX_TEST_OTHER"], "text": "and elsewhere"})})
    note({"step": "fossil-push", "said": fossil("push")})
    note({"step": "status", "result": node("ocx_status", {})})
    note({"step": "relay", "tools": node_names(), "local": local_names()})
    note({"step": "done"})
"#;

pub(crate) fn results(out: &std::path::Path) -> Vec<Value> {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let lines = crate::support::noted(out);
        if lines.last().is_some_and(|l| l["step"] == "done") || Instant::now() > until {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(crate) fn step<'a>(all: &'a [Value], name: &str) -> &'a Value {
    all.iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no step {name}: {all:#?}"))
}

/// The result of the step `name`, asserting the tool did its work.
pub(crate) fn done_step<'a>(all: &'a [Value], name: &str) -> &'a Value {
    let done = &step(all, name)["result"];
    assert_eq!(done["isError"], false, "{done:#}");
    done
}

/// What the tool of the step `name` stopped at, asserting it did.
pub(crate) fn stopped_step<'a>(all: &'a [Value], name: &str) -> &'a Value {
    let stopped = &step(all, name)["result"];
    assert_eq!(stopped["isError"], true, "{stopped:#}");
    &stopped["structuredContent"]["stopped"]
}

/// The check-in the step `push-fixes` pushed.
pub(crate) fn pushed_fix(all: &[Value]) -> String {
    done_step(all, "push-fixes")["structuredContent"]["result"]["checkins"][0]
        .as_str()
        .unwrap()
        .to_string()
}

/// What Fossil said to the step `fossil-push`.
pub(crate) fn fossil_pushed(all: &[Value]) -> String {
    step(all, "fossil-push")["said"][1]
        .as_str()
        .unwrap()
        .to_string()
}

/// A record run by `runner` as the login of that name, held to no
/// password and its own thread, hearing `hears`, noting to `out`, with
/// the arguments `more`: its hash.
pub(crate) fn held_record(
    repo: &Repo,
    runner: &str,
    objective: &str,
    hears: &str,
    out: &std::path::Path,
    more: &[&str],
) -> String {
    let mut args = vec![
        "create",
        "--runner",
        runner,
        "--run-user",
        runner,
        "--objective",
        objective,
        "--hears",
        hears,
        "--no-password",
        "--own-thread",
        "--wall",
        "5m",
        "--read-write",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(more);
    repo.json(&args).ok_str("record")
}

/// A thread the fixer's record is not: its root's hash.
pub(crate) fn another_thread(repo: &Repo) -> String {
    repo.json(&[
        "post",
        "--title",
        "Another thread",
        "--text",
        "not the fixer's",
    ])
    .ok_str("hash")
}

#[test]
fn a_fixer_holds_no_password_checks_in_only_on_its_branch_and_posts_only_in_its_thread() {
    let repo = Repo::new();
    repo.user("stone", "a").user("reviewer", "v4");
    let (runner, out) = crate::support::runner_script(
        &repo,
        &format!("{}{RUNNER}", crate::support::PY_RUNNER_PRELUDE),
    );
    let other = another_thread(&repo);
    let block = json!({"command": [runner], "input": "lines",
        "env": {"OCX_TEST_OUT": out, "OCX_TEST_FOSSIL": fossil(), "OCX_TEST_OTHER": other}});
    crate::support::runner_page(&repo, "fixer", &block);
    repo.commit_as("admin", "README", "start\n", None);
    let s = Served::on(repo).start();
    let status = s.repo.json(&["status"]).ok();
    assert_eq!(
        status["restrictions_enforced"],
        json!(["no_password", "branch", "own_thread", "stage", "review"])
    );
    let record = held_record(
        &s.repo,
        "fixer",
        "Fix it on the fixes branch",
        "stone reviewer",
        &out,
        &["--branch", "fixes", "--new-branch"],
    );
    let all = results(&out);
    let password = std::fs::read_to_string(
        ocx::node::config::NodeConfig::run_dir(&s.repo.node_root(), &record).join("password"),
    )
    .unwrap();
    let seen = std::fs::read(out.join("seen.bin")).unwrap();
    assert!(seen.len() > 1000, "the runner read its workspace");
    assert!(
        !seen
            .windows(password.len())
            .any(|w| w == password.as_bytes()),
        "no password in the workspace, environment or arguments"
    );

    let fix = pushed_fix(&all);
    assert_eq!(
        s.repo.sender(&fix).as_deref(),
        Some("fixer"),
        "the fix reached the served repository, sent by the run's user"
    );
    let on = s.repo.json(&["verdicts", "--checkin", &fix]).ok();
    assert_eq!(on["branch"], "fixes");

    let why = stopped_step(&all, "push-trunk")["reason"].as_str().unwrap();
    assert!(
        why.contains("is on trunk") && why.contains("only on fixes"),
        "{why}"
    );
    let db = rusqlite::Connection::open(&s.repo.file).unwrap();
    let on_trunk: i64 = db
        .query_row(
            "SELECT count(*) FROM event WHERE type='ci' AND comment LIKE '%straight onto trunk%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(on_trunk, 0, "nothing of the refused push arrived");

    let own = done_step(&all, "post-own");
    let post = own["structuredContent"]["result"]["hash"].as_str().unwrap();
    assert_eq!(s.repo.sender(post).as_deref(), Some("fixer"));
    assert_eq!(stopped_step(&all, "post-other")["field"], "to");

    let direct = fossil_pushed(&all);
    assert!(
        direct.contains("Error"),
        "the server refused a push with no password: {direct}"
    );
    let status = &step(&all, "status")["result"]["structuredContent"]["result"];
    assert_eq!(status["login"], "fixer");
    assert_eq!(
        status["restrictions_enforced"],
        json!(["no_password", "branch", "own_thread", "stage", "review"])
    );
    let relayed = step(&all, "relay")["tools"].as_array().unwrap();
    assert!(
        relayed.iter().any(|t| t == "ocx_push") && relayed.iter().any(|t| t == "ocx_post"),
        "ocx-mcp --connect relays the node's tools: {relayed:?}"
    );
    for workspace_tool in [
        "ocx_test",
        "ocx_save",
        "ocx_read",
        "ocx_edit",
        "ocx_context",
        "ocx_find",
    ] {
        assert!(
            !relayed.iter().any(|t| t == workspace_tool),
            "the node socket does not offer {workspace_tool}: {relayed:?}"
        );
    }
    let local = step(&all, "relay")["local"].as_array().unwrap();
    assert!(
        local.iter().any(|t| t == "ocx_test") && local.iter().any(|t| t == "ocx_save"),
        "the run's own ocx --mcp offers the workspace tools: {local:?}"
    );
    let root = s.repo.node_root();
    let clone =
        ocx::node::config::NodeConfig::run_dir(&root, &record).join("disk/ws/.clone.fossil");
    assert!(
        !ocx::fossil::Repository::open(&clone)
            .unwrap()
            .remembers_password()
            .unwrap(),
        "the clone remembers no password"
    );
}

const BREAKER: &str = r#"#!/usr/bin/python3
import sys, os
for line in sys.stdin:
    if line.startswith("Record "):
        os.remove(os.environ["OCX_MCP_SOCKET"])
"#;

#[test]
fn a_run_whose_tool_socket_goes_is_answered_unenforced() {
    let repo = Repo::new();
    let dir = repo.dir.path().to_path_buf();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let prog = dir.join("prog");
    std::fs::create_dir_all(&prog).unwrap();
    let runner = prog.join("breaker.py");
    std::fs::write(&runner, BREAKER).unwrap();
    std::fs::set_permissions(&runner, std::fs::Permissions::from_mode(0o755)).unwrap();
    let page = dir.join("page.md");
    std::fs::write(
        &page,
        format!(
            "```json\n{}\n```\n",
            json!({"command": [runner], "input": "lines"})
        ),
    )
    .unwrap();
    repo.fossil(&[
        "wiki",
        "create",
        "sandbox/breaker",
        page.to_str().unwrap(),
        "--mimetype",
        "text/x-markdown",
    ]);
    let s = Served::on(repo).start();
    let record = s
        .repo
        .json(&[
            "create",
            "--runner",
            "breaker",
            "--objective",
            "Break out",
            "--no-password",
            "--wall",
            "5m",
        ])
        .ok_str("record");
    let until = Instant::now() + Duration::from_secs(30);
    let mut answer = None;
    while answer.is_none() && Instant::now() < until {
        let thread = s.repo.json(&["thread", "--of", &record]).ok();
        answer = thread["posts"].as_array().unwrap().iter().find_map(|p| {
            let text = p["text"].as_str().unwrap();
            match ocx::protocol::message::read(text.as_bytes()) {
                ocx::protocol::message::Reading::Message { message }
                    if message["kind"] == "response" =>
                {
                    Some(message)
                }
                _ => None,
            }
        });
        std::thread::sleep(Duration::from_millis(100));
    }
    let answer = answer.expect("answered");
    assert_eq!(answer["outcome"], "unenforced");
    assert!(
        answer["note"]
            .as_str()
            .unwrap()
            .starts_with("restrict.no_password: the run's tool socket is gone"),
        "{answer:?}"
    );
}
