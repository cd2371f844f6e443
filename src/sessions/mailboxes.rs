//! The sessions' mailboxes: the only owner of the worker map (which
//! sessions have a worker, the sender of its bounded mailbox and its
//! state), of the count of events waiting across them, and of the bytes
//! of conversation history their workers hold. One session has at most
//! one worker taking jobs: a worker is started under the map's lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc;

use super::worker::{Job, WorkerState};
use crate::telemetry::events;

/// A session's mailbox and what its worker is doing.
pub(super) type Mailbox = (mpsc::Sender<Job>, Arc<WorkerState>);

/// A mailbox found, or the one started because there was none.
pub(super) enum Found {
    /// A worker takes jobs already.
    Live(Mailbox),
    /// None did: this one was started.
    Started(Mailbox),
}

/// Every session's mailbox.
#[derive(Default)]
pub(super) struct Mailboxes {
    workers: Mutex<HashMap<String, Mailbox>>,
    /// Events accepted and not yet processed, across sessions.
    pending: AtomicUsize,
    /// Bytes of conversation history the workers hold (see
    /// `ManagerSettings::history_cache`).
    history_bytes: AtomicUsize,
}

impl Mailboxes {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Mailbox>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sessions with a worker.
    pub(super) fn len(&self) -> usize {
        self.map().len()
    }

    /// Sessions whose conversation is held in memory.
    pub(super) fn loaded(&self) -> usize {
        self.map().values().filter(|(_, s)| s.loaded()).count()
    }

    /// Session `key`'s mailbox while its worker takes jobs.
    pub(super) fn live(&self, key: &str) -> Option<Mailbox> {
        self.map()
            .get(key)
            .filter(|(tx, _)| !tx.is_closed())
            .cloned()
    }

    /// What session `key`'s worker is doing, if it has one (taking jobs
    /// or finishing what it took).
    pub(super) fn state(&self, key: &str) -> Option<Arc<WorkerState>> {
        self.map().get(key).map(|(_, s)| s.clone())
    }

    /// Session `key`'s live mailbox, or the one `start` makes.
    pub(super) fn find_or_start(&self, key: &str, start: impl FnOnce() -> Mailbox) -> Found {
        let mut workers = self.map();
        if let Some(live) = workers.get(key).filter(|(tx, _)| !tx.is_closed()) {
            return Found::Live(live.clone());
        }
        let started = start();
        workers.insert(key.to_string(), started.clone());
        events::emit(events::ActiveSessions(workers.len()));
        Found::Started(started)
    }

    /// Puts the mailbox `start` makes in as session `key`'s (a session
    /// taken over from another replica: whatever was here is done with
    /// it), under the map's lock, so a worker that ends at once still
    /// finds itself there to leave.
    pub(super) fn start(&self, key: &str, start: impl FnOnce() -> Mailbox) -> Arc<WorkerState> {
        let mut workers = self.map();
        let mailbox = start();
        let state = mailbox.1.clone();
        workers.insert(key.to_string(), mailbox);
        events::emit(events::ActiveSessions(workers.len()));
        state
    }

    /// Forgets session `key`'s mailbox (a new conversation starts on the
    /// next event).
    pub(super) fn forget(&self, key: &str) {
        let mut workers = self.map();
        workers.remove(key);
        events::emit(events::ActiveSessions(workers.len()));
    }

    /// Takes the worker with `state` out of the map, unless another has
    /// replaced it there.
    pub(super) fn leave(&self, key: &str, state: &Arc<WorkerState>) {
        let mut workers = self.map();
        if workers.get(key).is_some_and(|(_, s)| Arc::ptr_eq(s, state)) {
            workers.remove(key);
        }
        events::emit(events::ActiveSessions(workers.len()));
    }

    /// The workers that run their session under its lease (several
    /// replicas) and take jobs, by session key.
    pub(super) fn leased(&self) -> Vec<(String, Arc<WorkerState>)> {
        self.map()
            .iter()
            .filter(|(_, (tx, s))| s.leased() && !tx.is_closed())
            .map(|(key, (_, s))| (key.clone(), s.clone()))
            .collect()
    }

    /// Events accepted and not yet processed.
    pub(super) fn pending(&self) -> usize {
        self.pending.load(Ordering::SeqCst)
    }

    /// One more event waiting in `state`'s mailbox.
    pub(super) fn enqueued(&self, state: &WorkerState) {
        state.queued();
        self.waiting();
    }

    /// One more event waiting for its session to be taken over, not in a
    /// mailbox yet; [`processed`](Self::processed) once it is.
    pub(super) fn waiting(&self) {
        let now = self.pending.fetch_add(1, Ordering::SeqCst) + 1;
        events::emit(events::QueueDepth(now));
    }

    /// One fewer event waiting.
    pub(super) fn processed(&self) {
        let left = self
            .pending
            .fetch_sub(1, Ordering::SeqCst)
            .saturating_sub(1);
        events::emit(events::QueueDepth(left));
    }

    /// Bytes of history held across sessions.
    pub(super) fn history_bytes(&self) -> usize {
        self.history_bytes.load(Ordering::SeqCst)
    }

    /// A worker's history went from `was` to `now` bytes; the total held.
    pub(super) fn history_resized(&self, was: usize, now: usize) -> usize {
        if now >= was {
            self.history_bytes.fetch_add(now - was, Ordering::SeqCst) + now - was
        } else {
            self.history_bytes.fetch_sub(was - now, Ordering::SeqCst) - (was - now)
        }
    }
}
