//! What the chat commands do: /help, /stop, /new, /status for the
//! session; /approve and /deny through the approval broker. Parsing is
//! [`ChatCommand::parse`]'s alone.

use super::manager::SessionManager;
use super::opening::new_session;
use crate::approvals::{Decision, Refusal};
use crate::platform::{Actor, ChatCommand, ChatRef, InboundEvent};
use crate::store::StoreError;

const HELP: &str = "Commands: /new (or /reset) starts a fresh conversation, /stop cancels the running request, /status shows this session, /model shows or switches its model, /usage shows what you and this chat spent against the budgets, /approve and /deny answer a pending approval, /steer <words> adds words to the running request, /help shows this.";

impl SessionManager {
    /// Carries out `command`, written in `event`'s chat, for session
    /// `key`; returns the answer.
    pub(super) async fn command(
        &self,
        key: &str,
        event: &InboundEvent,
        command: &ChatCommand,
    ) -> Result<String, StoreError> {
        let inner = &self.inner;
        Ok(match command {
            ChatCommand::Help => HELP.to_string(),
            ChatCommand::Stop => match self.running_turn(key) {
                Some(state) if state.interrupt() => "Stopping the current request.".to_string(),
                _ => "Nothing is running.".to_string(),
            },
            ChatCommand::New => {
                if let Some(state) = self.running_turn(key) {
                    state.interrupt();
                }
                inner.mailboxes.forget(key);
                inner.store.end_session_by_key(key, "reset by user").await?;
                "Started a new conversation.".to_string()
            }
            ChatCommand::Status => {
                let session = inner.store.open_session_by_key(key).await?;
                let (busy, waiting) = self
                    .running_turn(key)
                    .map_or((false, 0), |s| (s.busy(), s.waiting()));
                match session {
                    Some(s) => format!(
                        "Session {key}: {} messages stored, {}, {waiting} waiting.",
                        inner.store.messages(&s.id).await?.len(),
                        if busy { "working" } else { "idle" }
                    ),
                    None => format!("No conversation yet in {key}."),
                }
            }
            ChatCommand::Usage => {
                let now = inner.clock.now_ms();
                crate::budgets::usage_report(&inner.store, &inner.config, event, now).await?
            }
            ChatCommand::Model(choice) => self.model(key, event, choice.as_deref()).await?,
            // With words, intake sends it on as a message.
            ChatCommand::Steer(_) => {
                "Write /steer and what to add to the request I am working on.".to_string()
            }
            ChatCommand::Approve { .. } | ChatCommand::Deny { .. } => {
                match self.decide(&event.chat(), &event.actor(), command).await {
                    Ok((decision, asked)) => format!(
                        "Done: {} ({}).",
                        decision.describe(),
                        crate::approvals::shown_briefly(&asked)
                    ),
                    Err(refusal) => refusal.to_string(),
                }
            }
        })
    }
}

impl SessionManager {
    /// Carries out `/approve` or `/deny`, written by `actor` in `chat`;
    /// whether the actor may answer approvals asked there is the chat's
    /// platform's rule (its profile's approvers) or the broker's.
    pub async fn decide(
        &self,
        chat: &ChatRef,
        actor: &Actor,
        command: &ChatCommand,
    ) -> Result<(Decision, String), Refusal> {
        let listed = self
            .inner
            .platforms()
            .profile(&chat.platform)
            .is_some_and(|p| p.approves_in(&chat.chat, actor));
        // A chat's or a route's own approvers decide its requests; the
        // permanent allowlist, which every session shares, is for
        // `approvals.approvers` alone.
        if listed
            && matches!(
                command,
                ChatCommand::Approve {
                    scope: crate::platform::ApproveScope::Always,
                    ..
                }
            )
            && !self.inner.broker.approver(actor)
        {
            return Err(Refusal::AlwaysForApprovers);
        }
        self.inner
            .broker
            .decide_command(chat, actor, command, listed)
            .await
    }

    /// `/model`: which model answers this conversation and which it may
    /// switch to; `/model NAME` switches (`default`: back to the
    /// configured one), kept with the session.
    async fn model(
        &self,
        key: &str,
        event: &InboundEvent,
        choice: Option<&str>,
    ) -> Result<String, StoreError> {
        let inner = &self.inner;
        let human = inner
            .platforms()
            .profile(&event.platform)
            .is_some_and(|p| p.human);
        let session = inner
            .store
            .open_session(&new_session(key, event, human))
            .await?;
        let models = &inner.deps.models;
        let allowed = models.allowed();
        let current = models.for_session(&session).to_string();
        let Some(choice) = choice else {
            return Ok(if allowed.is_empty() {
                format!("This conversation uses {current}; switching models is not enabled here.")
            } else {
                format!(
                    "This conversation uses {current}. Available: {} (switch with /model NAME, back with /model default).",
                    allowed.join(", ")
                )
            });
        };
        let chosen = match choice {
            "default" => None,
            name if allowed.iter().any(|m| m == name) => Some(name),
            name if allowed.is_empty() => {
                return Ok(format!(
                    "Switching models is not enabled here; this conversation uses {current} (not {name})."
                ));
            }
            name => {
                return Ok(format!(
                    "{name} is not one of the available models: {}.",
                    allowed.join(", ")
                ));
            }
        };
        inner.store.set_session_model(&session.id, chosen).await?;
        if let Some(state) = self.running_turn(key) {
            state.reload();
        }
        let updated = crate::store::Session {
            model: chosen.map(str::to_string),
            ..session
        };
        Ok(format!(
            "This conversation now uses {}.",
            models.for_session(&updated)
        ))
    }
}
