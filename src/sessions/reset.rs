//! Reset policies: when a conversation starts over without anyone asking.

use crate::config::{ResetMode, ResetPolicy};

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 60 * MINUTE_MS;
const DAY_MS: i64 = 24 * HOUR_MS;

/// Why a session was reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetReason {
    /// Nobody wrote for longer than the idle limit.
    Idle,
    /// The daily reset hour passed since the last message.
    Daily,
}

impl ResetReason {
    /// Stored as the session's end reason.
    pub fn end_reason(self) -> &'static str {
        match self {
            ResetReason::Idle => "reset: idle",
            ResetReason::Daily => "reset: daily",
        }
    }

    /// What the user is told.
    pub fn notice(self, policy: &ResetPolicy) -> String {
        match self {
            ResetReason::Idle => format!(
                "(Starting a new conversation: the previous one was idle for more than {}.)",
                human_minutes(policy.idle_minutes)
            ),
            ResetReason::Daily => format!(
                "(Starting a new conversation: conversations start over daily at {:02}:00 UTC.)",
                policy.daily_hour
            ),
        }
    }
}

fn human_minutes(minutes: u64) -> String {
    match minutes {
        m if m % 1440 == 0 => plural(m / 1440, "day"),
        m if m % 60 == 0 => plural(m / 60, "hour"),
        m => plural(m, "minute"),
    }
}

fn plural(n: u64, unit: &str) -> String {
    if n == 1 {
        format!("1 {unit}")
    } else {
        format!("{n} {unit}s")
    }
}

/// Whether a session last active at `last_active_ms` must start over at
/// `now_ms` (Unix milliseconds).
pub fn reset_due(policy: &ResetPolicy, last_active_ms: i64, now_ms: i64) -> Option<ResetReason> {
    let idle = matches!(policy.mode, ResetMode::Idle | ResetMode::Both);
    let daily = matches!(policy.mode, ResetMode::Daily | ResetMode::Both);
    let idle_limit = i64::try_from(policy.idle_minutes)
        .unwrap_or(i64::MAX / MINUTE_MS)
        .saturating_mul(MINUTE_MS);
    if idle && now_ms.saturating_sub(last_active_ms) > idle_limit {
        return Some(ResetReason::Idle);
    }
    if daily && last_active_ms < last_daily_boundary(policy.daily_hour, now_ms) {
        return Some(ResetReason::Daily);
    }
    None
}

/// The latest moment at `hour`:00 UTC not after `now_ms`.
fn last_daily_boundary(hour: u32, now_ms: i64) -> i64 {
    let offset = i64::from(hour.min(23)) * HOUR_MS;
    (now_ms - offset).div_euclid(DAY_MS) * DAY_MS + offset
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(mode: ResetMode) -> ResetPolicy {
        ResetPolicy {
            mode,
            idle_minutes: 60,
            daily_hour: 4,
        }
    }

    // 2026-11-29 10:00 UTC
    const NOW: i64 = 1_795_946_400_000;

    #[test]
    fn idle_resets_only_past_the_limit() {
        let p = policy(ResetMode::Idle);
        assert_eq!(reset_due(&p, NOW - 59 * MINUTE_MS, NOW), None);
        assert_eq!(
            reset_due(&p, NOW - 61 * MINUTE_MS, NOW),
            Some(ResetReason::Idle)
        );
    }

    #[test]
    fn daily_resets_when_the_hour_passed_since_the_last_message() {
        let p = policy(ResetMode::Daily);
        assert_eq!(NOW % DAY_MS, 10 * HOUR_MS, "fixture is 10:00 UTC");
        // 05:00 today: after today's 04:00 boundary.
        assert_eq!(reset_due(&p, NOW - 5 * HOUR_MS, NOW), None);
        // 03:00 today: before it.
        assert_eq!(
            reset_due(&p, NOW - 7 * HOUR_MS, NOW),
            Some(ResetReason::Daily)
        );
        // At 03:30 the boundary is yesterday's 04:00.
        let early = NOW - 6 * HOUR_MS - 30 * MINUTE_MS;
        assert_eq!(reset_due(&p, early - 20 * HOUR_MS, early), None);
        assert_eq!(
            reset_due(&p, early - 24 * HOUR_MS, early),
            Some(ResetReason::Daily)
        );
    }

    #[test]
    fn both_and_none() {
        let both = policy(ResetMode::Both);
        assert_eq!(
            reset_due(&both, NOW - 2 * HOUR_MS, NOW),
            Some(ResetReason::Idle)
        );
        assert_eq!(
            reset_due(
                &ResetPolicy {
                    idle_minutes: 10_000,
                    ..both
                },
                NOW - 7 * HOUR_MS,
                NOW
            ),
            Some(ResetReason::Daily)
        );
        let none = policy(ResetMode::None);
        assert_eq!(reset_due(&none, 0, NOW), None);
    }

    #[test]
    fn notices_name_the_limit() {
        let p = ResetPolicy {
            mode: ResetMode::Both,
            idle_minutes: 1440,
            daily_hour: 4,
        };
        assert!(ResetReason::Idle.notice(&p).contains("1 day"));
        assert!(ResetReason::Daily.notice(&p).contains("04:00 UTC"));
        assert_eq!(human_minutes(90), "90 minutes");
        assert_eq!(human_minutes(120), "2 hours");
    }
}
