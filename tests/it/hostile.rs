//! Hostile input: every reader of what a poster, a visitor or a run can
//! write (message blocks, records, stops, responses, verdict values,
//! artifacts and their cards, runner pages, the web page's request, MCP
//! arguments, a delivery's text, Ollama's replies to OCX's agent and a
//! run's lines it reads) answers a refusal naming the field and
//! never panics. Property tests generate the text; spec-fixtures/hostile
//! artifacts and their cards, runner pages, the web page's request and the
//! git export's, MCP arguments, a delivery's text) answers a refusal naming
//! the field and never panics. Property tests generate the text; spec-fixtures/hostile
//! keeps the cases found, each a post whose first line says what its
//! block reads as; and a real node is sent them all through `fossil
//! server`, then acts on the next good record at once.

use crate::node::EchoNode;
use crate::support::{self, Repo};
use md5::{Digest, Md5};
use ocx::context::{Context, Who};
use ocx::entry::cgi::{self, Request};
use ocx::fossil::artifact;
use ocx::node::{inbox, runner};
use ocx::protocol::kinds::{self, Kind, Memory};
use ocx::protocol::message::{self, Reading};
use ocx::protocol::verdict;
use ocx::registry::{self, TOOLS};
use ocx::stop::Stop;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// A server-code standing for the node in the corpus's records.
const NODE: &str = "6cbe285e95a3a124176569ee9243f2a4e9ecdc20";

/// Pieces hostile text is made of: multibyte characters, fences, quotes,
/// escapes, NUL and other controls, numbers past every limit.
const PIECES: &[&str] = &[
    "é",
    "😀",
    "\u{301}",
    "\u{202e}",
    "\u{feff}",
    "\u{200b}",
    "\u{3000}",
    "\0",
    "\u{7}",
    "\n",
    "\r\n",
    "\t",
    " ",
    "```",
    "~~~",
    "```json\n",
    "\n```\n",
    "> ",
    "- ",
    "\\",
    "\\u0000",
    "\\ud800",
    "\"",
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    "\"ocx\": 1",
    "\"kind\": \"record\"",
    "-1",
    "0",
    "18446744073709551616",
    "-9223372036854775809",
    "1e400",
    "1.5",
    "4h",
    "s",
    "G",
    "a",
];

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Text made of hostile pieces and any characters.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(prop::sample::select(PIECES), 0..24).prop_map(|p| p.concat()),
        any::<String>(),
        (
            "[0-9a-z]{0,6}",
            0usize..8,
            prop::sample::select(&["é", "😀", "\u{301}", "\u{10ffff}"][..])
        )
            .prop_map(|(base, at, c)| {
                let mut s = base;
                let at = at.min(s.len());
                s.insert_str(at, c);
                s
            }),
    ]
}

/// A JSON value of any kind, hostile text and numbers of every size among them.
fn hostile_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        hostile().prop_map(Value::String),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        Just(Value::Null),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((hostile(), inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn good_record(node: &str) -> Value {
    json!({"ocx": 1, "kind": "record", "node": node, "user": "hostile-run",
        "runner": "nosuch", "objective": "Hostile case.", "checkins": ["trunk"],
        "hears": [], "restrict": {}, "sandbox": {"network": false, "read_only": [], "read_write": []},
        "budget": {"wall": "5m", "cpu": 60, "memory": "1G", "processes": 8}})
}

/// The paths of a record a poster fills in.
const RECORD_PATHS: &[&str] = &[
    "ocx",
    "kind",
    "node",
    "user",
    "runner",
    "objective",
    "checkins",
    "hears",
    "remote",
    "restrict",
    "restrict.branch",
    "restrict.no_password",
    "sandbox",
    "sandbox.network",
    "sandbox.read_only",
    "budget",
    "budget.wall",
    "budget.cpu",
    "budget.memory",
    "budget.processes",
    "command",
];

fn set_path(v: &mut Value, path: &str, to: Value) {
    match path.split_once('.') {
        Some((head, rest)) => set_path(&mut v[head], rest, to),
        None => v[path] = to,
    }
}

fn fenced(v: &Value) -> String {
    format!("Hostile.\n\n```json\n{v}\n```\n")
}

/// What `text`, as a post, reads as: `none`, `other`, `known`, or
/// `refused FIELD` / `malformed FIELD`, as the node reads it.
fn reading(text: &[u8]) -> String {
    match message::read(text) {
        Reading::NotAMessage { .. } => "none".into(),
        Reading::Refused { field, reason } => {
            assert!(!reason.is_empty());
            format!("malformed {field}")
        }
        Reading::Message { message } => match kinds::read(&message) {
            Kind::Known(_) => "known".into(),
            Kind::Other => "other".into(),
            Kind::Refused(_, p) => format!("refused {}", p.field),
            Kind::Malformed(p) => format!("malformed {}", p.field),
        },
    }
}

/// Asserts a reading that refuses names a field and gives a short reason.
fn names_its_field(got: &str) {
    if let Some(field) = got
        .strip_prefix("refused ")
        .or_else(|| got.strip_prefix("malformed "))
    {
        assert!(
            !field.trim().is_empty(),
            "a refusal names its field: {got:?}"
        );
        assert!(field.chars().count() <= 201, "a field is clipped: {got:?}");
    }
}

/// A forum post holding `text` as its W card, as raw bytes (they need not
/// be UTF-8), by `user`.
fn forum_post(title: &str, user: &str, text: &[u8]) -> Vec<u8> {
    let mut b = format!(
        "D {}\nH {}\nN text/x-markdown\nU {}\nW {}\n",
        artifact::now(),
        artifact::fossilize(title),
        artifact::fossilize(user),
        text.len()
    )
    .into_bytes();
    b.extend_from_slice(text);
    b.push(b'\n');
    let z = hex::encode(Md5::digest(&b));
    b.extend_from_slice(format!("Z {z}\n").as_bytes());
    b
}

/// An artifact of the given card lines, its Z card right.
fn with_z(lines: &[u8]) -> Vec<u8> {
    let mut b = lines.to_vec();
    let z = hex::encode(Md5::digest(&b));
    b.extend_from_slice(format!("Z {z}\n").as_bytes());
    b
}

/// Every reader that takes what a post can hold, given `text`. Panics
/// only when a reader does.
fn every_reader(text: &[u8], cx: &Context) {
    names_its_field(&reading(text));
    let lossy = String::from_utf8_lossy(text);
    let _ = runner::read_page(text).map_err(|p| assert!(!p.field.is_empty()));
    for line in lossy.lines() {
        let _ = verdict::parse(line);
        let _ = kinds::wall_seconds(line);
        let _ = kinds::memory_bytes(&Memory::Text(line.to_string()));
    }
    let _ = artifact::parse(text);
    let post = forum_post("hostile", "pat", text);
    let parsed = artifact::parse(&post).expect("a well-formed post parses");
    assert_eq!(parsed.text.as_deref(), Some(text));
    assert_eq!(artifact::defossilize(&artifact::fossilize(&lossy)), lossy);
    let line = inbox::escape(&lossy);
    assert!(!line.contains(['\n', '\r']), "a delivery is one line");
    assert_eq!(inbox::unescape(&line), lossy);
    let _ = inbox::unescape(&lossy);
    mcp_arguments(text, cx);
    for block in message::json_blocks(&lossy) {
        mcp_arguments(block.as_bytes(), cx);
    }
}

/// MCP arguments as a client sends them: parsed, checked, each tool's
/// reader given them, and `post`'s and `thread`'s calls made (as dry runs).
fn mcp_arguments(bytes: &[u8], cx: &Context) {
    let input = ocx::input::parse_input(bytes);
    if let Ok(v) = &input {
        if let Err(stop) = ocx::input::check_text(v, "") {
            assert!(stop.field.is_some(), "{stop:?}");
        }
        for tool in TOOLS {
            let _ = tool.check(v);
        }
    }
    for name in ["post", "thread", "read_post"] {
        let _ = registry::call_shown(name, input.clone(), cx, true, registry::Shown::Both);
    }
}

fn context(repo: &Repo) -> Context {
    Context::new(
        Some(repo.file.clone()),
        repo.dir.path().to_path_buf(),
        Who::Local {
            user: Some("admin".into()),
        },
    )
    .with_fossil(|| Err(Stop::new("no fossil in these tests")))
}

fn corpus(node: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("spec-fixtures/hostile");
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(&p).unwrap();
            let text = replace(&bytes, b"{{node}}", node.as_bytes());
            (name, text)
        })
        .collect();
    out.sort();
    out
}

fn replace(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

/// What a corpus case's first line says its block reads as (a newline
/// in it written `\n`).
fn expected(text: &[u8]) -> String {
    let first = text.split(|b| *b == b'\n').next().unwrap();
    let line = String::from_utf8(first.to_vec()).unwrap();
    inbox::unescape(
        line.strip_prefix("expect: ")
            .expect("each case's first line says what it reads as"),
    )
}

#[test]
fn every_reader_takes_every_hostile_message_of_the_corpus() {
    let repo = Repo::new();
    let cx = context(&repo);
    let cases = corpus(NODE);
    assert!(cases.len() >= 30, "the corpus is there ({})", cases.len());
    for (name, text) in &cases {
        let got = reading(text);
        assert_eq!(got, expected(text), "{name}");
        every_reader(text, &cx);
        let page = web_request(&repo, "/thread", "application/x-www-form-urlencoded", text);
        assert!(page.status < 500, "{name}: {}", page.status);
    }
}

fn web_request(repo: &Repo, path: &str, content_type: &str, body: &[u8]) -> cgi::Response {
    let request = Request {
        repository: Some(repo.file.to_string_lossy().into_owned()),
        method: "POST".into(),
        path_info: path.into(),
        content_length: Some(body.len().to_string()),
        content_type: Some(content_type.into()),
        query: "json".into(),
        ..Request::default()
    };
    cgi::respond(
        &request,
        &mut &body[..],
        || Err(Stop::new("no fossil in these tests")),
        None,
    )
}

#[test]
fn a_record_field_given_hostile_json_is_refused_naming_it() {
    TestRunner::new(config(768))
        .run(
            &(prop::sample::select(RECORD_PATHS), hostile_value()),
            |(path, value)| {
                let mut record = good_record(NODE);
                set_path(&mut record, path, value.clone());
                let got = reading(fenced(&record).as_bytes());
                names_its_field(&got);
                let wall_reads = value.as_str().and_then(kinds::wall_seconds).is_some();
                if path == "budget.wall" && !wall_reads {
                    prop_assert!(
                        got == "refused budget.wall" || got.starts_with("malformed budget.wall"),
                        "{}",
                        got
                    );
                }
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn a_wall_with_a_multibyte_character_anywhere_is_refused_naming_budget_wall() {
    TestRunner::new(config(512))
        .run(
            &(
                "[0-9]{0,6}[smhd]?",
                0usize..8,
                prop::sample::select(&["é", "😀", "\u{301}", "\u{7ff}"][..]),
            ),
            |(base, at, c)| {
                let mut wall = base;
                wall.insert_str(at.min(wall.len()), c);
                let mut record = good_record(NODE);
                record["budget"]["wall"] = json!(wall);
                prop_assert_eq!(reading(fenced(&record).as_bytes()), "refused budget.wall");
                let mut record = good_record(NODE);
                record["budget"]["memory"] = json!(wall);
                prop_assert_eq!(reading(fenced(&record).as_bytes()), "refused budget.memory");
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn numbers_of_every_size_are_refused_naming_their_field() {
    let numbers = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| format!("{n:e}")),
        "-?[0-9]{19,40}",
        "-?[0-9]{1,3}e-?[0-9]{1,4}",
    ];
    TestRunner::new(config(512))
        .run(
            &(
                prop::sample::select(&["cpu", "memory", "processes", "wall"][..]),
                numbers,
            ),
            |(limit, number)| {
                let mut record = good_record(NODE);
                record["budget"][limit] = json!("NUMBER");
                let text = fenced(&record).replace("\"NUMBER\"", &number);
                let got = reading(text.as_bytes());
                names_its_field(&got);
                prop_assert!(
                    got == "none" || got == "known" || got.contains(&format!(" budget.{limit}")),
                    "{} {}",
                    text,
                    got
                );
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn any_bytes_read_as_a_message_or_not_one() {
    let bytes = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..600),
        prop::collection::vec(any::<u8>(), 0..300).prop_map(|b| {
            let mut t = b"```json\n{\"ocx\": 1, \"kind\": \"record\", \"user\": \"".to_vec();
            t.extend_from_slice(&b);
            t.extend_from_slice(b"\"}\n```\n");
            t
        }),
        hostile().prop_map(String::into_bytes),
        prop::collection::vec(prop::sample::select(PIECES), 0..80).prop_map(|p| format!(
            "```json\n{}",
            p.concat()
        )
        .into_bytes()),
    ];
    TestRunner::new(config(1024))
        .run(&bytes, |b| {
            names_its_field(&reading(&b));
            let _ = runner::read_page(&b);
            let _ = artifact::parse(&b);
            Ok(())
        })
        .unwrap();
}

#[test]
fn stops_and_responses_of_hostile_json_name_their_field() {
    TestRunner::new(config(512))
        .run(
            &(
                prop::sample::select(&["stops", "answers", "outcome", "note", "node"][..]),
                hostile_value(),
            ),
            |(field, value)| {
                for kind in ["stop", "response"] {
                    let mut m = json!({"ocx": 1, "kind": kind, "node": NODE, "stops": "ab",
                        "answers": "ab", "outcome": "exited", "note": ""});
                    m[field] = value.clone();
                    names_its_field(&reading(fenced(&m).as_bytes()));
                }
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn verdict_values_walls_and_memories_of_any_text_read_or_not() {
    let values = prop_oneof![
        hostile(),
        hostile().prop_map(|s| format!("pass: {s}")),
        (hostile(), hostile()).prop_map(|(a, b)| format!("fail: {a} (against {b})")),
        (hostile(), hostile()).prop_map(|(a, b)| format!("pass: {a} (against {b}")),
    ];
    TestRunner::new(config(1024))
        .run(&values, |v| {
            if let Some(parsed) = verdict::parse(&v) {
                prop_assert!(!parsed.reason.trim().is_empty());
                prop_assert_eq!(
                    verdict::parse(&verdict::format(
                        parsed.pass,
                        &parsed.reason,
                        &parsed.against
                    )),
                    Some(parsed)
                );
            }
            let _ = kinds::wall_seconds(&v);
            let _ = kinds::memory_bytes(&Memory::Text(v.clone()));
            Ok(())
        })
        .unwrap();
}

#[test]
fn artifacts_of_hostile_cards_parse_or_are_refused() {
    let card = prop_oneof![
        (
            prop::sample::select(&b"ABCDEFGHIJKLMNPQRTUW"[..]),
            hostile()
        )
            .prop_map(|(l, a)| format!("{} {a}\n", l as char).into_bytes()),
        prop_oneof![
            any::<u64>().prop_map(|n| n.to_string()),
            Just(usize::MAX.to_string()),
            Just("-1".to_string()),
            Just("18446744073709551616".to_string()),
            "[0-9]{1,3}",
        ]
        .prop_map(|n| format!("W {n}\nsome text\n").into_bytes()),
        prop::collection::vec(any::<u8>(), 0..40),
    ];
    TestRunner::new(config(1024))
        .run(&prop::collection::vec(card, 0..6), |cards| {
            let bytes = with_z(&cards.concat());
            if let Some(p) = artifact::parse(&bytes) {
                for c in &p.cards {
                    let _ = p.arg(c.letter);
                }
            }
            let _ = artifact::parse(&cards.concat());
            Ok(())
        })
        .unwrap();
}

#[test]
fn stored_blobs_and_deltas_of_any_bytes_expand_or_are_refused() {
    let delta = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..100),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(size, count, offset)| {
            let b64 = |mut n: u64| {
                const D: &[u8] =
                    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~";
                let mut s = vec![D[(n & 63) as usize]];
                n >>= 6;
                while n > 0 {
                    s.insert(0, D[(n & 63) as usize]);
                    n >>= 6;
                }
                String::from_utf8(s).unwrap()
            };
            format!(
                "{}\n{}@{},{}:ab0;",
                b64(size),
                b64(count),
                b64(offset),
                b64(count)
            )
            .into_bytes()
        }),
    ];
    TestRunner::new(config(1024))
        .run(
            &(delta, prop::collection::vec(any::<u8>(), 0..64)),
            |(d, source)| {
                let _ = ocx::fossil::delta::apply(&source, &d);
                let _ = ocx::fossil::delta::uncompress(&d);
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn runner_pages_of_hostile_json_are_refused_naming_their_field() {
    TestRunner::new(config(512))
        .run(
            &(
                prop::sample::select(
                    &[
                        "command",
                        "env",
                        "homes",
                        "credentials",
                        "remote",
                        "input",
                        "other",
                    ][..],
                ),
                hostile_value(),
            ),
            |(field, value)| {
                let mut page =
                    json!({"command": ["/bin/true"], "env": {}, "homes": [], "input": "lines"});
                page[field] = value;
                if let Err(p) = runner::read_page(fenced(&page).as_bytes()) {
                    prop_assert!(!p.field.is_empty());
                    prop_assert!(p.field.chars().count() <= 201 || !p.reason.is_empty());
                }
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn deliveries_of_any_text_arrive_as_one_line_and_read_back() {
    TestRunner::new(config(1024))
        .run(&hostile(), |text| {
            let line = inbox::escape(&text);
            prop_assert!(!line.contains(['\n', '\r']));
            prop_assert_eq!(inbox::unescape(&line), text.clone());
            let _ = inbox::unescape(&text);
            Ok(())
        })
        .unwrap();
}

#[test]
fn an_agents_output_of_any_text_or_json_is_read_without_a_panic() {
    use ocx::entry::watch::agent::read_event;
    use ocx::node::runner::InputMode;
    let line = prop_oneof![
        hostile(),
        hostile_value().prop_map(|v| v.to_string()),
        (hostile_value(), hostile_value(), hostile()).prop_map(|(a, b, m)| {
            serde_json::json!({"type": "result", "is_error": a, "result": b, "method": m,
                "id": 1, "params": {"turn": {"status": b, "error": a}, "item": {"type": "agentMessage", "text": b},
                "error": {"message": a, "codexErrorInfo": b}, "willRetry": true}})
            .to_string()
        }),
    ];
    TestRunner::new(config(1024))
        .run(&line, |line| {
            for mode in [
                InputMode::Lines,
                InputMode::ClaudeStreamJson,
                InputMode::CodexAppServer,
            ] {
                let (_, reply) = read_event(mode, &line);
                if let Some(r) = reply {
                    prop_assert!(r["result"].is_object() || r["error"].is_object());
                }
            }
            let _ = inbox::read(&line, None);
            let _ = inbox::read(&line, Some("0123456789"));
            Ok(())
        })
        .unwrap();
}

#[test]
fn mcp_arguments_of_hostile_json_are_refused_naming_their_field() {
    let repo = Repo::new();
    let cx = context(&repo);
    let args = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..200),
        (hostile(), hostile_value())
            .prop_map(|(k, v)| serde_json::to_vec(&json!({ k: v })).unwrap()),
        (
            prop::sample::select(&["to", "text", "of", "title", "user", "dry_run"][..]),
            hostile_value()
        )
            .prop_map(|(k, v)| serde_json::to_vec(&json!({ k: v })).unwrap()),
        prop::collection::vec(any::<u8>(), 0..40).prop_map(|b| {
            let mut t = b"{\"text\": \"".to_vec();
            t.extend_from_slice(&b);
            t.extend_from_slice(b"\"}");
            t
        }),
    ];
    TestRunner::new(config(192))
        .run(&args, |bytes| {
            mcp_arguments(&bytes, &cx);
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_web_pages_request_of_any_text_is_answered() {
    let repo = Repo::new();
    let cookie_name = ocx::fossil::Repository::open(&repo.file)
        .unwrap()
        .login_cookie_name()
        .unwrap();
    let request = (
        hostile(),
        prop_oneof![
            hostile(),
            (hostile(), hostile(), hostile()).prop_map(|(h, c, l)| format!("{h}/{c}/{l}")),
            hostile().prop_map(|l| format!("%ff%00/x/{l}")),
        ],
        hostile(),
        prop::option::of(prop_oneof![hostile(), "-?[0-9]{1,30}"]),
        prop::sample::select(
            &[
                "application/x-www-form-urlencoded",
                "application/json",
                "",
                "multipart/form-data; boundary=é",
                "application/JSON;;;",
            ][..],
        ),
        prop::collection::vec(any::<u8>(), 0..200),
        prop::sample::select(&["GET", "POST", "PUT", "é", ""][..]),
        prop::sample::select(
            &[
                "",
                "/thread",
                "/post",
                "/read_post",
                "/é",
                "/thread/..",
                "//",
            ][..],
        ),
    );
    // As the page server answers them: one repository kept open across
    // every request, so what one request leaves is what the next meets.
    let kept = ocx::fossil::kept::Kept::new();
    TestRunner::new(config(192))
        .run(
            &request,
            |(query, cookie, addr, length, ctype, body, method, path)| {
                let request = Request {
                    repository: Some(repo.file.to_string_lossy().into_owned()),
                    fossil_user: Some("admin".into()),
                    capabilities: Some(cookie.clone()),
                    cookie: Some(format!("{cookie_name}={cookie}; {cookie}")),
                    remote_addr: Some(addr),
                    method: method.into(),
                    path_info: path.into(),
                    query: format!("json&{query}"),
                    content_length: length,
                    content_type: Some(ctype.into()),
                    host: Some(query.clone()),
                    referer: Some(query),
                    ..Request::default()
                };
                let page = cgi::respond(
                    &request,
                    &mut &body[..],
                    || Err(Stop::new("no fossil in these tests")),
                    Some(&kept),
                );
                prop_assert!((200..500).contains(&page.status), "{}", page.status);
                let answer: Value = serde_json::from_str(&page.body).expect("a JSON answer");
                if answer["ok"] == false && page.status == 400 {
                    prop_assert!(answer["stopped"]["field"].is_string(), "{}", page.body);
                }
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn ten_megabyte_fields_are_refused_quickly_and_briefly() {
    let started = Instant::now();
    let huge = "é".repeat(5 << 20);
    let mut record = good_record(NODE);
    record["budget"]["wall"] = json!(huge);
    let text = fenced(&record);
    assert!(text.len() > 10 << 20);
    match message::read(text.as_bytes()) {
        Reading::Message { message } => match kinds::read(&message) {
            Kind::Refused(_, p) => {
                assert_eq!(p.field, "budget.wall");
                assert!(p.reason.len() < 400, "a short reason: {}", p.reason.len());
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    let mut record = good_record(NODE);
    record["sandbox"][&huge] = json!(1);
    record["budget"]["cpu"] = json!(huge);
    let got = reading(fenced(&record).as_bytes());
    assert!(got.len() < 500, "a short field: {}", got.len());
    names_its_field(&got);
    let post = forum_post("huge", "pat", text.as_bytes());
    assert_eq!(
        artifact::parse(&post).unwrap().text.unwrap().len(),
        text.len()
    );
    let line = inbox::escape(&text);
    assert_eq!(inbox::unescape(&line), text);
    assert!(runner::read_page(text.as_bytes()).is_err());
    assert!(ocx::input::parse_input(text.as_bytes()).is_err());
    let repo = Repo::new();
    let page = web_request(
        &repo,
        "/thread",
        "application/x-www-form-urlencoded",
        text.as_bytes(),
    );
    assert_eq!(page.status, 400, "over the body's limit: {}", page.body);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn deep_nesting_reads_as_no_message_or_a_refusal() {
    let started = Instant::now();
    let arrays = format!("```json\n{}\n```\n", "[".repeat(100_000));
    assert_eq!(reading(arrays.as_bytes()), "none");
    let objects = format!("```json\n{}\n```\n", "{\"ocx\":".repeat(50_000));
    assert_eq!(reading(objects.as_bytes()), "none");
    let mut record = good_record(NODE);
    record["hears"] =
        serde_json::from_str(&format!("{}{}", "[".repeat(120), "]".repeat(120))).unwrap();
    names_its_field(&reading(fenced(&record).as_bytes()));
    let quotes = format!(
        "{}```json\n{}\n```\n",
        "> ".repeat(5_000),
        fenced(&good_record(NODE))
    );
    names_its_field(&reading(quotes.as_bytes()));
    let lists: String = (0..2_000)
        .map(|i| format!("{}- x\n", "  ".repeat(i)))
        .collect();
    names_its_field(&reading(
        format!("{lists}{}", fenced(&good_record(NODE))).as_bytes(),
    ));
    let fences = "```\n~~~\n````\n".repeat(20_000);
    names_its_field(&reading(fences.as_bytes()));
    assert!(ocx::input::parse_input("[".repeat(100_000).as_bytes()).is_err());
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

/// Imports `artifacts` into `clone` and pushes them through the server at
/// `url`, as the login and password it names; answers their hashes.
fn push_through_server(clone: &Path, url: &str, code: &str, artifacts: &[Vec<u8>]) -> Vec<String> {
    let repo = ocx::fossil::Repository::open(clone).unwrap();
    let policy = repo.hash_policy().unwrap();
    let items: Vec<(String, Vec<u8>)> = artifacts
        .iter()
        .map(|a| (policy.name(a), a.clone()))
        .collect();
    drop(repo);
    let bundle = clone.with_extension("bundle");
    ocx::fossil::bundle::write(&bundle, code, &items).unwrap();
    let fossil = crate::support::fossil();
    for args in [
        vec!["bundle", "import", bundle.to_str().unwrap(), "--publish"],
        vec!["push", url, "--once"],
    ] {
        crate::support::succeeds(
            std::process::Command::new(&fossil)
                .args(&args)
                .arg("-R")
                .arg(clone)
                .env("USER", "nobody-here")
                .stdin(std::process::Stdio::null()),
        );
    }
    items.into_iter().map(|i| i.0).collect()
}

#[test]
fn hostile_posts_by_anyone_leave_the_node_acting_on_the_next_good_record() {
    let s = EchoNode::new();
    let code = s.node.repo.server_code();
    let project = ocx::fossil::Repository::open(&s.node.repo.file)
        .unwrap()
        .project_code()
        .unwrap();
    let cases = corpus(&code);
    assert!(cases.len() >= 30);
    let mut sent: Vec<(String, String, String)> = Vec::new();
    for login in ["pat", "admin"] {
        s.node
            .repo
            .fossil(&["user", "password", login, "hostile-test-pw"]);
        let clone = s.node.repo.dir.path().join(format!("{login}.fossil"));
        let url = format!("http://{login}:hostile-test-pw@127.0.0.1:{}/", s.node.port);
        crate::support::fossil_as(
            login,
            s.node.repo.dir.path(),
            &["clone", &url, clone.to_str().unwrap()],
        );
        let posts: Vec<Vec<u8>> = cases
            .iter()
            .map(|(name, text)| forum_post(&format!("{login}: {name}"), login, text))
            .collect();
        let hashes = push_through_server(&clone, &url, &project, &posts);
        for ((name, _), hash) in cases.iter().zip(hashes) {
            sent.push((login.to_string(), name.clone(), hash));
        }
    }
    for (login, name, hash) in &sent {
        assert_eq!(
            s.node.repo.sender(hash).as_deref(),
            Some(login.as_str()),
            "{name} came through the server as {login}"
        );
    }
    let sent_at = Instant::now();
    s.settled();
    assert!(
        sent_at.elapsed() < Duration::from_secs(15),
        "every hostile post handled: {:?}",
        sent_at.elapsed()
    );
    let record = s.record(&[]);
    let arrived = Instant::now();
    let opened = support::logged_within(&s.root(), Duration::from_secs(20), |e| {
        support::is(e, "opened", &record)
    });
    let took = arrived.elapsed();
    assert!(opened.is_some(), "{}", s.node_log());
    assert!(
        took < Duration::from_secs(1),
        "the good record was acted on {took:?} after its arrival"
    );
    assert_eq!(
        s.lines(1),
        vec![format!("Record {record}: Echo what you hear")]
    );

    let log = s.node_log();
    let events = support::node_log(&s.root());
    assert_eq!(
        events.len(),
        log.lines().count(),
        "each line of the log is one event: {log}"
    );
    for e in &events {
        assert!(
            e["time"].as_str().is_some_and(|t| t.len() == 24
                && t.ends_with('Z')
                && t.as_bytes()[..4].iter().all(u8::is_ascii_digit))
                && e["done"].is_string(),
            "each event is the node's own: {e}"
        );
    }
    assert_eq!(
        support::logged(&s.root(), |e| e["done"] == "failed"
            && e["arrival"].is_string()),
        0,
        "{log}"
    );
    assert_eq!(
        support::logged(&s.root(), |e| e["done"] == "opened"),
        1,
        "no run opened but the good record's, no event forged: {log}"
    );
    let repo = ocx::fossil::Repository::open(&s.node.repo.file).unwrap();
    for (login, name, hash) in &sent {
        let rid = repo.receipt(hash).unwrap().unwrap().rid;
        let standing = ocx::protocol::found::record(&repo, rid, hash).unwrap();
        let responses = responses_to(&repo, hash);
        let for_node = standing.as_ref().is_some_and(|r| r.record.node == code);
        if login == "admin" && for_node {
            assert_eq!(responses.len(), 1, "{name} is answered once: {responses:?}");
            let r = &responses[0];
            assert_eq!(r.outcome, "refused", "{name}");
            let reading = reading(&cases.iter().find(|c| &c.0 == name).unwrap().1);
            let field = reading.strip_prefix("refused ").unwrap_or("runner");
            assert!(
                r.note.starts_with(&format!("{field}: ")),
                "{name}: {} (read as {reading})",
                r.note
            );
        } else {
            assert!(
                responses.is_empty(),
                "{login}'s {name} is not answered: {responses:?}"
            );
        }
        if reading(&cases.iter().find(|c| &c.0 == name).unwrap().1).starts_with("malformed ") {
            assert!(
                events.iter().any(|e| e["done"] == "ignored"
                    && e["arrival"] == hash.as_str()
                    && e["record"].is_null()),
                "{name} has its event: {log}"
            );
        }
        if login == "pat" && for_node {
            assert!(
                events.iter().any(|e| support::is(e, "ignored", hash)),
                "{name}: {log}"
            );
        }
    }
    let wall = sent
        .iter()
        .find(|(l, n, _)| l == "admin" && n == "record-wall-multibyte")
        .unwrap();
    assert!(
        events.iter().any(|e| support::is(e, "refused", &wall.2)
            && e["why"]
                .as_str()
                .is_some_and(|w| w.starts_with("budget.wall: "))),
        "{log}"
    );

    s.node
        .repo
        .json(&["post", "--to", &record, "--text", "exit-now 0"])
        .ok();
    assert_eq!(s.response(&record).expect("answered").0, "exited");
    let answered: Vec<usize> = sent
        .iter()
        .map(|x| responses_to(&repo, &x.2).len())
        .collect();
    s.node.repo.json(&["node", "stop"]).ok();
    std::fs::remove_file(s.root().join("state.json")).unwrap();
    s.node.repo.json(&["node", "start"]).ok();
    s.settled();
    std::thread::sleep(Duration::from_millis(500));
    let again: Vec<usize> = sent
        .iter()
        .map(|x| responses_to(&repo, &x.2).len())
        .collect();
    assert_eq!(
        answered, again,
        "read again with no state, nothing is answered twice"
    );
    assert_eq!(responses_to(&repo, &record).len(), 1);
    assert_eq!(
        s.log().lines().count(),
        2,
        "the good record is not run twice: {}",
        s.log()
    );
}

/// Every response said at the place of `hash` that answers it.
fn responses_to(repo: &ocx::fossil::Repository, hash: &str) -> Vec<kinds::Response> {
    let rid = repo.receipt(hash).unwrap().unwrap().rid;
    let place = ocx::protocol::found::place_of(repo, rid).unwrap().unwrap();
    ocx::protocol::found::at(repo, &place)
        .unwrap()
        .into_iter()
        .filter_map(|f| match f.kind {
            Kind::Known(kinds::Message::Response(r)) if r.answers == hash => Some(r),
            _ => None,
        })
        .collect()
}

#[test]
fn an_arrival_the_node_fails_on_is_logged_refused_and_passed() {
    let s = EchoNode::new();
    let runs = s.root().join("runs");
    let _ = std::fs::remove_dir_all(&runs);
    std::fs::write(&runs, "not a directory").unwrap();
    let failing = s.record(&[]);
    let (outcome, note, _) = s.response(&failing).expect("answered");
    assert_eq!(outcome, "refused");
    assert!(
        note.starts_with("record: the node could not act on it: "),
        "{note}"
    );
    let failed = support::logged_within(&s.root(), Duration::from_secs(10), |e| {
        e["done"] == "failed" && e["arrival"] == failing
    });
    assert!(
        failed.is_some(),
        "the wake writes its log as it ends: {}",
        s.node_log()
    );
    assert_eq!(
        s.caps_become(&crate::node::user_of(&s, &failing), "")
            .as_deref(),
        Some(""),
        "the run user given capabilities before the failure holds none"
    );
    std::fs::remove_file(&runs).unwrap();
    let good = s.record(&[]);
    assert_eq!(
        s.lines(1),
        vec![format!("Record {good}: Echo what you hear")]
    );
    s.node.repo.json(&["node", "stop"]).ok();
    s.node.repo.json(&["node", "start"]).ok();
    s.settled();
    std::thread::sleep(Duration::from_millis(300));
    let repo = ocx::fossil::Repository::open(&s.node.repo.file).unwrap();
    let rid = repo.receipt(&failing).unwrap().unwrap().rid;
    let place = ocx::protocol::found::place_of(&repo, rid).unwrap().unwrap();
    let answers = ocx::protocol::found::at(&repo, &place)
        .unwrap()
        .into_iter()
        .filter(
            |f| matches!(&f.kind, Kind::Known(kinds::Message::Response(r)) if r.answers == failing),
        )
        .count();
    assert_eq!(
        answers, 1,
        "answered once, after the node started again too"
    );
    assert_eq!(
        s.log().lines().count(),
        1,
        "the good record is not run twice: {}",
        s.log()
    );
}

#[test]
fn bytes_torn_inside_a_character_in_the_inbox_neither_deliver_nor_end_deliveries() {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let s = EchoNode::new();
    let record = s.record(&[]);
    assert_eq!(s.lines(1).len(), 1);
    let inbox = ocx::node::config::NodeConfig::run_dir(&s.root(), &record).join("inbox");
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(&inbox)
        .unwrap()
        .write_all(b"torn caf\xc3")
        .unwrap();
    s.node
        .repo
        .json(&["post", "--to", &record, "--text", "after the tear"])
        .ok();
    let lines = s.lines(2);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[1].starts_with("Post ") && lines[1].ends_with(": after the tear"),
        "bytes written into the inbox are a wake-up, never a delivery: {lines:#?}"
    );
    s.node
        .repo
        .json(&["post", "--to", &record, "--text", "and the next"])
        .ok();
    assert!(s.lines(3)[2].ends_with(": and the next"));
}

#[test]
fn questions_decisions_and_references_of_hostile_text_read_or_are_refused() {
    let repo = Repo::new();
    repo.commit_as("admin", "notes.txt", "one\ntwo\n", None);
    let opened = ocx::fossil::Repository::open(&repo.file).unwrap();
    let message = (
        prop::sample::select(&["question", "decision"][..]),
        hostile_value(),
        hostile_value(),
    )
        .prop_map(|(kind, a, b)| {
            json!({"ocx": 1, "kind": kind, "for": a, "question": b.clone(), "options": a, "note": b})
        });
    let reference = prop_oneof![
        hostile(),
        (
            prop::sample::select(
                &[
                    "/file?name=",
                    "/artifact/",
                    "/info/",
                    "/wiki?name=",
                    "/tktview/",
                    "/technote/",
                    "/forumpost/",
                    "https://x/",
                    "/file?ci=",
                ][..]
            ),
            hostile()
        )
            .prop_map(|(a, b)| format!("{a}{b}&ln={b}")),
    ];
    TestRunner::new(config(512))
        .run(&(message, reference), |(m, r)| {
            let text = fenced(&m);
            if let Some(Err(p)) = ocx::protocol::ask::read_text(text.as_bytes()) {
                assert!(!p.field.is_empty());
            }
            let caps = ocx::fossil::caps::Capabilities::exact("o2rj");
            match ocx::protocol::reference::resolve(&opened, &r) {
                Ok(t) => {
                    let d = ocx::protocol::reference::describe(&opened, &t.link(), &caps).unwrap();
                    assert!(d.excerpt.map_or(0, |e| e.chars().count()) <= 300);
                }
                Err(ocx::protocol::reference::Refused::Failed(e)) => panic!("{r:?}: {e}"),
                Err(_) => {}
            }
            let _ = ocx::protocol::reference::describe(&opened, &r, &caps).unwrap();
            Ok(())
        })
        .unwrap();
}

#[test]
fn ollamas_replies_and_a_runs_lines_always_get_a_reading() {
    use ocx::entry::ollama;
    let mut runner = TestRunner::new(config(400));
    runner
        .run(
            &(hostile_value(), hostile(), hostile()),
            |(v, text, line)| {
                let _ = ollama::read_reply(&v);
                let shaped = json!({"message": {"role": "assistant", "content": text,
                    "tool_calls": [{"function": {"name": line, "arguments": v}}]}});
                let read = ollama::read_reply(&shaped).expect("a chat reply reads");
                prop_assert_eq!(read.calls.len(), 1);
                let _ = ollama::written_call(&text);
                let _ = ollama::written_call(&format!("<tool_call>{text}</tool_call>"));
                let _ = ollama::written_call(&format!("```json\n{text}\n```"));
                let _ = ollama::read_line(&line, None);
                let _ = ollama::read_line(&line, Some(NODE));
                let _ = ollama::read_line(&format!("Post {line}"), Some(NODE));
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn logins_asked_for_by_a_visitor_take_any_text_without_a_panic_or_a_write() {
    let repo = Repo::new();
    let cx = context(&repo);
    let before = repo.hashes();
    let mut runner = TestRunner::new(config(64));
    runner
        .run(&(hostile(), hostile(), hostile()), |(login, code, caps)| {
            let collect = registry::call(
                "collect",
                Ok(json!({"login": login, "code": code})),
                &cx,
                true,
            );
            prop_assert!(!collect.ok, "{collect:?}");
            let approve = registry::call(
                "approve",
                Ok(json!({"login": login, "key": code, "capabilities": caps})),
                &cx,
                true,
            );
            if let Some(s) = &approve.stopped {
                prop_assert!(s.field.is_some(), "{s:?}");
            }
            let body = format!(
                "login={}&code={}",
                percent_encoding::utf8_percent_encode(&login, percent_encoding::NON_ALPHANUMERIC),
                percent_encoding::utf8_percent_encode(&code, percent_encoding::NON_ALPHANUMERIC)
            );
            let page = web_request(
                &repo,
                "/collect",
                "application/x-www-form-urlencoded",
                body.as_bytes(),
            );
            prop_assert_eq!(page.status, 400, "{}", page.body);
            prop_assert!(serde_json::from_str::<Value>(&page.body).is_ok());
            Ok(())
        })
        .unwrap();
    assert_eq!(repo.hashes(), before);
    assert!(
        ocx::fossil::Repository::open(&repo.file)
            .unwrap()
            .users()
            .unwrap()
            .len()
            == 5,
        "no login made"
    );
}

#[test]
fn the_git_exports_request_of_any_text_is_answered() {
    let repo = Repo::new();
    repo.commit_as("admin", "a.txt", "one\n", None);
    let mirror = repo.dir.path().join("mirror");
    repo.fossil(&["git", "export", mirror.to_str().unwrap()]);
    let cookie_name = ocx::fossil::Repository::open(&repo.file)
        .unwrap()
        .login_cookie_name()
        .unwrap();
    let git = ocx::git::Git::locate(None).expect("git: run scripts/setup.sh");
    let request = (
        prop_oneof![
            hostile(),
            Just("service=git-upload-pack".to_string()),
            hostile().prop_map(|q| format!("service={q}")),
        ],
        hostile(),
        prop::option::of(prop_oneof![hostile(), "-?[0-9]{1,30}"]),
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200),
            prop::collection::vec(any::<u8>(), 0..200)
                .prop_map(|b| [&[0x1f, 0x8b][..], &b].concat()),
            Just(b"0000".to_vec()),
        ],
        prop::sample::select(&["GET", "POST", "PUT", "é", ""][..]),
        prop_oneof![
            prop::sample::select(
                &[
                    "",
                    "/",
                    "/repo.git/info/refs",
                    "/repo.git/git-upload-pack",
                    "/repo.git/git-receive-pack",
                    "/repo.git/../repo.git/info/refs",
                    "/other.git/info/refs",
                    "//",
                ][..],
            )
            .prop_map(str::to_string),
            hostile().prop_map(|p| format!("/repo.git/{p}")),
        ],
    );
    TestRunner::new(config(128))
        .run(&request, |(query, cookie, length, body, method, path)| {
            let length = length.or_else(|| Some(body.len().to_string()));
            let request = Request {
                repository: Some(repo.file.to_string_lossy().into_owned()),
                cookie: Some(format!("{cookie_name}={cookie}; {cookie}")),
                method: method.into(),
                path_info: path,
                query,
                content_length: length,
                ..Request::default()
            };
            let reply = ocx::entry::git::respond(&request, &mut &body[..], Ok(git.clone()));
            prop_assert!(
                [200, 400, 403, 404, 405, 413, 500].contains(&reply.status),
                "{} {}",
                reply.status,
                String::from_utf8_lossy(&reply.body)
            );
            Ok(())
        })
        .unwrap();
}
