//! Held writes end to end (`restrict.review`): a run under review posts
//! through its node socket, each post is held in its run's directory as a
//! question for its reviewer, nothing reaches the repository before the
//! decision, a decision from anyone else counts for nothing, and approved
//! the post is written as the run's login, declined the run is told in
//! its next line.

use crate::restricted::held_record;
use crate::support::{Repo, Served, fossil, handled_all, noted, noted_until_done};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What every reviewed runner here does, after the shared prelude and
/// its own `first()` and `second()`: `first()` at its record's line, each
/// JSON line (a decision) noted, `second()` after the first decision,
/// done after the second.
pub(crate) const REVIEWED: &str = r#"
import re
def unescape(line):
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "r": "\r"}.get(m.group(1), m.group(1)), line)

servers = {}
def call(server, tool, args):
    if server not in servers:
        servers[server] = mcp(server)
    return servers[server]("tools/call", {"name": tool, "arguments": args})["result"]

decided = 0
for line in sys.stdin:
    line = line.rstrip("\n")
    if line.startswith("Record "):
        first()
        continue
    if line.startswith("{"):
        note({"step": "line", "said": json.loads(unescape(line))})
        decided += 1
        if decided == 1:
            second()
        else:
            note({"step": "done"})
"#;

/// Two posts in its own thread through the node socket.
pub(crate) const POSTER: &str = r#"
def first():
    for name, text in [("kept", "kept: the fix is on fixes"), ("dropped", "dropped: merge it all now")]:
        note({"step": "post-" + name, "result": call("ocx-node", "ocx_post", {"to": os.environ["OCX_RECORD"], "text": text})})

def second():
    pass
"#;

/// A reviewed run of `runner` (its `first()` and `second()`) as the
/// login `fixer`, hearing stone, its record given `more`: the served
/// repository `repo`, the record and the runner's `out`.
fn reviewed(
    repo: Repo,
    runner: &str,
    more: &[&str],
) -> (crate::support::ServedNode, String, PathBuf) {
    let (script, out) = crate::support::runner_script(
        &repo,
        &format!("{}{runner}{REVIEWED}", crate::support::PY_RUNNER_PRELUDE),
    );
    let block = json!({"command": [script], "input": "lines",
        "env": {"OCX_TEST_OUT": out, "OCX_TEST_FOSSIL": fossil(),
                "OCX_TEST_CHECKIN": repo.commit_as("admin", "README", "start\n", None)}});
    crate::support::runner_page(&repo, "fixer", &block);
    let s = Served::on(repo).start();
    let record = held_record(&s.repo, "fixer", "Work under review", "stone", &out, more);
    (s, record, out)
}

/// The steps the runner noted once one is `name`.
pub(crate) fn noted_step(out: &std::path::Path, name: &str) -> Vec<Value> {
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
pub(crate) fn held_under(steps: &[Value], name: &str) -> String {
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
pub(crate) fn decided(steps: &[Value]) -> Vec<&Value> {
    steps
        .iter()
        .filter(|s| s["step"] == "line")
        .map(|s| &s["said"])
        .collect()
}

/// The texts the run's login sent in the record's thread.
pub(crate) fn said_by(repo: &Repo, record: &str, login: &str) -> Vec<String> {
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
fn a_held_post_is_written_once_its_reviewer_approves_and_the_run_is_told_when_it_is_closed() {
    let repo = Repo::new();
    repo.user("stone", "o24jkr").user("mallory", "o24");
    let (s, record, out) = reviewed(repo, POSTER, &["--review", "--review-by", "stone"]);
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
    let closed = s
        .repo
        .json(&["decide", &dropped, "--option", "2", "--note", "not now"]);
    assert_eq!(
        closed.ok()["counts"],
        "closed",
        "admin sent the record, stone reviews it"
    );
    let steps = noted_until_done(&out, "the reviewed runner");
    let lines = decided(&steps);
    assert_eq!(lines[0]["approved"], kept.as_str(), "{lines:#?}");
    assert_eq!(lines[0]["by"], "stone");
    let written = lines[0]["written"][0].as_str().unwrap();
    assert_eq!(s.repo.sender(written).as_deref(), Some("fixer"));
    assert_eq!(lines[1]["declined"], dropped.as_str(), "{lines:#?}");
    assert_eq!(lines[1]["by"], "admin", "an administrator's close declines");
    assert_eq!(lines[1]["note"], "Decline: not now");
    assert_eq!(
        said_by(&s.repo, &record, "fixer"),
        ["kept: the fix is on fixes"],
        "the approved post written as the run's login, the declined one never"
    );
    assert!(!file.exists(), "settled once");
}

/// A runner committing on `fixes` and pushing through its own `ocx`
/// (which hands the artifacts to the node's socket): first making the
/// branch, then on it.
pub(crate) const COMMITTER: &str = r#"
def commit_and_push(name, text, comment, *branch):
    with open(name, "w") as f:
        f.write(text)
    fossil("add", name)
    note({"step": "commit-" + name, "said": fossil("commit", "-m", comment, *branch, "--no-warnings")})
    note({"step": "push-" + name, "result": call("ocx", "ocx_push", {})})

def first():
    commit_and_push("fix.txt", "fixed\n", "the fix", "--branch", "fixes")

def second():
    commit_and_push("more.txt", "and more\n", "more of it")
"#;

/// Whether the repository holds a check-in whose comment is `comment`.
pub(crate) fn has_checkin(repo: &Repo, comment: &str) -> bool {
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

/// How a test's reviewer decides a held write: the repository, the
/// question, the option pressed (1 approves, 2 declines) and words the
/// question must show of what would be written.
type Decide = fn(&Repo, &str, u8, &str);

/// Stone decides at the command line, after reading the question there.
fn at_the_command_line(repo: &Repo, question: &str, option: u8, shows: &str) {
    let console = repo.ocx(&["console", "--user", "stone"]);
    assert!(
        console.stdout.contains("What would be written, exactly:")
            && console.stdout.contains(shows),
        "{}",
        console.stdout
    );
    let option = option.to_string();
    let decided = repo.json(&["decide", question, "--option", &option, "--user", "stone"]);
    assert_eq!(decided.ok()["counts"], "decided");
}

/// Stone decides on the console's page over HTTP, as its form posts,
/// after reading the question on it.
fn on_the_page(repo: &Repo, question: &str, option: u8, shows: &str) {
    let ext = crate::support::Ext::new();
    let server = crate::cgi::served(repo, &ext);
    let stone = server.login("stone");
    let (status, _, page) =
        server.request("GET", "/ext/ocx-cgi/console", &[("Cookie", &stone)], "");
    assert_eq!(status, 200);
    let card = format!("id=\"question-{}\"", &question[..10]);
    let at = page
        .find(&card)
        .unwrap_or_else(|| panic!("no card {card}: {page}"));
    let held = &page[at..];
    assert!(
        held.contains("class=\"ocx-held\"") && held.contains(shows),
        "{held}"
    );
    let own = format!("{}/ext/ocx-cgi/console", server.base());
    let body = format!("question={}&option={option}", &question[..10]);
    let headers = [("Cookie", stone.as_str()), ("Referer", own.as_str())];
    let (_, _, page) = server.request("POST", "/ext/ocx-cgi/console", &headers, &body);
    assert!(page.contains("Written: your decision"), "{page}");
}

/// An MCP client of stone's: reads the questions waiting on it, then
/// calls `ocx_decide` with the question alone and accepts the form the
/// server elicits with the option asked for.
const MCP_REVIEWER: &str = r#"
import asyncio, json, sys
from mcp import ClientSession, types
from mcp.client.stdio import stdio_client, StdioServerParameters

exe, repo, question, option = sys.argv[1:5]
seen = []
async def elicit(context, params):
    seen.append(params.message)
    return types.ElicitResult(action="accept", content={"option": option})

async def main():
    params = StdioServerParameters(command=exe, args=["--mcp", "--repository", repo, "--user", "stone"])
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w, elicitation_callback=elicit) as s:
            await s.initialize()
            waiting = await s.call_tool("ocx_questions", {})
            decided = await s.call_tool("ocx_decide", {"question": question})
    print(json.dumps({"waiting": waiting.structured_content, "decided": decided.structured_content, "seen": seen}), flush=True)

asyncio.run(main())
"#;

/// Stone decides over MCP ([`MCP_REVIEWER`]), shown what would be written
/// both by `ocx_questions` and in the form the server elicits.
fn over_mcp(repo: &Repo, question: &str, option: u8, shows: &str) {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("reviewer.py");
    std::fs::write(&script, MCP_REVIEWER).unwrap();
    let lines = crate::support::client_lines(
        std::process::Command::new("python3")
            .arg(&script)
            .arg(env!("CARGO_BIN_EXE_ocx"))
            .arg(&repo.file)
            .arg(question)
            .arg(option.to_string())
            .env_remove("FOSSIL_USER"),
    );
    let said = &lines[0];
    let waiting = said["waiting"]["result"]["waiting"].as_array().unwrap();
    let card = waiting.iter().find(|q| q["asked"] == question).unwrap();
    assert!(card["held"].as_str().unwrap().contains(shows), "{card:#}");
    assert!(
        said["seen"][0].as_str().unwrap().contains(shows),
        "{said:#}"
    );
    assert_eq!(said["decided"]["result"]["counts"], "decided", "{said:#}");
}

/// Stone decides on the console's page in headless Chromium
/// (tests/browser/held-write.mjs), signed in on Fossil's login form.
fn in_chromium(repo: &Repo, question: &str, option: u8, shows: &str) {
    let browser = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    assert!(
        std::path::Path::new("/usr/bin/chromium").is_file()
            && browser.join("node_modules/playwright-core").is_dir(),
        "chromium or playwright-core is missing: run scripts/setup.sh"
    );
    let ext = crate::support::Ext::new();
    let server = crate::cgi::served(repo, &ext);
    let profile = tempfile::Builder::new()
        .prefix("ocx-chromium-")
        .tempdir()
        .unwrap();
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ocx-held-{}.png", &question[..10]));
    let run = std::process::Command::new("node")
        .arg(browser.join("held-write.mjs"))
        .env("OCX_BASE", server.base())
        .env("OCX_LOGIN", "stone")
        .env("OCX_PASSWORD", "stone-pw")
        .env("OCX_QUESTION", question)
        .env("OCX_OPTION", option.to_string())
        .env("OCX_SHOWS", shows)
        .env("OCX_PROFILE", profile.path().join("profile"))
        .env("OCX_SHOT", &shot)
        .output()
        .unwrap();
    assert!(
        run.status.success() && shot.is_file(),
        "the browser test failed: {}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

/// A held push shown by its diff, written once `decide` approves it, and
/// the next never once `decide` declines it.
fn held_pushes_decided(decide: Decide) {
    let repo = Repo::new();
    repo.user("stone", "o24jkr");
    let (s, _record, out) = reviewed(
        repo,
        COMMITTER,
        &[
            "--branch",
            "fixes",
            "--new-branch",
            "--review",
            "--review-by",
            "stone",
        ],
    );
    let steps = noted_step(&out, "push-fix.txt");
    let first = held_under(&steps, "push-fix.txt");
    assert!(
        !has_checkin(&s.repo, "the fix"),
        "nothing pushed before the decision"
    );
    decide(&s.repo, &first, 1, "+fixed");
    let steps = noted_step(&out, "push-more.txt");
    let second = held_under(&steps, "push-more.txt");
    assert!(
        has_checkin(&s.repo, "the fix"),
        "approved, the check-in is written"
    );
    decide(&s.repo, &second, 2, "+and more");
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

/// Two held posts: the first written once `decide` approves it, the
/// second never once `decide` declines it.
fn held_posts_decided(decide: Decide) {
    let repo = Repo::new();
    repo.user("stone", "o24jkr");
    let (s, record, out) = reviewed(repo, POSTER, &["--review", "--review-by", "stone"]);
    let steps = noted_step(&out, "post-dropped");
    let (kept, dropped) = (
        held_under(&steps, "post-kept"),
        held_under(&steps, "post-dropped"),
    );
    decide(&s.repo, &kept, 1, "kept: the fix is on fixes");
    decide(&s.repo, &dropped, 2, "dropped: merge it all now");
    let steps = noted_until_done(&out, "the reviewed poster");
    let lines = decided(&steps);
    assert_eq!(lines[0]["approved"], kept.as_str(), "{lines:#?}");
    assert_eq!(lines[1]["declined"], dropped.as_str(), "{lines:#?}");
    assert_eq!(
        said_by(&s.repo, &record, "fixer"),
        ["kept: the fix is on fixes"]
    );
}

#[test]
fn a_held_write_left_undecided_when_its_run_ends_waits_on_no_one() {
    let repo = Repo::new();
    repo.user("stone", "o24jkr");
    let (s, record, out) = reviewed(repo, POSTER, &["--review", "--review-by", "stone"]);
    let steps = noted_step(&out, "post-dropped");
    let held = [
        held_under(&steps, "post-kept"),
        held_under(&steps, "post-dropped"),
    ];
    let waiting = || -> Vec<String> {
        s.repo.json(&["questions", "--user", "stone"]).ok()["waiting"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|q| q["asked"].as_str().map(str::to_string))
            .collect()
    };
    let before = waiting();
    assert!(
        held.iter().all(|h| before.contains(h)),
        "both wait on stone while the run goes: {before:?}"
    );
    s.repo.json(&["stop", "--record", &record]).ok();
    assert_eq!(crate::support::response_to(&s.repo, &record).0, "stopped");
    let after = waiting();
    assert!(
        !held.iter().any(|h| after.contains(h)),
        "a held write of an ended run waits on no one: {after:?}"
    );
    assert!(
        said_by(&s.repo, &record, "fixer").is_empty(),
        "nothing written"
    );
}

#[test]
fn a_held_push_shows_its_diff_and_is_written_once_approved_and_never_when_declined() {
    held_pushes_decided(at_the_command_line);
}

#[test]
fn a_held_push_is_approved_and_the_next_declined_on_the_console_page() {
    held_pushes_decided(on_the_page);
}

#[test]
fn a_held_post_is_approved_and_another_declined_on_the_console_page() {
    held_posts_decided(on_the_page);
}

#[test]
fn a_held_post_is_approved_and_another_declined_over_mcp() {
    held_posts_decided(over_mcp);
}

#[test]
fn in_chromium_a_held_push_is_approved_and_the_next_declined_from_the_console() {
    held_pushes_decided(in_chromium);
}

#[test]
fn in_chromium_a_held_post_is_approved_and_another_declined_from_the_console() {
    held_posts_decided(in_chromium);
}

/// A verdict on admin's check-in through the node socket, first
/// `audited`, then `ci`.
const JUDGE: &str = r#"
def audit(tag, verdict, reason):
    args = {"checkin": os.environ["OCX_TEST_CHECKIN"], "verdict": verdict, "reason": reason,
            "against": os.environ["OCX_RECORD"], "tag": tag}
    note({"step": "audit-" + tag, "result": call("ocx-node", "ocx_audit", args)})

def first():
    audit("audited", "pass", "reads right")

def second():
    audit("ci", "fail", "never ran")
"#;

#[test]
fn a_held_verdict_counts_once_approved_and_never_when_declined() {
    let repo = Repo::new();
    repo.user("stone", "o24jkr");
    let (s, _record, out) = reviewed(repo, JUDGE, &["--review", "--checkins", "trunk"]);
    let steps = noted_step(&out, "audit-audited");
    let first = held_under(&steps, "audit-audited");
    let checkin =
        steps.iter().find(|s| s["step"] == "audit-audited").unwrap()["result"]["structuredContent"]
            ["result"]["checkin"]
            .as_str()
            .unwrap()
            .to_string();
    let judged = |what: &str| s.repo.json(&["verdicts", "--checkin", &checkin]).ok()[what].clone();
    assert_eq!(
        judged("counting"),
        json!([]),
        "nothing written before the decision"
    );
    s.repo.json(&["decide", &first, "--option", "1"]).ok();
    let steps = noted_step(&out, "audit-ci");
    let second = held_under(&steps, "audit-ci");
    s.repo.json(&["decide", &second, "--option", "2"]).ok();
    let steps = noted_until_done(&out, "the reviewed judge");
    let lines = decided(&steps);
    assert_eq!(lines[0]["approved"], first.as_str(), "{lines:#?}");
    assert_eq!(lines[1]["declined"], second.as_str(), "{lines:#?}");
    let counting = judged("counting");
    let counting = counting.as_array().unwrap();
    assert_eq!(counting.len(), 1, "{counting:#?}");
    assert_eq!(counting[0]["from"], "fixer");
    assert_eq!(counting[0]["tag"], "audited");
    assert_eq!(counting[0]["verdict"], "pass");
}

#[test]
fn review_needs_no_password_and_reviewers_who_are_logins_other_than_the_runs() {
    let node = Served::on(Repo::new()).start();
    let create = |more: &[&str]| {
        let mut args = vec![
            "create",
            "--runner",
            "command",
            "--command",
            "[\"true\"]",
            "--run-user",
            "checker",
            "--objective",
            "x",
            "--hears",
            "[]",
            "--review",
            "--wall",
            "1m",
            "--dry-run",
        ];
        args.extend_from_slice(more);
        node.repo.json(&args).refused()
    };
    assert_eq!(create(&[]), "restrict.review");
    assert_eq!(
        create(&["--no-password", "--review-by", "ghost"]),
        "restrict.review_by[0]",
        "no login of this repository"
    );
    assert_eq!(
        create(&["--no-password", "--review-by", "admin checker"]),
        "restrict.review_by[1]",
        "the run's own login"
    );
}

#[test]
fn the_pattern_agents_md_shows_writes_a_record_under_review() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/agents.md")).unwrap();
    let section = docs
        .split("## A run whose writes wait for a person")
        .nth(1)
        .unwrap()
        .split("\n## ")
        .next()
        .unwrap();
    let page_text = section.split("````").nth(1).unwrap();
    let block = &ocx::protocol::message::json_blocks(page_text)[0];
    let pattern: Value = serde_json::from_str(block).unwrap();
    let repo = Repo::new();
    repo.user("stone", "o24jkr");
    let node = Served::on(repo).start();
    let page = json!({"command": ["/bin/true"], "input": "lines"});
    crate::support::runner_page(&node.repo, "claude", &page);
    crate::patterns::pattern_page(&node.repo, "careful", &pattern);
    let written = node
        .repo
        .json(&["create", "--pattern", "careful", "--dry-run"])
        .ok();
    let restrict = &written["fields"]["restrict"];
    assert_eq!(restrict["review"], true, "{written:#}");
    assert_eq!(restrict["review_by"], json!(["stone"]));
}
