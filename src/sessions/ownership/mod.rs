//! Sessions among several replicas (PostgreSQL): one replica at a time
//! owns a session, by holding its lease `session:<key>`, and only the
//! owner runs its turns, in inbox order. An event taken by another replica
//! is stored and the owner is told (NOTIFY on [`INBOX_CHANNEL`]); an event
//! for a session nobody owns makes the replica that stored it the owner,
//! which reads the session's unprocessed events and unsent answers from
//! the inbox and the outbox. A worker that goes idle gives its lease up
//! and looks once more for events that arrived meanwhile; every replica
//! also sweeps for sessions with work and no owner (their owner died, or a
//! notice went astray), so nothing waits longer than a lease. A replica
//! owning more than its share hands sessions over between turns
//! (`balance`).
//!
//! With one replica none of this runs: the session's worker is the only
//! one there can be.

pub(super) mod balance;
mod takeover;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::oneshot;

use super::manager::{Inner, SessionManager, Submitted};
use super::recent::Recent;
use super::worker::Job;
use crate::cluster::relay::Relay;
use crate::cluster::{Cluster, Term};
use crate::platform::InboundEvent;
use crate::store::{Fence, StoreError};
use takeover::{Adopted, Tracked, adopt};

/// Where a replica tells the others of an event it stored: `<id> <key>`.
pub const INBOX_CHANNEL: &str = "switchboard_inbox";

/// How often a replica looks for sessions nobody owns.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How long a session found owned by another replica is taken to stay
/// so: its next events go to the owner without trying for the lease (were
/// it given up meanwhile, the owner takes it again or the sweep finds it).
const OWNED_ELSEWHERE: Duration = Duration::from_secs(1);

/// Most sessions remembered as owned elsewhere.
const ELSEWHERE_ENTRIES: usize = 10_000;

/// This replica's part in sharing sessions with the others; the manager
/// has one only when sessions are shared.
pub(super) struct Ownership {
    /// This replica among the others.
    cluster: Cluster,
    /// Where presses for questions asked on another replica go.
    relay: OnceLock<Arc<Relay>>,
    /// Sessions lately found owned by another replica.
    elsewhere: Recent,
    /// The sessions handed to others.
    balance: balance::Balance,
    /// Serialises taking a session over, so it is started once here: a
    /// lock per stripe of session keys, so taking one session never waits
    /// for taking another (each costs a few round trips to the database).
    claiming: [tokio::sync::Mutex<()>; CLAIM_STRIPES],
    /// Sessions the intake found nobody running, to be taken over.
    queue: takeover::Queue,
}

/// Stripes of session keys taken over one at a time.
const CLAIM_STRIPES: usize = 64;

impl Ownership {
    /// Sessions shared through `cluster`; `None` when it is this replica
    /// alone.
    pub(super) fn of(cluster: Cluster) -> Option<Self> {
        cluster.is_shared().then(|| Self {
            cluster,
            relay: OnceLock::new(),
            elsewhere: Recent::new(OWNED_ELSEWHERE, ELSEWHERE_ENTRIES),
            balance: balance::Balance::default(),
            claiming: std::array::from_fn(|_| tokio::sync::Mutex::new(())),
            queue: takeover::Queue::default(),
        })
    }

    /// The stripe of [`claiming`](Self::claiming) that serialises taking
    /// session `key` over.
    fn stripe(&self, key: &str) -> usize {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        key.hash(&mut hasher);
        (hasher.finish() % CLAIM_STRIPES as u64) as usize
    }

    /// The fence a turn under `term` commits behind.
    pub(super) fn fence(&self, term: &Term) -> Option<Fence> {
        self.cluster.fence(term)
    }

    /// A turn started here (reported to the others).
    pub(super) fn turn_started(&self) {
        self.cluster.turn_started();
    }

    /// A turn ended here.
    pub(super) fn turn_ended(&self) {
        self.cluster.turn_ended();
    }

    /// Gives a session's lease up; false when it was lost already.
    pub(super) async fn release(&self, term: Term) -> bool {
        self.cluster.release(term).await
    }

    /// Whether session `key` was found owned by another replica lately.
    fn owned_elsewhere(&self, key: &str) -> bool {
        self.elsewhere.holds(key)
    }

    fn seen_elsewhere(&self, key: &str) {
        self.elsewhere.note(key);
    }
}

/// An event of an owned session stored this long ago and not processed
/// while its worker idles was not handed to it.
const MISSED_AFTER_MS: i64 = 2000;

/// An event stored this long ago whose session nobody owns was not taken
/// over by its replica (which died, or could not): the sweep takes it. Its
/// replica waits up to [`MOST`](super::pressure::MOST) for the intake's
/// quiet first.
const UNOWNED_AFTER_MS: i64 = 2000;

/// The relay kind of a question's button pressed on another replica.
const QUESTION: &str = "question";
/// The relay kind of an edit or deletion of a message whose session runs
/// on another replica.
const REVISION: &str = "revision";

/// Largest event carried in a notice (PostgreSQL's payloads hold 8000
/// bytes); a larger one is read from the inbox by its owner.
const NOTICE_EVENT_BYTES: usize = 7000;

/// The notice of event `id` of session `key`: `<id> <key>`, then the event
/// (its stored JSON) on the next line when it is small enough.
fn notice(id: i64, key: &str, event: &str) -> String {
    if event.len() + key.len() <= NOTICE_EVENT_BYTES {
        format!("{id} {key}\n{event}")
    } else {
        format!("{id} {key}")
    }
}

/// The lease of session `key`.
fn lease(key: &str) -> String {
    format!("session:{key}")
}

impl SessionManager {
    /// [`enqueue`](Self::enqueue) for a session this replica runs no
    /// worker for, with several replicas: stores the event, then takes the
    /// session (when nobody owns it) or tells its owner.
    pub(super) async fn enqueue_shared(
        &self,
        own: &Ownership,
        key: &str,
        event: InboundEvent,
        dedupe: &str,
    ) -> Result<(Submitted, Option<oneshot::Receiver<()>>), StoreError> {
        let inner = &self.inner;
        if self.pending() >= inner.settings.max_pending {
            crate::telemetry::events::emit(crate::telemetry::events::EventRefused {
                platform: &event.platform,
                session_key: key,
                pending: self.pending(),
            });
            return Ok((Submitted::Busy, None));
        }
        let Some((inbox_id, payload)) = self.store_event(key, &event, dedupe).await? else {
            return Ok((Submitted::Duplicate, None));
        };
        if own.owned_elsewhere(key) {
            // The owner reads it from the inbox; should the notice go
            // astray, the owner's sweep finds it.
            inner
                .store
                .notify_soon(INBOX_CHANNEL, notice(inbox_id, key, &payload));
            return Ok((Submitted::Accepted, None));
        }
        if inner.stop.is_cancelled() {
            // Stopping: the event is stored, for the next owner.
            return Ok((Submitted::Accepted, None));
        }
        // Taking the session over costs a few statements and opens a turn:
        // not on the sender's time, after the deliveries being stored
        // (`pressure`), and together with the other sessions found so.
        let (done, rx) = oneshot::channel();
        let job = Job {
            inbox_id,
            event: Box::new(event),
            resumed: false,
            done: Some(done),
        };
        // Waiting, it counts against `max_pending` as a queued event does.
        inner.mailboxes.waiting();
        if own.queue.push(key, Tracked { job, payload }) {
            inner.tracker.spawn(takeover::take_queued(inner.clone()));
        }
        Ok((Submitted::Accepted, Some(rx)))
    }

    /// Sends presses for questions this replica did not ask through
    /// `relay`, and answers the others' for those it did.
    pub fn relay_through(&self, relay: &std::sync::Arc<crate::cluster::relay::Relay>) {
        relay.handle(
            QUESTION,
            std::sync::Arc::new(Answerer(std::sync::Arc::downgrade(&self.inner))),
        );
        relay.handle(
            REVISION,
            std::sync::Arc::new(Reviser(std::sync::Arc::downgrade(&self.inner))),
        );
        if let Some(own) = &self.inner.ownership {
            let _ = own.relay.set(relay.clone());
        }
    }

    /// `press` on a question another replica asked: its answer there, or
    /// `None` when no replica holds the question (nor a relay exists). The
    /// answer is [`SessionManager::press`]'s, words for the presser.
    pub(super) async fn relay_press(&self, press: &super::Press) -> Option<Result<String, String>> {
        let relay = self.inner.ownership.as_ref()?.relay.get()?;
        let body = serde_json::json!({"data": press.data, "user": press.actor.user_id}).to_string();
        match relay.ask(QUESTION, body).await {
            Ok(Some(answer)) => serde_json::from_str(&answer).ok(),
            Ok(None) => None,
            Err(err) => {
                tracing::warn!(error = %err, "question press not relayed");
                None
            }
        }
    }

    /// Hands `change` to event `id` of session `key` to the replica that
    /// runs the session: where that replica found the event, or `None`
    /// when none does (nor a relay exists).
    pub(super) async fn relay_revision(
        &self,
        key: &str,
        id: i64,
        change: &super::revisions::Change,
    ) -> Option<super::revisions::Found> {
        let relay = self.inner.ownership.as_ref()?.relay.get()?;
        let body = serde_json::json!({"key": key, "id": id, "change": change}).to_string();
        match relay.ask(REVISION, body).await {
            Ok(Some(found)) => serde_json::from_str(&found).ok(),
            Ok(None) => None,
            Err(err) => {
                tracing::warn!(session.key = %key, error = %err, "message change not relayed");
                None
            }
        }
    }

    /// Takes every session that has work and no owner (or whose lease is
    /// still this replica's without a worker here), and has the workers of
    /// this replica's sessions read the events they were not handed (their
    /// notice went astray). Returns how many it took.
    pub async fn sweep(&self) -> Result<usize, StoreError> {
        let Some(own) = &self.inner.ownership else {
            return Ok(0);
        };
        let store = &self.inner.store;
        // Not the events the intake is still about to take over itself.
        let mut keys = store.sessions_unowned(256, UNOWNED_AFTER_MS).await?;
        let missed = store
            .sessions_owned_waiting(own.cluster.id(), MISSED_AFTER_MS)
            .await?;
        for key in missed {
            match self.live_worker(&key) {
                Some((_, state)) if !state.busy() && state.waiting() == 0 => {
                    tracing::debug!(session.key = %key, "events not handed to the worker; it reads them");
                    state.nudge();
                }
                Some(_) => {}
                // Its lease is still this replica's in storage, but its
                // worker ended (the lease could not be renewed for a while):
                // taken again now instead of once the lease lapses.
                None if !keys.contains(&key) => keys.push(key),
                None => {}
            }
        }
        let mut taken = 0;
        for keys in keys.chunks(takeover::BATCH) {
            let claims = keys.iter().map(|key| (key.clone(), Vec::new())).collect();
            let found = takeover::adopt_many(&self.inner, own, claims).await?;
            taken += found.iter().filter(|f| **f == Adopted::Taken).count();
        }
        Ok(taken)
    }

    /// With several replicas: hands the events other replicas store for
    /// this one's sessions to their workers, and sweeps for sessions nobody
    /// owns, until the daemon stops. Returns at once with one replica.
    pub async fn coordinate(self) {
        let Some(own) = &self.inner.ownership else {
            return;
        };
        let stop = self.inner.stop.clone();
        let mut listener = None;
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut share = tokio::time::interval(balance::REBALANCE_EVERY);
        share.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if listener.is_none() {
                let listening = tokio::select! {
                    _ = stop.cancelled() => {
                        own.cluster.draining().await;
                        return;
                    }
                    l = self.inner.store.listen(&[INBOX_CHANNEL, balance::HANDOFF_CHANNEL]) => l,
                };
                match listening {
                    Ok(l) => listener = l,
                    Err(err) => {
                        tracing::warn!(error = %err, "not listening for other replicas' events; sweeping only")
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => {
                    own.cluster.draining().await;
                    return;
                }
                _ = sweep.tick() => {
                    if let Err(err) = self.sweep().await {
                        tracing::warn!(error = %err, "sweep for unowned sessions failed");
                    }
                }
                _ = share.tick() => {
                    if let Err(err) = self.rebalance().await {
                        tracing::warn!(error = %err, "sessions not counted for sharing");
                    }
                }
                told = async { listener.as_mut()?.try_recv().await.transpose() }, if listener.is_some() => match told {
                    Some(Ok(n)) if self.inner.store.is_channel(n.channel(), balance::HANDOFF_CHANNEL) => self.handed(n.payload()).await,
                    Some(Ok(n)) => self.told(n.payload()).await,
                    Some(Err(err)) => {
                        tracing::warn!(error = %err, "listening for other replicas' events failed; listening again");
                        listener = None;
                    }
                    None => listener = None,
                },
            }
        }
    }

    /// Another replica stored event `<id> <key>`: if this replica runs the
    /// session, its worker gets the event.
    async fn told(&self, payload: &str) {
        let (head, event) = payload.split_once('\n').unwrap_or((payload, ""));
        let Some((id, key)) = head
            .split_once(' ')
            .and_then(|(id, key)| Some((id.parse::<i64>().ok()?, key)))
        else {
            return;
        };
        // Every replica is told of every event; only the owner reads it.
        if self.live_worker(key).is_none() {
            return;
        }
        match serde_json::from_str::<InboundEvent>(event) {
            Ok(event) => {
                let job = Job {
                    inbox_id: id,
                    event: Box::new(event),
                    resumed: false,
                    done: None,
                };
                self.hand_job(key, job).await;
            }
            Err(_) => self.hand_over(id, key, None).await,
        }
    }

    /// Hands stored event `id` to session `key`'s worker, if one runs here;
    /// `done` fires once it is processed.
    async fn hand_over(&self, id: i64, key: &str, done: Option<oneshot::Sender<()>>) {
        if self.live_worker(key).is_none() {
            return;
        }
        let row = match self.inner.store.inbox_event(id).await {
            Ok(Some(row)) if row.processed_at.is_none() => row,
            Ok(_) => return,
            Err(err) => {
                tracing::warn!(inbox.id = id, error = %err, "event of another replica not read; the sweep finds it");
                return;
            }
        };
        if let Ok(Some(mut job)) = self.job_of(row).await {
            job.done = done;
            self.hand_job(key, job).await;
        }
    }

    /// Hands `job` to session `key`'s worker, if one runs here, unless it
    /// answers a question the session's turn asked here.
    async fn hand_job(&self, key: &str, mut job: Job) {
        let id = job.inbox_id;
        let event = &job.event;
        if self.live_worker(key).is_some()
            && event.revision.is_new()
            && crate::platform::ChatCommand::parse(&event.text).is_none()
            && let Some(answered) =
                self.inner
                    .questions
                    .answer_text(&event.chat(), &event.user_id, &event.text)
        {
            // The answer to a question the session's turn asked here.
            if let Err(err) = self.inner.store.inbox_mark_processed(id, "answer").await {
                tracing::warn!(inbox.id = id, error = %err, "answer not marked processed");
            }
            self.close_question(answered).await;
            if let Some(done) = job.done.take() {
                let _ = done.send(());
            }
            return;
        }
        self.deliver(key, job);
    }

    /// Puts `job` in session `key`'s mailbox, if its worker runs here and
    /// has not fallen behind (it then reads the inbox in order).
    fn deliver(&self, key: &str, job: Job) {
        let Some((tx, state)) = self.live_worker(key) else {
            return;
        };
        if state.behind() {
            return;
        }
        self.enqueued(&state);
        if let Err(err) = tx.try_send(job) {
            self.inner.mailboxes.processed();
            state.unqueued();
            if matches!(err, tokio::sync::mpsc::error::TrySendError::Full(_)) {
                state.fell_behind();
            }
        }
    }
}

/// Session `key`'s events in the inbox, for its worker that fell behind
/// (see `WorkerState::behind`), counted as waiting.
pub(super) async fn catch_up(
    inner: &std::sync::Arc<Inner>,
    key: &str,
    state: &super::worker::WorkerState,
) -> std::collections::VecDeque<super::worker::Job> {
    let manager = SessionManager {
        inner: inner.clone(),
    };
    let mut jobs = std::collections::VecDeque::new();
    match inner.store.inbox_pending_of(key).await {
        Ok(rows) => {
            for row in rows {
                if let Ok(Some(job)) = manager.job_of(row).await {
                    manager.enqueued(state);
                    jobs.push_back(job);
                }
            }
        }
        Err(err) => {
            tracing::warn!(session.key = %key, error = %err, "events not read from the inbox; trying again later");
            state.fell_behind();
        }
    }
    jobs
}

/// After session `key`'s worker gave its lease up: takes the session again
/// if events arrived for it meanwhile (their replica found it owned and
/// told this one, which had stopped listening for it).
pub(super) async fn adopt_left(inner: &Arc<Inner>, key: &str) {
    let Some(own) = &inner.ownership else {
        return;
    };
    if inner.stop.is_cancelled() {
        return;
    }
    let left = match inner.store.inbox_pending_of(key).await {
        Ok(rows) => !rows.is_empty(),
        Err(err) => {
            tracing::warn!(session.key = %key, error = %err, "events left behind not looked for; the sweep finds them");
            return;
        }
    };
    if left && let Err(err) = adopt(inner, own, key).await {
        tracing::warn!(session.key = %key, error = %err, "session not taken again; the sweep finds it");
    }
}

/// Answers presses relayed from other replicas for this one's questions.
struct Answerer(std::sync::Weak<Inner>);

impl crate::cluster::relay::Handler for Answerer {
    fn answer(
        &self,
        body: String,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send + '_>> {
        Box::pin(async move {
            let press: serde_json::Value = serde_json::from_str(&body).ok()?;
            let (data, user) = (press["data"].as_str()?, press["user"].as_str()?);
            let inner = self.0.upgrade()?;
            if !inner.questions.holds(data) {
                return None;
            }
            let result = match inner.questions.answer_button(data, user) {
                Ok(answered) => {
                    let answer = answered.answer.clone();
                    SessionManager { inner }.close_question(answered).await;
                    Ok(answer)
                }
                Err(why) => Err(why.to_string()),
            };
            serde_json::to_string(&result).ok()
        })
    }
}

/// Applies edits and deletions relayed from other replicas to the
/// sessions this one runs.
struct Reviser(std::sync::Weak<Inner>);

impl crate::cluster::relay::Handler for Reviser {
    fn answer(
        &self,
        body: String,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send + '_>> {
        Box::pin(async move {
            let asked: serde_json::Value = serde_json::from_str(&body).ok()?;
            let key = asked["key"].as_str()?;
            let id = asked["id"].as_i64()?;
            let change = serde_json::from_value(asked["change"].clone()).ok()?;
            let inner = self.0.upgrade()?;
            let found = super::revisions::apply(&inner, key, id, change)?;
            serde_json::to_string(&found).ok()
        })
    }
}
