//! One session's worker: takes its mailbox in order, restores or resets the
//! conversation, runs the turn with a typing indicator, replies, and marks
//! the inbox event processed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::manager::Inner;
use super::questions::PortQuestions;
use super::reset::reset_due;
use crate::agent::message::ToolCall;
use crate::agent::{AgentError, AgentEvents, Conversation, SessionContext};
use crate::platform::{Activity, ChatKind, ChatRef, InboundEvent, Platforms};
use crate::render::clip;
use crate::store::{NewSession, now_ms};
use crate::telemetry::events;

/// One accepted event on its way through a session. The event is boxed:
/// a mailbox allocates room for 32 jobs at a time, and every idle session
/// keeps its mailbox.
pub(super) struct Job {
    pub(super) inbox_id: i64,
    pub(super) event: Box<InboundEvent>,
    pub(super) done: Option<oneshot::Sender<()>>,
}

/// What the manager can see of a worker.
#[derive(Default)]
pub(super) struct WorkerState {
    /// A job was taken off the mailbox and is not finished.
    active: std::sync::atomic::AtomicBool,
    /// The conversation is in memory (not only in storage).
    loaded: std::sync::atomic::AtomicBool,
    /// The stored session changed (its model): read it again before the
    /// next turn.
    stale: std::sync::atomic::AtomicBool,
    running: Mutex<Option<CancellationToken>>,
    waiting: AtomicUsize,
    last_ack: Mutex<Option<Instant>>,
}

impl WorkerState {
    /// Working on a message (from taking it off the mailbox to its end).
    pub(super) fn busy(&self) -> bool {
        self.active.load(Ordering::SeqCst)
    }

    pub(super) fn loaded(&self) -> bool {
        self.loaded.load(Ordering::SeqCst)
    }

    pub(super) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Asks for the conversation to be read again before the next turn.
    pub(super) fn reload(&self) {
        self.stale.store(true, Ordering::SeqCst);
    }

    pub(super) fn queued(&self) {
        self.waiting.fetch_add(1, Ordering::SeqCst);
    }

    /// Cancels the running turn, if any; true when there was one.
    pub(super) fn interrupt(&self) -> bool {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.as_ref().map(|t| t.cancel()).is_some()
    }

    /// True at most once per `every`: time to say "queued" again.
    pub(super) fn should_ack(&self, every: Duration) -> bool {
        let mut last = self.last_ack.lock().unwrap_or_else(|e| e.into_inner());
        let due = last.is_none_or(|at| at.elapsed() >= every);
        if due {
            *last = Some(Instant::now());
        }
        due
    }

    fn start_turn(&self) -> CancellationToken {
        let token = CancellationToken::new();
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = Some(token.clone());
        token
    }

    fn end_turn(&self) {
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Tool activity of a turn, shown by the session's platform where it
/// shows such things.
struct PortActivity {
    platforms: Arc<Platforms>,
    chat: ChatRef,
}

impl PortActivity {
    fn show(&self, activity: Activity) {
        if let Some(port) = self.platforms.port(&self.chat.platform) {
            port.activity(&self.chat, &activity);
        }
    }
}

impl AgentEvents for PortActivity {
    fn tool_started(&self, call: &ToolCall) {
        self.show(Activity::ToolStarted {
            name: call.name.clone(),
            arguments: clip(&call.arguments, 120),
        });
    }

    fn tool_finished(&self, call: &ToolCall, result: &str) {
        self.show(Activity::ToolFinished {
            name: call.name.clone(),
            ok: !result.starts_with("{\"error\""),
            chars: result.len(),
        });
    }
}

/// The session `event` opens under `key`; it belongs to the sender when
/// there is a `human` behind the platform.
pub(super) fn new_session<'a>(
    key: &'a str,
    event: &'a InboundEvent,
    human: bool,
) -> NewSession<'a> {
    NewSession {
        key,
        platform: &event.platform,
        chat_id: &event.chat_id,
        thread_id: event.thread_id.as_deref(),
        user_id: human.then_some(event.user_id.as_str()),
    }
}

async fn open_conversation(
    inner: &Arc<Inner>,
    key: &str,
    event: &InboundEvent,
) -> Result<Conversation, String> {
    let profile = inner
        .platforms()
        .profile(&event.platform)
        .ok_or_else(|| format!("no profile for platform {}", event.platform))?;
    // Sessions without a person behind them (automated events) ask for
    // approval in the configured approver chat, never of whoever wrote
    // the payload, and ask no questions.
    let human = profile.human;
    let session = inner
        .store
        .open_session(&new_session(key, event, human))
        .await
        .map_err(|e| e.to_string())?;
    let context = SessionContext {
        platform: event.platform.to_string(),
        chat_type: match (human, event.kind) {
            (false, _) => format!("{} event", event.platform),
            (true, ChatKind::Dm) => "direct message".into(),
            (true, ChatKind::Group) => "group chat".into(),
        },
        user_name: Some(event.user_name.clone()),
        thread: event.thread_id.clone(),
    };
    let mut conversation = Conversation::open(
        inner.deps.clone(),
        session,
        context,
        (
            profile.toolsets_for(&event.chat_id).to_vec(),
            inner.config.tools.disabled_toolsets.clone(),
        ),
        inner.approvals.clone(),
    )
    .await
    .map_err(|e| e.to_string())?
    .with_events(Arc::new(PortActivity {
        platforms: inner.platforms().clone(),
        chat: event.chat(),
    }));
    if human {
        conversation = conversation.with_clarify(Arc::new(PortQuestions {
            platforms: inner.platforms().clone(),
            questions: inner.questions.clone(),
            chat: event.chat(),
            user: Some(event.user_id.clone()),
        }));
    }
    Ok(conversation)
}

/// Ends the session of `key` when its reset policy says so, telling the
/// user. Returns true when it did.
async fn apply_reset(
    inner: &Arc<Inner>,
    key: &str,
    event: &InboundEvent,
    open: Option<(String, i64)>,
) -> bool {
    let open = match open {
        Some(open) => Some(open),
        None => match inner.store.open_session_by_key(key).await {
            Ok(s) => s.map(|s| (s.id, s.last_active_at)),
            Err(err) => {
                tracing::warn!(session.key = %key, error = %err, "could not read the session");
                None
            }
        },
    };
    let Some((id, last_active)) = open else {
        return false;
    };
    let policy = inner.config.sessions.reset_for(&event.platform);
    let Some(reason) = reset_due(&policy, last_active, now_ms()) else {
        return false;
    };
    match inner.store.end_session(&id, reason.end_reason()).await {
        Ok(_) => {
            tracing::info!(session.key = %key, reason = reason.end_reason(), "session reset");
            inner.replies.notice(event, &reason.notice(&policy)).await;
            true
        }
        Err(err) => {
            tracing::warn!(session.key = %key, error = %err, "could not reset the session");
            false
        }
    }
}

/// The conversation a worker holds, counted against the history cache
/// shared by every session.
#[derive(Default)]
struct Held {
    /// The conversation and when it last saw a message.
    conversation: Option<(Conversation, i64)>,
    /// What it was counted as in `Inner::history_bytes`.
    bytes: usize,
}

impl Held {
    /// Counts the conversation's size again; returns the cache's total.
    fn recount(&mut self, inner: &Inner) -> usize {
        let now = self
            .conversation
            .as_ref()
            .map_or(0, |(c, _)| c.heap_bytes());
        let total = if now >= self.bytes {
            inner
                .history_bytes
                .fetch_add(now - self.bytes, Ordering::SeqCst)
                + now
                - self.bytes
        } else {
            inner
                .history_bytes
                .fetch_sub(self.bytes - now, Ordering::SeqCst)
                - (self.bytes - now)
        };
        self.bytes = now;
        total
    }

    /// Whether dropping the conversation loses nothing storage lacks.
    fn reloadable(&self) -> bool {
        self.conversation
            .as_ref()
            .is_some_and(|(c, _)| c.reloadable())
    }

    /// Drops the conversation (storage holds all of it).
    fn unload(&mut self, inner: &Inner, state: &WorkerState) {
        self.conversation = None;
        self.recount(inner);
        state.loaded.store(false, Ordering::SeqCst);
    }
}

pub(super) async fn run_worker(
    inner: Arc<Inner>,
    key: String,
    mut rx: mpsc::Receiver<Job>,
    state: Arc<WorkerState>,
) {
    let mut held = Held::default();
    let mut closing = false;
    let mut last_job = tokio::time::Instant::now();
    // The quiet-time check below ran since the last job.
    let mut settled = false;
    loop {
        let job = tokio::select! {
            biased;
            _ = inner.stop.cancelled() => None,
            job = rx.recv() => job,
            _ = tokio::time::sleep_until(last_job + inner.settings.unload_after), if !settled && !closing => {
                settled = true;
                // Nobody is talking here: read it again when needed.
                if held.reloadable() {
                    held.unload(&inner, &state);
                }
                if held.conversation.is_none()
                    && inner.workers().len() > inner.settings.idle_workers
                {
                    // Many sessions, most of them quiet: an empty worker
                    // costs a few KiB and starting one costs nothing.
                    leave(&inner, &key, &state);
                    rx.close();
                    closing = true;
                }
                continue;
            }
            _ = tokio::time::sleep_until(last_job + inner.settings.idle_after), if !closing => {
                // Idle: leave the map first, then finish whatever raced in.
                leave(&inner, &key, &state);
                rx.close();
                closing = true;
                continue;
            }
        };
        let Some(job) = job else { break };
        state.active.store(true, Ordering::SeqCst);
        state.waiting.fetch_sub(1, Ordering::SeqCst);
        if state.stale.swap(false, Ordering::SeqCst) {
            held.unload(&inner, &state);
        }
        // Boxed: the turn's state exists only while it runs, so an idle
        // worker's task stays small.
        Box::pin(run_job(&inner, &key, &state, &mut held.conversation, job)).await;
        state
            .loaded
            .store(held.conversation.is_some(), Ordering::SeqCst);
        let cached = held.recount(&inner);
        if cached > inner.settings.history_cache && state.waiting() == 0 && held.reloadable() {
            // Over the shared budget: this session has nothing waiting,
            // so it is the one least likely to need its history soon.
            held.unload(&inner, &state);
        }
        state.active.store(false, Ordering::SeqCst);
        inner.processed();
        last_job = tokio::time::Instant::now();
        settled = false;
    }
    held.unload(&inner, &state);
    leave(&inner, &key, &state);
}

fn leave(inner: &Inner, key: &str, state: &Arc<WorkerState>) {
    let mut workers = inner.workers();
    if workers
        .get(key)
        .is_some_and(|w| Arc::ptr_eq(&w.state, state))
    {
        workers.remove(key);
    }
    events::emit(events::ActiveSessions(workers.len()));
}

async fn run_job(
    inner: &Arc<Inner>,
    key: &str,
    state: &WorkerState,
    conversation: &mut Option<(Conversation, i64)>,
    job: Job,
) {
    let Job {
        inbox_id,
        event,
        done,
    } = job;
    let event = *event;
    let _ = inner.store.inbox_record_attempt(inbox_id).await;
    // Set once storage failed under this event: what was stored of it is
    // picked up again instead of starting over.
    let mut again = false;
    let outcome = loop {
        let open = conversation
            .as_ref()
            .map(|(c, last)| (c.session().id.clone(), *last));
        if !again && apply_reset(inner, key, &event, open).await {
            *conversation = None;
        }
        if conversation.is_none() {
            match open_conversation(inner, key, &event).await {
                Ok(c) => {
                    let last = c.session().last_active_at;
                    *conversation = Some((c, last));
                }
                Err(_) if storage_down(inner).await => {
                    if !storage_back(inner).await {
                        return;
                    }
                    again = true;
                    continue;
                }
                Err(err) => {
                    tracing::error!(session.key = %key, error = %err, "cannot open the session");
                    inner
                        .replies
                        .notice(&event, "Sorry, I could not open this conversation.")
                        .await;
                    finish(inner, inbox_id, "failed", done).await;
                    return;
                }
            }
        }
        let Some((conv, last_active)) = conversation.as_mut() else {
            return;
        };
        let token = state.start_turn();
        let outcome = {
            let span =
                tracing::info_span!("turn", inbox.id = inbox_id, session.id = %conv.session().id);
            let retrying = again;
            let turn = async {
                if retrying {
                    conv.retry_turn(&event.text, &token).await
                } else {
                    conv.run_turn(&event.text, &token).await
                }
            };
            let turn = tracing::Instrument::instrument(turn, span);
            tokio::pin!(turn);
            let mut refresh = tokio::time::interval(inner.settings.working_every);
            loop {
                tokio::select! {
                    out = &mut turn => break out,
                    _ = refresh.tick() => {
                        let replies = inner.replies.clone();
                        let event = event.clone();
                        inner.tracker.spawn(async move { replies.working(&event, true).await });
                    }
                }
            }
        };
        state.end_turn();
        *last_active = now_ms();
        if matches!(outcome, Err(AgentError::Store(_))) && storage_down(inner).await {
            // Storage went away under the turn: nothing is lost and nothing
            // is said; the turn goes on from what was stored once the
            // database answers again.
            tracing::warn!(session.key = %key, inbox.id = inbox_id, "storage down during a turn; waiting for it");
            *conversation = None;
            if !storage_back(inner).await {
                return;
            }
            again = true;
            continue;
        }
        break outcome;
    };
    // The answer is on its way: a message arriving now is not "queued".
    state.active.store(false, Ordering::SeqCst);
    inner.replies.working(&event, false).await;
    let label = match outcome {
        Ok(out) => {
            if let Some(notice) = &out.notice {
                inner.replies.notice(&event, notice).await;
            }
            if !out.reply.is_empty() {
                inner.replies.reply(&event, &out.reply).await;
            }
            format!("{:?}", out.stop).to_lowercase()
        }
        Err(err) => {
            tracing::warn!(session.key = %key, error = %err, "turn failed");
            inner
                .replies
                .notice(
                    &event,
                    "Sorry, something went wrong while answering; please try again.",
                )
                .await;
            "error".to_string()
        }
    };
    finish(inner, inbox_id, &label, done).await;
}

/// Whether storage fails to answer now.
async fn storage_down(inner: &Inner) -> bool {
    tokio::time::timeout(Duration::from_secs(2), inner.store.ping())
        .await
        .map_or(true, |answered| answered.is_err())
}

/// Waits until storage answers again, backing off up to 5 s between
/// tries; false when the daemon stops first (the event stays pending in
/// the inbox for the next start).
async fn storage_back(inner: &Inner) -> bool {
    let mut wait = Duration::from_millis(200);
    loop {
        tokio::select! {
            _ = inner.stop.cancelled() => return false,
            _ = tokio::time::sleep(wait) => {}
        }
        if !storage_down(inner).await {
            return true;
        }
        wait = (wait * 2).min(Duration::from_secs(5));
    }
}

async fn finish(inner: &Inner, inbox_id: i64, label: &str, done: Option<oneshot::Sender<()>>) {
    // Marked however long storage is away: an event whose answer went out
    // but whose row stayed pending would be answered again.
    while let Err(err) = inner.store.inbox_mark_processed(inbox_id, label).await {
        tracing::error!(inbox.id = inbox_id, error = %err, "could not mark the event processed");
        if !storage_down(inner).await || !storage_back(inner).await {
            break;
        }
    }
    if let Some(done) = done {
        let _ = done.send(());
    }
}
