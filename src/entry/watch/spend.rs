//! What a run spends, measured as it goes: every two seconds its watcher
//! writes the run's wall, CPU time and memory peak (where its cgroups count
//! them), its model tokens in and out (where its relay counts them) and
//! their cost (where its runner's page gives prices), and the
//! connections its ways out refused, into the run's `spend.json`, and once
//! more when it ends, for `run` and its page to show beside the budget; on
//! an agent machine each measure is reported to the server with what the
//! transcript said since ([`super::report`]).

use super::report::Reporter;
use crate::node::transcript::{Spend, write_spend};
use crate::run::Killer;
use crate::run::egress::Refused;
use crate::run::relay::Meter;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the spend is measured while the run goes.
const EVERY: Duration = Duration::from_secs(2);

/// What is measured, where it is written, and to whom it is reported.
#[derive(Clone)]
pub(super) struct Gauges {
    /// The run's directory.
    pub dir: PathBuf,
    /// When the run started.
    pub started: Instant,
    pub killer: Killer,
    /// Its relay's count of tokens, when it has a relay.
    pub meter: Option<Meter>,
    /// The run's ways out's refusals, when it is held to `sandbox.hosts`.
    pub refused: Option<Refused>,
    /// Its reports to its server, on an agent machine.
    pub reporter: Option<Arc<Reporter>>,
}

impl Gauges {
    /// The spend now; what the cgroups no longer say (the run ended, its
    /// cgroups gone) kept from `last`.
    fn read(&self, last: &Spend) -> Spend {
        let (cpu, memory) = self.killer.used();
        let (tokens_in, tokens_out) = self.meter.as_ref().map(Meter::in_out).unzip();
        let (cost, currency) = self.meter.as_ref().and_then(Meter::cost).unzip();
        Spend {
            at: crate::fossil::artifact::now(),
            wall_seconds: self.started.elapsed().as_secs(),
            cpu_seconds: cpu.map(|d| d.as_secs_f64()).or(last.cpu_seconds),
            memory_peak_bytes: memory.or(last.memory_peak_bytes),
            tokens_in,
            tokens_out,
            cost,
            currency,
            connections_refused: self.refused.as_ref().map(Refused::count),
            model_errors: self.meter.as_ref().map(Meter::errors).unwrap_or_default(),
        }
    }
}

/// The measuring of a run under way.
pub(super) struct Measuring {
    gauges: Gauges,
    done: Arc<AtomicBool>,
    last: Arc<Mutex<Spend>>,
    thread: Option<JoinHandle<()>>,
}

/// Starts measuring the run as `gauges` say, on a thread of its own.
pub(super) fn measure(gauges: Gauges) -> Measuring {
    let done = Arc::new(AtomicBool::new(false));
    let last = Arc::new(Mutex::new(Spend::default()));
    let thread = {
        let (gauges, done, last) = (gauges.clone(), done.clone(), last.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let mut held = last.lock().unwrap_or_else(|e| e.into_inner());
                *held = gauges.read(&held);
                let _ = write_spend(&gauges.dir, &held);
                drop(held);
                if let Some(r) = &gauges.reporter {
                    r.send(false);
                }
                let until = Instant::now() + EVERY;
                while Instant::now() < until && !done.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        })
    };
    Measuring {
        gauges,
        done,
        last,
        thread: Some(thread),
    }
}

impl Measuring {
    /// Measures the run once more, as it ended, and stops.
    pub(super) fn finish(mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let _ = write_spend(&self.gauges.dir, &self.gauges.read(&last));
    }
}
