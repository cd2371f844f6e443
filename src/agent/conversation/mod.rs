//! One session's agent and its turn loop; keeping it inside the context
//! window is in `context.rs`, running a turn's tool calls in `calls.rs`,
//! how a turn ends in `outcome.rs`, its calls against the budgets in
//! `spend.rs`.

mod calls;
mod context;
mod deps;
mod outcome;
mod spend;

pub use context::SPLIT_NOTICE;
pub use deps::{AgentDeps, SessionContext, TOOL_USE_GUIDANCE};
pub use outcome::{StopReason, TurnOutcome};

use calls::{Slot, distinct_calls};
use outcome::Tally;

use crate::telemetry::events;
use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::AgentError;
use super::execute::{Checked, check};
use super::history::sanitize;
use super::layer::{self, ClarifyBroker, Owner, Todos};
use super::message::{ChatMessage, Role, ToolCall};
use super::provider::{ChatRequest, ChatResponse, ProviderError, Usage};

use crate::store::{
    Committed, Completion, MemoryNote, Session, StoreError, TurnCommit, TurnRecord, now_ms,
};
use crate::tools::{ApprovalHook, SessionView};

/// Invalid JSON arguments make the loop ask the model again this many times.
const JSON_RETRIES: u32 = 3;
/// Consecutive turns whose calls were all invalid before the loop stops.
const MAX_INVALID_TURNS: u32 = 3;

/// Callbacks on tool activity (the terminal shows them; chats may show a
/// typing indicator).
pub trait AgentEvents: Send + Sync {
    /// A tool is about to run; `emoji` is the one it declares.
    fn tool_started(&self, _call: &ToolCall, _emoji: &'static str) {}
    /// A tool finished with `result`.
    fn tool_finished(&self, _call: &ToolCall, _result: &str) {}
    /// A model call starts: where its text streams to, for a watcher
    /// that shows it as it arrives.
    fn answer_started(&self) -> Option<crate::agent::provider::Live> {
        None
    }
}

/// Events nobody watches.
#[derive(Debug, Default)]
pub struct NoEvents;

impl AgentEvents for NoEvents {}

/// A turn that ran, and the writes it ends with (see
/// [`Conversation::commit`]).
#[derive(Debug)]
pub struct Turn {
    /// How it went.
    pub result: Result<TurnOutcome, AgentError>,
    answer: Option<ChatMessage>,
    record: TurnRecord,
    /// It held the budgets: its commit lets go.
    held: bool,
}

/// What the user is told when their message alone overflows the window.
pub const TOO_LONG: &str = "Your message is too long for the model's context window, even in a fresh conversation. Please send it in smaller parts.";

/// Said to the model, unstored, after an empty answer.
const EMPTY_NUDGE: &str =
    "Your last reply was empty. Please answer my previous message now, in plain words.";

/// What the user gets when the model answered nothing twice.
pub const EMPTY_ANSWER: &str =
    "I could not come up with an answer this time. Please try again, or put it another way.";

/// Said to the model, unstored, for its last call when the step budget
/// ran out.
const GRACE_NUDGE: &str = "You have used all the steps for this request and cannot call tools any more. In a few sentences, tell me what you did, what you found, and what is left to do.";

/// Said to the model, unstored, for its last call when a spend cap
/// stopped the turn.
const BUDGET_NUDGE: &str = "This request has reached its spending budget and you cannot call tools any more. In a few sentences, tell me what you did, what you found, and what is left to do.";

/// Heads the messages steered into a turn, added to the last result of a
/// batch of tool calls (a message of its own there would break the
/// pairing of calls and results some providers require).
pub const STEER_PREFIX: &str =
    "[The user sent this while you were working; take it into account from here on:]";

/// Said to the model, unstored, when its final answer cannot be read as
/// its task asks (`why`): it is asked once more.
fn unreadable_nudge(why: &str) -> String {
    format!("Your answer could not be read: {why}. Write it again, whole, in the format asked for.")
}

/// Output cap of the wrap-up call that ends a stopped turn.
const WRAP_UP_TOKENS: u32 = 1024;

/// One session's agent.
pub struct Conversation {
    deps: Arc<AgentDeps>,
    session: Session,
    context: SessionContext,
    owner: Option<Owner>,
    /// The event the running turn answers.
    origin: Option<Arc<crate::platform::InboundEvent>>,
    enabled: Vec<String>,
    disabled: Vec<String>,
    approvals: Arc<dyn ApprovalHook>,
    clarify: Option<Arc<dyn ClarifyBroker>>,
    jobs: Option<Arc<dyn super::layer::JobDesk>>,
    /// The running turn's forge (a webhook run's event scopes it).
    forge: Option<Arc<dyn super::layer::ForgeDesk>>,
    /// Where messages steered into a running turn come from.
    steering: Option<Arc<dyn super::layer::Steering>>,
    events: Arc<dyn AgentEvents>,
    /// The session's workspace, made when a tool first needs it: a turn
    /// that only talks makes no directory.
    workspace: std::sync::OnceLock<PathBuf>,
    history: Vec<ChatMessage>,
    /// Id of the last stored message of the history.
    last_id: i64,
    /// Memory notes read ahead for the next turn, and whose.
    notes: Option<(String, Vec<MemoryNote>)>,
    /// How many of the history's last messages are not stored yet: a
    /// turn's messages are stored together, before each model call that
    /// follows tool results and with the turn's end.
    unstored: usize,
    /// The history was shortened to fit the context and saving its
    /// checkpoint failed, so reading it again would not give it back.
    unsaved: bool,
    todos: Todos,
    /// The nested directories whose hints the conversation has had.
    hints: super::hints::Hints,
    /// The running turn's final answer, stored by [`Conversation::commit`].
    staged: Option<ChatMessage>,
    /// The endpoint the running turn's calls go to (a fallback, once the
    /// main model failed in this turn).
    route: super::models::Route,
    /// The running turn's account with the budgets, when a cap applies.
    meter: Option<crate::budgets::Meter>,
    /// What the running turn's model calls used.
    used: Usage,
    /// What they cost, each priced as the model that answered it, in
    /// millionths.
    used_micros: i64,
    /// The last call's prompt as the provider counted it over its
    /// estimate (at least 1): later estimates are scaled by it.
    calibration: f64,
    /// The unscaled prompt estimate of the last metered call.
    estimated: u64,
    /// The prompt estimate of the metered call on its way (0: none).
    asked: u64,
}

impl Conversation {
    /// Opens a session's agent, restoring its history from storage.
    pub async fn open(
        deps: Arc<AgentDeps>,
        session: Session,
        context: SessionContext,
        toolsets: (Vec<String>, Vec<String>),
        approvals: Arc<dyn ApprovalHook>,
    ) -> Result<Self, AgentError> {
        let (history, last_id) = context::restore(&deps.store, &session.id).await?;
        Ok(Self::with_history(
            deps,
            session,
            context,
            toolsets,
            approvals,
            (history, last_id),
        ))
    }

    /// Like [`open`](Self::open) for a session just created, which has no
    /// history to read.
    pub fn fresh(
        deps: Arc<AgentDeps>,
        session: Session,
        context: SessionContext,
        toolsets: (Vec<String>, Vec<String>),
        approvals: Arc<dyn ApprovalHook>,
    ) -> Self {
        Self::with_history(deps, session, context, toolsets, approvals, (Vec::new(), 0))
    }

    fn with_history(
        deps: Arc<AgentDeps>,
        session: Session,
        context: SessionContext,
        toolsets: (Vec<String>, Vec<String>),
        approvals: Arc<dyn ApprovalHook>,
        (history, last_id): (Vec<ChatMessage>, i64),
    ) -> Self {
        let owner = session.user_id.clone().map(|user_id| Owner {
            platform: session.platform.clone(),
            user_id,
        });
        Self {
            todos: Todos::restore(&history),
            deps,
            session,
            context,
            owner,
            origin: None,
            enabled: toolsets.0,
            disabled: toolsets.1,
            approvals,
            clarify: None,
            jobs: None,
            forge: None,
            steering: None,
            events: Arc::new(NoEvents),
            workspace: std::sync::OnceLock::new(),
            history,
            last_id,
            notes: None,
            hints: Default::default(),
            unstored: 0,
            unsaved: false,
            staged: None,
            route: Default::default(),
            meter: None,
            used: Usage::default(),
            used_micros: 0,
            calibration: 1.0,
            estimated: 0,
            asked: 0,
        }
    }

    /// Wires the chat's scheduled jobs (the `cronjob` tool).
    pub fn with_jobs(mut self, desk: Arc<dyn super::layer::JobDesk>) -> Self {
        self.jobs = Some(desk);
        self
    }

    /// Sets the forge the next turns read (`None`: no forge tools work).
    pub fn set_forge(&mut self, desk: Option<Arc<dyn super::layer::ForgeDesk>>) {
        self.forge = desk;
    }

    /// Wires where messages steered into a running turn come from.
    pub fn with_steering(mut self, steering: Arc<dyn super::layer::Steering>) -> Self {
        self.steering = Some(steering);
        self
    }

    /// Wires the broker that asks the human `clarify` questions.
    pub fn with_clarify(mut self, broker: Arc<dyn ClarifyBroker>) -> Self {
        self.clarify = Some(broker);
        self
    }

    /// Wires tool activity callbacks.
    pub fn with_events(mut self, events: Arc<dyn AgentEvents>) -> Self {
        self.events = events;
        self
    }

    /// The conversation so far, as the model will see it.
    pub fn history(&self) -> &[ChatMessage] {
        &self.history
    }

    /// The stored session.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Whether dropping this conversation and opening it again from
    /// storage gives the same conversation (a shortened history is saved
    /// as a checkpoint; only a failed save keeps it in memory alone).
    pub fn reloadable(&self) -> bool {
        !self.unsaved && self.unstored == 0
    }

    /// Roughly how much memory the history holds, in bytes.
    pub fn heap_bytes(&self) -> usize {
        self.history.iter().map(ChatMessage::heap_bytes).sum()
    }

    /// Whose memory notes its turns show (`<platform>:<user id>`).
    pub fn owner_key(&self) -> Option<String> {
        self.owner.as_ref().map(Owner::key)
    }

    /// The next turns answer `event` and act for its sender: in a shared
    /// thread or group, each person's memory notes, past conversations and
    /// approvals are their own, not the first sender's (sessions without a
    /// person keep theirs), and a background process a turn starts reports
    /// as its event, to its sender.
    pub fn act_for(&mut self, event: &crate::platform::InboundEvent) {
        if self.owner.is_some() && !event.user_id.is_empty() {
            self.owner = Some(Owner {
                platform: event.platform.to_string(),
                user_id: event.user_id.clone(),
            });
        }
        self.origin = Some(Arc::new(event.clone()));
    }

    /// Gives the next turn the notes of `owner`, read ahead of it (with
    /// the turn's start, in the same trip to storage); the turn reads
    /// them itself unless `owner` is still [`owner_key`](Self::owner_key).
    pub fn read_ahead(&mut self, owner: String, notes: Vec<MemoryNote>) {
        self.notes = Some((owner, notes));
    }

    /// The system prompt of this turn: the configured one, where the
    /// conversation happens, and the user's saved notes.
    fn system_prompt(&self) -> String {
        let mut prompt = format!("{}\n\n{}", self.deps.system_prompt, self.context.describe());
        if self.needs_tool_use_guidance() {
            prompt.push_str("\n\n");
            prompt.push_str(TOOL_USE_GUIDANCE);
        }
        prompt
    }

    /// The notes the user saved, as the section the turn's own message
    /// carries: not in the system prompt, which stays byte-identical
    /// across turns however the notes change, so a provider's prompt cache
    /// keeps its prefix.
    async fn recall(&mut self) -> Option<super::message::Recalled> {
        let ahead = self.notes.take();
        let owner = self.owner.as_ref().map(Owner::key)?;
        let notes = match ahead {
            Some((of, notes)) if of == owner => Ok(notes),
            _ => self.deps.store.notes(&owner).await,
        };
        match notes {
            Ok(notes) => {
                layer::recall(&notes).map(|notes| super::message::Recalled { owner, notes })
            }
            Err(err) => {
                tracing::warn!(error = %err, "could not read the user's notes");
                None
            }
        }
    }

    /// Whether this session's model is of a family that narrates instead
    /// of calling its tools, and it has tools to call.
    fn needs_tool_use_guidance(&self) -> bool {
        let model = self.deps.models.for_session(&self.session).to_lowercase();
        let has_tools = self
            .deps
            .tools
            .toolsets
            .session_view(&self.enabled, &self.disabled)
            .is_ok_and(|view| !view.schemas.is_empty());
        has_tools
            && self
                .deps
                .tool_use_guidance
                .iter()
                .any(|family| model.contains(family.as_str()))
    }

    /// Adds `message` to the history; it is stored by the next
    /// [`flush`](Self::flush) or [`commit`](Self::commit).
    fn push(&mut self, message: ChatMessage) {
        self.history.push(message);
        self.unstored += 1;
    }

    /// Stores the messages [`push`](Self::push)ed since the last store,
    /// in one transaction.
    async fn flush(&mut self) -> Result<(), AgentError> {
        let pending = &self.history[self.history.len() - self.unstored..];
        let calls: Vec<Option<String>> = pending.iter().map(ChatMessage::stored_calls).collect();
        let rows: Vec<_> = pending
            .iter()
            .zip(&calls)
            .map(|(m, c)| m.to_row(c.as_deref()))
            .collect();
        if let Some(id) = self
            .deps
            .store
            .append_messages(&self.session.id, &rows)
            .await?
        {
            self.last_id = id;
        }
        self.unstored = 0;
        Ok(())
    }

    /// Runs one turn for the user's `text` and stores its end (see
    /// [`answer`](Self::answer) and [`commit`](Self::commit)).
    pub async fn run_turn(
        &mut self,
        text: &str,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, AgentError> {
        let turn = self.answer(text, cancel, false).await;
        self.commit(&turn, None).await?;
        turn.result
    }

    /// Runs one turn for the user's `text`. Its messages are stored as it
    /// goes, except its final answer: that is stored by
    /// [`commit`](Self::commit), together with the completion of the event
    /// it answers, so an answer is never stored for an event left pending.
    ///
    /// `again`: this text's turn was started before and broke off (storage
    /// failed under it, or the daemon died): the conversation was opened
    /// anew from storage, the user's message is not stored a second time
    /// if it was stored then, and whatever of the turn was stored stays
    /// part of it.
    pub async fn answer(&mut self, text: &str, cancel: &CancellationToken, again: bool) -> Turn {
        let started_at = now_ms();
        self.staged = None;
        let stored = again
            && self
                .history
                .iter()
                .rev()
                .find(|m| m.role == Role::User)
                .is_some_and(|m| m.content == text);
        if !stored {
            self.push(ChatMessage::user(text));
        }
        let result = match self.open_meter(again).await {
            Ok(()) => self.turn_loop(cancel).await,
            Err(err) => Err(err),
        };
        let outcome_label = match &result {
            Ok(outcome) => outcome.stop.as_str().to_string(),
            Err(err) => format!("error: {err}"),
        };
        let (model_calls, tool_calls) = match &result {
            Ok(o) => (o.model_calls, o.tool_calls),
            Err(_) => (0, 0),
        };
        // Calls made before an error cost what they cost.
        let usage = self.used;
        events::emit(events::TurnFinished {
            outcome: outcome_label.split(':').next().unwrap_or("error"),
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
        });
        let model = self.deps.models.for_session(&self.session).to_string();
        let cost_micros = self.used_micros;
        let (user_id, job_id) = self.charged();
        let held = self.holds_budget();
        // The turn is over: its hold stops being renewed (the commit
        // removes it).
        self.meter = None;
        Turn {
            answer: self.staged.take(),
            held,
            record: TurnRecord {
                session_id: self.session.id.clone(),
                started_at,
                finished_at: now_ms(),
                model_calls: model_calls.into(),
                tool_calls: tool_calls.into(),
                prompt_tokens: i64::try_from(usage.prompt_tokens).unwrap_or(i64::MAX),
                completion_tokens: i64::try_from(usage.completion_tokens).unwrap_or(i64::MAX),
                cache_read_tokens: i64::try_from(usage.cache_read_tokens).unwrap_or(i64::MAX),
                cache_write_tokens: i64::try_from(usage.cache_write_tokens).unwrap_or(i64::MAX),
                outcome: outcome_label,
                model: Some(model),
                cost_micros,
                platform: Some(self.session.platform.clone()),
                chat_id: Some(self.session.chat_id.clone()),
                user_id,
                job_id,
            },
            result,
        }
    }

    /// Stores the end of `turn` in one transaction: its answer, its
    /// record, the session's activity and, with `done`, the outbox rows
    /// and completion of the event it answered. `None` when that event was
    /// already completed (an earlier commit landed though its reply was
    /// lost): nothing is written and this conversation lacks the answer,
    /// so it should be opened again. Fails without writing anything, so it
    /// may be tried again.
    pub async fn commit(
        &mut self,
        turn: &Turn,
        done: Option<&Completion>,
    ) -> Result<Option<Committed>, StoreError> {
        let pending = &self.history[self.history.len() - self.unstored..];
        let messages: Vec<&ChatMessage> = pending.iter().chain(&turn.answer).collect();
        let calls: Vec<Option<String>> = messages.iter().map(|m| m.stored_calls()).collect();
        let writes = TurnCommit {
            session_id: &self.session.id,
            messages: messages
                .iter()
                .zip(&calls)
                .map(|(m, c)| m.to_row(c.as_deref()))
                .collect(),
            record: &turn.record,
            held: turn.held,
        };
        let committed = self.deps.store.commit_turn(Some(&writes), done).await?;
        if let Some(c) = &committed {
            self.history.extend(turn.answer.clone());
            self.unstored = 0;
            if let Some(id) = c.last_id {
                self.last_id = id;
            }
        }
        Ok(committed)
    }

    /// The turn's model–tools loop, whole on purpose: each step's budget,
    /// retry and stop checks share the tally and read in the order they
    /// apply.
    async fn turn_loop(&mut self, cancel: &CancellationToken) -> Result<TurnOutcome, AgentError> {
        let mut turn = Tally::new(self.deps.max_iterations, self.tool_output_budget());
        let mut json_retries = 0u32;
        let mut invalid_turns = 0u32;
        let mut room = context::Room::default();
        let mut nudged = false;
        let mut nudge = None;
        // The answer was unreadable once: the words it is asked again with.
        let mut reread: Option<String> = None;
        let mut reasked = false;
        let system = self.system_prompt();
        let recalled = self.recall().await;
        if let Some(asked) = self.history.iter_mut().rev().find(|m| m.role == Role::User) {
            asked.recalled = recalled;
        }
        self.route = Default::default();
        loop {
            if cancel.is_cancelled() {
                return Ok(turn.stop(StopReason::Cancelled, self.used));
            }
            let view = self
                .deps
                .tools
                .toolsets
                .session_view(&self.enabled, &self.disabled)?;
            if !turn.budget.consume() {
                return self
                    .wrap_up(&system, &mut turn, StopReason::BudgetExhausted, cancel)
                    .await;
            }
            let repairs = sanitize(&mut self.history);
            if repairs != Default::default() {
                tracing::warn!(?repairs, "history repaired before the model call");
            }
            if !self
                .make_room(&system, view.tokens, &mut room, &mut turn.notice)
                .await?
            {
                return Ok(turn.stop(StopReason::TooLong, self.used));
            }
            let max_tokens = self.deps.max_tokens;
            if let Some(why) = self
                .afford(&system, view.tokens, nudge, max_tokens, &mut turn.notice)
                .await?
            {
                turn.budget.refund();
                turn.over_budget = Some(why);
                return self
                    .wrap_up(&system, &mut turn, StopReason::OverBudget, cancel)
                    .await;
            }
            let again = reread.take();
            let said = nudge.take().or(again.as_deref());
            let response = match self.ask(&system, &view, said, max_tokens, cancel).await {
                Ok(r) => r,
                Err(ProviderError::Cancelled) => {
                    turn.budget.refund();
                    self.unanswered().await?;
                    return Ok(turn.stop(StopReason::Cancelled, self.used));
                }
                Err(ProviderError::ContextOverflow { body }) => {
                    // Our estimate said it fit; the provider disagrees.
                    tracing::warn!(body = %crate::render::clip(&body, 200), "the model's context window overflowed");
                    turn.budget.refund();
                    room.overflowed();
                    continue;
                }
                Err(err) => {
                    self.unanswered().await?;
                    return Err(err.into());
                }
            };
            self.spent(response.usage).await?;
            if !response.content.trim().is_empty() {
                turn.last_text = response.content.clone();
            }
            if response.tool_calls.is_empty() {
                if response.content.trim().is_empty() && !nudged {
                    // Empty, or it only thought: ask once more, plainly.
                    tracing::warn!("the model's answer was empty; asking again");
                    nudged = true;
                    nudge = Some(EMPTY_NUDGE);
                    continue;
                }
                if !response.content.trim().is_empty() {
                    if !reasked && let Some(why) = self.unreadable(&response.content).await {
                        // Kept in the history, and asked for once more.
                        reasked = true;
                        self.push(ChatMessage::assistant(response.content));
                        reread = Some(unreadable_nudge(&why));
                        continue;
                    }
                    turn.last_text = response.content;
                } else if turn.last_text.trim().is_empty() {
                    turn.last_text = EMPTY_ANSWER.to_string();
                }
                self.staged = Some(ChatMessage::assistant(turn.last_text.clone()));
                return Ok(turn.stop(StopReason::Final, self.used));
            }

            let checked: Vec<Checked> = response
                .tool_calls
                .iter()
                .map(|c| check(c, &view.names, response.finish))
                .collect();
            if checked.iter().any(|c| matches!(c, Checked::BadJson(..)))
                && json_retries < JSON_RETRIES
            {
                json_retries += 1;
                turn.budget.refund();
                events::emit(events::InvalidToolJson {
                    attempt: json_retries,
                });
                continue;
            }
            let calls: Vec<ToolCall> = checked.iter().map(|c| c.call().clone()).collect();
            self.push(ChatMessage::assistant_calls(
                response.content.clone(),
                calls,
            ));

            let all_invalid = checked.iter().all(|c| !matches!(c, Checked::Ready(..)));
            invalid_turns = if all_invalid { invalid_turns + 1 } else { 0 };
            let (unique, slots) = distinct_calls(&checked);
            let mut outputs = self.run_batch(&unique, cancel).await;
            turn.tool_calls += unique.len() as u32;
            let mut slots = slots.into_iter();
            for call in &checked {
                let result = match (call.refusal(), slots.next()) {
                    (Some(refusal), _) => refusal,
                    (None, Some(Slot::First(u))) => turn.afford(std::mem::take(&mut outputs[u])),
                    (None, Some(Slot::Repeat(u))) => format!(
                        "Same call as {}: it ran once; its result is above.",
                        unique[u].0.id
                    ),
                    (None, None) => String::new(),
                };
                // Only the turn itself marks what its user steered in.
                let result = result.replace(STEER_PREFIX, "[a forged steering marker]");
                self.push(ChatMessage::tool_result(call.call(), result));
            }
            self.take_steers(&mut turn);
            // The calls and their results are stored before the model is
            // asked again: a turn picked up after a crash goes on from
            // them instead of running the tools again.
            self.flush().await?;
            if invalid_turns >= MAX_INVALID_TURNS {
                return Ok(turn.stop(StopReason::InvalidToolCalls, self.used));
            }
        }
    }

    /// Why a final answer cannot be read as the run's task asks (a
    /// review's findings block), when it cannot.
    async fn unreadable(&self, answer: &str) -> Option<String> {
        self.forge.as_ref()?.check_answer(answer).await.err()
    }

    /// Adds the messages steered in since the last batch to its last
    /// result, so the next model call reads them.
    fn take_steers(&mut self, turn: &mut Tally) {
        let steers = self.steering.as_ref().map(|s| s.take()).unwrap_or_default();
        let Some(last) = self.history.last_mut().filter(|m| m.role == Role::Tool) else {
            return;
        };
        for steer in steers {
            last.content
                .push_str(&format!("\n\n{STEER_PREFIX}\n{}", steer.text));
            turn.steered.push(steer.id);
        }
    }

    /// One model call (with retries) on the history as it is, plus
    /// `nudge` as a last user message that is not stored.
    async fn ask(
        &self,
        system: &str,
        tools: &Arc<SessionView>,
        nudge: Option<&str>,
        max_tokens: u32,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, ProviderError> {
        let mut messages = self.history.clone();
        // Each message keeps the notes it went with, so the requests of
        // later turns repeat the earlier ones byte for byte (a provider's
        // prompt cache keeps its prefix); another sender's never show.
        let owner = self.owner.as_ref().map(Owner::key);
        for message in &mut messages {
            if let Some(recalled) = message.recalled.take()
                && owner.as_ref() == Some(&recalled.owner)
            {
                message.content = format!("{}\n\n{}", recalled.notes, message.content);
            }
        }
        messages.extend(nudge.map(ChatMessage::user));
        let request = ChatRequest {
            system: system.to_string(),
            messages,
            tools: tools.clone(),
            max_tokens,
            model: None,
            live: self.events.answer_started(),
        };
        let models = &self.deps.models;
        models
            .chat_in(
                request,
                models.for_session(&self.session),
                &self.route,
                cancel,
            )
            .await
    }

    /// The turn stops for `reason` (its step budget is spent, or a spend
    /// cap is near): one last call without tools, with a short output cap,
    /// lets the model say where it got to, instead of the user getting
    /// whatever it said last in passing. Under a spend cap the call is
    /// made only if it fits too.
    async fn wrap_up(
        &mut self,
        system: &str,
        turn: &mut Tally,
        reason: StopReason,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, AgentError> {
        sanitize(&mut self.history);
        let nudge = match reason {
            StopReason::OverBudget => BUDGET_NUDGE,
            _ => GRACE_NUDGE,
        };
        let max_tokens = self.deps.max_tokens.min(WRAP_UP_TOKENS);
        if let Some(why) = self
            .afford(system, 0, Some(nudge), max_tokens, &mut turn.notice)
            .await?
        {
            turn.over_budget.get_or_insert(why);
            return Ok(turn.stop(StopReason::OverBudget, self.used));
        }
        match self
            .ask(system, &Default::default(), Some(nudge), max_tokens, cancel)
            .await
        {
            Ok(response) => {
                self.spent(response.usage).await?;
                if !response.content.trim().is_empty() {
                    turn.last_text = response.content;
                    self.staged = Some(ChatMessage::assistant(turn.last_text.clone()));
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "the wrap-up call failed");
                self.unanswered().await?;
            }
        }
        Ok(turn.stop(reason, self.used))
    }
}

impl std::fmt::Debug for Conversation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversation")
            .field("session", &self.session.key)
            .field("history", &self.history.len())
            .finish_non_exhaustive()
    }
}

impl Role {
    /// Whether the message came from the model.
    pub fn is_assistant(self) -> bool {
        self == Role::Assistant
    }
}
