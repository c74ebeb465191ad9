//! Protocol v1's tools: `create`, `stop`, `audit`, `verdicts` and
//! `unaudited`, against real repositories, and the readers of records,
//! stops and responses.

use crate::support::{Repo, verdicts};
use ocx::fossil::artifact::{self, ForumPost, TagChange};
use serde_json::{Value, json};

fn team() -> Repo {
    let r = Repo::new();
    r.user("maint", "a")
        .user("pat", "v4")
        .user("reviewer", "v4");
    r
}

fn text_of(r: &Repo, hash: &str) -> String {
    let repo = ocx::fossil::Repository::open(&r.file).unwrap();
    let rid = match repo.resolve(hash).unwrap() {
        ocx::fossil::repo::Lookup::One(rid, _) => rid,
        other => panic!("{other:?}"),
    };
    String::from_utf8(repo.parsed(rid).unwrap().unwrap().text.unwrap()).unwrap()
}

#[test]
fn create_writes_every_default_out() {
    let r = team();
    let out = r
        .json(&[
            "create",
            "--objective",
            "Review each check-in on dev\nand say so.",
            "--checkins",
            "dev",
            "--new-branch",
            "--wall",
            "4h",
        ])
        .ok();
    let hash = out["record"].as_str().unwrap();
    assert_eq!(out["thread"].as_str(), Some(hash), "a new thread");
    let f = &out["fields"];
    assert_eq!(f["runner"], "claude");
    assert_eq!(f["node"].as_str(), Some(r.server_code().as_str()));
    assert_eq!(
        f["hears"],
        json!(["admin", "maint"]),
        "every admin or setup, written out"
    );
    assert_eq!(
        f["remote"], false,
        "no runner page offers remote control here"
    );
    assert_eq!(f["restrict"], json!({}));
    assert_eq!(
        f["sandbox"],
        json!({"network": true, "read_only": [], "read_write": []})
    );
    assert_eq!(f["budget"], json!({"wall": "4h"}));
    let user = f["user"].as_str().unwrap();
    assert!(
        user.starts_with("claude-")
            && user.len() == 13
            && user[7..].bytes().all(|b| b.is_ascii_hexdigit()),
        "{user}"
    );
    assert_eq!(r.sender(hash).as_deref(), Some("admin"));
    let text = text_of(&r, hash);
    assert!(
        text.starts_with("OCX record: "),
        "a line for a person first: {text}"
    );
    let read = ocx::protocol::message::read(text.as_bytes());
    let ocx::protocol::message::Reading::Message { message } = read else {
        panic!("{read:?}")
    };
    assert_eq!(
        Value::Object(message),
        *f,
        "the block is the record as answered"
    );
    let artifact = r.fossil(&["artifact", hash]);
    assert!(
        artifact.contains("H Review\\seach\\scheck-in\\son\\sdev\n"),
        "title is the first line: {artifact}"
    );
    let sql = format!(
        "SELECT count(*) FROM tagxref x JOIN tag t USING(tagid) JOIN blob b ON b.rid=x.rid WHERE t.tagname='ocx-message' AND b.uuid='{hash}'"
    );
    let tagged = r.fossil(&["sql", &sql]);
    assert_eq!(tagged.trim(), "1", "tagged ocx-message in the same bundle");
}

#[test]
fn create_refuses_each_bad_field_naming_it_and_writes_nothing() {
    let r = team();
    r.user("ci-bot", "i");
    let open = r
        .json(&[
            "create",
            "--objective",
            "x",
            "--wall",
            "1h",
            "--run-user",
            "ci-bot",
        ])
        .ok();
    assert!(open["record"].is_string());
    let before = r.hashes();
    let base = json!({"objective": "Do it", "budget": {"wall": "1h"}});
    let with = |patch: Value| {
        let mut v = base.clone();
        for (k, val) in patch.as_object().unwrap() {
            v[k] = val.clone();
        }
        v.to_string()
    };
    let cases = vec![
        (with(json!({"budget": {"wall": "4x"}})), "budget.wall"),
        (with(json!({"budget": {"wall": "0s"}})), "budget.wall"),
        (
            with(json!({"budget": {"wall": "1h", "memory": "1.5G"}})),
            "budget.memory",
        ),
        (
            with(json!({"budget": {"wall": "1h", "cpu": 0}})),
            "budget.cpu",
        ),
        (
            with(json!({"budget": {"wall": "1h", "processes": 0}})),
            "budget.processes",
        ),
        (
            with(json!({"budget": {"wall": "1h", "gpus": 1}})),
            "budget.gpus",
        ),
        (with(json!({"budget": {"cpu": 5}})), "budget.wall"),
        (
            with(json!({"sandbox": {"read_only": ["relative/path"]}})),
            "sandbox.read_only[0]",
        ),
        (
            with(json!({"sandbox": {"read_write": ["/ok", "nope"]}})),
            "sandbox.read_write[1]",
        ),
        (
            with(json!({"sandbox": {"network": true, "devices": []}})),
            "sandbox.devices",
        ),
        (
            with(json!({"restrict": {"branch": "fixes"}})),
            "restrict.branch",
        ),
        (
            with(json!({"restrict": {"own_thread": true}})),
            "restrict.own_thread",
        ),
        (
            with(json!({"restrict": {"no_push": true}})),
            "restrict.no_push",
        ),
        (with(json!({"hears": ["pat", "nosuchlogin"]})), "hears[1]"),
        (
            with(json!({"runner": "command", "command": ["make", "test"], "hears": ["pat"]})),
            "hears",
        ),
        (with(json!({"runner": "command"})), "command"),
        (with(json!({"command": ["make"]})), "command"),
        (with(json!({"user": "maint"})), "user"),
        (
            with(json!({"user": format!("node-{}", &r.server_code()[..8])})),
            "user",
        ),
        (with(json!({"user": "ci-bot"})), "user"),
        (with(json!({"node": "ABC"})), "node"),
        (with(json!({"node": "g".repeat(40)})), "node"),
        (with(json!({"remote": true})), "remote"),
        (with(json!({"runner": "Bad Name"})), "runner"),
        (with(json!({"objective": "  "})), "objective"),
        (
            with(json!({"to": "0123456789abcdef", "ticket": "0123456789abcdef"})),
            "ticket",
        ),
        (
            base.to_string().replace("\"objective\"", "\"objectiv\""),
            "objectiv",
        ),
    ];
    for (input, field) in cases {
        let run = r.json(&["create", "--input", &input]);
        assert_eq!(run.refused(), field, "{input}: {}", run.stdout);
        assert_eq!(r.hashes(), before, "{input} wrote something");
    }
    let by_pat = r.json(&[
        "create",
        "--user",
        "pat",
        "--objective",
        "x",
        "--wall",
        "1h",
    ]);
    by_pat.refused();
    assert!(
        by_pat.answer()["stopped"]["reason"]
            .as_str()
            .unwrap()
            .contains("needs capability a or s or R")
    );
    assert_eq!(r.hashes(), before);
}

#[test]
fn a_command_record_defaults_to_hearing_no_one() {
    let r = team();
    let out = r
        .json(&[
            "create",
            "--objective",
            "CI",
            "--runner",
            "command",
            "--command",
            "make check",
            "--checkins",
            "dev",
            "--new-branch",
            "--wall",
            "10m",
            "--run-user",
            "ci-dev",
        ])
        .ok();
    assert_eq!(out["fields"]["hears"], json!([]));
    assert_eq!(out["fields"]["command"], json!(["make", "check"]));
    assert_eq!(out["fields"]["user"], "ci-dev");
}

#[test]
fn create_on_a_ticket_and_stop_there() {
    let r = team();
    let added = r.fossil(&["ticket", "add", "title", "Flaky test", "status", "Open"]);
    let ticket = added.split_whitespace().last().unwrap().to_string();
    let out = r
        .json(&[
            "create",
            "--objective",
            "Fix the flaky test",
            "--wall",
            "2h",
            "--ticket",
            &ticket[..12],
        ])
        .ok();
    assert_eq!(out["ticket"].as_str(), Some(ticket.as_str()));
    let record = out["record"].as_str().unwrap().to_string();
    let stop = r.json(&["stop", "--record", &record[..12]]).ok();
    let stop_hash = stop["stop"].as_str().unwrap();
    let said = r.json(&["thread", "--of", &ticket]).ok();
    let hashes: Vec<&str> = said["posts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["hash"].as_str().unwrap())
        .collect();
    assert_eq!(
        hashes,
        vec![record.as_str(), stop_hash],
        "the stop is at the record's place"
    );
    assert!(
        said["posts"][1]["text"]
            .as_str()
            .unwrap()
            .contains(&format!("\"stops\": \"{record}\""))
    );
}

#[test]
fn stop_writes_at_the_records_place_and_is_refused_once_answered() {
    let r = team();
    let record = r
        .json(&["create", "--objective", "Watch dev", "--wall", "1h"])
        .ok_str("record");
    let node = r.server_code();
    let node_login = format!("node-{}", &node[..8]);
    r.user(&node_login, "4");
    let response = |user: &str| {
        let block = format!(
            "```json\n{}\n```\n",
            json!({"ocx": 1, "kind": "response", "node": node, "answers": record, "outcome": "exited", "note": "exit 0"})
        );
        ForumPost {
            date: &artifact::now(),
            reply: Some((&record, &record)),
            title: None,
            mimetype: "text/x-markdown",
            user,
            text: &block,
        }
        .compose()
    };
    r.import_as("pat", &[response(&node_login)]);
    let dry = r.json(&["stop", "--record", &record, "--dry-run"]).ok();
    assert!(
        dry["stop"].is_null(),
        "a forged response (U card says the node, pat sent it) answers nothing"
    );
    r.import_as(&node_login, &[response("anyone")]);
    let before = r.hashes();
    let run = r.json(&["stop", "--record", &record]);
    assert_eq!(run.refused(), "record");
    assert!(
        run.answer()["stopped"]["reason"]
            .as_str()
            .unwrap()
            .contains("answered")
    );
    assert_eq!(r.hashes(), before);
}

#[test]
fn an_edit_of_a_message_is_not_a_message() {
    let r = team();
    let record = r
        .json(&["create", "--objective", "Watch dev", "--wall", "1h"])
        .ok_str("record");
    let text = text_of(&r, &record);
    let edit = format!(
        "D {}\nG {record}\nH Watch\\sdev\nN text/x-markdown\nP {record}\nU admin\nW {}\n{text}\n",
        artifact::now(),
        text.len()
    );
    let edit = finish(edit.into_bytes());
    let edit_hash = r.import_as("admin", &[edit]).remove(0);
    let run = r.json(&["stop", "--record", &edit_hash]);
    assert_eq!(run.refused(), "record");
    assert!(
        run.answer()["stopped"]["reason"]
            .as_str()
            .unwrap()
            .contains("holds no record")
    );
}

fn finish(mut body: Vec<u8>) -> Vec<u8> {
    use md5::Digest;
    let z = hex::encode(md5::Md5::digest(&body));
    body.extend_from_slice(format!("Z {z}\n").as_bytes());
    body
}

#[test]
fn a_dry_run_of_each_writing_tool_writes_nothing_and_logs_what_it_would() {
    let r = team();
    let record = r
        .json(&["create", "--objective", "Watch dev", "--wall", "1h"])
        .ok_str("record");
    let checkin = r.commit_as("pat", "a.txt", "a", None);
    let before = r.hashes();
    for args in [
        vec!["create", "--objective", "More", "--wall", "1h", "--dry-run"],
        vec!["stop", "--record", &record, "--dry-run"],
        vec![
            "audit",
            "--checkin",
            &checkin,
            "--verdict",
            "pass",
            "--reason",
            "ok",
            "--against",
            "PLAN.md",
            "--dry-run",
        ],
        vec!["post", "--to", &record, "--text", "hi", "--dry-run"],
    ] {
        let a = r.json(&args).answer();
        assert_eq!(a["ok"], true, "{args:?}: {a:#}");
        assert_eq!(a["dry_run"], true);
        let store = a["log"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["op"] == "store")
            .expect("says what it would store");
        assert_eq!(store["done"], false);
        assert_eq!(r.hashes(), before, "{args:?} wrote something");
    }
}

fn verdict_tag(user_card: &str, checkin: &str, value: &str) -> Vec<u8> {
    artifact::control(
        &artifact::now(),
        user_card,
        &[TagChange {
            op: '+',
            name: "audited".into(),
            target: checkin.into(),
            value: Some(value.into()),
        }],
    )
}

#[test]
fn verdicts_count_by_sender_never_by_u_card() {
    let r = team();
    let checkin = r.commit_as("pat", "a.txt", "a", None);
    r.json(&[
        "audit",
        "--user",
        "reviewer",
        "--checkin",
        &checkin,
        "--verdict",
        "pass",
        "--reason",
        "reads well",
        "--against",
        "PLAN.md",
    ])
    .ok();
    let own = r.json(&[
        "audit",
        "--user",
        "pat",
        "--checkin",
        &checkin,
        "--verdict",
        "pass",
        "--reason",
        "mine",
        "--against",
        "PLAN.md",
    ]);
    assert_eq!(own.refused(), "checkin");
    r.import_as(
        "pat",
        &[verdict_tag(
            "maint",
            &checkin,
            "pass: trust me (against PLAN.md)",
        )],
    );
    r.import_as(
        "maint",
        &[verdict_tag(
            "pat",
            &checkin,
            "fail: too long (against PLAN.md)",
        )],
    );
    let (yes, no) = verdicts(&r, &checkin);
    assert_eq!(
        yes,
        vec![
            (
                "reviewer".to_string(),
                "pass: reads well (against PLAN.md)".to_string()
            ),
            (
                "maint".to_string(),
                "fail: too long (against PLAN.md)".to_string()
            ),
        ],
        "maint's tag counts though its U card says pat"
    );
    assert_eq!(no.len(), 1);
    assert_eq!(no[0].0, "pat", "pat's own, though its U card says maint");
    assert!(no[0].1.contains("author's own"));
}

#[test]
fn only_a_senders_latest_verdict_counts() {
    let r = team();
    let checkin = r.commit_as("pat", "a.txt", "a", None);
    r.json(&[
        "audit",
        "--user",
        "reviewer",
        "--checkin",
        &checkin,
        "--verdict",
        "pass",
        "--reason",
        "first look",
        "--against",
        "PLAN.md",
    ])
    .ok();
    r.json(&[
        "audit",
        "--user",
        "reviewer",
        "--checkin",
        &checkin,
        "--verdict",
        "fail",
        "--reason",
        "second look",
        "--against",
        "PLAN.md",
    ])
    .ok();
    let (yes, _) = verdicts(&r, &checkin);
    assert_eq!(
        yes,
        vec![(
            "reviewer".to_string(),
            "fail: second look (against PLAN.md)".to_string()
        )]
    );
}

#[test]
fn a_verdict_against_a_record_counts_only_for_its_branches() {
    let r = team();
    let on_dev = r
        .json(&[
            "create",
            "--objective",
            "Review dev",
            "--checkins",
            "dev",
            "--new-branch",
            "--wall",
            "1h",
        ])
        .ok_str("record");
    let trunk_checkin = r.commit_as("pat", "a.txt", "a", None);
    let dev_checkin = r.commit_as("pat", "b.txt", "b", Some("dev"));
    for c in [&trunk_checkin, &dev_checkin] {
        r.json(&[
            "audit",
            "--user",
            "reviewer",
            "--checkin",
            c,
            "--verdict",
            "pass",
            "--reason",
            "ok",
            "--against",
            &on_dev,
        ])
        .ok();
    }
    let (yes, _) = verdicts(&r, &dev_checkin);
    assert_eq!(yes.len(), 1);
    let (yes, no) = verdicts(&r, &trunk_checkin);
    assert!(yes.is_empty());
    assert!(no[0].1.contains("not about its branch"), "{no:?}");
    r.import_as(
        "maint",
        &[verdict_tag("maint", &trunk_checkin, "looks good to me")],
    );
    let (_, no) = verdicts(&r, &trunk_checkin);
    assert!(
        no.iter()
            .any(|(from, why)| from == "maint" && why.starts_with("malformed")),
        "{no:?}"
    );
    let unaudited = r.json(&["unaudited"]).ok();
    let listed: Vec<&str> = unaudited["checkins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["checkin"].as_str().unwrap())
        .collect();
    assert_eq!(listed, vec![trunk_checkin.as_str()]);
    assert_eq!(unaudited["count"], 1);
    let on_dev_only = r.json(&["unaudited", "--branch", "dev"]).ok();
    assert_eq!(on_dev_only["count"], 0);
    let against_nothing = r.json(&[
        "audit",
        "--user",
        "reviewer",
        "--checkin",
        &trunk_checkin,
        "--verdict",
        "pass",
        "--reason",
        "ok",
        "--against",
        &"a".repeat(64),
    ]);
    assert_eq!(against_nothing.refused(), "against");
}

#[test]
fn unaudited_lists_oldest_first_and_ignores_the_authors_own() {
    let r = team();
    let first = r.commit_as("pat", "a.txt", "a", None);
    let second = r.commit_as("reviewer", "b.txt", "b", None);
    r.import_as(
        "pat",
        &[verdict_tag(
            "pat",
            &first,
            "pass: mine is fine (against PLAN.md)",
        )],
    );
    let out = r.json(&["unaudited"]).ok();
    let listed: Vec<(&str, &str)> = out["checkins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["checkin"].as_str().unwrap(),
                c["sender"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![(first.as_str(), "pat"), (second.as_str(), "reviewer")]
    );
    r.json(&[
        "audit",
        "--user",
        "pat",
        "--checkin",
        &second,
        "--verdict",
        "pass",
        "--reason",
        "ok",
        "--against",
        "PLAN.md",
    ])
    .ok();
    let out = r.json(&["unaudited"]).ok();
    assert_eq!(out["count"], 1);
    assert_eq!(out["checkins"][0]["checkin"].as_str(), Some(first.as_str()));
}

#[test]
fn an_administrator_answers_lost_once_the_wall_has_passed() {
    let r = team();
    let long = r
        .json(&["create", "--objective", "Long", "--wall", "1h"])
        .ok_str("record");
    let early = r.json(&["lost", "--record", &long]);
    assert_eq!(early.refused(), "record");
    assert!(
        early.answer()["stopped"]["reason"]
            .as_str()
            .unwrap()
            .contains("wall passes at")
    );
    let short = r
        .json(&["create", "--objective", "Short", "--wall", "1s"])
        .ok_str("record");
    std::thread::sleep(std::time::Duration::from_millis(2100));
    assert_eq!(
        r.json(&["lost", "--user", "pat", "--record", &short]).code,
        1,
        "only an administrator"
    );
    let out = r
        .json(&["lost", "--user", "maint", "--record", &short])
        .ok();
    assert_eq!(
        r.sender(out["response"].as_str().unwrap()).as_deref(),
        Some("maint")
    );
    let stop = r.json(&["stop", "--record", &short]);
    assert_eq!(stop.refused(), "record", "the record is answered");
    assert_eq!(
        r.json(&["lost", "--record", &short]).refused(),
        "record",
        "answered once"
    );
}

#[test]
fn a_record_naming_a_branch_the_repository_lacks_is_refused_unless_it_will_be_made() {
    let r = team();
    r.commit_as("admin", "README", "start\n", Some("dev"));
    let create = |extra: &[&str]| {
        let mut args = vec!["create", "--objective", "Review", "--wall", "1h"];
        args.extend_from_slice(extra);
        r.json(&args)
    };
    let before = r.hashes();
    let typo = create(&["--checkins", "dve"]);
    assert_eq!(typo.refused(), "checkins[0]");
    assert!(
        typo.answer()["next_step"]
            .as_str()
            .unwrap()
            .contains("--new-branch"),
        "{:#}",
        typo.answer()
    );
    assert_eq!(
        create(&["--checkins", "dev", "--checkins", "bad branch..name"]).refused(),
        "checkins[1]"
    );
    assert_eq!(
        create(&["--checkins", "dev", "--no-password", "--branch", "fixes"]).refused(),
        "restrict.branch"
    );
    assert_eq!(r.hashes(), before, "a refusal writes nothing");
    create(&["--checkins", "dev"]).ok();
    create(&[
        "--checkins",
        "dev",
        "--no-password",
        "--branch",
        "fixes",
        "--new-branch",
    ])
    .ok();
    assert_eq!(
        create(&["--checkins=-x", "--new-branch"]).refused(),
        "checkins[0]",
        "no name a branch cannot have, made later or not"
    );
}
