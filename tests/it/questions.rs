//! Questions and decisions: what `post` writes given `for` or `decision`,
//! who a decision counts from, references resolved and described (and
//! refused), and `questions`, `decide` and `console` at the command line.

use crate::support::Repo;
use ocx::fossil::artifact::ForumPost;
use serde_json::Value;

/// A repository where stone decides, mallory may post but decide nothing,
/// looker reads only the forum, outsider reads no forum, and carol's posts
/// await a moderator.
fn team() -> Repo {
    let r = Repo::new();
    r.user("stone", "o24jkr")
        .user("mallory", "o24")
        .user("looker", "2")
        .user("blind", "24")
        .user("carol", "3")
        .user("outsider", "o");
    r.fossil(&["user", "capabilities", "nobody", ""]);
    r.fossil(&["user", "capabilities", "anonymous", ""]);
    r
}

/// Admin asks stone, in a new thread, with `extra` arguments; answers the question's hash.
fn ask(r: &Repo, extra: &[&str]) -> String {
    let mut args = vec![
        "post",
        "--title",
        "Release",
        "--text",
        "Ship 2.0 now?",
        "--for",
        "stone",
        "--options",
        r#"["Ship it", "Wait a week"]"#,
        "--stakes",
        "the release date",
    ];
    args.extend_from_slice(extra);
    r.json(&args).ok_str("hash")
}

fn questions(r: &Repo, viewer: &str, for_login: &str) -> Value {
    r.json(&["questions", "--user", viewer, "--for", for_login])
        .ok()
}

#[test]
fn a_question_is_written_after_markdown_a_person_reads_and_listed_as_waiting() {
    let r = team();
    let checkin = r.commit_as("admin", "notes.txt", "one\ntwo\nthree\nfour\n", None);
    let q = ask(&r, &["--references", &checkin[..12]]);
    assert_eq!(r.sender(&q).as_deref(), Some("admin"));
    let text = r.fossil(&["artifact", &q]);
    for said in [
        "**Question for stone:** Ship 2\\.0 now?",
        "1. Ship it \\(recommended\\)",
        "2. Wait a week",
        "What it changes: the release date",
        &format!("Read first: [a change](/info/{checkin})"),
        "Decide: on the OCX page",
        "\"kind\": \"question\"",
    ] {
        assert!(text.contains(said), "{said:?} is not in:\n{text}");
    }
    let tag = r.fossil(&[
        "sql",
        &format!("SELECT x.value FROM tagxref x JOIN tag t USING(tagid) JOIN blob b ON b.rid=x.rid WHERE t.tagname='ocx-message' AND b.uuid='{q}'"),
    ]);
    assert_eq!(tag.trim(), "question");

    let v = questions(&r, "stone", "stone");
    assert_eq!(v["for"], "stone");
    assert_eq!(v["open"], 1);
    let w = &v["waiting"][0];
    assert_eq!(w["asked"], q.as_str());
    assert_eq!(w["from"], "admin");
    assert_eq!(w["question"], "Ship 2.0 now?");
    assert_eq!(w["options"], serde_json::json!(["Ship it", "Wait a week"]));
    assert_eq!(w["state"], "open");
    let reference = &w["references"][0];
    assert_eq!(reference["title"], "a change");
    assert_eq!(reference["kind"], "checkin");
    assert_eq!(reference["by"], "admin");
    assert_eq!(reference["link"], format!("/info/{checkin}"));
    assert!(
        w.get("replies_to").is_none(),
        "a thread's first post replies to nothing"
    );
    assert_eq!(
        questions(&r, "stone", "mallory")["waiting"],
        serde_json::json!([])
    );
}

#[test]
fn a_decision_counts_only_from_its_login_or_an_administrator_closing_it() {
    let r = team();
    let q = ask(&r, &[]);
    let before = r.hashes();
    let refused = r.json(&["decide", &q[..12], "--option", "2", "--user", "mallory"]);
    assert_eq!(refused.refused(), "question");
    let refused = r.json(&[
        "post",
        "--to",
        &q[..12],
        "--decision",
        "--text",
        "Wait",
        "--user",
        "mallory",
    ]);
    assert_eq!(refused.refused(), "to");
    assert_eq!(r.hashes(), before, "a refused decision wrote nothing");

    // mallory writes a decision past OCX: it is stored, and counts for nothing.
    let block = format!(
        "**Decision from stone:** Wait a week\n\n```json\n{{\"ocx\": 1, \"kind\": \"decision\", \"question\": \"{q}\", \"note\": \"Wait a week\"}}\n```\n"
    );
    let forged = ForumPost {
        date: "2026-01-01T00:00:00",
        reply: Some((&q, &q)),
        title: None,
        mimetype: "text/x-markdown",
        user: "stone",
        text: &block,
    }
    .compose();
    r.import_as("mallory", &[forged]);
    let v = questions(&r, "stone", "stone");
    let w = &v["waiting"][0];
    assert_eq!(w["state"], "open", "{v:#}");
    assert_eq!(w["decisions"][0]["from"], "mallory");
    assert_eq!(w["decisions"][0]["counts"], "nothing");

    let out = r
        .json(&[
            "decide",
            &q[..12],
            "--option",
            "1",
            "--note",
            "tag it today",
            "--user",
            "stone",
        ])
        .ok();
    assert_eq!(out["counts"], "decided");
    assert_eq!(out["note"], "Ship it: tag it today");
    let hash = out["hash"].as_str().unwrap();
    assert_eq!(r.sender(hash).as_deref(), Some("stone"));
    assert!(
        r.fossil(&["artifact", hash])
            .contains("**Decision from stone:** Ship it\\: tag it today")
    );
    let v = questions(&r, "stone", "stone");
    assert_eq!(
        v["waiting"],
        serde_json::json!([]),
        "a decided question waits no more"
    );
    assert_eq!(v["open"], 0);
    let again = r.json(&["decide", &q[..12], "--option", "2", "--user", "stone"]);
    assert_eq!(again.refused(), "question");

    // An administrator closes a question for stone.
    let q2 = ask(&r, &[]);
    let admin = questions(&r, "admin", "admin");
    assert_eq!(admin["to_confirm"][0]["asked"], q2.as_str(), "{admin:#}");
    let out = r
        .json(&[
            "decide",
            &q2[..12],
            "--note",
            "Not this way",
            "--user",
            "admin",
        ])
        .ok();
    assert_eq!(out["counts"], "closed");
    assert!(
        r.fossil(&["artifact", out["hash"].as_str().unwrap()])
            .contains("**Closed by admin:** Not this way")
    );
    assert_eq!(questions(&r, "stone", "stone")["open"], 0);
}

#[test]
fn references_naming_nothing_several_elsewhere_private_or_unreadable_are_refused() {
    let r = team();
    let checkin = r.commit_as("admin", "notes.txt", "one\n", None);
    let held = r
        .json(&[
            "post",
            "--title",
            "Held",
            "--text",
            "awaiting a moderator",
            "--user",
            "carol",
        ])
        .ok_str("hash");
    let before = r.hashes();
    // `post` of the question "Go?" for `to`, with the arguments `more`.
    let ask = |to: &str, more: &[&str]| {
        let mut args = vec!["post", "--title", "Q", "--text", "Go?", "--for", to];
        args.extend_from_slice(more);
        r.json(&args)
    };
    let reason = |run: &crate::support::Run| {
        run.answer()["stopped"]["reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    for (reference, why) in [
        ("0000000000aa", "names nothing"),
        (
            "https://elsewhere.example/info/abcdef0123",
            "another server",
        ),
        ("/timeline", "no page"),
        (&format!("/artifact/{checkin}?ln=9-3"), "one range"),
        (&format!("/artifact/{checkin}?ln=1234567890"), "one range"),
        (held.as_str(), "private"),
        ("not a reference", "neither"),
    ] {
        let run = ask("stone", &["--references", reference]);
        assert_eq!(run.answer()["ok"], false, "{reference}: {}", run.stdout);
        assert_eq!(run.refused(), "references[0]", "{reference}");
        let reason = reason(&run);
        assert!(reason.contains(why), "{reference}: {reason}");
    }
    // blind may not read check-ins (o): a question for blind may not send them to one.
    let run = ask("blind", &["--references", &checkin]);
    assert_eq!(run.refused(), "references[0]");
    assert!(reason(&run).contains("blind may not read it"));
    // A question for a login that does not exist, or may not read the forum.
    assert_eq!(ask("nobody-here", &[]).refused(), "for");
    assert_eq!(ask("outsider", &[]).refused(), "for");
    assert_eq!(
        r.json(&["post", "--title", "Q", "--text", "Go?", "--options", "a"])
            .refused(),
        "for"
    );
    assert_eq!(r.hashes(), before, "each refusal wrote nothing");
    // A page mallory may not edit, or whose edits a moderator holds for stone.
    let page = r.dir.path().join("page.md");
    std::fs::write(&page, "The plan.\n").unwrap();
    r.fossil(&["wiki", "create", "Plan", page.to_str().unwrap()]);
    let before = r.hashes();
    let for_mallory = ask("mallory", &["--references", "/wiki?name=Plan"]);
    assert_eq!(for_mallory.refused(), "references[0]");
    r.fossil(&[
        "sql",
        "INSERT OR REPLACE INTO config(name, value, mtime) VALUES('modreq-wiki', '1', now())",
    ]);
    let moderated = ask("stone", &["--references", "/wiki?name=Plan"]);
    assert_eq!(moderated.refused(), "references[0]");
    assert!(reason(&moderated).contains("a moderator would hold"));
    assert_eq!(r.hashes(), before, "each refusal wrote nothing");
}

#[test]
fn each_kind_of_reference_is_kept_as_fossils_link_and_shown_only_as_far_as_the_viewer_reads() {
    let r = team();
    let checkin = r.commit_as("admin", "notes.txt", "one\ntwo\nthree\nfour\n", None);
    let page = r.dir.path().join("page.md");
    std::fs::write(&page, "The plan, in full.\n").unwrap();
    r.fossil(&["wiki", "create", "Release plan", page.to_str().unwrap()]);
    r.fossil(&[
        "wiki",
        "create",
        "Freeze notes",
        page.to_str().unwrap(),
        "--technote",
        "now",
    ]);
    let technote = r.fossil(&[
        "sql",
        "SELECT substr(tagname, 7) FROM tag WHERE tagname GLOB 'event-*'",
    ]);
    let technote = technote.trim().trim_matches('\'').to_string();
    let ticket_out = r.fossil(&[
        "ticket",
        "add",
        "title",
        "Crash on start",
        "comment",
        "It crashes.",
        "status",
        "Open",
    ]);
    let ticket = ticket_out
        .split_whitespace()
        .find(|w| w.len() == 40)
        .unwrap()
        .to_string();
    let q = ask(
        &r,
        &[
            "--references",
            &format!(
                r#"["{}", "/technote/{}", "/wiki?name=Release%20plan", "/file?name=notes.txt&ci={}&ln=2-3", "{}"]"#,
                &ticket[..12],
                &technote[..12],
                &checkin[..12],
                checkin
            ),
        ],
    );
    let v = questions(&r, "stone", "stone");
    let refs = v["waiting"][0]["references"].as_array().unwrap().clone();
    let file = r.fossil(&["sql", &format!(
        "SELECT b.uuid FROM mlink m JOIN filename f ON f.fnid=m.fnid JOIN blob b ON b.rid=m.fid JOIN blob c ON c.rid=m.mid WHERE f.name='notes.txt' AND c.uuid='{checkin}'"
    )]);
    let file = file.trim().trim_matches('\'');
    let links: Vec<&str> = refs.iter().map(|x| x["link"].as_str().unwrap()).collect();
    assert_eq!(
        links,
        vec![
            format!("/tktview/{ticket}"),
            format!("/technote/{technote}"),
            "/wiki?name=Release+plan".to_string(),
            format!("/artifact/{file}?ln=2-3"),
            format!("/info/{checkin}"),
        ],
        "{q}"
    );
    let titles: Vec<&str> = refs.iter().map(|x| x["title"].as_str().unwrap()).collect();
    assert_eq!(titles[0], "Crash on start");
    assert_eq!(titles[1], "Freeze notes");
    assert_eq!(titles[2], "Release plan");
    assert!(titles[3].ends_with("lines 2-3"), "{titles:?}");
    assert_eq!(refs[3]["excerpt"], "two / three");
    assert_eq!(refs[0]["kind"], "ticket");
    assert_eq!(refs[2]["kind"], "wiki");
    // looker holds only 2: the ticket (r), the tech-note and page (j), the
    // file and check-in (o) are not readable by looker.
    let v = questions(&r, "looker", "stone");
    for x in v["waiting"][0]["references"].as_array().unwrap() {
        assert_eq!(x["title"], "not readable by you", "{x:#}");
        assert!(x.get("excerpt").is_none(), "{x:#}");
    }
}

#[test]
fn console_prints_the_exact_command_to_decide_each_question_and_gives_the_presses_as_data() {
    let r = team();
    let q = ask(&r, &[]);
    let text = r.ocx(&["console", "--user", "stone"]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    let out = text.stdout;
    assert!(out.contains("Waiting on stone:"), "{out}");
    assert!(out.contains("- Ship 2.0 now? (asked by admin"), "{out}");
    assert!(out.contains("1. Ship it (recommended)"), "{out}");
    assert!(
        out.contains(&format!("Decide: ocx decide {} --option 2", &q[..10])),
        "{out}"
    );
    assert!(out.contains("no run is running"), "{out}");
    let v = r.json(&["console", "--user", "stone"]).ok();
    let press = &v["waiting"][0]["decide"][0];
    assert_eq!(press["label"], "Ship it (recommended)");
    assert_eq!(press["recommended"], true);
    assert_eq!(press["tool"], "post");
    assert_eq!(press["input"]["to"], &q[..10]);
    // The press, as post takes it, decides the question as stone.
    let input = press["input"].to_string();
    let done = r.json(&["post", "--input", &input, "--user", "stone"]).ok();
    assert_eq!(
        r.sender(done["hash"].as_str().unwrap()).as_deref(),
        Some("stone")
    );
    let v = r.json(&["console", "--user", "stone"]).ok();
    assert_eq!(v["waiting"], serde_json::json!([]));
    // Another's view has no presses.
    let q2 = ask(&r, &[]);
    let v = r
        .json(&["console", "--user", "admin", "--for", "stone"])
        .ok();
    assert_eq!(v["waiting"][0]["asked"], q2.as_str());
    assert!(v["waiting"][0].get("decide").is_none());
}

/// The asking run's own part, after the shared prelude: it asks a login
/// its record does not hear, then stone, and waits for the decision.
const ASKER: &str = r#"
rpc = mcp("ocx-node")
call = lambda tool, args: rpc("tools/call", {"name": tool, "arguments": args})["result"]
for line in sys.stdin:
    if line.startswith("Record "):
        record = os.environ["OCX_RECORD"]
        note({"step": "not-heard", "result": call("ocx_post", {"to": record, "for": "mallory", "text": "Ship 2.0 now?"})})
        note({"step": "asked", "result": call("ocx_post", {"to": record, "for": "stone", "text": "Ship 2.0 now?",
            "options": ["Ship it", "Wait a week"], "stakes": "the release date",
            "references": [os.environ["OCX_TEST_CHECKIN"]]})})
    elif "Decision from stone" in line:
        note({"step": "delivered", "line": line})
        note({"step": "done"})
        break
"#;

fn results(out: &std::path::Path, last: &str) -> Vec<Value> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let lines = crate::support::noted(out);
        if lines.iter().any(|l| l["step"] == last) || std::time::Instant::now() > until {
            return lines;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn step<'a>(all: &'a [Value], name: &str) -> &'a Value {
    all.iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no step {name}: {all:#?}"))
}

#[test]
fn a_run_asks_stone_who_presses_an_option_on_the_console_and_the_run_hears_the_decision() {
    use std::os::unix::fs::PermissionsExt;
    let browser = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    assert!(
        std::path::Path::new("/usr/bin/chromium").is_file()
            && browser.join("node_modules/playwright-core").is_dir(),
        "chromium or playwright-core is missing: run scripts/setup.sh"
    );
    let repo = Repo::new();
    repo.user("stone", "o24jr").user("mallory", "o24");
    let dir = repo.dir.path().to_path_buf();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (prog, out) = (dir.join("prog"), dir.join("out"));
    std::fs::create_dir_all(&prog).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let runner = prog.join("asker.py");
    std::fs::write(
        &runner,
        format!("{}{ASKER}", crate::support::PY_RUNNER_PRELUDE),
    )
    .unwrap();
    std::fs::set_permissions(&runner, std::fs::Permissions::from_mode(0o755)).unwrap();
    let checkin = repo.commit_as("admin", "README", "start\n", None);
    let block = serde_json::json!({"command": [runner], "input": "lines",
        "env": {"OCX_TEST_OUT": out, "OCX_TEST_FOSSIL": crate::support::fossil(), "OCX_TEST_CHECKIN": checkin}});
    let page = dir.join("page.md");
    std::fs::write(&page, format!("```json\n{block}\n```\n")).unwrap();
    repo.fossil(&[
        "wiki",
        "create",
        "sandbox/asker",
        page.to_str().unwrap(),
        "--mimetype",
        "text/x-markdown",
    ]);
    let s = crate::support::Served::on(repo).start();
    let record = crate::restricted::held_record(
        &s.repo,
        "asker",
        "Ask stone before shipping",
        "stone",
        &out,
        &[],
    );
    let all = results(&out, "asked");
    let not_heard = &step(&all, "not-heard")["result"];
    assert_eq!(not_heard["isError"], true, "{not_heard:#}");
    assert_eq!(not_heard["structuredContent"]["stopped"]["field"], "for");
    let asked = &step(&all, "asked")["result"];
    assert_eq!(asked["isError"], false, "{asked:#}");
    let question = asked["structuredContent"]["result"]["hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(s.repo.sender(&question).as_deref(), Some("asker"));

    let console = s.repo.ocx(&["console", "--user", "stone"]);
    assert!(
        console.stdout.contains("- Ship 2.0 now? (asked by asker"),
        "{}",
        console.stdout
    );
    assert!(
        console.stdout.contains("Read first: a change"),
        "{}",
        console.stdout
    );
    assert!(
        console
            .stdout
            .contains("Ask stone before shipping (asker as asker"),
        "{}",
        console.stdout
    );
    let view = s.repo.json(&["questions", "--user", "stone"]).ok();
    assert_eq!(view["waiting"][0]["run"], record.as_str());
    assert_eq!(
        view["waiting"][0]["replies_to"]["title"],
        "Ask stone before shipping"
    );

    let ext = crate::cgi::Ext::new();
    let server = crate::cgi::served(&s.repo, &ext);
    let shots = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let profile = tempfile::Builder::new()
        .prefix("ocx-chromium-")
        .tempdir()
        .unwrap();
    let (before, after) = (
        shots.join("ocx-console-question.png"),
        shots.join("ocx-console-decided.png"),
    );
    let run = std::process::Command::new("node")
        .arg(browser.join("ocx-console.mjs"))
        .env("OCX_BASE", server.base())
        .env("OCX_LOGIN", "stone")
        .env("OCX_PASSWORD", "stone-pw")
        .env("OCX_QUESTION", &question)
        .env("OCX_PROFILE", profile.path().join("profile"))
        .env("OCX_SHOT_BEFORE", &before)
        .env("OCX_SHOT_AFTER", &after)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(run.status.success(), "the browser test failed: {said}");
    assert!(
        before.is_file() && after.is_file(),
        "no screenshots: {said}"
    );

    let view = s
        .repo
        .json(&["questions", "--user", "admin", "--for", "stone"])
        .ok();
    assert_eq!(view["waiting"], serde_json::json!([]), "{view:#}");
    let decided = ocx::fossil::Repository::open(&s.repo.file).unwrap();
    let asked = ocx::protocol::ask::asked(&decided).unwrap();
    let (said, decision, counts) = &asked[0].decisions[0];
    assert_eq!(
        said.from.as_deref(),
        Some("stone"),
        "the decision is stone's, by receipt"
    );
    assert_eq!(decision.note, "Ship it");
    assert_eq!(*counts, ocx::protocol::ask::Standing::Decided);

    let all = results(&out, "done");
    let delivered = step(&all, "delivered")["line"].as_str().unwrap();
    assert!(delivered.contains(&said.hash), "{delivered}");
}

/// The MCP client with an elicitation callback: it decides one question
/// by accepting the form the server sends (the second option, a note) and
/// declines the form for another; a third call, from a client without
/// elicitation, gets the refusal that asks for an option or a note.
const ELICITING: &str = r#"
import asyncio, json, sys
from mcp import ClientSession, types
from mcp.client.stdio import stdio_client, StdioServerParameters

seen = []
async def elicit(context, params):
    seen.append({"message": params.message, "schema": params.requested_schema})
    if len(seen) == 1:
        return types.ElicitResult(action="accept", content={"option": "2", "note": "after the freeze"})
    return types.ElicitResult(action="decline")

def show(label, res):
    print(json.dumps({"label": label, "is_error": bool(res.is_error), "structured": res.structured_content}), flush=True)

async def main():
    exe, repo, first, second = sys.argv[1:5]
    params = StdioServerParameters(command=exe, args=["--mcp", "--repository", repo, "--user", "stone"])
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w, elicitation_callback=elicit) as s:
            await s.initialize()
            show("accepted", await s.call_tool("ocx_decide", {"question": first}))
            show("declined", await s.call_tool("ocx_decide", {"question": second}))
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            show("plain", await s.call_tool("ocx_decide", {"question": second}))
    print(json.dumps({"label": "seen", "seen": seen}), flush=True)

asyncio.run(main())
"#;

#[test]
fn over_mcp_a_client_that_elicits_decides_with_a_form_a_declined_form_writes_nothing_and_http_never_elicits()
 {
    let r = team();
    let first = ask(&r, &[]);
    let second = ask(&r, &[]);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("client.py");
    std::fs::write(&script, ELICITING).unwrap();
    let before = r.hashes().len();
    let lines = crate::support::client_lines(
        std::process::Command::new("python3")
            .arg(&script)
            .arg(env!("CARGO_BIN_EXE_ocx"))
            .arg(&r.file)
            .arg(&first[..12])
            .arg(&second[..12])
            .env_remove("FOSSIL_USER"),
    );
    let by = |label: &str| lines.iter().find(|l| l["label"] == label).unwrap().clone();

    let seen = &by("seen")["seen"];
    assert_eq!(seen.as_array().unwrap().len(), 2, "{seen:#}");
    assert_eq!(seen[0]["message"], "Decide: Ship 2.0 now?");
    let option = &seen[0]["schema"]["properties"]["option"];
    assert_eq!(option["default"], "1");
    assert_eq!(option["oneOf"][0]["title"], "Ship it (recommended)");
    assert_eq!(option["oneOf"][1]["const"], "2");

    let accepted = by("accepted");
    assert_eq!(accepted["is_error"], false, "{accepted:#}");
    let result = &accepted["structured"]["result"];
    assert_eq!(result["note"], "Wait a week: after the freeze");
    assert_eq!(result["counts"], "decided");
    assert_eq!(
        r.sender(result["hash"].as_str().unwrap()).as_deref(),
        Some("stone")
    );

    let declined = by("declined");
    assert_eq!(declined["is_error"], true);
    assert!(
        declined["structured"]["stopped"]["reason"]
            .as_str()
            .unwrap()
            .contains("nothing was written")
    );
    let plain = by("plain");
    assert_eq!(plain["is_error"], true);
    assert_eq!(plain["structured"]["stopped"]["field"], "option");
    assert_eq!(
        r.hashes().len(),
        before + 2,
        "the accepted decision and its tag, nothing more"
    );
    let v = questions(&r, "stone", "stone");
    assert_eq!(
        v["waiting"][0]["asked"],
        second.as_str(),
        "the declined question still waits"
    );
}

#[test]
fn the_console_page_writes_only_the_viewers_own_press_and_shows_a_forged_question_harmlessly() {
    let r = team();
    let q = ask(&r, &[]);
    // A question mallory wrote past OCX: hostile words and links.
    let block = serde_json::json!({"ocx": 1, "kind": "question", "for": "stone",
        "question": "<script>alert(1)</script>", "options": ["<img src=x onerror=alert(2)>"],
        "references": ["javascript:alert(3)", "//evil.example/x", "/info/0000000000"]});
    let text = format!("Forged\n\n```json\n{block}\n```\n");
    let forged = ForumPost {
        date: "2026-01-01T00:00:00",
        reply: None,
        title: Some("Forged"),
        mimetype: "text/x-markdown",
        user: "admin",
        text: &text,
    }
    .compose();
    let forged_hash = r.import_as("mallory", &[forged]).remove(0);
    let tag = ocx::fossil::artifact::control(
        "2026-01-01T00:00:01",
        "mallory",
        &[ocx::fossil::artifact::TagChange {
            op: '+',
            name: "ocx-message".into(),
            target: forged_hash.clone(),
            value: Some("question".into()),
        }],
    );
    r.import_as("mallory", &[tag]);

    let ext = crate::cgi::Ext::new();
    let server = crate::cgi::served(&r, &ext);
    let own = format!("{}/ext/ocx-cgi/console", server.base());
    let stone = server.login("stone");
    let (status, _, page) =
        server.request("GET", "/ext/ocx-cgi/console", &[("Cookie", &stone)], "");
    assert_eq!(status, 200);
    assert!(page.contains("Ship 2.0 now?"), "{page}");
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the forged words are shown as text"
    );
    assert!(
        !page.contains("<script>alert") && !page.contains("<img src=x"),
        "{page}"
    );
    assert!(
        !page.contains("href=\"javascript:") && !page.contains("href=\"//evil"),
        "{page}"
    );
    assert!(page.contains("not in the repository"));

    let before = r.hashes();
    let body = format!("question={}&option=1", &q[..10]);
    let mallory = server.login("mallory");
    for (who, headers) in [
        (
            "mallory, from the console",
            vec![("Cookie", mallory.as_str()), ("Referer", own.as_str())],
        ),
        ("nobody signed in", vec![("Referer", own.as_str())]),
    ] {
        let (_, _, page) = server.request("POST", "/ext/ocx-cgi/console", &headers, &body);
        assert!(page.contains("Nothing was written"), "{who}: {page}");
    }
    let elsewhere = format!("{}/doc/trunk/x.html", server.base());
    let (_, _, page) = server.request(
        "POST",
        "/ext/ocx-cgi/console",
        &[("Cookie", &stone), ("Referer", &elsewhere)],
        &body,
    );
    assert!(page.contains("Nothing was written"), "{page}");
    assert_eq!(
        r.hashes(),
        before,
        "no press but stone's own, from the console, writes"
    );

    let (_, _, page) = server.request(
        "POST",
        "/ext/ocx-cgi/console",
        &[("Cookie", &stone), ("Referer", &own)],
        &body,
    );
    assert!(
        page.contains("Written: your decision &quot;Ship it&quot; (decided)"),
        "{page}"
    );
    assert_eq!(r.hashes().len(), before.len() + 2);
}
