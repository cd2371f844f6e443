//! The assembled tool runtime of a daemon or CLI run: registry, toolset
//! resolution (with the platforms' presets), background processes, and
//! the platforms `send_message` posts through.

use std::sync::Arc;

use super::builtin::{BuiltinDeps, ProcessManager, register_builtins};
use super::{Registry, RegistryError, Toolsets};
use crate::config::{Config, Env};
use crate::platform::Platforms;

/// Everything tools need, built once per process.
#[derive(Debug, Clone)]
pub struct ToolRuntime {
    /// Registered tools.
    pub registry: Arc<Registry>,
    /// Toolset resolution over the registry.
    pub toolsets: Arc<Toolsets>,
    /// Background processes (killed on shutdown).
    pub processes: Arc<ProcessManager>,
    /// The platforms: their presets, and the connected ones' ports.
    pub platforms: Arc<Platforms>,
}

impl ToolRuntime {
    /// Registers the built-in tools for `config`; presets come from the
    /// profiles in `platforms`.
    pub fn build(
        config: &Config,
        env: &Env,
        platforms: Arc<Platforms>,
    ) -> Result<Self, RegistryError> {
        let registry = Arc::new(Registry::new());
        let deps = BuiltinDeps {
            config: config.clone(),
            env: env.clone(),
            http: crate::http::client::client(),
            platforms: platforms.clone(),
        };
        let processes = register_builtins(&registry, &deps)?;
        Ok(Self {
            toolsets: Arc::new(Toolsets::new(registry.clone(), platforms.presets())),
            registry,
            processes,
            platforms,
        })
    }
}
