//! A run whose budget asks (`budget.ask`), paused at its model budget:
//! its processes frozen where its cgroups offer a freezer, its deliveries
//! held in its spool, and its record's sender asked, by a question the
//! node's login posts in the record's place, whether to give it more. The
//! node hands their decision over (`node::asked`): the relay's budget is
//! raised, the run thawed and its deliveries given on; or it is ended at
//! its budget. Unanswered, the run's wall ends it as any run's.

use super::say;
use crate::fossil::store::{self, Batch};
use crate::node::asked::{self, Decided, OPTIONS, Raise};
use crate::node::respond;
use crate::place::{self, Where};
use crate::protocol::ask::{self, Question};
use crate::protocol::found::StandingRecord;
use crate::protocol::money::Money;
use crate::run::Killer;
use crate::run::relay::{Given, Meter, ModelBudget};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

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

/// What a paused run needs to ask and to go on.
pub(super) struct Pause {
    pub root: PathBuf,
    pub dir: PathBuf,
    pub r: StandingRecord,
    pub killer: Killer,
    pub meter: Meter,
    pub gate: Gate,
}

impl Pause {
    /// Pauses the run, on a thread of its own, until its sender decides.
    pub(super) fn begin(self: &Arc<Self>) {
        let me = self.clone();
        std::thread::spawn(move || me.paused());
    }

    fn paused(&self) {
        let by = self.meter.reached_by().unwrap_or(ModelBudget::Tokens);
        self.gate.hold();
        let frozen = self.killer.freeze(true);
        let question = match self.ask(by, frozen) {
            Ok(q) => q,
            Err(why) => {
                say(&format!(
                    "the run's sender could not be asked: {why}; it ends"
                ));
                self.killer.kill();
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
            let given = match asked::read_note(&d.note) {
                Some(Raise::End) => {
                    say(&format!("{} ended it at its budget", d.from));
                    self.killer.kill();
                    return;
                }
                Some(Raise::Same) => self.same(&d.from),
                Some(Raise::More(figure)) => self.more(by, &figure, &d.from),
                None => None,
            };
            let Some(given) = given else {
                say(&format!(
                    "a decision of {} gives nothing this reads: {:?}",
                    d.from, d.note
                ));
                continue;
            };
            self.meter.raise(given);
            self.killer.freeze(false);
            self.gate.open();
            return;
        }
    }

    /// The record's budget again, given by `from`.
    fn same(&self, from: &str) -> Option<Given> {
        let b = &self.r.record.budget;
        Some(Given {
            tokens: b.tokens.unwrap_or(0),
            cost: b.cost.unwrap_or_default(),
            by: from.to_string(),
        })
    }

    /// `figure` more of the budget `by`, given by `from`.
    fn more(&self, by: ModelBudget, figure: &str, from: &str) -> Option<Given> {
        let (tokens, cost) = match by {
            ModelBudget::Tokens => (figure.parse::<u64>().ok()?, Money(0)),
            ModelBudget::Cost => (0, Money::parse(figure).ok()?),
        };
        (tokens > 0 || !cost.is_zero()).then(|| Given {
            tokens,
            cost,
            by: from.to_string(),
        })
    }

    /// Posts the question, as the node's login, in the record's place, for
    /// the record's sender; its hash.
    fn ask(&self, by: ModelBudget, frozen: bool) -> Result<String, Unasked> {
        let for_login = self.r.said.from.clone().ok_or(Unasked::NoSender)?;
        let (budget, spent) = self.meter.standing(by);
        let held = if frozen {
            "Its processes are frozen and its deliveries held until you decide"
        } else {
            "Its model answers nothing and its deliveries are held until you decide (this host cannot freeze its processes)"
        };
        let q = Question {
            ocx: 1,
            kind: "question".into(),
            for_login,
            question: format!(
                "This run's budget of {budget} is reached ({spent} spent). Give it more?"
            ),
            options: OPTIONS.iter().map(|o| o.to_string()).collect(),
            stakes: Some(format!(
                "{held}; unanswered, it ends at its wall ({}).",
                self.r.record.budget.wall
            )),
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
