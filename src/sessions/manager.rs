//! The session manager: the workers. Each session has a single worker on
//! a bounded mailbox; turns of one session run in order, sessions run
//! concurrently. Events reach the mailboxes through the intake
//! (`intake.rs`); unprocessed inbox events are replayed on start.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::keys::KeyRules;
use super::mailboxes::{Found, Mailbox, Mailboxes};
use super::ownership::Ownership;
use super::questions::Questions;
use super::replies::Replies;
use super::worker::{Job, Seed, WorkerState, run_worker};
use crate::agent::AgentDeps;
use crate::approvals::Broker;
use crate::cluster::{Cluster, Term};
use crate::config::{BusyInputMode, Config};
use crate::platform::{InboundEvent, Platforms};
use crate::store::{Store, StoreError};
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
    /// Past this many live workers, one that holds nothing exits once it
    /// has been idle for `unload_after`.
    pub idle_workers: usize,
    /// How long an idle worker keeps its conversation loaded; after that
    /// it is read again from storage on the next message, so the memory of
    /// sessions nobody is talking to goes back.
    pub unload_after: Duration,
    /// Bytes of conversation history held across sessions; past it, a
    /// worker with nothing waiting drops its conversation after its turn.
    pub history_cache: usize,
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
            idle_workers: s.max_idle_workers,
            unload_after: Duration::from_secs(30),
            history_cache: usize::try_from(s.history_cache_mb.saturating_mul(1 << 20))
                .unwrap_or(usize::MAX),
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
    /// Its sender or chat is past its rate limit; nothing was stored.
    Throttled,
    /// Its user, chat or route is past a budget cap: not run (a webhook
    /// event is stored as over budget, a chat message is not).
    OverBudget,
}

/// What a previous run left undone: inbox events it did not process, and
/// answers it stored but did not send.
#[derive(Debug)]
pub struct Backlog {
    events: Vec<crate::store::InboxRow>,
    owed: Vec<crate::store::OutboxRow>,
}

impl Backlog {
    /// How many events.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether there are no events.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// How many messages were stored and not sent.
    pub fn owed(&self) -> usize {
        self.owed.len()
    }
}

/// The manager's parts. The handles are fixed when it is made and only
/// read; what changes lives in parts that own it behind private fields:
/// the mailboxes (the worker map), the ownership of sessions among
/// replicas (absent with one), the throttle and the questions asked.
pub(super) struct Inner {
    pub(super) store: Store,
    pub(super) deps: Arc<AgentDeps>,
    pub(super) config: Config,
    pub(super) replies: Replies,
    pub(super) questions: Arc<Questions>,
    pub(super) approvals: Arc<dyn ApprovalHook>,
    /// Where `/approve`, `/deny` and approval buttons are decided.
    pub(super) broker: Arc<Broker>,
    /// With several replicas: this one's part in sharing the sessions.
    pub(super) ownership: Option<Ownership>,
    /// Per-sender and per-chat rate limits.
    pub(super) throttle: super::throttle::Throttle,
    /// Where voice notes are heard (none: they are not).
    pub(super) transcriber: Option<crate::transcription::Transcriber>,
    /// Where a run's forge desk comes from (the webhook routes' forges).
    pub(super) forges: Option<Arc<dyn crate::agent::layer::ForgeDesks>>,
    /// Where "now" comes from for budget windows, resets and schedules.
    pub(super) clock: crate::clock::Clock,
    /// Wakes the scheduler when a chat makes or resumes a job.
    pub(super) cron_wake: Arc<tokio::sync::Notify>,
    pub(super) settings: ManagerSettings,
    /// The sessions' mailboxes and workers.
    pub(super) mailboxes: Mailboxes,
    /// Deliveries being stored, which turns about to open wait for.
    pub(super) pressure: super::pressure::Pressure,
    pub(super) tracker: TaskTracker,
    pub(super) stop: CancellationToken,
}

impl Inner {
    pub(super) fn platforms(&self) -> &Arc<Platforms> {
        self.replies.platforms()
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

/// What the manager works with beside its agents, all given at the start.
pub struct Links {
    /// The terminal tools' approval hook.
    pub approvals: Arc<dyn ApprovalHook>,
    /// Where `/approve`, `/deny` and approval buttons are decided.
    pub broker: Arc<Broker>,
    /// This replica among the others ([`Cluster::single`] on SQLite).
    pub cluster: Cluster,
    /// Where voice notes are heard; without one, their senders are told
    /// they cannot be.
    pub transcriber: Option<crate::transcription::Transcriber>,
    /// Where a run's forge desk comes from (the webhook routes' forges,
    /// whose read tools their runs get).
    pub forges: Option<Arc<dyn crate::agent::layer::ForgeDesks>>,
    /// Where "now" comes from for budget windows, resets and schedules.
    pub clock: crate::clock::Clock,
}

impl Links {
    /// Links to `broker` alone: one replica, no voice, no forges.
    pub fn single(approvals: Arc<dyn ApprovalHook>, broker: Arc<Broker>) -> Self {
        Self {
            approvals,
            broker,
            cluster: Cluster::single(),
            transcriber: None,
            forges: None,
            clock: crate::clock::Clock::system(),
        }
    }
}

impl SessionManager {
    /// A manager over `deps` (whose tool runtime holds the platforms
    /// sessions answer through) and `links`. Workers stop taking new
    /// events when `stop` fires; a running turn is left to finish (its
    /// event is replayed on the next start if it cannot).
    pub fn new(
        config: Config,
        deps: Arc<AgentDeps>,
        links: Links,
        settings: ManagerSettings,
        stop: CancellationToken,
    ) -> Self {
        let Links {
            approvals,
            broker,
            cluster,
            transcriber,
            forges,
            clock,
        } = links;
        let throttle = super::throttle::Throttle::new(&config.sessions);
        Self {
            inner: Arc::new(Inner {
                store: deps.store.clone(),
                replies: Replies::new(deps.tools.platforms.clone()),
                questions: Arc::new(Questions::default()),
                deps,
                config,
                approvals,
                broker,
                ownership: Ownership::of(cluster),
                transcriber,
                forges,
                clock,
                throttle,
                cron_wake: Arc::new(tokio::sync::Notify::new()),
                settings,
                mailboxes: Mailboxes::default(),
                pressure: Default::default(),
                tracker: TaskTracker::new(),
                stop,
            }),
        }
    }

    /// Fires when the daemon stops.
    pub fn stopping(&self) -> CancellationToken {
        self.inner.stop.clone()
    }

    /// Whether `err`, from submitting an event, is storage being away
    /// (the event can be submitted again once it is back), rather than
    /// something wrong with the event.
    pub async fn storage_away(&self, err: &StoreError) -> bool {
        self.inner.store.failed_from_away(err).await
    }

    /// Waits until storage takes writes again; false when `stop` comes
    /// first.
    pub async fn storage_back(&self, stop: &CancellationToken) -> bool {
        self.inner.store.until_back(stop).await
    }

    /// `platform`'s events among the newest `window` stored, oldest
    /// first, with when each arrived: where a platform that cannot replay
    /// its own traffic catches up from after a restart.
    pub async fn recent_events(
        &self,
        platform: &str,
        window: i64,
    ) -> Result<Vec<(InboundEvent, i64)>, StoreError> {
        let rows = self.inner.store.inbox_latest(platform, window).await?;
        Ok(rows
            .into_iter()
            .filter_map(|row| {
                let event = serde_json::from_str::<InboundEvent>(&row.payload).ok()?;
                Some((event, row.received_at))
            })
            .collect())
    }

    /// Where "now" comes from for budget windows, resets and schedules.
    pub fn clock(&self) -> &crate::clock::Clock {
        &self.inner.clock
    }

    /// What wakes the scheduler when a chat makes or resumes a job.
    pub fn cron_wake(&self) -> Arc<tokio::sync::Notify> {
        self.inner.cron_wake.clone()
    }

    /// Sessions with a live worker.
    pub fn active_sessions(&self) -> usize {
        self.inner.mailboxes.len()
    }

    /// Sessions whose conversation is held in memory; an idle one is
    /// dropped after `unload_after` and read again from storage.
    pub fn loaded_conversations(&self) -> usize {
        self.inner.mailboxes.loaded()
    }

    /// Bytes of conversation history held in memory across sessions
    /// (bounded by `ManagerSettings::history_cache`).
    pub fn cached_history_bytes(&self) -> usize {
        self.inner.mailboxes.history_bytes()
    }

    /// Events accepted and not yet processed.
    pub fn pending(&self) -> usize {
        self.inner.mailboxes.pending()
    }

    /// Waits until every worker has exited (after `stop`).
    pub async fn wait(&self) {
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }

    /// Replays what a previous run left undone (see
    /// [`requeue`](Self::requeue)). Call before intake starts.
    pub async fn replay(&self) -> Result<usize, StoreError> {
        let backlog = self.backlog().await?;
        self.requeue(backlog).await
    }

    /// The events left unprocessed by a previous run. Take it before intake
    /// starts, so that nothing accepted by this run is replayed as well.
    pub async fn backlog(&self) -> Result<Backlog, StoreError> {
        Ok(Backlog {
            events: self.inner.store.inbox_pending(100_000).await?,
            owed: self.inner.store.outbox_pending(100_000).await?,
        })
    }

    /// Hands the backlog to its sessions: each session's worker first
    /// sends what its previous run owed, then runs its unprocessed events in
    /// order, then takes what intake hands it. Call before intake starts
    /// (a session already running gets its events behind what it has).
    pub async fn requeue(&self, backlog: Backlog) -> Result<usize, StoreError> {
        let count = backlog.events.len();
        if !backlog.owed.is_empty() {
            tracing::info!(
                outbox.owed = backlog.owed.len(),
                "sending answers a previous run stored and did not send"
            );
        }
        // Sessions in the order their first backlog item came.
        let mut seeds: Vec<(String, Seed)> = Vec::new();
        let mut at: HashMap<String, usize> = HashMap::new();
        let mut seed = |key: &str| -> usize {
            *at.entry(key.to_string()).or_insert_with(|| {
                seeds.push((key.to_string(), Seed::default()));
                seeds.len() - 1
            })
        };
        let mut owed = Vec::new();
        for row in backlog.owed {
            owed.push((seed(&row.session_key), row.id, row.outbound()));
        }
        let mut jobs = Vec::new();
        for row in backlog.events {
            let at = seed(&row.session_key);
            if let Some(job) = self.job_of(row).await? {
                jobs.push((at, job));
            }
        }
        for (i, id, out) in owed {
            seeds[i].1.owed.push((id, out));
        }
        for (i, job) in jobs {
            seeds[i].1.jobs.push_back(job);
        }
        for (key, seed) in seeds {
            let jobs = seed.jobs.len();
            let state = self.seeded_worker(&key, seed);
            for _ in 0..jobs {
                self.enqueued(&state);
            }
        }
        Ok(count)
    }

    /// The job of stored event `row`; `None` (and the row marked processed)
    /// when it cannot be read.
    pub(super) async fn job_of(
        &self,
        row: crate::store::InboxRow,
    ) -> Result<Option<Job>, StoreError> {
        match serde_json::from_str::<InboundEvent>(&row.payload) {
            Ok(event) => Ok(Some(Job {
                inbox_id: row.id,
                event: Box::new(event),
                resumed: row.attempts > 0,
                done: None,
            })),
            Err(err) => {
                tracing::warn!(inbox.id = row.id, error = %err, "unreadable inbox event skipped");
                self.inner
                    .store
                    .inbox_mark_processed(row.id, "unreadable")
                    .await?;
                Ok(None)
            }
        }
    }

    pub(super) fn enqueued(&self, state: &WorkerState) {
        self.inner.mailboxes.enqueued(state);
    }

    /// The worker of `key`, started if there is none.
    pub(super) fn worker(&self, key: &str) -> Mailbox {
        match self
            .inner
            .mailboxes
            .find_or_start(key, || self.spawn_worker(key, Seed::default(), None))
        {
            Found::Live(mailbox) | Found::Started(mailbox) => mailbox,
        }
    }

    /// The worker of `key` if one runs (and takes jobs).
    pub(super) fn live_worker(&self, key: &str) -> Option<Mailbox> {
        self.inner.mailboxes.live(key)
    }

    /// Starts `key`'s worker on `seed`; a worker that runs already gets the
    /// seed's events behind what it has.
    fn seeded_worker(&self, key: &str, seed: Seed) -> Arc<WorkerState> {
        let mut seed = Some(seed);
        let found = self.inner.mailboxes.find_or_start(key, || {
            self.spawn_worker(key, seed.take().unwrap_or_default(), None)
        });
        match (found, seed) {
            (Found::Live((tx, state)), Some(seed)) => {
                let inner = self.inner.clone();
                self.inner.tracker.spawn(async move {
                    for (id, out) in seed.owed {
                        if !super::outbox::send(&inner, id, &out).await {
                            return;
                        }
                    }
                    for job in seed.jobs {
                        if tx.send(job).await.is_err() {
                            return;
                        }
                    }
                });
                state
            }
            (Found::Live((_, state)) | Found::Started((_, state)), _) => state,
        }
    }

    /// Spawns session `key`'s worker on `seed` (under `term`, the
    /// session's lease, with several replicas); the caller puts its
    /// mailbox in [`Mailboxes`].
    pub(super) fn spawn_worker(&self, key: &str, seed: Seed, term: Option<Term>) -> Mailbox {
        let (tx, rx) = mpsc::channel(self.inner.settings.queue_cap);
        let state = Arc::new(WorkerState::new(term.is_some()));
        let span = tracing::info_span!("session", session.key = %key);
        self.inner.tracker.spawn(tracing::Instrument::instrument(
            run_worker(
                self.inner.clone(),
                key.to_string(),
                rx,
                state.clone(),
                seed,
                term,
            ),
            span,
        ));
        (tx, state)
    }

    pub(super) fn running_turn(&self, key: &str) -> Option<Arc<WorkerState>> {
        self.inner.mailboxes.state(key)
    }
}
