//! When a job is due: a five-field cron expression (read by croner in the
//! job's time zone, so 09:00 stays 09:00 across daylight saving), a fixed
//! interval (`every 30m`), or one moment (`at 2026-12-01T09:00`).

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

/// Longest schedule text read.
const MAX_LEN: usize = 200;
/// Shortest interval of `every`.
const MIN_EVERY_MS: i64 = 60_000;

/// A schedule that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScheduleError(String);

#[derive(Debug, Clone)]
enum Kind {
    Cron(Box<Cron>),
    Every(i64),
    At(i64),
}

/// A parsed schedule in its time zone.
#[derive(Debug, Clone)]
pub struct Schedule {
    kind: Kind,
    tz: TimeZone,
}

/// The time zone named `name` (empty: UTC).
pub fn zone(name: &str) -> Result<TimeZone, ScheduleError> {
    let name = name.trim();
    if name.is_empty() || name.eq_ignore_ascii_case("utc") {
        return Ok(TimeZone::UTC);
    }
    TimeZone::get(name).map_err(|e| ScheduleError(format!("unknown time zone {name:?}: {e}")))
}

impl Schedule {
    /// Reads `text` in time zone `timezone` (IANA name; empty is UTC).
    pub fn parse(text: &str, timezone: &str) -> Result<Self, ScheduleError> {
        let tz = zone(timezone)?;
        let text = text.trim();
        if text.is_empty() {
            return Err(ScheduleError("the schedule is empty".into()));
        }
        if text.len() > MAX_LEN {
            return Err(ScheduleError(format!(
                "the schedule is longer than {MAX_LEN} characters"
            )));
        }
        let kind = if let Some(every) = strip_word(text, "every") {
            Kind::Every(interval(every)?)
        } else if let Some(at) = strip_word(text, "at") {
            Kind::At(moment(at, &tz)?)
        } else {
            let cron = CronParser::builder()
                .seconds(Seconds::Disallowed)
                .year(Year::Disallowed)
                .build()
                .parse(text)
                .map_err(|e| {
                    ScheduleError(format!(
                        "{text:?} is not a cron expression (minute hour day month weekday), \
                         \"every 30m\" or \"at 2026-12-01T09:00\": {e}"
                    ))
                })?;
            Kind::Cron(Box::new(cron))
        };
        Ok(Self { kind, tz })
    }

    /// The first slot strictly after `after` (Unix ms); an interval counts
    /// from `anchor` (when the job was made). `None` once a one-off moment
    /// has passed.
    pub fn next_after(&self, after: i64, anchor: i64) -> Option<i64> {
        match &self.kind {
            Kind::Every(every) => {
                if after < anchor {
                    return Some(anchor.saturating_add(*every));
                }
                let k = (after - anchor) / every + 1;
                Some(anchor.saturating_add(k.saturating_mul(*every)))
            }
            Kind::At(at) => (*at > after).then_some(*at),
            Kind::Cron(cron) => {
                let from = Timestamp::from_millisecond(after).ok()?;
                let zoned = Zoned::new(from, self.tz.clone());
                let next = cron.find_next_occurrence(&zoned, false).ok()?;
                Some(next.timestamp().as_millisecond())
            }
        }
    }

    /// Every slot in `(after, until]`, oldest first, at most `limit` of the
    /// latest ones, and how many there were in all (counting stops at
    /// 100 000).
    pub fn slots_between(
        &self,
        after: i64,
        until: i64,
        anchor: i64,
        limit: usize,
    ) -> (Vec<i64>, usize) {
        let mut kept = std::collections::VecDeque::new();
        let mut count = 0usize;
        let mut at = after;
        while let Some(next) = self.next_after(at, anchor) {
            if next > until || count >= 100_000 {
                break;
            }
            count += 1;
            if kept.len() == limit {
                kept.pop_front();
            }
            if limit > 0 {
                kept.push_back(next);
            }
            at = next;
        }
        (kept.into(), count)
    }

    /// A one-off moment (it has no slot after its first).
    pub fn is_once(&self) -> bool {
        matches!(self.kind, Kind::At(_))
    }
}

/// `rest` when `text` is `word` followed by a space.
fn strip_word<'a>(text: &'a str, word: &str) -> Option<&'a str> {
    let head = text.get(..word.len())?;
    let rest = &text[word.len()..];
    (head.eq_ignore_ascii_case(word) && rest.starts_with(char::is_whitespace)).then(|| rest.trim())
}

/// `30m`, `2h`, `1d`, `90 minutes` … in milliseconds.
fn interval(text: &str) -> Result<i64, ScheduleError> {
    let bad = || {
        ScheduleError(format!(
            "\"every {text}\": give a number and a unit (m, h or d), like \"every 30m\""
        ))
    };
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let n: i64 = text[..digits].parse().map_err(|_| bad())?;
    let unit = match text[digits..].trim().to_ascii_lowercase().as_str() {
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        "w" | "week" | "weeks" => 7 * 86_400_000,
        _ => return Err(bad()),
    };
    let ms = n.checked_mul(unit).ok_or_else(bad)?;
    if ms < MIN_EVERY_MS {
        return Err(ScheduleError(format!(
            "\"every {text}\" is too often: the shortest interval is one minute"
        )));
    }
    Ok(ms)
}

/// `2026-12-01T09:00[:SS]` (in `tz`), or with `Z` or `±HH:MM` after it
/// (that instant).
fn moment(text: &str, tz: &TimeZone) -> Result<i64, ScheduleError> {
    let bad = || {
        ScheduleError(format!(
            "\"at {text}\" is not a date and time like 2026-12-01T09:00"
        ))
    };
    let num = |s: &str| -> Result<i64, ScheduleError> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse().map_err(|_| bad())
    };
    let (date, rest) = text.split_once(['T', 't', ' ']).ok_or_else(bad)?;
    let mut ymd = date.splitn(3, '-');
    let (y, mo, d) = (
        num(ymd.next().unwrap_or(""))?,
        num(ymd.next().unwrap_or(""))?,
        num(ymd.next().unwrap_or(""))?,
    );
    let (time, offset) = match rest.find(['Z', 'z', '+', '-']) {
        Some(at) => (&rest[..at], Some(&rest[at..])),
        None => (rest, None),
    };
    let mut hms = time.splitn(3, ':');
    let (h, mi) = (
        num(hms.next().unwrap_or(""))?,
        num(hms.next().unwrap_or(""))?,
    );
    let s = hms.next().map_or(Ok(0), num)?;
    let fits = |v: i64, lo: i64, hi: i64| (lo..=hi).contains(&v);
    if !(fits(mo, 1, 12)
        && fits(d, 1, 31)
        && fits(h, 0, 23)
        && fits(mi, 0, 59)
        && fits(s, 0, 59)
        && fits(y, 1970, 9999))
    {
        return Err(bad());
    }
    let civil =
        jiff::civil::DateTime::new(y as i16, mo as i8, d as i8, h as i8, mi as i8, s as i8, 0)
            .map_err(|_| bad())?;
    let offset_secs = match offset {
        None => {
            let zoned = civil
                .to_zoned(tz.clone())
                .map_err(|e| ScheduleError(format!("\"at {text}\": {e}")))?;
            return Ok(zoned.timestamp().as_millisecond());
        }
        Some("Z" | "z") => 0,
        Some(o) => {
            let sign = if o.starts_with('-') { -1 } else { 1 };
            let (oh, om) = o[1..].split_once(':').ok_or_else(bad)?;
            let (oh, om) = (num(oh)?, num(om)?);
            if !(fits(oh, 0, 23) && fits(om, 0, 59)) {
                return Err(bad());
            }
            sign * (oh * 3600 + om * 60)
        }
    };
    let days = crate::clock::days_from_civil(y, mo as u32, d as u32);
    Ok((days * 86_400 + h * 3600 + mi * 60 + s - offset_secs) * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> i64 {
        text.parse::<Timestamp>().unwrap().as_millisecond()
    }

    #[test]
    fn cron_slots_follow_the_zone_across_daylight_saving() {
        let s = Schedule::parse("0 9 * * *", "Europe/Berlin").unwrap();
        // 09:00 in Berlin is 08:00Z in winter and 07:00Z in summer.
        assert_eq!(
            s.next_after(ms("2026-03-28T12:00:00Z"), 0),
            Some(ms("2026-03-29T07:00:00Z"))
        );
        assert_eq!(
            s.next_after(ms("2026-03-27T12:00:00Z"), 0),
            Some(ms("2026-03-28T08:00:00Z"))
        );
    }

    #[test]
    fn intervals_count_from_the_anchor_and_moments_fire_once() {
        let every = Schedule::parse("every 30m", "").unwrap();
        let anchor = ms("2026-12-01T00:00:00Z");
        assert_eq!(every.next_after(anchor, anchor), Some(anchor + 1_800_000));
        assert_eq!(
            every.next_after(anchor + 1_800_000, anchor),
            Some(anchor + 3_600_000)
        );
        let at = Schedule::parse("at 2026-12-01T09:00", "Europe/Berlin").unwrap();
        assert_eq!(at.next_after(0, 0), Some(ms("2026-12-01T08:00:00Z")));
        assert_eq!(at.next_after(ms("2026-12-01T08:00:00Z"), 0), None);
        assert!(at.is_once());
        for (text, instant) in [
            ("at 2026-12-01T09:00:30Z", "2026-12-01T09:00:30Z"),
            ("at 2026-12-01T09:00+02:00", "2026-12-01T07:00:00Z"),
            ("at 2026-12-01T09:00-05:30", "2026-12-01T14:30:00Z"),
        ] {
            let at = Schedule::parse(text, "Europe/Berlin").unwrap();
            assert_eq!(at.next_after(0, 0), Some(ms(instant)), "{text}");
        }
    }

    #[test]
    fn slots_between_keep_the_latest_and_count_all() {
        let s = Schedule::parse("* * * * *", "UTC").unwrap();
        let t = ms("2026-12-01T00:00:00Z");
        let (slots, count) = s.slots_between(t, t + 10 * 60_000, 0, 3);
        assert_eq!(count, 10);
        assert_eq!(slots, vec![t + 8 * 60_000, t + 9 * 60_000, t + 10 * 60_000]);
    }

    #[test]
    fn bad_schedules_say_why() {
        for (text, tz, says) in [
            ("every 10s", "", "too often"),
            ("every soon", "", "number and a unit"),
            ("61 * * * *", "", "cron expression"),
            ("* * * * * *", "", "cron expression"),
            ("0 9 * * *", "Mars/Olympus", "unknown time zone"),
            ("at tomorrow", "", "date and time"),
            ("at 2026-13-01T09:00", "", "date and time"),
            ("at 2026-12-01T25:00", "", "date and time"),
            ("at 2026-12-01T09:00+1", "", "date and time"),
            ("", "", "empty"),
        ] {
            let err = Schedule::parse(text, tz).unwrap_err().to_string();
            assert!(err.contains(says), "{text:?}: {err}");
        }
    }
}
