//! What the chat commands do: /help, /stop, /new, /status for the
//! session; /approve and /deny through the approval broker. Parsing is
//! [`ChatCommand::parse`]'s alone.

use super::manager::SessionManager;
use crate::approvals::Refusal;
use crate::platform::{ChatCommand, InboundEvent};
use crate::store::StoreError;

const HELP: &str = "Commands: /new (or /reset) starts a fresh conversation, /stop cancels the running request, /status shows this session, /approve and /deny answer a pending approval, /help shows this.";

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
                inner.workers().remove(key);
                if let Some(session) = inner.store.open_session_by_key(key).await? {
                    inner
                        .store
                        .end_session(&session.id, "reset by user")
                        .await?;
                }
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
            ChatCommand::Approve { .. } | ChatCommand::Deny { .. } => {
                let decided = match inner.broker.get() {
                    Some(broker) => {
                        broker
                            .decide_command(&event.chat(), &event.actor(), command, false)
                            .await
                    }
                    None => Err(Refusal::NothingPending),
                };
                match decided {
                    Ok(decision) => format!("Done: {}.", decision.describe()),
                    Err(refusal) => refusal.to_string(),
                }
            }
        })
    }
}
