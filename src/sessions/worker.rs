//! One session's worker: takes its mailbox in order, has each job's
//! conversation found, reset or restored (`opening`), runs the turn with a
//! typing indicator, then stores its answer, what it sends and the inbox
//! event's completion in one transaction, and sends.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::completion::{commit, completion, done_with};
use super::live::{Draft, Shown};
use super::manager::Inner;
use super::opening::{Ahead, Known, Reset, Start, apply_reset, open_conversation, start};
use super::outbox;
use super::pressure::Place;
use super::revisions::Change;
use crate::agent::layer::Opened;
use crate::agent::{AgentError, Conversation, Turn};
use crate::platform::InboundEvent;
use crate::store::{Completion, Outbound};

/// One accepted event on its way through a session. The event is boxed:
/// a mailbox allocates room for 32 jobs at a time, and every idle session
/// keeps its mailbox.
pub(super) struct Job {
    pub(super) inbox_id: i64,
    pub(super) event: Box<InboundEvent>,
    /// A previous run started this event's turn and died before its end.
    pub(super) resumed: bool,
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
    /// The running turn: its cancellation, and whom it acts for
    /// (`platform:user`).
    running: Mutex<Option<(CancellationToken, String)>>,
    waiting: AtomicUsize,
    last_ack: Mutex<Option<Instant>>,
    /// With several replicas: an event another replica stored did not fit
    /// the mailbox; the worker reads its session's events from the inbox
    /// once the mailbox is empty, and until then later ones wait there too
    /// (their order is the inbox's).
    behind: std::sync::atomic::AtomicBool,
    /// Wakes an idle worker to read the inbox (after `behind` was set).
    nudged: tokio::sync::Notify,
    /// The running turn's streamed draft.
    draft: super::live::Slot,
    /// Messages to be steered into the running turn.
    pub(super) steers: Arc<super::steer::Steers>,
    /// Edits and deletions of the events handed over.
    pub(super) revisions: super::revisions::Revisions,
    /// It runs its session under the session's lease (several replicas).
    leased: bool,
    /// The replica the session is being handed to, after the running turn.
    taker: Mutex<Option<super::ownership::balance::Taker>>,
}

impl WorkerState {
    pub(super) fn new(leased: bool) -> Self {
        Self {
            leased,
            ..Self::default()
        }
    }

    pub(super) fn leased(&self) -> bool {
        self.leased
    }

    /// Has the worker hand its session to `taker` after the running turn
    /// (at once when idle).
    pub(super) fn hand_to(&self, taker: super::ownership::balance::Taker) {
        *self.taker.lock().unwrap_or_else(|e| e.into_inner()) = Some(taker);
        self.nudged.notify_one();
    }

    /// Whom the session is being handed to.
    pub(super) fn taker(&self) -> Option<super::ownership::balance::Taker> {
        self.taker.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

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

    /// Whether events wait in the inbox that the mailbox had no room for.
    pub(super) fn behind(&self) -> bool {
        self.behind.load(Ordering::SeqCst)
    }

    pub(super) fn fell_behind(&self) {
        self.behind.store(true, Ordering::SeqCst);
    }

    /// Has the worker read its session's events from the inbox as soon as
    /// it is free (some were stored that it was not handed).
    pub(super) fn nudge(&self) {
        self.fell_behind();
        self.nudged.notify_one();
    }

    pub(super) fn queued(&self) {
        self.waiting.fetch_add(1, Ordering::SeqCst);
    }

    pub(super) fn unqueued(&self) {
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }

    /// Cancels the running turn, if any; true when there was one.
    /// Whether a turn runs that acts for `actor` (`platform:user`): only
    /// its own sender's words may be steered into it, never another's in
    /// a shared thread or group.
    pub(super) fn steerable_by(&self, actor: &str) -> bool {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|(_, of)| of == actor)
    }

    pub(super) fn interrupt(&self) -> bool {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.as_ref().map(|(t, _)| t.cancel()).is_some()
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

    /// A turn starts that acts for `actor` (`platform:user`).
    fn start_turn(&self, actor: String) -> CancellationToken {
        let token = CancellationToken::new();
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = Some((token.clone(), actor));
        token
    }

    fn end_turn(&self) {
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// The conversation a worker holds, counted against the history cache
/// shared by every session.
#[derive(Default)]
struct Held {
    /// The conversation and when it last saw a message.
    conversation: Option<(Conversation, i64)>,
    /// What it was counted as in the mailboxes' history bytes.
    bytes: usize,
}

impl Held {
    /// Counts the conversation's size again; returns the cache's total.
    fn recount(&mut self, inner: &Inner) -> usize {
        let now = self
            .conversation
            .as_ref()
            .map_or(0, |(c, _)| c.heap_bytes());
        let total = inner.mailboxes.history_resized(self.bytes, now);
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

/// What a previous run left a session: answers stored and not sent, then
/// events not processed, in order. Its worker sends and runs them before it
/// takes anything from its mailbox, so what arrives meanwhile waits behind.
#[derive(Default)]
pub(super) struct Seed {
    pub(super) owed: Vec<(i64, Outbound)>,
    pub(super) jobs: VecDeque<Job>,
}

/// Runs session `key`'s jobs: the seed's, then its mailbox's, until it is
/// idle long enough, the daemon stops, or `term` (the session's lease, with
/// several replicas) ends: then what waits in the mailbox is left to the
/// replica that takes the session over (it is all in the inbox). The
/// loop and its exit share the worker's state, so they stay one function.
///
/// The task lives as long as its session is live, idle or not, and a task
/// is as large as the largest thing it awaits: the conversation and every
/// await but the mailbox's are boxed, so an idle worker costs about a KiB.
pub(super) async fn run_worker(
    inner: Arc<Inner>,
    key: String,
    mut rx: mpsc::Receiver<Job>,
    state: Arc<WorkerState>,
    seed: Seed,
    term: Option<crate::cluster::Term>,
) {
    let ended = term
        .as_ref()
        .map_or_else(CancellationToken::new, |t| t.ended.clone());
    let own = inner.ownership.as_ref();
    let fence = term.as_ref().zip(own).and_then(|(t, own)| own.fence(t));
    for (id, out) in seed.owed {
        if ended.is_cancelled() || !Box::pin(outbox::send(&inner, id, &out)).await {
            break;
        }
    }
    let mut seeded = seed.jobs;
    let mut held = Box::<Held>::default();
    let mut closing = false;
    let mut last_job = tokio::time::Instant::now();
    // The quiet-time check below ran since the last job.
    let mut settled = false;
    loop {
        if term.is_some() && state.taker().is_some() {
            // Handed to another replica: this turn boundary is the move.
            break;
        }
        if seeded.is_empty() && rx.is_empty() && state.behind.swap(false, Ordering::SeqCst) {
            seeded = Box::pin(super::ownership::catch_up(&inner, &key, &state)).await;
        }
        let next = seeded
            .pop_front()
            .filter(|_| !inner.stop.is_cancelled() && !ended.is_cancelled());
        let job = if next.is_some() {
            next
        } else {
            tokio::select! {
                biased;
                _ = inner.stop.cancelled() => None,
                _ = ended.cancelled() => None,
                _ = state.nudged.notified() => continue,
                job = rx.recv() => job,
                _ = tokio::time::sleep_until(last_job + inner.settings.unload_after), if !settled && !closing => {
                    settled = true;
                    // Nobody is talking here: read it again when needed.
                    if held.reloadable() {
                        held.unload(&inner, &state);
                    }
                    if held.conversation.is_none()
                        && inner.mailboxes.len() > inner.settings.idle_workers
                    {
                        // Many sessions, most of them quiet: an empty worker
                        // costs a few KiB and starting one costs nothing.
                        inner.mailboxes.leave(&key, &state);
                        rx.close();
                        closing = true;
                    }
                    continue;
                }
                _ = tokio::time::sleep_until(last_job + inner.settings.idle_after), if !closing => {
                    // Idle: leave the map first, then finish whatever raced in.
                    inner.mailboxes.leave(&key, &state);
                    rx.close();
                    closing = true;
                    continue;
                }
            }
        };
        let Some(job) = job else { break };
        state.active.store(true, Ordering::SeqCst);
        if let Some(own) = own {
            own.turn_started();
        }
        state.waiting.fetch_sub(1, Ordering::SeqCst);
        if state.stale.swap(false, Ordering::SeqCst) {
            held.unload(&inner, &state);
        }
        let context = JobContext {
            fence: fence.as_ref(),
            ended: &ended,
            ordered: term.is_some(),
        };
        if let Some(earlier) = Box::pin(run_job(
            &inner,
            &key,
            &state,
            &mut held.conversation,
            job,
            context,
        ))
        .await
        {
            // What was left of the jobs read before is read again, in
            // order, with the earlier one: each counted once, its caller's
            // wait moved to its copy.
            for old in std::mem::replace(&mut seeded, earlier) {
                state.unqueued();
                inner.mailboxes.processed();
                if let Some(copy) = seeded.iter_mut().find(|j| j.inbox_id == old.inbox_id)
                    && copy.done.is_none()
                {
                    copy.done = old.done;
                }
            }
        }
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
        if let Some(own) = own {
            own.turn_ended();
        }
        inner.mailboxes.processed();
        last_job = tokio::time::Instant::now();
        settled = false;
    }
    held.unload(&inner, &state);
    inner.mailboxes.leave(&key, &state);
    if let Some(term) = term {
        // What waits here is the next owner's: it is in the inbox. An
        // event being stored for the mailbox meanwhile (its sender holds a
        // permit) is waited for, so it is stored before the next owner is
        // told, and counted off.
        rx.close();
        while rx.recv().await.is_some() {
            state.waiting.fetch_sub(1, Ordering::SeqCst);
            inner.mailboxes.processed();
        }
        drop(seeded);
        let lost = match own {
            Some(own) => !Box::pin(own.release(term)).await,
            None => false,
        };
        if !lost
            && !Box::pin(super::ownership::balance::hand_over(
                &inner,
                &key,
                state.taker(),
            ))
            .await
        {
            Box::pin(super::ownership::adopt_left(&inner, &key)).await;
        }
    }
}

/// What a job runs under besides its session.
#[derive(Clone, Copy)]
struct JobContext<'a> {
    /// The session's lease its commit is made under (several replicas).
    fence: Option<&'a crate::store::Fence>,
    /// Fires when the lease is lost: nothing more is sent from here.
    ended: &'a CancellationToken,
    /// With several replicas: a job starts only as its session's first
    /// event waiting in the inbox (another replica may have stored an
    /// earlier one, its notice not here yet).
    ordered: bool,
}

/// Runs `job`; with the session's events from the inbox, in order, when
/// an earlier one waits there (`JobContext::ordered`): the worker runs
/// those first, `job`'s caller's wait moved to its copy.
async fn run_job(
    inner: &Arc<Inner>,
    key: &str,
    state: &WorkerState,
    conversation: &mut Option<(Conversation, i64)>,
    job: Job,
    context: JobContext<'_>,
) -> Option<VecDeque<Job>> {
    let Job {
        inbox_id,
        event,
        resumed,
        done,
    } = job;
    let mut event = *event;
    // Its own turn starts: no other turn takes it in.
    state.steers.forget(inbox_id);
    // The turn opens once a burst of deliveries is stored, a few turns at
    // a time (`pressure`): its start in storage is a write the burst's
    // batches would take turns with, one per session the burst opens.
    // Stopped meanwhile, the event stays in the inbox for the next run.
    let mut place = tokio::select! {
        biased;
        () = inner.stop.cancelled() => return None,
        () = context.ended.cancelled() => return None,
        place = inner.pressure.open() => place,
    };
    let ordered = context.ordered.then_some(key);
    let ahead = match start(inner, key, conversation, (inbox_id, ordered), &event).await {
        Start::Ahead(ahead) => ahead,
        Start::Done => {
            // Processed already (a second job for it, from another
            // replica's notice or a takeover's read of the inbox).
            state.revisions.end(inbox_id);
            if let Some(done) = done {
                let _ = done.send(());
            }
            return None;
        }
        Start::Behind => {
            // An earlier event of the session, stored by another replica,
            // is still on its way here: the inbox's order comes first. An
            // edit or deletion meanwhile stays for its copy.
            let mut earlier = super::ownership::catch_up(inner, key, state).await;
            if let Some(copy) = earlier.iter_mut().find(|j| j.inbox_id == inbox_id) {
                copy.done = done;
            }
            return Some(earlier);
        }
    };
    // Started: what became of its message until now (later, an edit is a
    // message of its own and a deletion cancels the turn).
    match state.revisions.start(inbox_id) {
        Some(Change::Edited(text)) => event.text = text,
        Some(Change::Deleted) => {
            state.revisions.end(inbox_id);
            if let Some(done) = done {
                let _ = done.send(());
            }
            return None;
        }
        None => {}
    }
    if resumed || super::voice::audible(&event) {
        // Hearing a voice note, or finding what a broken-off turn showed,
        // waits on a service or a platform.
        place.leave();
    }
    if let super::voice::Heard::Unanswerable(notice) =
        super::voice::hear(inner, key, inbox_id, &mut event).await
    {
        state.active.store(false, Ordering::SeqCst);
        state.revisions.end(inbox_id);
        let completion = Completion {
            fence: context.fence.cloned(),
            ..done_with(inner, key, inbox_id, &event, "unheard", [notice.as_str()])
        };
        finish(inner, conversation, None, &completion, context, done).await;
        return None;
    }
    let draft = Draft::open(inner, inbox_id, &event, resumed, &state.draft).await;
    let answered = answer(
        inner,
        key,
        state,
        conversation,
        (inbox_id, &event, resumed),
        (ahead, place),
    )
    .await;
    let shown = match draft {
        Some(draft) => draft.finish(inner).await,
        None => Shown::default(),
    };
    // The answer is on its way: a message arriving now is not "queued".
    state.active.store(false, Ordering::SeqCst);
    inner.replies.working(&event, false).await;
    let (turn, completion) = match answered {
        Answered::Turn(turn) => {
            let completion = completion(inner, key, inbox_id, &event, &turn.result);
            (Some(turn), completion)
        }
        Answered::Unopened => {
            let text = "Sorry, I could not open this conversation.";
            (
                None,
                done_with(inner, key, inbox_id, &event, "failed", [text]),
            )
        }
        Answered::Skipped(why) => {
            tracing::info!(session.key = %key, inbox.id = inbox_id, reason = %why, "run skipped");
            (None, done_with(inner, key, inbox_id, &event, "skipped", []))
        }
        Answered::Stopped => return None,
    };
    let mut completion = Completion {
        fence: context.fence.cloned(),
        ..completion
    };
    if state.revisions.end(inbox_id) {
        // The message was deleted while its turn ran: nothing is said.
        completion.outbox.clear();
        completion.outcome = "deleted".into();
    }
    if !shown.draft.is_empty() || resumed {
        // The last message said is written into what the stream showed,
        // here or (the platform not connected again yet) in a first run.
        match completion.outbox.last_mut() {
            Some(last) => last.draft_of = Some(inbox_id),
            None => super::outbox::withdraw(inner, inbox_id, &event.chat()).await,
        }
        shown.paced().await;
    }
    finish(
        inner,
        conversation,
        turn.as_deref(),
        &completion,
        context,
        done,
    )
    .await;
    None
}

/// Commits the end of a job and sends what it says.
async fn finish(
    inner: &Inner,
    conversation: &mut Option<(Conversation, i64)>,
    turn: Option<&Turn>,
    completion: &Completion,
    context: JobContext<'_>,
    done: Option<oneshot::Sender<()>>,
) {
    if let Some(rows) = commit(inner, conversation, turn, completion).await {
        for (id, out) in rows {
            if context.ended.is_cancelled() || !outbox::send(inner, id, &out).await {
                break;
            }
        }
    }
    if let Some(done) = done {
        let _ = done.send(());
    }
}

/// How a job's turn went.
enum Answered {
    /// It ran (well or not).
    Turn(Box<Turn>),
    /// The conversation could not be opened.
    Unopened,
    /// The daemon stopped while storage was away: the event stays pending.
    Stopped,
    /// Not made (its forge's settings do not want it): why.
    Skipped(String),
}

/// Runs the turn for `event` (`resumed`: begun before a restart), waiting
/// out storage outages: a turn that storage failed under goes on from what
/// was stored once it answers again.
async fn answer(
    inner: &Arc<Inner>,
    key: &str,
    state: &WorkerState,
    conversation: &mut Option<(Conversation, i64)>,
    (inbox_id, event, resumed): (i64, &InboundEvent, bool),
    (ahead, mut place): (Ahead, Place<'_>),
) -> Answered {
    // Set once this event's turn broke off (a crash before, or storage
    // now): what was stored of it is picked up instead of starting over.
    let mut again = resumed;
    let Ahead {
        session: mut known,
        mut notes,
    } = ahead;
    loop {
        let open = conversation
            .as_ref()
            .map(|(c, last)| (c.session().id.clone(), *last));
        if !again {
            known = match apply_reset(inner, key, event, (open, known), &mut place).await {
                Reset::Done => {
                    *conversation = None;
                    Known::Unread
                }
                Reset::Kept(read) => read,
            };
        }
        if conversation.is_none() {
            match open_conversation(inner, key, event, known, (&state.draft, &state.steers)).await {
                Ok(c) => {
                    let last = c.session().last_active_at;
                    *conversation = Some((c, last));
                }
                Err(err) => {
                    place.leave();
                    // A connection the server ended fails its statement
                    // with storage back by the time it is asked: the
                    // error tells.
                    let away = match err.store() {
                        Some(failed) => inner.store.failed_from_away(failed).await,
                        None => inner.store.is_away().await,
                    };
                    if away {
                        if !inner.store.until_back(&inner.stop).await {
                            return Answered::Stopped;
                        }
                        again = true;
                        known = Known::Unread;
                        continue;
                    }
                    tracing::error!(session.key = %key, error = %err, "cannot open the session");
                    return Answered::Unopened;
                }
            }
        }
        // Open: what follows waits on the forge and the model.
        place.leave();
        let Some((conv, last_active)) = conversation.as_mut() else {
            return Answered::Unopened;
        };
        let forge = match &inner.forges {
            Some(forges) => forges.desk(event).await,
            None => None,
        };
        let forge = match forge {
            Some(Opened::Skipped(why)) => return Answered::Skipped(why),
            Some(Opened::Desk(desk)) => Some(desk),
            None => None,
        };
        conv.set_forge(forge);
        conv.act_for(event);
        if let Some((owner, read)) = notes.take() {
            conv.read_ahead(owner, read);
        }
        let token = state.start_turn(event.actor().key());
        let turn = {
            let span =
                tracing::info_span!("turn", inbox.id = inbox_id, session.id = %conv.session().id);
            let turn =
                tracing::Instrument::instrument(conv.answer(&event.text, &token, again), span);
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
        *last_active = inner.clock.now_ms();
        if let Err(AgentError::Store(err)) = &turn.result
            && inner.store.failed_from_away(err).await
        {
            // Storage went away under the turn: nothing is lost and nothing
            // is said; the turn goes on from what was stored once the
            // database answers again.
            tracing::warn!(session.key = %key, inbox.id = inbox_id, "storage down during a turn; waiting for it");
            *conversation = None;
            if !inner.store.until_back(&inner.stop).await {
                return Answered::Stopped;
            }
            again = true;
            known = Known::Unread;
            continue;
        }
        return Answered::Turn(Box::new(turn));
    }
}
