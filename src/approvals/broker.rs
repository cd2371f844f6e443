//! The approval broker: a waiting tool call asks, the session's adapter
//! shows a prompt with four buttons, and a button press or a text command
//! from an authorised person resolves it, while everything else keeps
//! running. Timeouts and cancellation deny. Every step is stored and
//! audited; the prompt is edited to show the outcome.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::decision::{Actor, ApprovalPrompter, ChatRef, Choice, Decision, Prompt, Refusal};
use super::detect::Match;
use crate::config::{ApprovalsConfig, ChatTarget};
use crate::store::{
    ApprovalRecord, ApprovalStatus, AuditEvent, PatternKeys, Store, new_id, now_ms,
};

/// Longest command shown in a prompt.
const PROMPT_COMMAND_CHARS: usize = 600;

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
    prompters: RwLock<HashMap<String, Arc<dyn ApprovalPrompter>>>,
    pending: Mutex<HashMap<String, Waiter>>,
    stale: Mutex<Vec<crate::store::PromptRef>>,
    approvers: Vec<String>,
    timeout: Duration,
    route_to: Option<ChatTarget>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("pending", &self.pending_count())
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// A broker over `store` with the `[approvals]` settings.
    pub fn new(store: Store, config: &ApprovalsConfig) -> Self {
        Self {
            store,
            prompters: RwLock::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            stale: Mutex::new(Vec::new()),
            approvers: config.approvers.clone(),
            timeout: Duration::from_secs(config.timeout_secs),
            route_to: config.route_to.clone(),
        }
    }

    /// Wires a platform's prompter; prompts left open by a previous run on
    /// that platform are closed now.
    pub async fn register_prompter(&self, platform: &str, prompter: Arc<dyn ApprovalPrompter>) {
        self.prompters
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(platform.to_string(), prompter.clone());
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
                    platform: platform.to_string(),
                    chat,
                    thread: None,
                };
                let _ = prompter
                    .close(
                        &chat,
                        &message,
                        "⌛ Expired: the gateway restarted before a decision — not run",
                    )
                    .await;
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
        let stale = self.store.pending_prompts().await?;
        for p in &stale {
            if self
                .store
                .decide_approval(
                    &p.id,
                    ApprovalStatus::Expired,
                    None,
                    Some("gateway restarted"),
                )
                .await?
                && let Some(record) = self.store.approval(&p.id).await?
            {
                self.audit(
                    &record.id,
                    "expired",
                    &record.session_id,
                    &record.requester,
                    Some("restart"),
                    &record.command,
                    &record.pattern_keys.0,
                    "expired",
                )
                .await;
            }
        }
        let count = stale.len();
        self.stale
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(stale);
        Ok(count)
    }

    #[allow(clippy::too_many_arguments)]
    async fn audit(
        &self,
        id: &str,
        event: &str,
        session_id: &str,
        requester: &str,
        actor: Option<&str>,
        command: &str,
        keys: &[String],
        outcome: &str,
    ) {
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
        if let Err(err) = self.store.append_audit(&entry).await {
            tracing::error!(approval.id = id, error = %err, "audit append failed");
        }
    }

    fn prompter(&self, platform: &str) -> Option<Arc<dyn ApprovalPrompter>> {
        self.prompters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(platform)
            .cloned()
    }

    /// Asks for a decision and waits for it (or the timeout, or `cancel`).
    pub async fn request(&self, request: Request, cancel: &CancellationToken) -> Decision {
        let id = new_id();
        let keys: Vec<String> = request.matches.iter().map(|m| m.key.to_string()).collect();
        let requester = request.requester.clone().unwrap_or_else(|| "-".into());
        let chat = match self.chat_for(&request).await {
            Ok(chat) => chat,
            Err(why) => {
                self.audit(
                    &id,
                    "refused",
                    &request.session_id,
                    &requester,
                    Some("policy"),
                    &request.command,
                    &keys,
                    "no_approver",
                )
                .await;
                return Decision::NoApprover(why);
            }
        };
        let Some(prompter) = self.prompter(&chat.platform) else {
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
        self.audit(
            &id,
            "requested",
            &request.session_id,
            &requester,
            None,
            &request.command,
            &keys,
            "pending",
        )
        .await;
        metrics::counter!("switchboard_approvals_total", "outcome" => "requested").increment(1);
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
        let prompt = Prompt {
            approval_id: id.clone(),
            command: crate::tools::builtin::clip(&request.command, PROMPT_COMMAND_CHARS),
            reasons: request
                .matches
                .iter()
                .map(|m| m.description.to_string())
                .collect(),
            requester: request.requester.clone(),
        };
        match prompter.show(&chat, &prompt).await {
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
        tokio::select! {
            decided = &mut rx => decided.unwrap_or(Decision::Expired),
            _ = tokio::time::sleep(self.timeout) => match self.finish_unanswered(&id, Decision::Expired).await {
                Some(d) => d,
                None => rx.await.unwrap_or(Decision::Expired),
            },
            _ = cancel.cancelled() => match self.finish_unanswered(&id, Decision::Cancelled).await {
                Some(d) => d,
                None => rx.await.unwrap_or(Decision::Expired),
            },
        }
    }

    async fn chat_for(&self, request: &Request) -> Result<ChatRef, String> {
        let session = self
            .store
            .session(&request.session_id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "unknown session".to_string())?;
        let own = ChatRef {
            platform: session.platform,
            chat: session.chat_id,
            thread: session.thread_id,
        };
        if request.requester.is_none() {
            if self
                .prompter(&own.platform)
                .is_some_and(|p| p.asks_for_humanless(&own))
            {
                return Ok(own);
            }
            return self
                .route_to
                .as_ref()
                .map(|t| ChatRef {
                    platform: t.platform.clone(),
                    chat: t.chat.clone(),
                    thread: None,
                })
                .ok_or_else(|| {
                    "this session has no human and [approvals] route_to is not set".to_string()
                });
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
        let reason = match decision {
            Decision::Expired => "timed out",
            Decision::Cancelled => "cancelled",
            _ => "not shown",
        };
        let _ = self
            .store
            .decide_approval(id, decision.status(), None, Some(reason))
            .await;
        let requester = waiter.requester.clone().unwrap_or_else(|| "-".into());
        self.audit(
            id,
            "expired",
            &waiter.session_id,
            &requester,
            None,
            &waiter.command,
            &waiter.keys,
            reason,
        )
        .await;
        metrics::counter!("switchboard_approvals_total", "outcome" => reason.replace(' ', "_"))
            .increment(1);
        self.close_prompt(&waiter, &decision).await;
        Some(decision)
    }

    async fn close_prompt(&self, waiter: &Waiter, decision: &Decision) {
        if let (Some(message), Some(prompter)) =
            (&waiter.message_id, self.prompter(&waiter.chat.platform))
        {
            let text = decision.outcome_text(&waiter.command);
            if let Err(err) = prompter.close(&waiter.chat, message, &text).await {
                tracing::warn!(error = %err, "could not update the approval prompt");
            }
        }
    }

    fn authorized(&self, waiter: &Waiter, actor: &Actor) -> bool {
        let key = actor.key();
        waiter.requester.as_deref() == Some(key.as_str())
            || self
                .approvers
                .iter()
                .any(|a| *a == key || *a == actor.user_id)
    }

    /// Resolves an approval from a button press or a command.
    pub async fn resolve(
        &self,
        id: &str,
        choice: Choice,
        actor: &Actor,
        reason: Option<String>,
    ) -> Result<Decision, Refusal> {
        self.decide(id, choice, actor, reason, false).await
    }

    async fn decide(
        &self,
        id: &str,
        choice: Choice,
        actor: &Actor,
        reason: Option<String>,
        vouched: bool,
    ) -> Result<Decision, Refusal> {
        let allowed = {
            let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            pending
                .get(id)
                .map(|w| vouched || self.authorized(w, actor))
        };
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
                        "refused",
                        &r.session_id,
                        &r.requester,
                        Some(&actor.key()),
                        &r.command,
                        &r.pattern_keys.0,
                        "not_allowed",
                    )
                    .await;
                }
                return Err(Refusal::NotAllowed);
            }
            Some(true) => {}
        }
        let Some(waiter) = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
        else {
            return Err(Refusal::AlreadyDecided("just now".into()));
        };
        let by = if actor.name.is_empty() {
            actor.key()
        } else {
            actor.name.clone()
        };
        let decision = match choice {
            Choice::Once => Decision::Once { by },
            Choice::Session => Decision::Session { by },
            Choice::Always => Decision::Always { by },
            Choice::Deny => Decision::Denied { by, reason },
        };
        let reason_text = match &decision {
            Decision::Denied { reason, .. } => reason.clone(),
            _ => None,
        };
        match self
            .store
            .decide_approval(
                id,
                decision.status(),
                Some(&actor.key()),
                reason_text.as_deref(),
            )
            .await
        {
            Ok(true) => {}
            Ok(false) => return Err(Refusal::AlreadyDecided("elsewhere".into())),
            Err(_) => {
                self.pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(id.to_string(), waiter);
                return Err(Refusal::Storage);
            }
        }
        match choice {
            Choice::Session => {
                let _ = self
                    .store
                    .grant_session(&waiter.session_id, &waiter.keys, &actor.key())
                    .await;
            }
            Choice::Always => {
                for key in &waiter.keys {
                    let _ = self.store.allow_pattern(key, &actor.key()).await;
                }
            }
            Choice::Once | Choice::Deny => {}
        }
        let requester = waiter.requester.clone().unwrap_or_else(|| "-".into());
        self.audit(
            id,
            "decided",
            &waiter.session_id,
            &requester,
            Some(&actor.key()),
            &waiter.command,
            &waiter.keys,
            decision.status().as_str(),
        )
        .await;
        metrics::counter!("switchboard_approvals_total", "outcome" => decision.status().as_str())
            .increment(1);
        self.close_prompt(&waiter, &decision).await;
        let _ = waiter.tx.send(decision.clone());
        Ok(decision)
    }

    /// Handles `/approve`, `/approve session`, `/approve always`,
    /// `/deny [reason]` (also with `!` instead of `/`, and with an explicit
    /// approval id first) sent in `chat`. `None` when the text is not such
    /// a command.
    pub async fn resolve_text(
        &self,
        chat: &ChatRef,
        actor: &Actor,
        text: &str,
    ) -> Option<Result<Decision, Refusal>> {
        self.decide_text(chat, actor, text, false).await
    }

    /// Like [`resolve_text`](Self::resolve_text) for an actor the caller
    /// has already authorised (a webhook route's own approver list, checked
    /// on a signature-verified delivery).
    pub async fn resolve_text_vouched(
        &self,
        chat: &ChatRef,
        actor: &Actor,
        text: &str,
    ) -> Option<Result<Decision, Refusal>> {
        self.decide_text(chat, actor, text, true).await
    }

    async fn decide_text(
        &self,
        chat: &ChatRef,
        actor: &Actor,
        text: &str,
        vouched: bool,
    ) -> Option<Result<Decision, Refusal>> {
        let text = text.trim();
        let rest = text.strip_prefix('/').or_else(|| text.strip_prefix('!'))?;
        let mut words = rest.split_whitespace();
        let command = words.next()?.split('@').next()?;
        let deny = match command {
            "approve" => false,
            "deny" => true,
            _ => return None,
        };
        let mut words: Vec<&str> = words.collect();
        let explicit = words
            .first()
            .filter(|w| w.len() == 32 && w.chars().all(|c| c.is_ascii_hexdigit()))
            .map(|w| w.to_string());
        if explicit.is_some() {
            words.remove(0);
        }
        let choice = if deny {
            Choice::Deny
        } else {
            match words.first().copied() {
                Some("session") => Choice::Session,
                Some("always") => Choice::Always,
                _ => Choice::Once,
            }
        };
        let reason = (deny && !words.is_empty()).then(|| words.join(" "));
        let id = match explicit {
            Some(id) => id,
            None => {
                let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                let oldest = pending
                    .iter()
                    .filter(|(_, w)| w.chat.platform == chat.platform && w.chat.chat == chat.chat)
                    .min_by_key(|(_, w)| w.created_at)
                    .map(|(id, _)| id.clone());
                match oldest {
                    Some(id) => id,
                    None => return Some(Err(Refusal::NothingPending)),
                }
            }
        };
        if vouched {
            // A vouched actor acts only on the requests of their own chat.
            let here = self
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&id)
                .is_some_and(|w| w.chat.platform == chat.platform && w.chat.chat == chat.chat);
            if !here {
                return Some(Err(Refusal::Unknown));
            }
        }
        Some(self.decide(&id, choice, actor, reason, vouched).await)
    }
}
