//! A budget that asks (`budget.ask`), end to end on a real node: a run
//! given a small `budget.tokens` pauses where its relay refuses the
//! request that would pass it, its deliveries held, and the node asks the
//! record's sender; `ocx decide` with "the same again" gives it its budget
//! again and it answers the post held meanwhile, its response saying what
//! was given; "end it" ends it `budget`; and a decision written past OCX
//! by anyone else counts for nothing, leaving it paused.

use crate::model::{Model, Reply};
use crate::relay::site_running;
use crate::support::{is, until_logged};
use crate::tls::{Tls, port_of};
use ocx::fossil::artifact::ForumPost;
use ocx::protocol::message::{Reading, read};
use ocx::run::relay::thousands;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The one request the runner sends for each line it is given, as written.
const BODY: &str = r#"{"model": "m", "stream": true, "max_tokens": 10, "messages": [{"role": "user", "content": "Say hello"}]}"#;

/// For each line given, one request through the relay; its status noted.
const ASKER: &str = r#"#!/usr/bin/python3
import os, sys, json, http.client
out = os.environ["OCX_TEST_OUT"]
port = int(os.environ["OCX_MODEL_URL"].rsplit(":", 1)[1])
token = os.environ["OCX_MODEL_TOKEN"]
BODY = 'BODY_HERE'
for line in sys.stdin:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/messages", body=BODY, headers={"x-api-key": token, "content-type": "application/json"})
    r = c.getresponse()
    r.read()
    with open(os.path.join(out, "results"), "a") as f:
        f.write(json.dumps({"line": line.strip()[:40], "status": r.status}) + "\n")
"#;

/// What the scripted server bills the runner's request (its compact
/// JSON's bytes over four in, 5 out), and the budget
/// that covers one (reserved at its bytes and its `max_tokens`) and not a
/// second beside it.
fn billed_and_budget() -> (u64, u64) {
    let bytes = BODY.len() as u64;
    // The server bills its input as the compact JSON's bytes over four.
    let compact = serde_json::from_str::<Value>(BODY).unwrap().to_string();
    let billed = (compact.len() / 4) as u64 + 5;
    (billed, bytes + 10 + billed - 1)
}

/// A run paused at its budget, its sender asked.
struct Paused {
    site: crate::agents::Site,
    out: PathBuf,
    record: String,
    sender: String,
    question: String,
    budget: u64,
    _model: Model,
}

/// The statuses the runner noted so far.
fn noted(out: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(out.join("results")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["status"].as_u64())
        .collect()
}

/// The statuses the runner noted, once it noted `n`.
fn statuses(out: &Path, n: usize) -> Vec<u64> {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let got = noted(out);
        if got.len() >= n {
            return got;
        }
        assert!(Instant::now() < until, "the runner noted only {got:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The question the node asked in `record`'s thread, once it is there.
fn question_of(p: &crate::agents::Site, record: &str) -> (String, Value) {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        for (hash, _, text) in p.thread(record) {
            if let Reading::Message { message } = read(text.as_bytes())
                && message["kind"] == "question"
                && message["run"] == record
            {
                return (hash, Value::Object(message));
            }
        }
        assert!(Instant::now() < until, "no question\n{}", p.run_log(record));
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A run whose record asks, paused at its budget by the post after its
/// first line, and the question its sender is asked.
fn paused() -> Paused {
    let model = Model::start(|_| Reply::text("hello"));
    let tls = Tls::front(port_of(&model.url()));
    let (site, out) = site_running(&tls, &ASKER.replace("BODY_HERE", BODY), json!({}));
    let (billed, budget) = billed_and_budget();
    let record = crate::relay::create(&site, &out, &["--tokens", &budget.to_string(), "--ask"]);
    assert_eq!(statuses(&out, 1), vec![200], "its first line is answered");
    assert_eq!(
        ocx::run::relay::spent_in(&site.run_dir(&record)),
        Some(billed)
    );
    site.post(&record, "One more, please");
    // The request past the budget is refused, and the run paused at once:
    // frozen, its runner may note the refusal only once thawed.
    let (question, asked) = question_of(&site, &record);
    assert!(
        site.run_log(&record)
            .contains("cannot cover a request that may cost"),
        "the relay refused the request past the budget\n{}",
        site.run_log(&record)
    );
    let sender = site.thread(&record)[0].1.clone();
    assert_eq!(asked["for"], sender.as_str(), "{asked:#}");
    assert_eq!(asked["options"][0], "the same again", "{asked:#}");
    assert_eq!(asked["options"][1], "end it", "{asked:#}");
    Paused {
        site,
        out,
        record,
        sender,
        question,
        budget,
        _model: model,
    }
}

#[test]
fn a_paused_run_is_given_the_same_again_by_its_sender_alone_and_answers_the_post_held() {
    let p = paused();
    let root = p.site.root();
    // pat writes a decision past OCX, in the sender's name: it counts for nothing.
    let block = format!(
        "**Decision from {}:** the same again\n\n```json\n{{\"ocx\": 1, \"kind\": \"decision\", \"question\": \"{}\", \"note\": \"the same again\"}}\n```\n",
        p.sender, p.question
    );
    let forged = ForumPost {
        date: "2026-01-01T00:00:00",
        reply: Some((&p.record, &p.question)),
        title: None,
        mimetype: "text/x-markdown",
        user: &p.sender,
        text: &block,
    }
    .compose();
    let forged = p.site.node.repo.import_as("pat", &[forged]).remove(0);
    until_logged(&root, 120, |e| {
        is(e, "ignored", &p.record) && e["arrival"] == forged.as_str()
    });
    let held = p.site.post(&p.record, "Are you there?");
    until_logged(&root, 120, |e| {
        is(e, "delivered", &p.record) && e["arrival"] == held.as_str()
    });
    assert!(
        !p.site
            .run_dir(&p.record)
            .join(ocx::node::asked::DECISION)
            .exists(),
        "nothing was handed to the run"
    );
    assert!(
        noted(&p.out).len() <= 2,
        "the post waits while the run is paused: {:?}",
        noted(&p.out)
    );
    let question = p.site.thread(&p.record);
    let said = &question
        .iter()
        .find(|(hash, ..)| *hash == p.question)
        .unwrap()
        .2;
    match frozen(&p.record) {
        Some(frozen) => assert!(frozen, "the paused run's processes are frozen"),
        None => assert!(
            said.contains("cannot freeze"),
            "a host with no freezer says so: {said}"
        ),
    }

    p.site.json(&["decide", &p.question[..12], "--option", "1"]);
    // The post held, then the decision itself, which the record hears.
    assert_eq!(
        statuses(&p.out, 4),
        vec![200, 400, 200, 200],
        "given its budget again, it answers the post held"
    );
    assert_ne!(frozen(&p.record), Some(true), "given more, it is thawed");
    let results = std::fs::read_to_string(p.out.join("results")).unwrap();
    let third: Value = serde_json::from_str(results.lines().nth(2).unwrap()).unwrap();
    assert_eq!(third["line"], format!("Post {}", &held[..35]), "{results}");
    p.site.json(&["stop", "--record", &p.record]);
    let (outcome, note) = p.site.response(&p.record);
    assert_eq!(outcome, "stopped", "{note}");
    let given = format!(
        " of {b} + {b} given by {} tokens",
        p.sender,
        b = thousands(p.budget)
    );
    assert!(note.contains(&given), "{note}");
}

#[test]
fn a_paused_run_its_sender_ends_is_answered_budget() {
    let p = paused();
    p.site.json(&["decide", &p.question[..12], "--option", "2"]);
    let (outcome, note) = p.site.response(&p.record);
    assert_eq!(outcome, "budget", "{note}");
    let (billed, budget) = billed_and_budget();
    assert!(
        note.starts_with("tokens limit reached after ")
            && note.ends_with(&format!(
                ": {} of {} tokens",
                thousands(billed),
                thousands(budget)
            )),
        "{note}"
    );
}

/// Whether every process of `record`'s run (each process whose
/// environment names it) is frozen, as the cgroup freezer it stands in
/// says (v1's `freezer.state`, v2's `cgroup.freeze`); `None` where none
/// of them stands in one, or none was found.
fn frozen(record: &str) -> Option<bool> {
    let mark = format!("OCX_RECORD={record}");
    let states: Vec<bool> = std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter(|p| {
            std::fs::read(p.path().join("environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == mark.as_bytes()))
        })
        .filter_map(|p| freezer_state(&p.path()))
        .collect();
    (!states.is_empty()).then(|| states.iter().all(|f| *f))
}

/// Whether the process at `proc` (its `/proc` directory) is frozen, by
/// the freezer of the cgroup it stands in, when it stands in one.
fn freezer_state(proc: &Path) -> Option<bool> {
    let groups = std::fs::read_to_string(proc.join("cgroup")).ok()?;
    let lines: Vec<(&str, &str)> = groups
        .lines()
        .filter_map(|l| l.split(':').nth(1).zip(l.splitn(3, ':').nth(2)))
        .collect();
    let read = |path: String| std::fs::read_to_string(path).ok();
    if let Some((_, path)) = lines
        .iter()
        .find(|(c, _)| c.split(',').any(|c| c == "freezer"))
    {
        return read(format!("/sys/fs/cgroup/freezer{path}/freezer.state"))
            .map(|s| s.trim() == "FROZEN");
    }
    let (_, path) = lines.iter().find(|(c, _)| c.is_empty())?;
    read(format!("/sys/fs/cgroup{path}/cgroup.freeze")).map(|s| s.trim() == "1")
}

/// Notes each line it reads; with `OCX_TEST_BURN` set, burns a core the
/// while on a thread of its own.
const NOTING: &str = r#"#!/usr/bin/python3
import sys, os, json, threading
log = os.environ["OCX_TEST_LOG"]
def burn():
    n = 0
    while True:
        n += 1
if os.environ.get("OCX_TEST_BURN"):
    threading.Thread(target=burn, daemon=True).start()
for line in sys.stdin:
    with open(log, "a") as f:
        f.write(line)
"#;

/// The questions waiting on the record's sender about `record`'s run, once
/// there are `n`.
fn run_questions(repo: &crate::support::Repo, record: &str, n: usize) -> Vec<Value> {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let waiting: Vec<Value> = repo.json(&["questions"]).ok()["waiting"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|q| q["run"] == record)
            .cloned()
            .collect();
        if waiting.len() >= n {
            return waiting;
        }
        assert!(Instant::now() < until, "no question came: {waiting:#?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The lines the run noted so far.
fn lines_noted(out: &Path) -> Vec<String> {
    std::fs::read_to_string(out.join("log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_run_paused_at_its_wall_is_given_more_by_a_duration_and_ended_by_its_sender() {
    let s = crate::support::Served::new()
        .echo(NOTING, json!({}))
        .start();
    let out = s.out.to_str().unwrap().to_string();
    let args = crate::support::echo_args("Wait for posts", "6s", &["--read-write", &out, "--ask"]);
    let record = s.repo.json(&args).ok_str("record");
    let command = crate::support::command_record_args("Check", &["--wall", "1m", "--ask"]);
    assert_eq!(
        s.repo.json(&command).refused(),
        "budget.ask",
        "a command's run does not pause to ask"
    );
    let first = run_questions(&s.repo, &record, 1).remove(0);
    assert!(
        first["question"]
            .as_str()
            .is_some_and(|q| q.starts_with("This run's budget of 6 s of wall is reached")),
        "{first:#}"
    );
    assert_eq!(
        frozen(&record),
        Some(true),
        "paused at its wall, it is frozen"
    );
    let held = s
        .repo
        .json(&["post", "--to", &record, "--text", "Still there?"]);
    let held = held.ok_str("hash");
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !lines_noted(&s.out).iter().any(|l| l.contains(&held[..20])),
        "a post waits while the run is paused: {:?}",
        lines_noted(&s.out)
    );
    // Waiting longer than its wall's end is not taken from what is given.
    let q = first["asked"].as_str().unwrap().to_string();
    s.repo
        .json(&["decide", &q[..12], "--option", "3", "--note", "give it 8s"])
        .ok();
    let until = Instant::now() + Duration::from_secs(60);
    while !lines_noted(&s.out).iter().any(|l| l.contains(&held[..20])) {
        assert!(
            Instant::now() < until,
            "the post held is given once it goes on"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_ne!(frozen(&record), Some(true), "given more, it is thawed");
    let second = run_questions(&s.repo, &record, 1).remove(0);
    assert_ne!(
        second["asked"], first["asked"],
        "asked again at its new wall"
    );
    assert!(
        second["question"]
            .as_str()
            .is_some_and(|q| q.starts_with("This run's budget of 14 s of wall is reached")),
        "{second:#}"
    );
    let q = second["asked"].as_str().unwrap().to_string();
    s.repo.json(&["decide", &q[..12], "--option", "2"]).ok();
    let (outcome, note) = response_of(&s.repo, &record);
    assert_eq!(outcome, "budget", "{note}");
    assert!(
        note.starts_with("wall limit reached after ")
            && note.contains(", its wall 6 s + 8 s given by "),
        "{note}"
    );
}

#[test]
fn a_run_paused_at_its_cpu_budget_goes_on_with_the_same_again_and_unanswered_ends_at_it() {
    let s = crate::support::Served::new()
        .echo(NOTING, json!({"OCX_TEST_BURN": "1"}))
        .start();
    let out = s.out.to_str().unwrap().to_string();
    let args = crate::support::echo_args(
        "Burn",
        "12s",
        &["--read-write", &out, "--cpu", "2", "--ask"],
    );
    let record = s.repo.json(&args).ok_str("record");
    let first = run_questions(&s.repo, &record, 1).remove(0);
    assert!(
        first["question"]
            .as_str()
            .is_some_and(|q| q.starts_with("This run's budget of 2 s of CPU is reached")),
        "{first:#}"
    );
    assert_eq!(
        frozen(&record),
        Some(true),
        "paused at its CPU, it is frozen"
    );
    let q = first["asked"].as_str().unwrap().to_string();
    s.repo.json(&["decide", &q[..12], "--option", "1"]).ok();
    let until = Instant::now() + Duration::from_secs(60);
    let second = loop {
        let waiting = run_questions(&s.repo, &record, 1);
        if let Some(q) = waiting.into_iter().find(|q| q["asked"] != first["asked"]) {
            break q;
        }
        assert!(Instant::now() < until, "it is not asked again");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        second["question"]
            .as_str()
            .is_some_and(|q| q.starts_with("This run's budget of 4 s of CPU is reached")),
        "given the same again, it burned it: {second:#}"
    );
    // Unanswered within its wall, it ends at its CPU budget.
    let (outcome, note) = response_of(&s.repo, &record);
    assert_eq!(outcome, "budget", "{note}");
    assert!(
        note.starts_with("cpu limit reached after ")
            && note.contains(", its CPU 2 s + 2 s given by "),
        "{note}"
    );
}

/// The response to `record` once there is one: its outcome and note.
fn response_of(repo: &crate::support::Repo, record: &str) -> (String, String) {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let run = repo.json(&["run", "--record", record]).ok();
        if let (Some(o), Some(n)) = (run["outcome"].as_str(), run["note"].as_str()) {
            return (o.to_string(), n.to_string());
        }
        assert!(Instant::now() < until, "no response: {run:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
