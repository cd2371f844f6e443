//! The assembled tool runtime of a daemon or CLI run: registry, toolset
//! resolution, background processes and the outbound hub.

use std::sync::Arc;

use super::builtin::{BuiltinDeps, ProcessManager, register_builtins};
use super::{Registry, RegistryError, Toolsets};
use crate::adapters::OutboundHub;
use crate::config::{Config, Env};

/// Everything tools need, built once per process.
#[derive(Debug, Clone)]
pub struct ToolRuntime {
    /// Registered tools.
    pub registry: Arc<Registry>,
    /// Toolset resolution over the registry.
    pub toolsets: Arc<Toolsets>,
    /// Background processes (killed on shutdown).
    pub processes: Arc<ProcessManager>,
    /// Connected platforms' senders.
    pub outbound: Arc<OutboundHub>,
}

impl ToolRuntime {
    /// Registers the built-in tools for `config`.
    pub fn build(config: &Config, env: &Env) -> Result<Self, RegistryError> {
        let registry = Arc::new(Registry::new());
        let outbound = Arc::new(OutboundHub::default());
        let deps = BuiltinDeps {
            config: config.clone(),
            env: env.clone(),
            http: reqwest::Client::builder()
                .user_agent(concat!("switchboard/", env!("CARGO_PKG_VERSION")))
                .build()
                .unwrap_or_default(),
            outbound: outbound.clone(),
        };
        let processes = register_builtins(&registry, &deps)?;
        Ok(Self {
            toolsets: Arc::new(Toolsets::new(registry.clone())),
            registry,
            processes,
            outbound,
        })
    }
}

/// The toolsets a platform's sessions enable (its `toolsets` key, or its
/// preset) and those every session disables.
pub fn platform_toolsets(config: &Config, platform: &str) -> (Vec<String>, Vec<String>) {
    let configured = match platform {
        "telegram" => config.telegram.toolsets.clone(),
        "discord" => config.discord.toolsets.clone(),
        "slack" => config.slack.toolsets.clone(),
        _ => None,
    };
    let enabled = configured.unwrap_or_else(|| vec![format!("gateway-{platform}")]);
    (enabled, config.tools.disabled_toolsets.clone())
}
