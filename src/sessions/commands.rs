//! Slash commands that bypass the queue: /help, /stop, /new (/reset),
//! /status. Unknown ones go to the agent as text.

use super::keys::InboundEvent;
use super::manager::SessionManager;
use crate::store::StoreError;

const HELP: &str = "Commands: /new (or /reset) starts a fresh conversation, /stop cancels the running request, /status shows this session, /approve and /deny answer a pending approval, /help shows this.";

/// The command word of `text` (`/stop@my_bot` → `stop`), if it is one.
fn command_word(text: &str) -> Option<&str> {
    let word = text.trim().strip_prefix('/')?.split_whitespace().next()?;
    word.split('@').next()
}

impl SessionManager {
    /// Answers a slash command for session `key`; false when `event` is not
    /// one of ours.
    pub(super) async fn command(
        &self,
        key: &str,
        event: &InboundEvent,
    ) -> Result<bool, StoreError> {
        let Some(word) = command_word(&event.text) else {
            return Ok(false);
        };
        let inner = &self.inner;
        let reply = match word {
            "help" | "start" => HELP.to_string(),
            "stop" => match self.running_turn(key) {
                Some(state) if state.interrupt() => "Stopping the current request.".to_string(),
                _ => "Nothing is running.".to_string(),
            },
            "new" | "reset" => {
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
            "status" => {
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
            _ => return Ok(false),
        };
        inner.replier.reply(event, &reply).await;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::command_word;

    #[test]
    fn command_words() {
        assert_eq!(command_word("/stop"), Some("stop"));
        assert_eq!(command_word("  /new@my_bot please"), Some("new"));
        assert_eq!(command_word("stop"), None);
        assert_eq!(command_word("/"), None);
    }
}
