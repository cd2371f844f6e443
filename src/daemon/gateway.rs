//! What adapters are handed when the daemon starts: the session manager
//! to submit inbound events and button presses to, the platforms registry
//! to attach their port to, the broker, storage and readiness.

use std::sync::Arc;

use crate::approvals::Broker;
use crate::cluster::Cluster;
use crate::config::{Config, Env};
use crate::platform::{Platform, Platforms};
use crate::sessions::SessionManager;
use crate::store::Store;
use crate::telemetry::Health;
use tokio_util::task::TaskTracker;

/// The running gateway's shared parts; cheap to clone.
#[derive(Clone, Debug)]
pub struct Gateway {
    /// The loaded configuration.
    pub config: Arc<Config>,
    /// Where secrets are read from.
    pub env: Env,
    /// The database.
    pub store: Store,
    /// Inbound events and presses go here.
    pub sessions: SessionManager,
    /// Approval requests and decisions.
    pub broker: Arc<Broker>,
    /// Profiles and connected ports.
    pub platforms: Arc<Platforms>,
    /// Component readiness.
    pub health: Health,
    /// This replica among the others on the database (one on SQLite).
    pub cluster: Cluster,
    /// The daemon's task tracker: work an adapter starts beside a request
    /// (a button press answered after its acknowledgement) runs here, so
    /// shutdown waits for it.
    pub tasks: TaskTracker,
    /// Where the operator console listens, when `[console]` enables it.
    pub console: Option<std::net::SocketAddr>,
    /// The webhook routes' forges (reviews, CI triage).
    pub forges: Arc<crate::forge::Forges>,
}

impl Gateway {
    /// Connects platform `id`: replies, prompts and messages to its chats
    /// go through `port`; prompts a previous run left open there are
    /// closed.
    pub async fn attach(&self, id: &str, port: Arc<dyn Platform>) {
        self.platforms.attach(id, port);
        self.broker.platform_attached(id).await;
    }

    /// Disconnects platform `id`.
    pub fn detach(&self, id: &str) {
        self.platforms.detach(id);
    }
}
