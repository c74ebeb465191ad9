//! Scheduled wakes end to end: a record whose `wake` holds a schedule of a
//! few seconds, run by a real node on a served repository, its runner a
//! small program of ours noting each line it reads and when; the node
//! stopped over slots and started again; and `wake` values the node does
//! not know, refused naming `wake`.

use crate::node::EchoNode;
use crate::support::Served;
use serde_json::{Value, json};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Notes each line it reads as `{"t": SECONDS, "line": LINE}`, the time it
/// read it at.
const NOTING: &str = r#"#!/usr/bin/python3
import sys, os, json, time
log = os.environ["OCX_TEST_LOG"]
for line in sys.stdin:
    with open(log, "a") as f:
        f.write(json.dumps({"t": time.time(), "line": line.rstrip("\n")}) + "\n")
"#;

/// The schedule's period in the test, in seconds.
const EVERY: i64 = 5;

/// A line the run read of its schedule: its slot, as seconds since
/// 1970, `missed` as given, and when the run read it.
#[derive(Debug, Clone, PartialEq)]
struct Slot {
    at: i64,
    missed: Option<u64>,
    read_at: f64,
}

/// The schedule's lines the run read so far, in the order it read them.
fn slots(out: &std::path::Path) -> Vec<Slot> {
    let text = std::fs::read_to_string(out.join("log")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let noted: Value = serde_json::from_str(l).ok()?;
            let line: Value = serde_json::from_str(noted["line"].as_str()?).ok()?;
            let at = seconds_of(line["schedule"].as_str()?)?;
            Some(Slot {
                at,
                missed: line["missed"].as_u64(),
                read_at: noted["t"].as_f64()?,
            })
        })
        .collect()
}

/// Seconds since 1970 of a slot's time as a line gives it
/// (`YYYY-MM-DDTHH:MM:SSZ`), and given back the same by the node's own
/// writer.
fn seconds_of(text: &str) -> Option<i64> {
    let n = |r: std::ops::Range<usize>| text.get(r)?.parse::<i64>().ok();
    let month = time::Month::try_from(u8::try_from(n(5..7)?).ok()?).ok()?;
    let date = time::Date::from_calendar_date(
        i32::try_from(n(0..4)?).ok()?,
        month,
        u8::try_from(n(8..10)?).ok()?,
    )
    .ok()?;
    let at = date.midnight().assume_utc().unix_timestamp()
        + n(11..13)? * 3600
        + n(14..16)? * 60
        + n(17..19)?;
    (ocx::node::schedule::time_of(at) == text).then_some(at)
}

/// Waits (90 s at most) until the run read `n` of its schedule's lines.
fn until_slots(out: &std::path::Path, n: usize) -> Vec<Slot> {
    let until = Instant::now() + Duration::from_secs(90);
    loop {
        let got = slots(out);
        if got.len() >= n {
            return got;
        }
        assert!(
            Instant::now() < until,
            "only {} slots came: {got:?}",
            got.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// How late a slot may be read and still count as on time, on a busy host.
const ON_TIME: f64 = 20.0;

#[test]
fn a_schedule_wakes_its_run_on_time_and_a_node_down_over_slots_gives_the_latest_once_marked() {
    let s = Served::new().echo(NOTING, json!({})).start();
    let out = s.out.to_str().unwrap().to_string();
    let asked_at = now();
    let created = s
        .repo
        .json(&crate::support::echo_args(
            "Wake on a schedule",
            "10m",
            &["--read-write", &out, "--every", "5s"],
        ))
        .ok();
    assert_eq!(
        created["fields"]["wake"],
        json!([{"on": "schedule", "every": "5s"}]),
        "the record states its schedule"
    );
    let first = until_slots(&s.out, 2);
    for slot in &first {
        assert_eq!(slot.at % EVERY, 0, "a slot is a multiple of 5s: {first:?}");
        assert!(
            slot.at as f64 > asked_at,
            "no slot from before the run opened: {first:?}"
        );
        assert!(
            slot.read_at >= slot.at as f64,
            "never read before its time: {first:?}"
        );
        assert!(
            slot.read_at < slot.at as f64 + ON_TIME,
            "read on time: {first:?}"
        );
        assert_eq!(slot.missed, None, "on time, nothing missed: {first:?}");
    }
    assert_eq!(
        first[1].at - first[0].at,
        EVERY,
        "one slot after the other: {first:?}"
    );
    let record = created["record"].as_str().unwrap();
    let asked = now();
    let run = s.repo.json(&["run", "--record", record]).ok();
    let next = run["next_slot"].as_str().and_then(seconds_of);
    assert!(
        next.is_some_and(|n| n % EVERY == 0 && n as f64 > asked - 1.0),
        "the run's page shows its next slot: {run:#}"
    );
    let console = s.repo.json(&["console"]).ok();
    let card = &console["running"][0];
    assert_eq!(card["record"], record, "{console:#}");
    assert!(
        card["next_slot"]
            .as_str()
            .and_then(seconds_of)
            .is_some_and(|n| n % EVERY == 0),
        "the console's card shows it too: {console:#}"
    );

    s.repo.json(&["node", "stop"]).ok();
    let stopped_at = now();
    std::thread::sleep(Duration::from_secs(11));
    let restarted_at = now();
    s.repo.json(&["node", "start"]).ok();
    let after_stop = |all: &[Slot]| -> Vec<Slot> {
        all.iter()
            .filter(|x| x.at as f64 > stopped_at)
            .cloned()
            .collect()
    };
    let until = Instant::now() + Duration::from_secs(90);
    let later = loop {
        let later = after_stop(&slots(&s.out));
        if later.len() >= 2 {
            break later;
        }
        assert!(
            Instant::now() < until,
            "no slots after the restart: {:?}",
            slots(&s.out)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let marked = &later[0];
    assert!(
        marked.read_at >= restarted_at,
        "given once the node is back: {later:?}"
    );
    assert!(
        marked.missed.is_some_and(|n| n >= 2),
        "the slots the node was down over stand in one line, marked: {later:?}"
    );
    assert!(
        marked.at as f64 <= restarted_at + ON_TIME,
        "the latest slot due: {later:?}"
    );
    assert_eq!(
        later[1].at - marked.at,
        EVERY,
        "then each slot again: {later:?}"
    );
    assert_eq!(later[1].missed, None, "on time again: {later:?}");
    assert!(
        later[1].read_at < later[1].at as f64 + ON_TIME,
        "read on time: {later:?}"
    );
    let all = slots(&s.out);
    let mut times: Vec<i64> = all.iter().map(|x| x.at).collect();
    times.dedup();
    assert_eq!(times.len(), all.len(), "no slot given twice: {all:?}");
    assert!(
        times.windows(2).all(|w| w[0] < w[1]),
        "in their order: {all:?}"
    );
}

#[test]
fn a_wake_the_node_does_not_know_is_refused_naming_wake() {
    let s = EchoNode::new();
    let node = s.node.repo.server_code();
    for (wake, field) in [
        (json!([{"on": "schedule", "every": "2s"}]), "wake[0].every"),
        (
            json!([{"on": "schedule", "every": "soon"}]),
            "wake[0].every",
        ),
        (json!([{"on": "moon"}]), "wake[0].on"),
        (
            json!([{"on": "schedule", "every": "1h", "jitter": "5m"}]),
            "wake[0]",
        ),
        (json!({"on": "schedule", "every": "1h"}), "wake"),
        (
            json!([{"on": "schedule", "cron": "0 3 * *"}]),
            "wake[0].cron",
        ),
        (
            json!([{"on": "schedule", "cron": "0 3 * * *", "zone": "Mars/Olympus"}]),
            "wake[0].zone",
        ),
    ] {
        let record = forged_with_wake(&s, &node, &wake);
        let (outcome, note, _) = s.response(&record).expect("answered");
        assert_eq!(outcome, "refused", "{wake}");
        assert!(note.starts_with(field), "{wake}: {note}");
    }
    let stop = s
        .node
        .repo
        .json(&crate::support::echo_args(
            "too often",
            "1m",
            &["--every", "1s"],
        ))
        .refused();
    assert!(stop.contains("wake[0].every"), "{stop}");
}

/// A record of the echo runner whose `wake` is `wake`, written by hand as
/// admin (so nothing checks it before the node does); its hash.
fn forged_with_wake(s: &EchoNode, node: &str, wake: &Value) -> String {
    let record = json!({"ocx": 1, "kind": "record", "node": node,
        "user": format!("echo-{:06x}", rand_six()), "runner": "echo",
        "objective": "forged", "checkins": [], "hears": [], "remote": false, "restrict": {},
        "sandbox": {"network": true, "read_only": [], "read_write": [s.out]},
        "budget": {"wall": "1m"}, "wake": wake});
    crate::node::record_by_hand(&s.node.repo, "admin", &record)
}

/// Six hex digits of a new login, different for each record.
fn rand_six() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0xa0a0a0);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

#[test]
fn a_pattern_carries_its_schedule_into_the_record_and_the_list() {
    let s = EchoNode::new();
    let repo = &s.node.repo;
    crate::patterns::pattern_page(
        repo,
        "nightly",
        &json!({"runner": "echo", "objective": "Each night, read the day's check-ins",
            "hears": [], "budget": {"wall": "30d"}, "wake": [{"on": "schedule", "every": "1d"}]}),
    );
    let f = repo
        .json(&["create", "--pattern", "nightly", "--dry-run"])
        .ok()["fields"]
        .clone();
    assert_eq!(
        f["wake"],
        json!([{"on": "schedule", "every": "1d"}]),
        "{f:#}"
    );
    let f = repo
        .json(&[
            "create",
            "--pattern",
            "nightly",
            "--every",
            "1h",
            "--dry-run",
        ])
        .ok()["fields"]
        .clone();
    assert_eq!(
        f["wake"],
        json!([{"on": "schedule", "every": "1d"}, {"on": "schedule", "every": "1h"}]),
        "the call's schedule added to the pattern's: {f:#}"
    );
    let listed = repo.json(&["patterns"]).ok();
    assert_eq!(
        listed["patterns"][0]["wake"],
        json!([{"on": "schedule", "every": "1d"}]),
        "{listed:#}"
    );
}

#[test]
fn create_writes_a_cron_line_in_its_zone_and_refuses_one_that_does_not_read() {
    let s = EchoNode::new();
    let repo = &s.node.repo;
    let f = repo
        .json(&[
            "create",
            "--runner",
            "echo",
            "--objective",
            "Weekday mornings",
            "--wall",
            "1m",
            "--cron",
            "0 3 * * 1-5",
            "--zone",
            "Europe/Paris",
            "--dry-run",
        ])
        .ok()["fields"]
        .clone();
    assert_eq!(
        f["wake"],
        json!([{"on": "schedule", "cron": "0 3 * * 1-5", "zone": "Europe/Paris"}]),
        "{f:#}"
    );
    let bad = |extra: &[&str]| {
        let mut args = crate::support::echo_args("x", "1m", &["--dry-run"]);
        args.extend_from_slice(extra);
        repo.json(&args).refused()
    };
    assert!(bad(&["--cron", "0 3 * * * *"]).contains("wake[0].cron"));
    assert!(bad(&["--cron", "0 3 * * *", "--zone", "Paris"]).contains("wake[0].zone"));
    assert!(bad(&["--zone", "UTC"]).contains("zone"));
}
