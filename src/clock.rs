//! UTC calendar arithmetic on Unix milliseconds: days ↔ civil dates
//! (Howard Hinnant's algorithms), the formats shown to people, and the
//! bounds of a UTC month. Time zones are the schedules' business
//! (`cron::schedule`); everything stored and compared is UTC.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

const DAY_MS: i64 = 86_400_000;

/// Where "now" comes from for the decisions that turn on the time of day:
/// budget windows, session resets, schedules. The system's clock, or one a
/// test sets (records keep the system's time).
#[derive(Clone, Debug, Default)]
pub struct Clock(Option<Arc<AtomicI64>>);

impl Clock {
    /// The system's clock.
    pub fn system() -> Self {
        Self(None)
    }

    /// A clock standing at `at` (Unix ms) until it is set or moved.
    pub fn manual(at: i64) -> Self {
        Self(Some(Arc::new(AtomicI64::new(at))))
    }

    /// Now, in Unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        match &self.0 {
            Some(at) => at.load(Ordering::SeqCst),
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                .unwrap_or(0),
        }
    }

    /// Moves a manual clock by `ms` (the system's is not moved).
    pub fn advance(&self, ms: i64) {
        if let Some(at) = &self.0 {
            at.fetch_add(ms, Ordering::SeqCst);
        }
    }
}

/// The civil date (year, month 1–12, day 1–31) of `days` since the epoch.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Days since the epoch of the civil date `year`-`month`-`day`.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let mp = i64::from((month + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `ms` as `2026-12-01 09:00:05Z`.
pub fn iso(ms: i64) -> String {
    let (y, mo, d, h, mi, s) = parts(ms);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}Z")
}

/// `ms` as `2026-12-01 09:00 UTC`.
pub fn utc(ms: i64) -> String {
    let (y, mo, d, h, mi, _) = parts(ms);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02} UTC")
}

/// Unix ms of a UTC timestamp as APIs write it: `2026-12-01T09:00:05Z`
/// (fractions of a second ignored); `None` for anything else.
pub fn parse_utc(text: &str) -> Option<i64> {
    let text = text.trim().strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let num = |s: &str| s.parse::<u32>().ok();
    let mut d = date.splitn(3, '-');
    let year = d.next()?.parse::<i64>().ok()?;
    let (month, day) = (num(d.next()?)?, num(d.next()?)?);
    let time = time.split('.').next()?;
    let mut t = time.splitn(3, ':');
    let (h, mi, s) = (num(t.next()?)?, num(t.next()?)?, num(t.next()?)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400
        + i64::from(h) * 3600
        + i64::from(mi) * 60
        + i64::from(s);
    Some(secs * 1000)
}

fn parts(ms: i64) -> (i64, u32, u32, i64, i64, i64) {
    let days = ms.div_euclid(DAY_MS);
    let secs = ms.rem_euclid(DAY_MS) / 1000;
    let (y, mo, d) = civil_from_days(days);
    (y, mo, d, secs / 3600, secs % 3600 / 60, secs % 60)
}

/// Start and end (Unix ms) of the UTC day `ms` is in.
pub fn day_bounds(ms: i64) -> (i64, i64) {
    let start = ms - ms.rem_euclid(DAY_MS);
    (start, start + DAY_MS)
}

/// Start and end (Unix ms) of the UTC month `ms` is in.
pub fn month_bounds(ms: i64) -> (i64, i64) {
    let (y, m, _) = civil_from_days(ms.div_euclid(DAY_MS));
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    (
        days_from_civil(y, m, 1) * DAY_MS,
        days_from_civil(ny, nm, 1) * DAY_MS,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_stands_until_moved_and_the_systems_runs() {
        let clock = Clock::manual(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        clock.clone().advance(DAY_MS);
        assert_eq!(clock.now_ms(), 1_000 + DAY_MS, "clones share the time");
        let system = Clock::system();
        let before = system.now_ms();
        system.advance(DAY_MS);
        assert!(
            system.now_ms() - before < DAY_MS,
            "the system's is not moved"
        );
    }

    #[test]
    fn api_timestamps_parse() {
        let ms = parse_utc("2026-12-01T09:00:05Z").unwrap();
        assert_eq!(iso(ms), "2026-12-01 09:00:05Z");
        assert_eq!(parse_utc("2026-12-01T09:00:05.250Z"), Some(ms));
        assert_eq!(parse_utc("2026-12-01 09:00:05"), None);
        assert_eq!(parse_utc("2026-13-01T09:00:05Z"), None);
    }

    #[test]
    fn dates_round_trip_and_format() {
        for days in [-719_468, -1, 0, 1, 10_957, 20_788, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(iso(1_764_579_605_000), "2025-12-01 09:00:05Z");
        assert_eq!(utc(1_764_579_605_000), "2025-12-01 09:00 UTC");
        // 2028-02-29 12:00Z: a leap day's month and day.
        let leap = days_from_civil(2028, 2, 29) * DAY_MS + 43_200_000;
        assert_eq!(
            month_bounds(leap),
            (
                days_from_civil(2028, 2, 1) * DAY_MS,
                days_from_civil(2028, 3, 1) * DAY_MS
            )
        );
        assert_eq!(day_bounds(leap).1 - day_bounds(leap).0, DAY_MS);
        let december = days_from_civil(2026, 12, 31) * DAY_MS;
        assert_eq!(
            month_bounds(december).1,
            days_from_civil(2027, 1, 1) * DAY_MS
        );
    }
}
