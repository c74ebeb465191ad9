//! `create`: writes a record (C2) at a place: a new thread, a reply to a
//! post, or a change of a ticket, with its `ocx-message` tag, as the
//! caller. Every field is checked first, its defaults written out.

use crate::node::Receipts;
use crate::node::{run_user, runner};
use crate::place::{Place, Where};
use crate::protocol::found;
use crate::protocol::kinds::{self, Budget, Problem, Record, Restrict, Sandbox};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Tool};
use rand::Rng;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Input of `create`: the record's own fields, and where to write it.
#[derive(Deserialize, Serialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// A pattern to start from: NAME, the wiki page run/NAME (its version an administrator sent last), or an http or https URL of a page whose first JSON block holds a record's fields. The fields given here win over the pattern's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// How it runs: `command` (a program once per check-in, for CI), or a session runner the node offers (its wiki page sandbox/NAME), such as claude or codex. Default: claude.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<String>,
    /// The task in plain words, and what counts as passing (required, here or in the pattern).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective: Option<String>,
    /// The branches whose check-ins it is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkins: Option<Vec<String>>,
    /// The logins whose posts in its place it is given. Default: every login holding admin or setup now; [] for a command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hears: Option<Vec<String>>,
    /// Whether people may reach the session through its runner's remote control. Default: true where the runner offers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<bool>,
    /// Restrictions the node must hold the run to: no_password, branch, own_thread. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restrict: Option<Restrict>,
    /// What its processes see of the host. Default: network true, no paths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Sandbox>,
    /// Limits on all its processes together; wall is required (here or in the pattern).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// Wakes the session on a schedule too: every this long, a whole number followed by s, m, h or d (at least 5s), at whole multiples of it since the Unix epoch (1d: each midnight, UTC). Added to wake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// The time zone cron is read in, by its IANA name (such as Europe/Paris). Default: UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Wakes the session on a schedule too: at the minutes this five-field cron line matches (minute, hour, day of the month, month, day of the week), such as "0 3 * * 1-5". Added to wake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// What else wakes the session, as the record's wake lists it: [{"on": "schedule", "every": "1d"}].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<Vec<kinds::Wake>>,
    /// The program and its arguments, for the command runner only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// The login the run acts as. Default: a new one, the runner's name, a hyphen and six hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-flag" = "run-user"))]
    pub user: Option<String>,
    /// The node it is for, by server-code. Default: this repository's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// A post to reply to with the record (its thread is the record's place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// A ticket to write the record on, by its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<String>,
    /// The branches `checkins` and `restrict.branch` name will be made (by the run, or later): a branch this repository does not have yet is then taken.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub new_branch: bool,
}

/// What `create` wrote.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The record's full hash (null on a dry run).
    pub record: Option<String>,
    /// The thread's first post, when the record is in a thread (null for a new thread on a dry run).
    pub thread: Option<String>,
    /// The ticket's id, when the record is on a ticket.
    pub ticket: Option<String>,
    /// The record as written, every default filled in.
    pub fields: serde_json::Value,
}

/// `sandbox` with the runner page's `hosts` written in, when it names none
/// and the page does (the record, not the page, states the boundary).
fn with_page_hosts(mut sandbox: Sandbox, page: Option<&runner::RunnerPage>) -> Sandbox {
    if sandbox.hosts.is_none()
        && sandbox.network
        && let Some(p) = page.filter(|p| !p.hosts.is_empty())
    {
        sandbox.hosts = Some(p.hosts.clone());
    }
    sandbox
}

/// The `create` tool.
pub struct Create;

/// A new thread's title is the objective's first line, cut to this many characters.
pub const TITLE_CHARS: usize = 80;

impl Tool for Create {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "create";
    const SUMMARY: &'static str = "Write a record: ask a node to run an agent or a CI command, within a sandbox and a budget.";
    const NEEDS: Needs = Needs::Any("asR");
    const WRITES: bool = true;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let refuse = |p: Problem| {
            Stop::field(p.field, p.reason)
                .next("correct the field; `ocx help create` describes each")
        };
        let receipts = super::served::pull_first(call)?;
        let (input, source) = match &input.pattern {
            None => (input, None),
            Some(given) => {
                let pattern = super::pattern::read(call, &receipts, given)?;
                (with_pattern(input, &pattern)?, Some(pattern.source))
            }
        };
        let objective = input.objective.clone().ok_or_else(|| {
            Stop::field(
                "objective",
                "is missing: give it, or a pattern that holds it",
            )
            .next("say what the run is for with --objective")
        })?;
        let budget = input.budget.clone().ok_or_else(|| {
            Stop::field(
                "budget.wall",
                "is missing: give it, or a pattern whose budget holds it",
            )
            .next("give the run's wall time, such as --wall 2h")
        })?;
        let repo = call.repo()?;
        let runner = input.runner.clone().unwrap_or_else(|| "claude".into());
        if !runner::valid_name(&runner) {
            return Err(
                Stop::field("runner", format!("{runner:?} is not a runner's name"))
                    .next("give command, or a runner such as claude"),
            );
        }
        if objective.trim().is_empty() {
            return Err(Stop::field("objective", "is empty").next("say what the run is for"));
        }
        let is_command = runner == runner::COMMAND;
        let page = match is_command {
            true => None,
            false => receipts
                .runner_page(repo, &runner)
                .map_err(super::served::stop)?,
        };
        if let (Some(server), false) = (receipts.asked(), is_command) {
            call.read(format!("{}'s receipts for the runner's page", server.url()));
        }
        let hears = match input.hears.clone() {
            Some(h) => h,
            None if is_command => Vec::new(),
            None => admins(call)?,
        };
        let repo = call.repo()?;
        check_hears(call, &hears)?;
        let remote = page_offers(&runner, page.as_ref(), &budget, input.remote)?;
        let server_code = repo.server_code()?;
        let node = input.node.clone().unwrap_or_else(|| server_code.clone());
        if !kinds::is_server_code(&node) {
            return Err(
                Stop::field("node", "is not 40 lower-case hex digits (a server-code)")
                    .next("give the node's server-code, as `ocx status` shows it"),
            );
        }
        let user = match &input.user {
            Some(u) => {
                check_user(call, &receipts, u, &node, &server_code)?;
                u.clone()
            }
            None => format!(
                "{runner}-{:06x}",
                rand::rng().random_range(0..0x100_0000u32)
            ),
        };
        let record = Record {
            ocx: crate::protocol::message::VERSION,
            kind: "record".into(),
            node: node.clone(),
            user: user.clone(),
            runner: runner.clone(),
            objective: objective.clone(),
            checkins: input.checkins.clone().unwrap_or_default(),
            hears,
            remote,
            restrict: input.restrict.clone().unwrap_or_default(),
            sandbox: with_page_hosts(input.sandbox.clone().unwrap_or_default(), page.as_ref()),
            budget,
            command: input.command.clone(),
            wake: wake_of(&input)?,
            pattern: source.map(|s| serde_json::to_value(s).unwrap_or_default()),
        };
        kinds::check_record(&record).map_err(refuse)?;
        check_branches(call, &record, input.new_branch)?;
        if call.dry_run && node == server_code && crate::node::is_node(call.repo()?)? {
            check_enforceable_here(call, &record)?;
        }
        let at = where_to(call, &input, &objective)?;
        let (fields, block) = super::writing::message_text(&record)?;
        let text = format!(
            "OCX record: asks node `{}` to run `{runner}` as `{user}`{}.\n\n{block}",
            crate::protocol::found::code_prefix(&node),
            if is_command { " once per check-in" } else { "" }
        );
        let hash = super::writing::post(call, &at, &text, Some("record"), true)?;
        let (thread, ticket) = match &at {
            Where::At(Place::Thread { root, .. }) => (Some(root.clone()), None),
            Where::At(Place::Ticket { ticket, .. }) => (None, Some(ticket.clone())),
            Where::NewThread(_) => ((!call.dry_run).then(|| hash.clone()), None),
        };
        Ok(Output {
            record: (!call.dry_run).then_some(hash),
            thread,
            ticket,
            fields,
        })
    }
}

/// What wakes the run besides check-ins and posts: the `wake` given, then
/// a schedule of `every`, then one of `cron` in `zone`.
fn wake_of(input: &Input) -> Result<Vec<kinds::Wake>, Stop> {
    if input.zone.is_some() && input.cron.is_none() {
        return Err(
            Stop::field("zone", "is the zone a cron line is read in: give cron too")
                .next("give --cron, or leave --zone out"),
        );
    }
    let mut wake = input.wake.clone().unwrap_or_default();
    if let Some(every) = &input.every {
        wake.push(kinds::Wake {
            on: "schedule".into(),
            every: Some(every.clone()),
            cron: None,
            zone: None,
        });
    }
    if let Some(cron) = &input.cron {
        wake.push(kinds::Wake {
            on: "schedule".into(),
            every: None,
            cron: Some(cron.clone()),
            zone: input.zone.clone(),
        });
    }
    Ok(wake)
}

/// Each branch the record names (`checkins`, `restrict.branch`) refused
/// when its name is no branch name, or when the repository has no such
/// branch and the caller did not say it will be made (`new_branch`): a
/// typo would leave the run never woken, or held to a branch no one uses.
fn check_branches(call: &Call, record: &Record, new_branch: bool) -> Result<(), Stop> {
    let repo = call.repo()?;
    let named = record
        .checkins
        .iter()
        .enumerate()
        .map(|(i, b)| (format!("checkins[{i}]"), b))
        .chain(
            record
                .restrict
                .branch
                .iter()
                .map(|b| ("restrict.branch".to_string(), b)),
        );
    for (field, branch) in named {
        let bad = branch.is_empty()
            || branch.starts_with('-')
            || branch.contains("..")
            || branch.chars().any(|c| c.is_whitespace() || c.is_control());
        if bad {
            return Err(Stop::field(
                field,
                format!("{branch:?} is no branch name: no spaces, control characters or \"..\", and no leading \"-\""),
            )
            .next("name the branch as `fossil branch list` shows it"));
        }
        if !new_branch && repo.branch_tip(branch)?.is_none() {
            return Err(Stop::field(
                field,
                format!("this repository has no branch {branch:?}"),
            )
            .next("name a branch `fossil branch list` shows, or give --new-branch when the run (or someone) will make it"));
        }
    }
    Ok(())
}

/// Each login the record hears refused unless the repository has it.
fn check_hears(call: &Call, hears: &[String]) -> Result<(), Stop> {
    let repo = call.repo()?;
    for (i, login) in hears.iter().enumerate() {
        if repo.own_capabilities(login)?.is_none() {
            return Err(Stop::field(
                format!("hears[{i}]"),
                format!("the repository has no login {login:?}"),
            )
            .next("name logins of this repository"));
        }
    }
    Ok(())
}

/// Whether the run offers remote control (`asked`, else whatever the
/// runner's page offers); a token or cost budget or remote control the
/// page `page` of `runner` cannot give refused.
fn page_offers(
    runner: &str,
    page: Option<&runner::RunnerPage>,
    budget: &Budget,
    asked: Option<bool>,
) -> Result<bool, Stop> {
    if budget.tokens.is_some() && page.is_none_or(|p| p.model.is_none()) {
        return Err(Stop::field(
            "budget.tokens",
            format!(
                "the runner {runner:?} names no model service (`model` on its page), so nothing would count its tokens"
            ),
        )
        .next("leave tokens out, or name a runner whose page names its model"));
    }
    if budget.cost.is_some() && page.is_none_or(|p| p.prices.is_none()) {
        return Err(Stop::field(
            "budget.cost",
            format!(
                "the runner {runner:?} gives no prices (`prices` on its page), so nothing would reckon its cost"
            ),
        )
        .next("leave cost out, or name a runner whose page gives its model's prices"));
    }
    let offers_remote = page.is_some_and(|p| p.offers_remote());
    match asked {
        Some(true) if !offers_remote => Err(Stop::field(
            "remote",
            format!("the runner {runner:?} offers no remote control"),
        )
        .next("leave remote out, or give false")),
        Some(r) => Ok(r),
        None => Ok(offers_remote),
    }
}

/// A dry run's record refused as this node would refuse it, when the
/// node it asks is this repository's own.
fn check_enforceable_here(call: &mut Call, record: &Record) -> Result<(), Stop> {
    call.read("what this node can enforce");
    crate::node::check_enforceable(call.repo()?, record)
        .map_err(Stop::internal)?
        .map_err(|p| {
            Stop::field(p.field, format!("this node would refuse it: {}", p.reason))
                .next("ask only for what `ocx status` says the node enforces")
        })
}

/// Where the record is posted: in the thread `to` names, on the ticket
/// `ticket` names, or in a new thread titled from the objective.
fn where_to(call: &mut Call, input: &Input, objective: &str) -> Result<Where, Stop> {
    Ok(match (&input.to, &input.ticket) {
        (Some(_), Some(_)) => {
            return Err(Stop::field("ticket", "give to or ticket, not both").next("leave one out"));
        }
        (Some(to), None) => match call.place("to", to)? {
            p @ Place::Thread { .. } => Where::At(p),
            Place::Ticket { .. } => {
                return Err(Stop::field("to", "names a ticket").next("give the ticket as ticket"));
            }
        },
        (None, Some(t)) => match call.place("ticket", t)? {
            p @ Place::Ticket { .. } => Where::At(p),
            Place::Thread { .. } => {
                return Err(Stop::field("ticket", "names a forum post, not a ticket")
                    .next("give the post as to"));
            }
        },
        (None, None) => Where::NewThread(title_of(objective)),
    })
}

/// `input` over `pattern`: the pattern's fields, each the call gives in
/// its place (an object's key by key), read again as `create`'s input.
fn with_pattern(input: Input, pattern: &super::pattern::Pattern) -> Result<Input, Stop> {
    let given = match serde_json::to_value(&input) {
        Ok(serde_json::Value::Object(mut m)) => {
            m.remove("pattern");
            m
        }
        _ => serde_json::Map::new(),
    };
    let merged = super::pattern::merged(&pattern.fields, &given);
    let de = serde_json::Value::Object(merged);
    let mut read: Input = serde_path_to_error::deserialize(&de).map_err(|e| {
        let (field, reason) = crate::stop::field_at_fault(&e);
        Stop::field(field, format!("with the pattern's fields: {reason}"))
            .next("correct the field; `ocx help create` describes each")
    })?;
    read.pattern = input.pattern;
    Ok(read)
}

/// A new thread's title: the objective's first line, cut to [`TITLE_CHARS`].
pub fn title_of(objective: &str) -> String {
    objective
        .trim()
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(TITLE_CHARS)
        .collect()
}

/// Every login holding admin or setup of its own, but a node's.
fn admins(call: &Call) -> Result<Vec<String>, Stop> {
    let repo = call.repo()?;
    let users = repo.users()?;
    Ok(users
        .into_iter()
        .filter(|(login, cap)| cap.contains(['a', 's']) && !login.starts_with("node-"))
        .map(|(login, _)| login)
        .collect())
}

/// Refuses a run user that is not a run's (C5): Fossil's own logins, a
/// node's, one holding admin or setup, or, on the node itself (which alone
/// keeps the marks), an existing login no node made and no one adopted;
/// and one that has an open record (in a clone's checkout, a record its
/// server received and holds no response to that counts, by `receipts`).
fn check_user(
    call: &mut Call,
    receipts: &Receipts,
    user: &str,
    node: &str,
    server_code: &str,
) -> Result<(), Stop> {
    let repo = call.repo()?;
    let on_node = node == server_code && crate::node::is_node(repo)?;
    let node_login = found::node_login(node);
    if let Err(p) = run_user::check(repo, user, Some(&node_login), on_node)? {
        return Err(Stop::field(p.field, p.reason)
            .next("leave user out to make a new login, or name a run's login"));
    }
    call.read("the open records");
    let repo = call.cx.repo()?;
    let records = found::tagged_records(repo)?;
    for mut r in records.into_iter().filter(|r| r.record.user == user) {
        let got = receipts
            .record_as_received(repo, &mut r)
            .map_err(super::served::stop)?;
        if let Some(server) = receipts.asked() {
            call.read(format!(
                "{}'s receipts for the record and its responses",
                server.url()
            ));
        }
        let open = got.received && got.response.is_none();
        if open {
            return Err(Stop::field(
                "user",
                format!("{user} already has an open record ({})", &r.hash[..10]),
            )
            .next("stop that record first, or name another user"));
        }
    }
    Ok(())
}
