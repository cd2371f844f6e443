//! What a session says back, through its platform's port: answers,
//! notices (queued, reset, failed) and the working indicator. Notices go
//! to the chat only where a person reads it ([`Profile::human`]); sessions
//! of automated events leave them to the log. A platform's rate limit is waited out
//! here; a platform that is not connected is logged.
//!
//! [`Profile::human`]: crate::platform::Profile

use std::sync::Arc;

use crate::platform::{InboundEvent, Platforms, retrying};

/// The sessions' side of the ports.
#[derive(Debug, Clone)]
pub struct Replies {
    platforms: Arc<Platforms>,
}

impl Replies {
    /// Replies through `platforms`.
    pub fn new(platforms: Arc<Platforms>) -> Self {
        Self { platforms }
    }

    /// The registry replies go through.
    pub fn platforms(&self) -> &Arc<Platforms> {
        &self.platforms
    }

    /// Sends `text` to the chat (and thread) of `event`, replying to it.
    pub async fn reply(&self, event: &InboundEvent, text: &str) {
        let Some(port) = self.platforms.port(&event.platform) else {
            tracing::warn!(
                platform = %event.platform,
                chat = %event.chat_id,
                "no adapter to reply through; reply dropped"
            );
            return;
        };
        let to = event.chat();
        let reply_to = event.message_id.as_deref();
        if let Err(err) = retrying(|| port.send(&to, reply_to, text)).await {
            tracing::warn!(platform = %event.platform, chat = %event.chat_id, error = %err, "reply failed");
        }
    }

    /// Whether notices about `event`'s session go to its chat (a person
    /// reads it) rather than to the log.
    pub fn shows_notices(&self, event: &InboundEvent) -> bool {
        self.platforms
            .profile(&event.platform)
            .is_some_and(|p| p.human)
    }

    /// A note about the session rather than an answer: queued, reset,
    /// failed.
    pub async fn notice(&self, event: &InboundEvent, text: &str) {
        if self.shows_notices(event) {
            self.reply(event, text).await;
        } else {
            tracing::info!(platform = %event.platform, chat = %event.chat_id, thread = ?event.thread_id, notice = text, "session notice");
        }
    }

    /// The event could not be taken (the session's queue or the inbox is
    /// full); nothing was stored. People are told; senders without one are
    /// answered 503 by their adapter. (The refusal itself is logged and
    /// counted by the intake.)
    pub async fn busy(&self, event: &InboundEvent, text: &str) {
        if self.shows_notices(event) {
            self.reply(event, text).await;
        }
    }

    /// A turn for `event` is running (`on`) or has ended.
    pub async fn working(&self, event: &InboundEvent, on: bool) {
        if let Some(port) = self.platforms.port(&event.platform)
            && let Err(err) = port
                .working(&event.chat(), event.message_id.as_deref(), on)
                .await
        {
            tracing::debug!(platform = %event.platform, error = %err, on, "working indicator not changed");
        }
    }
}
