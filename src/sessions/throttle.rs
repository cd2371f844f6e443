//! Per-sender rate limits in the chat platforms: a token bucket per person
//! (`sessions.user_messages_per_minute`) and per chat
//! (`sessions.chat_messages_per_minute`). A message past either is refused
//! before anything is stored, and its sender is told to slow down once —
//! again only after a message of theirs was let through. The buckets live
//! in this replica's memory (several replicas each keep their own), and
//! ones not used for a while are dropped.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::SessionsConfig;
use crate::platform::{InboundEvent, RateLimiter};

/// Buckets kept before unused ones are dropped.
const KEPT: usize = 10_000;
/// A bucket unused this long is full again: dropping it changes nothing.
const UNUSED: Duration = Duration::from_secs(120);

/// What the limits say of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Let it through.
    Allowed,
    /// Refuse it; `tell` the sender (the first refusal since they were let
    /// through).
    Refused { tell: bool },
}

struct Bucket {
    limiter: RateLimiter,
    used: Instant,
    /// A refusal was announced since the last message let through.
    told: bool,
}

/// One kind of limit: its rate and its buckets by key.
struct Limit {
    per_minute: u32,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl Limit {
    fn new(per_minute: u32) -> Option<Self> {
        (per_minute > 0).then(|| Self {
            per_minute,
            buckets: Mutex::new(HashMap::new()),
        })
    }

    /// Takes a token from `key`'s bucket.
    fn take(&self, key: &str) -> Verdict {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if buckets.len() >= KEPT && !buckets.contains_key(key) {
            buckets.retain(|_, b| now.duration_since(b.used) < UNUSED);
        }
        let bucket = buckets.entry(key.to_string()).or_insert_with(|| Bucket {
            limiter: RateLimiter::per_minute(self.per_minute),
            used: now,
            told: false,
        });
        bucket.used = now;
        match bucket.limiter.take() {
            Ok(()) => {
                bucket.told = false;
                Verdict::Allowed
            }
            Err(_) => {
                let tell = !bucket.told;
                bucket.told = true;
                Verdict::Refused { tell }
            }
        }
    }
}

/// The limits of every sender and chat.
pub(super) struct Throttle {
    user: Option<Limit>,
    chat: Option<Limit>,
}

impl Throttle {
    /// The limits `config` sets (none by default).
    pub(super) fn new(config: &SessionsConfig) -> Self {
        Self {
            user: Limit::new(config.user_messages_per_minute),
            chat: Limit::new(config.chat_messages_per_minute),
        }
    }

    /// Whether `event` may go on: its sender's bucket first, then its
    /// chat's.
    pub(super) fn check(&self, event: &InboundEvent) -> Verdict {
        if let Some(user) = &self.user {
            let verdict = user.take(&format!("{}:{}", event.platform, event.user_id));
            if verdict != Verdict::Allowed {
                return verdict;
            }
        }
        match &self.chat {
            Some(chat) => chat.take(&format!("{}:{}", event.platform, event.chat_id)),
            None => Verdict::Allowed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(user: &str, chat: &str) -> InboundEvent {
        let mut e: InboundEvent = serde_json::from_value(serde_json::json!({
            "platform": "chat", "kind": "group", "chat_id": chat, "thread_id": null,
            "user_id": user, "user_name": user, "text": "hi", "event_id": "1",
        }))
        .unwrap();
        e.mentioned = true;
        e
    }

    #[test]
    fn a_sender_past_the_rate_is_refused_and_told_once() {
        let throttle = Throttle::new(&SessionsConfig {
            user_messages_per_minute: 2,
            ..SessionsConfig::default()
        });
        let ann = event("ann", "g");
        assert_eq!(throttle.check(&ann), Verdict::Allowed);
        assert_eq!(throttle.check(&ann), Verdict::Allowed);
        assert_eq!(throttle.check(&ann), Verdict::Refused { tell: true });
        assert_eq!(throttle.check(&ann), Verdict::Refused { tell: false });
        assert_eq!(throttle.check(&event("bob", "g")), Verdict::Allowed);
    }

    #[test]
    fn a_chat_past_its_rate_is_refused_whoever_writes() {
        let throttle = Throttle::new(&SessionsConfig {
            chat_messages_per_minute: 3,
            ..SessionsConfig::default()
        });
        for user in ["a", "b", "c"] {
            assert_eq!(throttle.check(&event(user, "g")), Verdict::Allowed);
        }
        assert_eq!(
            throttle.check(&event("d", "g")),
            Verdict::Refused { tell: true }
        );
        assert_eq!(throttle.check(&event("d", "other")), Verdict::Allowed);
    }

    #[test]
    fn without_limits_everything_passes() {
        let throttle = Throttle::new(&SessionsConfig::default());
        for _ in 0..1000 {
            assert_eq!(throttle.check(&event("a", "g")), Verdict::Allowed);
        }
    }
}
