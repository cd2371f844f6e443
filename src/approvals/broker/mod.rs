//! The approval broker: a waiting tool call asks, the session's platform
//! shows a prompt with four choices through its port, and a button press
//! or a decision command from an authorised person resolves it, while
//! everything else keeps running. Timeouts and cancellation deny. A
//! decision takes effect in one place ([`Broker::apply`]): the grant, the
//! stored status, the audit entry, the metric; the prompt is then edited
//! to show the outcome.

mod commands;

pub use commands::shown_briefly;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::decision::{Choice, Decision, Refusal, prompt};
use super::detect::Match;
use super::policy::grantable;
use crate::config::identity;
use crate::config::{ApprovalsConfig, ChatTarget};
use crate::platform::{Actor, ChatRef, Platforms, retrying};
use crate::store::{
    ApprovalRecord, ApprovalStatus, AuditEvent, AuditKind, Grant, PatternKeys, Settlement, Store,
    StoreError, new_id, now_ms,
};
use crate::telemetry::events;

/// Why a decision cannot be asked for anywhere.
#[derive(Debug, thiserror::Error)]
enum NoChat {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("unknown session")]
    UnknownSession,
    #[error("this session has no human and [approvals] route_to is not set")]
    NoRoute,
}

/// How often a request that timed out or was cancelled while a press held
/// it looks whether the press gave it back (its decision not recorded).
const LOOK_AGAIN: Duration = Duration::from_millis(200);

/// Longest command shown in a prompt (with the files it runs, bounded
/// by [`scripts::shown`](super::scripts::shown)).
const PROMPT_COMMAND_CHARS: usize = super::scripts::SHOWN_MAX;

/// A request from a tool call.
#[derive(Debug, Clone)]
pub struct Request {
    /// The session whose turn asks.
    pub session_id: String,
    /// `<platform>:<user>` of the person whose turn it is; `None` for
    /// sessions without a human (webhook runs).
    pub requester: Option<String>,
    /// The command.
    pub command: String,
    /// Why it was flagged.
    pub matches: Vec<Match>,
}

struct Waiter {
    session_id: String,
    requester: Option<String>,
    command: String,
    keys: Vec<String>,
    chat: ChatRef,
    message_id: Option<String>,
    created_at: i64,
    tx: oneshot::Sender<Decision>,
}

/// The broker; share it behind an `Arc`.
pub struct Broker {
    store: Store,
    platforms: Arc<Platforms>,
    pending: Mutex<HashMap<String, Waiter>>,
    stale: Mutex<Vec<crate::store::PromptRef>>,
    approvers: Vec<String>,
    timeout: Duration,
    route_to: Option<ChatTarget>,
    /// With several replicas: where decisions for requests waiting on
    /// another replica go.
    relay: std::sync::OnceLock<Arc<crate::cluster::relay::Relay>>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("pending", &self.pending_count())
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// A broker over `store` with the `[approvals]` settings, asking
    /// through the ports of `platforms`.
    pub fn new(store: Store, config: &ApprovalsConfig, platforms: Arc<Platforms>) -> Self {
        Self {
            store,
            platforms,
            pending: Mutex::new(HashMap::new()),
            stale: Mutex::new(Vec::new()),
            approvers: config.approvers.clone(),
            timeout: Duration::from_secs(config.timeout_secs),
            route_to: config.route_to.clone(),
            relay: std::sync::OnceLock::new(),
        }
    }

    /// Sends decisions for requests this replica does not wait for through
    /// `relay` to the replica that does (the first relay given stays).
    pub fn relay_through(self: &Arc<Self>, relay: Arc<crate::cluster::relay::Relay>) {
        super::relay::Decider::register(self, &relay);
        let _ = self.relay.set(relay);
    }

    /// Whether a turn on this replica waits for approval `id`.
    pub fn waits_for(&self, id: &str) -> bool {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(id)
    }

    /// `platform` has connected: prompts a previous run left open there
    /// are closed now.
    pub async fn platform_attached(&self, platform: &str) {
        let Some(port) = self.platforms.port(platform) else {
            return;
        };
        let stale: Vec<_> = {
            let mut all = self.stale.lock().unwrap_or_else(|e| e.into_inner());
            let (mine, rest) = all
                .drain(..)
                .partition(|p| p.prompt_platform.as_deref() == Some(platform));
            *all = rest;
            mine
        };
        for p in stale {
            if let (Some(chat), Some(message)) = (p.prompt_chat, p.prompt_message) {
                let chat = ChatRef {
                    platform: platform.into(),
                    chat,
                    thread: None,
                };
                let outcome = "⌛ Expired: the gateway restarted before a decision — not run";
                if let Err(err) = retrying(|| port.edit(&chat, &message, outcome)).await {
                    tracing::warn!(platform, error = %err, "stale approval prompt not closed");
                }
            }
        }
    }

    /// Requests waiting for a decision.
    pub fn pending_count(&self) -> usize {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Marks every approval still pending in storage (from a previous run)
    /// as expired; their prompts are closed when their platform connects.
    /// Returns how many there were.
    pub async fn expire_stale(&self) -> crate::store::Result<usize> {
        self.expire_left(None).await
    }

    /// Expires the approvals sessions `keys` left pending on a replica
    /// that died (the turns waiting for them died with it): called when
    /// this replica takes the sessions over, before their turns run. Their
    /// prompts are closed by [`close_expired`](Self::close_expired).
    pub async fn expire_left_by(&self, keys: &[&str]) -> crate::store::Result<usize> {
        self.expire_left(Some(keys)).await
    }

    /// Closes the prompts of the approvals expired so far, on the platforms
    /// connected.
    pub async fn close_expired(&self) {
        let platforms: std::collections::BTreeSet<String> = self
            .stale
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(|p| p.prompt_platform.clone())
            .collect();
        for platform in platforms {
            self.platform_attached(&platform).await;
        }
    }

    async fn expire_left(&self, keys: Option<&[&str]>) -> crate::store::Result<usize> {
        let stale = self.store.pending_prompts(keys).await?;
        for p in &stale {
            let Some(record) = self.store.approval(&p.id).await? else {
                continue;
            };
            let keys = record.pattern_keys.0.join(",");
            let settled = self
                .settle(
                    &record.id,
                    &Settlement {
                        status: ApprovalStatus::Expired,
                        approver: None,
                        reason: Some("gateway restarted"),
                        grant: Grant::Nothing,
                        keys: &[],
                        entry: AuditEvent {
                            approval_id: &record.id,
                            event: AuditKind::Expired,
                            session_id: &record.session_id,
                            requester: &record.requester,
                            actor: Some("restart"),
                            command: &record.command,
                            pattern_keys: &keys,
                            outcome: "expired",
                        },
                    },
                )
                .await;
            if let Err(err) = settled {
                // An expiry only denies: it stands without its entry.
                tracing::error!(approval.id = %record.id, error = %err, "expiry not audited");
                self.store
                    .decide_approval(
                        &record.id,
                        ApprovalStatus::Expired,
                        None,
                        Some("gateway restarted"),
                    )
                    .await?;
            }
        }
        let count = stale.len();
        self.stale
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(stale);
        Ok(count)
    }

    /// Appends an entry to the audit trail (a decision goes with its
    /// entry through [`settle`](Self::settle)). A failure is logged and
    /// returned: a request that could not be audited is refused; a
    /// refusal stands without its entry.
    #[allow(clippy::too_many_arguments)]
    async fn audit(
        &self,
        id: &str,
        event: AuditKind,
        session_id: &str,
        requester: &str,
        actor: Option<&str>,
        command: &str,
        keys: &[String],
        outcome: &str,
    ) -> Result<(), crate::store::StoreError> {
        let keys = keys.join(",");
        let entry = AuditEvent {
            approval_id: id,
            event,
            session_id,
            requester,
            actor,
            command,
            pattern_keys: &keys,
            outcome,
        };
        let mut appended = self.store.append_audit(&entry).await;
        if appended.as_ref().is_err_and(|e| e.is_retryable()) {
            // A connection the server ended since its last use: once more,
            // on another.
            appended = self.store.append_audit(&entry).await;
        }
        if let Err(err) = &appended {
            tracing::error!(approval.id = id, error = %err, "audit append failed");
        }
        appended.map(|_| ())
    }

    /// Records a decision whole ([`Store::settle_approval`]), once more on
    /// a storage error worth retrying (a connection the server ended).
    async fn settle(&self, id: &str, settlement: &Settlement<'_>) -> Result<bool, StoreError> {
        let settled = self.store.settle_approval(id, settlement).await;
        if !settled.as_ref().is_err_and(|e| e.is_retryable()) {
            return settled;
        }
        if self.store.settle_approval(id, settlement).await? {
            return Ok(true);
        }
        // The first try may have committed and lost its answer with its
        // connection: then the stored decision is this one.
        let stored = self.store.approval(id).await?;
        Ok(stored.is_some_and(|r| {
            r.status == settlement.status && r.approver.as_deref() == settlement.approver
        }))
    }

    /// Asks for a decision and waits for it (or the timeout, or `cancel`).
    /// Whole on purpose: the record, the prompt and the wait are undone
    /// together on each way out.
    pub async fn request(&self, request: Request, cancel: &CancellationToken) -> Decision {
        let id = new_id();
        let keys: Vec<String> = request.matches.iter().map(|m| m.key.to_string()).collect();
        let requester = request.requester.clone().unwrap_or_else(|| "-".into());
        let chat = match self.chat_for(&request).await {
            Ok(chat) => chat,
            Err(why) => {
                self.audit(
                    &id,
                    AuditKind::Refused,
                    &request.session_id,
                    &requester,
                    Some("policy"),
                    &request.command,
                    &keys,
                    "no_approver",
                )
                .await
                .ok();
                return Decision::NoApprover(why.to_string());
            }
        };
        let Some(port) = self.platforms.port(&chat.platform) else {
            return Decision::NoApprover(format!("{} is not connected", chat.platform));
        };
        let now = now_ms();
        let record = ApprovalRecord {
            id: id.clone(),
            session_id: request.session_id.clone(),
            session_key: String::new(),
            requester: requester.clone(),
            command: request.command.clone(),
            pattern_keys: PatternKeys(keys.clone()),
            status: ApprovalStatus::Pending,
            approver: None,
            reason: None,
            created_at: now,
            expires_at: now + self.timeout.as_millis() as i64,
            decided_at: None,
        };
        if let Err(err) = self.store.insert_approval(&record).await {
            return Decision::NoApprover(format!("the request could not be stored ({err})"));
        }
        if let Err(err) = self
            .audit(
                &id,
                AuditKind::Requested,
                &request.session_id,
                &requester,
                None,
                &request.command,
                &keys,
                "pending",
            )
            .await
        {
            // No command waits on a person without its request in the
            // trail: refused, as when it cannot be stored.
            let why = format!("the request could not be audited ({err})");
            let refused = Decision::NoApprover(why.clone());
            if let Err(err) = self
                .store
                .decide_approval(&id, refused.status(), Some("policy"), Some(&why))
                .await
            {
                tracing::warn!(approval.id = %id, error = %err, "refused request not marked decided; expired at the next start");
            }
            return refused;
        }
        events::emit(events::ApprovalStep {
            outcome: "requested",
        });
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                id.clone(),
                Waiter {
                    session_id: request.session_id.clone(),
                    requester: request.requester.clone(),
                    command: request.command.clone(),
                    keys: keys.clone(),
                    chat: chat.clone(),
                    message_id: None,
                    created_at: now,
                    tx,
                },
            );
        let reasons: Vec<&str> = request.matches.iter().map(|m| m.description).collect();
        let prompt = prompt(
            &id,
            &crate::render::clip(&request.command, PROMPT_COMMAND_CHARS),
            &reasons,
        );
        match retrying(|| port.ask(&chat, &prompt)).await {
            Ok(message_id) => {
                if let Some(w) = self
                    .pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_mut(&id)
                {
                    w.message_id = Some(message_id.clone());
                }
                if let Err(err) = self
                    .store
                    .set_approval_prompt(&id, &chat.platform, &chat.chat, &message_id)
                    .await
                {
                    // The prompt cannot be closed after a restart; the
                    // request itself still works.
                    tracing::warn!(approval.id = %id, error = %err, "prompt reference not stored");
                }
            }
            Err(err) => {
                tracing::warn!(approval.id = %id, error = %err, "approval prompt could not be shown");
                return self
                    .finish_unanswered(
                        &id,
                        Decision::NoApprover(format!("the prompt could not be shown ({err})")),
                    )
                    .await
                    .unwrap_or(Decision::Expired);
            }
        }
        let mut rx = rx;
        let ending = tokio::select! {
            decided = &mut rx => return decided.unwrap_or(Decision::Expired),
            _ = tokio::time::sleep(self.timeout) => Decision::Expired,
            _ = cancel.cancelled() => Decision::Cancelled,
        };
        // A press may hold the request now: its decision comes through the
        // channel, or, when it could not be recorded, the request is back
        // and this ending applies.
        loop {
            if let Some(d) = self.finish_unanswered(&id, ending.clone()).await {
                return d;
            }
            tokio::select! {
                decided = &mut rx => return decided.unwrap_or(Decision::Expired),
                _ = tokio::time::sleep(LOOK_AGAIN) => {}
            }
        }
    }

    async fn chat_for(&self, request: &Request) -> Result<ChatRef, NoChat> {
        let session = self
            .store
            .session(&request.session_id)
            .await?
            .ok_or(NoChat::UnknownSession)?;
        let own = ChatRef {
            platform: session.platform.into(),
            chat: session.chat_id,
            thread: session.thread_id,
        };
        if request.requester.is_none() {
            if self
                .platforms
                .profile(&own.platform)
                .is_some_and(|p| p.asks_in.contains(&own.chat))
            {
                return Ok(own);
            }
            return self
                .route_to
                .as_ref()
                .map(|t| ChatRef {
                    platform: t.platform.as_str().into(),
                    chat: t.chat.clone(),
                    thread: None,
                })
                .ok_or(NoChat::NoRoute);
        }
        Ok(own)
    }

    /// Ends a request nobody answered. `None` when a decision won the race
    /// (it is on its way through the channel).
    async fn finish_unanswered(&self, id: &str, decision: Decision) -> Option<Decision> {
        let waiter = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)?;
        match self.apply(id, &waiter, &decision, None).await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(approval.id = id, "approval already decided elsewhere"),
            // The request is over whatever storage says; the next start
            // expires a row left pending.
            Err(err) => {
                tracing::error!(approval.id = id, error = %err, "unanswered approval not recorded")
            }
        }
        self.close_prompt(&waiter, &decision).await;
        Some(decision)
    }

    /// Where a decision takes effect, for every way one is made (a press,
    /// a command, the timeout, a cancelled turn): the grant it gives, the
    /// stored status, the audit entry and the metric. A grant that cannot
    /// be stored fails the whole decision, so nobody is told "Done" for
    /// an allowlist entry that does not exist. False when the request was
    /// decided elsewhere first.
    async fn apply(
        &self,
        id: &str,
        waiter: &Waiter,
        decision: &Decision,
        actor: Option<&str>,
    ) -> Result<bool, StoreError> {
        let reason = match decision {
            Decision::Denied { reason, .. } => reason.clone(),
            Decision::Expired => Some("timed out".into()),
            Decision::Cancelled => Some("cancelled".into()),
            Decision::NoApprover(why) => Some(why.clone()),
            _ => None,
        };
        let (kind, outcome) = match decision {
            Decision::Expired => (AuditKind::Expired, "timed_out"),
            Decision::Cancelled => (AuditKind::Expired, "cancelled"),
            Decision::NoApprover(_) => (AuditKind::Expired, "not_shown"),
            _ => (AuditKind::Decided, decision.status().as_str()),
        };
        let requester = waiter.requester.as_deref().unwrap_or("-");
        let grant = match decision {
            Decision::Session { .. } => Grant::Session {
                session: &waiter.session_id,
                requester,
            },
            Decision::Always { .. } => Grant::Always,
            _ => Grant::Nothing,
        };
        let keys = waiter.keys.join(",");
        let granted = grantable(&waiter.keys);
        let settlement = Settlement {
            status: decision.status(),
            approver: actor,
            reason: reason.as_deref(),
            grant,
            keys: &granted,
            entry: AuditEvent {
                approval_id: id,
                event: kind,
                session_id: &waiter.session_id,
                requester,
                actor,
                command: &waiter.command,
                pattern_keys: &keys,
                outcome,
            },
        };
        if !self.settle(id, &settlement).await? {
            return Ok(false);
        }
        events::emit(events::ApprovalStep { outcome });
        Ok(true)
    }

    async fn close_prompt(&self, waiter: &Waiter, decision: &Decision) {
        if let (Some(message), Some(port)) = (
            &waiter.message_id,
            self.platforms.port(&waiter.chat.platform),
        ) {
            let text = decision.outcome_text(&waiter.command);
            if let Err(err) = retrying(|| port.edit(&waiter.chat, message, &text)).await {
                tracing::warn!(error = %err, "could not update the approval prompt");
            }
        }
    }

    fn authorized(&self, waiter: &Waiter, actor: &Actor) -> bool {
        waiter.requester.as_deref() == Some(actor.key().as_str()) || self.approver(actor)
    }

    /// Whether `actor` is one of `approvals.approvers` (qualified: the
    /// same id on another platform is someone else).
    pub fn approver(&self, actor: &Actor) -> bool {
        self.approvers
            .iter()
            .any(|a| identity::names(a, &actor.platform, &actor.user_id, actor.account))
    }

    /// Resolves an approval from a button press.
    pub async fn resolve(
        &self,
        id: &str,
        choice: Choice,
        actor: &Actor,
        reason: Option<String>,
    ) -> Result<Decision, Refusal> {
        self.decide(id, choice, actor, reason, None).await
    }

    /// Decides approval `id` for the operator console, whose login vouches
    /// for `actor`: any pending request, acted on in the chat it was asked
    /// in (its prompt there is closed and its turn goes on, as with a
    /// press).
    pub async fn resolve_as_operator(
        &self,
        id: &str,
        choice: Choice,
        actor: &Actor,
        reason: Option<String>,
    ) -> Result<Decision, Refusal> {
        let local = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .map(|w| w.chat.clone());
        let chat = match local {
            Some(chat) => chat,
            None => {
                let prompts = self
                    .store
                    .pending_prompts(None)
                    .await
                    .map_err(|_| Refusal::Storage)?;
                let prompt = prompts.into_iter().find(|p| p.id == id);
                match prompt.and_then(|p| Some((p.prompt_platform?, p.prompt_chat?))) {
                    Some((platform, chat)) => ChatRef {
                        platform: platform.as_str().into(),
                        chat,
                        thread: None,
                    },
                    None => return self.decide(id, choice, actor, reason, None).await,
                }
            }
        };
        self.decide(id, choice, actor, reason, Some(&chat)).await
    }

    /// Decides approval `id` where its turn waits: here, or through the
    /// relay on the replica that has it. `vouched`: the actor was
    /// authorised by the caller, for requests asked in that chat only.
    async fn decide(
        &self,
        id: &str,
        choice: Choice,
        actor: &Actor,
        reason: Option<String>,
        vouched: Option<&ChatRef>,
    ) -> Result<Decision, Refusal> {
        if let Some(relay) = self.relay.get()
            && !self.waits_for(id)
            && let Ok(Some(r)) = self.store.approval(id).await
            && r.status == ApprovalStatus::Pending
        {
            return super::relay::forward(relay, id, choice, actor, reason, vouched).await;
        }
        self.decide_here(id, choice, actor, reason, vouched).await
    }

    /// Decides approval `id` if a turn on this replica waits for it.
    pub(super) async fn decide_here(
        &self,
        id: &str,
        choice: Choice,
        actor: &Actor,
        reason: Option<String>,
        vouched: Option<&ChatRef>,
    ) -> Result<Decision, Refusal> {
        let allowed = {
            let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            match (pending.get(id), vouched) {
                (Some(w), Some(chat))
                    if w.chat.platform != chat.platform || w.chat.chat != chat.chat =>
                {
                    return Err(Refusal::Unknown);
                }
                (w, vouched) => w.map(|w| vouched.is_some() || self.authorized(w, actor)),
            }
        };
        // "Always" changes the allowlist for every session: approvers
        // only (or an operator the caller vouches for).
        if allowed == Some(true)
            && choice == Choice::Always
            && vouched.is_none()
            && !self.approver(actor)
        {
            return Err(Refusal::AlwaysForApprovers);
        }
        match allowed {
            None => {
                return Err(match self.store.approval(id).await {
                    Ok(None) => Refusal::Unknown,
                    Ok(Some(r)) if r.status == ApprovalStatus::Pending => Refusal::Expired,
                    Ok(Some(r)) if r.status == ApprovalStatus::Expired => Refusal::Expired,
                    Ok(Some(r)) => Refusal::AlreadyDecided(r.status.to_string()),
                    Err(_) => Refusal::Storage,
                });
            }
            Some(false) => {
                if let Ok(Some(r)) = self.store.approval(id).await {
                    self.audit(
                        id,
                        AuditKind::Refused,
                        &r.session_id,
                        &r.requester,
                        Some(&actor.key()),
                        &r.command,
                        &r.pattern_keys.0,
                        "not_allowed",
                    )
                    .await
                    .ok();
                }
                return Err(Refusal::NotAllowed);
            }
            Some(true) => {}
        }
        let waiter = {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if choice == Choice::Session && pending.get(id).is_some_and(|w| w.requester.is_none()) {
                return Err(Refusal::SessionForUnattended);
            }
            pending.remove(id)
        };
        // What is only known when it runs is allowed once, whatever scope
        // was chosen ([`ONCE_ONLY`](super::policy::ONCE_ONLY)).
        let choice = match (&waiter, choice) {
            (Some(w), Choice::Session | Choice::Always) if grantable(&w.keys).is_empty() => {
                Choice::Once
            }
            _ => choice,
        };
        let Some(waiter) = waiter else {
            return Err(Refusal::AlreadyDecided("just now".into()));
        };
        let by = actor.shown();
        let decision = match choice {
            Choice::Once => Decision::Once { by },
            Choice::Session => Decision::Session { by },
            Choice::Always => Decision::Always { by },
            Choice::Deny => Decision::Denied { by, reason },
        };
        match self.apply(id, &waiter, &decision, Some(&actor.key())).await {
            Ok(true) => {}
            Ok(false) => return Err(Refusal::AlreadyDecided("elsewhere".into())),
            Err(err) => {
                tracing::error!(approval.id = id, error = %err, "approval decision not recorded");
                // Still waiting: the person can try again.
                self.pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(id.to_string(), waiter);
                return Err(Refusal::Storage);
            }
        }
        self.close_prompt(&waiter, &decision).await;
        let _ = waiter.tx.send(decision.clone());
        Ok(decision)
    }
}
