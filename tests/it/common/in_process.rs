//! The whole daemon (adapters included) in the test's process, on a
//! loopback port, with a handle on its gateway.

use std::time::Duration;

use switchboard::config::{Config, Env};
use switchboard::daemon::{Daemon, Gateway};
use tokio::sync::oneshot;

/// A running daemon.
pub struct InProcess {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// Its session manager, broker, store and hubs.
    pub gateway: Gateway,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl InProcess {
    /// Starts `config` (its `server.listen` should be `127.0.0.1:0`).
    pub async fn start(config: Config, env: Env) -> Self {
        let (ready_tx, ready_rx) = oneshot::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let daemon = switchboard::adapters::install(Daemon::new(config, env)).component(
            "probe",
            move |ctx| async move {
                let _ = ready_tx.send((ctx.local_addr, ctx.gateway.clone()));
                ctx.stop.cancelled().await;
            },
        );
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
        Self {
            base: format!("http://{addr}"),
            gateway,
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
