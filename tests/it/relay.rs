//! The model relay for real: the scripted model server behind a TLS server
//! on 127.0.0.1 with a test authority the node is told to trust; the real
//! Claude Code and Codex answering through it; a run that searches its
//! environment, home and `/proc` for the key and finds none; a record with
//! `budget.tokens` ended at its budget with the streamed answer that
//! crossed it cut at an event's end; a record with `budget.cost` at its
//! runner page's prices ended the same way, its cost told in its note,
//! `run` and `console`, and refused for a runner giving no prices; a
//! relay whose upstream is away, or
//! untrusted, answering as the service would and saying so in its log; and
//! a wrong token refused.

use crate::agents::{Agent, Site, installed};
use crate::model::{Model, Reply};
use crate::support::{Repo, Served, ServedNode};
use crate::tls::{Tls, port_of};
use ocx::node::runner::ModelKind;
use ocx::protocol::money::{Money, Prices};
use ocx::run::relay::{Relay, Settings, Usage};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) const KEY: &str = "sk-the-nodes-own-key-7f3a9c";

/// A served node whose model relays trust `tls`'s authority and whose
/// credential `model-key` holds [`KEY`].
pub(crate) fn node(tls: &Tls) -> ServedNode {
    let repo = Repo::new();
    repo.user("pat", "v234");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(repo.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    repo.commit_as("admin", "README.md", "hello\n", None);
    let node = Served::on(repo).start();
    let dir = node.repo.dir.path();
    node.repo.credential("model-key", &format!("{KEY}\n"));
    let ca = dir.join("test-authority.pem");
    std::fs::write(&ca, &tls.authority).unwrap();
    let root = node.repo.node_root();
    let mut cfg = ocx::node::config::NodeConfig::load(&root).unwrap();
    cfg.model_ca = Some(ca);
    cfg.save(&root).unwrap();
    node
}

/// The model service a page names: `kind` at `tls`, its key `model-key`.
fn service(kind: &str, tls: &Tls) -> Value {
    json!({"kind": kind, "upstream": tls.url(), "credential": "model-key"})
}

#[test]
fn claude_and_codex_answer_through_the_relay_which_alone_holds_the_key() {
    for agent in [Agent::Claude, Agent::Codex] {
        installed(agent);
        let model = Model::start(|r| match crate::agents::delivery(r) {
            Some((line, _)) if line.starts_with("Record ") => Reply::text("Ready, by the relay."),
            _ => Reply::text("Noted."),
        });
        let tls = Tls::front(port_of(&model.url()));
        let site = Site {
            node: node(&tls),
            agent,
        };
        let (name, base) = match agent {
            Agent::Claude => ("claude", tls.url()),
            Agent::Codex => ("codex", format!("{}/v1", tls.url())),
        };
        let written = site.json(&crate::agents::runner_args(name, &base));
        let page = &written["definition"];
        assert_eq!(
            page["model"]["credential"], "model-key",
            "{agent:?}: {page:#}"
        );
        assert_eq!(page["credentials"], json!([]), "{agent:?}: {page:#}");
        let record = site.record(&["--tokens", "1000000"]);
        let user = site.user_of(&record);
        site.said(&record, &user, "Ready, by the relay.");
        // The run's transcript masks its relay's token, planted in a post
        // the run is given, and its spend says tokens in and out.
        let token = crate::run_page::relay_token(&record).expect("the agent holds its token");
        site.post(&record, &format!("Keep {token} to yourself."));
        site.said(&record, &user, "Noted.");
        let transcript = site.run_dir(&record).join("transcript.jsonl");
        let kept = std::fs::read_to_string(&transcript).unwrap();
        assert!(
            !kept.contains(&token) && kept.contains("Keep [the relay's token masked] to yourself."),
            "{agent:?}: {kept}"
        );
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let spend = loop {
            let run = site.json(&["run", "--record", &record]);
            assert!(!run.to_string().contains(&token), "{agent:?}: {run:#}");
            let spend = run["spend"].clone();
            if spend["tokens_in"].as_u64().unwrap_or(0) > 0
                && spend["tokens_out"].as_u64().unwrap_or(0) > 0
            {
                break spend;
            }
            assert!(
                std::time::Instant::now() < until,
                "{agent:?}: tokens in and out: {run:#}"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        };
        assert_eq!(
            spend["tokens_in"].as_u64().unwrap() + spend["tokens_out"].as_u64().unwrap(),
            ocx::run::relay::spent_in(&site.run_dir(&record)).unwrap(),
            "{agent:?}: in and out add up to what the relay counted: {spend:#}"
        );
        let console = site.json(&["console"]);
        let shown = crate::support::console_card(&console, "running", &record);
        assert!(
            shown["tokens"].as_u64().is_some_and(|n| n > 0) && shown["tokens_budget"] == 1000000,
            "{agent:?}: console shows the run's spend: {console:#}"
        );
        assert!(
            site.node.repo.ocx(&["console"]).stdout.contains("tokens: "),
            "{agent:?}: and its text says so"
        );
        let requests = model.conversation();
        assert!(!requests.is_empty());
        for r in &requests {
            let key = match agent {
                Agent::Claude => r.header("x-api-key").map(str::to_string),
                Agent::Codex => r.header("authorization").map(str::to_string),
            };
            let want = match agent {
                Agent::Claude => KEY.to_string(),
                Agent::Codex => format!("Bearer {KEY}"),
            };
            assert_eq!(
                key.as_deref(),
                Some(want.as_str()),
                "{agent:?}: the relay put the node's key in"
            );
            assert!(
                !r.headers.iter().any(|(_, v)| v.contains("ocx-run-")),
                "{agent:?}: the run's token never reaches the service: {:?}",
                r.headers
            );
        }
        site.json(&["stop", "--record", &record]);
        let (outcome, note) = site.response(&record);
        assert_eq!(outcome, "stopped", "{agent:?}: {note}");
        let tokens: String = note
            .rsplit(", ")
            .next()
            .unwrap_or("")
            .strip_suffix(" tokens")
            .unwrap_or_else(|| panic!("{agent:?}: the note names the tokens: {note}"))
            .replace(',', "");
        assert!(
            tokens.parse::<u64>().is_ok_and(|n| n > 0),
            "{agent:?}: {note}"
        );
    }
}

/// The key search: everything the run can read of itself, then a request
/// through the relay with its token, one with another, and one over the
/// relay's socket; then its address and token for the test.
const SEARCH: &str = r#"#!/usr/bin/python3
import os, sys, json, socket, http.client
out = os.environ["OCX_TEST_OUT"]
def note(obj):
    with open(os.path.join(out, "results"), "a") as f:
        f.write(json.dumps(obj) + "\n")
seen = bytearray()
for k, v in os.environ.items():
    seen += ("%s=%s\n" % (k, v)).encode()
places = [os.environ.get("HOME", "/nonexistent"), ".", "/tmp"]
for place in places:
    for top, dirs, files in os.walk(place):
        for name in files:
            try:
                with open(os.path.join(top, name), "rb") as f:
                    seen += f.read(1 << 20)
            except OSError:
                pass
for pid in os.listdir("/proc"):
    for part in ["environ", "cmdline"]:
        try:
            with open(os.path.join("/proc", pid, part), "rb") as f:
                seen += f.read()
        except OSError:
            pass
with open(os.path.join(out, "seen.bin"), "wb") as f:
    f.write(seen)
url = os.environ["OCX_MODEL_URL"]
port = int(url.rsplit(":", 1)[1])
body = json.dumps({"model": "m", "stream": True, "max_tokens": 10,
    "messages": [{"role": "user", "content": "Say hello"}]})
def ask(key, conn=None):
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", "/v1/messages", body=body, headers={"x-api-key": key, "content-type": "application/json"})
    r = c.getresponse()
    return r.status, r.read().decode("utf-8", "replace")
class UnixConnection(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(os.path.join(".ocx", "model.sock"))
token = os.environ["OCX_MODEL_TOKEN"]
status, text = ask(token)
note({"step": "token", "status": status, "body": text})
status, text = ask("sk-guessed")
note({"step": "wrong", "status": status, "body": text})
status, text = ask(token, UnixConnection("relay"))
note({"step": "socket", "status": status, "body": text})
beside = os.environ.get("OCX_TEST_BESIDE")
if beside:
    try:
        note({"step": "beside", "entries": sorted(os.listdir(beside))})
    except OSError as e:
        note({"step": "beside", "entries": [], "error": str(e)})
note({"step": "done", "url": url, "token": token})
for line in sys.stdin:
    if "please end" in line:
        sys.exit(0)
"#;

/// The results the runner noted, once it noted `done`.
pub(crate) fn results(out: &Path) -> Vec<Value> {
    let until = Instant::now() + Duration::from_secs(90);
    loop {
        let text = std::fs::read_to_string(out.join("results")).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if lines.iter().any(|l| l["step"] == "done") {
            return lines;
        }
        assert!(
            Instant::now() < until,
            "the runner never finished: {lines:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(crate) fn step<'a>(all: &'a [Value], name: &str) -> &'a Value {
    all.iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no step {name}: {all:#?}"))
}

/// A node with the runner `search` ([`SEARCH`]) whose page names the
/// scripted service behind `tls`; the directory the runner writes to.
pub(crate) fn search_site(tls: &Tls) -> (Site, PathBuf) {
    search_site_with(tls, json!({}))
}

/// [`search_site`], the page given the fields of `more` too.
fn search_site_with(tls: &Tls, more: Value) -> (Site, PathBuf) {
    site_running(tls, SEARCH, more)
}

/// A node with the runner `search` running the Python `script`, its page
/// naming the scripted service behind `tls` and given the fields of
/// `more`; the directory the runner writes to.
pub(crate) fn site_running(tls: &Tls, script: &str, more: Value) -> (Site, PathBuf) {
    let site = Site {
        node: node(tls),
        agent: Agent::Claude,
    };
    let (runner, out) = crate::support::runner_script(&site.node.repo, script);
    let mut page = json!({"command": [runner], "input": "lines",
        "env": {"OCX_TEST_OUT": out, "OCX_TEST_BESIDE": crate::support::ocx_bin().parent()},
        "model": service("anthropic-messages", tls)});
    page.as_object_mut()
        .unwrap()
        .extend(more.as_object().unwrap().clone());
    crate::support::runner_page(&site.node.repo, "search", &page);
    (site, out)
}

pub(crate) fn create(site: &Site, out: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "create",
        "--runner",
        "search",
        "--objective",
        "Look for the key",
        "--wall",
        "5m",
        "--read-write",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    site.json(&args)["record"].as_str().unwrap().to_string()
}

#[test]
fn a_run_given_a_model_finds_no_key_in_its_environment_home_or_proc() {
    let model = Model::start(|_| Reply::text("hello from upstream"));
    let tls = Tls::front(port_of(&model.url()));
    let (site, out) = search_site(&tls);
    let record = create(&site, &out, &[]);
    let all = results(&out);
    let seen = std::fs::read(out.join("seen.bin")).unwrap();
    let token = step(&all, "done")["token"].as_str().unwrap().to_string();
    let holds = |needle: &str| seen.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(
        holds(&token) && holds("OCX_MODEL_URL=http://127.0.0.1:"),
        "the search read the run's environment"
    );
    assert!(
        !holds(KEY) && !holds("the-nodes-own-key"),
        "the model key is inside the sandbox"
    );
    assert_eq!(
        step(&all, "beside")["entries"],
        json!(["ocx"]),
        "OCX's program is inside, and nothing that lies beside it on the host"
    );
    assert_ne!(token, KEY);
    let ok = step(&all, "token");
    assert_eq!(ok["status"], 200, "{ok:#}");
    let body = ok["body"].as_str().unwrap();
    assert!(
        body.starts_with("event: message_start") && body.contains("hello from upstream"),
        "{body}"
    );
    let wrong = step(&all, "wrong");
    assert_eq!(wrong["status"], 401, "{wrong:#}");
    assert!(
        wrong["body"]
            .as_str()
            .unwrap()
            .contains("authentication_error")
    );
    assert_eq!(step(&all, "socket")["status"], 200, "{all:#?}");
    let keys: Vec<_> = model
        .conversation()
        .iter()
        .map(|r| r.header("x-api-key").map(str::to_string))
        .collect();
    assert_eq!(
        keys,
        vec![Some(KEY.to_string()); 2],
        "the token's requests reached the service with the key, the wrong one's never did"
    );
    site.post(&record, "please end");
    let (outcome, note) = site.response(&record);
    assert_eq!(outcome, "exited", "{note}");
    assert!(
        note.starts_with("exit 0 after ") && note.ends_with(" tokens"),
        "{note}"
    );
}

/// One request to `url` (a relay's) as `token`, read whole: its status,
/// and its body's chunks joined, and whether the chunked body ended with
/// its last chunk.
fn ask(url: &str, token: &str, body: &Value) -> (u16, String, bool) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port_of(url))).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = body.to_string();
    write!(
        s,
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status = line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut chunked = false;
    let mut length = None;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        let h = h.trim_end().to_ascii_lowercase();
        if h.is_empty() {
            break;
        }
        chunked |= h == "transfer-encoding: chunked";
        if let Some(n) = h.strip_prefix("content-length: ") {
            length = n.parse::<usize>().ok();
        }
    }
    if !chunked {
        let mut b = vec![0; length.unwrap_or(0)];
        r.read_exact(&mut b).unwrap();
        return (status, String::from_utf8(b).unwrap(), true);
    }
    let mut text = Vec::new();
    loop {
        let mut size = String::new();
        if r.read_line(&mut size).unwrap_or(0) == 0 {
            return (status, String::from_utf8_lossy(&text).into(), false);
        }
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            return (status, String::from_utf8_lossy(&text).into(), true);
        }
        let mut b = vec![0; n + 2];
        r.read_exact(&mut b).unwrap();
        text.extend_from_slice(&b[..n]);
    }
}

#[test]
fn a_record_with_tokens_is_answered_while_its_budget_covers_a_request_then_ends() {
    let model = Model::start(|_| Reply::text("a long answer ".repeat(20)));
    let tls = Tls::front(port_of(&model.url()));
    let (site, out) = search_site(&tls);
    assert!(
        site.node
            .repo
            .json(&[
                "create",
                "--runner",
                "search",
                "--objective",
                "x",
                "--wall",
                "5m",
                "--tokens",
                "0"
            ])
            .refused()
            .contains("budget.tokens")
    );
    // The scripted server bills a request's input as its body's bytes over
    // four, and 5 tokens out; the relay reserves its max_tokens and its
    // input at a token a byte, so a budget that covers one such request
    // beside what was spent, and not two, answers it whole and no more.
    let body = json!({"model": "m", "stream": true, "max_tokens": 10,
        "messages": [{"role": "user", "content": "Say a lot"}]});
    let reserved = body.to_string().len() as u64 + 10;
    let billed = (body.to_string().len() / 4) as u64 + 5;
    let searched = (json!({"model": "m", "stream": true, "max_tokens": 10,
        "messages": [{"role": "user", "content": "Say hello"}]})
    .to_string()
    .len()
        / 4) as u64;
    // The runner's own two requests bill `searched` + 5 each first.
    let before = 2 * (searched + 5);
    let budget = before + reserved + billed - 1;
    let record = create(&site, &out, &["--tokens", &budget.to_string()]);
    let all = results(&out);
    let done = step(&all, "done");
    let (url, token) = (
        done["url"].as_str().unwrap(),
        done["token"].as_str().unwrap(),
    );
    let dir = site.run_dir(&record);
    assert_eq!(
        ocx::run::relay::spent_in(&dir),
        Some(before),
        "the tokens file holds the spend so far"
    );
    let (status, text, ended) = ask(url, token, &body);
    assert_eq!(status, 200);
    assert!(
        ended && text.contains("message_stop"),
        "answered whole: {text:?}"
    );
    assert_eq!(ocx::run::relay::spent_in(&dir), Some(before + billed));
    let (status, text, _) = ask(url, token, &body);
    assert_eq!(status, 400, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        error["error"]["type"], "invalid_request_error",
        "in the service's shape: {error:#}"
    );
    assert!(text.contains("cannot cover this request"), "{text}");
    let (outcome, note) = site.response(&record);
    assert_eq!(outcome, "budget", "{note}");
    let spent = before + billed;
    assert!(
        note.starts_with("tokens limit reached after ")
            && note.ends_with(&format!(
                ": {} of {} tokens",
                ocx::run::relay::thousands(spent),
                ocx::run::relay::thousands(budget)
            )),
        "what the service billed, never what was reserved: {note}"
    );
    let log = std::fs::read_to_string(dir.join("output.log")).unwrap();
    assert!(log.contains("cannot cover a request"), "{log}");
}

/// The search runner's requests and the test's, as the scripted server
/// bills them and the relay reserves them, in and out: a request of `body`
/// is reserved at its bytes in and its `max_tokens` (10) out, and billed
/// its bytes over four in and 5 out.
fn reckoned(body: &Value) -> (Usage, Usage) {
    let bytes = body.to_string().len() as u64;
    (
        Usage {
            input: bytes,
            output: 10,
        },
        Usage {
            input: bytes / 4,
            output: 5,
        },
    )
}

#[test]
fn a_record_with_a_cost_is_answered_while_its_budget_covers_a_request_then_ends() {
    let model = Model::start(|_| Reply::text("a long answer ".repeat(20)));
    let tls = Tls::front(port_of(&model.url()));
    // A millionth of a dollar a token in, two a token out.
    let prices = Prices {
        currency: "USD".into(),
        input: Money(1_000_000),
        output: Money(2_000_000),
    };
    let (site, out) = search_site_with(
        &tls,
        json!({"prices": {"currency": "USD", "input": 1, "output": 2.0}}),
    );
    let refused = |args: &[&str]| {
        let mut all = vec!["create", "--objective", "x", "--wall", "5m"];
        all.extend_from_slice(args);
        site.node.repo.json(&all).refused()
    };
    assert_eq!(
        refused(&["--runner", "search", "--cost", "0"]),
        "budget.cost"
    );
    let cost = |u: Usage| prices.cost(u.input, u.output).0;
    let body = json!({"model": "m", "stream": true, "max_tokens": 10,
        "messages": [{"role": "user", "content": "Say a lot"}]});
    let (reserved, billed) = reckoned(&body);
    let (_, searched) = reckoned(&json!({"model": "m", "stream": true, "max_tokens": 10,
        "messages": [{"role": "user", "content": "Say hello"}]}));
    // The runner's own two requests are billed first; then a budget that
    // covers one more request's reservation beside them, and not two.
    let before = 2 * cost(searched);
    let budget = Money(before + cost(reserved) + cost(billed) - 1);
    let record = create(&site, &out, &["--cost", &budget.to_string()]);
    let all = results(&out);
    let done = step(&all, "done");
    let (url, token) = (
        done["url"].as_str().unwrap(),
        done["token"].as_str().unwrap(),
    );
    let (status, text, ended) = ask(url, token, &body);
    assert_eq!(status, 200);
    assert!(
        ended && text.contains("message_stop"),
        "answered whole: {text:?}"
    );
    let (status, text, _) = ask(url, token, &body);
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains(&format!(
            "the run's budget of {budget} USD cannot cover this request"
        )),
        "{text}"
    );
    let (outcome, note) = site.response(&record);
    assert_eq!(outcome, "budget", "{note}");
    let spent = Money(before + cost(billed));
    let tokens = ocx::run::relay::thousands(2 * searched.total() + billed.total());
    assert!(
        note.starts_with("cost limit reached after ")
            && note.ends_with(&format!(": {spent} of {budget} USD, {tokens} tokens")),
        "what the service billed at the page's prices: {note}"
    );
    let run = site.json(&["run", "--record", &record]);
    let words = format!("{spent} of {budget} USD");
    assert_eq!(run["cost"], words.as_str(), "{run:#}");
    assert!(run["spent"].as_str().unwrap().contains(&words), "{run:#}");
    let console = site.json(&["console"]);
    let card = crate::support::console_card(&console, "ended", &record);
    assert_eq!(card["cost"], words.as_str(), "{console:#}");
    assert!(
        site.node
            .repo
            .ocx(&["console"])
            .stdout
            .contains(&format!("cost: {words}")),
        "and its text says so"
    );
}

#[test]
fn a_cost_is_refused_for_a_runner_giving_no_prices_and_bad_prices_naming_their_field() {
    let tls = Tls::front(1);
    let (site, out) = search_site(&tls);
    let repo = &site.node.repo;
    let refusal = |runner: &str| {
        let args = crate::support::create_args(runner, "x", "5m", &["--cost", "0.5"]);
        let r = repo.json(&args);
        let why = r.answer()["stopped"]["reason"]
            .as_str()
            .unwrap_or("")
            .to_string();
        (r.refused(), why)
    };
    let (field, why) = refusal("search");
    assert_eq!(field, "budget.cost", "{why}");
    assert!(why.contains("gives no prices"), "{why}");
    // The node refuses it too, for a record written by hand.
    let record = json!({"ocx": 1, "kind": "record", "node": repo.server_code(),
        "user": "search-0a0b0c", "runner": "search", "objective": "cost",
        "checkins": [], "hears": [], "remote": false, "restrict": {},
        "sandbox": {"network": true, "read_only": [], "read_write": [out]},
        "budget": {"wall": "1m", "cost": 0.5}});
    let hash = crate::node::record_by_hand(repo, "admin", &record);
    let (outcome, note) = site.response(&hash);
    assert_eq!(outcome, "refused", "{note}");
    assert!(note.contains("budget.cost"), "{note}");
    // A page whose prices are refused offers no runner: its record is
    // answered `refused`, naming the page's field.
    for (i, (prices, field)) in [
        (
            json!({"currency": "USD", "input": -3, "output": 15}),
            "prices.input",
        ),
        (
            json!({"currency": "USD", "input": 3, "output": "15"}),
            "prices.output",
        ),
        (json!({"input": 3, "output": 15}), "prices.currency"),
        (
            json!({"currency": "USD", "input": 3, "output": 15, "cached": 1}),
            "prices.cached",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let page = json!({"command": ["/bin/true"], "model": service("anthropic-messages", &tls),
            "prices": prices});
        let name = format!("dear{i}");
        crate::support::runner_page(repo, &name, &page);
        let r = repo.json(&[
            "create",
            "--runner",
            &name,
            "--objective",
            "x",
            "--wall",
            "1m",
        ]);
        let record = r.ok()["record"].as_str().unwrap().to_string();
        let (outcome, note) = site.response(&record);
        assert_eq!(outcome, "refused", "{note}");
        assert!(
            note.contains(&format!(
                "runner: this node refuses the page sandbox/{name} that defines it, at {field}: "
            )),
            "{prices}: {note}"
        );
    }
}

#[test]
fn the_priced_page_and_the_pattern_agents_md_shows_write_a_record_held_to_its_cost() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/agents.md")).unwrap();
    let section = docs
        .split("### What a run costs")
        .nth(1)
        .unwrap()
        .split("\n## ")
        .next()
        .unwrap();
    let page = ocx::node::runner::read_page(section.as_bytes()).unwrap();
    assert_eq!(
        page.prices,
        Some(Prices {
            currency: "USD".into(),
            input: Money(3_000_000),
            output: Money(15_000_000),
        })
    );
    let at = section.find("`run/capped-review` holding:").unwrap();
    let block = &ocx::protocol::message::json_blocks(&section[at..])[0];
    let pattern: Value = serde_json::from_str(block).unwrap();
    let node = Served::on(Repo::new()).start();
    let repo = &node.repo;
    crate::support::runner_page(repo, "claude", &serde_json::to_value(&page).unwrap());
    let bare = ocx::node::runner::RunnerPage {
        prices: None,
        ..page
    };
    crate::support::runner_page(repo, "bare", &serde_json::to_value(&bare).unwrap());
    crate::patterns::pattern_page(repo, "capped-review", &pattern);
    let written = repo
        .json(&["create", "--pattern", "capped-review", "--dry-run"])
        .ok();
    assert_eq!(
        written["fields"]["budget"]["cost"],
        json!(2.0),
        "{written:#}"
    );
    let args = [
        "create",
        "--pattern",
        "capped-review",
        "--runner",
        "bare",
        "--dry-run",
    ];
    assert_eq!(repo.json(&args).refused(), "budget.cost");
}

/// A relay started here with `budget`, trusting `tls`'s authority; its log lines kept.
fn budgeted(tls: &Tls, budget: u64) -> (Relay, tempfile::NamedTempFile) {
    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca.path(), &tls.authority).unwrap();
    let dir = tempfile::tempdir().unwrap().keep();
    let relay = Relay::start(Settings {
        kind: ModelKind::AnthropicMessages,
        upstream: tls.url(),
        key: KEY.into(),
        budget: Some(budget),
        prices: None,
        cost: None,
        ask: false,
        dir: dir.clone(),
        socket: dir.join("model.sock"),
        authorities: Some(ca.path().to_path_buf()),
        log: Box::new(|_| {}),
    })
    .unwrap();
    (relay, ca)
}

#[test]
fn requests_sent_at_once_never_spend_past_the_budget() {
    let model = Model::start(|_| Reply::text("an answer"));
    let tls = Tls::front(port_of(&model.url()));
    let body = json!({"model": "m", "stream": true, "max_tokens": 10,
        "messages": [{"role": "user", "content": "x".repeat(400)}]});
    let billed = (body.to_string().len() / 4) as u64 + 5;
    // Enough for about nine such answers one after another; the relay
    // reserves about four times what each bills, so two at once.
    let budget = 9 * billed + 3;
    let (relay, _ca) = budgeted(&tls, budget);
    let (url, token) = (relay.url(), relay.token().to_string());
    let answers: Vec<(u16, String)> = std::thread::scope(|s| {
        let started: Vec<_> = (0..16)
            .map(|_| {
                s.spawn(|| {
                    let (status, text, _) = ask(&url, &token, &body);
                    (status, text)
                })
            })
            .collect();
        started.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let forwarded = model.conversation().len() as u64;
    assert!(forwarded >= 1, "{answers:?}");
    assert!(
        forwarded * billed <= budget,
        "{forwarded} of 16 requests reached the service, billing {} against {budget}",
        forwarded * billed
    );
    assert_eq!(
        relay.spent(),
        forwarded * billed,
        "the spend is what the service billed"
    );
    for (status, text) in &answers {
        assert!(
            *status == 200 || (*status == 400 && text.contains("invalid_request_error")),
            "{status}: {text}"
        );
    }
    assert_eq!(
        answers.iter().filter(|(s, _)| *s == 200).count() as u64,
        forwarded
    );
}

/// A model service of the test's own, plain HTTP on 127.0.0.1: each
/// request answered with a stream of `events` Messages API events, a
/// pause between each, the last billing `output` tokens out.
fn slow_service(events: usize, output: u64) -> (u16, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let serving = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if let Some(n) = line.to_ascii_lowercase().strip_prefix("content-length: ") {
                length = n.trim().parse().unwrap();
            }
            if line.trim().is_empty() {
                break;
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let mut out = stream;
        let _ = out.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
        );
        let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
        let _ = out.write_all(
            event(
                "message_start",
                json!({"type": "message_start",
            "message": {"id": "m", "usage": {"input_tokens": 100, "output_tokens": 1}}}),
            )
            .as_bytes(),
        );
        for i in 0..events {
            std::thread::sleep(Duration::from_millis(150));
            let delta = json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": format!("part {i} ")}});
            if out
                .write_all(event("content_block_delta", delta).as_bytes())
                .is_err()
            {
                return;
            }
        }
        let _ = out.write_all(
            event(
                "message_delta",
                json!({"type": "message_delta",
            "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": output}}),
            )
            .as_bytes(),
        );
        let _ = out.write_all(event("message_stop", json!({"type": "message_stop"})).as_bytes());
    });
    (port, serving)
}

#[test]
fn an_answer_the_run_stops_reading_is_read_on_to_its_usage_and_counted() {
    let (port, serving) = slow_service(8, 3_000);
    let tls = Tls::front(port);
    let (relay, _ca) = budgeted(&tls, 1_000_000);
    let body = json!({"model": "m", "stream": true, "max_tokens": 4000,
        "messages": [{"role": "user", "content": "Say a lot"}]})
    .to_string();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", relay.port())).unwrap();
    write!(
        s,
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        relay.token(),
        body.len()
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut seen = String::new();
    while !seen.contains("content_block_delta") {
        let mut line = String::new();
        assert!(r.read_line(&mut line).unwrap() > 0, "{seen}");
        seen.push_str(&line);
    }
    // The run goes, its first words read: the service generates and bills on.
    drop(r);
    serving.join().unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while relay.spent() < 3_100 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        relay.spent(),
        3_100,
        "the whole answer as the service billed it"
    );
}

/// A relay started here, its log lines kept.
fn relay(upstream: &str, authorities: Option<PathBuf>) -> (Relay, Arc<Mutex<Vec<String>>>) {
    let dir = tempfile::tempdir().unwrap().keep();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let kept = lines.clone();
    let relay = Relay::start(Settings {
        kind: ModelKind::AnthropicMessages,
        upstream: upstream.into(),
        key: KEY.into(),
        budget: None,
        prices: None,
        cost: None,
        ask: false,
        dir: dir.clone(),
        socket: dir.join("model.sock"),
        authorities,
        log: Box::new(move |l| kept.lock().unwrap().push(l.to_string())),
    })
    .unwrap();
    (relay, lines)
}

#[test]
fn an_upstream_away_or_untrusted_is_a_5xx_as_the_service_shapes_it_and_a_line_in_the_log() {
    let away = format!("https://127.0.0.1:{}", crate::support::free_port());
    let (r, lines) = relay(&away, None);
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let (status, text, _) = ask(&r.url(), r.token(), &body);
    assert_eq!(status, 502, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "api_error", "{error:#}");
    assert!(
        lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("could not reach the model service")),
        "{lines:?}"
    );
    let model = Model::start(|_| Reply::text("never"));
    let tls = Tls::front(port_of(&model.url()));
    let (untrusting, lines) = relay(&tls.url(), None);
    let (status, text, _) = ask(&untrusting.url(), untrusting.token(), &body);
    assert_eq!(
        status, 502,
        "an authority the node was not told to trust: {text}"
    );
    assert!(!lines.lock().unwrap().is_empty());
    assert!(model.conversation().is_empty());
}

#[test]
fn a_wrong_token_or_none_is_refused_and_never_reaches_the_service() {
    let model = Model::start(|_| Reply::text("hello"));
    let tls = Tls::front(port_of(&model.url()));
    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca.path(), &tls.authority).unwrap();
    let (r, _) = relay(&tls.url(), Some(ca.path().to_path_buf()));
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    for token in ["", "sk-guessed", KEY, &r.token()[..r.token().len() - 1]] {
        let (status, text, _) = ask(&r.url(), token, &body);
        assert_eq!(status, 401, "{token:?}: {text}");
        assert!(text.contains("authentication_error"), "{text}");
    }
    assert!(model.conversation().is_empty());
    let (status, text, ended) = ask(&r.url(), r.token(), &body);
    assert_eq!(status, 200, "{text}");
    assert!(ended && text.contains("hello"), "{text}");
    assert_eq!(r.spent(), (body.to_string().len() / 4) as u64 + 5);
    assert_eq!(
        model.conversation()[0].header("x-api-key"),
        Some(KEY),
        "the key is put in its place"
    );
}
