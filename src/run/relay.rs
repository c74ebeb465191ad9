//! A run's model relay (design decision 12): started by its watcher,
//! outside the sandbox, for a run whose runner page names its model
//! service. The run is given the relay's address and a token of its own,
//! never the key: the relay takes only that token, forwards each request
//! upstream over TLS with the node's key in its place, and streams the
//! answer back event by event as it comes. It adds up each answer's usage
//! as the service counts it (in and out, streamed or not), keeps the total
//! in the run's `tokens` file, reckons their cost at its runner page's
//! `prices` when it gives them, and holds the record's `budget.tokens`
//! and `budget.cost` as hard limits however many requests the run sends
//! at once: before it forwards a request it reserves the most that
//! request may cost (its `max_tokens`, or the service's ceiling when it
//! names none, and its input reckoned at a token a byte of its body, both
//! priced for the cost), refuses as the service would one a budget left
//! cannot cover, and settles the reservation with what the service
//! billed. An answer the run stops reading is read
//! on by the relay to its usage, and counted. Once the budget is reached,
//! or cannot cover a request, it answers no more, until (for a record
//! whose budget asks, `budget.ask`) its watcher raises it with what the
//! record's sender gave ([`Relay::raise`]).
//!
//! It listens on 127.0.0.1 (a port of its own) and on a Unix socket (the
//! way in for a run without a network of the host's). Anything a run sends
//! is hostile: every reading is bounded, and nothing it sends can panic it.

use crate::protocol::money::{Money, Prices};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The relay's socket's name, in the run's `.ocx` directory.
pub const SOCKET: &str = "model.sock";
/// The file of the run's directory holding the tokens spent so far.
pub const TOKENS: &str = "tokens";
/// The variable the run's token is given as (Codex's provider reads it).
pub const TOKEN_VAR: &str = "OCX_MODEL_TOKEN";
/// The variable the relay's address is given as.
pub const URL_VAR: &str = "OCX_MODEL_URL";

/// Connections served at once; one more is closed unanswered.
const MAX_CONNECTIONS: usize = 64;
/// The longest request line or header line read.
const MAX_LINE: u64 = 64 * 1024;
/// The most header lines read in one request.
const MAX_HEADERS: usize = 200;
/// The largest request body read (an agent sends its whole conversation).
const MAX_BODY: usize = 32 << 20;
/// The most of an answer that is not a stream of events kept to read its usage.
const MAX_KEPT: usize = 8 << 20;
/// The longest server-sent event held whole; a longer one is passed on as
/// it comes, unread.
const MAX_EVENT: usize = 8 << 20;
/// The most output a request naming no `max_tokens` (`max_output_tokens`)
/// is reckoned to cost: the most either service lets one answer hold.
const OUTPUT_CEILING: u64 = 128_000;
/// How long a connection to the upstream may take to open.
const CONNECT: Duration = Duration::from_secs(15);

/// Where the host keeps its own certificate authorities, the first found read.
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// Which API a runner's model service speaks, so its relay knows where the
/// key goes and where the usage is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// Anthropic's Messages API (Claude Code): the key as `x-api-key`.
    AnthropicMessages,
    /// OpenAI's Responses API (Codex): the key as `Authorization: Bearer`.
    OpenaiResponses,
}

/// Which of a run's model budgets its relay holds it to was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelBudget {
    /// `budget.tokens`: tokens in and out together.
    Tokens,
    /// `budget.cost`: their cost at the runner page's prices.
    Cost,
}

/// Why a runner page's `model.upstream` is no model service's root URL.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamRefused {
    /// It does not parse as a URL.
    #[error("{given:?} is not a URL: {source}")]
    NotUrl {
        given: String,
        source: url::ParseError,
    },
    /// Its scheme is not https.
    #[error("{0:?} is not https: the relay sends the key only over TLS")]
    NotHttps(String),
    /// It names no host.
    #[error("{0:?} names no host")]
    NoHost(String),
    /// It holds more than the service's root.
    #[error("{0:?} holds a login, query or fragment: give the service's root URL alone")]
    NotRoot(String),
}

/// `upstream` as a model service's root URL: https, a host, no login,
/// query or fragment; or why not.
pub fn upstream_url(upstream: &str) -> Result<url::Url, UpstreamRefused> {
    let u = url::Url::parse(upstream).map_err(|source| UpstreamRefused::NotUrl {
        given: upstream.to_string(),
        source,
    })?;
    if u.scheme() != "https" {
        return Err(UpstreamRefused::NotHttps(upstream.to_string()));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err(UpstreamRefused::NoHost(upstream.to_string()));
    }
    if !u.username().is_empty()
        || u.password().is_some()
        || u.query().is_some()
        || u.fragment().is_some()
    {
        return Err(UpstreamRefused::NotRoot(upstream.to_string()));
    }
    Ok(u)
}

/// Why a relay could not start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The upstream is not a model service's https root URL.
    #[error("model.upstream: {0}")]
    Upstream(#[from] UpstreamRefused),
    /// The node's extra certificate authorities could not be read.
    #[error("model_ca: {}: {reason}", path.display())]
    Authorities {
        /// The PEM file named by the node's configuration.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// It could not listen.
    #[error("the model relay could not listen: {0}")]
    Listen(std::io::Error),
}

/// What a relay is started with.
pub struct Settings {
    /// The API the upstream speaks.
    pub kind: ModelKind,
    /// The service's root URL, https.
    pub upstream: String,
    /// The node's key, put in each request in place of the run's token.
    pub key: String,
    /// The record's `budget.tokens`, if it has one.
    pub budget: Option<u64>,
    /// The runner page's prices, if it gives them: the run's cost is
    /// reckoned at them.
    pub prices: Option<Prices>,
    /// The record's `budget.cost`, in the prices' currency, if it has one
    /// (held only with prices).
    pub cost: Option<Money>,
    /// Whether the record's budget asks (`budget.ask`): reaching it pauses
    /// the run to ask its sender, rather than ending it.
    pub ask: bool,
    /// The run's directory, where `tokens` is written.
    pub dir: PathBuf,
    /// Where its Unix socket is bound.
    pub socket: PathBuf,
    /// The node's extra certificate authorities (`model_ca`), beside the host's.
    pub authorities: Option<PathBuf>,
    /// Where a line for the run's log goes.
    pub log: Box<dyn Fn(&str) + Send + Sync>,
}

/// A running relay; it stops listening when dropped.
pub struct Relay {
    port: u16,
    socket: PathBuf,
    shared: Arc<Shared>,
}

/// A relay's spend as it goes, cheap to clone; it keeps the relay's
/// state, never its listeners, alive.
#[derive(Clone)]
pub struct Meter(Arc<Shared>);

impl Meter {
    /// The tokens spent so far, in and out.
    pub fn in_out(&self) -> (u64, u64) {
        (
            self.0.spent_in.load(Ordering::SeqCst),
            self.0.spent_out.load(Ordering::SeqCst),
        )
    }

    /// What the tokens spent so far cost, and in which currency, when the
    /// runner's page gives prices.
    pub fn cost(&self) -> Option<(Money, String)> {
        let p = self.0.prices.as_ref()?;
        Some((self.0.cost(), p.currency.clone()))
    }

    /// Which budget the spend reached, while it stands reached.
    pub fn reached_by(&self) -> Option<ModelBudget> {
        self.0.reached_by()
    }

    /// The model service's errors so far, by status (`unreached` where it
    /// gave no answer).
    pub fn errors(&self) -> std::collections::BTreeMap<String, u64> {
        self.0
            .errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The record's budget `by`, what it gives now and what was spent of
    /// it, as a person reads them: `1,000 tokens` and `1,000`, or `0.05
    /// USD` and `0.05`.
    pub fn standing(&self, by: ModelBudget) -> (String, String) {
        let sh = &self.0;
        let spent = Usage {
            input: sh.spent_in.load(Ordering::SeqCst),
            output: sh.spent_out.load(Ordering::SeqCst),
        };
        (sh.budget_words(by), sh.amount_words(by, spent))
    }

    /// Raises the budget by `given` (a record's sender's decision, for a
    /// budget that asks): the relay answers again while the raised budget
    /// covers a request.
    pub fn raise(&self, given: Given) {
        let sh = &self.0;
        let mut held = sh.reached_by.lock().unwrap_or_else(|e| e.into_inner());
        (sh.log)(&format!(
            "model relay: {} gave the run more: {}; it answers again",
            given.by,
            sh.given_words(&given)
        ));
        sh.given
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(given);
        *held = None;
        sh.reached.store(false, Ordering::SeqCst);
        sh.told.store(false, Ordering::SeqCst);
        drop(held);
        if let Some(by) = sh.reached_now() {
            sh.mark_reached(by, "is reached still");
            sh.end();
        }
    }

    /// What was given since the run started, in the order given.
    pub fn given(&self) -> Vec<Given> {
        self.0
            .given
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The budget `by` as a note says it, with what was given since: `2,000
    /// + 2,000 given by stone` tokens, `0.05 + 0.05 given by stone USD`.
    pub fn budget_said(&self, by: ModelBudget) -> String {
        let sh = &self.0;
        let given = self.given();
        match (by, &sh.prices) {
            (ModelBudget::Cost, Some(p)) => {
                let mut words = sh.cost_budget.unwrap_or_default().to_string();
                for g in given.iter().filter(|g| !g.cost.is_zero()) {
                    words.push_str(&format!(" + {} given by {}", g.cost, g.by));
                }
                format!("{words} {}", p.currency)
            }
            _ => {
                let mut words = thousands(sh.budget.unwrap_or(0));
                for g in given.iter().filter(|g| g.tokens > 0) {
                    words.push_str(&format!(" + {} given by {}", thousands(g.tokens), g.by));
                }
                words
            }
        }
    }
}

/// More of a run's model budget, given by the record's sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Given {
    /// Tokens more (none when the record holds no `budget.tokens`).
    pub tokens: u64,
    /// Cost more, in the prices' currency.
    pub cost: Money,
    /// Who gave it, by the receipt of their decision.
    pub by: String,
}

/// Why a run's request reached no answer from its model service.
#[derive(Debug, thiserror::Error)]
enum Unsent {
    /// The request could not be made as the run wrote it.
    #[error("{0}")]
    Request(ureq::http::Error),
    /// The service gave no answer.
    #[error("{0}")]
    Service(ureq::Error),
}

/// What the relay's threads share.
struct Shared {
    kind: ModelKind,
    upstream: String,
    key: String,
    token: String,
    budget: Option<u64>,
    prices: Option<Prices>,
    /// `budget.cost`, held only when there are prices.
    cost_budget: Option<Money>,
    /// Whether reaching the budget pauses the run to ask, rather than ends it.
    ask: bool,
    /// What the record's sender gave since, in the order given.
    given: Mutex<Vec<Given>>,
    tokens_file: PathBuf,
    spent: AtomicU64,
    /// The spend's tokens in and out.
    spent_in: AtomicU64,
    spent_out: AtomicU64,
    /// What the requests under way may still cost, in and out, beyond
    /// what they billed so far.
    reserved: Mutex<Usage>,
    reached: AtomicBool,
    /// Which budget was reached, once one is.
    reached_by: Mutex<Option<ModelBudget>>,
    on_reached: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
    /// Whether `on_reached` was called for this reaching of the budget.
    told: AtomicBool,
    written: Mutex<()>,
    log: Box<dyn Fn(&str) + Send + Sync>,
    agent: ureq::Agent,
    connections: AtomicUsize,
    stop: AtomicBool,
    /// The model service's errors so far: by status, or `unreached`.
    errors: Mutex<std::collections::BTreeMap<String, u64>>,
}

impl Relay {
    /// Starts the relay for `s`: a fresh token, listening on 127.0.0.1 and
    /// on `s.socket`, `tokens` written 0.
    pub fn start(s: Settings) -> Result<Relay, RelayError> {
        let upstream = upstream_url(&s.upstream).map_err(RelayError::Upstream)?;
        let agent = agent(s.authorities.as_deref())?;
        let mut token = [0u8; 24];
        rand::Rng::fill(&mut rand::rng(), &mut token);
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").map_err(RelayError::Listen)?;
        let port = tcp.local_addr().map_err(RelayError::Listen)?.port();
        let unix = super::egress::bind_unix(&s.socket).map_err(RelayError::Listen)?;
        let shared = Arc::new(Shared {
            kind: s.kind,
            upstream: upstream.as_str().trim_end_matches('/').to_string(),
            key: s.key,
            token: format!("ocx-run-{}", hex::encode(token)),
            budget: s.budget,
            cost_budget: s.cost.filter(|_| s.prices.is_some()),
            prices: s.prices,
            ask: s.ask,
            given: Mutex::new(Vec::new()),
            tokens_file: s.dir.join(TOKENS),
            spent: AtomicU64::new(0),
            spent_in: AtomicU64::new(0),
            spent_out: AtomicU64::new(0),
            reserved: Mutex::new(Usage::default()),
            reached: AtomicBool::new(false),
            reached_by: Mutex::new(None),
            on_reached: Mutex::new(None),
            told: AtomicBool::new(false),
            written: Mutex::new(()),
            log: s.log,
            agent,
            connections: AtomicUsize::new(0),
            errors: Mutex::default(),
            stop: AtomicBool::new(false),
        });
        shared.write_spent();
        let sh = shared.clone();
        std::thread::spawn(move || {
            for stream in tcp.incoming() {
                if sh.stop.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(stream) = stream {
                    let _ = stream.set_nodelay(true);
                    sh.clone().serve_apart(stream);
                }
            }
        });
        let sh = shared.clone();
        std::thread::spawn(move || {
            for stream in unix.incoming() {
                if sh.stop.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(stream) = stream {
                    sh.clone().serve_apart(stream);
                }
            }
        });
        Ok(Relay {
            port,
            socket: s.socket,
            shared,
        })
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Its Unix socket, which a forwarder inside a run without the host's
    /// network carries the run's 127.0.0.1 port to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The one key it takes: the run's own token.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// The tokens spent so far.
    pub fn spent(&self) -> u64 {
        self.shared.spent.load(Ordering::SeqCst)
    }

    /// A handle on its spend for whoever reports it as the run goes.
    pub fn meter(&self) -> Meter {
        Meter(self.shared.clone())
    }

    /// The record's `budget.tokens` with what was given since, if any.
    pub fn budget(&self) -> Option<u64> {
        self.shared.tokens_limit()
    }

    /// Whether the spend has reached the budget.
    pub fn reached(&self) -> bool {
        self.shared.reached.load(Ordering::SeqCst)
    }

    /// Which budget the spend reached, once it reached one.
    pub fn reached_by(&self) -> Option<ModelBudget> {
        *self
            .shared
            .reached_by
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The runner page's prices, if it gives them.
    pub fn prices(&self) -> Option<&Prices> {
        self.shared.prices.as_ref()
    }

    /// What the tokens spent so far cost at the page's prices (nothing
    /// without prices).
    pub fn cost(&self) -> Money {
        self.shared.cost()
    }

    /// The record's `budget.cost` with what was given since, when the
    /// page gives prices to hold it.
    pub fn cost_budget(&self) -> Option<Money> {
        self.shared.cost_limit()
    }

    /// Has `then` called each time the budget is reached (at once if it
    /// is): once, unless the budget is raised and reached again.
    pub fn on_reached(&self, then: impl Fn() + Send + Sync + 'static) {
        let mut slot = self
            .shared
            .on_reached
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *slot = Some(Arc::new(then));
        drop(slot);
        if self.reached() {
            self.shared.end();
        }
    }

    /// Raises the budget by `given` ([`Meter::raise`]).
    pub fn raise(&self, given: Given) {
        self.meter().raise(given);
    }

    /// What was given since the run started, in the order given.
    pub fn given(&self) -> Vec<Given> {
        self.meter().given()
    }

    /// The budget `by` as a note says it ([`Meter::budget_said`]).
    pub fn budget_said(&self, by: ModelBudget) -> String {
        self.meter().budget_said(by)
    }

    /// The variables the run is given to reach the service through it:
    /// its address and token, named as the service's own clients read them.
    pub fn env(&self) -> Vec<(String, String)> {
        let url = self.url();
        let token = self.token().to_string();
        let mut env = vec![
            (URL_VAR.to_string(), url.clone()),
            (TOKEN_VAR.to_string(), token.clone()),
        ];
        match self.shared.kind {
            ModelKind::AnthropicMessages => env.extend([
                ("ANTHROPIC_BASE_URL".to_string(), url),
                ("ANTHROPIC_API_KEY".to_string(), token),
            ]),
            ModelKind::OpenaiResponses => env.extend([
                ("OPENAI_BASE_URL".to_string(), format!("{url}/v1")),
                ("OPENAI_API_KEY".to_string(), token),
            ]),
        }
        env
    }

    /// The arguments that point Codex's app-server at it: a provider of
    /// its own whose key is the run's token, read from [`TOKEN_VAR`].
    pub fn codex_args(&self) -> Vec<String> {
        vec![
            "-c".into(),
            "model_provider=\"ocx\"".into(),
            "-c".into(),
            format!(
                "model_providers.ocx={{name=\"ocx\", base_url=\"{}/v1\", wire_api=\"responses\", env_key=\"{TOKEN_VAR}\"}}",
                self.url()
            ),
        ]
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
        let _ = std::os::unix::net::UnixStream::connect(&self.socket);
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// The tokens a run in `dir` has spent, as its relay last wrote them.
pub fn spent_in(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join(TOKENS))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `n` as a person reads it: thousands separated by commas (18,420).
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The client that speaks to the upstream: TLS verified against Mozilla's
/// roots, or, when the node names its own authorities, the host's bundle
/// and those; no proxy, no redirect, every status passed back.
fn agent(authorities: Option<&Path>) -> Result<ureq::Agent, RelayError> {
    use ureq::tls::{PemItem, RootCerts, TlsConfig};
    let certs = |bytes: &[u8]| -> Vec<ureq::tls::Certificate<'static>> {
        ureq::tls::parse_pem(bytes)
            .filter_map(|i| match i {
                Ok(PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect()
    };
    let tls = match authorities {
        None => TlsConfig::builder().build(),
        Some(path) => {
            let bad = |reason: String| RelayError::Authorities {
                path: path.to_path_buf(),
                reason,
            };
            let own = certs(&std::fs::read(path).map_err(|e| bad(e.to_string()))?);
            if own.is_empty() {
                return Err(bad("holds no PEM certificate".into()));
            }
            let mut roots: Vec<_> = SYSTEM_BUNDLES
                .iter()
                .find_map(|p| std::fs::read(p).ok())
                .map(|b| certs(&b))
                .unwrap_or_default();
            roots.extend(own);
            TlsConfig::builder()
                .root_certs(RootCerts::new_with_certs(&roots))
                .build()
        }
    };
    Ok(ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(None)
        .timeout_connect(Some(CONNECT))
        .build()
        .into())
}

/// One request as the run sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// `POST`, `HEAD`, ….
    pub method: String,
    /// The target, starting with `/`.
    pub target: String,
    /// Whether it spoke HTTP/1.0 (no chunks, the connection then closed).
    pub old: bool,
    /// Its headers in order, names in lower case.
    pub headers: Vec<(String, String)>,
    /// Its body, whole.
    pub body: Vec<u8>,
    /// Whether it asked to close the connection after it.
    pub close: bool,
}

impl Asked {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Why a request could not be read: the connection is answered 400 (when
/// `Bad`) and closed.
#[derive(Debug, PartialEq, Eq)]
pub enum Unread {
    /// The connection ended or failed.
    Gone,
    /// The request is not one this relay takes.
    Bad(&'static str),
}

/// One line, at most [`MAX_LINE`] bytes, without its line end.
fn read_line(r: &mut impl BufRead) -> Result<String, Unread> {
    let mut line = Vec::new();
    let n = r
        .by_ref()
        .take(MAX_LINE)
        .read_until(b'\n', &mut line)
        .map_err(|_| Unread::Gone)?;
    if n == 0 {
        return Err(Unread::Gone);
    }
    if !line.ends_with(b"\n") {
        return Err(Unread::Bad("a line too long"));
    }
    while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        line.pop();
    }
    String::from_utf8(line).map_err(|_| Unread::Bad("a line not UTF-8"))
}

/// Reads one request from `r`, answering `Expect: 100-continue` on `w`.
pub fn read_request(r: &mut impl BufRead, w: &mut impl Write) -> Result<Asked, Unread> {
    let mut start = read_line(r)?;
    while start.is_empty() {
        start = read_line(r)?;
    }
    let mut parts = start.split(' ');
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("").to_string();
    let version = parts.next().unwrap_or("");
    if method.is_empty()
        || !method.bytes().all(|b| b.is_ascii_uppercase())
        || !target.starts_with('/')
        || target.bytes().any(|b| b <= b' ' || b == 0x7f)
        || !matches!(version, "HTTP/1.1" | "HTTP/1.0")
        || parts.next().is_some()
    {
        return Err(Unread::Bad("not an HTTP/1.1 request line"));
    }
    let mut headers = Vec::new();
    loop {
        let h = read_line(r)?;
        if h.is_empty() {
            break;
        }
        if headers.len() >= MAX_HEADERS {
            return Err(Unread::Bad("too many headers"));
        }
        let (k, v) = h
            .split_once(':')
            .ok_or(Unread::Bad("a header without a colon"))?;
        let k = k.to_ascii_lowercase();
        if k.is_empty()
            || !k
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_!#$%&'*+.^`|~".contains(&b))
        {
            return Err(Unread::Bad("a header's name is not a token"));
        }
        headers.push((k, v.trim().to_string()));
    }
    let mut asked = Asked {
        method,
        target,
        old: version == "HTTP/1.0",
        headers,
        body: Vec::new(),
        close: false,
    };
    let lower = |name: &str| asked.header(name).map(str::to_ascii_lowercase);
    let chunked = lower("transfer-encoding");
    let length = lower("content-length");
    let close = match lower("connection") {
        Some(c) if c.contains("close") => true,
        Some(c) if c.contains("keep-alive") => false,
        _ => asked.old,
    };
    let expect = lower("expect");
    asked.close = close;
    if expect.as_deref() == Some("100-continue") {
        w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .map_err(|_| Unread::Gone)?;
    }
    asked.body = match (chunked, length) {
        (Some(_), Some(_)) => return Err(Unread::Bad("both a length and chunks")),
        (Some(c), None) if c == "chunked" => read_chunked(r)?,
        (Some(_), None) => return Err(Unread::Bad("a transfer coding other than chunked")),
        (None, Some(n)) => {
            let n: usize = n
                .parse()
                .map_err(|_| Unread::Bad("a length not a number"))?;
            if n > MAX_BODY {
                return Err(Unread::Bad("a body too large"));
            }
            let mut b = vec![0; n];
            r.read_exact(&mut b).map_err(|_| Unread::Gone)?;
            b
        }
        (None, None) => Vec::new(),
    };
    Ok(asked)
}

/// A chunked body, trailers skipped.
fn read_chunked(r: &mut impl BufRead) -> Result<Vec<u8>, Unread> {
    let mut body = Vec::new();
    loop {
        let size = read_line(r)?;
        let size = size.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size, 16).map_err(|_| Unread::Bad("a chunk's size"))?;
        if size == 0 {
            while !read_line(r)?.is_empty() {}
            return Ok(body);
        }
        if size > MAX_BODY || body.len() + size > MAX_BODY {
            return Err(Unread::Bad("a body too large"));
        }
        let at = body.len();
        body.resize(at + size, 0);
        r.read_exact(&mut body[at..]).map_err(|_| Unread::Gone)?;
        if !read_line(r)?.is_empty() {
            return Err(Unread::Bad("a chunk longer than its size"));
        }
    }
}

/// The head of the answer to the run: the service's status and headers
/// (none hop-by-hop, but a bodiless answer's length), then chunked or
/// closing after its body as the run's HTTP version allows.
fn head_of(response: &ureq::http::Response<ureq::Body>, bodiless: bool, chunked: bool) -> String {
    let status = response.status().as_u16();
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (k, v) in response.headers() {
        let k = k.as_str();
        let keep_length = bodiless && k == "content-length";
        if let (true, Ok(v)) = (keep_length || !hop_by_hop(k), v.to_str()) {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    if chunked {
        head.push_str("Transfer-Encoding: chunked\r\n");
    } else if !bodiless {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    head
}

/// Headers never passed on, either way: the connection's own, the length
/// and coding (each side has its own), the keys, and the host.
fn hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "trailers"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
            | "expect"
            | "accept-encoding"
            | "x-api-key"
            | "authorization"
    )
}

/// The key a request presents: `x-api-key`, or `Authorization: Bearer`.
fn presented(asked: &Asked) -> Option<&str> {
    asked.header("x-api-key").or_else(|| {
        let a = asked.header("authorization")?;
        let (scheme, rest) = a.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
    })
}

/// Whether `a` and `b` are the same, taking as long whichever differs.
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Status",
    }
}

/// An error answer as the service itself shapes one, so the agent reads it
/// (and retries a 5xx) as it would the service's.
pub fn error_answer(kind: ModelKind, status: u16, message: &str) -> Vec<u8> {
    let body = match kind {
        ModelKind::AnthropicMessages => {
            let ty = match status {
                401 => "authentication_error",
                403 => "permission_error",
                404 => "not_found_error",
                429 => "rate_limit_error",
                400..=499 => "invalid_request_error",
                _ => "api_error",
            };
            serde_json::json!({"type": "error", "error": {"type": ty, "message": message}})
        }
        ModelKind::OpenaiResponses => {
            let (ty, code) = match status {
                401 => ("invalid_request_error", serde_json::json!("invalid_api_key")),
                400..=499 => ("invalid_request_error", serde_json::Value::Null),
                _ => ("server_error", serde_json::Value::Null),
            };
            serde_json::json!({"error": {"message": message, "type": ty, "param": null, "code": code}})
        }
    }
    .to_string();
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        reason(status),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// The most `asked` may cost, in and out: the output it allows (its
/// `max_tokens` or `max_output_tokens`, else [`OUTPUT_CEILING`]) and its
/// input, reckoned at a token a byte of its body (no tokenizer makes more
/// tokens of text than bytes, and a body's JSON only adds bytes). A
/// request with no body generates nothing.
fn bound(asked: &Asked) -> Usage {
    if asked.body.is_empty() {
        return Usage::default();
    }
    #[derive(Deserialize)]
    struct Limits {
        #[serde(default)]
        max_tokens: Option<serde_json::Value>,
        #[serde(default)]
        max_output_tokens: Option<serde_json::Value>,
    }
    let output = serde_json::from_slice::<Limits>(&asked.body)
        .ok()
        .and_then(|l| l.max_tokens.or(l.max_output_tokens))
        .and_then(|v| v.as_u64())
        .unwrap_or(OUTPUT_CEILING);
    Usage {
        input: asked.body.len() as u64,
        output,
    }
}

/// One chunk of a chunked body.
fn chunk(bytes: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", bytes.len()).into_bytes();
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
    out
}

impl Shared {
    /// Serves `stream` in a thread of its own, unless too many are open.
    fn serve_apart<S>(self: Arc<Self>, stream: S)
    where
        S: Send + 'static,
        for<'a> &'a S: Read + Write,
    {
        if self.connections.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            self.connections.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        std::thread::spawn(move || {
            self.serve(&stream);
            self.connections.fetch_sub(1, Ordering::SeqCst);
        });
    }

    /// Serves one connection's requests until it closes, errs or is cut.
    fn serve<S>(&self, stream: &S)
    where
        for<'a> &'a S: Read + Write,
    {
        let mut reader = BufReader::new(stream);
        let mut out = stream;
        while !self.stop.load(Ordering::SeqCst) {
            let asked = match read_request(&mut reader, &mut out) {
                Ok(a) => a,
                Err(Unread::Gone) => return,
                Err(Unread::Bad(why)) => {
                    let _ = out.write_all(&error_answer(self.kind, 400, why));
                    return;
                }
            };
            match self.answer(&asked, &mut out) {
                Ok(true) if !asked.close => continue,
                _ => return,
            }
        }
    }

    /// Answers one request on `out`; whether the connection may go on.
    fn answer(&self, asked: &Asked, out: &mut impl Write) -> std::io::Result<bool> {
        if !presented(asked).is_some_and(|k| same(k, &self.token)) {
            out.write_all(&error_answer(
                self.kind,
                401,
                "the relay takes only the run's own token",
            ))?;
            return Ok(true);
        }
        if self.reached() {
            let by = self.reached_by().unwrap_or(ModelBudget::Tokens);
            out.write_all(&error_answer(
                self.kind,
                400,
                &format!("the run's budget of {} is spent", self.budget_words(by)),
            ))?;
            return Ok(false);
        }
        let reservation = match self.reserve(asked) {
            Ok(r) => r,
            Err(by) => {
                out.write_all(&error_answer(
                    self.kind,
                    400,
                    &format!(
                        "the run's budget of {} cannot cover this request: it may cost {} (its output limit and its input, reckoned at a token a byte)",
                        self.budget_words(by),
                        self.amount_words(by, bound(asked)),
                    ),
                ))?;
                self.end();
                return Ok(false);
            }
        };
        let answered = self.forward(asked, out);
        self.settle(reservation);
        if self.reached() {
            self.end();
        }
        answered
    }

    /// Reserves what `asked` may cost, in and out, when every budget
    /// left covers it beside what the requests under way may cost; the
    /// budget that does not, when one does not, which is then marked
    /// reached. What is reserved (nothing with no budget).
    fn reserve(&self, asked: &Asked) -> Result<Usage, ModelBudget> {
        if self.budget.is_none() && self.cost_budget.is_none() {
            return Ok(Usage::default());
        }
        let may = bound(asked);
        let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        let (spent_in, spent_out) = (
            self.spent_in.load(Ordering::SeqCst),
            self.spent_out.load(Ordering::SeqCst),
        );
        let after = Usage {
            input: spent_in
                .saturating_add(reserved.input)
                .saturating_add(may.input),
            output: spent_out
                .saturating_add(reserved.output)
                .saturating_add(may.output),
        };
        let over = match self.over(after) {
            None => {
                reserved.input = reserved.input.saturating_add(may.input);
                reserved.output = reserved.output.saturating_add(may.output);
                return Ok(may);
            }
            Some(by) => by,
        };
        drop(reserved);
        let spent = Usage {
            input: spent_in,
            output: spent_out,
        };
        self.mark_reached(
            over,
            &format!(
                "cannot cover a request that may cost {} ({} spent)",
                self.amount_words(over, may),
                self.amount_words(over, spent)
            ),
        );
        Err(over)
    }

    /// The budget `usage` would pass, if any: its tokens past
    /// `budget.tokens`, or their cost past `budget.cost`.
    fn over(&self, usage: Usage) -> Option<ModelBudget> {
        if self.tokens_limit().is_some_and(|b| usage.total() > b) {
            return Some(ModelBudget::Tokens);
        }
        match (&self.prices, self.cost_limit()) {
            (Some(p), Some(b)) if p.cost(usage.input, usage.output) > b => Some(ModelBudget::Cost),
            _ => None,
        }
    }

    /// The budget the spend so far has reached, if any.
    fn reached_now(&self) -> Option<ModelBudget> {
        let spent = self.spent.load(Ordering::SeqCst);
        if self.tokens_limit().is_some_and(|b| spent >= b) {
            return Some(ModelBudget::Tokens);
        }
        self.cost_limit()
            .filter(|b| self.prices.is_some() && self.cost() >= *b)
            .map(|_| ModelBudget::Cost)
    }

    /// Marks the budget `by` reached, once, saying `why` in the run's log.
    fn mark_reached(&self, by: ModelBudget, why: &str) {
        let mut held = self.reached_by.lock().unwrap_or_else(|e| e.into_inner());
        if self.reached.swap(true, Ordering::SeqCst) {
            return;
        }
        *held = Some(by);
        drop(held);
        let then = match self.ask {
            true => "it answers no more until the record's sender gives more",
            false => "it answers no more",
        };
        (self.log)(&format!(
            "model relay: the run's budget of {} {why}: {then}",
            self.budget_words(by)
        ));
    }

    /// `budget.tokens` with what was given since, if the record has it.
    fn tokens_limit(&self) -> Option<u64> {
        let given = self.given.lock().unwrap_or_else(|e| e.into_inner());
        self.budget
            .map(|b| given.iter().fold(b, |t, g| t.saturating_add(g.tokens)))
    }

    /// `budget.cost` with what was given since, when it is held.
    fn cost_limit(&self) -> Option<Money> {
        let given = self.given.lock().unwrap_or_else(|e| e.into_inner());
        self.cost_budget.map(|b| {
            given
                .iter()
                .fold(b, |t, g| Money(t.0.saturating_add(g.cost.0)))
        })
    }

    /// What `g` gives, as the log says it.
    fn given_words(&self, g: &Given) -> String {
        let mut words = Vec::new();
        if self.budget.is_some() {
            words.push(format!("{} tokens", thousands(g.tokens)));
        }
        if let (Some(p), Some(_)) = (&self.prices, self.cost_budget) {
            words.push(p.amount(g.cost));
        }
        words.join(" and ")
    }

    /// Which budget was reached, once one was.
    fn reached_by(&self) -> Option<ModelBudget> {
        *self.reached_by.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The budget `by` as a person reads it: `18,000 tokens`, `0.05 USD`.
    fn budget_words(&self, by: ModelBudget) -> String {
        match (by, &self.prices) {
            (ModelBudget::Cost, Some(p)) => p.amount(self.cost_limit().unwrap_or_default()),
            _ => format!("{} tokens", thousands(self.tokens_limit().unwrap_or(0))),
        }
    }

    /// `usage` counted as the budget `by` counts it: tokens, or their cost.
    fn amount_words(&self, by: ModelBudget, usage: Usage) -> String {
        match (by, &self.prices) {
            (ModelBudget::Cost, Some(p)) => p.amount(p.cost(usage.input, usage.output)),
            _ => thousands(usage.total()),
        }
    }

    /// What the tokens spent so far cost at the page's prices (nothing
    /// without prices).
    fn cost(&self) -> Money {
        self.prices.as_ref().map_or(Money(0), |p| {
            p.cost(
                self.spent_in.load(Ordering::SeqCst),
                self.spent_out.load(Ordering::SeqCst),
            )
        })
    }

    /// Gives back a reservation once its answer is counted.
    fn settle(&self, reservation: Usage) {
        let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        reserved.input = reserved.input.saturating_sub(reservation.input);
        reserved.output = reserved.output.saturating_sub(reservation.output);
    }

    /// `asked` sent to the model service with the run's key in place of
    /// its own, no hop-by-hop header passed on; its response, or why none.
    fn send(&self, asked: &Asked) -> Result<ureq::http::Response<ureq::Body>, Unsent> {
        let url = format!("{}{}", self.upstream, asked.target);
        let mut request = ureq::http::Request::builder()
            .method(asked.method.as_str())
            .uri(url.as_str());
        for (k, v) in &asked.headers {
            if !hop_by_hop(k) {
                request = request.header(k.as_str(), v.as_str());
            }
        }
        request = match self.kind {
            ModelKind::AnthropicMessages => request.header("x-api-key", self.key.as_str()),
            ModelKind::OpenaiResponses => {
                request.header("authorization", format!("Bearer {}", self.key))
            }
        };
        match (asked.body.is_empty(), asked.method.as_str()) {
            (true, "GET" | "HEAD" | "DELETE" | "OPTIONS") => request
                .body(())
                .map_err(Unsent::Request)
                .and_then(|r| self.agent.run(r).map_err(Unsent::Service)),
            _ => request
                .body(asked.body.clone())
                .map_err(Unsent::Request)
                .and_then(|r| self.agent.run(r).map_err(Unsent::Service)),
        }
    }

    /// Counts an error of the model service, `status` its status or `unreached`.
    fn count_error(&self, status: &str) {
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        *errors.entry(status.to_string()).or_default() += 1;
    }

    /// Forwards `asked` upstream and its answer back on `out`, counting
    /// its usage; whether the connection may go on.
    fn forward(&self, asked: &Asked, out: &mut impl Write) -> std::io::Result<bool> {
        let response = match self.send(asked) {
            Ok(r) => r,
            Err(e) => {
                self.count_error("unreached");
                (self.log)(&format!(
                    "model relay: {} {} could not reach the model service at {}: {e}",
                    asked.method,
                    asked.target.split('?').next().unwrap_or(""),
                    self.upstream
                ));
                out.write_all(&error_answer(
                    self.kind,
                    502,
                    &format!("the run's relay could not reach the model service: {e}"),
                ))?;
                return Ok(true);
            }
        };
        let status = response.status().as_u16();
        if status >= 400 {
            self.count_error(&status.to_string());
        }
        let stream = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().starts_with("text/event-stream"));
        let bodiless = asked.method == "HEAD" || status == 204 || status == 304;
        let chunked = !bodiless && !asked.old;
        let head = head_of(&response, bodiless, chunked);
        out.write_all(head.as_bytes())?;
        out.flush()?;
        if bodiless {
            return Ok(true);
        }
        let send = |out: &mut dyn Write, bytes: &[u8]| -> std::io::Result<()> {
            if bytes.is_empty() {
                return Ok(());
            }
            if chunked {
                out.write_all(&chunk(bytes))?;
            } else {
                out.write_all(bytes)?;
            }
            out.flush()
        };
        let mut reader = response.into_body().into_reader();
        let mut buf = vec![0u8; 16 << 10];
        let mut events = Events::default();
        let mut usage = Usage::default();
        let mut counted = Usage::default();
        let mut kept = Vec::new();
        // Once the run stops reading (or the budget cuts its answer), the
        // answer is still read to its end: the service bills the whole
        // generation, and its usage comes last.
        let mut gone = false;
        let mut cut = false;
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    (self.log)(&format!(
                        "model relay: the model service's answer to {} broke off: {e}",
                        asked.target.split('?').next().unwrap_or("")
                    ));
                    if !stream && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&kept) {
                        usage.read(&v);
                    }
                    self.count(usage, counted);
                    return Ok(false);
                }
            };
            if !stream {
                if kept.len() < MAX_KEPT {
                    kept.extend_from_slice(&buf[..n]);
                }
                gone = gone || send(out, &buf[..n]).is_err();
                continue;
            }
            for event in events.push(&buf[..n]) {
                usage.read_event(&event);
                counted = self.count(usage, counted);
                if !gone && !cut {
                    gone = send(out, &event).is_err();
                }
                cut = cut || self.reached();
            }
        }
        if stream {
            let rest = events.rest();
            usage.read_event(&rest);
            self.count(usage, counted);
            if !gone && !cut {
                gone = send(out, &rest).is_err();
            }
        }
        if !stream && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&kept) {
            usage.read(&v);
            self.count(usage, counted);
        }
        if gone {
            return Ok(false);
        }
        if chunked {
            out.write_all(b"0\r\n\r\n")?;
            out.flush()?;
        }
        Ok(chunked && !cut && !self.reached())
    }

    /// Calls for the run's end (or, when its budget asks, its pause),
    /// once for each reaching of the budget: the answer that reached it is
    /// ended first.
    fn end(&self) {
        let then = self
            .on_reached
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(then) = then
            && !self.told.swap(true, Ordering::SeqCst)
        {
            then();
        }
    }

    /// Adds what an answer counts now (`now`, in and out) beyond what it
    /// `counted` before to the run's spend; writes it, and marks the
    /// budget reached when it is. Answers what the answer has counted.
    fn count(&self, now: Usage, counted: Usage) -> Usage {
        let (more_in, more_out) = (
            now.input.saturating_sub(counted.input),
            now.output.saturating_sub(counted.output),
        );
        let more = more_in.saturating_add(more_out);
        if more == 0 {
            return counted;
        }
        self.spent_in.fetch_add(more_in, Ordering::SeqCst);
        self.spent_out.fetch_add(more_out, Ordering::SeqCst);
        self.spent.fetch_add(more, Ordering::SeqCst);
        self.write_spent();
        if let Some(by) = self.reached_now() {
            let spent = match (by, &self.prices) {
                (ModelBudget::Cost, Some(p)) => p.amount(self.cost()),
                _ => thousands(self.spent.load(Ordering::SeqCst)),
            };
            self.mark_reached(by, &format!("is reached ({spent} spent)"));
        }
        Usage {
            input: counted.input.max(now.input),
            output: counted.output.max(now.output),
        }
    }

    fn reached(&self) -> bool {
        self.reached.load(Ordering::SeqCst)
    }

    /// Writes the spend to the run's `tokens` file, whole.
    fn write_spent(&self) {
        let _held = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.spent.load(Ordering::SeqCst).to_string();
        let tmp = self.tokens_file.with_extension("new");
        let _ = crate::file::write_whole(&self.tokens_file, &tmp, n.as_bytes(), 0o600);
    }
}

/// Server-sent events cut from a stream as it comes: each `push` answers
/// the events it completed, each with the blank line that ends it.
#[derive(Debug, Default)]
pub struct Events {
    held: Vec<u8>,
}

impl Events {
    /// Takes `bytes`; answers the events they complete, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        let from = self.held.len().saturating_sub(3);
        self.held.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut start = 0;
        let mut i = from;
        while i < self.held.len() {
            let end = match &self.held[i..] {
                [b'\n', b'\n', ..] => Some(i + 2),
                [b'\r', b'\n', b'\r', b'\n', ..] => Some(i + 4),
                [b'\r', b'\r', ..] => Some(i + 2),
                _ => None,
            };
            match end {
                Some(e) if i >= start => {
                    out.push(self.held[start..e].to_vec());
                    start = e;
                    i = e;
                }
                _ => i += 1,
            }
        }
        self.held.drain(..start);
        if self.held.len() > MAX_EVENT {
            out.push(std::mem::take(&mut self.held));
        }
        out
    }

    /// What is held past the last whole event.
    pub fn rest(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }
}

/// One answer's usage as the service reports it: the most input and the
/// most output it said (both APIs report running totals).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Tokens in: Anthropic's `input_tokens` with its cache's, OpenAI's `input_tokens`.
    pub input: u64,
    /// Tokens out.
    pub output: u64,
}

impl Usage {
    /// In and out together.
    pub fn total(&self) -> u64 {
        self.input.saturating_add(self.output)
    }

    /// Reads the usage an event's data holds, if any: Anthropic's
    /// `message_start.message.usage` and `message_delta.usage`, OpenAI's
    /// `response.completed.response.usage`.
    pub fn read_event(&mut self, event: &[u8]) {
        let text = String::from_utf8_lossy(event);
        let data: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if data.is_empty() {
            return;
        }
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&data.join("\n")) {
            self.read(&v);
        }
    }

    /// Reads the usage of an answer or event `v`: its own `usage`, or its
    /// `message`'s or `response`'s.
    pub fn read(&mut self, v: &serde_json::Value) {
        for u in [&v["usage"], &v["message"]["usage"], &v["response"]["usage"]] {
            if !u.is_object() {
                continue;
            }
            let n = |k: &str| u[k].as_u64().unwrap_or(0);
            let input = n("input_tokens")
                .saturating_add(n("cache_creation_input_tokens"))
                .saturating_add(n("cache_read_input_tokens"));
            self.input = self.input.max(input);
            self.output = self.output.max(n("output_tokens"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn thousands_are_separated_by_commas() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(18_420), "18,420");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn usage_is_read_from_each_apis_events_and_whole_answers() {
        let mut u = Usage::default();
        u.read_event(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":100,\"cache_read_input_tokens\":20,\"output_tokens\":1}}}\n\n");
        assert_eq!(
            u,
            Usage {
                input: 120,
                output: 1
            }
        );
        u.read_event(b"event: message_delta\r\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":42}}\r\n\r\n");
        assert_eq!(u.total(), 162);
        let mut o = Usage::default();
        o.read_event(b"event: response.created\ndata: {\"response\":{\"usage\":null}}\n\n");
        assert_eq!(o.total(), 0);
        o.read_event(b"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":7,\"input_tokens_details\":{\"cached_tokens\":5},\"output_tokens\":3,\"total_tokens\":10}}}\n\n");
        assert_eq!(o.total(), 10);
        let mut whole = Usage::default();
        whole.read(
            &serde_json::json!({"id": "msg", "usage": {"input_tokens": 9, "output_tokens": 4}}),
        );
        assert_eq!(whole.total(), 13);
    }

    #[test]
    fn events_are_cut_at_their_blank_lines_however_the_bytes_come() {
        let stream = b"event: a\ndata: 1\n\nevent: b\r\ndata: 2\r\n\r\ndata: 3\n\npartial";
        for size in 1..stream.len() {
            let mut e = Events::default();
            let mut got = Vec::new();
            for piece in stream.chunks(size) {
                got.extend(e.push(piece));
            }
            assert_eq!(
                got,
                vec![
                    b"event: a\ndata: 1\n\n".to_vec(),
                    b"event: b\r\ndata: 2\r\n\r\n".to_vec(),
                    b"data: 3\n\n".to_vec()
                ],
                "{size}"
            );
            assert_eq!(e.rest(), b"partial");
        }
    }

    #[test]
    fn requests_are_read_whole_and_bad_ones_refused() {
        let read = |raw: &[u8]| read_request(&mut &raw[..], &mut Vec::new());
        let a = read(
            b"POST /v1/messages?beta=true HTTP/1.1\r\nX-Api-Key: t\r\nContent-Length: 2\r\n\r\n{}",
        )
        .unwrap();
        assert_eq!(a.target, "/v1/messages?beta=true");
        assert_eq!(a.body, b"{}");
        assert_eq!(presented(&a), Some("t"));
        let c = read(b"POST / HTTP/1.1\r\nAuthorization: Bearer tok\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n")
            .unwrap();
        assert_eq!(c.body, b"abc");
        assert_eq!(presented(&c), Some("tok"));
        for bad in [
            &b"GET http://elsewhere/ HTTP/1.1\r\n\r\n"[..],
            b"CONNECT host:443 HTTP/1.1\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n",
            b"POST / HTTP/1.1\r\nno colon\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        ] {
            assert!(
                matches!(read(bad), Err(Unread::Bad(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(read(b""), Err(Unread::Gone));
    }

    #[test]
    fn a_token_is_compared_whole() {
        assert!(same("ocx-run-ab", "ocx-run-ab"));
        assert!(!same("ocx-run-ab", "ocx-run-ac"));
        assert!(!same("ocx-run-a", "ocx-run-ab"));
    }

    proptest! {
        #[test]
        fn any_stream_is_passed_on_whole_and_its_usage_read_without_panic(
            pieces in proptest::collection::vec(proptest::collection::vec(
                prop_oneof![Just(b'\n'), Just(b'\r'), Just(b'{'), Just(b'"'), any::<u8>()], 0..64), 0..16),
            json in "[{}\\[\\]\":,a-z0-9 ]{0,80}",
        ) {
            let mut e = Events::default();
            let mut passed = Vec::new();
            let mut u = Usage::default();
            for p in &pieces {
                for event in e.push(p) {
                    u.read_event(&event);
                    passed.extend(event);
                }
            }
            passed.extend(e.rest());
            prop_assert_eq!(passed, pieces.concat());
            u.read_event(format!("data: {json}\n\n").as_bytes());
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&json) {
                u.read(&v);
            }
        }

        #[test]
        fn any_request_bytes_are_read_or_refused_without_panic(
            raw in proptest::collection::vec(
                prop_oneof![Just(b'\n'), Just(b'\r'), Just(b':'), Just(b' '), any::<u8>()], 0..300),
        ) {
            let mut with_start = b"POST /v1/messages HTTP/1.1\r\n".to_vec();
            with_start.extend(&raw);
            for bytes in [&raw, &with_start] {
                let _ = read_request(&mut &bytes[..], &mut Vec::new());
            }
        }
    }
}
