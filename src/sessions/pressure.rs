//! Turns yield to the intake. Storing a delivery is what its sender waits
//! for; opening a turn (its job started in storage, the conversation read
//! and built) is not, and a burst of deliveries for sessions not yet live
//! opens as many turns as sessions. They would share the cores and the
//! database with the intake and make every sender wait, so a turn about to
//! open waits while deliveries are being stored, or came less than
//! [`QUIET`] apart (a burst's, not a steady stream's) — no longer than
//! [`MOST`], so a busy intake does not starve the agents. Then at most
//! [`OPENING`] turns open at once, in the order they came, and only one
//! while the intake is still busy: the turns a long burst leaves waiting
//! open one after another beside the intake, not all together in the
//! middle of it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, SemaphorePermit};
use tokio::time::Instant;

/// The longest a turn waits for the intake to be quiet.
pub(super) const MOST: Duration = Duration::from_secs(1);

/// How long after a delivery started the intake still counts as busy:
/// deliveries closer together than this overlap (a burst's do).
const QUIET: Duration = Duration::from_millis(2);

/// How often the watching turn looks again while deliveries are stored.
const LOOK: Duration = Duration::from_millis(5);

/// Turns opening at once.
const OPENING: usize = 2;

/// Deliveries being stored now, and when the last one started.
#[derive(Debug)]
pub(super) struct Pressure {
    storing: AtomicUsize,
    /// Microseconds from `since` to the last delivery's start.
    last: AtomicU64,
    since: Instant,
    /// One waiting turn watches the clock for all of them (a burst may
    /// leave thousands waiting), and wakes the next.
    watching: AtomicBool,
    woken: Notify,
    /// The turns opening now.
    opening: Semaphore,
}

impl Default for Pressure {
    fn default() -> Self {
        Self {
            storing: AtomicUsize::new(0),
            last: AtomicU64::new(0),
            since: Instant::now(),
            watching: AtomicBool::new(false),
            woken: Notify::new(),
            opening: Semaphore::new(OPENING),
        }
    }
}

/// The waiting turn that watches; when it stops, one other looks again.
struct Watcher<'a>(&'a Pressure);

impl Drop for Watcher<'_> {
    fn drop(&mut self) {
        self.0.watching.store(false, Ordering::SeqCst);
        self.0.woken.notify_one();
    }
}

/// A turn's place among those opening, held while it works on this
/// machine (storage, the conversation built) until it opens, or leaves
/// the place earlier to wait on anything outside (a platform, a service):
/// the places bound the work opening turns put beside the intake, not the
/// time they wait for others.
pub(super) struct Place<'a>(Option<SemaphorePermit<'a>>);

impl Place<'_> {
    /// Gives the place to the next turn.
    pub(super) fn leave(&mut self) {
        self.0 = None;
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
            _ if self.storing.load(Ordering::SeqCst) > 0 => LOOK,
            _ => Duration::ZERO,
        }
    }

    /// Waits for the intake to be quiet, then for one of the [`OPENING`]
    /// places of the turns opening now, in the order asked for; for all of
    /// them when the intake is still busy (the wait reached [`MOST`]), so
    /// one turn at a time opens beside it (PERFORMANCE.md, "Sessions a
    /// burst finds nobody running are taken over together").
    ///
    /// A turn let through by a quiet moment that then waited for its place
    /// while the intake became busy again waits for quiet again, within its
    /// own [`MOST`]: one lull in a long burst would otherwise release every
    /// turn waiting, to open one after another in the middle of the burst.
    pub(super) async fn open(&self) -> Place<'_> {
        let until = Instant::now() + MOST;
        loop {
            self.quiet_until(until).await;
            let busy = !self.busy_for().is_zero();
            let places = if busy { OPENING } else { 1 };
            // The places are never closed.
            let place = Place(self.opening.acquire_many(places as u32).await.ok());
            if busy || self.busy_for().is_zero() || Instant::now() >= until {
                return place;
            }
        }
    }

    /// Returns once the intake is quiet, or after [`MOST`].
    pub(super) async fn quiet(&self) {
        self.quiet_until(Instant::now() + MOST).await;
    }

    /// A turn leaving at its limit: it may have been the one woken to go
    /// or to watch next, so when the intake is quiet, or nobody watches,
    /// another waiting turn looks instead.
    fn pass_on(&self) {
        if self.busy_for().is_zero() || !self.watching.load(Ordering::SeqCst) {
            self.woken.notify_one();
        }
    }

    /// Returns once the intake is quiet, or at `until`. The waiting turns
    /// are woken one by one: the watcher, when it stops, wakes one, which
    /// goes if the intake is quiet (and wakes the next) or watches in its
    /// turn. Woken all at once, the thousands of turns a burst leaves
    /// waiting each woke at every lull and at every watcher's limit, only
    /// to wait again: work that grew with the sessions live, beside the
    /// intake.
    async fn quiet_until(&self, until: Instant) {
        loop {
            if self.busy_for().is_zero() {
                self.woken.notify_one();
                return;
            }
            if Instant::now() >= until {
                self.pass_on();
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
                () = tokio::time::sleep_until(until) => {
                    self.pass_on();
                    return;
                }
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
        pressure.quiet().await;
        assert_eq!(start.elapsed(), Duration::ZERO, "nothing stored: no wait");
        drop(pressure.storing());
        pressure.quiet().await;
        let waited = start.elapsed();
        assert!(waited >= QUIET && waited <= QUIET + TICK, "{waited:?}");

        // Many turns wait; one watches, all go when the delivery is in.
        let start = tokio::time::Instant::now();
        let storing = pressure.storing();
        let waiters: Vec<_> = (0..50)
            .map(|_| {
                let pressure = pressure.clone();
                tokio::spawn(async move {
                    pressure.quiet().await;
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
                waited >= least && waited <= least + LOOK + TICK,
                "{waited:?}"
            );
        }
        assert!(!pressure.watching.load(Ordering::SeqCst));

        let _stuck = pressure.storing();
        let start = tokio::time::Instant::now();
        pressure.quiet().await;
        assert_eq!(start.elapsed(), MOST, "never quiet: the limit");
    }

    /// Counts the wakes of the futures it is given to.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl futures::task::ArcWake for Wakes {
        fn wake_by_ref(me: &std::sync::Arc<Self>) {
            me.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_watcher_at_its_limit_wakes_one_waiting_turn_not_all() {
        use std::future::Future;
        let pressure = Pressure::default();
        let _busy = pressure.storing();
        let mut watcher = Box::pin(pressure.quiet());
        let wakes = std::sync::Arc::new(Wakes::default());
        let waker = futures::task::waker(wakes.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(watcher.as_mut().poll(&mut cx).is_pending());
        assert!(pressure.watching.load(Ordering::SeqCst));
        // Fifty more, later: their own limits come after the watcher's.
        tokio::time::advance(Duration::from_millis(10)).await;
        let others = std::sync::Arc::new(Wakes::default());
        let other = futures::task::waker(others.clone());
        let mut other_cx = std::task::Context::from_waker(&other);
        let mut waiting: Vec<_> = (0..50).map(|_| Box::pin(pressure.quiet())).collect();
        for turn in &mut waiting {
            assert!(turn.as_mut().poll(&mut other_cx).is_pending());
        }
        tokio::time::advance(MOST - Duration::from_millis(10)).await;
        while wakes.0.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        assert!(
            watcher.as_mut().poll(&mut cx).is_ready(),
            "the watcher's limit"
        );
        drop(watcher);
        assert_eq!(
            others.0.load(Ordering::SeqCst),
            1,
            "one turn woken to watch next, the rest left asleep"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_let_through_by_a_lull_waits_again_while_the_intake_is_busy() {
        for stays_busy in [false, true] {
            let pressure = std::sync::Arc::new(Pressure::default());
            // The intake is quiet: two turns take the places, a third
            // waits for one.
            let (first, second) = (pressure.open().await, pressure.open().await);
            let start = tokio::time::Instant::now();
            let third = tokio::spawn({
                let pressure = pressure.clone();
                async move {
                    let _place = pressure.open().await;
                    tokio::time::Instant::now()
                }
            });
            tokio::time::sleep(Duration::from_millis(1)).await;
            // A burst starts; the places are left meanwhile.
            let storing = pressure.storing();
            drop((first, second));
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(!third.is_finished(), "opened in the middle of the burst");
            // Quiet again after 301 ms, or never: then at its limit.
            let least = if stays_busy {
                MOST
            } else {
                drop(storing);
                Duration::from_millis(301)
            };
            let opened = third.await.unwrap() - start;
            assert!(
                opened >= least && opened <= least + LOOK + TICK,
                "{opened:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_of_deliveries_holds_no_turn_back() {
        // Fifty a second, each stored in a millisecond: they never overlap,
        // and a turn asked for 5 ms after one opens at once.
        let pressure = Pressure::default();
        for _ in 0..10 {
            let storing = pressure.storing();
            tokio::time::sleep(Duration::from_millis(1)).await;
            drop(storing);
            tokio::time::sleep(Duration::from_millis(5)).await;
            let start = tokio::time::Instant::now();
            pressure.quiet().await;
            assert_eq!(start.elapsed(), Duration::ZERO);
            tokio::time::sleep(Duration::from_millis(14)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn turns_open_a_few_at_a_time_in_the_order_they_came() {
        let pressure = std::sync::Arc::new(Pressure::default());
        let now = std::sync::Arc::new(AtomicUsize::new(0));
        let most = std::sync::Arc::new(AtomicUsize::new(0));
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut turns = Vec::new();
        for turn in 0..10 {
            let (pressure, now, most, order) =
                (pressure.clone(), now.clone(), most.clone(), order.clone());
            turns.push(tokio::spawn(async move {
                let _place = pressure.open().await;
                order.lock().unwrap().push(turn);
                most.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(3)).await;
                now.fetch_sub(1, Ordering::SeqCst);
            }));
            // Each asks for its place before the next comes.
            tokio::task::yield_now().await;
        }
        for turn in turns {
            turn.await.unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), OPENING);
        assert_eq!(*order.lock().unwrap(), (0..10).collect::<Vec<_>>());

        // The intake busy past the limit: one at a time.
        let _stuck = pressure.storing();
        most.store(0, Ordering::SeqCst);
        let mut turns = Vec::new();
        for _ in 0..4 {
            let (pressure, now, most) = (pressure.clone(), now.clone(), most.clone());
            turns.push(tokio::spawn(async move {
                let _place = pressure.open().await;
                most.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(3)).await;
                now.fetch_sub(1, Ordering::SeqCst);
            }));
        }
        for turn in turns {
            turn.await.unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 1, "one place while busy");
    }
}
