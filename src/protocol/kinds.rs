//! The three kinds of message (C2–C4): `record`, `stop` and `response`,
//! typed; their readers (C7: unknown keys ignored, except inside `sandbox`,
//! `budget`, `restrict` and OCX's `wake`, where they make a record
//! refused) and the checks a record's values must pass, shared by `create`
//! and the node.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A problem with a message, naming its field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub field: String,
    pub reason: String,
}

impl Problem {
    /// A problem with `field`, saying why.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Problem {
        Problem {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// The restrictions a record asks its node to hold its run to (C6).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Restrict {
    /// The run holds no password for its user: its tools run on the node, and its check-ins leave only by `push`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_password: Option<bool>,
    /// Its check-ins go only on this branch (needs no_password).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// It posts only in its record's place (needs no_password).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_thread: Option<bool>,
    /// Its tools may stage releases of OCX's page from the served
    /// repository's check-ins, into the release root the repository's
    /// configuration names (needs no_password, and a sender holding setup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<bool>,
    /// Each post, ticket change, check-in, tag and verdict it makes is held
    /// as a question for the record's sender (or the logins `review_by`
    /// names), and written only once one of them approves it (needs
    /// no_password).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<bool>,
    /// With review: the logins who decide its held writes, in the
    /// sender's stead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_by: Option<Vec<String>>,
}

impl Restrict {
    /// The restrictions asked for, by name, in the protocol's order.
    pub fn asked(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.no_password == Some(true) {
            out.push("no_password");
        }
        if self.branch.is_some() {
            out.push("branch");
        }
        if self.own_thread == Some(true) {
            out.push("own_thread");
        }
        if self.stage == Some(true) {
            out.push("stage");
        }
        if self.review == Some(true) {
            out.push("review");
        }
        out
    }
}

/// What a run's processes see of the host besides its checkout, its program and the system's files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sandbox {
    /// Whether the run may use the network.
    #[serde(default = "yes")]
    pub network: bool,
    /// Absolute host paths it may read.
    #[serde(default)]
    pub read_only: Vec<String>,
    /// Absolute host paths it may read and write.
    #[serde(default)]
    pub read_write: Vec<String>,
    /// The only hosts it may reach, as NAME or NAME:PORT (443 when none), through its node's proxy. Default: the runner page's hosts; none: network alone decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
}

fn yes() -> bool {
    true
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox {
            network: true,
            read_only: Vec::new(),
            read_write: Vec::new(),
            hosts: None,
        }
    }
}

/// Limits on all a run's processes together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Wall-clock time: a whole number followed by s, m, h or d (as 4h).
    pub wall: String,
    /// CPU seconds in total, a positive whole number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u64>,
    /// Memory at once: bytes, or a number followed by K, M or G (binary units).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    /// Processes at once, a positive whole number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
    /// Model tokens in all (in and out, as the model service's own usage counts them), a positive whole number; only for a runner whose page names its model service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Model cost in all, in the currency of its runner page's prices (tokens in and out at those prices), a positive decimal of at most six places; only for a runner whose page gives prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<f64>")]
    pub cost: Option<super::money::Money>,
    /// Whether reaching budget.wall, budget.cpu, budget.tokens or budget.cost pauses the run (frozen) and asks the record's sender for more, in place of ending it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask: Option<bool>,
}

/// A memory limit as a record may give it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Memory {
    /// Bytes.
    Bytes(u64),
    /// A number, optionally followed by K, M or G.
    Text(String),
}

/// One of what wakes a run besides its `checkins` and `hears` (OCX's key
/// of version 1, C7): `{"on": "schedule", "every": "1d"}` or `{"on":
/// "schedule", "cron": "0 3 * * 1-5", "zone": "Europe/Paris"}`, a line
/// given at each slot of the schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Wake {
    /// What wakes the run: `schedule` (the one this node knows).
    pub on: String,
    /// How often: a whole number followed by s, m, h or d (at least 5s), its slots whole multiples of it since the Unix epoch (1d: each midnight, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// When, in place of every: a five-field cron line (minute, hour, day of the month, month, day of the week), such as "0 3 * * 1-5".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The time zone the cron line is read in, by its IANA name (such as Europe/Paris). Default: UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
}

/// The shortest schedule a record may ask for, in seconds: a slot the
/// node can keep on a busy host, and few enough lines that a runner keeps
/// up.
pub const EVERY_AT_LEAST: u64 = 5;

/// A record (C2): what a node is asked to run, as whom, and within what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub ocx: u64,
    pub kind: String,
    pub node: String,
    pub user: String,
    pub runner: String,
    pub objective: String,
    #[serde(default)]
    pub checkins: Vec<String>,
    #[serde(default)]
    pub hears: Vec<String>,
    #[serde(default)]
    pub remote: bool,
    #[serde(default)]
    pub restrict: Restrict,
    #[serde(default)]
    pub sandbox: Sandbox,
    pub budget: Budget,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// What else wakes the run (OCX's key of version 1): its schedules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wake: Vec<Wake>,
    /// Where the record's fields were taken from (`create --pattern`): a
    /// key v1 readers pass over, which limits nothing; read as any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<serde_json::Value>,
}

/// A stop (C3): ends the run of the record it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopMessage {
    pub ocx: u64,
    pub kind: String,
    pub node: String,
    pub stops: String,
}

/// A response (C4): the node's one answer to a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    pub ocx: u64,
    pub kind: String,
    pub node: String,
    pub answers: String,
    pub outcome: String,
    #[serde(default)]
    pub note: String,
}

/// A message of a known kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Record(Box<Record>),
    Stop(StopMessage),
    Response(Response),
}

impl Message {
    /// The node the message is for.
    pub fn node(&self) -> &str {
        match self {
            Message::Record(r) => &r.node,
            Message::Stop(s) => &s.node,
            Message::Response(r) => &r.node,
        }
    }
}

/// How a message block reads as a kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A message of a known kind, its values checked.
    Known(Message),
    /// Not one of the three kinds: no one acts on it.
    Other,
    /// A message that must be refused, naming the first field at fault
    /// (a record the node answers `refused`).
    Refused(Message, Problem),
    /// Its shape does not read (a missing or mistyped field).
    Malformed(Problem),
}

/// Reads a message's object as its kind.
pub fn read(map: &Map<String, Value>) -> Kind {
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
    let value = Value::Object(map.clone());
    let typed = |v: Value| -> Result<Message, Problem> {
        match kind {
            "record" => serde_path_to_error::deserialize(v).map(|r| Message::Record(Box::new(r))),
            "stop" => serde_path_to_error::deserialize(v).map(Message::Stop),
            "response" => serde_path_to_error::deserialize(v).map(Message::Response),
            _ => unreachable!("kind checked"),
        }
        .map_err(problem)
    };
    if !matches!(kind, "record" | "stop" | "response") {
        return Kind::Other;
    }
    match typed(value) {
        Ok(Message::Record(r)) => match check_record(&r) {
            Ok(()) => Kind::Known(Message::Record(r)),
            Err(p) => Kind::Refused(Message::Record(r), p),
        },
        Ok(m) => Kind::Known(m),
        Err(p) => {
            if kind == "record"
                && let Some(r) = lenient_record(map)
            {
                return Kind::Refused(Message::Record(Box::new(r)), p);
            }
            Kind::Malformed(p)
        }
    }
}

/// A record whose `sandbox`, `budget`, `restrict` or `wake` holds a key
/// this reader does not know still names its node, user and place: read it
/// without those parts, so the node can answer it `refused`.
fn lenient_record(map: &Map<String, Value>) -> Option<Record> {
    let mut m = map.clone();
    for key in ["sandbox", "budget", "restrict", "wake"] {
        m.remove(key);
    }
    m.insert("budget".into(), serde_json::json!({"wall": "0s"}));
    serde_json::from_value(Value::Object(m)).ok()
}

fn problem(e: serde_path_to_error::Error<serde_json::Error>) -> Problem {
    let (field, message) = crate::stop::field_at_fault(&e);
    let reason = if message.starts_with("unknown field") && field.starts_with("wake") {
        "is a key this node does not know: it may be a wake it cannot give".to_string()
    } else if message.starts_with("unknown field") {
        "is a key this node does not know: it may be a limit".to_string()
    } else {
        message
    };
    Problem::new(clip(&field), clip(&reason))
}

/// Seconds a `wall` value stands for: a positive whole number followed by s, m, h or d.
pub fn wall_seconds(wall: &str) -> Option<u64> {
    let per = match wall.bytes().last()? {
        b's' => 1,
        b'm' => 60,
        b'h' => 3600,
        b'd' => 86400,
        _ => return None,
    };
    let digits = &wall[..wall.len() - 1];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    (n > 0).then(|| n.checked_mul(per)).flatten()
}

/// Seconds an `every` value stands for: as [`wall_seconds`] reads it, and
/// at least [`EVERY_AT_LEAST`].
pub fn every_seconds(every: &str) -> Option<u64> {
    wall_seconds(every).filter(|s| *s >= EVERY_AT_LEAST)
}

/// Checks what wakes a record's run (`wake`), naming the first at fault:
/// each a `schedule` that reads ([`super::schedule::read`]), and only for
/// a session (a `command` runs on check-ins alone).
pub fn check_wake(wake: &[Wake], runner: &str) -> Result<(), Problem> {
    if !wake.is_empty() && runner == "command" {
        return Err(Problem::new(
            "wake",
            "a command record runs on each check-in alone: a schedule wakes a session",
        ));
    }
    for (i, w) in wake.iter().enumerate() {
        super::schedule::read(i, w)?;
    }
    Ok(())
}

/// Bytes a `memory` value stands for: bytes, or a number followed by K, M or G (binary).
pub fn memory_bytes(memory: &Memory) -> Option<u64> {
    match memory {
        Memory::Bytes(n) => (*n > 0).then_some(*n),
        Memory::Text(t) => {
            let (digits, mult) = match t.chars().last()? {
                'K' => (&t[..t.len() - 1], 1u64 << 10),
                'M' => (&t[..t.len() - 1], 1 << 20),
                'G' => (&t[..t.len() - 1], 1 << 30),
                _ => (t.as_str(), 1),
            };
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let n: u64 = digits.parse().ok()?;
            (n > 0).then(|| n.checked_mul(mult)).flatten()
        }
    }
}

/// Whether `s` is 40 lower-case hex digits, as a server-code is.
pub fn is_server_code(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A name or reason as a refusal gives it: its first 200 characters, so a
/// huge key or value never makes a huge answer.
pub(crate) fn clip(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// A value as a refusal quotes it: its first 40 characters, quoted.
pub(crate) fn shown(value: &str) -> String {
    match value.char_indices().nth(40) {
        Some((at, _)) => format!("{:?}…", &value[..at]),
        None => format!("{value:?}"),
    }
}

/// Checks a budget's values, naming the first at fault.
pub fn check_budget(b: &Budget) -> Result<(), Problem> {
    if wall_seconds(&b.wall).is_none() {
        return Err(Problem::new(
            "budget.wall",
            format!(
                "{} is not a whole number followed by s, m, h or d",
                shown(&b.wall)
            ),
        ));
    }
    if b.cpu == Some(0) {
        return Err(Problem::new(
            "budget.cpu",
            "is not a positive whole number of seconds",
        ));
    }
    if let Some(m) = &b.memory
        && memory_bytes(m).is_none()
    {
        return Err(Problem::new(
            "budget.memory",
            "is not bytes, or a number followed by K, M or G",
        ));
    }
    if b.processes == Some(0) {
        return Err(Problem::new(
            "budget.processes",
            "is not a positive whole number",
        ));
    }
    if b.tokens == Some(0) {
        return Err(Problem::new(
            "budget.tokens",
            "is not a positive whole number",
        ));
    }
    if b.cost.is_some_and(super::money::Money::is_zero) {
        return Err(Problem::new("budget.cost", "is not a positive amount"));
    }
    Ok(())
}

/// Checks a sandbox's paths are absolute and its hosts are host names,
/// naming the first at fault.
pub fn check_sandbox(s: &Sandbox) -> Result<(), Problem> {
    for (name, paths) in [("read_only", &s.read_only), ("read_write", &s.read_write)] {
        for (i, p) in paths.iter().enumerate() {
            if !p.starts_with('/') {
                return Err(Problem::new(
                    format!("sandbox.{name}[{i}]"),
                    format!("{} is not an absolute path", shown(p)),
                ));
            }
        }
    }
    if let Some(hosts) = &s.hosts {
        if !s.network {
            return Err(Problem::new(
                "sandbox.hosts",
                "needs network: a run without the network reaches no host",
            ));
        }
        for (i, h) in hosts.iter().enumerate() {
            if let Err(why) = host_port(h) {
                return Err(Problem::new(
                    format!("sandbox.hosts[{i}]"),
                    format!("{} {why}", shown(h)),
                ));
            }
        }
    }
    Ok(())
}

/// The port a listed host gets when it names none.
pub const DEFAULT_HOST_PORT: u16 = 443;

/// Reads an entry of `sandbox.hosts`, `NAME` or `NAME:PORT`: the name
/// lower-cased, its trailing dot gone, and the port (443 when none), or why
/// it is not one. An address written as a number is refused: a run reaches
/// a host by its name, which the node resolves.
pub fn host_port(entry: &str) -> Result<(String, u16), &'static str> {
    if entry.starts_with('[') || entry.matches(':').count() > 1 {
        return Err("is an address written as a number, not a host name");
    }
    let (name, port) = match entry.split_once(':') {
        Some((name, port)) => {
            if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
                return Err("has a port that is not a number");
            }
            match port.parse::<u16>() {
                Ok(p) if p > 0 => (name, p),
                _ => return Err("has a port that is not from 1 to 65535"),
            }
        }
        None => (entry, DEFAULT_HOST_PORT),
    };
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name.is_empty() {
        return Err("names no host");
    }
    if name.len() > 253 {
        return Err("is longer than a host name may be");
    }
    let labels: Vec<&str> = name.split('.').collect();
    for label in &labels {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(
                "is not a host name (letters, digits and hyphens, in labels split by dots)",
            );
        }
    }
    let numeric = |l: &&str| {
        l.bytes().all(|b| b.is_ascii_digit())
            || l.strip_prefix("0x")
                .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    if labels.last().is_some_and(numeric) || labels.iter().all(numeric) {
        return Err("is an address written as a number, not a host name");
    }
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Err("is an address written as a number, not a host name");
    }
    Ok((name, port))
}

/// Checks restrictions that need others (C6: branch and own_thread need no_password).
pub fn check_restrict(r: &Restrict) -> Result<(), Problem> {
    let holds_password = r.no_password != Some(true);
    if r.branch.is_some() && holds_password {
        return Err(Problem::new(
            "restrict.branch",
            "needs no_password: a run that holds its password can write past any tool",
        ));
    }
    if r.own_thread == Some(true) && holds_password {
        return Err(Problem::new(
            "restrict.own_thread",
            "needs no_password: a run that holds its password can write past any tool",
        ));
    }
    if r.stage == Some(true) && holds_password {
        return Err(Problem::new(
            "restrict.stage",
            "needs no_password: only a run whose tools the node serves can be let stage a release",
        ));
    }
    check_review(r)?;
    if let Some(b) = &r.branch
        && (b.trim().is_empty() || b.contains(['\n', '\r']))
    {
        return Err(Problem::new("restrict.branch", "is not a branch name"));
    }
    if r.branch.as_deref().is_some_and(|b| b.starts_with('-')) {
        return Err(Problem::new(
            "restrict.branch",
            "begins with '-', which fossil would read as an option",
        ));
    }
    Ok(())
}

/// Checks `review` and `review_by`: review needs no_password (a run that
/// holds its password writes past any hold), review_by needs review, and
/// each of its logins is one.
fn check_review(r: &Restrict) -> Result<(), Problem> {
    if r.review == Some(true) && r.no_password != Some(true) {
        return Err(Problem::new(
            "restrict.review",
            "needs no_password: a run that holds its password can write past any tool",
        ));
    }
    let Some(by) = &r.review_by else {
        return Ok(());
    };
    if r.review != Some(true) {
        return Err(Problem::new(
            "restrict.review_by",
            "needs review: it names who decides held writes",
        ));
    }
    if by.is_empty() {
        return Err(Problem::new(
            "restrict.review_by",
            "names no login: leave it out for the record's sender",
        ));
    }
    for (i, login) in by.iter().enumerate() {
        if login.trim().is_empty() || login.contains(char::is_whitespace) || login.starts_with('-')
        {
            return Err(Problem::new(
                format!("restrict.review_by[{i}]"),
                format!("{} is not a login", shown(login)),
            ));
        }
    }
    Ok(())
}

/// Checks every value of a record that can be checked without a
/// repository, naming the first at fault.
pub fn check_record(r: &Record) -> Result<(), Problem> {
    if !is_server_code(&r.node) {
        return Err(Problem::new(
            "node",
            "is not 40 lower-case hex digits (a server-code)",
        ));
    }
    if r.objective.trim().is_empty() {
        return Err(Problem::new("objective", "is empty"));
    }
    if r.user.trim().is_empty() || r.user.contains(char::is_whitespace) {
        return Err(Problem::new("user", "is not a login"));
    }
    if r.user.starts_with('-') {
        return Err(Problem::new(
            "user",
            "begins with '-', which fossil would read as an option",
        ));
    }
    check_restrict(&r.restrict)?;
    if let Some(i) = r
        .restrict
        .review_by
        .iter()
        .flatten()
        .position(|l| *l == r.user)
    {
        return Err(Problem::new(
            format!("restrict.review_by[{i}]"),
            "is the run's own login: a run never decides its own held writes",
        ));
    }
    check_sandbox(&r.sandbox)?;
    check_budget(&r.budget)?;
    check_wake(&r.wake, &r.runner)?;
    match (&r.runner[..], &r.command) {
        ("command", None) => {
            return Err(Problem::new(
                "command",
                "a command record needs its command",
            ));
        }
        ("command", Some(c)) if c.is_empty() || c[0].is_empty() => {
            return Err(Problem::new("command", "names no program"));
        }
        ("command", Some(_)) if !r.hears.is_empty() => {
            return Err(Problem::new(
                "hears",
                "a command record hears no one: give []",
            ));
        }
        ("command", Some(_)) if r.budget.ask == Some(true) => {
            return Err(Problem::new(
                "budget.ask",
                "a command's run on a check-in ends at its budget: only a session pauses to ask",
            ));
        }
        (_, Some(_)) if r.runner != "command" => {
            return Err(Problem::new(
                "command",
                "only the command runner takes a command",
            ));
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_names_with_a_port() {
        assert_eq!(
            host_port("api.anthropic.com"),
            Ok(("api.anthropic.com".into(), 443))
        );
        assert_eq!(
            host_port("Example.COM.:8080"),
            Ok(("example.com".into(), 8080))
        );
        assert_eq!(host_port("localhost:1"), Ok(("localhost".into(), 1)));
        for bad in [
            "",
            ":443",
            ".",
            "a..b",
            "-a.com",
            "a-.com",
            "a_b.com",
            "a b",
            "127.0.0.1",
            "127.0.0.1:80",
            "10.1",
            "0x7f000001",
            "2130706433",
            "::1",
            "[::1]:443",
            "fe80::1",
            "a.com:0",
            "a.com:",
            "a.com:x",
            "a.com:65536",
            "a.com:+1",
            "é.com",
            "a.com/x",
            "a.com:443:1",
        ] {
            assert!(host_port(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_bad_host_is_refused_naming_its_place() {
        let mut s = Sandbox {
            hosts: Some(vec!["a.com".into(), "b.com:80".into(), "10.0.0.1".into()]),
            ..Sandbox::default()
        };
        let p = check_sandbox(&s).unwrap_err();
        assert_eq!(p.field, "sandbox.hosts[2]");
        s.hosts = Some(vec!["a.com".into()]);
        assert_eq!(check_sandbox(&s), Ok(()));
        s.network = false;
        assert_eq!(check_sandbox(&s).unwrap_err().field, "sandbox.hosts");
    }

    #[test]
    fn a_wake_is_a_schedule_of_at_least_five_seconds_for_a_session() {
        let every = |e: &str| Wake {
            on: "schedule".into(),
            every: Some(e.into()),
            cron: None,
            zone: None,
        };
        assert_eq!(check_wake(&[every("1d"), every("5s")], "claude"), Ok(()));
        assert_eq!(every_seconds("90m"), Some(5400));
        for (bad, field) in [
            (vec![every("4s")], "wake[0].every"),
            (vec![every("1d"), every("1w")], "wake[1].every"),
            (
                vec![Wake {
                    on: "post".into(),
                    every: None,
                    cron: None,
                    zone: None,
                }],
                "wake[0].on",
            ),
            (
                vec![Wake {
                    on: "schedule".into(),
                    every: None,
                    cron: None,
                    zone: None,
                }],
                "wake[0].every",
            ),
        ] {
            assert_eq!(check_wake(&bad, "claude").unwrap_err().field, field);
        }
        assert_eq!(
            check_wake(&[every("1d")], "command").unwrap_err().field,
            "wake"
        );
    }

    #[test]
    fn a_record_whose_wake_this_node_does_not_know_is_refused_naming_wake() {
        let record = |wake: Value| {
            let v = serde_json::json!({"ocx": 1, "kind": "record",
                "node": "0123456789abcdef0123456789abcdef01234567", "user": "claude-0f0f0f",
                "runner": "claude", "objective": "x", "budget": {"wall": "1h"}, "wake": wake});
            read(v.as_object().unwrap())
        };
        assert!(matches!(
            record(serde_json::json!([{"on": "schedule", "every": "1h"}])),
            Kind::Known(_)
        ));
        for (wake, field) in [
            (
                serde_json::json!([{"on": "schedule", "every": "1h", "jitter": "5m"}]),
                "wake[0]",
            ),
            (serde_json::json!({"on": "schedule", "every": "1h"}), "wake"),
            (serde_json::json!([{"on": "moon"}]), "wake[0].on"),
            (
                serde_json::json!([{"on": "schedule", "every": "soon"}]),
                "wake[0].every",
            ),
        ] {
            match record(wake.clone()) {
                Kind::Refused(Message::Record(_), p) => {
                    assert!(p.field.starts_with(field), "{wake}: {p:?}")
                }
                other => panic!("{wake}: {other:?}"),
            }
        }
    }

    #[test]
    fn review_needs_no_password_and_review_by_needs_review() {
        let held = |no_password: bool, review: Option<bool>, by: Option<Vec<&str>>| Restrict {
            no_password: Some(no_password),
            review,
            review_by: by.map(|b| b.into_iter().map(String::from).collect()),
            ..Restrict::default()
        };
        assert_eq!(check_restrict(&held(true, Some(true), None)), Ok(()));
        assert_eq!(
            check_restrict(&held(true, Some(true), Some(vec!["stone", "pat"]))),
            Ok(())
        );
        for (r, field) in [
            (held(false, Some(true), None), "restrict.review"),
            (held(true, None, Some(vec!["stone"])), "restrict.review_by"),
            (held(true, Some(true), Some(vec![])), "restrict.review_by"),
            (
                held(true, Some(true), Some(vec!["stone", "a b"])),
                "restrict.review_by[1]",
            ),
        ] {
            assert_eq!(check_restrict(&r).unwrap_err().field, field, "{r:?}");
        }
        assert_eq!(
            held(true, Some(true), None).asked(),
            ["no_password", "review"]
        );
        let v = serde_json::json!({"ocx": 1, "kind": "record",
            "node": "0123456789abcdef0123456789abcdef01234567", "user": "fixer",
            "runner": "claude", "objective": "x", "budget": {"wall": "1h"},
            "restrict": {"no_password": true, "review": true, "review_by": ["stone", "fixer"]}});
        match read(v.as_object().unwrap()) {
            Kind::Refused(_, p) => assert_eq!(p.field, "restrict.review_by[1]"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn walls_and_memory_read_as_the_protocol_says() {
        assert_eq!(wall_seconds("4h"), Some(14400));
        assert_eq!(wall_seconds("90s"), Some(90));
        for bad in ["", "h", "4", "4x", "-4h", "4.5h", "0s", " 4h"] {
            assert_eq!(wall_seconds(bad), None, "{bad:?}");
        }
        assert_eq!(memory_bytes(&Memory::Text("512M".into())), Some(512 << 20));
        assert_eq!(memory_bytes(&Memory::Bytes(4096)), Some(4096));
        assert_eq!(memory_bytes(&Memory::Text("1024".into())), Some(1024));
        for bad in ["", "M", "1.5G", "2T", "-1K"] {
            assert_eq!(memory_bytes(&Memory::Text(bad.into())), None, "{bad:?}");
        }
    }
}
