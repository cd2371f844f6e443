//! The session manager: inbound events are authorised, committed to the
//! inbox (duplicates dropped), and handed to their session's single worker
//! on a bounded mailbox; turns of one session run in order, sessions run
//! concurrently. Slash commands and approval answers bypass the queue.
//! Unprocessed inbox events are replayed on start.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::access::{self, Access, AccessRules};
use super::keys::{InboundEvent, KeyRules, session_key};
use super::replier::Replier;
use super::worker::{Job, WorkerState, run_worker};
use crate::agent::AgentDeps;
use crate::approvals::{Actor, Broker, ChatRef};
use crate::config::{BusyInputMode, Config};
use crate::store::{InboxInsert, NewInboxEvent, Store, StoreError};
use crate::tools::ApprovalHook;

/// Tunables of the manager.
#[derive(Debug, Clone, Copy)]
pub struct ManagerSettings {
    /// How group conversations split into sessions.
    pub rules: KeyRules,
    /// Queue or interrupt when a message arrives during a turn.
    pub busy: BusyInputMode,
    /// Messages waiting per session.
    pub queue_cap: usize,
    /// Events accepted and not yet processed, across sessions.
    pub max_pending: usize,
    /// A worker with nothing to do for this long exits.
    pub idle_after: Duration,
    /// Shortest time between two "queued" acknowledgements of a session.
    pub ack_every: Duration,
    /// How often the typing indicator is refreshed during a turn.
    pub working_every: Duration,
}

impl Default for ManagerSettings {
    fn default() -> Self {
        Self::from_config(&Config::default())
    }
}

impl ManagerSettings {
    /// The settings `config` asks for.
    pub fn from_config(config: &Config) -> Self {
        let s = &config.sessions;
        Self {
            rules: KeyRules {
                group_sessions_per_user: s.group_sessions_per_user,
                thread_sessions_per_user: s.thread_sessions_per_user,
            },
            busy: config.agent.busy_input_mode,
            queue_cap: s.queue_cap.max(1),
            max_pending: s.max_pending.max(1),
            idle_after: Duration::from_secs(s.worker_idle_secs.max(1)),
            ack_every: Duration::from_secs(30),
            working_every: Duration::from_secs(4),
        }
    }
}

/// What happened to a submitted event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// Committed and handed to its session.
    Accepted,
    /// Seen before (a redelivery): dropped.
    Duplicate,
    /// Not for an agent (the reason is logged).
    Ignored(&'static str),
    /// An unknown sender was offered pairing.
    Pairing,
    /// A slash command or an approval answer was handled.
    Command,
    /// Too much is waiting (this session's queue or the whole inbox);
    /// nothing was stored, the sender should try again later.
    Busy,
}

/// Inbox events a previous run left unprocessed.
#[derive(Debug)]
pub struct Backlog(Vec<crate::store::InboxRow>);

impl Backlog {
    /// How many events.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

pub(super) struct Worker {
    pub(super) tx: mpsc::Sender<Job>,
    pub(super) state: Arc<WorkerState>,
}

pub(super) struct Inner {
    pub(super) store: Store,
    pub(super) deps: Arc<AgentDeps>,
    pub(super) config: Config,
    pub(super) replier: Arc<dyn Replier>,
    pub(super) approvals: Arc<dyn ApprovalHook>,
    pub(super) broker: std::sync::OnceLock<Arc<Broker>>,
    pub(super) settings: ManagerSettings,
    pub(super) workers: Mutex<HashMap<String, Worker>>,
    pub(super) pending: AtomicUsize,
    pub(super) tracker: TaskTracker,
    pub(super) stop: CancellationToken,
}

impl Inner {
    pub(super) fn workers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Worker>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One fewer event waiting.
    pub(super) fn processed(&self) {
        let left = self
            .pending
            .fetch_sub(1, Ordering::SeqCst)
            .saturating_sub(1);
        metrics::gauge!("switchboard_queue_depth").set(left as f64);
    }
}

/// The session manager; cheap to clone.
#[derive(Clone)]
pub struct SessionManager {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for SessionManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionManager")
            .field("active_sessions", &self.active_sessions())
            .field("pending", &self.pending())
            .finish_non_exhaustive()
    }
}

const BUSY: &str = "I'm still working on earlier messages; please send this again in a moment.";
const QUEUED: &str = "Got it — I'll get to this as soon as I finish the current request.";

impl SessionManager {
    /// A manager over `deps`; `approvals` is the terminal tools' hook.
    /// Workers stop taking new events when `stop` fires; a running turn is
    /// left to finish (its event is replayed on the next start if it
    /// cannot).
    pub fn new(
        config: Config,
        deps: Arc<AgentDeps>,
        replier: Arc<dyn Replier>,
        approvals: Arc<dyn ApprovalHook>,
        settings: ManagerSettings,
        stop: CancellationToken,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store: deps.store.clone(),
                deps,
                config,
                replier,
                approvals,
                broker: std::sync::OnceLock::new(),
                settings,
                workers: Mutex::new(HashMap::new()),
                pending: AtomicUsize::new(0),
                tracker: TaskTracker::new(),
                stop,
            }),
        }
    }

    /// Routes `/approve` and `/deny` (and `!approve`, `!deny`) to `broker`
    /// (the first broker given stays).
    pub fn with_broker(self, broker: Arc<Broker>) -> Self {
        let _ = self.inner.broker.set(broker);
        self
    }

    /// Sessions with a live worker.
    pub fn active_sessions(&self) -> usize {
        self.inner.workers().len()
    }

    /// Events accepted and not yet processed.
    pub fn pending(&self) -> usize {
        self.inner.pending.load(Ordering::SeqCst)
    }

    /// Waits until every worker has exited (after `stop`).
    pub async fn wait(&self) {
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }

    /// Authorises, commits and routes one inbound event.
    pub async fn submit(&self, event: InboundEvent) -> Result<Submitted, StoreError> {
        Ok(self.submit_tracked(event).await?.0)
    }

    /// Like [`submit`](Self::submit); for an accepted event also returns a
    /// receiver that fires once it has been processed.
    pub async fn submit_tracked(
        &self,
        event: InboundEvent,
    ) -> Result<(Submitted, Option<oneshot::Receiver<()>>), StoreError> {
        let inner = &self.inner;
        let rules = AccessRules::for_platform(&inner.config, &event.platform);
        match access::check(&rules, &event, &inner.store).await? {
            Access::Allowed => {}
            Access::Ignored(reason) => {
                tracing::debug!(platform = %event.platform, user = %event.user_id, reason, "event ignored");
                return Ok((Submitted::Ignored(reason), None));
            }
            Access::NeedsPairing => {
                let outcome = access::request_code(&inner.store, &event).await?;
                inner
                    .replier
                    .reply(&event, &access::pairing_message(&outcome))
                    .await;
                return Ok((Submitted::Pairing, None));
            }
        }
        if self.approval_answer(&event).await {
            return Ok((Submitted::Command, None));
        }
        let key = session_key(&event, inner.settings.rules);
        if self.command(&key, &event).await? {
            return Ok((Submitted::Command, None));
        }
        metrics::counter!("switchboard_events_total", "platform" => event.platform.clone())
            .increment(1);

        let (tx, state) = self.worker(&key);
        let permit = if self.pending() >= inner.settings.max_pending {
            None
        } else {
            tx.try_reserve_owned().ok()
        };
        let Some(permit) = permit else {
            tracing::warn!(session.key = %key, pending = self.pending(), "busy: event refused");
            metrics::counter!("switchboard_events_refused_total", "platform" => event.platform.clone())
                .increment(1);
            inner.replier.busy(&event, BUSY).await;
            return Ok((Submitted::Busy, None));
        };
        let payload = serde_json::to_string(&event).unwrap_or_default();
        let dedupe = format!("{}:{}", event.platform, event.event_id);
        let inserted = inner
            .store
            .inbox_insert(&NewInboxEvent {
                platform: &event.platform,
                dedupe_key: &dedupe,
                session_key: &key,
                payload: &payload,
            })
            .await?;
        let InboxInsert::Inserted(inbox_id) = inserted else {
            return Ok((Submitted::Duplicate, None));
        };
        let was_busy = state.busy() || state.waiting() > 0;
        if was_busy {
            match inner.settings.busy {
                BusyInputMode::Interrupt => {
                    state.interrupt();
                }
                BusyInputMode::Queue => {
                    if state.should_ack(inner.settings.ack_every) {
                        inner.replier.notice(&event, QUEUED).await;
                    }
                }
            }
        }
        let (done, rx) = oneshot::channel();
        self.enqueued(&state);
        permit.send(Job {
            inbox_id,
            event,
            done: Some(done),
        });
        Ok((Submitted::Accepted, Some(rx)))
    }

    /// Replays inbox events left unprocessed by a previous run, in order.
    /// Call before intake starts, or use [`backlog`](Self::backlog) and
    /// [`requeue`](Self::requeue) to take the snapshot first and route it
    /// beside intake.
    pub async fn replay(&self) -> Result<usize, StoreError> {
        let backlog = self.backlog().await?;
        self.requeue(backlog).await
    }

    /// The events left unprocessed by a previous run. Take it before intake
    /// starts, so that nothing accepted by this run is replayed as well.
    pub async fn backlog(&self) -> Result<Backlog, StoreError> {
        Ok(Backlog(self.inner.store.inbox_pending(100_000).await?))
    }

    /// Hands a backlog to its sessions, in order, waiting for room in each
    /// mailbox; run it beside intake.
    pub async fn requeue(&self, backlog: Backlog) -> Result<usize, StoreError> {
        let pending = backlog.0;
        let count = pending.len();
        for row in pending {
            let event = match serde_json::from_str::<InboundEvent>(&row.payload) {
                Ok(event) => event,
                Err(err) => {
                    tracing::warn!(inbox.id = row.id, error = %err, "unreadable inbox event skipped");
                    self.inner
                        .store
                        .inbox_mark_processed(row.id, "unreadable")
                        .await?;
                    continue;
                }
            };
            let (tx, state) = self.worker(&row.session_key);
            self.enqueued(&state);
            let job = Job {
                inbox_id: row.id,
                event,
                done: None,
            };
            tokio::select! {
                sent = tx.send(job) => if sent.is_err() {
                    self.inner.processed();
                    break;
                },
                _ = self.inner.stop.cancelled() => break,
            }
        }
        Ok(count)
    }

    fn enqueued(&self, state: &WorkerState) {
        state.queued();
        let now = self.inner.pending.fetch_add(1, Ordering::SeqCst) + 1;
        metrics::gauge!("switchboard_queue_depth").set(now as f64);
    }

    /// `/approve …`, `/deny …`, `!approve …`, `!deny …`: answered here,
    /// never queued behind the turn that waits for them.
    async fn approval_answer(&self, event: &InboundEvent) -> bool {
        let inner = &self.inner;
        let chat = ChatRef {
            platform: event.platform.clone(),
            chat: event.chat_id.clone(),
            thread: event.thread_id.clone(),
        };
        let actor = Actor {
            platform: event.platform.clone(),
            user_id: event.user_id.clone(),
            name: event.user_name.clone(),
        };
        let answer = match inner.broker.get() {
            Some(broker) => broker.resolve_text(&chat, &actor, &event.text).await,
            None => {
                let t = event.text.trim_start();
                let word = t
                    .strip_prefix('/')
                    .or_else(|| t.strip_prefix('!'))
                    .and_then(|w| w.split_whitespace().next())
                    .map(|w| w.split('@').next().unwrap_or(w));
                matches!(word, Some("approve" | "deny"))
                    .then_some(Err(crate::approvals::Refusal::NothingPending))
            }
        };
        let Some(answer) = answer else {
            return false;
        };
        let text = match answer {
            Ok(decision) => format!("Done: {}.", decision.describe()),
            Err(refusal) => refusal.to_string(),
        };
        inner.replier.reply(event, &text).await;
        true
    }

    /// The worker of `key`, started if there is none.
    fn worker(&self, key: &str) -> (mpsc::Sender<Job>, Arc<WorkerState>) {
        let mut workers = self.inner.workers();
        if let Some(w) = workers.get(key)
            && !w.tx.is_closed()
        {
            return (w.tx.clone(), w.state.clone());
        }
        let (tx, rx) = mpsc::channel(self.inner.settings.queue_cap);
        let state = Arc::new(WorkerState::default());
        self.inner.tracker.spawn(run_worker(
            self.inner.clone(),
            key.to_string(),
            rx,
            state.clone(),
        ));
        workers.insert(
            key.to_string(),
            Worker {
                tx: tx.clone(),
                state: state.clone(),
            },
        );
        metrics::gauge!("switchboard_active_sessions").set(workers.len() as f64);
        (tx, state)
    }

    pub(super) fn running_turn(&self, key: &str) -> Option<Arc<WorkerState>> {
        self.inner.workers().get(key).map(|w| w.state.clone())
    }
}
