//! A token bucket: `rate` requests per minute, bursts up to `rate`. One
//! per webhook route, and one per chat sender and per chat (the sessions'
//! intake).

use std::sync::Mutex;
use std::time::Instant;

/// One limiter.
pub struct RateLimiter {
    capacity: f64,
    per_sec: f64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    /// `rate` requests per minute.
    pub fn per_minute(rate: u32) -> Self {
        let capacity = f64::from(rate.max(1));
        Self {
            capacity,
            per_sec: capacity / 60.0,
            state: Mutex::new((capacity, Instant::now())),
        }
    }

    /// Takes one token, or says how many seconds until one is free.
    pub fn take(&self) -> Result<(), u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, last) = &mut *state;
        let now = Instant::now();
        *tokens =
            (*tokens + now.duration_since(*last).as_secs_f64() * self.per_sec).min(self.capacity);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - *tokens) / self.per_sec).ceil().max(1.0) as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RateLimiter;

    #[test]
    fn bursts_up_to_the_rate_then_asks_to_wait() {
        let l = RateLimiter::per_minute(3);
        assert!(l.take().is_ok());
        assert!(l.take().is_ok());
        assert!(l.take().is_ok());
        let wait = l.take().unwrap_err();
        assert!((1..=20).contains(&wait), "{wait}");
    }
}
