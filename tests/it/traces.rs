//! A run's trace as an operator's collector receives it: a node told
//! `--otlp`, the real Claude Code answering a record and a post (calling
//! one of the node's tools) through its relay, and a receiver of the
//! test's own speaking OTLP/HTTP with JSON, as the OTLP specification
//! gives it (no OpenTelemetry Collector ships in Debian). The run's spans
//! come under the one trace id its log and its page say.

use crate::agents::{Agent, Site, answered, delivery};
use crate::model::{Model, Reply};
use crate::support::{is, until_logged};
use crate::tls::{Tls, port_of};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An OTLP/HTTP receiver on 127.0.0.1: each request's JSON body kept;
/// ended when dropped.
struct Receiver {
    port: u16,
    bodies: Arc<Mutex<Vec<(String, Value)>>>,
    done: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let done = Arc::new(AtomicBool::new(false));
        let thread = {
            let (bodies, done) = (bodies.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            stream.set_nonblocking(false).unwrap();
                            stream
                                .set_read_timeout(Some(Duration::from_secs(5)))
                                .unwrap();
                            serve(stream, &bodies);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })
        };
        Receiver {
            port,
            bodies,
            done,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The spans received for the trace `id`, each with its resource.
    fn spans_of(&self, id: &str) -> Vec<(Value, Value)> {
        let mut spans = Vec::new();
        for (_, body) in self.bodies.lock().unwrap().iter() {
            for rs in body["resourceSpans"].as_array().into_iter().flatten() {
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    for s in ss["spans"].as_array().into_iter().flatten() {
                        if s["traceId"] == id {
                            spans.push((rs["resource"].clone(), s.clone()));
                        }
                    }
                }
            }
        }
        spans
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers the requests on one connection: each POST's body kept with its
/// path, answered 200 with an empty JSON response.
fn serve(stream: std::net::TcpStream, bodies: &Mutex<Vec<(String, Value)>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut start = String::new();
        if reader.read_line(&mut start).unwrap_or(0) == 0 {
            return;
        }
        let path = start.split(' ').nth(1).unwrap_or("").to_string();
        let mut length = 0usize;
        let mut json = false;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').unwrap_or((line, ""));
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap_or(0),
                "content-type" => json = value.trim().starts_with("application/json"),
                _ => {}
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let (status, answer) = match serde_json::from_slice::<Value>(&body) {
            Ok(v) if json => {
                bodies.lock().unwrap().push((path, v));
                ("200 OK", "{}")
            }
            _ => ("400 Bad Request", "{}"),
        };
        let _ = write!(
            out,
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        );
    }
}

/// An attribute's value among `attributes` (OTLP's JSON: a key and a
/// typed value), as JSON.
fn attribute(span: &Value, key: &str) -> Value {
    span["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["key"] == key)
        .map(|a| {
            let v = &a["value"];
            v.get("stringValue")
                .or(v.get("intValue"))
                .or(v.get("doubleValue"))
                .or(v.get("boolValue"))
                .cloned()
                .unwrap_or(Value::Null)
        })
        .unwrap_or(Value::Null)
}

/// A number an attribute holds (OTLP's JSON gives 64-bit integers as
/// strings).
fn number(v: &Value) -> f64 {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(f64::NAN)
}

#[test]
fn a_runs_trace_reaches_the_collector_with_its_arrival_deliveries_turns_tool_call_and_response() {
    let agent = Agent::Claude;
    let model = Model::start(move |r| {
        let Some((line, hash)) = delivery(r) else {
            return Reply::text("Nothing to do.");
        };
        if line.starts_with("Record ") {
            Reply::text("Ready to review.")
        } else if line.contains("say hi yourself") && answered(r) == 0 {
            Reply::tool(
                &agent.tool("ocx", "post"),
                json!({"to": hash, "text": "hi, from my own tool call"}),
            )
        } else {
            Reply::text("I said hi.")
        }
    });
    crate::agents::installed(agent);
    // Through the node's relay, which counts each turn's tokens.
    let tls = Tls::front(port_of(&model.url()));
    let site = Site {
        node: crate::relay::node(&tls),
        agent,
    };
    site.json(&crate::agents::runner_args("claude", &tls.url()));
    let receiver = Receiver::start();
    assert!(
        site.node
            .repo
            .json(&["node", "start", "--otlp", "ftp://127.0.0.1/x"])
            .refused()
            .contains("otlp"),
        "an endpoint of no http URL is refused, naming the field"
    );
    site.json(&["node", "start", "--otlp", &receiver.url()]);
    let record = site.record(&[]);
    let user = site.user_of(&record);
    site.said(&record, &user, "Ready to review.");
    site.post(&record, "Please say hi yourself.");
    site.said(&record, &user, "hi, from my own tool call");
    // The turn that posted it ends once the model has its tool's result.
    let transcript = site.run_dir(&record).join("transcript.jsonl");
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&transcript)
        .unwrap_or_default()
        .matches("\"kind\":\"turn_ended\"")
        .count()
        < 2
    {
        assert!(
            std::time::Instant::now() < until,
            "the second turn never ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    site.json(&["stop", "--record", &record]);
    let root = site.root();
    let traced = until_logged(&root, 60, |e| is(e, "traced", &record));
    let id = traced["trace"].as_str().unwrap().to_string();
    assert_eq!(
        id,
        record[..32],
        "the trace's id is the record's hash's first 32 digits"
    );
    let run = site.json(&["run", "--record", &record]);
    assert_eq!(
        run["trace"], id,
        "`run` (and so its page) says the trace's id"
    );

    let spans = receiver.spans_of(&id);
    let (resource, _) = spans.first().expect("the run's spans were received");
    assert!(
        resource.to_string().contains("\"ocx\""),
        "sent as the service ocx: {resource:#}"
    );
    let named = |name: &str| -> Vec<&Value> {
        spans
            .iter()
            .map(|(_, s)| s)
            .filter(|s| s["name"] == name)
            .collect()
    };
    let roots = named("run");
    assert_eq!(roots.len(), 1, "one root: {spans:#?}");
    let root_span = roots[0];
    assert!(
        root_span["parentSpanId"].as_str().unwrap_or("").is_empty(),
        "{root_span:#}"
    );
    assert_eq!(attribute(root_span, "ocx.runner"), "claude");
    assert_eq!(attribute(root_span, "ocx.sender"), "admin");
    assert_eq!(attribute(root_span, "ocx.outcome"), "stopped");
    let root_id = root_span["spanId"].clone();
    for name in ["record arrived", "run started", "response"] {
        let found = named(name);
        assert_eq!(found.len(), 1, "{name}: {spans:#?}");
        assert_eq!(found[0]["parentSpanId"], root_id, "{name}");
    }
    let deliveries = named("delivery");
    assert!(
        deliveries.len() >= 2,
        "the record's line and the post, each a delivery: {deliveries:#?}"
    );
    assert!(
        deliveries
            .iter()
            .any(|d| number(&attribute(d, "ocx.delay_seconds")) >= 0.0),
        "the post's delivery says its delay: {deliveries:#?}"
    );
    let turns = named("agent turn");
    let ended: Vec<_> = turns.iter().filter(|t| t["status"]["code"] != 2).collect();
    assert!(ended.len() >= 2, "a turn a delivery: {turns:#?}");
    for t in &ended {
        assert!(
            number(&attribute(t, "gen_ai.usage.input_tokens")) > 0.0
                && number(&attribute(t, "gen_ai.usage.output_tokens")) > 0.0,
            "each turn says its tokens: {t:#}"
        );
    }
    let calls = named("tool call");
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert!(
        attribute(calls[0], "ocx.tool")
            .as_str()
            .is_some_and(|n| n.ends_with("ocx_post")),
        "{:#}",
        calls[0]
    );
    assert!(
        turns
            .iter()
            .any(|t| t["spanId"] == calls[0]["parentSpanId"]),
        "the tool call lies within its turn: {spans:#?}"
    );
}
