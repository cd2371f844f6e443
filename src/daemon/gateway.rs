//! What adapters are handed when the daemon starts: the session manager to
//! submit inbound events to, the approval broker to register prompters with
//! and resolve button presses through, the reply and outbound hubs.

use std::sync::Arc;

use crate::adapters::{Outbound, OutboundHub};
use crate::approvals::{ApprovalPrompter, Broker};
use crate::config::{Config, Env};
use crate::sessions::{Replier, Replies, SessionManager};
use crate::store::Store;

use super::Health;

/// The running gateway's shared parts; cheap to clone.
#[derive(Clone, Debug)]
pub struct Gateway {
    /// The loaded configuration.
    pub config: Arc<Config>,
    /// Where secrets are read from.
    pub env: Env,
    /// The database.
    pub store: Store,
    /// Inbound events go here.
    pub sessions: SessionManager,
    /// Approval prompts and decisions.
    pub broker: Arc<Broker>,
    /// Per-platform repliers of the session manager.
    pub replies: Arc<Replies>,
    /// Per-platform senders for `send_message` and webhook delivery.
    pub outbound: Arc<OutboundHub>,
    /// Component readiness.
    pub health: Health,
}

impl Gateway {
    /// Connects a chat platform's adapter: its sessions' replies, messages
    /// sent to its chats, and approval prompts go through `adapter`.
    pub async fn attach<A>(&self, platform: &str, adapter: Arc<A>)
    where
        A: Replier + Outbound + ApprovalPrompter + 'static,
    {
        self.replies.register(platform, adapter.clone());
        self.outbound.connect(platform, adapter.clone());
        self.broker.register_prompter(platform, adapter).await;
    }
}
