//! A record's schedules (its `wake`, OCX's key of version 1): the node
//! gives an open session one line a slot, `{"schedule": TIME}`, through
//! the run's spool like every other delivery and under the same lock, so
//! the lines keep their order. A schedule's slots are reckoned by
//! `protocol::schedule` (whole multiples of `every` since the Unix epoch,
//! or a cron line's minutes in its zone). The last slot given is kept in
//! the run's own directory ([`SLOTS`]), so a node started again gives
//! neither a slot twice nor every slot it was down over: the latest, once,
//! saying how many it stands for (`missed`). The node's daemon sleeps until
//! the nearest slot ([`next_slot`]), never on a tick.

use super::config::NodeConfig;
use super::inbox::Delivery;
use super::log::{self, Done, Event};
use super::spool::{deliver, watcher_alive};
use super::wake::State;
use super::{NodeError, write_whole};
use crate::protocol::kinds::Wake;
use crate::protocol::schedule::{self as reckon, Schedule};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The file in a run's directory holding the last slot given of each of
/// its schedules.
pub const SLOTS: &str = "schedule.json";

/// The last slot given of each schedule of a run, in the order its `wake`
/// lists them, as seconds since 1970-01-01T00:00:00Z.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slots {
    pub last: Vec<i64>,
}

impl Slots {
    /// The run's slots in `dir`, none when it keeps none.
    pub fn load(dir: &Path) -> Option<Slots> {
        let bytes = std::fs::read(dir.join(SLOTS)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes them whole in `dir`.
    fn save(&self, dir: &Path) -> std::io::Result<()> {
        write_whole(
            &dir.join(SLOTS),
            &dir.join(format!(".{SLOTS}")),
            &serde_json::to_vec(self).unwrap_or_default(),
        )
    }
}

/// Each schedule `wake` lists, read, in its order (one that does not
/// read, which `check_record` refuses, as none).
pub fn schedules(wake: &[Wake]) -> Vec<Option<Schedule>> {
    wake.iter()
        .enumerate()
        .map(|(i, w)| reckon::read(i, w).ok())
        .collect()
}

/// Seconds since 1970-01-01T00:00:00Z at `t` (before it: 0).
pub fn unix(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A slot's time as a line gives it: RFC 3339, UTC, to the second.
pub fn time_of(slot: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(slot)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// Marks the run in `dir` as having been given every slot of its
/// schedules up to `now` (it opens now), so its first line is its first
/// slot after.
pub fn begin(dir: &Path, wake: &[Wake], now: SystemTime) -> std::io::Result<()> {
    let schedules = schedules(wake);
    if schedules.iter().all(Option::is_none) {
        return Ok(());
    }
    let now = unix(now);
    Slots {
        last: schedules
            .iter()
            .map(|s| s.as_ref().and_then(|s| s.latest_at(now)).unwrap_or(now))
            .collect(),
    }
    .save(dir)
}

/// The next slot after `now` of any schedule of the open sessions in
/// `state`, as a time.
pub fn next_slot(state: &State, now: SystemTime) -> Option<SystemTime> {
    let now = unix(now);
    state
        .open
        .values()
        .filter(|o| o.session)
        .flat_map(|o| schedules(&o.wake))
        .flatten()
        .filter_map(|s| s.next_after(now))
        .min()
        .and_then(|s| u64::try_from(s).ok())
        .map(|s| UNIX_EPOCH + Duration::from_secs(s))
}

/// The next slot after `now` of the schedules `wake` lists, as a line
/// gives it; none when it lists none. What `console` and `run` show of a
/// running run.
pub fn next_of(wake: &[Wake], now: SystemTime) -> Option<String> {
    let now = unix(now);
    schedules(wake)
        .into_iter()
        .flatten()
        .filter_map(|s| s.next_after(now))
        .min()
        .map(time_of)
}

/// Gives each open session under `root` the slots of its schedules due
/// now, one line a schedule however many slots passed, `missed` saying so
/// when more than one did or its slot came before the node started
/// (`started`); under the wake's lock, so the lines keep their order with
/// every other delivery. Answers when the next slot falls.
pub fn deliver_due(root: &Path, started: SystemTime) -> Result<Option<SystemTime>, NodeError> {
    let _lock = super::lock(&root.join("wake.lock"), true)?;
    let state = State::load(root);
    let now = SystemTime::now();
    let mut events = Vec::new();
    for (hash, open) in state.open.iter().filter(|(_, o)| o.session) {
        let schedules = schedules(&open.wake);
        if schedules.iter().all(Option::is_none) {
            continue;
        }
        let dir = NodeConfig::run_dir(root, hash);
        if !watcher_alive(&dir) {
            continue;
        }
        let Some(mut slots) = Slots::load(&dir).filter(|s| s.last.len() == schedules.len()) else {
            begin(&dir, &open.wake, now)?;
            continue;
        };
        for (i, schedule) in schedules.iter().enumerate() {
            let due = schedule
                .as_ref()
                .and_then(|s| s.due(slots.last[i], unix(now)));
            let Some((slot, count)) = due else {
                continue;
            };
            let late = count > 1 || slot < unix(started);
            let line = Delivery::Schedule {
                at: time_of(slot),
                missed: late.then_some(count),
            }
            .line();
            let event = match deliver(&dir, &line, None) {
                Ok(()) => {
                    slots.last[i] = slot;
                    slots.save(&dir)?;
                    Event::new(Done::Delivered, line)
                }
                Err(e) => Event::new(Done::Failed, format!("could not deliver {line}: {e}")),
            };
            events.push(event.record(hash));
        }
    }
    log::write(root, &events);
    Ok(next_slot(&state, now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_reads_as_rfc_3339_and_the_next_is_the_nearest_schedules() {
        assert_eq!(time_of(86400), "1970-01-02T00:00:00Z");
        let wake = |e: &str| Wake {
            on: "schedule".into(),
            every: Some(e.into()),
            cron: None,
            zone: None,
        };
        let at = UNIX_EPOCH + Duration::from_secs(86400 + 7);
        assert_eq!(
            next_of(&[wake("1d"), wake("1h")], at).as_deref(),
            Some("1970-01-02T01:00:00Z")
        );
        assert_eq!(next_of(&[], at), None);
    }

    #[test]
    fn a_run_begins_given_the_slots_before_it_opened() {
        let dir = tempfile::tempdir().unwrap();
        let wake = [Wake {
            on: "schedule".into(),
            every: Some("1h".into()),
            cron: None,
            zone: None,
        }];
        begin(dir.path(), &wake, UNIX_EPOCH + Duration::from_secs(7300)).unwrap();
        assert_eq!(Slots::load(dir.path()).unwrap().last, vec![7200]);
    }
}
