//! A run's trace for OpenTelemetry, sent by its watcher once the run is
//! answered to the OTLP/HTTP endpoint the node's configuration names
//! (`otlp`): made after the fact from what the run's directory and the
//! repository hold (the record's receipt, when the node opened the run,
//! the transcript's deliveries, turns, tool calls and end, the delays and
//! each turn's tokens), so nothing on a delivery's path waits on a
//! collector. Its id is the record's hash's first 32 digits: the log and
//! the run's page say it without keeping it anywhere.

use super::transcript::{Entry, Said};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

/// How long a collector is given to take a run's trace.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why a run's trace was not sent.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The exporter could not be made for the endpoint.
    #[error("no exporter for the collector at {0}: {1}")]
    Exporter(String, String),
    /// The collector did not take the trace.
    #[error("the collector at {0} did not take the run's trace: {1}")]
    Export(String, String),
}

/// The id of the trace of the run of `record`: its hash's first 32 hex
/// digits, when it has them (and they are not all zero).
pub fn trace_id(record: &str) -> Option<String> {
    let id: String = record
        .chars()
        .take(32)
        .collect::<String>()
        .to_ascii_lowercase();
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) && id.bytes().any(|b| b != b'0'))
        .then_some(id)
}

/// What a run's trace is made of.
#[derive(Debug, Clone)]
pub struct Told {
    /// The record's full hash.
    pub record: String,
    /// The record's runner.
    pub runner: String,
    /// The record's sender, by login.
    pub sender: Option<String>,
    /// How it ended.
    pub outcome: String,
    /// When the repository received the record.
    pub received: Option<SystemTime>,
    /// When the node opened the run.
    pub opened: Option<SystemTime>,
    /// When the run was answered.
    pub answered: SystemTime,
    /// The run's transcript.
    pub entries: Vec<Entry>,
    /// Each delivery's delay from its artifact's receipt, in order.
    pub delays: Vec<f64>,
    /// The tokens spent by each turn's end: its entry's number, in, out.
    pub turns: Vec<(u64, u64, u64)>,
    /// The tokens the run spent in all, in and out, where it counted them.
    pub spent: Option<(u64, u64)>,
}

/// A transcript entry's time.
fn at(e: &Entry) -> Option<SystemTime> {
    let t = chrono::NaiveDateTime::parse_from_str(&e.at, "%Y-%m-%dT%H:%M:%S%.f").ok()?;
    let micros = u64::try_from(t.and_utc().timestamp_micros()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_micros(micros))
}

/// The spans of one trace, built with the same id and scope.
struct Spans {
    trace: TraceId,
    record: String,
    scope: InstrumentationScope,
    made: Vec<SpanData>,
}

impl Spans {
    /// A span id of this trace, the `n`th: a hash of the record and `n`.
    fn id(&self, n: usize) -> SpanId {
        use sha2::Digest;
        let d = sha2::Sha256::digest(format!("{}/{n}", self.record).as_bytes());
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[..8]);
        b[0] |= 1;
        SpanId::from_bytes(b)
    }

    /// Adds a span named `name` under `parent` (none for the root) from
    /// `start` to `end`; answers its id.
    fn add(
        &mut self,
        name: &'static str,
        parent: Option<SpanId>,
        (start, end): (SystemTime, SystemTime),
        attributes: Vec<KeyValue>,
        error: bool,
    ) -> SpanId {
        let id = self.id(self.made.len());
        self.made.push(SpanData {
            span_context: SpanContext::new(
                self.trace,
                id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: parent.unwrap_or(SpanId::INVALID),
            parent_span_is_remote: false,
            span_kind: if parent.is_none() {
                SpanKind::Server
            } else {
                SpanKind::Internal
            },
            name: name.into(),
            start_time: start,
            end_time: end.max(start),
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: if error {
                Status::error("")
            } else {
                Status::Unset
            },
            instrumentation_scope: self.scope.clone(),
        });
        id
    }
}

/// The run's spans: the run (its root), the record's arrival, the run's
/// start, each delivery, each turn of its agent with its tokens, each
/// tool call within it, and the response; none where the record's hash
/// gives no trace id.
pub fn spans(t: &Told) -> Vec<SpanData> {
    let Some(trace) = trace_id(&t.record).and_then(|id| TraceId::from_hex(&id).ok()) else {
        return Vec::new();
    };
    let first = t.entries.iter().find_map(at);
    let start = [t.received, t.opened, first]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(t.answered);
    let mut s = Spans {
        trace,
        record: t.record.clone(),
        scope: InstrumentationScope::builder("ocx")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
        made: Vec::new(),
    };
    let mut about = vec![
        KeyValue::new("ocx.record", t.record.clone()),
        KeyValue::new("ocx.runner", t.runner.clone()),
        KeyValue::new("ocx.outcome", t.outcome.clone()),
    ];
    if let Some(sender) = &t.sender {
        about.push(KeyValue::new("ocx.sender", sender.clone()));
    }
    let root = s.add(
        "run",
        None,
        (start, t.answered),
        about,
        t.outcome != "exited",
    );
    if let (Some(r), Some(o)) = (t.received, t.opened) {
        s.add("record arrived", Some(root), (r, o), Vec::new(), false);
    }
    if let (Some(o), Some(f)) = (t.opened, first) {
        s.add("run started", Some(root), (o, f), Vec::new(), false);
    }
    entries(&mut s, root, t);
    s.made
}

/// The spans of the transcript's entries under `root`: deliveries, turns,
/// tool calls and the response. Each turn answers one delivery, in the
/// order given (an agent takes a line given during a turn at the next):
/// it starts when its delivery was read or the turn before ended,
/// whichever is later, and ends at its end, or at the answer when the run
/// ended within it. A tool call lies within the turn open when it was made.
fn entries(s: &mut Spans, root: SpanId, t: &Told) {
    let timed: Vec<(&Entry, SystemTime)> =
        t.entries.iter().filter_map(|e| Some((e, at(e)?))).collect();
    let given: Vec<SystemTime> = timed
        .iter()
        .filter(|(e, _)| matches!(e.said, Said::Delivery { .. }))
        .map(|(_, w)| *w)
        .collect();
    let agent = timed.iter().any(|(e, _)| {
        matches!(
            e.said,
            Said::Words { .. }
                | Said::ToolCall { .. }
                | Said::TurnEnded { .. }
                | Said::Error { .. }
        )
    });
    let ids: Vec<SpanId> = (0..=given.len()).map(|k| s.id(usize::MAX - k)).collect();
    let mut turn = 0usize;
    let mut last_end: Option<SystemTime> = None;
    let mut spent = (0u64, 0u64);
    let mut delays = t.delays.iter();
    let mut deliveries = 0usize;
    for (e, when) in &timed {
        let when = *when;
        match &e.said {
            Said::Delivery { .. } => {
                deliveries += 1;
                // The first is the record's own line, from no spool.
                let delay = match deliveries {
                    1 => None,
                    _ => delays.next().copied(),
                };
                let from = delay
                    .and_then(|d| when.checked_sub(Duration::from_secs_f64(d)))
                    .unwrap_or(when);
                let mut attrs = vec![KeyValue::new("ocx.delivery", deliveries as i64)];
                if let Some(d) = delay {
                    attrs.push(KeyValue::new("ocx.delay_seconds", d));
                }
                s.add("delivery", Some(root), (from, when), attrs, false);
            }
            Said::ToolCall { id, name, .. } => {
                let result = timed.iter().find_map(|(r, a)| match &r.said {
                    Said::ToolResult { id: of, error, .. } if of == id && r.seq > e.seq => {
                        Some((*a, *error))
                    }
                    _ => None,
                });
                let (end, error) = result.unwrap_or((when, false));
                let parent = match agent && turn < given.len() {
                    true => ids[turn],
                    false => root,
                };
                let attrs = vec![KeyValue::new("ocx.tool", name.clone())];
                s.add("tool call", Some(parent), (when, end), attrs, error);
            }
            Said::TurnEnded { ok } => {
                if let Some(read) = given.get(turn) {
                    let from = last_end.map_or(*read, |l| l.max(*read));
                    let by_end = t.turns.iter().find(|(seq, ..)| *seq == e.seq);
                    let attrs = tokens(&mut spent, by_end.map(|(_, i, o)| (*i, *o)));
                    add_turn(s, ids[turn], root, (from, when), attrs, !ok);
                }
                turn += 1;
                last_end = Some(when);
            }
            Said::Ended { outcome, .. } => {
                let attrs = vec![KeyValue::new("ocx.outcome", outcome.clone())];
                s.add("response", Some(root), (when, t.answered), attrs, false);
            }
            _ => {}
        }
    }
    if let (true, Some(read)) = (agent, given.get(turn)) {
        let from = last_end.map_or(*read, |l| l.max(*read));
        let attrs = tokens(&mut spent, t.spent);
        add_turn(s, ids[turn], root, (from, t.answered), attrs, true);
    }
}

/// A turn's tokens as attributes: what was spent by its end (`by_end`,
/// in and out) beyond what was `spent` before it, which becomes that.
fn tokens(spent: &mut (u64, u64), by_end: Option<(u64, u64)>) -> Vec<KeyValue> {
    let Some((i, o)) = by_end else {
        return Vec::new();
    };
    let attrs = vec![
        KeyValue::new(
            "gen_ai.usage.input_tokens",
            i.saturating_sub(spent.0) as i64,
        ),
        KeyValue::new(
            "gen_ai.usage.output_tokens",
            o.saturating_sub(spent.1) as i64,
        ),
    ];
    *spent = (i, o);
    attrs
}

/// Adds a turn, its id `id`, which its tool calls were given already.
fn add_turn(
    s: &mut Spans,
    id: SpanId,
    root: SpanId,
    during: (SystemTime, SystemTime),
    attributes: Vec<KeyValue>,
    error: bool,
) {
    s.add("agent turn", Some(root), during, attributes, error);
    if let Some(span) = s.made.last_mut() {
        span.span_context = SpanContext::new(
            span.span_context.trace_id(),
            id,
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        );
    }
}

/// Sends `spans` to the OTLP/HTTP `endpoint` (JSON, as the OTLP
/// specification gives it), waiting [`TIMEOUT`] at most, as the service
/// `ocx` of the node `node`.
pub fn send(endpoint: &str, node: &str, spans: Vec<SpanData>) -> Result<(), TraceError> {
    use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(TIMEOUT))
            .build(),
    );
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpJson)
        .with_endpoint(endpoint)
        .with_timeout(TIMEOUT)
        .with_http_client(Client(agent))
        .build()
        .map_err(|e| TraceError::Exporter(endpoint.into(), e.to_string()))?;
    exporter.set_resource(
        &opentelemetry_sdk::Resource::builder_empty()
            .with_service_name("ocx")
            .with_attribute(KeyValue::new("ocx.node", node.to_string()))
            .build(),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| TraceError::Export(endpoint.into(), e.to_string()))?;
    runtime
        .block_on(exporter.export(spans))
        .map_err(|e| TraceError::Export(endpoint.into(), e.to_string()))
}

/// The exporter's HTTP client: the blocking client the rest of OCX uses.
#[derive(Debug)]
struct Client(ureq::Agent);

/// The most of a collector's answer read.
const ANSWER_MAX: u64 = 1 << 20;

impl HttpClient for Client {
    fn send_bytes<'s, 'f>(
        &'s self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'f>>
    where
        's: 'f,
        Self: 'f,
    {
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let request = Request::from_parts(parts, body.to_vec());
            let mut answer = self.0.run(request)?;
            let status = answer.status();
            let body = answer
                .body_mut()
                .with_config()
                .limit(ANSWER_MAX)
                .read_to_vec()?;
            Ok(Response::builder().status(status).body(Bytes::from(body))?)
        })
    }
}

/// Sends the trace of the run of `record` (of `runner`, sent by `sender`,
/// ended as `outcome`, answered now) to the endpoint the node at `root`
/// names, made from its directory and its receipt in `repo`; answers the
/// trace's id and how many spans it sent, or `None` when the node names
/// no endpoint.
pub fn send_run(
    root: &std::path::Path,
    cfg: &super::config::NodeConfig,
    repo: &crate::fossil::Repository,
    record: &str,
    (runner, sender, outcome): (&str, Option<&str>, &str),
) -> Result<Option<(String, usize)>, TraceError> {
    let (Some(endpoint), Some(id)) = (&cfg.otlp, trace_id(record)) else {
        return Ok(None);
    };
    let dir = super::config::NodeConfig::run_dir(root, record);
    let mut entries = Vec::new();
    while let Ok(more) = super::transcript::read_after(
        &dir,
        entries.last().map_or(0, |e: &Entry| e.seq),
        super::transcript::READ_MAX,
    ) {
        if more.is_empty() {
            break;
        }
        entries.extend(more);
    }
    let told = Told {
        record: record.into(),
        runner: runner.into(),
        sender: sender.map(Into::into),
        outcome: outcome.into(),
        received: repo.received_at(record).ok().flatten(),
        opened: super::metrics::read_facts(&dir)
            .map(|f| SystemTime::UNIX_EPOCH + Duration::from_secs_f64(f.opened.max(0.0))),
        answered: SystemTime::now(),
        entries,
        delays: std::fs::read_to_string(dir.join(super::spool::DELAYS))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse::<f64>().ok())
            .filter(|d| d.is_finite() && *d >= 0.0)
            .collect(),
        turns: super::transcript::Transcript::turns(&dir),
        spent: super::transcript::read_spend(&dir)
            .and_then(|s| Some((s.tokens_in?, s.tokens_out?))),
    };
    let spans = spans(&told);
    let n = spans.len();
    send(endpoint, &cfg.login, spans)?;
    Ok(Some((id, n)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(seq: u64, at: &str, said: Said) -> Entry {
        Entry {
            seq,
            at: at.into(),
            said,
        }
    }

    #[test]
    fn a_trace_id_is_the_records_first_32_digits_and_none_of_no_hash() {
        let record = "0123456789abcdefABCDEF0123456789abcdef01";
        assert_eq!(
            trace_id(record).as_deref(),
            Some("0123456789abcdefabcdef0123456789")
        );
        assert_eq!(trace_id("0123"), None);
        assert_eq!(trace_id(&"0".repeat(40)), None);
        assert_eq!(trace_id(&"g".repeat(40)), None);
    }

    #[test]
    fn a_runs_spans_follow_its_transcript_each_turn_with_its_tokens() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let told = Told {
            record: "ab".repeat(20),
            runner: "claude".into(),
            sender: Some("pat".into()),
            outcome: "exited".into(),
            received: Some(t0),
            opened: Some(t0 + Duration::from_millis(5)),
            answered: t0 + Duration::from_secs(10),
            entries: vec![
                entry(
                    1,
                    "2027-01-15T08:00:01.000",
                    Said::Delivery {
                        text: "Record".into(),
                    },
                ),
                entry(2, "2027-01-15T08:00:02.000", Said::TurnEnded { ok: true }),
                entry(
                    3,
                    "2027-01-15T08:00:04.000",
                    Said::Delivery {
                        text: "Post".into(),
                    },
                ),
                entry(
                    4,
                    "2027-01-15T08:00:05.000",
                    Said::ToolCall {
                        id: "c".into(),
                        name: "mcp__ocx__ocx_post".into(),
                        arguments: json!({}),
                    },
                ),
                entry(
                    5,
                    "2027-01-15T08:00:06.000",
                    Said::ToolResult {
                        id: "c".into(),
                        output: "ok".into(),
                        error: true,
                    },
                ),
                entry(6, "2027-01-15T08:00:07.000", Said::TurnEnded { ok: true }),
                entry(
                    7,
                    "2027-01-15T08:00:08.000",
                    Said::Ended {
                        outcome: "exited".into(),
                        note: "".into(),
                    },
                ),
            ],
            delays: vec![0.25],
            turns: vec![(2, 100, 10), (6, 250, 30)],
            spent: Some((250, 30)),
        };
        let spans = spans(&told);
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "run",
                "record arrived",
                "run started",
                "delivery",
                "agent turn",
                "delivery",
                "tool call",
                "agent turn",
                "response"
            ]
        );
        let root = spans[0].span_context.span_id();
        assert!(
            spans
                .iter()
                .all(|s| s.span_context.trace_id() == spans[0].span_context.trace_id())
        );
        let attr = |s: &SpanData, k: &str| {
            s.attributes
                .iter()
                .find(|a| a.key.as_str() == k)
                .map(|a| a.value.to_string())
        };
        let turns: Vec<&SpanData> = spans.iter().filter(|s| s.name == "agent turn").collect();
        assert_eq!(
            attr(turns[0], "gen_ai.usage.input_tokens").as_deref(),
            Some("100")
        );
        assert_eq!(
            attr(turns[1], "gen_ai.usage.input_tokens").as_deref(),
            Some("150")
        );
        assert_eq!(
            attr(turns[1], "gen_ai.usage.output_tokens").as_deref(),
            Some("20")
        );
        let call = spans.iter().find(|s| s.name == "tool call").unwrap();
        assert_eq!(
            call.parent_span_id,
            turns[1].span_context.span_id(),
            "within its turn"
        );
        assert_eq!(call.status, Status::error(""), "a failed call is an error");
        assert!(turns.iter().all(|t| t.parent_span_id == root));
        let post = &spans[5];
        assert_eq!(
            post.end_time.duration_since(post.start_time).unwrap(),
            Duration::from_millis(250),
            "a delivery spans its delay from the receipt: {post:?}"
        );
    }

    #[test]
    fn a_line_read_during_a_turn_starts_the_next_turn_at_that_turns_end() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let e = |seq, at: &str, said| entry(seq, &format!("2027-01-15T08:00:0{at}"), said);
        let call = Said::ToolCall {
            id: "c".into(),
            name: "ocx_post".into(),
            arguments: json!({}),
        };
        let told = Told {
            record: "cd".repeat(20),
            runner: "claude".into(),
            sender: None,
            outcome: "stopped".into(),
            received: None,
            opened: None,
            answered: t0,
            entries: vec![
                e(
                    1,
                    "1.000",
                    Said::Delivery {
                        text: "Record".into(),
                    },
                ),
                e(
                    2,
                    "1.500",
                    Said::Delivery {
                        text: "Post".into(),
                    },
                ),
                e(3, "2.000", Said::TurnEnded { ok: true }),
                e(4, "3.000", call),
                e(5, "4.000", Said::TurnEnded { ok: true }),
            ],
            delays: vec![0.1],
            turns: Vec::new(),
            spent: None,
        };
        let spans = spans(&told);
        let turns: Vec<&SpanData> = spans.iter().filter(|s| s.name == "agent turn").collect();
        assert_eq!(turns.len(), 2, "{spans:#?}");
        assert_eq!(turns[0].end_time, turns[1].start_time, "{spans:#?}");
        assert!(turns.iter().all(|t| t.status == Status::Unset));
        let call = spans.iter().find(|s| s.name == "tool call").unwrap();
        assert_eq!(call.parent_span_id, turns[1].span_context.span_id());
    }
}
