//! Waiting between tries of a platform call that failed: doubling waits
//! with jitter, so a platform that is down is not asked in a tight loop and
//! many sessions (or replicas) do not all come back in the same instant.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// The longest Retry-After a [`Backoff`] sits out in one wait.
pub const LONGEST_TOLD: Duration = Duration::from_secs(600);

/// Doubling waits from `first` up to `most`, each drawn at random from the
/// upper half of its step ("equal jitter": never less than half the step,
/// never more than it), unless the platform said how long to wait.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    most: Duration,
    step: u32,
}

impl Backoff {
    /// Waits doubling from `first`, capped at `most`.
    pub const fn new(first: Duration, most: Duration) -> Self {
        Self {
            first,
            most,
            step: 0,
        }
    }

    /// The next wait, and a step further.
    pub fn next_wait(&mut self) -> Duration {
        let full = self
            .first
            .saturating_mul(1 << self.step.min(16))
            .min(self.most);
        self.step = self.step.saturating_add(1);
        let half = full / 2;
        half + half.mul_f64(rand::random::<f64>())
    }

    /// Back to the first step (the call went through).
    pub fn reset(&mut self) {
        self.step = 0;
    }

    /// Tries made since the last reset.
    pub fn tries(&self) -> u32 {
        self.step
    }

    /// Waits `told` (what the platform asked for: its Retry-After, at
    /// most [`LONGEST_TOLD`]) or else the next step; false when `stop`
    /// fired first.
    pub async fn pause(&mut self, stop: &CancellationToken, told: Option<Duration>) -> bool {
        let wait = match told {
            Some(told) => {
                self.step = self.step.saturating_add(1);
                told.min(LONGEST_TOLD)
            }
            None => self.next_wait(),
        };
        tokio::select! {
            _ = stop.cancelled() => false,
            _ = tokio::time::sleep(wait) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_within_the_upper_half_of_each_step_up_to_the_cap() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        for full in [1u64, 2, 4, 8, 16, 30, 30, 30] {
            let wait = backoff.next_wait();
            let full = Duration::from_secs(full);
            assert!(
                wait >= full / 2 && wait <= full,
                "{wait:?} outside [{:?}, {full:?}]",
                full / 2
            );
        }
        backoff.reset();
        assert!(backoff.next_wait() <= Duration::from_secs(1));
    }

    #[test]
    fn waits_are_spread_not_in_step() {
        let waits: std::collections::HashSet<Duration> = (0..20)
            .map(|_| Backoff::new(Duration::from_secs(8), Duration::from_secs(8)).next_wait())
            .collect();
        assert!(
            waits.len() > 10,
            "jitter gave only {} distinct waits",
            waits.len()
        );
    }
}
