//! A run whose budget asks (`budget.ask`), paused at its budget: at its
//! model budget (tokens or cost, where its relay refuses the request that
//! would pass it) or at its wall or CPU limit (where its supervisor would
//! end it). Its processes are frozen where its cgroups offer a freezer
//! (a run that cannot be frozen is not paused at its wall or CPU: it ends
//! there as any run), its deliveries held in its spool, and its record's
//! sender asked, by a question the node's login posts in the record's
//! place (an agent machine's login, pushed to its server), whether to
//! give it more. The node hands their decision over
//! (`node::asked`): the budget is raised, the run thawed and its
//! deliveries given on; or it is ended at its budget. Unanswered, the run
//! ends at its wall (a run paused at its wall: once its wall has passed
//! again), as any run's.

use super::say;
use crate::fossil::store::{self, Batch};
use crate::node::asked::{self, Decided, OPTIONS, Raise};
use crate::node::respond;
use crate::place::{self, Where};
use crate::protocol::ask::{self, Question};
use crate::protocol::found::StandingRecord;
use crate::protocol::money::Money;
use crate::run::Killer;
use crate::run::budget::Limit;
use crate::run::relay::{Given, Meter, ModelBudget};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Whether a run's deliveries go on to it or wait in its spool; cheap to clone.
#[derive(Clone, Default)]
pub(super) struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    /// Holds the deliveries not yet given.
    fn hold(&self) {
        *self.0.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
    }

    /// Lets them go on.
    fn open(&self) {
        *self.0.0.lock().unwrap_or_else(|e| e.into_inner()) = false;
        self.0.1.notify_all();
    }

    /// Waits while the deliveries are held.
    pub(super) fn pass(&self) {
        let mut held = self.0.0.lock().unwrap_or_else(|e| e.into_inner());
        while *held {
            held = self.0.1.wait(held).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Why a paused run's sender could not be asked.
#[derive(Debug, thiserror::Error)]
enum Unasked {
    /// No receipt names the record's sender.
    #[error("no receipt names the record's sender")]
    NoSender,
    /// The node's configuration is gone.
    #[error("no node configuration under the root")]
    NoNode,
    /// The question could not be written.
    #[error("the question could not be written: {0}")]
    Fossil(#[from] crate::fossil::FossilError),
}

/// The budget a run is paused at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Its tokens or its cost, where its relay refused.
    Model(ModelBudget),
    /// Its wall or its CPU time, where its supervisor would end it.
    Limit(Limit),
}

/// Wall or CPU time its record's sender gave a run paused at that limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LimitGiven {
    /// The limit raised.
    pub limit: Limit,
    /// By how many seconds.
    pub secs: u64,
    /// Who gave it, by the receipt of their decision.
    pub by: String,
}

/// The wall and CPU time given a run, in the order given; cheap to clone.
pub(super) type LimitsGiven = Arc<Mutex<Vec<LimitGiven>>>;

/// What a paused run needs to ask and to go on.
pub(super) struct Pause {
    pub root: PathBuf,
    pub dir: PathBuf,
    pub r: StandingRecord,
    pub killer: Killer,
    /// Its relay's count, when it reaches a model service.
    pub meter: Option<Meter>,
    pub gate: Gate,
    /// What was given at its wall and CPU limits.
    pub given: LimitsGiven,
    /// Whether it is paused now, so two budgets reached at once ask once.
    pub asking: AtomicBool,
}

impl Pause {
    /// Pauses the run at its model budget, asking on a thread of its own
    /// until its sender decides.
    pub(super) fn begin(self: &Arc<Self>) {
        let by = self
            .meter
            .as_ref()
            .and_then(Meter::reached_by)
            .unwrap_or(ModelBudget::Tokens);
        if self.asking.swap(true, Ordering::SeqCst) {
            say("the run reached its model budget while paused: it stays paused");
            return;
        }
        self.gate.hold();
        let frozen = self.killer.freeze(true);
        let me = self.clone();
        std::thread::spawn(move || me.paused(At::Model(by), frozen));
    }

    /// Whether the run, at its wall or CPU `limit`, pauses there rather
    /// than ending: when it is not paused already and its processes froze.
    /// Called on its supervisor's thread; asks on a thread of its own.
    pub(super) fn at_limit(self: &Arc<Self>, limit: Limit) -> bool {
        if self.asking.swap(true, Ordering::SeqCst) {
            return false;
        }
        if !self.killer.freeze(true) {
            say(&format!(
                "the run reached its {limit} budget and cannot be frozen on this host: it ends there"
            ));
            return false;
        }
        self.gate.hold();
        let me = self.clone();
        std::thread::spawn(move || me.paused(At::Limit(limit), true));
        true
    }

    fn paused(&self, at: At, frozen: bool) {
        let question = match self.ask(at, frozen) {
            Ok(q) => q,
            Err(why) => {
                say(&format!(
                    "the run's sender could not be asked: {why}; it ends"
                ));
                self.end(at);
                return;
            }
        };
        say(&format!(
            "paused at its budget ({}), its sender asked by {}",
            if frozen { "frozen" } else { "not frozen" },
            &question[..16]
        ));
        loop {
            let d = self.decided(&question);
            let went_on = match asked::read_note(&d.note) {
                Some(Raise::End) => {
                    say(&format!("{} ended it at its budget", d.from));
                    self.end(at);
                    return;
                }
                Some(Raise::Same) => self.same(at, &d.from),
                Some(Raise::More(figure)) => self.more(at, &figure, &d.note, &d.from),
                None => false,
            };
            if !went_on {
                say(&format!(
                    "a decision of {} gives nothing this reads: {:?}",
                    d.from, d.note
                ));
                continue;
            }
            self.killer.freeze(false);
            self.asking.store(false, Ordering::SeqCst);
            self.gate.open();
            return;
        }
    }

    /// Ends the run at the budget it is paused at.
    fn end(&self, at: At) {
        match at {
            At::Model(_) => self.killer.kill(),
            At::Limit(_) => self.killer.end_paused(),
        }
    }

    /// Gives the run the record's budget `at` again, from `from`.
    fn same(&self, at: At, from: &str) -> bool {
        let b = &self.r.record.budget;
        match at {
            At::Model(_) => self.raise(Given {
                tokens: b.tokens.unwrap_or(0),
                cost: b.cost.unwrap_or_default(),
                by: from.to_string(),
            }),
            At::Limit(limit) => self.resume(limit, self.record_secs(limit), from),
        }
    }

    /// Gives the run `figure` more of its budget `at` (a duration, for a
    /// wall or CPU limit, read from the decision's `note`), from `from`.
    fn more(&self, at: At, figure: &str, note: &str, from: &str) -> bool {
        let by = from.to_string();
        match at {
            At::Model(ModelBudget::Tokens) => match figure.parse::<u64>() {
                Ok(tokens) if tokens > 0 => self.raise(Given {
                    tokens,
                    cost: Money(0),
                    by,
                }),
                _ => false,
            },
            At::Model(ModelBudget::Cost) => match Money::parse(figure) {
                Ok(cost) if !cost.is_zero() => self.raise(Given {
                    tokens: 0,
                    cost,
                    by,
                }),
                _ => false,
            },
            At::Limit(limit) => match asked::read_seconds(note) {
                Some(secs) if secs > 0 => self.resume(limit, secs, from),
                _ => false,
            },
        }
    }

    fn raise(&self, given: Given) -> bool {
        match &self.meter {
            Some(m) => {
                m.raise(given);
                true
            }
            None => false,
        }
    }

    /// Goes on from `limit` with `secs` more of it, given by `from`.
    fn resume(&self, limit: Limit, secs: u64, from: &str) -> bool {
        if secs == 0 {
            return false;
        }
        say(&format!("{from} gave the run {secs} s more of its {limit}"));
        self.given
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(LimitGiven {
                limit,
                secs,
                by: from.to_string(),
            });
        self.killer.resume(Duration::from_secs(secs));
        true
    }

    /// The record's own seconds of `limit`.
    fn record_secs(&self, limit: Limit) -> u64 {
        let b = &self.r.record.budget;
        match limit {
            Limit::Cpu => b.cpu.unwrap_or(0),
            _ => crate::protocol::kinds::wall_seconds(&b.wall).unwrap_or(0),
        }
    }

    /// The budget `at` as it stands, and what was spent of it, in words.
    fn standing(&self, at: At) -> (String, String) {
        match (at, &self.meter) {
            (At::Model(by), Some(m)) => m.standing(by),
            (At::Model(_), None) => (String::from("its model budget"), String::from("all")),
            (At::Limit(limit), _) => {
                let total = self.record_secs(limit)
                    + self
                        .given
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .iter()
                        .filter(|g| g.limit == limit)
                        .map(|g| g.secs)
                        .sum::<u64>();
                match limit {
                    Limit::Cpu => (
                        format!("{total} s of CPU"),
                        self.killer
                            .used()
                            .0
                            .map(|d| format!("{:.1} s", d.as_secs_f64()))
                            .unwrap_or_else(|| format!("{total} s")),
                    ),
                    _ => (format!("{total} s of wall"), format!("{total} s")),
                }
            }
        }
    }

    /// Posts the question, as the node's login, in the record's place, for
    /// the record's sender; its hash.
    fn ask(&self, at: At, frozen: bool) -> Result<String, Unasked> {
        let for_login = self.r.said.from.clone().ok_or(Unasked::NoSender)?;
        let (budget, spent) = self.standing(at);
        let held = if frozen {
            "Its processes are frozen and its deliveries held until you decide"
        } else {
            "Its model answers nothing and its deliveries are held until you decide (this host cannot freeze its processes)"
        };
        let wall = &self.r.record.budget.wall;
        let stakes = match at {
            At::Model(_) => format!("{held}; unanswered, it ends at its wall ({wall})."),
            At::Limit(limit) => format!(
                "{held}; unanswered within its wall ({wall}) from now, it ends at its {limit} budget. A figure in the note is seconds, or minutes, hours or days where it says so (30m, 2h)."
            ),
        };
        let q = Question {
            ocx: 1,
            kind: "question".into(),
            for_login,
            question: format!(
                "This run's budget of {budget} is reached ({spent} spent). Give it more?"
            ),
            options: OPTIONS.iter().map(|o| o.to_string()).collect(),
            stakes: Some(stakes),
            references: Vec::new(),
            run: Some(self.r.hash.clone()),
            also: Vec::new(),
        };
        let (cfg, fossil, repo) = respond::open(&self.root).ok_or(Unasked::NoNode)?;
        let mut batch = Batch::default();
        let policy = repo.hash_policy()?;
        let hash = place::compose_message(
            &mut batch,
            policy,
            &cfg.login,
            &Where::At(self.r.place.clone()),
            &ask::question_text(&q, &[]),
            "question",
        );
        store::store(&fossil, &repo, &cfg.login, &batch, true)?;
        if cfg.machine.is_some() {
            // On an agent machine the question is asked on its server, where
            // the sender decides it; pushed until the server takes it.
            let mut told = false;
            while fossil.push_server(&cfg.repository).is_err() {
                if !std::mem::replace(&mut told, true) {
                    say(
                        "the question could not be pushed to the server yet; pushed again every 5 s",
                    );
                }
                std::thread::sleep(Duration::from_secs(5));
            }
        }
        let _ = crate::node::poke(&self.root);
        Ok(hash)
    }

    /// Waits for the node to hand over a decision on `question`: woken by
    /// the run's directory changing, never on a clock.
    fn decided(&self, question: &str) -> Decided {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        let notify = Inotify::init(InitFlags::IN_CLOEXEC).ok().filter(|i| {
            i.add_watch(
                &self.dir,
                AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_CLOSE_WRITE,
            )
            .is_ok()
        });
        loop {
            if let Some(d) = asked::take(&self.dir)
                && d.question == question
            {
                return d;
            }
            match &notify {
                Some(i) => {
                    let _ = i.read_events();
                }
                None => std::thread::sleep(std::time::Duration::from_millis(250)),
            }
        }
    }
}
