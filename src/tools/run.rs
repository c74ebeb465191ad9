//! `run`: one run as a person follows it: its record as a table, whether
//! it runs or how it ended, what it has spent beside what its budget
//! leaves (its tokens' cost too, where its runner gives prices), and its
//! transcript (each delivery and each turn of its agent, as the agent
//! reported it, secrets masked by the node). The transcript
//! is shown to administrators and to the record's sender alone, and only
//! where the node's run directories can be read (the node's own account);
//! `after` and `within` let the page ask for what comes next and wait for
//! it, and `entry` for one entry whole (a folded output opened). Writes
//! nothing.

use crate::node::transcript::{self, Entry, Spend, TranscriptError};
use crate::protocol::found::{self, Found, StandingRecord};
use crate::protocol::kinds::{self, Kind, Message};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The longest a call waits for a transcript's next entry.
pub const WITHIN_MAX: u64 = 25;

/// Input of `run`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The run's record, by hash or a prefix of 10+ hex digits.
    pub record: String,
    /// Only the transcript's entries numbered above this one.
    #[serde(default)]
    pub after: u64,
    /// Wait up to this many seconds (at most 25) for an entry after
    /// `after` when there is none yet.
    #[serde(default)]
    pub within: u64,
    /// Only the transcript's entry of this number, whole, in place of
    /// those after `after` (the page fetches a folded output with it when
    /// a person opens it).
    #[serde(default)]
    pub entry: Option<u64>,
    /// Only the last this many of the entries after `after`: the newest,
    /// read from the transcript's end (the page draws the last 40 and
    /// fetches the earlier ones when a person asks).
    #[serde(default)]
    pub last: Option<usize>,
}

/// One run as a person follows it.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// Its record, by full hash.
    pub record: String,
    /// The record's fields as it was written: objective, runner, login
    /// (`user`), node, what wakes it (`checkins`, `hears`, `wake`), sandbox,
    /// budget, restrictions, pattern.
    pub fields: Value,
    /// Who sent the record, by receipt.
    pub sent_by: Option<String>,
    /// When it was received (UTC).
    pub since: String,
    /// `running`, or `ended`.
    pub state: String,
    /// How it ended, and its response's note (ended runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Seconds of its wall left (running runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_left: Option<i64>,
    /// When its schedule next wakes it (running runs whose `wake` holds one), UTC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_slot: Option<String>,
    /// Its record's budget of model tokens, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_budget: Option<u64>,
    /// Model tokens spent, as its relay counts them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// What its model tokens have cost, in its runner's currency, beside
    /// its `budget.cost` when it has one (`0.0123 of 0.05 USD`); runs whose
    /// runner's page gives prices.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<String>,
    /// What it has spent, as its watcher last measured it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spend: Option<Spend>,
    /// The same in words, beside what the budget leaves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spent: Option<String>,
    /// Its transcript's entries after `after`, in order.
    pub transcript: Vec<Entry>,
    /// The number of the last entry given (or `after`, when none came):
    /// the next call's `after`.
    pub last: u64,
    /// Why no transcript is shown, when none is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transcript_withheld: Option<String>,
    /// The id of the run's trace, where its node sends runs' traces to an
    /// OpenTelemetry collector (`ocx node start --otlp`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
}

/// The `run` tool.
pub struct RunTool;

impl Tool for RunTool {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "run";
    const SUMMARY: &'static str = "One run as it goes: its record as a table, its state, what it has spent, and its transcript (to administrators and the record's sender).";
    const NEEDS: Needs = Needs::Any("2r");
    const WRITES: bool = false;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        if input.within > WITHIN_MAX {
            return Err(
                Stop::field("within", format!("waits at most {WITHIN_MAX} seconds"))
                    .next(format!("give {WITHIN_MAX} or less")),
            );
        }
        if input.entry.is_some() && input.last.is_some() {
            return Err(
                Stop::field("last", "is for the entries after `after`, not with `entry`")
                    .next("give either entry or last"),
            );
        }
        let (rid, hash) = call.artifact("record", &input.record)?;
        let caller = call.caller()?.clone();
        let (r, response) = standing(call, rid, &hash)?.ok_or_else(|| {
            Stop::field("record", format!("{} is no record", &hash[..10]))
                .next("give the hash of a record, as `console` lists them")
        })?;
        let mut out = Output {
            record: r.hash.clone(),
            fields: serde_json::to_value(&r.record).unwrap_or(Value::Null),
            sent_by: r.said.from.clone(),
            since: crate::fossil::repo::julian_to_rfc3339(r.said.when),
            state: "running".into(),
            outcome: None,
            note: None,
            wall_left: None,
            next_slot: None,
            tokens_budget: r.record.budget.tokens,
            tokens: None,
            cost: None,
            spend: None,
            spent: None,
            transcript: Vec::new(),
            last: input.after,
            transcript_withheld: None,
            trace: None,
        };
        match response.map(|f| f.kind) {
            Some(Kind::Known(Message::Response(resp))) => {
                out.state = "ended".into();
                out.outcome = Some(resp.outcome);
                out.note = Some(resp.note).filter(|n| !n.is_empty());
            }
            Some(_) => out.state = "ended".into(),
            None => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                let since = (r.said.when - 2440587.5) * 86400.0;
                out.wall_left = kinds::wall_seconds(&r.record.budget.wall)
                    .map(|w| (since + w as f64 - now).round() as i64);
                out.next_slot =
                    crate::node::schedule::next_of(&r.record.wake, std::time::SystemTime::now());
            }
        }
        let may_see = caller.capabilities.has('a')
            || caller.capabilities.has('s')
            || r.said.from.as_deref() == Some(caller.login.as_str());
        let root = crate::node::hook::root_of(call.repo()?)?;
        out.trace = root
            .as_deref()
            .and_then(crate::node::config::NodeConfig::load)
            .and_then(|c| c.otlp)
            .and_then(|_| crate::node::trace::trace_id(&r.hash));
        let dir = root.map(|root| crate::node::config::NodeConfig::run_dir(&root, &r.hash));
        let Some(dir) = dir else {
            out.transcript_withheld = Some(
                "this repository is no node here: the transcript is kept on the served repository's host (an agent machine reports its runs there)".into(),
            );
            return Ok(out);
        };
        let spent = |out: &mut Output| {
            out.tokens = crate::run::relay::spent_in(&dir);
            out.spend = transcript::read_spend(&dir);
            out.cost = out
                .spend
                .as_ref()
                .and_then(|s| cost_of(s, r.record.budget.cost));
            out.spent = out.spend.as_ref().map(|s| spend_words(s, &r.record.budget));
        };
        if !may_see {
            spent(&mut out);
            out.transcript_withheld = Some(format!(
                "the transcript is shown to administrators and to the record's sender ({}) alone",
                r.said.from.as_deref().unwrap_or("no one")
            ));
            return Ok(out);
        }
        call.read("the run's transcript");
        if let Some(n) = input.entry {
            out.transcript = one_entry(&dir, n)?;
            out.last = n;
            spent(&mut out);
            return Ok(out);
        }
        let within = std::time::Duration::from_secs(match out.state.as_str() {
            "running" => input.within,
            _ => 0,
        });
        match entries(&dir, input.after, input.last, within) {
            Ok(entries) => {
                out.last = entries.last().map_or(input.after, |e| e.seq);
                out.transcript = entries;
            }
            Err(TranscriptError::Missing) if out.state == "running" => {
                out.transcript_withheld = Some("its transcript has not begun yet".into())
            }
            Err(e) => out.transcript_withheld = Some(e.to_string()),
        }
        // Read once the wait is over, so a page waiting on the transcript
        // is told the spend as it is when it is answered.
        spent(&mut out);
        Ok(out)
    }

    fn text(o: &Output) -> String {
        text(o)
    }
}

/// The entries of the transcript in `dir` numbered above `after`, waiting
/// up to `within` for one; only the `last` so many when given (read from
/// the file's end when there is no wait).
fn entries(
    dir: &std::path::Path,
    after: u64,
    last: Option<usize>,
    within: std::time::Duration,
) -> Result<Vec<Entry>, TranscriptError> {
    match last {
        Some(n) if within.is_zero() => transcript::read_last(dir, n).map(|mut entries| {
            entries.retain(|e| e.seq > after);
            entries
        }),
        last => transcript::wait_after(dir, after, within).map(|mut entries| {
            let over = entries.len().saturating_sub(last.unwrap_or(usize::MAX));
            entries.drain(..over);
            entries
        }),
    }
}

/// Entry `n` of the transcript in `dir`, alone; refused, naming `entry`,
/// when the transcript has none of that number.
fn one_entry(dir: &std::path::Path, n: u64) -> Result<Vec<Entry>, Stop> {
    let none = || {
        Stop::field("entry", format!("the run's transcript has no entry {n}"))
            .next("give the number of an entry the page shows")
    };
    match transcript::read_after(dir, n.saturating_sub(1), 1) {
        Ok(e) if e.first().is_some_and(|e| e.seq == n) => Ok(e),
        Ok(_) => Err(none()),
        Err(TranscriptError::Missing) => Err(none()),
        Err(e) => Err(Stop::failed(e.to_string())),
    }
}

/// The record `hash` (at `rid`) and the response that counts, if any: on
/// a node, read of the one record; in a clone's checkout, as the clone's
/// server received them (every record's receipts asked at once, as the
/// console asks them).
fn standing(
    call: &mut Call,
    rid: i64,
    hash: &str,
) -> Result<Option<(StandingRecord, Option<Found>)>, Stop> {
    let receipts = super::served::receipts(call)?;
    if receipts.asked().is_some() {
        return Ok(super::console::records(call)?
            .into_iter()
            .find(|(r, _, _)| r.hash == hash)
            .map(|(r, _, response)| (r, response)));
    }
    call.read("the record and its response");
    let repo = call.repo()?;
    // One read transaction: a page's reads share one lock.
    repo.reading(|| {
        let Some(r) = found::record(repo, rid, hash)? else {
            return Ok(None);
        };
        let response = receipts
            .response(repo, &r.place, &r.hash, &r.record.node)
            .map_err(super::served::stop)?;
        Ok(Some((r, response)))
    })?
}

/// The run as text for a person: the record's table, the state, the
/// spend, then each entry a paragraph.
pub fn text(o: &Output) -> String {
    let f = &o.fields;
    let list = names;
    let mut t = format!(
        "run {}\n  objective: {}\n  runner:    {}\n  login:     {}\n  node:      {}\n  wakes on:  check-ins on {}; posts of {}\n  sandbox:   {}\n  budget:    {}\n  restrict:  {}\n  sent by {} at {}\n",
        o.record,
        f["objective"].as_str().unwrap_or(""),
        f["runner"].as_str().unwrap_or(""),
        f["user"].as_str().unwrap_or(""),
        f["node"].as_str().unwrap_or(""),
        list(&f["checkins"]),
        list(&f["hears"]),
        f["sandbox"],
        f["budget"],
        f["restrict"],
        o.sent_by.as_deref().unwrap_or("no one"),
        o.since,
    );
    match (&o.outcome, o.wall_left) {
        (Some(outcome), _) => t.push_str(&format!(
            "ended {outcome}{}\n",
            o.note
                .as_deref()
                .map(|n| format!(": {n}"))
                .unwrap_or_default()
        )),
        (None, Some(w)) => t.push_str(&format!("running, {w} s of its wall left\n")),
        (None, None) => t.push_str(&format!("{}\n", o.state)),
    }
    if let Some(n) = &o.next_slot {
        t.push_str(&format!("next slot of its schedule: {n}\n"));
    }
    if let Some(s) = &o.spent {
        t.push_str(&format!("spent: {s}\n"));
    } else if let Some(n) = o.tokens {
        t.push_str(&format!("tokens: {}\n", crate::run::relay::thousands(n)));
    }
    if let Some(why) = &o.transcript_withheld {
        t.push_str(&format!("no transcript: {why}\n"));
    }
    for e in &o.transcript {
        t.push_str(&format!("\n[{}] {}\n", e.seq, entry_text(e)));
    }
    t
}

/// A list of names (branches, logins) as a person reads it: joined by
/// commas, or "none".
pub fn names(v: &Value) -> String {
    match v.as_array() {
        Some(a) if !a.is_empty() => a
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        _ => "none".into(),
    }
}

/// What a run's spend `s` says it cost, beside its `budget.cost` when it
/// has one, when its runner's page gives prices.
pub fn cost_of(s: &Spend, budget: Option<crate::protocol::money::Money>) -> Option<String> {
    let (cost, currency) = (s.cost?, s.currency.as_deref()?);
    Some(crate::protocol::money::cost_words(cost, budget, currency))
}

/// What a run has spent, in words, each beside what its record's budget
/// gives of it (`of` that much), where the budget names it.
pub fn spend_words(s: &Spend, budget: &kinds::Budget) -> String {
    use crate::protocol::kinds::{memory_bytes, wall_seconds};
    use crate::run::relay::thousands;
    let of = |limit: Option<String>| limit.map(|l| format!(" of {l}")).unwrap_or_default();
    let mut parts = vec![format!(
        "{} s of wall{}",
        s.wall_seconds,
        of(wall_seconds(&budget.wall).map(|w| w.to_string()))
    )];
    if let Some(c) = s.cpu_seconds {
        parts.push(format!(
            "{c:.1} s of CPU{}",
            of(budget.cpu.map(|c| c.to_string()))
        ));
    }
    if let Some(m) = s.memory_peak_bytes {
        parts.push(format!(
            "{} MiB of memory at most{}",
            m >> 20,
            of(budget
                .memory
                .as_ref()
                .and_then(memory_bytes)
                .map(|b| format!("{} MiB", b >> 20)))
        ));
    }
    if let (Some(i), Some(o)) = (s.tokens_in, s.tokens_out) {
        parts.push(format!(
            "{} tokens in and {} out{}",
            thousands(i),
            thousands(o),
            of(budget.tokens.map(thousands))
        ));
    }
    if let Some(c) = cost_of(s, budget.cost) {
        parts.push(c);
    }
    if let Some(r) = s.connections_refused {
        parts.push(format!("{r} connections refused"));
    }
    parts.join(", ")
}

/// One entry as a line of text.
pub fn entry_text(e: &Entry) -> String {
    use crate::node::transcript::Said;
    match &e.said {
        Said::Delivery { text } => format!("delivered: {text}"),
        Said::Words { text } => format!("said: {text}"),
        Said::ToolCall {
            name, arguments, ..
        } => format!("called {name} {arguments}"),
        Said::ToolResult { output, error, .. } => {
            format!("{}: {output}", if *error { "failed" } else { "answered" })
        }
        Said::Command {
            command,
            output,
            exit,
        } => format!(
            "ran {command} (exit {})\n{output}",
            exit.map_or("unknown".into(), |x| x.to_string())
        ),
        Said::Output { text } => text.clone(),
        Said::Refused { text } => format!("refused by its model service: {text}"),
        Said::Error { text } => format!("error: {text}"),
        Said::TurnEnded { ok } => {
            format!("turn ended{}", if *ok { "" } else { " in error" })
        }
        Said::Ended { outcome, note } => format!("run ended {outcome}: {note}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_spent_stands_beside_what_the_budget_gives_of_it() {
        let budget: crate::protocol::kinds::Budget = serde_json::from_value(
            serde_json::json!({"wall": "1h", "cpu": 600, "memory": "512M", "tokens": 100000}),
        )
        .unwrap();
        let spend = Spend {
            wall_seconds: 61,
            cpu_seconds: Some(12.34),
            memory_peak_bytes: Some(300 << 20),
            tokens_in: Some(1200),
            tokens_out: Some(345),
            connections_refused: Some(2),
            ..Spend::default()
        };
        assert_eq!(
            spend_words(&spend, &budget),
            "61 s of wall of 3600, 12.3 s of CPU of 600, 300 MiB of memory at most of 512 MiB, \
             1,200 tokens in and 345 out of 100,000, 2 connections refused"
        );
        let wall_alone: crate::protocol::kinds::Budget =
            serde_json::from_value(serde_json::json!({"wall": "5m"})).unwrap();
        assert_eq!(
            spend_words(&spend, &wall_alone),
            "61 s of wall of 300, 12.3 s of CPU, 300 MiB of memory at most, \
             1,200 tokens in and 345 out, 2 connections refused"
        );
    }
}
