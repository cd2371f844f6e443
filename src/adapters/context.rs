//! What an adapter is given and gives back. Installed, it hands the
//! daemon its profile, HTTP routes and long-running component through
//! [`Wiring`]; running, it is handed the [`Gateway`] (the session manager
//! to submit inbound events and button presses to, the platforms registry
//! to attach its port to, the broker and readiness) inside its
//! [`ComponentContext`]. The daemon implements [`Wiring`] and builds both;
//! nothing here knows the daemon.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::approvals::Broker;
use crate::cluster::Cluster;
use crate::config::{Config, Env};
use crate::http::AppState;
use crate::platform::{Platform, Platforms, Profile};
use crate::sessions::SessionManager;
use crate::telemetry::Health;

/// The running gateway's shared parts; cheap to clone.
#[derive(Clone, Debug)]
pub struct Gateway {
    /// The loaded configuration.
    pub config: Arc<Config>,
    /// Where secrets are read from.
    pub env: Env,
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

/// What a component gets to run with.
#[derive(Clone, Debug)]
pub struct ComponentContext {
    /// Fires when the daemon shuts down: stop taking work, finish what runs.
    pub stop: CancellationToken,
    /// Where the component reports its readiness.
    pub health: Health,
    /// The session manager, broker and hubs.
    pub gateway: Gateway,
    /// Where the HTTP server listens.
    pub local_addr: SocketAddr,
}

impl ComponentContext {
    /// Waits until this replica may open `platform`'s single connection
    /// (one replica at a time does; the others stand by, ready, and one of
    /// them takes over when it dies). `None` once the daemon stops. Give
    /// the term back with `gateway.cluster.release` when the connection
    /// is closed.
    pub async fn lead(&self, platform: &str) -> Option<crate::cluster::Term> {
        let cluster = &self.gateway.cluster;
        let name = format!("ingress:{platform}");
        if cluster.is_shared() {
            match cluster.try_hold(&name, &self.stop).await {
                Ok(Some(term)) => return Some(term),
                Ok(None) => {}
                Err(err) => tracing::warn!(lease = %name, error = %err, "lease not taken"),
            }
            self.health.set(
                platform,
                true,
                "standby: another replica holds the connection",
            );
            tracing::info!(
                platform,
                "standing by: another replica holds the connection"
            );
        }
        cluster.lead(&name, &self.stop).await
    }
}

/// A boxed future, as components run.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
/// A long-running component, started once the gateway's parts exist.
pub type ComponentFn = Box<dyn FnOnce(ComponentContext) -> BoxFuture<'static, ()> + Send>;
/// HTTP routes built once the gateway's parts exist.
pub type RoutesFn = Box<dyn FnOnce(&Gateway) -> axum::Router<AppState> + Send>;

/// Where adapters are installed: the daemon, which runs what they add.
pub trait Wiring: Sized {
    /// The configuration it runs.
    fn config(&self) -> &Config;
    /// Adds a platform's profile.
    fn platform(self, profile: Profile) -> Self;
    /// Adds HTTP routes built once the gateway's parts exist.
    fn routes_with(self, build: RoutesFn) -> Self;
    /// Adds a long-running component, run until `stop` fires.
    fn component(self, name: &str, run: ComponentFn) -> Self;
}
