//! A schedule a record's `wake` holds (OCX's key of version 1), read and
//! reckoned: `every` (its slots the whole multiples of a period since the
//! Unix epoch) or a five-field cron line in a time zone (its slots the
//! minutes the line matches there, read by `croner`, the zone's rules
//! from `chrono-tz`). Times are seconds since 1970-01-01T00:00:00Z.

use super::kinds::{EVERY_AT_LEAST, Problem, Wake, every_seconds};
use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;

/// A schedule, read.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// Every this many seconds, at whole multiples of it.
    Every(i64),
    /// The minutes a cron line matches, in a time zone.
    Cron(Box<croner::Cron>, Tz),
}

/// The most slots counted back to the last given, so a run whose last
/// slot lies far back costs a bounded reckoning: a line stands for at
/// most this many.
const COUNTED_AT_MOST: usize = 10_000;

impl Schedule {
    /// The latest slot at or before `now`.
    pub fn latest_at(&self, now: i64) -> Option<i64> {
        match self {
            Schedule::Every(every) => Some(now - now.rem_euclid(*every)),
            Schedule::Cron(cron, zone) => {
                let at = zone.timestamp_opt(now, 0).single()?;
                let found = cron.find_previous_occurrence(&at, true).ok()?;
                Some(found.timestamp())
            }
        }
    }

    /// The first slot after `now`.
    pub fn next_after(&self, now: i64) -> Option<i64> {
        match self {
            Schedule::Every(every) => Some(now - now.rem_euclid(*every) + every),
            Schedule::Cron(cron, zone) => {
                let at = zone.timestamp_opt(now, 0).single()?;
                let found = cron.find_next_occurrence(&at, false).ok()?;
                Some(found.timestamp())
            }
        }
    }

    /// The slot due at `now` once `last` was given, and how many slots it
    /// stands for (those after `last`, up to it); none when none is due.
    pub fn due(&self, last: i64, now: i64) -> Option<(i64, u64)> {
        let latest = self.latest_at(now).filter(|l| *l > last)?;
        let count = match self {
            Schedule::Every(every) => (latest - last) / every,
            Schedule::Cron(cron, zone) => {
                let after = zone.timestamp_opt(last, 0).single()?;
                let slots = cron
                    .iter_after(after)
                    .take_while(|t| t.timestamp() <= latest)
                    .take(COUNTED_AT_MOST)
                    .count();
                i64::try_from(slots).unwrap_or(1)
            }
        };
        Some((latest, u64::try_from(count).unwrap_or(1).max(1)))
    }
}

/// Reads the `i`th item of a record's `wake` as a schedule, or says which
/// of its fields is at fault and why.
pub fn read(i: usize, w: &Wake) -> Result<Schedule, Problem> {
    let at = |field: &str| format!("wake[{i}].{field}");
    if w.on != "schedule" {
        return Err(Problem::new(
            at("on"),
            format!(
                "{} is no wake this node gives (it gives schedule)",
                super::kinds::shown(&w.on)
            ),
        ));
    }
    match (&w.every, &w.cron) {
        (Some(_), Some(_)) => Err(Problem::new(
            at("cron"),
            "a schedule gives every or cron, not both",
        )),
        (None, None) => Err(Problem::new(
            at("every"),
            "is missing: a schedule says how often (every, such as 1d) or when (cron, such as \"0 3 * * 1-5\")",
        )),
        (Some(every), None) => {
            if w.zone.is_some() {
                return Err(Problem::new(
                    at("zone"),
                    "is for a cron line: every counts from the Unix epoch, in no zone",
                ));
            }
            let secs = every_seconds(every).ok_or_else(|| {
                Problem::new(
                    at("every"),
                    format!(
                        "{} is not a whole number followed by s, m, h or d, of at least {EVERY_AT_LEAST}s",
                        super::kinds::shown(every)
                    ),
                )
            })?;
            Ok(Schedule::Every(i64::try_from(secs).unwrap_or(i64::MAX)))
        }
        (None, Some(line)) => {
            let zone = match &w.zone {
                None => Tz::UTC,
                Some(z) => z.parse::<Tz>().map_err(|_| {
                    Problem::new(
                        at("zone"),
                        format!(
                            "{} is not a time zone's IANA name, such as Europe/Paris",
                            super::kinds::shown(z)
                        ),
                    )
                })?,
            };
            let cron = five_fields(line).map_err(|why| {
                Problem::new(at("cron"), format!("{} {why}", super::kinds::shown(line)))
            })?;
            Ok(Schedule::Cron(Box::new(cron), zone))
        }
    }
}

/// Why a cron line is not one a schedule takes.
#[derive(Debug, thiserror::Error)]
enum NotALine {
    #[error("is not five fields: minute, hour, day of the month, month, day of the week")]
    Fields,
    #[error("is not a cron line: {0}")]
    Unread(#[from] croner::errors::CronError),
    #[error("matches no time")]
    Never,
}

/// A five-field cron line (minute, hour, day of the month, month, day of
/// the week), or why it is not one.
fn five_fields(line: &str) -> Result<croner::Cron, NotALine> {
    if line.split_whitespace().count() != 5 {
        return Err(NotALine::Fields);
    }
    let parser = croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .year(croner::parser::Year::Disallowed)
        .build();
    let cron = parser.parse(line)?;
    // A line no minute matches (`0 0 30 2 *`) would never wake the run.
    let from = Utc.timestamp_opt(0, 0).single().unwrap_or_default();
    match cron.find_next_occurrence::<DateTime<Utc>>(&from, false) {
        Ok(_) => Ok(cron),
        Err(_) => Err(NotALine::Never),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wake(every: Option<&str>, cron: Option<&str>, zone: Option<&str>) -> Wake {
        Wake {
            on: "schedule".into(),
            every: every.map(Into::into),
            cron: cron.map(Into::into),
            zone: zone.map(Into::into),
        }
    }

    #[test]
    fn every_falls_on_multiples_and_a_late_slot_stands_for_all_it_passed() {
        let s = read(0, &wake(Some("10s"), None, None)).unwrap();
        assert_eq!(s.latest_at(147), Some(140));
        assert_eq!(s.next_after(140), Some(150));
        assert_eq!(s.due(100, 109), None);
        assert_eq!(s.due(100, 110), Some((110, 1)));
        assert_eq!(s.due(100, 147), Some((140, 4)));
    }

    #[test]
    fn a_cron_line_falls_on_its_minutes_in_its_zone() {
        // 2026-12-07 is a Monday; Paris is UTC+1 in December.
        let monday_noon_utc = 1_796_644_800;
        let s = read(0, &wake(None, Some("0 3 * * 1-5"), Some("Europe/Paris"))).unwrap();
        let three_paris = monday_noon_utc - 10 * 3600;
        assert_eq!(s.latest_at(monday_noon_utc), Some(three_paris));
        assert_eq!(s.next_after(monday_noon_utc), Some(three_paris + 86400));
        let friday_before = three_paris - 3 * 86400;
        assert_eq!(
            s.due(friday_before, monday_noon_utc),
            Some((three_paris, 1)),
            "no slot on the weekend"
        );
        assert_eq!(
            s.due(three_paris - 86400 * 7, monday_noon_utc).unwrap().1,
            5
        );
        let utc = read(0, &wake(None, Some("*/15 * * * *"), None)).unwrap();
        assert_eq!(utc.next_after(monday_noon_utc), Some(monday_noon_utc + 900));
    }

    #[test]
    fn a_schedule_that_does_not_read_names_its_field() {
        for (w, field) in [
            (wake(Some("4s"), None, None), "wake[0].every"),
            (wake(None, None, None), "wake[0].every"),
            (wake(Some("1d"), Some("0 3 * * *"), None), "wake[0].cron"),
            (wake(Some("1d"), None, Some("UTC")), "wake[0].zone"),
            (wake(None, Some("0 3 * *"), None), "wake[0].cron"),
            (wake(None, Some("0 0 3 * * *"), None), "wake[0].cron"),
            (wake(None, Some("61 3 * * *"), None), "wake[0].cron"),
            (wake(None, Some("0 0 30 2 *"), None), "wake[0].cron"),
            (
                wake(None, Some("0 3 * * *"), Some("Mars/Olympus")),
                "wake[0].zone",
            ),
        ] {
            assert_eq!(read(0, &w).unwrap_err().field, field, "{w:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_cron_line_or_zone_reads_or_is_refused_without_panic(
            line in "[0-9*/,LW#?A-Z -]{0,40}", zone in "\\PC{0,30}", at in 0i64..4_000_000_000
        ) {
            if let Ok(s) = read(0, &wake(None, Some(&line), Some(&zone))) {
                let _ = s.due(at - 86400 * 30, at);
                let _ = s.next_after(at);
            }
            let _ = read(0, &wake(None, Some(&line), None)).map(|s| s.due(0, at));
        }
    }

    #[test]
    fn a_daily_line_falls_once_a_day_when_the_zone_changes_its_clock() {
        let w = wake(None, Some("30 2 * * *"), Some("Europe/Paris"));
        let s = read(0, &w).unwrap();
        let slots_from = |mut t: i64| -> Vec<i64> {
            (0..3)
                .map(|_| {
                    t = s.next_after(t).unwrap();
                    t
                })
                .collect()
        };
        // 2026-10-25: 02:30 comes twice in Paris, and is given once, the first.
        let fall = slots_from(1_792_886_400);
        assert_eq!(fall, [1_792_888_200, 1_792_978_200, 1_793_064_600]);
        // 2026-03-29: 02:30 never comes in Paris; the slot falls as the clock
        // jumps to 03:00.
        let spring = slots_from(1_774_738_800);
        assert_eq!(spring, [1_774_746_000, 1_774_830_600, 1_774_917_000]);
    }
}
