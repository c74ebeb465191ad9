//! What `post`, `questions`, `decide` and `console` share about questions:
//! a question or decision composed and checked before `post` writes it,
//! and a question shaped for a reader, its references described as far as
//! the reader may read them.

use crate::context::Caller;
use crate::fossil::caps::Capabilities;
use crate::protocol::ask::{self, Ask, Asked, Decision, Question, Standing};
use crate::protocol::reference::{self, Described, Refused};
use crate::stop::Stop;
use crate::tool::Call;
use schemars::JsonSchema;
use serde::Serialize;

/// The most options a question offers.
pub const OPTIONS_MAX: usize = 10;

/// The text and kind of the message `post` is asked to write, checked, or
/// `None` for a plain post.
pub fn compose_text(
    call: &mut Call,
    input: &super::post::Input,
    caller: &Caller,
) -> Result<Option<(String, &'static str)>, Stop> {
    if let Some(for_login) = &input.for_login {
        return question(call, input, for_login, caller).map(Some);
    }
    if input.decision {
        let to = input.to.as_deref().unwrap_or_default();
        return decision(call, to, &input.text, caller).map(Some);
    }
    Ok(None)
}

fn question(
    call: &mut Call,
    input: &super::post::Input,
    for_login: &str,
    caller: &Caller,
) -> Result<(String, &'static str), Stop> {
    let repo = call.repo()?;
    let for_caps = match for_login {
        "nobody" | "anonymous" | "" => None,
        l => repo.capabilities(l)?,
    };
    let Some(for_caps) = for_caps else {
        return Err(Stop::field(
            "for",
            format!("{for_login:?} is no login of this repository that can decide"),
        )
        .next("name the login of the person to decide"));
    };
    let place_needs = match &input.to {
        Some(to) => match call.place("to", to)? {
            crate::place::Place::Ticket { .. } => 'r',
            crate::place::Place::Thread { .. } => '2',
        },
        None => '2',
    };
    if !for_caps.has(place_needs) {
        return Err(Stop::field(
            "for",
            format!("{for_login} may not read where the question would be (it needs capability {place_needs})"),
        )
        .next("ask a login that may read it, or have an administrator grant it"));
    }
    let repo = call.repo()?;
    let mut run = None;
    if let Some(scope) = call.cx.run() {
        let record = match repo.resolve(&scope.record)? {
            crate::fossil::repo::Lookup::One(rid, hash) => {
                crate::protocol::found::record(repo, rid, &hash)?
            }
            _ => None,
        };
        let hears = record.map(|r| r.record.hears).unwrap_or_default();
        if !hears.iter().any(|h| h == for_login) {
            return Err(Stop::field(
                "for",
                format!(
                    "this run's record does not hear {for_login}, so their decision would never reach it"
                ),
            )
            .next("ask a login the record hears"));
        }
        run = Some(scope.record.clone());
    }
    if input.options.len() > OPTIONS_MAX {
        return Err(
            Stop::field("options", format!("more than {OPTIONS_MAX} options"))
                .next("offer fewer options"),
        );
    }
    for (i, o) in input.options.iter().enumerate() {
        super::writing::one_line(&format!("options[{i}]"), o)?;
    }
    if let Some(s) = &input.stakes {
        super::writing::one_line("stakes", s)?;
    }
    let mut links = Vec::new();
    let mut linked = Vec::new();
    for (i, given) in input.references.iter().enumerate() {
        let field = format!("references[{i}]");
        let target = reference::resolve(repo, given)
            .and_then(|t| {
                reference::check(
                    repo,
                    &t,
                    &[
                        (caller.login.as_str(), &caller.capabilities),
                        (for_login, &for_caps),
                    ],
                )
                .map(|()| t)
            })
            .map_err(|r| refused(&field, given, r))?;
        let link = target.link();
        let described = reference::describe(repo, &link, &caller.capabilities)?;
        linked.push(ask::Linked {
            title: described.title,
            link: link.clone(),
        });
        links.push(link);
    }
    call.read(format!(
        "{} reference(s), and the login for names",
        links.len()
    ));
    let q = Question {
        ocx: 1,
        kind: "question".into(),
        for_login: for_login.to_string(),
        question: input.text.clone(),
        options: input.options.clone(),
        stakes: input.stakes.clone(),
        references: links,
        run,
        also: Vec::new(),
    };
    let text = ask::question_text(&q, &linked);
    if !ask::reads_back(&text, &Ask::Question(q)) {
        return Err(Stop::field(
            "text",
            "does not read back as the question it was made from",
        )
        .next("reword the question"));
    }
    Ok((text, "question"))
}

fn refused(field: &str, given: &str, r: Refused) -> Stop {
    let shown: String = given.chars().take(80).collect();
    match r {
        Refused::Nothing(why) => Stop::field(field, format!("{shown:?} {why}")),
        Refused::Several => Stop::field(field, format!("{shown:?} names several things")),
        Refused::Elsewhere => Stop::field(field, format!("{shown:?} is a link of another server")),
        Refused::Private => Stop::field(field, format!("{shown:?} names what Fossil holds private")),
        Refused::Failed(e) => Stop::from(e),
    }
    .next("give a hash, a ticket's or tech-note's id, or a link of this server that both of you may read")
}

fn decision(
    call: &mut Call,
    to: &str,
    note: &str,
    caller: &Caller,
) -> Result<(String, &'static str), Stop> {
    let asked = the_question(call, "to", to)?;
    let closed = match standing_of(&asked, caller) {
        Standing::Decided => false,
        Standing::Closed => true,
        Standing::Nothing => return Err(not_theirs("to", "the question", &asked, caller)),
    };
    if let Some((s, _, _)) = asked.settled() {
        return Err(Stop::field(
            "to",
            format!(
                "the question is settled already, by {}",
                s.from.as_deref().unwrap_or("no one")
            ),
        )
        .next("read its decision with `ocx questions`"));
    }
    let d = Decision {
        ocx: 1,
        kind: "decision".into(),
        question: asked.said.hash.clone(),
        note: note.to_string(),
    };
    let text = ask::decision_text(&d, &caller.login, closed);
    if !ask::reads_back(&text, &Ask::Decision(d)) {
        return Err(Stop::field(
            "text",
            "does not read back as the decision it was made from",
        )
        .next("reword the note"));
    }
    Ok((text, "decision"))
}

/// `caller` refused deciding the question named in `field` (said as
/// `subject`), which waits on another login and which they may not close.
pub fn not_theirs(field: &str, subject: &str, asked: &Asked, caller: &Caller) -> Stop {
    Stop::field(
        field,
        format!(
            "{subject} waits on {}, and {} may not close it (admin or setup may)",
            asked.question.for_login, caller.login
        ),
    )
    .next("only the login it names, or an administrator, decides it")
}

/// How a decision by `caller` would count on `asked`.
pub fn standing_of(asked: &Asked, caller: &Caller) -> Standing {
    ask::standing(
        Some(&caller.login),
        &asked.question,
        caller.capabilities.is_admin(),
    )
}

/// The question a hash or prefix in `field` names; in a clone's checkout,
/// as its server received it and its decisions ([`as_served`]).
pub fn the_question(call: &mut Call, field: &str, given: &str) -> Result<Asked, Stop> {
    let (rid, _) = call.artifact(field, given)?;
    call.read(format!("the question named by {field}, and its decisions"));
    let asked = ask::asked_at(call.repo()?, rid)?.ok_or_else(|| {
        Stop::field(field, format!("{given} holds no question"))
            .next("give the hash of a question; `ocx questions` lists them")
    })?;
    let mut one = [asked];
    as_served(call, &mut one)?;
    let [asked] = one;
    Ok(asked)
}

/// In a clone's checkout, `all` as the clone's server received them: each
/// question's and decision's sender is the one the server's receipt names
/// (no one where it has not received it), each decision stands by its
/// sender's capabilities there, in the server's received order. The
/// clone's own receipts name whoever pulled, and are never read for it.
fn as_served(call: &mut Call, all: &mut [Asked]) -> Result<(), Stop> {
    let receipts = super::served::receipts(call)?;
    let Some(server) = receipts.asked().map(|s| s.url().to_string()) else {
        return Ok(());
    };
    let hashes: Vec<String> = all
        .iter()
        .flat_map(|a| {
            std::iter::once(a.said.hash.clone()).chain(a.decisions.iter().map(|d| d.0.hash.clone()))
        })
        .collect();
    let got = receipts.by_hash(&hashes).map_err(super::served::stop)?;
    call.read(format!(
        "{server}'s receipts for {} questions and decisions",
        got.len()
    ));
    let sender = |hash: &str| got.get(hash).and_then(|r| r.sender()).map(str::to_string);
    for a in all {
        a.said.from = sender(&a.said.hash);
        for (s, _, standing) in &mut a.decisions {
            s.from = sender(&s.hash);
            let admin = got.get(&s.hash).is_some_and(|r| r.from_admin());
            *standing = ask::standing(s.from.as_deref(), &a.question, admin);
        }
        a.decisions.sort_by_key(|(s, _, _)| {
            got.get(&s.hash)
                .and_then(|r| r.order())
                .map_or((1, 0, 0), |(c, r)| (0, c, r))
        });
    }
    Ok(())
}

/// A question as a reader is shown it.
#[derive(Serialize, JsonSchema, Clone)]
pub struct Shown {
    /// The question's post or ticket change, by full hash.
    pub asked: String,
    /// Its thread's first post, or its ticket's id.
    #[serde(rename = "where")]
    pub where_: String,
    /// The link from the repository's root to it.
    pub link: String,
    /// Who asked, by receipt.
    pub from: Option<String>,
    /// When its writer says it was asked (UTC).
    pub at: String,
    /// The login it waits on.
    #[serde(rename = "for")]
    pub for_login: String,
    pub question: String,
    /// The choices, the first recommended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stakes: Option<String>,
    /// The record of the run that asked it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// The post it replies to, described.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replies_to: Option<Described>,
    /// What to read first, described as far as you may read it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<Described>,
    /// Every decision naming it, each with how it counts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<ShownDecision>,
    /// Who may close it in its login's stead (a decision of theirs counts
    /// as closed): the logins holding admin or setup on the served
    /// repository, as its server says in a clone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub confirmers: Vec<String>,
    /// open, decided or closed.
    pub state: String,
    /// For a run's held write (a question its node asked): what would be written, as Markdown: each artifact whole, or each check-in's diff.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
}

/// A decision as a reader is shown it.
#[derive(Serialize, JsonSchema, Clone)]
pub struct ShownDecision {
    /// Its sender, by receipt.
    pub from: Option<String>,
    pub at: String,
    pub note: String,
    /// decided (from the question's login), closed (by an administrator), or nothing.
    pub counts: Standing,
}

/// `asked` shown to a reader holding `caps`.
pub fn shown(
    repo: &crate::fossil::Repository,
    asked: &Asked,
    caps: &Capabilities,
) -> Result<Shown, Stop> {
    let describe = |link: &str| reference::describe(repo, link, caps).map_err(Stop::internal);
    let (where_, link) = match &asked.place {
        crate::place::Place::Thread { root, .. } => (
            root.clone(),
            format!("/forumpost/{}", &asked.said.hash[..10]),
        ),
        crate::place::Place::Ticket { ticket, .. } => (
            ticket.clone(),
            format!("/tktview/{}", &ticket[..10.min(ticket.len())]),
        ),
    };
    let replies_to = match repo.replies_to(asked.said.rid)? {
        Some(parent) => Some(describe(&format!("/forumpost/{parent}"))?),
        None => match &asked.place {
            crate::place::Place::Ticket { ticket, .. } => {
                Some(describe(&format!("/tktview/{ticket}"))?)
            }
            _ => None,
        },
    };
    let mut references = Vec::new();
    for r in &asked.question.references {
        references.push(describe(r)?);
    }
    let state = match asked.settled() {
        Some((_, _, Standing::Decided)) => "decided",
        Some(_) => "closed",
        None => "open",
    };
    Ok(Shown {
        asked: asked.said.hash.clone(),
        where_,
        link,
        from: asked.said.from.clone(),
        at: crate::fossil::repo::julian_to_rfc3339(asked.said.when),
        for_login: asked.question.for_login.clone(),
        question: asked.question.question.clone(),
        options: asked.question.options.clone(),
        stakes: asked.question.stakes.clone(),
        run: asked.question.run.clone(),
        replies_to,
        references,
        decisions: asked
            .decisions
            .iter()
            .map(|(s, d, st)| ShownDecision {
                from: s.from.clone(),
                at: crate::fossil::repo::julian_to_rfc3339(s.when),
                note: d.note.clone(),
                counts: *st,
            })
            .collect(),
        state: state.into(),
        confirmers: Vec::new(),
        held: held_shown(repo, asked)?,
    })
}

/// What a held write's question shows would be written: only for a
/// question of a run asked (by receipt) by the login of the node its
/// record names, which asks nothing else.
pub fn held_shown(repo: &crate::fossil::Repository, asked: &Asked) -> Result<Option<String>, Stop> {
    let (Some(from), Some(run)) = (asked.said.from.as_deref(), &asked.question.run) else {
        return Ok(None);
    };
    let record = match repo.resolve(run)? {
        crate::fossil::repo::Lookup::One(rid, hash) => {
            crate::protocol::found::record(repo, rid, &hash)?
        }
        _ => None,
    };
    if record.is_none_or(|r| crate::protocol::found::node_login(&r.record.node) != from) {
        return Ok(None);
    }
    let text = crate::protocol::found::text(repo, &asked.said)?;
    Ok(crate::node::held::shown_in(&String::from_utf8_lossy(&text)).map(str::to_string))
}

/// The logins holding admin or setup of their own on the served
/// repository `repo`: who may close a question in its login's stead. No
/// node's login and none of Fossil's own.
pub fn confirmers(repo: &crate::fossil::Repository) -> Result<Vec<String>, Stop> {
    let mut out = Vec::new();
    for (login, caps) in repo.users()? {
        if !caps.contains(['a', 's'])
            || crate::fossil::caps::SPECIAL_LOGINS.contains(&login.as_str())
            || login.starts_with("node-")
            || repo.is_node_login(&login)?
        {
            continue;
        }
        out.push(login);
    }
    Ok(out)
}

/// Who may close each question in a clone's checkout, as its server's
/// `questions` answers for `user`: each question's confirmers by its
/// hash; none known when the server does not say.
fn confirmers_of_server(
    call: &mut Call,
    user: &str,
) -> Result<std::collections::HashMap<String, Vec<String>>, Stop> {
    let receipts = super::served::receipts(call)?;
    let Some(server) = receipts.asked() else {
        return Ok(Default::default());
    };
    let url = server.url().to_string();
    let asked: serde_json::Value = match super::served::ask_as_clone(
        call,
        server,
        "questions",
        &serde_json::json!({"for": user}),
    ) {
        Ok(a) => a,
        Err(stop) => {
            call.read(format!(
                "not who may close each question: {url} did not say ({})",
                stop.reason
            ));
            return Ok(Default::default());
        }
    };
    call.read(format!(
        "{url}'s questions for {user}, with who may close each"
    ));
    let mut out = std::collections::HashMap::new();
    for list in ["waiting", "to_confirm"] {
        for q in asked[list].as_array().into_iter().flatten() {
            if let Some(hash) = q["asked"].as_str() {
                let who: Vec<String> = q["confirmers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c.as_str().map(String::from))
                    .collect();
                out.insert(hash.to_string(), who);
            }
        }
    }
    Ok(out)
}

/// `shown` with no sender named for what it refers to, in a clone's
/// checkout (`in_clone`), where only the server knows who sent it.
fn unsent(mut shown: Shown, in_clone: bool) -> Shown {
    if in_clone {
        for d in shown
            .replies_to
            .iter_mut()
            .chain(shown.references.iter_mut())
        {
            d.by = None;
        }
    }
    shown
}

/// Whether a reader holding `caps` may read the question's place: 2 a thread, r a ticket.
pub fn may_read(asked: &Asked, caps: &Capabilities) -> bool {
    match asked.place {
        crate::place::Place::Thread { .. } => caps.has('2'),
        crate::place::Place::Ticket { .. } => caps.has('r'),
    }
}

/// Whether `a` is a question a record's node asked to steer its run (a
/// held write, a budget reached) once that run has ended: deciding it
/// would steer nothing, so it waits on no one.
fn moot(call: &Call, receipts: &crate::node::Receipts, a: &Asked) -> Result<bool, Stop> {
    let Some(run) = &a.question.run else {
        return Ok(false);
    };
    let repo = call.repo()?;
    let Some(receipt) = repo.receipt(run)? else {
        return Ok(false);
    };
    let Some(r) = crate::protocol::found::record(repo, receipt.rid, run)? else {
        return Ok(false);
    };
    let node = crate::protocol::found::node_login(&r.record.node);
    if a.said.from.as_deref() != Some(node.as_str()) {
        return Ok(false);
    }
    let response = receipts
        .response(repo, &r.place, &r.hash, &r.record.node)
        .map_err(super::served::stop)?;
    Ok(response.is_some())
}

/// What waits on `user`: the open questions for them, those `caller` may
/// close (an administrator: every other open one), and how many are open.
pub fn waiting(call: &mut Call, user: &str) -> Result<(Vec<Shown>, Vec<Shown>, usize), Stop> {
    call.read("every question and its decisions");
    let caller = call.caller()?.clone();
    let mut all = ask::asked(call.repo()?)?;
    as_served(call, &mut all)?;
    let receipts = super::served::receipts(call)?;
    let in_clone = receipts.asked().is_some();
    let (served_confirmers, of_server) = match in_clone {
        false => (confirmers(call.repo()?)?, Default::default()),
        true => (Vec::new(), confirmers_of_server(call, user)?),
    };
    let repo = call.repo()?;
    let (mut waiting, mut to_confirm, mut open) = (Vec::new(), Vec::new(), 0);
    for a in all.iter().filter(|a| may_read(a, &caller.capabilities)) {
        if a.settled().is_some() || moot(call, &receipts, a)? {
            continue;
        }
        open += 1;
        let show = |a: &Asked| {
            shown(repo, a, &caller.capabilities).map(|mut s| {
                s.confirmers = match in_clone {
                    false => served_confirmers.clone(),
                    true => of_server.get(&s.asked).cloned().unwrap_or_default(),
                };
                unsent(s, in_clone)
            })
        };
        if a.question.decides(user) {
            waiting.push(show(a)?);
        } else if caller.capabilities.is_admin() {
            to_confirm.push(show(a)?);
        }
    }
    Ok((waiting, to_confirm, open))
}
