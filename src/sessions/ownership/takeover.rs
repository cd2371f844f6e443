//! Taking sessions over: their leases, the approvals their previous owner
//! left, and their unsent answers and unprocessed events, each read for
//! every session taken at once. A burst of deliveries for sessions not yet
//! live (thousands of pull requests) queues them, and they are taken
//! together once the intake is quiet: a few statements in all, not a few
//! round trips per session beside the intake.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{INBOX_CHANNEL, Ownership, lease, notice};
use crate::sessions::manager::{Inner, SessionManager};
use crate::sessions::worker::{Job, Seed};
use crate::store::StoreError;

/// Most sessions taken in one batch.
pub(super) const BATCH: usize = 500;

/// What [`adopt`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::sessions) enum Adopted {
    /// This replica runs the session already.
    Runs,
    /// It took the session over and started its worker.
    Taken,
    /// Another replica owns it.
    Elsewhere,
}

/// An event just stored here for a session this replica runs no worker
/// for: its job (whose caller waits for it) and its stored JSON, for the
/// notice to the owner should another replica own the session.
pub(super) struct Tracked {
    pub(super) job: Job,
    pub(super) payload: String,
}

/// The sessions the intake found nobody running here, queued to be taken
/// over together.
#[derive(Default)]
pub(super) struct Queue {
    waiting: std::sync::Mutex<Vec<(String, Tracked)>>,
    /// A task takes what is queued (started by the first event queued).
    taking: AtomicBool,
}

impl Queue {
    /// Queues `tracked` for session `key`; true when no task takes the
    /// queue and the caller starts one ([`take_queued`]).
    pub(super) fn push(&self, key: &str, tracked: Tracked) -> bool {
        let mut waiting = self.lock();
        waiting.push((key.to_string(), tracked));
        !self.taking.swap(true, Ordering::SeqCst)
    }

    /// What is queued; empty (and the taking task done) when nothing is.
    fn take(&self) -> Vec<(String, Tracked)> {
        let mut waiting = self.lock();
        if waiting.is_empty() {
            self.taking.store(false, Ordering::SeqCst);
        }
        std::mem::take(&mut *waiting)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, Tracked)>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Takes the queued sessions over, in batches, each once the intake is
/// quiet, until none is queued. Each queued event is counted off once its
/// batch is taken: its session's worker counts it now (or another
/// replica's does).
pub(super) async fn take_queued(inner: Arc<Inner>) {
    let Some(own) = &inner.ownership else {
        return;
    };
    loop {
        inner.pressure.quiet().await;
        let queued = own.queue.take();
        if queued.is_empty() {
            return;
        }
        let mut claims: Vec<(String, Vec<Tracked>)> = Vec::new();
        let mut at: HashMap<String, usize> = HashMap::new();
        for (key, tracked) in queued {
            match at.get(&key) {
                Some(&i) => claims[i].1.push(tracked),
                None => {
                    at.insert(key.clone(), claims.len());
                    claims.push((key, vec![tracked]));
                }
            }
        }
        while !claims.is_empty() {
            let rest = claims.split_off(claims.len().min(BATCH));
            let batch = std::mem::replace(&mut claims, rest);
            let events: usize = batch.iter().map(|(_, tracked)| tracked.len()).sum();
            if let Err(err) = adopt_many(&inner, own, batch).await {
                tracing::warn!(error = %err, "sessions not taken; the sweep finds their events");
            }
            for _ in 0..events {
                inner.mailboxes.processed();
            }
        }
    }
}

/// Takes session `key` if nobody owns it, starting its worker on the
/// session's unprocessed events and unsent answers.
pub(super) async fn adopt(
    inner: &Arc<Inner>,
    own: &Ownership,
    key: &str,
) -> Result<Adopted, StoreError> {
    let found = adopt_many(inner, own, vec![(key.to_string(), Vec::new())]).await?;
    Ok(found.into_iter().next().unwrap_or(Adopted::Elsewhere))
}

/// [`adopt`] of each of `claims`' sessions (distinct keys, at most
/// [`BATCH`]), each with the events just stored here for it whose callers
/// wait: what each found, in order. Such an event of a session not taken
/// here (another replica owns it, or the taking failed) is noticed to the
/// owner, whose sweep would find it otherwise.
pub(super) async fn adopt_many(
    inner: &Arc<Inner>,
    own: &Ownership,
    mut claims: Vec<(String, Vec<Tracked>)>,
) -> Result<Vec<Adopted>, StoreError> {
    debug_assert!(
        claims.len() <= BATCH,
        "{} sessions in one batch",
        claims.len()
    );
    let mut found = vec![Adopted::Elsewhere; claims.len()];
    let taken = take(inner, own, &mut claims, &mut found).await;
    for ((key, tracked), found) in claims.iter().zip(&found) {
        if *found == Adopted::Elsewhere {
            for t in tracked {
                inner
                    .store
                    .notify_soon(INBOX_CHANNEL, notice(t.job.inbox_id, key, &t.payload));
            }
        }
    }
    match taken {
        Ok(expired) => {
            if expired > 0 {
                // Their prompts closed on the platforms, not under the
                // claims' locks.
                inner.broker.close_expired().await;
            }
            Ok(found)
        }
        Err(err) => Err(err),
    }
}

/// [`adopt_many`]'s taking, under the claims' locks: `found` filled in, and
/// how many approvals the sessions taken had left pending.
async fn take(
    inner: &Arc<Inner>,
    own: &Ownership,
    claims: &mut [(String, Vec<Tracked>)],
    found: &mut [Adopted],
) -> Result<usize, StoreError> {
    let manager = SessionManager {
        inner: inner.clone(),
    };
    // Each stripe locked once, in order: another taker locks one at a time.
    let mut stripes: Vec<usize> = claims.iter().map(|(key, _)| own.stripe(key)).collect();
    stripes.sort_unstable();
    stripes.dedup();
    let mut locks = Vec::with_capacity(stripes.len());
    for stripe in stripes {
        locks.push(own.claiming[stripe].lock().await);
    }
    let mut wanted = Vec::new();
    for (i, (key, tracked)) in claims.iter_mut().enumerate() {
        if manager.live_worker(key).is_some() {
            // Started meanwhile (by a notice, the sweep or an earlier
            // batch), perhaps on the inbox's events before these were
            // stored: handed to it again, each is run once (a processed
            // event is skipped when its job starts). The intake already
            // asked whether they answer a question: by now they may have
            // been run.
            for t in tracked.drain(..) {
                manager.deliver(key, t.job);
            }
            found[i] = Adopted::Runs;
        } else if !own.balance.away(key) && !inner.stop.is_cancelled() {
            // One handed to another replica is taken there (or, should it
            // not come, by the sweep once the hand-off's time is up).
            wanted.push(i);
        }
    }
    // A term ends when its lease is lost, not when the daemon stops: a
    // draining replica finishes the running turn and sends its answer
    // under the lease, then hands the session over.
    let names: Vec<String> = wanted.iter().map(|&i| lease(&claims[i].0)).collect();
    let terms = own
        .cluster
        .try_hold_many(&names, &tokio_util::sync::CancellationToken::new())
        .await?;
    let mut won = Vec::new();
    for (i, term) in wanted.into_iter().zip(terms) {
        match term {
            Some(term) => won.push((i, term)),
            None => own.seen_elsewhere(&claims[i].0),
        }
    }
    let mut expired = 0;
    if !won.is_empty() {
        let keys: Vec<&str> = won.iter().map(|(i, _)| claims[*i].0.as_str()).collect();
        // Turns waiting for them died with the sessions' previous owner;
        // expired before the sessions' turns run, which may ask anew.
        match inner.broker.expire_left_by(&keys).await {
            Ok(count) => expired = count,
            Err(err) => {
                tracing::warn!(sessions = keys.len(), error = %err, "approvals left pending not expired");
            }
        }
        let seeds = match read_seeds(&manager, &keys).await {
            Ok(seeds) => seeds,
            Err(err) => {
                for (_, term) in won {
                    own.cluster.release(term).await;
                }
                return Err(err);
            }
        };
        for ((i, term), mut seed) in won.into_iter().zip(seeds) {
            let (key, tracked) = &mut claims[i];
            for t in tracked.drain(..) {
                if let Some(job) = seed.jobs.iter_mut().find(|j| j.inbox_id == t.job.inbox_id) {
                    job.done = t.job.done;
                }
            }
            let jobs = seed.jobs.len();
            let state = inner
                .mailboxes
                .start(key, || manager.spawn_worker(key, seed, Some(term)));
            for _ in 0..jobs {
                manager.enqueued(&state);
            }
            found[i] = Adopted::Taken;
        }
    }
    Ok(expired)
}

/// The work of sessions `keys` as stored, in order: for each, answers not
/// sent, then events not processed, in order.
async fn read_seeds(manager: &SessionManager, keys: &[&str]) -> Result<Vec<Seed>, StoreError> {
    let store = &manager.inner.store;
    let at: HashMap<&str, usize> = keys.iter().enumerate().map(|(i, k)| (*k, i)).collect();
    let mut seeds: Vec<Seed> = keys.iter().map(|_| Seed::default()).collect();
    for row in store.outbox_pending_of(keys).await? {
        if let Some(&i) = at.get(row.session_key.as_str()) {
            seeds[i].owed.push((row.id, row.outbound()));
        }
    }
    for row in store.inbox_pending_of_many(keys).await? {
        let Some(&i) = at.get(row.session_key.as_str()) else {
            continue;
        };
        if let Some(job) = manager.job_of(row).await? {
            seeds[i].jobs.push_back(job);
        }
    }
    Ok(seeds)
}
