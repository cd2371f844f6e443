//! The session manager: inbound events are authorised, committed to the
//! inbox (duplicates dropped), and handed to their session's single worker
//! on a bounded mailbox; turns of one session run in order, sessions run
//! concurrently. Slash commands bypass the queue. Unprocessed inbox events
//! are replayed on start.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::access::{self, Access, AccessRules};
use super::keys::{ChatKind, InboundEvent, KeyRules, session_key};
use crate::agent::{AgentDeps, Conversation, SessionContext};
use crate::config::{BusyInputMode, Config};
use crate::store::{InboxInsert, NewInboxEvent, NewSession, Store, StoreError};
use crate::tools::{ApprovalHook, platform_toolsets};

/// Where replies go: the adapter of the event's platform.
#[async_trait::async_trait]
pub trait Replier: Send + Sync {
    /// Sends `text` to the chat (and thread) of `event`.
    async fn reply(&self, event: &InboundEvent, text: &str);
}

/// Tunables of the manager.
#[derive(Debug, Clone, Copy)]
pub struct ManagerSettings {
    /// How group conversations split into sessions.
    pub rules: KeyRules,
    /// Queue or interrupt when a message arrives during a turn.
    pub busy: BusyInputMode,
    /// Messages waiting per session.
    pub queue_cap: usize,
    /// A worker with nothing to do for this long exits.
    pub idle_after: Duration,
}

impl Default for ManagerSettings {
    fn default() -> Self {
        Self {
            rules: KeyRules::default(),
            busy: BusyInputMode::Queue,
            queue_cap: 32,
            idle_after: Duration::from_secs(600),
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
    /// A slash command was answered.
    Command,
    /// The session's queue is full; the user was told.
    Busy,
}

struct Job {
    inbox_id: i64,
    event: InboundEvent,
}

struct Worker {
    tx: mpsc::Sender<Job>,
    running: Arc<Mutex<Option<CancellationToken>>>,
    waiting: Arc<AtomicUsize>,
}

struct Inner {
    store: Store,
    deps: Arc<AgentDeps>,
    config: Config,
    replier: Arc<dyn Replier>,
    approvals: Arc<dyn ApprovalHook>,
    settings: ManagerSettings,
    workers: Mutex<HashMap<String, Worker>>,
    tracker: TaskTracker,
    stop: CancellationToken,
}

/// The session manager; cheap to clone.
#[derive(Clone)]
pub struct SessionManager {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SessionManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionManager").finish_non_exhaustive()
    }
}

const HELP: &str = "Commands: /new (or /reset) starts a fresh conversation, /stop cancels the running request, /status shows this session, /approve and /deny answer a pending approval, /help shows this.";

impl SessionManager {
    /// A manager over `deps`; `approvals` is the terminal tools' hook.
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
                settings,
                workers: Mutex::new(HashMap::new()),
                tracker: TaskTracker::new(),
                stop,
            }),
        }
    }

    /// Sessions with a live worker.
    pub fn active_sessions(&self) -> usize {
        self.inner
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Authorises, commits and routes one inbound event.
    pub async fn submit(&self, event: InboundEvent) -> Result<Submitted, StoreError> {
        let inner = &self.inner;
        let rules = AccessRules::for_platform(&inner.config, &event.platform);
        match access::check(&rules, &event, &inner.store).await? {
            Access::Allowed => {}
            Access::Ignored(reason) => {
                tracing::debug!(platform = %event.platform, user = %event.user_id, reason, "event ignored");
                return Ok(Submitted::Ignored(reason));
            }
            Access::NeedsPairing => {
                let outcome = access::request_code(&inner.store, &event).await?;
                inner
                    .replier
                    .reply(&event, &access::pairing_message(&outcome))
                    .await;
                return Ok(Submitted::Pairing);
            }
        }
        let key = session_key(&event, inner.settings.rules);
        if let Some(handled) = self.command(&key, &event).await? {
            return Ok(handled);
        }
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
        metrics::counter!("switchboard_events_total", "platform" => event.platform.clone())
            .increment(1);
        let InboxInsert::Inserted(inbox_id) = inserted else {
            return Ok(Submitted::Duplicate);
        };
        Ok(self.route(key, Job { inbox_id, event }).await)
    }

    /// Replays inbox events left unprocessed by a previous run, in order.
    pub async fn replay(&self) -> Result<usize, StoreError> {
        let pending = self.inner.store.inbox_pending(10_000).await?;
        let count = pending.len();
        for row in pending {
            match serde_json::from_str::<InboundEvent>(&row.payload) {
                Ok(event) => {
                    self.route(
                        row.session_key,
                        Job {
                            inbox_id: row.id,
                            event,
                        },
                    )
                    .await;
                }
                Err(err) => {
                    tracing::warn!(inbox.id = row.id, error = %err, "unreadable inbox event skipped");
                    self.inner
                        .store
                        .inbox_mark_processed(row.id, "unreadable")
                        .await?;
                }
            }
        }
        Ok(count)
    }

    async fn command(
        &self,
        key: &str,
        event: &InboundEvent,
    ) -> Result<Option<Submitted>, StoreError> {
        let text = event.text.trim();
        let Some(word) = text
            .strip_prefix('/')
            .and_then(|t| t.split_whitespace().next())
        else {
            return Ok(None);
        };
        let word = word.split('@').next().unwrap_or(word);
        let inner = &self.inner;
        let reply = match word {
            "help" => HELP.to_string(),
            "stop" => {
                let running = self.running_turn(key);
                match running {
                    Some(token) => {
                        token.cancel();
                        "Stopping the current request.".to_string()
                    }
                    None => "Nothing is running.".to_string(),
                }
            }
            "new" | "reset" => {
                if let Some(token) = self.running_turn(key) {
                    token.cancel();
                }
                self.inner
                    .workers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(key);
                if let Some(session) = inner.store.open_session_by_key(key).await? {
                    inner
                        .store
                        .end_session(&session.id, "reset by user")
                        .await?;
                }
                "Started a new conversation.".to_string()
            }
            "status" => {
                let session = inner.store.open_session_by_key(key).await?;
                let (busy, waiting) = self.load(key);
                match session {
                    Some(s) => format!(
                        "Session {key}: {} messages stored, {}, {waiting} waiting.",
                        inner.store.messages(&s.id).await?.len(),
                        if busy { "working" } else { "idle" }
                    ),
                    None => format!("No conversation yet in {key}."),
                }
            }
            _ => return Ok(None),
        };
        inner.replier.reply(event, &reply).await;
        Ok(Some(Submitted::Command))
    }

    fn running_turn(&self, key: &str) -> Option<CancellationToken> {
        let workers = self.inner.workers.lock().unwrap_or_else(|e| e.into_inner());
        workers
            .get(key)
            .and_then(|w| w.running.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }

    fn load(&self, key: &str) -> (bool, usize) {
        let workers = self.inner.workers.lock().unwrap_or_else(|e| e.into_inner());
        workers.get(key).map_or((false, 0), |w| {
            let busy = w
                .running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some();
            (busy, w.waiting.load(Ordering::SeqCst))
        })
    }

    async fn route(&self, key: String, job: Job) -> Submitted {
        let inner = &self.inner;
        let (tx, running, waiting) = {
            let mut workers = inner.workers.lock().unwrap_or_else(|e| e.into_inner());
            let worker = workers
                .entry(key.clone())
                .or_insert_with(|| self.spawn_worker(key.clone()));
            (
                worker.tx.clone(),
                worker.running.clone(),
                worker.waiting.clone(),
            )
        };
        let busy = running.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(token) = &busy
            && inner.settings.busy == BusyInputMode::Interrupt
        {
            token.cancel();
        }
        let event = job.event.clone();
        match tx.try_send(job) {
            Ok(()) => {
                waiting.fetch_add(1, Ordering::SeqCst);
                Submitted::Accepted
            }
            Err(_) => {
                inner
                    .replier
                    .reply(&event, "I'm still working on earlier messages; please send this again in a moment.")
                    .await;
                Submitted::Busy
            }
        }
    }

    fn spawn_worker(&self, key: String) -> Worker {
        let (tx, rx) = mpsc::channel(self.inner.settings.queue_cap);
        let running = Arc::new(Mutex::new(None));
        let waiting = Arc::new(AtomicUsize::new(0));
        let task = run_worker(self.clone(), key, rx, running.clone(), waiting.clone());
        self.inner.tracker.spawn(task);
        Worker {
            tx,
            running,
            waiting,
        }
    }
}

async fn open_conversation(
    inner: Arc<Inner>,
    key: String,
    event: InboundEvent,
) -> Result<Conversation, String> {
    let session = inner
        .store
        .open_session(&NewSession {
            key: &key,
            platform: &event.platform,
            chat_id: &event.chat_id,
            thread_id: event.thread_id.as_deref(),
            user_id: Some(&event.user_id),
        })
        .await
        .map_err(|e| e.to_string())?;
    let context = SessionContext {
        platform: event.platform.clone(),
        chat_type: match event.kind {
            ChatKind::Dm => "direct message".into(),
            ChatKind::Group => "group chat".into(),
        },
        user_name: Some(event.user_name.clone()),
        thread: event.thread_id.clone(),
    };
    Conversation::open(
        inner.deps.clone(),
        session,
        context,
        platform_toolsets(&inner.config, &event.platform),
        inner.approvals.clone(),
    )
    .await
    .map_err(|e| e.to_string())
}

async fn run_worker(
    manager: SessionManager,
    key: String,
    mut rx: mpsc::Receiver<Job>,
    running: Arc<Mutex<Option<CancellationToken>>>,
    waiting: Arc<AtomicUsize>,
) {
    let inner = manager.inner.clone();
    let mut conversation: Option<Conversation> = None;
    let mut closing = false;
    loop {
        let job = tokio::select! {
            job = rx.recv() => job,
            _ = tokio::time::sleep(inner.settings.idle_after), if !closing => {
                // Idle: leave the map first, then finish whatever raced in.
                let mut workers = inner.workers.lock().unwrap_or_else(|e| e.into_inner());
                if workers.get(&key).is_some_and(|w| Arc::ptr_eq(&w.running, &running)) {
                    workers.remove(&key);
                }
                drop(workers);
                rx.close();
                closing = true;
                continue;
            }
            _ = inner.stop.cancelled() => None,
        };
        let Some(job) = job else { break };
        waiting.fetch_sub(1, Ordering::SeqCst);
        let _ = inner.store.inbox_record_attempt(job.inbox_id).await;
        if conversation.is_none() {
            match open_conversation(inner.clone(), key.clone(), job.event.clone()).await {
                Ok(c) => conversation = Some(c),
                Err(err) => {
                    tracing::error!(session.key = %key, error = %err, "cannot open the session");
                    inner
                        .replier
                        .reply(&job.event, "Sorry, I could not open this conversation.")
                        .await;
                    continue;
                }
            }
        }
        let Some(conv) = conversation.as_mut() else {
            continue;
        };
        let token = inner.stop.child_token();
        *running.lock().unwrap_or_else(|e| e.into_inner()) = Some(token.clone());
        let outcome = conv.run_turn(&job.event.text, &token).await;
        *running.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let label = match outcome {
            Ok(out) => {
                if !out.reply.is_empty() {
                    inner.replier.reply(&job.event, &out.reply).await;
                }
                format!("{:?}", out.stop).to_lowercase()
            }
            Err(err) => {
                tracing::warn!(session.key = %key, error = %err, "turn failed");
                inner
                    .replier
                    .reply(
                        &job.event,
                        "Sorry, something went wrong while answering; please try again.",
                    )
                    .await;
                "error".to_string()
            }
        };
        if let Err(err) = inner.store.inbox_mark_processed(job.inbox_id, &label).await {
            tracing::error!(inbox.id = job.inbox_id, error = %err, "could not mark the event processed");
        }
    }
    let mut workers = inner.workers.lock().unwrap_or_else(|e| e.into_inner());
    if workers
        .get(&key)
        .is_some_and(|w| Arc::ptr_eq(&w.running, &running))
    {
        workers.remove(&key);
    }
}
