//! The node's metrics, in Prometheus's text format, served on the loopback
//! address its configuration names (`metrics`): read at each scrape from
//! what is already on disk for each run (the `run.json` the node writes as
//! it opens the run and as its response arrives, the watcher's
//! `spend.json` and `delays`), beside the few counts the node's process
//! keeps itself. Nothing is sent from a run to the node for them, so the
//! delivery's path is unchanged but for the delay its watcher appends.
//! A label holds a runner's name, a sender's login, an outcome, a status
//! or a field's name: never an objective, a post's text or a secret.

use super::config::NodeConfig;
use super::transcript::{Spend, read_spend};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{LazyLock, Mutex};
use std::time::SystemTime;

/// The file in a run's directory saying what the metrics label it by.
pub const RUN_FILE: &str = "run.json";

/// What the node knows of a run for its metrics, `run.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunFacts {
    /// The record's runner.
    pub runner: String,
    /// The record's sender, by login.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    /// When the run was opened (seconds since 1970).
    pub opened: f64,
    /// How it ended, once the node's response arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// When its response arrived (seconds since 1970).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<f64>,
}

/// Seconds since 1970 now.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// Writes that the run in `dir` was opened now, of `runner`, sent by
/// `sender`.
pub fn opened(dir: &Path, runner: &str, sender: Option<&str>) -> std::io::Result<()> {
    write_facts(
        dir,
        &RunFacts {
            runner: runner.into(),
            sender: sender.map(Into::into),
            opened: now(),
            outcome: None,
            ended: None,
        },
    )
}

/// Writes that the run of `record` under `root` ended as `outcome`, where
/// the node opened it; a response arriving twice keeps the first.
pub fn ended(root: &Path, record: &str, outcome: &str) {
    let dir = NodeConfig::run_dir(root, record);
    if let Some(mut facts) = read_facts(&dir)
        && facts.outcome.is_none()
    {
        facts.outcome = Some(outcome.into());
        facts.ended = Some(now());
        let _ = write_facts(&dir, &facts);
    }
}

fn write_facts(dir: &Path, facts: &RunFacts) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(facts).map_err(std::io::Error::other)?;
    crate::file::write_whole_unsynced(
        &dir.join(RUN_FILE),
        &dir.join(".run.json.new"),
        &bytes,
        0o600,
    )
}

/// The run's facts in `dir`, when the node wrote them.
pub fn read_facts(dir: &Path) -> Option<RunFacts> {
    serde_json::from_slice(&std::fs::read(dir.join(RUN_FILE)).ok()?).ok()
}

/// A label's value as kept: at most 64 characters.
fn label(value: &str) -> String {
    value.chars().take(64).collect()
}

/// The outcomes a response may give; any other is counted as `other`.
const OUTCOMES: &[&str] = &[
    "exited",
    "refused",
    "lost",
    "stopped",
    "budget",
    "unenforced",
];

/// The counts the node's process keeps itself, since it started: what
/// no run's directory holds.
pub struct Kept {
    /// Records addressed to this node that its wakes read.
    pub records_seen: Counter,
    /// Records the node refused, by the field it named.
    pub records_refused: Family<Vec<(&'static str, String)>, Counter>,
    /// Deliveries the node could not give.
    pub deliveries_failed: Counter,
    /// Wakes that failed.
    pub wakes_failed: Counter,
}

/// The node process's own counts.
pub static KEPT: LazyLock<Kept> = LazyLock::new(|| Kept {
    records_seen: Counter::default(),
    records_refused: Family::default(),
    deliveries_failed: Counter::default(),
    wakes_failed: Counter::default(),
});

/// Counts a record the node refused, naming `field`.
pub fn refused(field: &str) {
    let field = field.split(['.', '[']).next().unwrap_or("");
    KEPT.records_refused
        .get_or_create(&vec![("field", label(field))])
        .inc();
}

/// The file under a node's root counting its page's requests, a line
/// each: when (seconds since 1970), the page or tool, the status, and the
/// login that waited (for a `wait`, which agent machines hold open) or `-`.
pub const PAGES_FILE: &str = "pages";

/// How large [`PAGES_FILE`] grows before the node, having read it, starts
/// it afresh.
const PAGES_MAX: u64 = 1 << 20;

/// The node root each repository's page counts its requests in, as first
/// found by a page server (none: the repository is no node here).
static ROOTS: LazyLock<Mutex<HashMap<PathBuf, Option<PathBuf>>>> = LazyLock::new(Mutex::default);

/// Counts a request of the page of `repo` for its node's metrics: `page`
/// (a tool's name, or the page's own: landing, tools, console, run,
/// wait, other) answered `status`, waited by `waiter`. Nothing where the
/// repository is no node, or its root is not this account's to write.
pub fn page_request(
    repo: &crate::fossil::Repository,
    page: &str,
    status: u16,
    waiter: Option<&str>,
) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let root = {
        let mut roots = ROOTS.lock().unwrap_or_else(|e| e.into_inner());
        roots
            .entry(repo.path().to_path_buf())
            .or_insert_with(|| super::hook::root_of(repo).ok().flatten())
            .clone()
    };
    let Some(root) = root else { return };
    let waiter: String = waiter
        .unwrap_or("-")
        .chars()
        .filter(|c| !c.is_control() && !c.is_whitespace())
        .take(64)
        .collect();
    let line = format!("{:.3} {page} {status} {waiter}\n", now());
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(root.join(PAGES_FILE))
        .and_then(|mut f| f.write_all(line.as_bytes()));
}

/// The page's requests as read so far from [`PAGES_FILE`].
#[derive(Default)]
struct Pages {
    read: u64,
    requests: Family<Labels, Counter>,
    /// Each login's last wait, seconds since 1970.
    waits: HashMap<String, f64>,
}

impl Pages {
    /// Reads what was added to the root's [`PAGES_FILE`] since; starts it
    /// afresh once it is large.
    fn refresh(&mut self, root: &Path) {
        let path = root.join(PAGES_FILE);
        let Ok(mut file) = std::fs::File::open(&path) else {
            self.read = 0;
            return;
        };
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        if size < self.read {
            self.read = 0;
        }
        let mut text = String::new();
        if file.seek(SeekFrom::Start(self.read)).is_err()
            || file.take(4 << 20).read_to_string(&mut text).is_err()
        {
            return;
        }
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        for line in text[..whole].lines() {
            self.count(line);
        }
        self.read += whole as u64;
        if self.read >= PAGES_MAX && self.read == size {
            let _ = std::fs::rename(&path, root.join(".pages.old"));
            self.read = 0;
        }
    }

    /// Registers the page's requests and each login's last wait in `r`.
    fn register(&self, r: &mut Registry) {
        let waits = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        for (login, at) in &self.waits {
            waits
                .get_or_create(&vec![("machine", login.clone())])
                .set(*at);
        }
        r.register(
            "ocx_page_requests",
            "Requests of the node's page, by tool (or page) and status",
            self.requests.clone(),
        );
        r.register(
            "ocx_machine_last_contact_seconds",
            "When each login last waited on the page (the long-poll agent machines hold open), seconds since 1970",
            waits,
        );
        let machines = Gauge::<i64, std::sync::atomic::AtomicI64>::default();
        machines.set(self.waits.len() as i64);
        r.register(
            "ocx_machines",
            "Logins that have waited on the page (agent machines) since the node started",
            machines,
        );
    }

    /// Counts one line of [`PAGES_FILE`], when it reads as one.
    fn count(&mut self, line: &str) {
        let mut words = line.split(' ');
        let (Some(at), Some(page), Some(status), Some(waiter)) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            return;
        };
        let (Ok(at), Ok(status)) = (at.parse::<f64>(), status.parse::<u16>()) else {
            return;
        };
        // The page writes a tool's name as its registry has it.
        let named = page.len() <= 32 && page.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
        let page = if named { page } else { "other" };
        self.requests
            .get_or_create(&vec![
                ("tool", page.to_string()),
                ("status", status.to_string()),
            ])
            .inc();
        if page == "wait" && waiter != "-" {
            let last = self.waits.entry(label(waiter)).or_default();
            *last = last.max(at);
        }
    }
}

/// The buckets of the delivery delay, in seconds.
const DELAY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// What one run's directory said, as last read.
struct Seen {
    facts: RunFacts,
    spend: Option<Spend>,
    /// How far its `delays` has been read.
    delays_read: u64,
    /// Whether it had ended when read: nothing more is read of it.
    done: bool,
}

/// The metrics of the node at a root, read again at each scrape but for
/// what an ended run's directory said once.
pub struct Metrics {
    root: PathBuf,
    runs: Mutex<HashMap<OsString, Seen>>,
    delays: Histogram,
    pages: Mutex<Pages>,
}

/// Labels: a list of names and values.
type Labels = Vec<(&'static str, String)>;

impl Metrics {
    /// The metrics of the node at `root`.
    pub fn new(root: &Path) -> Metrics {
        Metrics {
            root: root.to_path_buf(),
            runs: Mutex::default(),
            delays: Histogram::new(DELAY_BUCKETS),
            pages: Mutex::default(),
        }
    }

    /// Reads what changed in the runs' directories: each run not yet seen
    /// ended, read whole; its delays from where they were last read.
    fn refresh(&self) -> std::sync::MutexGuard<'_, HashMap<OsString, Seen>> {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        let Ok(dirs) = std::fs::read_dir(self.root.join("runs")) else {
            runs.clear();
            return runs;
        };
        let mut present = std::collections::HashSet::new();
        for entry in dirs.filter_map(Result::ok) {
            let name = entry.file_name();
            present.insert(name.clone());
            if runs.get(&name).is_some_and(|s| s.done) {
                continue;
            }
            let dir = entry.path();
            let Some(facts) = read_facts(&dir) else {
                continue;
            };
            let seen = runs.entry(name).or_insert_with(|| Seen {
                facts: facts.clone(),
                spend: None,
                delays_read: 0,
                done: false,
            });
            seen.done = facts.outcome.is_some();
            seen.facts = facts;
            seen.spend = read_spend(&dir);
            seen.delays_read = read_delays(&dir, seen.delays_read, &self.delays);
        }
        runs.retain(|name, _| present.contains(name));
        runs
    }

    /// The metrics now, in Prometheus's text format.
    pub fn render(&self) -> String {
        let runs = self.refresh();
        let tally = Tally::default();
        for seen in runs.values() {
            tally.count(seen);
        }
        drop(runs);
        let mut r = Registry::default();
        tally.register(&mut r, &self.delays);
        let mut pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
        pages.refresh(&self.root);
        pages.register(&mut r);
        drop(pages);
        let mut text = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut text, &r);
        text
    }
}

/// The runs' metrics, as counted over their directories at one scrape.
#[derive(Default)]
struct Tally {
    opened: Family<Labels, Counter>,
    open: Family<Labels, Gauge>,
    ended: Family<Labels, Counter>,
    budgets: Family<Labels, Counter>,
    tokens: Family<Labels, Counter>,
    cost: Family<Labels, Counter<f64, AtomicU64>>,
    errors: Family<Labels, Counter>,
    refused: Family<Labels, Counter>,
}

impl Tally {
    /// Counts what one run's directory said.
    fn count(&self, seen: &Seen) {
        let runner = label(&seen.facts.runner);
        let by_runner = vec![("runner", runner.clone())];
        self.opened.get_or_create(&by_runner).inc();
        match &seen.facts.outcome {
            None => {
                self.open.get_or_create(&by_runner).inc();
            }
            Some(o) => {
                let outcome = match OUTCOMES.contains(&o.as_str()) {
                    true => o.clone(),
                    false => "other".into(),
                };
                if outcome == "budget" {
                    self.budgets.get_or_create(&by_runner).inc();
                }
                self.ended
                    .get_or_create(&vec![("runner", runner.clone()), ("outcome", outcome)])
                    .inc();
            }
        }
        let Some(spend) = &seen.spend else { return };
        let sender = label(seen.facts.sender.as_deref().unwrap_or(""));
        let by_sender = |more: (&'static str, String)| {
            vec![("runner", runner.clone()), ("sender", sender.clone()), more]
        };
        for (direction, n) in [("in", spend.tokens_in), ("out", spend.tokens_out)] {
            if let Some(n) = n {
                self.tokens
                    .get_or_create(&by_sender(("direction", direction.into())))
                    .inc_by(n);
            }
        }
        if let (Some(c), Some(currency)) = (spend.cost, &spend.currency) {
            self.cost
                .get_or_create(&by_sender(("currency", label(currency))))
                .inc_by(c.to_string().parse::<f64>().unwrap_or(0.0));
        }
        for (status, n) in &spend.model_errors {
            // An agent machine reports its runs' spend: a status of no
            // HTTP form is counted as other, so no report adds series.
            let status = match status.len() == 3 && status.bytes().all(|b| b.is_ascii_digit()) {
                true => status.clone(),
                false if status == "unreached" => status.clone(),
                false => "other".into(),
            };
            self.errors
                .get_or_create(&vec![("runner", runner.clone()), ("status", status)])
                .inc_by(*n);
        }
        if let Some(n) = spend.connections_refused.filter(|n| *n > 0) {
            self.refused.get_or_create(&by_runner).inc_by(n);
        }
    }

    /// Registers every metric in `r`: these, the node process's own, and
    /// the deliveries' `delays`.
    fn register(self, r: &mut Registry, delays: &Histogram) {
        let kept = &*KEPT;
        r.register(
            "ocx_records_seen",
            "Records addressed to this node that it read, since the node started",
            kept.records_seen.clone(),
        );
        r.register(
            "ocx_records_refused",
            "Records the node refused, by the field its refusal named, since the node started",
            kept.records_refused.clone(),
        );
        r.register(
            "ocx_runs_opened",
            "Runs the node opened, by runner (runs whose directory the node keeps)",
            self.opened,
        );
        r.register("ocx_runs_open", "Runs open now, by runner", self.open);
        r.register(
            "ocx_runs_ended",
            "Runs ended, by runner and outcome",
            self.ended,
        );
        r.register(
            "ocx_budgets_reached",
            "Runs ended by reaching a budget, by runner",
            self.budgets,
        );
        r.register(
            "ocx_deliveries_failed",
            "Deliveries the node could not give, since the node started",
            kept.deliveries_failed.clone(),
        );
        r.register(
            "ocx_delivery_delay_seconds",
            "Seconds from the receipt of an artifact to its run reading the delivery's line",
            delays.clone(),
        );
        r.register(
            "ocx_model_tokens",
            "Model tokens spent, by runner, sender and direction (in or out)",
            self.tokens,
        );
        r.register(
            "ocx_model_cost",
            "What model tokens cost at the runner page's prices, by runner, sender and currency",
            self.cost,
        );
        r.register("ocx_model_errors", "The model service's errors its relays saw, by runner and status (unreached: no answer)", self.errors);
        r.register(
            "ocx_connections_refused",
            "Connections runs' ways out refused, by runner",
            self.refused,
        );
        r.register(
            "ocx_wakes_failed",
            "Wakes of the node that failed, since the node started",
            kept.wakes_failed.clone(),
        );
    }
}

/// Observes into `histogram` each delay of the run in `dir` after byte
/// `from` of its `delays`; answers how far it was read (whole lines only).
fn read_delays(dir: &Path, from: u64, histogram: &Histogram) -> u64 {
    let Ok(mut file) = std::fs::File::open(dir.join(super::spool::DELAYS)) else {
        return from;
    };
    if file.seek(SeekFrom::Start(from)).is_err() {
        return from;
    }
    let mut text = String::new();
    if file.take(1 << 20).read_to_string(&mut text).is_err() {
        return from;
    }
    let whole = text.rfind('\n').map_or(0, |i| i + 1);
    for line in text[..whole].lines() {
        if let Ok(secs) = line.trim().parse::<f64>()
            && secs.is_finite()
            && secs >= 0.0
        {
            histogram.observe(secs);
        }
    }
    from + whole as u64
}

/// Serves the metrics of the node at `root` at `http://ADDR/metrics` from
/// a thread of their own, for as long as the process lives, having read
/// every run's directory once; bound before it answers, so an address
/// taken is said at once.
pub fn serve(root: &Path, addr: std::net::SocketAddr) -> std::io::Result<()> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let metrics = std::sync::Arc::new(Metrics::new(root));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    std::thread::spawn(move || {
        // Every run's directory read once now, so no scrape waits on them.
        drop(metrics.refresh());
        runtime.block_on(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            let app = axum::Router::new().route(
                "/metrics",
                axum::routing::get(move || {
                    let metrics = metrics.clone();
                    async move {
                        let text = tokio::task::spawn_blocking(move || metrics.render())
                            .await
                            .unwrap_or_default();
                        (
                            [(
                                axum::http::header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            text,
                        )
                    }
                }),
            );
            let _ = axum::serve(listener, app).await;
        });
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's directory under `root` as the node and its watcher leave it.
    fn run(root: &Path, name: &str, facts: &RunFacts, spend: Option<&Spend>, delays: &str) {
        let dir = root.join("runs").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        write_facts(&dir, facts).unwrap();
        if let Some(s) = spend {
            crate::node::transcript::write_spend(&dir, s).unwrap();
        }
        std::fs::write(dir.join(super::super::spool::DELAYS), delays).unwrap();
    }

    /// The value of the sample `line` starts, in `text`.
    fn sample(text: &str, line: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
    }

    #[test]
    fn runs_are_counted_by_runner_outcome_and_sender_and_delays_once_each() {
        let root = tempfile::tempdir().unwrap();
        let ended = RunFacts {
            runner: "claude".into(),
            sender: Some("pat \"the\" reviewer".into()),
            opened: 1.0,
            outcome: Some("budget".into()),
            ended: Some(2.0),
        };
        let spend = Spend {
            tokens_in: Some(100),
            tokens_out: Some(20),
            model_errors: [("429".to_string(), 2)].into_iter().collect(),
            ..Spend::default()
        };
        run(root.path(), "a", &ended, Some(&spend), "0.002\n0.5\n");
        let odd = RunFacts {
            outcome: Some("made up".into()),
            ..ended.clone()
        };
        run(root.path(), "b", &odd, None, "");
        let open = RunFacts {
            runner: "echo".into(),
            ..RunFacts::default()
        };
        run(root.path(), "c", &open, None, "0.01\n1.");
        let m = Metrics::new(root.path());
        let text = m.render();
        assert_eq!(
            sample(&text, "ocx_runs_opened_total{runner=\"claude\"}"),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            sample(&text, "ocx_runs_open{runner=\"echo\"}"),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            sample(
                &text,
                "ocx_runs_ended_total{runner=\"claude\",outcome=\"other\"}"
            ),
            Some(1.0),
            "an outcome of no known word is other: {text}"
        );
        assert_eq!(
            sample(&text, "ocx_budgets_reached_total{runner=\"claude\"}"),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                "ocx_model_tokens_total{runner=\"claude\",sender=\"pat \\\"the\\\" reviewer\",direction=\"in\"}"
            ),
            Some(100.0),
            "a login is escaped in its label: {text}"
        );
        assert_eq!(
            sample(
                &text,
                "ocx_model_errors_total{runner=\"claude\",status=\"429\"}"
            ),
            Some(2.0)
        );
        assert_eq!(
            sample(&text, "ocx_delivery_delay_seconds_count"),
            Some(3.0),
            "whole lines alone: {text}"
        );
        // The open run's half line is finished and one more added; the
        // ended runs are not read again.
        let c = root.path().join("runs/c").join(super::super::spool::DELAYS);
        std::fs::write(&c, "0.01\n1.5\n0.2\n").unwrap();
        let text = m.render();
        assert_eq!(
            sample(&text, "ocx_delivery_delay_seconds_count"),
            Some(5.0),
            "{text}"
        );
        assert_eq!(
            sample(&text, "ocx_delivery_delay_seconds_bucket{le=\"1.0\"}"),
            Some(4.0),
            "{text}"
        );
        std::fs::remove_dir_all(root.path().join("runs/b")).unwrap();
        let text = m.render();
        assert_eq!(
            sample(&text, "ocx_runs_opened_total{runner=\"claude\"}"),
            Some(1.0),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn every_metric_the_dashboard_and_the_operators_page_name_is_served() {
        let root = tempfile::tempdir().unwrap();
        let open = RunFacts {
            runner: "claude".into(),
            ..RunFacts::default()
        };
        let ended = RunFacts {
            outcome: Some("budget".into()),
            sender: Some("pat".into()),
            ..open.clone()
        };
        let spend = Spend {
            tokens_in: Some(1),
            cost: Some(crate::protocol::money::Money::parse("0.5").unwrap()),
            currency: Some("USD".into()),
            model_errors: [("401".to_string(), 1)].into_iter().collect(),
            connections_refused: Some(1),
            ..Spend::default()
        };
        run(root.path(), "a", &open, None, "");
        run(root.path(), "b", &ended, Some(&spend), "");
        refused("user");
        std::fs::write(
            root.path().join(PAGES_FILE),
            "1.5 wait 200 pat\n2.5 run 403 -\n",
        )
        .unwrap();
        let text = Metrics::new(root.path()).render();
        assert_eq!(
            sample(&text, "ocx_machine_last_contact_seconds{machine=\"pat\"}"),
            Some(1.5),
            "{text}"
        );
        assert_eq!(
            sample(
                &text,
                "ocx_page_requests_total{tool=\"run\",status=\"403\"}"
            ),
            Some(1.0)
        );
        let served: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
        for file in ["grafana-dashboard.json", "operating.md"] {
            let whole = std::fs::read_to_string(docs.join(file)).unwrap();
            // The operators' page: its section on metrics alone.
            let written = match whole.split_once("### Metrics for Prometheus") {
                Some((_, section)) => section.split("\n### ").next().unwrap_or(""),
                None => whole.as_str(),
            };
            let mut named = 0;
            for (i, _) in written.match_indices("ocx_") {
                let name: String = written[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                let family = ["_total", "_bucket", "_count", "_sum"]
                    .iter()
                    .fold(name.as_str(), |n, s| n.strip_suffix(s).unwrap_or(n));
                if family.len() > 4 {
                    named += 1;
                    assert!(
                        served.contains(&family),
                        "{file} names {name}, which is not served: {served:?}"
                    );
                }
            }
            assert!(named > 10, "{file} names the metrics");
        }
    }
}
