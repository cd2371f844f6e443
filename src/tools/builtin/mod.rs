//! The tools switchboard ships. [`builtin_tools`] is the one list: adding a
//! tool means adding its file and one line there; a test checks that every
//! tool named by a toolset is in it.

mod agent;
mod exit_codes;
mod files;
mod gitignore;
mod messaging;
mod output;
mod process;
mod pty;
mod terminal;
mod vision;
mod web;

pub use files::apply_patch;
pub use process::{ProcessManager, ProcessReports};
pub use terminal::{Launcher, shell_quote};
pub use web::is_forbidden;

use std::sync::Arc;

use crate::config::{Config, Env};
use crate::platform::Platforms;

use super::sandbox::Sandbox;
use super::{RegisterMode, Registry, RegistryError, Tool};

/// What the built-in tools are made from.
#[derive(Debug, Clone)]
pub struct BuiltinDeps {
    /// The gateway configuration.
    pub config: Config,
    /// Where secrets are read.
    pub env: Env,
    /// The shared HTTP client.
    pub http: reqwest::Client,
    /// The platforms, for `send_message`.
    pub platforms: Arc<Platforms>,
}

/// The built-in tools and the process manager they share (stop it on
/// shutdown).
pub fn builtin_tools(deps: &BuiltinDeps) -> (Vec<Arc<dyn Tool>>, Arc<ProcessManager>) {
    let config = &deps.config;
    let launcher = Launcher::new(
        config.tools.terminal.clone(),
        Sandbox::new(&config.tools.sandbox, &config.protected_paths()),
    );
    let processes = Arc::new(ProcessManager::new(launcher.clone()));
    let mut tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(terminal::Terminal::new(launcher)),
        Arc::new(process::Process::new(processes.clone())),
        Arc::new(files::ReadFile),
        Arc::new(files::WriteFile),
        Arc::new(files::Patch),
        Arc::new(files::SearchFiles),
        Arc::new(web::WebSearch::new(
            config.tools.web_search.clone(),
            &deps.env,
            deps.http.clone(),
        )),
        Arc::new(web::WebExtract::new(config.tools.web_extract.clone())),
        Arc::new(vision::VisionAnalyze::new(
            config,
            &deps.env,
            deps.http.clone(),
        )),
        Arc::new(messaging::SendMessage::new(
            config.tools.send_message.targets.clone(),
            deps.platforms.clone(),
        )),
    ];
    tools.extend(
        agent::agent_tools()
            .into_iter()
            .map(|t| Arc::new(t) as Arc<dyn Tool>),
    );
    (tools, processes)
}

/// Registers every built-in tool.
pub fn register_builtins(
    registry: &Registry,
    deps: &BuiltinDeps,
) -> Result<Arc<ProcessManager>, RegistryError> {
    let (tools, processes) = builtin_tools(deps);
    for tool in tools {
        registry.register(tool, RegisterMode::Normal)?;
    }
    Ok(processes)
}
