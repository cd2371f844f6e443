//! The long-running process: open storage, serve HTTP, start components,
//! wait for a signal, drain within the grace period, exit.
//!
//! Shutdown follows one root [`CancellationToken`]: every component gets a
//! child token and runs on the [`TaskTracker`]; on SIGTERM/SIGINT intake
//! stops, running work gets `server.shutdown_grace_secs` to finish, and the
//! process exits 0 either way (with a warning when the grace ran out).

mod signals;

pub use crate::adapters::{ComponentContext, Gateway};
use crate::adapters::{ComponentFn, RoutesFn, Wiring};
use crate::telemetry::Health;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sd_notify::NotifyState;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::AgentDeps;
use crate::approvals::{ApprovalPolicy, Broker};
use crate::cluster::Cluster;
use crate::config::{Config, Env, component_statuses};
use crate::http::{AppState, Limits, router};
use crate::platform::Platforms;
use crate::sessions::{Links, ManagerSettings, SessionManager};
use crate::store::{BackendKind, Store, StoreError};
use crate::tools::{ToolRuntime, mcp};
use crate::transcription::Transcriber;

/// Why the daemon could not start or keep running.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Storage could not be opened or migrated.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The HTTP listener could not bind.
    #[error("server.listen: cannot bind {addr}: {source}")]
    Bind {
        /// The configured address.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Signal handlers could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signal(std::io::Error),
    /// The built-in tools could not be registered.
    #[error("tool registry: {0}")]
    Tools(#[from] crate::tools::RegistryError),
    /// The operator console could not start.
    #[error("console: {0}")]
    Console(String),
    /// A webhook route's forge credentials could not be read.
    #[error(transparent)]
    Forge(#[from] crate::forge::ForgeError),
    /// The HTTP server stopped on its own.
    #[error("http server failed: {0}")]
    Serve(String),
}

/// The daemon: configuration plus the platforms, components and routes
/// it runs.
pub struct Daemon {
    config: Config,
    env: Env,
    platforms: Arc<Platforms>,
    routes: Vec<RoutesFn>,
    components: Vec<(String, ComponentFn)>,
    clock: crate::clock::Clock,
}

impl Daemon {
    /// A daemon for `config`, reading secrets from `env`.
    pub fn new(config: Config, env: Env) -> Self {
        Self {
            config,
            env,
            platforms: Arc::default(),
            routes: Vec::new(),
            components: Vec::new(),
            clock: crate::clock::Clock::system(),
        }
    }

    /// Decides budget windows, session resets and schedules by `clock`
    /// instead of the system's (a test's clock).
    pub fn clock(mut self, clock: crate::clock::Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The configuration it runs.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Adds a platform's profile: its sessions can be replayed and its
    /// events taken from the start; its port attaches when it connects.
    pub fn platform(self, profile: crate::platform::Profile) -> Self {
        Wiring::platform(self, profile)
    }

    /// Adds HTTP routes (webhooks, platform callbacks).
    pub fn routes(self, routes: axum::Router<AppState>) -> Self {
        self.routes_with(move |_| routes)
    }

    /// Adds HTTP routes built once the gateway's parts exist.
    pub fn routes_with<F>(self, build: F) -> Self
    where
        F: FnOnce(&Gateway) -> axum::Router<AppState> + Send + 'static,
    {
        Wiring::routes_with(self, Box::new(build))
    }

    /// Adds a long-running component. It runs on the daemon's task tracker
    /// and must return soon after `ctx.stop` fires.
    pub fn component<F, Fut>(self, name: &str, run: F) -> Self
    where
        F: FnOnce(ComponentContext) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Wiring::component(self, name, Box::new(move |ctx| Box::pin(run(ctx))))
    }

    /// Runs as the process's daemon until SIGTERM or SIGINT, then drains
    /// and returns. A second after it is ready (the components' first
    /// rounds done), the process lets go of the code start-up touched
    /// ([`crate::runtime::release_startup_pages`]).
    pub async fn run(self) -> Result<(), DaemonError> {
        let shutdown = signals::shutdown_signal().map_err(DaemonError::Signal)?;
        let started = self.start().await?;
        let stop = started.runtime.root.child_token();
        started.runtime.tracker.spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                    let bytes = tokio::task::spawn_blocking(crate::runtime::release_startup_pages).await;
                    tracing::debug!(bytes = bytes.unwrap_or(0), "start-up pages unmapped");
                }
            }
        });
        started.until(shutdown).await
    }

    /// Runs until `shutdown` resolves (to the name of the cause), then stops
    /// intake, gives running work `server.shutdown_grace_secs` to finish,
    /// and returns.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = &'static str>,
    ) -> Result<(), DaemonError> {
        self.start().await?.until(shutdown).await
    }

    /// Builds every part, takes over what a previous run left, opens the
    /// listeners and starts the components: the daemon is ready when this
    /// returns.
    async fn start(self) -> Result<Started, DaemonError> {
        let Daemon {
            config,
            env,
            platforms,
            routes,
            components,
            clock,
        } = self;
        // The recorder first: what starting up records is kept.
        crate::telemetry::metrics();
        for c in component_statuses(&config) {
            tracing::info!(component = c.name, enabled = c.enabled, detail = %c.detail, "adapter");
        }
        let (store, single) = open_storage(&config).await?;
        let runtime = Runtime::new();
        let parts = Parts::build(&config, &env, &store, platforms, &runtime, clock).await?;
        let console = bind_console(&config, &env).await?;
        let gateway = Gateway {
            config: Arc::new(config.clone()),
            env,
            sessions: parts.sessions.clone(),
            broker: parts.broker.clone(),
            platforms: parts.platforms.clone(),
            health: runtime.health.clone(),
            cluster: parts.cluster.clone(),
            tasks: runtime.tracker.clone(),
            console: console.as_ref().map(|c| c.addr),
            forges: parts.forges.clone(),
        };
        if let Some(console) = console {
            serve_console(console, &gateway, &store, &runtime);
        }
        take_over(&gateway, &store, &runtime).await?;
        run_background(&gateway, &store, parts.processes, &runtime).await?;
        raise_descriptor_limit(&config);

        let addr = config.server.listen;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| DaemonError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| DaemonError::Bind { addr, source })?;
        let routes = routes
            .into_iter()
            .fold(axum::Router::new(), |all, build| all.merge(build(&gateway)));
        let app = router(
            AppState {
                store: store.clone(),
                health: runtime.health.clone(),
            },
            &config.server,
            routes,
        );
        let server_stop = runtime.root.child_token();
        let limits = Limits::from_config(&config.server);
        let server = runtime
            .tracker
            .spawn(async move { crate::http::serve(listener, app, limits, server_stop).await });
        for (name, run) in components {
            let ctx = ComponentContext {
                stop: runtime.root.child_token(),
                health: runtime.health.clone(),
                gateway: gateway.clone(),
                local_addr: local,
            };
            let span = tracing::info_span!("component", component = %name);
            runtime
                .tracker
                .spawn(tracing::Instrument::instrument(run(ctx), span));
        }
        run_upkeep(&config, &store, &runtime);
        tracing::info!(http.addr = %local, "listening");
        signals::notify(&[
            NotifyState::Ready,
            NotifyState::Status(&format!("listening on {local}")),
        ]);
        runtime
            .tracker
            .spawn(signals::watchdog(runtime.root.child_token()));
        Ok(Started {
            runtime,
            store,
            server,
            grace: Duration::from_secs(config.server.shutdown_grace_secs),
            _single: single,
        })
    }
}

impl Wiring for Daemon {
    fn config(&self) -> &Config {
        &self.config
    }

    fn platform(self, profile: crate::platform::Profile) -> Self {
        self.platforms.describe(profile);
        self
    }

    fn routes_with(mut self, build: RoutesFn) -> Self {
        self.routes.push(build);
        self
    }

    fn component(mut self, name: &str, run: ComponentFn) -> Self {
        self.components.push((name.to_string(), run));
        self
    }
}

/// The daemon's root of cancellation and the trackers of its tasks.
struct Runtime {
    /// Fires at shutdown: intake stops, running work finishes.
    root: CancellationToken,
    /// Every task but the replica's membership.
    tracker: TaskTracker,
    /// Fires once everything else has stopped: the membership's leases
    /// are renewed until then, so running turns keep their sessions
    /// through the drain.
    leaving: CancellationToken,
    /// The replica's membership in the cluster.
    membership: TaskTracker,
    /// Component readiness.
    health: Health,
}

impl Runtime {
    fn new() -> Self {
        Self {
            root: CancellationToken::new(),
            tracker: TaskTracker::new(),
            leaving: CancellationToken::new(),
            membership: TaskTracker::new(),
            health: Health::default(),
        }
    }
}

/// A started daemon, until it stops.
struct Started {
    runtime: Runtime,
    store: Store,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    grace: Duration,
    /// SQLite: the database file held for this process alone.
    _single: Option<nix::fcntl::Flock<std::fs::File>>,
}

impl Started {
    /// Serves until `shutdown` (or until the server fails), then drains
    /// within the grace period.
    async fn until(
        mut self,
        shutdown: impl Future<Output = &'static str>,
    ) -> Result<(), DaemonError> {
        let outcome = tokio::select! {
            cause = shutdown => {
                tracing::info!(signal = cause, "shutdown requested");
                Ok(())
            }
            result = &mut self.server => Err(DaemonError::Serve(match result {
                Ok(Ok(())) => "stopped unexpectedly".into(),
                Ok(Err(err)) => err.to_string(),
                Err(err) => err.to_string(),
            })),
        };
        signals::notify(&[NotifyState::Stopping]);
        let Runtime {
            root,
            tracker,
            leaving,
            membership,
            ..
        } = &self.runtime;
        root.cancel();
        tracker.close();
        if tokio::time::timeout(self.grace, tracker.wait())
            .await
            .is_ok()
        {
            leaving.cancel();
            membership.close();
            membership.wait().await;
            self.store.close().await;
        } else {
            // Connections still checked out by overrunning work are dropped
            // with the process; waiting for them could hang forever.
            tracing::warn!(
                grace_secs = self.grace.as_secs(),
                "work still running after the grace period; exiting anyway"
            );
        }
        tracing::info!("stopped");
        outcome
    }
}

/// Connects, takes the SQLite file for this process, migrates.
async fn open_storage(
    config: &Config,
) -> Result<(Store, Option<nix::fcntl::Flock<std::fs::File>>), DaemonError> {
    let store = Store::connect(&config.storage).await?;
    let single = store.lock_single_replica()?;
    store.migrate().await?;
    let schema_version = store.schema_version().await?;
    tracing::info!(
        storage.backend = ?store.kind(),
        storage.schema_version = schema_version,
        "storage ready"
    );
    Ok((store, single))
}

/// The shared parts the daemon builds before anything is served.
struct Parts {
    platforms: Arc<Platforms>,
    broker: Arc<Broker>,
    cluster: Cluster,
    sessions: SessionManager,
    forges: Arc<crate::forge::Forges>,
    processes: Arc<crate::tools::builtin::ProcessManager>,
}

impl Parts {
    async fn build(
        config: &Config,
        env: &Env,
        store: &Store,
        platforms: Arc<Platforms>,
        runtime: &Runtime,
        clock: crate::clock::Clock,
    ) -> Result<Self, DaemonError> {
        let broker = Arc::new(Broker::new(
            store.clone(),
            &config.approvals,
            platforms.clone(),
        ));
        if store.kind() == BackendKind::Sqlite {
            // With several replicas, those of a session are expired by
            // whoever takes the session over (see sessions::ownership).
            let expired = broker.expire_stale().await?;
            if expired > 0 {
                tracing::warn!(
                    approvals.expired = expired,
                    "approvals left pending by the previous run were expired"
                );
            }
        }
        let cluster = match store.kind() {
            BackendKind::Postgres => {
                Cluster::join(
                    store,
                    &config.cluster,
                    runtime.health.clone(),
                    &runtime.membership,
                    runtime.leaving.clone(),
                )
                .await?
            }
            BackendKind::Sqlite => Cluster::single(),
        };
        let tools = ToolRuntime::build(config, env, platforms.clone())?;
        let processes = tools.processes.clone();
        let sandbox = processes.sandbox();
        if sandbox.is_off() {
            tracing::warn!(
                sandbox = "off",
                "terminal and process commands run unsandboxed with the daemon's rights"
            );
        } else {
            tracing::info!(sandbox = sandbox.mechanism(), "{}", sandbox.describe());
        }
        if config.storage_open_to_commands(Some(true)).is_some() {
            let config = config.clone();
            runtime.tracker.spawn(async move {
                let url = &config.storage.url;
                let lets_in = crate::store::postgres_lets_in_without_password(url).await;
                if let Some(why) = config.storage_open_to_commands(lets_in.ok()) {
                    tracing::warn!("{why}");
                }
            });
        }
        if config.tools.terminal.backend == crate::config::TerminalBackend::Local {
            for why in sandbox.warnings(&config.agent.workspace) {
                tracing::warn!("{why}");
            }
        }
        for server in &config.mcp.servers {
            runtime.tracker.spawn(mcp::supervise(
                server.clone(),
                env.clone(),
                tools.registry.clone(),
                runtime.health.clone(),
                runtime.root.child_token(),
            ));
        }
        let mut deps = AgentDeps::from_config(config, env, tools, store.clone());
        deps.clock = clock.clone();
        let deps = Arc::new(deps);
        let policy = ApprovalPolicy::new(
            store.clone(),
            broker.clone(),
            config.approvals.mode,
            Some(deps.auxiliary.clone()),
        );
        let forges = Arc::new(crate::forge::Forges::from_config(config, env, store)?);
        let links = Links {
            approvals: Arc::new(policy),
            broker: broker.clone(),
            cluster: cluster.clone(),
            transcriber: Transcriber::from_config(&config.transcription, env),
            forges: Some(forges.clone() as Arc<dyn crate::agent::layer::ForgeDesks>),
            clock,
        };
        let sessions = SessionManager::new(
            config.clone(),
            deps,
            links,
            ManagerSettings::from_config(config),
            runtime.root.child_token(),
        );
        Ok(Self {
            platforms,
            broker,
            cluster,
            sessions,
            forges,
            processes,
        })
    }
}

/// The operator console's listener, bound before anything is served so
/// that a taken port stops the start.
struct ConsoleListener {
    listener: TcpListener,
    addr: SocketAddr,
    token: secrecy::SecretString,
}

async fn bind_console(config: &Config, env: &Env) -> Result<Option<ConsoleListener>, DaemonError> {
    if !config.console.enabled {
        return Ok(None);
    }
    let token = env.secret(&config.console.token_env).ok_or_else(|| {
        DaemonError::Console(format!(
            "console.token_env: {} is not set; the console does not start without it",
            config.console.token_env
        ))
    })?;
    let listener = TcpListener::bind(config.console.listen)
        .await
        .map_err(|e| DaemonError::Console(format!("cannot bind {}: {e}", config.console.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| DaemonError::Console(e.to_string()))?;
    Ok(Some(ConsoleListener {
        listener,
        addr,
        token,
    }))
}

fn serve_console(console: ConsoleListener, gateway: &Gateway, store: &Store, runtime: &Runtime) {
    tracing::info!(console.listen = ?console.addr, "operator console listening");
    let state = crate::operator::State {
        config: gateway.config.clone(),
        store: store.clone(),
        sessions: gateway.sessions.clone(),
        broker: gateway.broker.clone(),
        health: gateway.health.clone(),
        cluster: gateway.cluster.clone(),
    };
    let app = crate::operator::router(state, console.token);
    let limits = Limits::from_config(&gateway.config.server);
    let stop = runtime.root.child_token();
    runtime.tracker.spawn(async move {
        if let Err(err) = crate::http::serve(console.listener, app, limits, stop).await {
            tracing::error!(error = %err, "the operator console stopped");
        }
    });
}

/// Takes over what a previous run left, before intake opens.
async fn take_over(gateway: &Gateway, store: &Store, runtime: &Runtime) -> Result<(), DaemonError> {
    let sessions = &gateway.sessions;
    if gateway.cluster.is_shared() {
        // Sessions nobody owns (a replica died with them, or none ran)
        // are taken before intake opens; the others stay with their
        // owners, which this replica's events are handed to.
        let taken = sessions.sweep().await?;
        if taken > 0 {
            tracing::info!(sessions.taken = taken, "took over sessions with work left");
        }
        runtime.tracker.spawn(sessions.clone().coordinate());
        let relay = Arc::new(crate::cluster::relay::Relay::new(
            store.clone(),
            gateway.cluster.id(),
        ));
        gateway.broker.relay_through(relay.clone());
        sessions.relay_through(&relay);
        // Until the replica leaves: a turn finishing during the drain may
        // wait for a button pressed on another replica.
        runtime.membership.spawn(relay.run(runtime.leaving.clone()));
    } else {
        // What this run accepts is never replayed as well, and waits
        // behind its session's backlog.
        let backlog = sessions.backlog().await?;
        if !backlog.is_empty() {
            tracing::info!(
                inbox.backlog = backlog.len(),
                "replaying events a previous run left unprocessed"
            );
        }
        sessions.requeue(backlog).await?;
    }
    Ok(())
}

/// Scheduled jobs, background processes' reports, and the drains of
/// both at shutdown.
async fn run_background(
    gateway: &Gateway,
    store: &Store,
    processes: Arc<crate::tools::builtin::ProcessManager>,
    runtime: &Runtime,
) -> Result<(), DaemonError> {
    let (tracker, root) = (&runtime.tracker, &runtime.root);
    // Scheduled jobs: the configured ones stored, due ones fired.
    tracker.spawn(
        crate::cron::Scheduler::new(
            store.clone(),
            gateway.sessions.clone(),
            gateway.config.clone(),
        )
        .run(root.child_token()),
    );
    // Background processes report into their sessions; the ones a
    // previous run was to report are taken over.
    processes.report_to(Arc::new(gateway.sessions.clone()));
    processes.adopt(store.process_watches().await?);
    let (draining, sessions) = (root.child_token(), gateway.sessions.clone());
    tracker.spawn(async move {
        draining.cancelled().await;
        sessions.wait().await;
    });
    let stopping = root.child_token();
    tracker.spawn(async move {
        stopping.cancelled().await;
        processes.shutdown().await;
    });
    Ok(())
}

/// Raises the open-file limit to what `server.max_connections` needs, or
/// says why it could not.
fn raise_descriptor_limit(config: &Config) {
    let wanted = config.server.max_connections as u64 + crate::runtime::RESERVED_DESCRIPTORS;
    match crate::runtime::raise_descriptor_limit(wanted) {
        Ok(limit) if limit < wanted => tracing::warn!(
            descriptors = limit,
            server.max_connections = config.server.max_connections,
            "the open-file limit is below server.max_connections plus what the daemon \
             needs for itself; raise LimitNOFILE (systemd) or --ulimit nofile (Docker), \
             or lower server.max_connections"
        ),
        Ok(_) => {}
        Err(err) => tracing::warn!(error = %err, "could not read the open-file limit"),
    }
}

/// The periodic upkeep of metrics, storage and the replay window.
fn run_upkeep(config: &Config, store: &Store, runtime: &Runtime) {
    let tracker = &runtime.tracker;
    tracker.spawn(metrics_upkeep(runtime.root.child_token()));
    tracker.spawn(storage_upkeep(store.clone(), runtime.root.child_token()));
    if config.webhook.enabled {
        let window = Duration::from_secs(u64::from(config.webhook.replay_window_days) * 86_400);
        tracker.spawn(replay_window(
            store.clone(),
            window,
            runtime.root.child_token(),
        ));
    }
}

/// Keeps the Prometheus histograms from growing without bound.
async fn metrics_upkeep(stop: CancellationToken) {
    let mut ticker = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => crate::telemetry::metrics().run_upkeep(),
        }
    }
}

/// Keeps SQLite's full-text index of messages caught up and its
/// write-ahead log short, off the request path: every second, and a
/// checkpoint as soon as the intake has left enough of the log uncopied
/// (`Store::log_grown`). Nothing runs while the log stays as the last
/// complete round left it: an idle daemon touches neither the database nor
/// the code that reads it.
async fn storage_upkeep(store: Store, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    let mut settled = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            () = store.log_grown() => {
                if let Err(err) = store.checkpoint_grown().await {
                    tracing::debug!(error = %err, "checkpoint skipped");
                }
                settled = None;
            }
            _ = ticker.tick() => {
                let mark = store.log_mark();
                if mark.is_some() && mark == settled {
                    continue;
                }
                let indexed = store.index_messages().await;
                if let Err(err) = &indexed {
                    tracing::warn!(error = %err, "messages not indexed for search");
                }
                let checkpointed = store.checkpoint().await;
                if let Err(err) = &checkpointed {
                    tracing::debug!(error = %err, "checkpoint skipped");
                }
                let complete = indexed.is_ok() && matches!(checkpointed, Ok(true));
                settled = if complete { mark } else { None };
            }
        }
    }
}

/// Forgets webhook deliveries past their replay window, at start and then
/// hourly: a body is a duplicate for at least the window (at most an hour
/// more), and the inbox does not keep every delivery forever.
async fn replay_window(store: Store, window: Duration, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(Duration::from_secs(3600));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {
                let before = crate::store::now_ms() - window.as_millis() as i64;
                match store.inbox_forget_deliveries(before).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(deliveries = n, "webhook deliveries past their replay window forgotten"),
                    Err(err) => tracing::warn!(error = %err, "webhook deliveries not forgotten"),
                }
            }
        }
    }
}
