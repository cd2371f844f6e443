//! Turns yield to the intake. Storing a delivery is what its sender waits
//! for; opening a turn (its job started in storage, the conversation read,
//! the model asked) is not, and a burst of deliveries for sessions not yet
//! live opens as many turns as deliveries. They would share the cores and
//! the database's writer with the intake and make every sender wait, so a
//! turn about to open waits until the intake has been quiet for [`QUIET`]
//! (a burst's deliveries come closer together than that) — no longer than
//! [`MOST`], so a steady stream of them does not starve the agents.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The longest a turn waits for the intake to be quiet.
pub(super) const MOST: Duration = Duration::from_secs(1);

/// How long without a delivery the intake counts as quiet.
const QUIET: Duration = Duration::from_millis(20);

/// Deliveries being stored now, and when the last one started.
#[derive(Debug)]
pub(super) struct Pressure {
    storing: AtomicUsize,
    /// Microseconds from `since` to the last delivery's start.
    last: AtomicU64,
    since: Instant,
    /// One waiting turn watches the clock for all of them (a burst may
    /// leave thousands waiting), and wakes the others.
    watching: AtomicBool,
    woken: Notify,
}

impl Default for Pressure {
    fn default() -> Self {
        Self {
            storing: AtomicUsize::new(0),
            last: AtomicU64::new(0),
            since: Instant::now(),
            watching: AtomicBool::new(false),
            woken: Notify::new(),
        }
    }
}

/// The waiting turn that watches; the others look again when it stops.
struct Watcher<'a>(&'a Pressure);

impl Drop for Watcher<'_> {
    fn drop(&mut self) {
        self.0.watching.store(false, Ordering::SeqCst);
        self.0.woken.notify_waiters();
    }
}

/// A delivery being stored, counted until it drops.
pub(super) struct Storing<'a>(&'a Pressure);

impl Drop for Storing<'_> {
    fn drop(&mut self) {
        self.0.storing.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Pressure {
    /// Counts a delivery as being stored until the guard drops.
    pub(super) fn storing(&self) -> Storing<'_> {
        self.storing.fetch_add(1, Ordering::SeqCst);
        let at = u64::try_from(self.since.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.last.store(at.max(1), Ordering::SeqCst);
        Storing(self)
    }

    /// How long until the intake counts as quiet; zero when it is.
    fn busy_for(&self) -> Duration {
        let last = self.last.load(Ordering::SeqCst);
        if last == 0 {
            return Duration::ZERO;
        }
        let since = self
            .since
            .elapsed()
            .saturating_sub(Duration::from_micros(last));
        match QUIET.checked_sub(since) {
            Some(left) if !left.is_zero() => left,
            _ if self.storing.load(Ordering::SeqCst) > 0 => QUIET,
            _ => Duration::ZERO,
        }
    }

    /// Returns once the intake is quiet, or after `most`.
    pub(super) async fn quiet(&self, most: Duration) {
        let until = Instant::now() + most;
        loop {
            if self.busy_for().is_zero() || Instant::now() >= until {
                return;
            }
            let woken = self.woken.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if !self.watching.swap(true, Ordering::SeqCst) {
                let _watcher = Watcher(self);
                loop {
                    let wait = self.busy_for();
                    if wait.is_zero() || Instant::now() >= until {
                        return;
                    }
                    tokio::time::sleep_until(until.min(Instant::now() + wait)).await;
                }
            }
            tokio::select! {
                () = woken => {}
                () = tokio::time::sleep_until(until) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paused clock's timers fire on whole milliseconds.
    const TICK: Duration = Duration::from_millis(2);

    #[tokio::test(start_paused = true)]
    async fn a_turn_waits_for_the_last_delivery_or_the_limit() {
        let pressure = std::sync::Arc::new(Pressure::default());
        let start = tokio::time::Instant::now();
        pressure.quiet(MOST).await;
        assert_eq!(start.elapsed(), Duration::ZERO, "nothing stored: no wait");
        drop(pressure.storing());
        pressure.quiet(MOST).await;
        let waited = start.elapsed();
        assert!(waited >= QUIET && waited <= QUIET + TICK, "{waited:?}");

        // Many turns wait; one watches, all go when the delivery is in.
        let start = tokio::time::Instant::now();
        let storing = pressure.storing();
        let waiters: Vec<_> = (0..50)
            .map(|_| {
                let pressure = pressure.clone();
                tokio::spawn(async move {
                    pressure.quiet(MOST).await;
                    tokio::time::Instant::now()
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(storing);
        for waiter in waiters {
            let waited = waiter.await.unwrap() - start;
            let least = Duration::from_millis(300);
            assert!(
                waited >= least && waited <= least + QUIET + TICK,
                "{waited:?}"
            );
        }
        assert!(!pressure.watching.load(Ordering::SeqCst));

        let _stuck = pressure.storing();
        let start = tokio::time::Instant::now();
        pressure.quiet(MOST).await;
        assert_eq!(start.elapsed(), MOST, "never quiet: the limit");
    }
}
