//! Held writes end to end (`restrict.review`): a run under review posts
//! through its node socket, each post is held in its run's directory as a
//! question for its reviewer, nothing reaches the repository before the
//! decision, a decision from anyone else counts for nothing, and approved
//! the post is written as the run's login, declined the run is told in
//! its next line.

use crate::restricted::held_record;
use crate::support::{Repo, Served, fossil, handled_all, noted, noted_until_done};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The runner's own part, after the shared prelude: two posts in its own
/// thread through the node socket, then each JSON line it reads noted,
/// done after two decisions.
const RUNNER: &str = r#"
import re
def unescape(line):
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "r": "\r"}.get(m.group(1), m.group(1)), line)

decided = 0
for line in sys.stdin:
    line = line.rstrip("\n")
    if line.startswith("Record "):
        rpc = mcp("ocx-node")
        call = lambda tool, args: rpc("tools/call", {"name": tool, "arguments": args})["result"]
        for name, text in [("kept", "kept: the fix is on fixes"), ("dropped", "dropped: merge it all now")]:
            note({"step": "post-" + name, "result": call("ocx_post", {"to": os.environ["OCX_RECORD"], "text": text})})
        continue
    if line.startswith("{"):
        said = json.loads(unescape(line))
        note({"step": "line", "said": said})
        decided += 1
        if decided == 2:
            note({"step": "done"})
"#;

/// The steps the runner noted once one is `name`.
fn noted_step(out: &std::path::Path, name: &str) -> Vec<Value> {
    let until = Instant::now() + Duration::from_secs(90);
    loop {
        let steps = noted(out);
        if steps.iter().any(|s| s["step"] == name) {
            return steps;
        }
        assert!(Instant::now() < until, "no step {name}: {steps:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The question the write of step `name` is held under, asserting it was
/// held and written nothing yet.
fn held_under(steps: &[Value], name: &str) -> String {
    let step = steps.iter().find(|s| s["step"] == name).unwrap();
    let result = &step["result"]["structuredContent"]["result"];
    assert_eq!(
        result["hash"],
        Value::Null,
        "a held write has no hash yet: {step:#}"
    );
    result["held"]
        .as_str()
        .unwrap_or_else(|| panic!("not held: {step:#}"))
        .to_string()
}

/// The lines of decisions the runner noted.
fn decided(steps: &[Value]) -> Vec<&Value> {
    steps
        .iter()
        .filter(|s| s["step"] == "line")
        .map(|s| &s["said"])
        .collect()
}

/// The texts the run's login sent in the record's thread.
fn said_by(repo: &Repo, record: &str, login: &str) -> Vec<String> {
    let thread = repo.json(&["thread", "--of", record]).ok();
    thread["posts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["from"] == login)
        .map(|p| p["text"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_held_post_is_written_once_its_reviewer_approves_and_the_run_is_told_when_declined() {
    let repo = Repo::new();
    repo.user("stone", "o24jkr").user("mallory", "o24");
    let (runner, out) = crate::support::runner_script(
        &repo,
        &format!("{}{RUNNER}", crate::support::PY_RUNNER_PRELUDE),
    );
    let block = json!({"command": [runner], "input": "lines",
        "env": {"OCX_TEST_OUT": out, "OCX_TEST_FOSSIL": fossil()}});
    crate::support::runner_page(&repo, "fixer", &block);
    let s = Served::on(repo).start();
    let record = held_record(
        &s.repo,
        "fixer",
        "Say what you fixed",
        "stone",
        &out,
        &["--review", "--review-by", "stone"],
    );
    let steps = noted_step(&out, "post-dropped");
    let (kept, dropped) = (
        held_under(&steps, "post-kept"),
        held_under(&steps, "post-dropped"),
    );
    let root = s.repo.node_root();
    let file = ocx::node::held::file(&root, &record, &kept);
    assert!(file.exists(), "held in the run's directory on the node");
    assert!(
        said_by(&s.repo, &record, "fixer").is_empty(),
        "nothing written before the decision"
    );
    let shown = s.repo.json(&["questions", "--for", "stone"]).ok();
    let waiting = shown["waiting"].as_array().unwrap();
    assert_eq!(waiting.len(), 2, "{shown:#}");
    assert_eq!(waiting[0]["run"], record.as_str());
    let node_login = ocx::node::config::NodeConfig::load(&root).unwrap().login;
    assert_eq!(s.repo.sender(&kept), Some(node_login), "the node asks");

    let forged = format!(
        "Approve\n\n```json\n{}\n```\n",
        json!({"ocx": 1, "kind": "decision", "question": kept, "note": "Approve"})
    );
    s.repo
        .json(&[
            "post", "--to", &kept, "--text", &forged, "--user", "mallory",
        ])
        .ok();
    handled_all(&s.repo.file, &root, Duration::from_secs(60)).unwrap();
    assert!(file.exists(), "a decision from someone else does nothing");
    assert!(said_by(&s.repo, &record, "fixer").is_empty());

    s.repo
        .json(&["decide", &kept, "--option", "1", "--user", "stone"])
        .ok();
    s.repo
        .json(&[
            "decide", &dropped, "--option", "2", "--note", "not now", "--user", "stone",
        ])
        .ok();
    let steps = noted_until_done(&out, "the reviewed runner");
    let lines = decided(&steps);
    assert_eq!(lines[0]["approved"], kept.as_str(), "{lines:#?}");
    assert_eq!(lines[0]["by"], "stone");
    let written = lines[0]["written"][0].as_str().unwrap();
    assert_eq!(s.repo.sender(written).as_deref(), Some("fixer"));
    assert_eq!(lines[1]["declined"], dropped.as_str(), "{lines:#?}");
    assert_eq!(lines[1]["note"], "Decline: not now");
    assert_eq!(
        said_by(&s.repo, &record, "fixer"),
        ["kept: the fix is on fixes"],
        "the approved post written as the run's login, the declined one never"
    );
    assert!(!file.exists(), "settled once");
}

/// A runner committing on `fixes` and pushing through its own `ocx`
/// (which hands the artifacts to the node's socket): once at the start
/// (making the branch), again once its first push is decided, done at
/// the second decision.
const COMMITTER: &str = r#"
import re
def unescape(line):
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "r": "\r"}.get(m.group(1), m.group(1)), line)

def commit_and_push(name, text, comment, *branch):
    with open(name, "w") as f:
        f.write(text)
    fossil("add", name)
    note({"step": "commit-" + name, "said": fossil("commit", "-m", comment, *branch, "--no-warnings")})
    note({"step": "push-" + name, "result": local("ocx_push", {})})

decided = 0
for line in sys.stdin:
    line = line.rstrip("\n")
    if line.startswith("Record "):
        rpc = mcp("ocx")
        local = lambda tool, args: rpc("tools/call", {"name": tool, "arguments": args})["result"]
        commit_and_push("fix.txt", "fixed\n", "the fix", "--branch", "fixes")
        continue
    if line.startswith("{"):
        note({"step": "line", "said": json.loads(unescape(line))})
        decided += 1
        if decided == 1:
            commit_and_push("more.txt", "and more\n", "more of it")
        else:
            note({"step": "done"})
"#;

/// Whether the repository holds a check-in whose comment is `comment`.
fn has_checkin(repo: &Repo, comment: &str) -> bool {
    let db = rusqlite::Connection::open(&repo.file).unwrap();
    let n: i64 = db
        .query_row(
            "SELECT count(*) FROM event WHERE type='ci' AND comment=?1",
            [comment],
            |r| r.get(0),
        )
        .unwrap();
    n > 0
}

#[test]
fn a_held_push_shows_its_diff_and_is_written_once_approved_and_never_when_declined() {
    let repo = Repo::new();
    repo.user("stone", "o24jkr");
    let (runner, out) = crate::support::runner_script(
        &repo,
        &format!("{}{COMMITTER}", crate::support::PY_RUNNER_PRELUDE),
    );
    let block = json!({"command": [runner], "input": "lines",
        "env": {"OCX_TEST_OUT": out, "OCX_TEST_FOSSIL": fossil()}});
    crate::support::runner_page(&repo, "fixer", &block);
    repo.commit_as("admin", "README", "start\n", None);
    let s = Served::on(repo).start();
    let record = held_record(
        &s.repo,
        "fixer",
        "Fix it on fixes",
        "stone",
        &out,
        &["--branch", "fixes", "--new-branch", "--review"],
    );
    let steps = noted_step(&out, "push-fix.txt");
    let first = held_under(&steps, "push-fix.txt");
    assert!(
        !has_checkin(&s.repo, "the fix"),
        "nothing pushed before the decision"
    );
    let asked = s.repo.json(&["questions", "--for", "admin"]).ok();
    let text = s.repo.json(&["thread", "--of", &record]).ok()["posts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["hash"] == first.as_str())
        .map(|p| p["text"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("no question {first}: {asked:#}"));
    assert!(
        text.contains("+++ b/fix.txt")
            && text.contains("+fixed")
            && text.contains("on fixes: the fix"),
        "the question shows the diff: {text}"
    );

    s.repo.json(&["decide", &first, "--option", "1"]).ok();
    let steps = noted_step(&out, "push-more.txt");
    let second = held_under(&steps, "push-more.txt");
    assert!(
        has_checkin(&s.repo, "the fix"),
        "approved, the check-in is written"
    );
    s.repo.json(&["decide", &second, "--option", "2"]).ok();
    let steps = noted_until_done(&out, "the reviewed committer");
    let lines = decided(&steps);
    assert_eq!(lines[0]["approved"], first.as_str(), "{lines:#?}");
    let written = lines[0]["written"][0].as_str().unwrap();
    assert_eq!(s.repo.sender(written).as_deref(), Some("fixer"));
    assert_eq!(lines[1]["declined"], second.as_str(), "{lines:#?}");
    assert!(
        !has_checkin(&s.repo, "more of it"),
        "declined, never written"
    );
}

#[test]
fn review_needs_no_password() {
    let repo = Repo::new();
    let refused = repo.json(&[
        "create",
        "--runner",
        "command",
        "--command",
        "[\"true\"]",
        "--objective",
        "x",
        "--hears",
        "[]",
        "--review",
        "--wall",
        "1m",
    ]);
    assert_eq!(refused.refused(), "restrict.review");
}
