//! `console`: a person's view: the questions waiting on them (each with
//! the presses that decide it), then the runs: running and recently
//! ended. The web page draws it as the page a signed-in person lands on;
//! the command line prints it as text with the exact command to decide
//! each question; MCP gives the same data. Writes nothing.

use super::asking::{self, Shown};
use crate::node::receipts;
use crate::protocol::found::{self, Found};
use crate::protocol::kinds::{self, Kind, Message};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Input of `console`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// Whose view: a login (you, when left out).
    #[serde(default, rename = "for")]
    pub for_login: Option<String>,
}

/// One press that decides a question: the tool and the input it takes.
#[derive(Serialize, JsonSchema, Clone)]
pub struct Press {
    /// What the button says.
    pub label: String,
    /// Whether it is the recommended option.
    pub recommended: bool,
    /// The tool it calls.
    pub tool: String,
    /// Its input, as the tool reads it.
    pub input: Value,
}

/// A question in the view, with the presses that decide it (only in your own view).
#[derive(Serialize, JsonSchema, Clone)]
pub struct Waiting {
    #[serde(flatten)]
    pub shown: Shown,
    /// One press per option (your own view only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub decide: Vec<Press>,
}

/// A run as the view shows it.
#[derive(Serialize, JsonSchema, Clone)]
pub struct RunView {
    /// Its record, by full hash.
    pub record: String,
    pub objective: String,
    /// Its runner.
    pub runner: String,
    /// The login it runs as.
    pub runs_as: String,
    /// Who sent the record, by receipt.
    pub sent_by: Option<String>,
    /// When it was asked for (UTC).
    pub since: String,
    /// Seconds of its wall left (running runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_left: Option<i64>,
    /// When its schedule next wakes it (running runs whose `wake` holds one), UTC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_slot: Option<String>,
    /// The last thing said at its place after the record: who, and when (UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_said: Option<String>,
    /// How it ended (ended runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The last error its agent met, in the agent's words (where the
    /// node's own account asks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<crate::node::runner::LastError>,
    /// The model tokens it has spent, as its relay counts them (running
    /// runs whose runner names its model service, where the node's own
    /// account asks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Its record's `budget.tokens`, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_budget: Option<u64>,
    /// What its model tokens have cost, in its runner's currency, beside
    /// its `budget.cost` when it has one (`0.0123 of 0.05 USD`): runs whose
    /// runner's page gives prices, as its watcher last measured them,
    /// where the node's own account asks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<String>,
    /// The command that joins its terminal, on the node's host as the
    /// node's account (running runs whose runner gives them a terminal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attach: Option<String>,
}

/// A person's view.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// Whose view it is.
    #[serde(rename = "for")]
    pub for_login: String,
    /// The questions waiting on them.
    pub waiting: Vec<Waiting>,
    /// Open questions for others that you, an administrator, may close.
    pub to_confirm: Vec<Waiting>,
    /// How many questions you may read are open.
    pub open: usize,
    /// The runs under way.
    pub running: Vec<RunView>,
    /// The runs ended last, newest first (at most 10).
    pub ended: Vec<RunView>,
}

/// The `console` tool.
pub struct Console;

/// How many ended runs the view shows.
pub const ENDED_MAX: usize = 10;

/// The presses that decide `q`: one per option, or one with a note to fill in.
pub fn presses(q: &Shown) -> Vec<Press> {
    let short = &q.asked[..10.min(q.asked.len())];
    if q.options.is_empty() {
        return vec![Press {
            label: "Decide with a note".into(),
            recommended: false,
            tool: "post".into(),
            input: json!({"to": short, "decision": true, "text": "TEXT"}),
        }];
    }
    q.options
        .iter()
        .enumerate()
        .map(|(i, o)| Press {
            label: crate::protocol::ask::option_label(i, o),
            recommended: i == 0,
            tool: "post".into(),
            input: json!({"to": short, "decision": true, "text": o}),
        })
        .collect()
}

impl Tool for Console {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "console";
    const SUMMARY: &'static str =
        "What waits on you and what your agents are doing: the questions for you, then the runs.";
    const NEEDS: Needs = Needs::Any("2r");
    const WRITES: bool = false;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let me = call.caller()?.login.clone();
        let user = input.for_login.unwrap_or_else(|| me.clone());
        let own = user == me;
        let (waiting, to_confirm, open) = asking::waiting(call, &user)?;
        let with_presses = |list: Vec<Shown>| -> Vec<Waiting> {
            list.into_iter()
                .map(|s| Waiting {
                    decide: if own { presses(&s) } else { Vec::new() },
                    shown: s,
                })
                .collect()
        };
        let (running, ended) = runs(call)?;
        Ok(Output {
            for_login: user,
            waiting: with_presses(waiting),
            to_confirm: with_presses(to_confirm),
            open,
            running,
            ended,
        })
    }

    fn text(o: &Output) -> String {
        text(o)
    }
}

/// A record, what was said at its place, and the response that counts.
pub(crate) type Standing = (found::StandingRecord, Vec<Found>, Option<Found>);

/// Every record with what was said at its place and the response that
/// counts; in a clone's checkout, each as the clone's server received it
/// (its receipts asked once for all), never as the clone did.
pub(crate) fn records(call: &mut Call) -> Result<Vec<Standing>, Stop> {
    let receipts = super::served::receipts(call)?;
    let repo = call.repo()?;
    let mut out = Vec::new();
    for r in found::tagged_records(repo)? {
        let here = found::at(repo, &r.place)?;
        let response = match receipts.asked().is_none() {
            true => receipts
                .response(repo, &r.place, &r.hash, &r.record.node)
                .map_err(super::served::stop)?,
            false => None,
        };
        out.push((r, here, response));
    }
    let Some(server) = receipts.asked().map(|s| s.url().to_string()) else {
        return Ok(out);
    };
    let hashes: Vec<String> = out
        .iter()
        .flat_map(|(r, here, _)| {
            std::iter::once(r.hash.clone()).chain(here.iter().map(|f| f.said.hash.clone()))
        })
        .collect();
    let got = receipts.by_hash(&hashes).map_err(super::served::stop)?;
    call.read(format!(
        "{server}'s receipts for the records and what was said at their places"
    ));
    let out = out
        .into_iter()
        .map(|(mut r, here, _)| {
            let here = receipts::in_received_order(&got, here, |f| &mut f.said);
            let response = receipts::response_of(&got, &r.hash, &r.record.node, here.clone());
            receipts::resent(&got, &mut r.said);
            (r, here, response)
        })
        .collect();
    Ok(receipts::in_received_order(&got, out, |(r, _, _)| {
        &mut r.said
    }))
}

fn runs(call: &mut Call) -> Result<(Vec<RunView>, Vec<RunView>), Stop> {
    call.read("every record and its response");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
        / 86400.0
        + 2440587.5;
    let node_root = crate::node::root_of(call.repo()?)?;
    let (mut running, mut ended) = (Vec::new(), Vec::new());
    for (r, said_here, response) in records(call)? {
        let last = said_here
            .iter()
            .rfind(|f| f.said.rcvid > r.said.rcvid)
            .map(|f| {
                format!(
                    "{} at {}",
                    f.said.from.as_deref().unwrap_or("no one"),
                    crate::fossil::repo::julian_to_rfc3339(f.said.when)
                )
            });
        let mut view = RunView {
            record: r.hash.clone(),
            objective: r.record.objective.clone(),
            runner: r.record.runner.clone(),
            runs_as: r.record.user.clone(),
            sent_by: r.said.from.clone(),
            since: crate::fossil::repo::julian_to_rfc3339(r.said.when),
            wall_left: None,
            next_slot: None,
            last_said: last,
            outcome: None,
            note: None,
            last_error: None,
            tokens: None,
            tokens_budget: r.record.budget.tokens,
            cost: None,
            attach: None,
        };
        if let Some(f) = response {
            if let Kind::Known(Message::Response(resp)) = f.kind {
                view.outcome = Some(resp.outcome);
                view.note = Some(resp.note).filter(|n| !n.is_empty());
            }
            ended.push((view, r.record.budget.cost));
        } else {
            let dir = node_root
                .as_deref()
                .map(|root| crate::node::config::NodeConfig::run_dir(root, &r.hash));
            view.last_error = dir.as_deref().and_then(crate::node::runner::last_error);
            view.tokens = dir.as_deref().and_then(crate::run::relay::spent_in);
            view.cost = dir
                .as_deref()
                .and_then(|d| cost_in(d, r.record.budget.cost));
            view.wall_left = kinds::wall_seconds(&r.record.budget.wall)
                .map(|w| (r.said.when * 86400.0 + w as f64 - now * 86400.0).round() as i64);
            view.next_slot =
                crate::node::schedule::next_of(&r.record.wake, std::time::SystemTime::now());
            running.push(view);
        }
    }
    ended.reverse();
    ended.truncate(ENDED_MAX);
    if let Some(root) = node_root.as_deref() {
        for (view, cost_budget) in &mut ended {
            let dir = crate::node::config::NodeConfig::run_dir(root, &view.record);
            view.last_error = crate::node::runner::last_error(&dir);
            view.cost = cost_in(&dir, *cost_budget);
        }
    }
    let ended = ended.into_iter().map(|(view, _)| view).collect();
    if node_root.is_some() && !running.is_empty() {
        mark_terminals(call, &mut running)?;
    }
    Ok((running, ended))
}

/// What the run in `dir` has cost, beside its `budget.cost`, as its
/// watcher last measured it, when its runner's page gives prices.
fn cost_in(dir: &std::path::Path, budget: Option<crate::protocol::money::Money>) -> Option<String> {
    super::run::cost_of(&crate::node::transcript::read_spend(dir)?, budget)
}

/// Gives each run in `running` whose runner's page counts and says
/// `"terminal": true` the command that joins its terminal.
fn mark_terminals(call: &mut Call, running: &mut [RunView]) -> Result<(), Stop> {
    call.read("the runners' pages of the running runs");
    let receipts = super::served::receipts(call)?;
    let repo = call.repo()?;
    let mut pages = std::collections::BTreeMap::new();
    for run in running.iter_mut() {
        let terminal = *pages.entry(run.runner.clone()).or_insert_with(|| {
            receipts
                .runner_page(repo, &run.runner)
                .ok()
                .flatten()
                .is_some_and(|p| p.terminal)
        });
        if terminal {
            run.attach = Some(format!("ocx attach {}", &run.record[..16]));
        }
    }
    Ok(())
}

/// The view as plain text, with the exact command to decide each question.
pub fn text(o: &Output) -> String {
    let mut t = String::new();
    let mut empty = Vec::new();
    if o.waiting.is_empty() {
        empty.push("no question waits on you");
    }
    for (heading, list) in [
        (format!("Waiting on {}:", o.for_login), &o.waiting),
        (
            "Yours to close, as an administrator:".to_string(),
            &o.to_confirm,
        ),
    ] {
        if list.is_empty() {
            continue;
        }
        t.push_str(&heading);
        t.push('\n');
        for w in list {
            question_text(&mut t, w);
        }
    }
    for (heading, list) in [("Running:", &o.running), ("Ended lately:", &o.ended)] {
        if list.is_empty() {
            empty.push(if heading == "Running:" {
                "no run is running"
            } else {
                "no run ended lately"
            });
            continue;
        }
        t.push_str(heading);
        t.push('\n');
        for r in list {
            t.push_str(&format!(
                "- {} ({} as {}, sent by {}, since {})\n",
                clean(&r.objective),
                clean(&r.runner),
                clean(&r.runs_as),
                clean(r.sent_by.as_deref().unwrap_or("no one")),
                r.since
            ));
            if let Some(w) = r.wall_left {
                t.push_str(&format!("  wall left: {w} s\n"));
            }
            if let Some(n) = &r.next_slot {
                t.push_str(&format!("  next slot of its schedule: {n}\n"));
            }
            if let Some(l) = &r.last_said {
                t.push_str(&format!("  last said: {}\n", clean(l)));
            }
            if let Some(n) = r.tokens {
                let of = r
                    .tokens_budget
                    .map(|b| format!(" of {}", crate::run::relay::thousands(b)))
                    .unwrap_or_default();
                t.push_str(&format!(
                    "  tokens: {}{of}\n",
                    crate::run::relay::thousands(n)
                ));
            }
            if let Some(c) = &r.cost {
                t.push_str(&format!("  cost: {c}\n"));
            }
            if let Some(a) = &r.attach {
                t.push_str(&format!("  its terminal: {a} (on the node's host)\n"));
            }
            if let Some(e) = &r.last_error {
                t.push_str(&format!("  last error ({}): {}\n", e.at, clean(&e.error)));
            }
            if let Some(out) = &r.outcome {
                t.push_str(&format!(
                    "  ended {}{}\n",
                    clean(out),
                    r.note
                        .as_deref()
                        .map(|n| format!(": {}", clean(n)))
                        .unwrap_or_default()
                ));
            }
        }
    }
    if !empty.is_empty() {
        t.push_str(&format!("({})\n", empty.join("; ")));
    }
    t
}

fn question_text(t: &mut String, w: &Waiting) {
    let q = &w.shown;
    t.push_str(&format!(
        "- {} (asked by {} at {}, {})\n",
        clean(&q.question),
        clean(q.from.as_deref().unwrap_or("no one")),
        q.at,
        q.link
    ));
    if let Some(s) = &q.stakes {
        t.push_str(&format!("  What it changes: {}\n", clean(s)));
    }
    if let Some(held) = &q.held {
        t.push_str("  What would be written, exactly:\n");
        for line in held.lines() {
            t.push_str(&format!("    {}\n", clean(line)));
        }
    }
    for (i, o) in q.options.iter().enumerate() {
        t.push_str(&format!(
            "  {}. {}\n",
            i + 1,
            clean(&crate::protocol::ask::option_label(i, o))
        ));
    }
    let refs = q.replies_to.iter().chain(q.references.iter());
    for r in refs {
        t.push_str(&format!(
            "  Read first: {} {}\n",
            clean(&r.title),
            r.url.as_deref().unwrap_or(&r.link)
        ));
        if let Some(e) = &r.excerpt {
            t.push_str(&format!("    > {}\n", clean(e)));
        }
    }
    let short = &q.asked[..10.min(q.asked.len())];
    if !w.decide.is_empty() {
        if q.options.is_empty() {
            t.push_str(&format!("  Decide: ocx decide {short} --note TEXT\n"));
        } else {
            for (i, _) in q.options.iter().enumerate() {
                t.push_str(&format!(
                    "  Decide: ocx decide {short} --option {}\n",
                    i + 1
                ));
            }
        }
    }
}

/// Text shown on one line, each control character as U+FFFD.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '\u{FFFD}' } else { c })
        .collect()
}
