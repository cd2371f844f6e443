//! The whole daemon (adapters included) in the test's process, on a
//! loopback port, with a handle on its gateway.

use std::time::Duration;

use switchboard::clock::Clock;
use switchboard::config::{Config, Env};
use switchboard::daemon::{Daemon, Gateway};
use switchboard::store::Store;
use tokio::sync::oneshot;

/// A running daemon.
pub struct InProcess {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// Its session manager, broker and hubs.
    pub gateway: Gateway,
    /// Its storage, opened beside the daemon's for the test to look into.
    pub store: Store,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl InProcess {
    /// Starts `config` (its `server.listen` should be `127.0.0.1:0`).
    pub async fn start(config: Config, env: Env) -> Self {
        Self::start_on(config, env, Clock::system()).await
    }

    /// [`start`](Self::start), deciding budget windows, resets and
    /// schedules by `clock`.
    pub async fn start_on(config: Config, env: Env, clock: Clock) -> Self {
        let storage = config.storage.clone();
        let (ready_tx, ready_rx) = oneshot::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let daemon = Daemon::new(config, env).clock(clock);
        let daemon =
            switchboard::adapters::install(daemon).component("probe", move |ctx| async move {
                let _ = ready_tx.send((ctx.local_addr, ctx.gateway.clone()));
                ctx.stop.cancelled().await;
            });
        let task = tokio::spawn(async move {
            daemon
                .run_until(async move {
                    let _ = stop_rx.await;
                    "test"
                })
                .await
                .unwrap();
        });
        let (addr, gateway) = ready_rx.await.unwrap();
        let store = Store::connect(&storage).await.unwrap();
        Self {
            base: format!("http://{addr}"),
            gateway,
            store,
            stop: Some(stop_tx),
            task,
        }
    }

    /// Stops it and waits for the drain.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(15), self.task).await;
    }
}

/// A daemon config for tests: loopback on a free port, a short drain, a
/// SQLite file and a workspace in `dir`, the model at `llm_url` with no
/// key and no retries. Adapters are off until the test turns them on.
pub fn daemon_config(dir: &std::path::Path, llm_url: &str) -> Config {
    let mut config = Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.server.shutdown_grace_secs = 2;
    config.storage.url = format!("sqlite://{}/sb.db", dir.display());
    config.llm.base_url = llm_url.to_string();
    config.llm.api_key_env = String::new();
    config.llm.max_retries = 0;
    config.agent.workspace = dir.join("ws");
    config
}

/// Starts `config` with the Telegram adapter's token set, once Telegram
/// is connected.
pub async fn start_telegram(config: &Config) -> InProcess {
    let daemon = InProcess::start(
        config.clone(),
        Env::from_pairs([("TELEGRAM_BOT_TOKEN", "123:test-token")]),
    )
    .await;
    super::ready(&daemon.gateway, "telegram").await;
    daemon
}

/// A GitHub route at `/webhooks/github` signed with the secret in
/// `GITHUB_WEBHOOK_SECRET`, whose answers are commented through the
/// GitHub API at `api` with the token in `GITHUB_TOKEN`.
pub fn github_route(api: &str) -> Vec<switchboard::config::WebhookRoute> {
    switchboard::config::load_from_str(
        &format!(
            r#"
            [[webhook.routes]]
            name = "github"
            path = "/webhooks/github"
            scheme = "github"
            secret_env = "GITHUB_WEBHOOK_SECRET"
            [webhook.routes.deliver]
            kind = "github_comment"
            api_url = "{api}"
            token_env = "GITHUB_TOKEN"
            "#
        ),
        &Env::default(),
    )
    .unwrap()
    .webhook
    .routes
}

/// [`daemon_config`] with the Telegram adapter on `tg`, `user` allowed,
/// on `storage` when given (else the SQLite file in `dir`).
pub fn telegram_config(
    dir: &std::path::Path,
    tg: &super::fake_telegram::FakeTelegram,
    llm_url: &str,
    storage: Option<&switchboard::config::StorageConfig>,
    user: i64,
) -> Config {
    let mut config = daemon_config(dir, llm_url);
    if let Some(storage) = storage {
        config.storage = storage.clone();
    }
    config.telegram.enabled = true;
    config.telegram.api_url = tg.url.clone();
    config.telegram.allowed_users = vec![user];
    config
}
