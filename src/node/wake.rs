//! One wake of the node (C3): read what arrived since the last row it
//! handled, act on each in arrival order, and keep the open records. The
//! repository is the truth; the state kept under the root (the last row,
//! the open records) is a cache that may be lost: with none, every
//! artifact is read again and each record's answer looked for. A wake that
//! read a check-in, or a tag on one, then brings the git export up to date
//! (one export for all it read, so a burst is exported once).

use super::config::NodeConfig;
use super::inbox::Delivery;
use super::log::{self, Done, Event};
use super::receipts::{Asks, Receipts};
use super::spool::{
    await_reader, claim_checkin_run, deliver, prepare_run_dir, signal_watcher, watcher_alive,
};
use super::{NodeError, enforce, held, machine, run_user, runner};
use crate::fossil::kept::Kept;
use crate::fossil::repo::{Arrival, ArrivalKind, Arrivals};
use crate::fossil::{Fossil, Repository};
use crate::git::{LastRun, export::Wait};
use crate::place::Place;
use crate::protocol::ask::{Ask, Decision};
use crate::protocol::found::{self, StandingRecord};
use crate::protocol::kinds::{Kind, Message};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// The capabilities a run's user holds while its record is open (design decision 11).
pub const RUN_CAPABILITIES: &str = "gijor234";

/// OCX's letter letting a login send records and stops without admin.
pub const SEND_RUNS: char = 'R';

/// How many passed phantoms the node watches for their content, at most
/// (the newest kept).
pub const PHANTOMS_KEPT: usize = 10_000;

/// What the node keeps between wakes.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct State {
    /// The last row handled.
    pub last_rid: i64,
    /// The rows at or below `last_rid` that were phantoms when it passed
    /// them (Fossil made them for artifacts it heard of, with no content):
    /// each is acted on when its content arrives, at most [`PHANTOMS_KEPT`].
    #[serde(default)]
    pub phantoms: Vec<i64>,
    /// The open records, by full hash.
    pub open: BTreeMap<String, OpenRun>,
}

/// An open record, as the node needs it between wakes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct OpenRun {
    pub rid: i64,
    pub user: String,
    pub session: bool,
    pub checkins: Vec<String>,
    pub hears: Vec<String>,
    /// The thread's first post, or the ticket, by row.
    pub place: PlaceKey,
    /// What else wakes it: its schedules (`node::schedule`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wake: Vec<crate::protocol::kinds::Wake>,
}

/// A place by its row, to match arrivals against.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum PlaceKey {
    Thread(i64),
    Ticket(i64),
}

impl PlaceKey {
    /// The thread or ticket of `p`, whichever of its posts it names.
    pub fn of(p: &Place) -> PlaceKey {
        match p {
            Place::Thread { root_rid, .. } => PlaceKey::Thread(*root_rid),
            Place::Ticket { tkt_id, .. } => PlaceKey::Ticket(*tkt_id),
        }
    }
}

impl State {
    fn file(root: &Path) -> std::path::PathBuf {
        root.join("state.json")
    }
    /// The state under `root`, or a fresh one.
    pub fn load(root: &Path) -> State {
        std::fs::read(Self::file(root))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }
    /// The logins this node's open runs hold, as (record, login).
    pub fn held(&self) -> Vec<(String, String)> {
        self.open
            .iter()
            .map(|(record, o)| (record.clone(), o.user.clone()))
            .collect()
    }
    /// Writes it under `root` whole, its owner's alone.
    pub(crate) fn save(&self, root: &Path) -> std::io::Result<()> {
        super::write_whole(
            &Self::file(root),
            &root.join("state.json.new"),
            &serde_json::to_vec_pretty(self).unwrap_or_default(),
        )
    }
}

/// What a wake did, an event each, for the node's log.
pub type Report = Vec<Event>;

/// One wake of a node serving its repository: acts on every arrival
/// since the last, in order, with the repository and `fossil` the node
/// keeps (its configuration read anew). What it does for each arrival
/// reaches the node's log before the arrival is counted handled, so a node
/// killed mid-wake loses no line of what it did.
pub fn wake(root: &Path, kept: &Arc<Kept>) -> Result<Report, NodeError> {
    wake_asking(root, kept, Asks::Served)
}

/// [`wake`] asking who received what as `asks` says: the served
/// repository, or an agent machine's server the node's daemon keeps
/// signed in for its life.
pub fn wake_asking(root: &Path, kept: &Arc<Kept>, asks: Asks<'_>) -> Result<Report, NodeError> {
    let _lock = super::lock(&root.join("wake.lock"), true)?;
    let cfg = NodeConfig::load(root).ok_or(NodeError::NotANode)?;
    let fossil = kept.fossil_at(&cfg.fossil)?;
    let repo = kept.repository(&cfg.repository)?;
    let mut state = State::load(root);
    let receipts = Receipts::of_wake(&cfg, &repo, asks)?;
    let filled = with_senders(&receipts, repo.filled_phantoms(&state.phantoms)?)?;
    let mut arrivals = repo.arrivals_after(state.last_rid)?;
    let passed_from = state.last_rid;
    let mut report = Report::new();
    if receipts.asked().is_none() {
        report.extend(policy_kept(&fossil, &repo));
    }
    if let Some(s) = receipts.asked() {
        report.extend(machine::push_unconfirmed(root, &cfg, &fossil, &repo, s));
        // The open records' receipts, asked at once: any of them may hear
        // an arrival, and each is read again at the end.
        let open: Vec<String> = state.open.keys().cloned().collect();
        s.received(&open)?;
    }
    log::write(root, &report);
    let logged_first = report.len();
    let mut node = Node {
        root,
        cfg: &cfg,
        fossil: &fossil,
        repo: &repo,
        receipts: &receipts,
        away: false,
        no_answer: None,
        state: &mut state,
        report: &mut report,
        starting: Vec::new(),
    };
    let mut logged = logged_first;
    let export = crate::git::Export::of(&repo).ok().flatten();
    let mut changes_export = false;
    // The phantoms filled first, then the rest a batch at a time; a batch
    // that cannot be read or acted on ends the wake with what came before
    // it counted handled.
    let mut batch = filled;
    let stopped = loop {
        if batch.is_empty() {
            match next_batch(&repo, &receipts, &mut arrivals) {
                Ok(next) if next.is_empty() => break None,
                Ok(next) => batch = next,
                Err(e) => break Some(e),
            }
        }
        if let Err(e) = node.batch(&batch, &mut logged, &mut changes_export, export.is_some()) {
            break Some(e);
        }
        if node.away {
            break None;
        }
        batch.clear();
    };
    let passed = repo.phantoms_between(passed_from, node.state.last_rid)?;
    node.state.phantoms.extend(passed);
    node.state.phantoms.sort_unstable();
    node.state.phantoms.dedup();
    let over = node.state.phantoms.len().saturating_sub(PHANTOMS_KEPT);
    node.state.phantoms.drain(..over);
    if let Some(e) = stopped {
        log::write(root, &node.report[logged..]);
        state.save(root)?;
        return Err(e);
    }
    if node.away {
        log::write(root, &node.report[logged..]);
        let away = match node.no_answer.take() {
            Some(e) => NodeError::Page(e),
            None => NodeError::Away(
                node.report
                    .last()
                    .map(|e| e.why.clone())
                    .unwrap_or_default(),
            ),
        };
        state.save(root)?;
        return Err(away);
    }
    let open: Vec<String> = node.state.open.keys().cloned().collect();
    let mut standing = Vec::with_capacity(open.len());
    for hash in open {
        if let Some(r) = node.standing(&hash)? {
            standing.push((hash, r));
        }
    }
    let asked: Vec<(&Place, &str, &str)> = standing
        .iter()
        .map(|(hash, r)| (&r.place, hash.as_str(), cfg.server_code.as_str()))
        .collect();
    for ((hash, _), response) in standing.iter().zip(receipts.responses(&repo, &asked)?) {
        if response.is_some() {
            node.state.open.remove(hash);
        }
    }
    if receipts.asked().is_none() {
        let withdrawn = super::remote::withdraw(&fossil, &repo);
        node.report.extend(withdrawn);
    }
    log::write(root, &report[logged..]);
    state.save(root)?;
    if let (Some(export), true) = (export, changes_export) {
        let event = export_event(export.keep_current(&fossil, &cfg.repository, Wait::No));
        log::write(root, std::slice::from_ref(&event));
        report.push(event);
    }
    Ok(report)
}

/// What keeping the site's Content-Security-Policy to Fossil's own
/// scripts did, or why it could not.
fn policy_kept(fossil: &Fossil, repo: &Repository) -> Vec<Event> {
    match super::site::keep_policy(fossil, repo) {
        Ok(line) => line.into_iter().collect(),
        Err(e) => vec![Event::new(
            Done::Failed,
            format!("could not keep the site's Content-Security-Policy: {e}"),
        )],
    }
}

/// The most arrivals held at once: a wake with no state reads every
/// artifact again, a batch of these at a time.
const ARRIVALS_AT_ONCE: usize = 1024;

/// The next batch of `arrivals`, each with its sender as `receipts` says.
fn next_batch(
    repo: &Repository,
    receipts: &Receipts,
    arrivals: &mut Arrivals,
) -> Result<Vec<Arrival>, NodeError> {
    with_senders(receipts, arrivals.next(repo, ARRIVALS_AT_ONCE)?)
}

/// `batch`, each arrival's sender the server's receipt names on an agent
/// machine (the repository's own receipts name whoever pulled).
fn with_senders(receipts: &Receipts, mut batch: Vec<Arrival>) -> Result<Vec<Arrival>, NodeError> {
    if let Some(s) = receipts.asked() {
        let hashes: Vec<String> = batch.iter().map(|a| a.hash.clone()).collect();
        for (a, r) in batch.iter_mut().zip(s.received(&hashes)?) {
            a.sender = r.sender().map(str::to_string);
        }
    }
    Ok(batch)
}

/// The most arrivals read in one read transaction, and the longest one
/// is held: Fossil's writers wait on it no longer than on a page it serves.
const READ_AT_ONCE: usize = 256;
const READ_FOR: std::time::Duration = std::time::Duration::from_millis(10);

/// What an arrival holds, read before the node acts on it.
enum Held {
    /// A post or ticket change: its text, and what that holds as a message.
    Said { text: Vec<u8>, kind: Option<Kind> },
    /// Nothing to read: a check-in, a file, a private post.
    Nothing,
}

/// Reads what the first arrivals of `arrivals` hold, as many as fit in one
/// short read transaction (at least one). A failure or a panic while
/// reading one is that arrival's alone, kept as its reason.
fn read_some(repo: &Repository, arrivals: &[Arrival]) -> Vec<Result<Held, NodeError>> {
    let started = std::time::Instant::now();
    let mut held = Vec::new();
    for a in arrivals.iter().take(READ_AT_ONCE) {
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read_arrival(repo, a)));
        held.push(match read {
            Ok(read) => read,
            Err(panic) => Err(NodeError::Panicked(panic_text(panic.as_ref()))),
        });
        if started.elapsed() >= READ_FOR {
            break;
        }
    }
    held
}

/// Whether what an arrival holds is a record for another node (an agent
/// machine's, perhaps), whose run's login the served side keeps.
fn addressed_elsewhere(held: &Result<Held, NodeError>, own: &str) -> bool {
    match held {
        Ok(Held::Said {
            kind: Some(Kind::Known(m) | Kind::Refused(m, _)),
            ..
        }) => matches!(m, Message::Record(_)) && m.node() != own,
        _ => false,
    }
}

fn read_arrival(repo: &Repository, a: &Arrival) -> Result<Held, NodeError> {
    if a.private || !matches!(a.kind, ArrivalKind::Post { .. } | ArrivalKind::TicketChange) {
        return Ok(Held::Nothing);
    }
    let Some(said) = repo.said(a.rid)? else {
        return Ok(Held::Nothing);
    };
    let text = found::text(repo, &said)?;
    let kind = found::kind(&said, &text);
    Ok(Held::Said { text, kind })
}

/// Whether arrival `a` changes the git export: a check-in, or a tag on one.
fn adds_to_export(repo: &Repository, a: &Arrival) -> bool {
    match a.kind {
        ArrivalKind::CheckIn { .. } => true,
        ArrivalKind::Other => repo
            .adds_to_export(std::slice::from_ref(&a.hash))
            .unwrap_or(false),
        _ => false,
    }
}

/// The log's event for one keeping of the export.
fn export_event(kept: Result<Option<LastRun>, crate::git::GitError>) -> Event {
    match kept {
        Ok(Some(LastRun {
            failure: Some(f), ..
        })) => Event::new(Done::Failed, format!("the git export failed: {f}")),
        Ok(Some(run)) => {
            let added = run.added.iter().sum::<u64>();
            Event::new(
                Done::Exported,
                format!("{added} check-ins to git in {} runs", run.runs),
            )
            .count(added)
        }
        Ok(None) => Event::new(
            Done::ExportHeld,
            "another run of the git export holds it, and exports again",
        ),
        Err(e) => Event::new(Done::Failed, format!("the git export failed: {e}")),
    }
}

struct Node<'a> {
    root: &'a Path,
    cfg: &'a NodeConfig,
    fossil: &'a Fossil,
    repo: &'a Repository,
    /// Who sent what, and what they may do: the repository's own receipts,
    /// or on an agent machine the server's.
    receipts: &'a Receipts<'a>,
    /// Whether the server could not be reached for an arrival, which is
    /// then acted on at a later wake.
    away: bool,
    /// Why, when the server gave no answer.
    no_answer: Option<super::page::PageError>,
    state: &'a mut State,
    report: &'a mut Report,
    /// The runs' directories whose watchers this batch started and that
    /// may not read their inboxes yet: each waited for before its run is
    /// given anything or stopped, and all at the batch's end, so a batch
    /// opening many runs starts their watchers together rather than each
    /// after the last was ready.
    starting: Vec<std::path::PathBuf>,
}

impl Node<'_> {
    /// Waits until the watcher of the run in `dir`, if this batch started
    /// it, reads its inbox.
    fn started(&mut self, dir: &Path) {
        if let Some(at) = self.starting.iter().position(|d| d == dir) {
            await_reader(&self.starting.swap_remove(at));
        }
    }

    /// Waits until every watcher this batch started reads its inbox.
    fn all_started(&mut self) {
        for dir in std::mem::take(&mut self.starting) {
            await_reader(&dir);
        }
    }

    fn standing(&self, hash: &str) -> Result<Option<StandingRecord>, NodeError> {
        let Some(r) = self.repo.receipt(hash)? else {
            return Ok(None);
        };
        let mut standing = found::record(self.repo, r.rid, hash)?;
        if let Some(st) = standing.as_mut() {
            st.said.from = self.receipts.sender(hash)?;
        }
        Ok(standing)
    }

    /// What `login` may do, as the served repository grants it.
    fn caps(&self, login: &str) -> Result<Option<crate::fossil::caps::Capabilities>, NodeError> {
        self.receipts.capabilities(login)
    }

    /// Whether record `hash` at `place` has the response that counts.
    fn answered(&self, place: &Place, hash: &str) -> Result<bool, NodeError> {
        Ok(self
            .receipts
            .response(self.repo, place, hash, &self.cfg.server_code)?
            .is_some())
    }

    /// Answers record `r` with `outcome` as the node.
    fn answer(
        &self,
        r: &StandingRecord,
        outcome: &str,
        note: &str,
        withdraw: bool,
    ) -> Result<(), NodeError> {
        super::answer(
            self.root,
            self.cfg,
            self.fossil,
            self.repo,
            self.receipts,
            r,
            outcome,
            note,
            withdraw,
        )
        .map(|_| ())
    }

    fn may_send_requests(&self, sender: Option<&str>) -> Result<bool, NodeError> {
        Ok(match sender {
            Some(s) => self
                .caps(s)?
                .is_some_and(|c| c.is_admin() || c.has(SEND_RUNS)),
            None => false,
        })
    }

    fn beyond_sender(&self, r: &StandingRecord) -> Result<Option<String>, NodeError> {
        sender_lacks(r, |sender| self.caps(sender))
    }

    /// Whether `sender` may stop `record`: holding admin or setup, or
    /// holding `R` and having sent the record itself.
    fn may_stop(&self, sender: Option<&str>, record: &str) -> Result<bool, NodeError> {
        let Some(s) = sender else { return Ok(false) };
        let Some(caps) = self.caps(s)? else {
            return Ok(false);
        };
        if caps.is_admin() {
            return Ok(true);
        }
        Ok(caps.has(SEND_RUNS)
            && self
                .standing(record)?
                .is_some_and(|r| r.said.from.as_deref() == Some(s)))
    }

    /// Acts on each arrival of `batch` in order, reading them as many at
    /// a time as one short read transaction allows, until the server
    /// cannot be reached; `logged` is how much of the report is in the
    /// log, and `changes_export` becomes true once one changes the git
    /// export (when there is one, `exported`).
    fn batch(
        &mut self,
        batch: &[Arrival],
        logged: &mut usize,
        changes_export: &mut bool,
        exported: bool,
    ) -> Result<(), NodeError> {
        let (root, repo) = (self.root, self.repo);
        let mut rest = batch;
        while !rest.is_empty() && !self.away {
            let held = repo.reading(|| read_some(repo, rest))?;
            let (now, later) = rest.split_at(held.len());
            rest = later;
            // Runs on agent machines first, before the last row handled moves
            // past their records: a node killed meanwhile keeps them next wake.
            let remote: Vec<String> = now
                .iter()
                .zip(&held)
                .filter(|(_, h)| addressed_elsewhere(h, &self.cfg.server_code))
                .map(|(a, _)| a.hash.clone())
                .collect();
            if !remote.is_empty() && self.receipts.asked().is_none() {
                let held_here = self.state.held();
                let lines = super::remote::open_all(
                    self.fossil,
                    repo,
                    &self.cfg.server_code,
                    &remote,
                    &held_here,
                );
                log::write(root, &lines);
                self.report.extend(lines);
                *logged = self.report.len();
            }
            for (a, held) in now.iter().zip(held) {
                let open = self.state.open.len();
                if !a.private {
                    self.arrival_guarded(a, held);
                    *changes_export = *changes_export || (exported && adds_to_export(repo, a));
                }
                if self.away {
                    break;
                }
                self.state.last_rid = self.state.last_rid.max(a.rid);
                self.state.phantoms.retain(|p| *p != a.rid);
                if self.report.len() > *logged || self.state.open.len() != open {
                    log::write(root, &self.report[*logged..]);
                    *logged = self.report.len();
                    self.state.save(root)?;
                }
            }
        }
        self.all_started();
        Ok(())
    }

    /// Acts on one arrival; a failure or a panic while doing so is the
    /// arrival's alone: its line is logged with the arrival's hash, a record
    /// its sender could send is answered `refused` with the reason, and
    /// the wake goes on to the next. An arrival the server could not be
    /// asked about, or whose writes met another writer holding the
    /// repository after every try, is held back for the next wake, which
    /// that writer's change brings.
    fn arrival_guarded(&mut self, a: &Arrival, held: Result<Held, NodeError>) {
        let reason = match held {
            Err(e) => e.to_string(),
            Ok(held) => {
                let acted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.arrival(a, held)
                }));
                match acted {
                    Ok(Ok(())) => return,
                    Ok(Err(NodeError::Page(e))) => {
                        self.report.push(
                            Event::new(Done::HeldBack, format!("for a later wake: {e}"))
                                .arrival(&a.hash),
                        );
                        self.away = true;
                        self.no_answer = e.away().then_some(e);
                        return;
                    }
                    Ok(Err(NodeError::Fossil(e))) if e.is_busy() => {
                        self.report.push(
                            Event::new(
                                Done::HeldBack,
                                format!(
                                    "for a later wake: another writer holds the repository: {e}"
                                ),
                            )
                            .arrival(&a.hash),
                        );
                        self.away = true;
                        return;
                    }
                    Ok(Err(e)) => e.to_string(),
                    Err(panic) => format!("the node panicked: {}", panic_text(panic.as_ref())),
                }
            }
        };
        let reason = crate::protocol::kinds::clip(&reason);
        self.report
            .push(Event::new(Done::Failed, reason.clone()).arrival(&a.hash));
        let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.refuse_failed(a, &reason)
        }));
        match refused {
            Ok(Ok(())) => {}
            Ok(Err(e)) => self.report.push(
                Event::new(Done::Failed, format!("could not refuse it: {e}")).arrival(&a.hash),
            ),
            Err(panic) => self.report.push(
                Event::new(
                    Done::Failed,
                    format!(
                        "could not refuse it: the node panicked: {}",
                        panic_text(panic.as_ref())
                    ),
                )
                .arrival(&a.hash),
            ),
        }
    }

    /// Answers `refused` the record arrival `a` holds, when it is one for
    /// this node, its sender may send one, and it is not answered yet.
    fn refuse_failed(&mut self, a: &Arrival, reason: &str) -> Result<(), NodeError> {
        if !self.may_send_requests(a.sender.as_deref())? {
            return Ok(());
        }
        let Some(r) = self.standing(&a.hash)? else {
            return Ok(());
        };
        if r.record.node != self.cfg.server_code || self.answered(&r.place, &a.hash)? {
            return Ok(());
        }
        let opened = self.state.open.remove(&a.hash).is_some();
        let user = &r.record.user;
        let granted = self.receipts.asked().is_none()
            && self.repo.own_capabilities(user)?.as_deref() == Some(RUN_CAPABILITIES)
            && !self.state.open.values().any(|o| &o.user == user)
            && !super::remote::held(self.repo)?
                .iter()
                .any(|(_, u)| u == user);
        let note = format!("record: the node could not act on it: {reason}");
        self.answer(&r, "refused", &note, opened || granted)?;
        self.report.push(
            Event::new(Done::Refused, note)
                .arrival(&a.hash)
                .record(&r.hash),
        );
        Ok(())
    }

    fn arrival(&mut self, a: &Arrival, held: Held) -> Result<(), NodeError> {
        match (&a.kind, held) {
            (
                _,
                Held::Said {
                    text,
                    kind: Some(Kind::Other),
                },
            ) if crate::protocol::ask::read_text(&text).is_some() => {
                if let Some(Ok(Ask::Decision(d))) = crate::protocol::ask::read_text(&text) {
                    self.held_decision(a, &d)?;
                }
                self.post(a, &String::from_utf8_lossy(&text))
            }
            (
                _,
                Held::Said {
                    kind: Some(kind), ..
                },
            ) => self.message(a, kind),
            (_, Held::Said { text, .. }) => self.post(a, &String::from_utf8_lossy(&text)),
            (ArrivalKind::CheckIn { branch }, Held::Nothing) => {
                self.checkin(a, branch.as_deref().unwrap_or(""))
            }
            _ => Ok(()),
        }
    }

    /// The open runs `keep` holds to, each by its record's hash.
    fn open_where(&self, keep: impl Fn(&OpenRun) -> bool) -> Vec<(String, OpenRun)> {
        self.state
            .open
            .iter()
            .filter(|(_, o)| keep(o))
            .map(|(h, o)| (h.clone(), o.clone()))
            .collect()
    }

    /// A post or ticket change that holds no message the node acts on (a
    /// plain post, a question or a decision): given to each open session
    /// whose place it is in and whose record hears its sender.
    fn post(&mut self, a: &Arrival, text: &str) -> Result<(), NodeError> {
        self.budget_decision(a, text)?;
        if !self.state.open.values().any(|o| o.session) {
            return Ok(());
        }
        let Some(place) = found::place_of(self.repo, a.rid)? else {
            return Ok(());
        };
        let key = PlaceKey::of(&place);
        let Some(sender) = a.sender.clone() else {
            return Ok(());
        };
        let targets = self.open_where(|o| {
            o.session
                && o.place == key
                && o.hears.contains(&sender)
                && o.user != sender
                && o.rid != a.rid
        });
        for (hash, _) in targets {
            let delivery = match &place {
                Place::Thread { .. } => Delivery::Post {
                    post: a.hash.clone(),
                    from: sender.clone(),
                    text: text.to_string(),
                },
                Place::Ticket { ticket, .. } => Delivery::Change {
                    change: a.hash.clone(),
                    ticket: ticket.clone(),
                    from: sender.clone(),
                    text: text.to_string(),
                },
            };
            self.give(&hash, a, &delivery.line());
        }
        Ok(())
    }

    /// A decision on a question this node's login asked for an open run
    /// whose budget asks (`node::asked`): handed to the run's watcher when
    /// its sender, by receipt, is the login the question waits on (the
    /// record's sender); from anyone else it counts for nothing.
    fn budget_decision(&mut self, a: &Arrival, text: &str) -> Result<(), NodeError> {
        use crate::protocol::ask::{self, Ask, Standing};
        let Some(Ok(Ask::Decision(d))) = ask::read_text(text.as_bytes()) else {
            return Ok(());
        };
        let Some(receipt) = self.repo.receipt(&d.question)? else {
            return Ok(());
        };
        let Some(asked) = ask::asked_at(self.repo, receipt.rid)? else {
            return Ok(());
        };
        let Some(run) = asked.question.run.clone() else {
            return Ok(());
        };
        if !self.state.open.contains_key(&run) {
            return Ok(());
        }
        // By the receipts the node believes (an agent machine's server's),
        // never the clone's: the question is the node's own, and the
        // decision's sender one it waits on.
        let asker = self.receipts.sender(&d.question)?;
        if asker.as_deref() != Some(self.cfg.login.as_str()) {
            return Ok(());
        }
        let counts =
            ask::standing(a.sender.as_deref(), &asked.question, false) == Standing::Decided;
        let (Some(from), true) = (a.sender.clone(), counts) else {
            self.report.push(
                Event::new(
                    Done::Ignored,
                    "a decision on a run's budget from someone its question does not wait on",
                )
                .arrival(&a.hash)
                .record(&run),
            );
            return Ok(());
        };
        let decided = super::asked::Decided {
            question: d.question,
            decision: a.hash.clone(),
            from,
            note: d.note,
        };
        let dir = NodeConfig::run_dir(self.root, &run);
        let event = match super::asked::hand(&dir, &decided) {
            Ok(()) => Event::new(
                Done::Delivered,
                format!("a decision on its budget: {}", decided.note),
            ),
            Err(e) => Event::new(
                Done::Failed,
                format!("could not hand its decision over: {e}"),
            ),
        };
        self.report.push(event.arrival(&a.hash).record(&run));
        Ok(())
    }

    /// A decision on a held write of an open run (`restrict.review`): from
    /// one of the run's reviewers by receipt, in the record's place, the
    /// write is stored as the run's login (approved) or dropped, and the
    /// run told in its next line; an administrator's, closing it, drops
    /// it; anyone else's counts for nothing.
    fn held_decision(&mut self, a: &Arrival, d: &Decision) -> Result<(), NodeError> {
        let mut waiting = None;
        for record in self.state.open.keys() {
            if let Some(w) = held::waiting(self.root, record, &d.question)? {
                waiting = Some(w);
                break;
            }
        }
        let Some(write) = waiting else {
            return Ok(());
        };
        let Some(r) = self.standing(&write.record)? else {
            return Ok(());
        };
        let here = found::place_of(self.repo, a.rid)?.map(|p| PlaceKey::of(&p));
        let by = a.sender.clone().unwrap_or_default();
        let reviews = held::reviewers(&r).contains(&by);
        let closes = !reviews && !by.is_empty() && self.caps(&by)?.is_some_and(|c| c.is_admin());
        if here != Some(PlaceKey::of(&r.place)) || !(reviews || closes) {
            let why = format!(
                "a decision on the held write {} from {by:?}, who does not review it there, counts for nothing",
                &d.question[..d.question.len().min(10)]
            );
            let event = Event::new(Done::Ignored, why).arrival(&a.hash);
            self.report.push(event.record(&write.record));
            return Ok(());
        }
        let approved = reviews && held::approves(&d.note);
        let only = r.record.restrict.branch.as_deref();
        let settled = approved.then_some(only);
        let settled = match write.call {
            Some(_) => {
                let dir = NodeConfig::run_dir(self.root, &write.record);
                let password = std::fs::read_to_string(dir.join("password")).unwrap_or_default();
                held::settle_call(self.root, &self.cfg.url, password.trim(), &write, approved)?
            }
            None => held::settle(self.fossil, self.repo, self.root, &write, settled)?,
        };
        let what = match (approved, &settled.refused) {
            (true, None) => format!("wrote {} as {}", settled.written.len(), write.user),
            (true, Some(why)) => format!("approved, but refused: {why}"),
            (false, _) => "declined: nothing written".to_string(),
        };
        let event = Event::new(Done::Decided, format!("by {by}: {what}")).arrival(&a.hash);
        self.report.push(event.record(&write.record));
        let line = Delivery::Decided {
            question: write.question.clone(),
            approved,
            by,
            note: d.note.clone(),
            written: settled.written,
            refused: settled.refused,
        };
        self.give(&write.record, a, &line.line());
        Ok(())
    }

    fn checkin(&mut self, a: &Arrival, branch: &str) -> Result<(), NodeError> {
        let Some(sender) = a.sender.clone() else {
            return Ok(());
        };
        let targets =
            self.open_where(|o| o.checkins.iter().any(|b| b == branch) && o.user != sender);
        for (hash, open) in targets {
            if open.session {
                let delivery = Delivery::CheckIn {
                    checkin: a.hash.clone(),
                    branch: branch.to_string(),
                    by: sender.clone(),
                };
                self.give(&hash, a, &delivery.line());
            } else if claim_checkin_run(self.root, &hash, &a.hash)? {
                super::spawn::spawn_watcher(self.root, self.cfg, &hash, Some(&a.hash))?;
                self.report.push(
                    Event::new(Done::Ran, format!("on check-in {}", &a.hash[..10]))
                        .arrival(&a.hash)
                        .record(&hash),
                );
            }
        }
        Ok(())
    }

    fn give(&mut self, record: &str, arrival: &Arrival, line: &str) {
        let dir = NodeConfig::run_dir(self.root, record);
        self.started(&dir);
        let event = match deliver(&dir, line, arrival.received) {
            Ok(()) => Event::new(Done::Delivered, line.lines().next().unwrap_or("")),
            Err(e) => {
                super::metrics::KEPT.deliveries_failed.inc();
                Event::new(Done::Failed, format!("could not deliver it: {e}"))
            }
        };
        self.report
            .push(event.arrival(&arrival.hash).record(record));
    }

    fn message(&mut self, a: &Arrival, kind: Kind) -> Result<(), NodeError> {
        let message = match &kind {
            Kind::Known(m) | Kind::Refused(m, _) => m.clone(),
            Kind::Other => return Ok(()),
            Kind::Malformed(p) => {
                self.report.push(
                    Event::new(
                        Done::Ignored,
                        format!("a malformed message: {}: {}", p.field, p.reason),
                    )
                    .arrival(&a.hash),
                );
                return Ok(());
            }
        };
        if message.node() != self.cfg.server_code {
            return Ok(());
        }
        match message {
            Message::Record(_) => {
                super::metrics::KEPT.records_seen.inc();
                if !self.may_send_requests(a.sender.as_deref())? {
                    self.report.push(
                        Event::new(Done::Ignored, "its sender may not send a record")
                            .arrival(&a.hash)
                            .record(&a.hash),
                    );
                    return Ok(());
                }
                let Some(standing) = self.standing(&a.hash)? else {
                    return Ok(());
                };
                if self.answered(&standing.place, &a.hash)? {
                    return Ok(());
                }
                if self.still_running(&standing) {
                    return Ok(());
                }
                self.record(standing)
            }
            Message::Stop(s) => {
                if !self.may_stop(a.sender.as_deref(), &s.stops)? {
                    self.report.push(
                        Event::new(Done::Ignored, "its sender may not send this stop")
                            .arrival(&a.hash)
                            .record(&s.stops),
                    );
                    return Ok(());
                }
                self.stop(&s.stops)
            }
            Message::Response(r) => {
                if a.sender.as_deref() == Some(self.cfg.login.as_str()) {
                    self.state.open.remove(&r.answers);
                    super::metrics::ended(self.root, &r.answers, &r.outcome);
                    self.report.push(
                        Event::new(Done::Answered, r.note.clone())
                            .arrival(&a.hash)
                            .record(&r.answers)
                            .outcome(&r.outcome),
                    );
                }
                Ok(())
            }
        }
    }

    fn refuse(&mut self, r: &StandingRecord, field: &str, reason: &str) -> Result<(), NodeError> {
        let note = format!("{field}: {reason}");
        super::metrics::refused(field);
        self.answer(r, "refused", &note, false)?;
        self.report
            .push(Event::new(Done::Refused, note).record(&r.hash));
        Ok(())
    }

    /// Whether the open record `r`'s run still goes (its watcher holds its
    /// lock), as after the state was lost: kept open again, never opened
    /// a second time (its user's password stays the run's).
    fn still_running(&mut self, r: &StandingRecord) -> bool {
        let dir = NodeConfig::run_dir(self.root, &r.hash);
        if self.state.open.contains_key(&r.hash) || !watcher_alive(&dir) {
            return false;
        }
        self.state.open.insert(r.hash.clone(), open_run(r));
        self.report
            .push(Event::new(Done::FoundRunning, "its watcher holds it still").record(&r.hash));
        true
    }

    fn record(&mut self, r: StandingRecord) -> Result<(), NodeError> {
        if let Some(p) = &r.problem {
            return self.refuse(&r, &p.field, &p.reason);
        }
        let enforceable = match self.receipts.asked() {
            None => enforce::check_enforceable(self.repo, &r.record)?,
            Some(_) => {
                let offered = match r.record.runner == runner::COMMAND {
                    true => None,
                    false => Some(self.receipts.runner(self.repo, &r.record.runner)?),
                };
                enforce::enforceable(
                    &r.record,
                    offered.as_ref(),
                    &enforce::machine_restrictions_enforced(),
                    &self.cfg.ceiling,
                )
            }
        };
        if let Err(p) = enforceable {
            return self.refuse(&r, &p.field, &p.reason);
        }
        if let Some(reason) = self.beyond_sender(&r)? {
            return self.refuse(&r, "user", &reason);
        }
        let sender_is_admin = match r.said.from.as_deref() {
            Some(s) => self.caps(s)?.is_some_and(|c| c.is_admin()),
            None => false,
        };
        if let Err(p) = enforce::check_bindable(&r.record, &self.cfg.bindable, sender_is_admin) {
            return self.refuse(&r, &p.field, &p.reason);
        }
        if r.record.restrict.stage == Some(true) {
            let setup = match r.said.from.as_deref() {
                Some(s) => self.caps(s)?.is_some_and(|c| c.has('s')),
                None => false,
            };
            if !setup {
                return self.refuse(
                    &r,
                    "restrict.stage",
                    "lets the run stage a release of OCX's page, which only a sender holding setup may allow",
                );
            }
        }
        let user = r.record.user.clone();
        if let Some(server) = self.receipts.asked() {
            return self.record_on_machine(r, server);
        }
        let standing = match run_user::check(self.repo, &user, Some(&self.cfg.login), true)? {
            Ok(s) => s,
            Err(p) => return self.refuse(&r, &p.field, &p.reason),
        };
        if let Err(p) =
            run_user::check_sender_names_new(self.repo, &user, standing, sender_is_admin, &r.hash)?
        {
            return self.refuse(&r, &p.field, &p.reason);
        }
        let mut held = self.state.held();
        held.extend(super::remote::held(self.repo)?);
        if let Some(other) = run_user::held_by_another(&held, &user, &r.hash) {
            return self.refuse(
                &r,
                "user",
                &format!(
                    "{user} has another open record ({})",
                    other.chars().take(10).collect::<String>()
                ),
            );
        }
        let password = super::random_password();
        let mark = (standing == run_user::Standing::New)
            .then(|| format!("made by {}{}", self.cfg.login, run_user::made_for(&r.hash)));
        self.fossil.give_run_login(
            self.repo.path(),
            &user,
            &password,
            RUN_CAPABILITIES,
            mark.as_deref(),
        )?;
        self.start_run(&r, &user, &password)
    }

    /// Opens record `r` on an agent machine: the served side made its run's
    /// login; the machine asks the server for its password, signed in as
    /// its own login, and starts the run as the local node does.
    fn record_on_machine(
        &mut self,
        r: StandingRecord,
        server: &super::receipts::Server,
    ) -> Result<(), NodeError> {
        if self.state.open.values().any(|o| o.user == r.record.user) {
            return self.refuse(&r, "user", "has another open record on this machine");
        }
        let (user, password) = match machine::run_login(server, &r.hash) {
            Ok(login) => login,
            Err(e) if e.refused() => {
                return self.refuse(
                    &r,
                    "user",
                    "the server made no run login for it (the login may not be a run's, or the record's sender may not give it)",
                );
            }
            Err(e) => return Err(e.into()),
        };
        if user != r.record.user {
            return self.refuse(
                &r,
                "user",
                &format!(
                    "the server named the run's login {user}, not {}",
                    r.record.user
                ),
            );
        }
        self.start_run(&r, &user, &password)
    }

    /// Starts the run of record `r` as `user`, its login's password
    /// `password`: its directory made, the run kept open in the state
    /// (saved before anything starts), and a session's watcher started.
    fn start_run(
        &mut self,
        r: &StandingRecord,
        user: &str,
        password: &str,
    ) -> Result<(), NodeError> {
        let dir = NodeConfig::run_dir(self.root, &r.hash);
        prepare_run_dir(&dir, password)?;
        super::metrics::opened(&dir, &r.record.runner, r.said.from.as_deref())?;
        let session = r.record.runner != runner::COMMAND;
        if session {
            super::schedule::begin(&dir, &r.record.wake, std::time::SystemTime::now())?;
        }
        self.state.open.insert(r.hash.clone(), open_run(r));
        self.state.save(self.root)?;
        if session {
            super::spawn::spawn_watcher(self.root, self.cfg, &r.hash, None)?;
            self.starting.push(dir);
        }
        self.report.push(
            Event::new(
                Done::Opened,
                format!("sent by {}", r.said.from.as_deref().unwrap_or("nobody")),
            )
            .record(&r.hash)
            .login(user),
        );
        Ok(())
    }

    fn stop(&mut self, record: &str) -> Result<(), NodeError> {
        let Some(open) = self.state.open.get(record).cloned() else {
            return Ok(());
        };
        let dir = NodeConfig::run_dir(self.root, record);
        self.started(&dir);
        if open.session && watcher_alive(&dir) {
            signal_watcher(&dir);
            self.report.push(
                Event::new(Done::Stopping, "a stop arrived; its watcher ends the run")
                    .record(record),
            );
            return Ok(());
        }
        if let Some(r) = self.standing(record)? {
            self.answer(&r, "stopped", "stopped by a stop", true)?;
        }
        self.state.open.remove(record);
        self.report
            .push(Event::new(Done::Stopped, "stopped by a stop").record(record));
        Ok(())
    }
}

/// Whether `sender` may send records and stops: it holds admin or
/// setup, or OCX's `R` (given by `send_runs`), when the node reads it.
pub(super) fn may_send_requests(
    repo: &Repository,
    sender: Option<&str>,
) -> Result<bool, NodeError> {
    Ok(match sender {
        Some(s) => repo
            .capabilities(s)?
            .is_some_and(|c| c.is_admin() || c.has(SEND_RUNS)),
        None => false,
    })
}

/// Why record `r`'s run would hold more than its sender: a sender
/// holding `R` without admin or setup must itself hold every letter
/// the run's user is given ([`RUN_CAPABILITIES`]).
pub(super) fn beyond_sender(
    repo: &Repository,
    r: &StandingRecord,
) -> Result<Option<String>, NodeError> {
    sender_lacks(r, |sender| Ok(repo.capabilities(sender)?))
}

/// [`beyond_sender`], with the sender's capabilities as `caps_of` finds
/// them (the repository's, or the server's on an agent machine).
fn sender_lacks(
    r: &StandingRecord,
    caps_of: impl Fn(&str) -> Result<Option<crate::fossil::caps::Capabilities>, NodeError>,
) -> Result<Option<String>, NodeError> {
    let Some(sender) = r.said.from.as_deref() else {
        return Ok(Some("the record has no sender".into()));
    };
    let Some(caps) = caps_of(sender)? else {
        return Ok(Some(format!("its sender {sender} is no login here")));
    };
    if caps.is_admin() {
        return Ok(None);
    }
    let lacks: String = RUN_CAPABILITIES.chars().filter(|c| !caps.has(*c)).collect();
    Ok((!lacks.is_empty()).then(|| {
        format!(
            "its run would hold {RUN_CAPABILITIES}, and its sender {sender} (holding R, not admin) lacks {lacks}"
        )
    }))
}

/// The open record `r` as the node keeps it between wakes.
fn open_run(r: &StandingRecord) -> OpenRun {
    OpenRun {
        rid: r.said.rid,
        user: r.record.user.clone(),
        session: r.record.runner != runner::COMMAND,
        checkins: r.record.checkins.clone(),
        hears: r.record.hears.clone(),
        place: PlaceKey::of(&r.place),
        wake: r.record.wake.clone(),
    }
}

/// What a panic said, when it said it in text.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}
