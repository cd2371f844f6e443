//! The outbound interface: how anything outside an adapter (the
//! `send_message` tool, webhook delivery) posts a message to a chat on a
//! connected platform.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// A connected platform's sending side.
#[async_trait::async_trait]
pub trait Outbound: Send + Sync {
    /// Posts `text` to `chat`; returns the platform's message id.
    async fn send_text(&self, chat: &str, text: &str) -> Result<String, String>;
}

/// The senders of the platforms connected right now, by platform name.
#[derive(Default)]
pub struct OutboundHub {
    senders: RwLock<BTreeMap<String, Arc<dyn Outbound>>>,
}

impl std::fmt::Debug for OutboundHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboundHub")
            .field("connected", &self.connected())
            .finish()
    }
}

impl OutboundHub {
    /// Records a platform as connected.
    pub fn connect(&self, platform: &str, sender: Arc<dyn Outbound>) {
        self.senders
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(platform.to_string(), sender);
    }

    /// Records a platform as gone.
    pub fn disconnect(&self, platform: &str) {
        self.senders
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(platform);
    }

    /// The sender of a connected platform.
    pub fn get(&self, platform: &str) -> Option<Arc<dyn Outbound>> {
        self.senders
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(platform)
            .cloned()
    }

    /// Names of the connected platforms.
    pub fn connected(&self) -> Vec<String> {
        self.senders
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }
}
