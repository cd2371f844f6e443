//! The adapter side of a session: where replies go, what shows that a turn
//! is running, and who answers the agent's questions. One [`Replier`] per
//! platform; [`Replies`] routes by the event's platform.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use super::keys::InboundEvent;
use crate::agent::{AgentEvents, ClarifyBroker};

/// What an adapter does for the sessions of its platform.
#[async_trait::async_trait]
pub trait Replier: Send + Sync {
    /// Sends `text` to the chat (and thread) of `event`.
    async fn reply(&self, event: &InboundEvent, text: &str);

    /// The event could not be taken (the session's queue or the inbox is
    /// full); nothing was stored. Chats say so; webhooks answer 503 instead.
    async fn busy(&self, event: &InboundEvent, text: &str) {
        self.reply(event, text).await;
    }

    /// A note about the session rather than an answer: queued, reset,
    /// failed. Chats show it; webhook deliveries leave it to the log.
    async fn notice(&self, event: &InboundEvent, text: &str) {
        self.reply(event, text).await;
    }

    /// A turn for `event` is running: show it (typing indicator, reaction).
    /// Called when the turn starts and every few seconds while it runs.
    async fn working(&self, _event: &InboundEvent) {}

    /// The turn for `event` ended: take the indicator down if it needs it.
    async fn finished(&self, _event: &InboundEvent) {}

    /// Who answers the agent's `clarify` questions in this chat, if anyone.
    fn clarifier(&self, _event: &InboundEvent) -> Option<Arc<dyn ClarifyBroker>> {
        None
    }

    /// Who watches tool activity in this chat, if anyone.
    fn events(&self, _event: &InboundEvent) -> Option<Arc<dyn AgentEvents>> {
        None
    }
}

/// The repliers of the connected platforms; replies to a platform without
/// one are logged and dropped (the event is still processed).
#[derive(Default)]
pub struct Replies {
    platforms: RwLock<BTreeMap<String, Arc<dyn Replier>>>,
}

impl std::fmt::Debug for Replies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self
            .platforms
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        f.debug_struct("Replies")
            .field("platforms", &names)
            .finish()
    }
}

impl Replies {
    /// Routes `platform`'s replies to `replier`.
    pub fn register(&self, platform: &str, replier: Arc<dyn Replier>) {
        self.platforms
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(platform.to_string(), replier);
    }

    fn get(&self, platform: &str) -> Option<Arc<dyn Replier>> {
        self.platforms
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(platform)
            .cloned()
    }
}

#[async_trait::async_trait]
impl Replier for Replies {
    async fn reply(&self, event: &InboundEvent, text: &str) {
        match self.get(&event.platform) {
            Some(r) => r.reply(event, text).await,
            None => tracing::warn!(
                platform = %event.platform,
                chat = %event.chat_id,
                "no adapter to reply through; reply dropped"
            ),
        }
    }

    async fn busy(&self, event: &InboundEvent, text: &str) {
        if let Some(r) = self.get(&event.platform) {
            r.busy(event, text).await;
        }
    }

    async fn notice(&self, event: &InboundEvent, text: &str) {
        if let Some(r) = self.get(&event.platform) {
            r.notice(event, text).await;
        }
    }

    async fn working(&self, event: &InboundEvent) {
        if let Some(r) = self.get(&event.platform) {
            r.working(event).await;
        }
    }

    async fn finished(&self, event: &InboundEvent) {
        if let Some(r) = self.get(&event.platform) {
            r.finished(event).await;
        }
    }

    fn clarifier(&self, event: &InboundEvent) -> Option<Arc<dyn ClarifyBroker>> {
        self.get(&event.platform)?.clarifier(event)
    }

    fn events(&self, event: &InboundEvent) -> Option<Arc<dyn AgentEvents>> {
        self.get(&event.platform)?.events(event)
    }
}
