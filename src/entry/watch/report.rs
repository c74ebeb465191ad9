//! An agent machine's report of its run to the served repository: what
//! the run's transcript says past what the server keeps, and its spend,
//! sent to the server's `run_report` as the machine's node login each time
//! the spend is measured, and once more as the run ends, so the run's page
//! on the server follows it as a page on the node follows a run of its
//! own. The transcript is masked as it is written here, before any of it
//! leaves the machine. A server that gives no answer is told next time;
//! the run never waits on it for longer than [`WITHIN`].

use crate::node::config::NodeConfig;
use crate::node::page::{Page, PageError};
use crate::node::transcript::{self, Entry};
use serde::Deserialize;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The longest one report waits for the server.
const WITHIN: Duration = Duration::from_secs(10);

/// How often the spend is reported while the transcript says nothing new:
/// a server hearing many machines' runs is asked little of.
const SPEND_EVERY: Duration = Duration::from_secs(10);

/// The most bytes of entries one report carries, well under what the
/// page takes in one request.
const BYTES_MAX: usize = 512 << 10;

/// What the server's `run_report` answers.
#[derive(Deserialize)]
struct Kept {
    kept: u64,
}

/// A run's reports to its server.
pub(super) struct Reporter {
    page: Page,
    record: String,
    dir: PathBuf,
    /// The number of the last entry the server said it keeps, and when
    /// it was last told anything.
    kept: Mutex<(u64, Option<Instant>)>,
}

impl Reporter {
    /// The reports of the run of `record` in `dir`, when the node `cfg` is
    /// an agent machine whose credentials read.
    pub(super) fn of(cfg: &NodeConfig, record: &str, dir: &Path) -> Option<Reporter> {
        let machine = cfg.machine.as_ref()?;
        let (login, password) =
            crate::node::machine::read_credentials(&machine.credentials).ok()?;
        Some(Reporter {
            page: Page::signed_in(&cfg.url, &login, &password, WITHIN),
            record: record.to_string(),
            dir: dir.to_path_buf(),
            kept: Mutex::new((0, None)),
        })
    }

    /// Tells the server the entries it does not keep yet, in reports of
    /// at most [`BYTES_MAX`] and `run_report`'s most entries each, and the
    /// spend; stops at the first report the server does not take. With
    /// nothing new said, the spend alone goes only when `ended` or
    /// [`SPEND_EVERY`] has passed since the server was last told.
    pub(super) fn send(&self, ended: bool) {
        let mut held = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let (kept, told) = &mut *held;
        let (mut first, mut anew) = (true, false);
        loop {
            let most = crate::tools::run_report::ENTRIES_MAX;
            let entries =
                within_bytes(transcript::read_after(&self.dir, *kept, most).unwrap_or_default());
            let lately = told.is_some_and(|t| t.elapsed() < SPEND_EVERY);
            if entries.is_empty() && (!first || (lately && !ended)) {
                return;
            }
            first = false;
            let input = json!({
                "record": self.record,
                "entries": entries,
                "spend": transcript::read_spend(&self.dir),
            });
            match self.page.call::<Kept>("run_report", &input) {
                Ok(k) => (*kept, *told) = (k.kept, Some(Instant::now())),
                // The server keeps fewer than it said (its transcript
                // swept or lost): everything is told again, once.
                Err(PageError::Stopped(s))
                    if !anew
                        && s.stopped
                            .field
                            .as_deref()
                            .is_some_and(|f| f.starts_with("entries[")) =>
                {
                    (*kept, anew) = (0, true);
                }
                Err(_) => return,
            }
            if entries.is_empty() {
                return;
            }
        }
    }
}

/// The first of `entries` whose lines together stay within [`BYTES_MAX`]
/// (one at least, however long: an entry is bounded where it is written).
fn within_bytes(mut entries: Vec<Entry>) -> Vec<Entry> {
    let mut bytes = 0;
    let fits = entries
        .iter()
        .position(|e| {
            bytes += serde_json::to_vec(e).map_or(0, |b| b.len());
            bytes > BYTES_MAX
        })
        .unwrap_or(entries.len())
        .max(1);
    entries.truncate(fits);
    entries
}
