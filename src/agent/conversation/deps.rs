//! What every conversation shares ([`AgentDeps`], built once from the
//! configuration), the system prompt's fixed parts, and where a
//! conversation happens ([`SessionContext`]).

use std::path::PathBuf;
use std::sync::Arc;

use crate::agent::provider::{ChatModel, ModelEndpoint};
use crate::config::{Config, Env};
use crate::store::Store;
use crate::tools::ToolRuntime;

/// The default system prompt.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are switchboard, a capable assistant that works for the people who message you. Use the tools you are given when they help; say plainly when something failed. Be concise: your answers are read in a chat.";

/// For model families that describe what they would do instead of doing
/// it ("I'll run the tests now", and the turn ends): the tool-use guidance
/// of the source documents, added to their system prompt.
pub const TOOL_USE_GUIDANCE: &str = "You MUST use your tools to take action: do not describe what you would do or plan to do, do it. Never end your turn with a promise of future action (\"I'll run the tests now\"); execute it now with a tool call, then report what happened.";

/// What every conversation shares.
pub struct AgentDeps {
    /// The models sessions talk to (main, per-session choice, fallbacks).
    pub models: crate::agent::Models,
    /// The auxiliary model (compression).
    pub auxiliary: Arc<dyn ChatModel>,
    /// Tools.
    pub tools: ToolRuntime,
    /// Storage.
    pub store: Store,
    /// Model calls per turn.
    pub max_iterations: u32,
    /// Output cap per model call.
    pub max_tokens: u32,
    /// The model's context window.
    pub context_window: u32,
    /// System prompt (platform context is appended).
    pub system_prompt: String,
    /// Model families that get [`TOOL_USE_GUIDANCE`] (lowercase).
    pub tool_use_guidance: Vec<String>,
    /// Root of the session workspaces.
    pub workspace_root: PathBuf,
    /// Prices per model, for each turn's cost.
    pub prices: std::collections::BTreeMap<String, crate::config::Price>,
    /// The spend caps each model call is checked against, when any is set.
    pub budgets: Option<Arc<crate::config::BudgetsConfig>>,
    /// Where "now" comes from for the caps' windows.
    pub clock: crate::clock::Clock,
}

impl AgentDeps {
    /// Everything from the configuration.
    pub fn from_config(config: &Config, env: &Env, tools: ToolRuntime, store: Store) -> Self {
        let http = crate::http::client::client();
        Self {
            models: crate::agent::Models::from_config(config, env, http.clone()),
            auxiliary: ModelEndpoint::auxiliary(config, env).client(http),
            tools,
            store,
            max_iterations: config.agent.max_iterations,
            max_tokens: config.llm.max_tokens,
            context_window: config.llm.context_window,
            system_prompt: config
                .agent
                .system_prompt
                .clone()
                .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_string()),
            tool_use_guidance: config
                .agent
                .tool_use_guidance
                .iter()
                .map(|m| m.to_lowercase())
                .collect(),
            workspace_root: config.agent.workspace.clone(),
            prices: config.budgets.prices.clone(),
            budgets: config
                .budgets
                .capped()
                .then(|| Arc::new(config.budgets.clone())),
            clock: crate::clock::Clock::system(),
        }
    }
}

/// Where the conversation happens, for the system prompt.
#[derive(Debug, Clone, Default)]
pub struct SessionContext {
    /// Platform name.
    pub platform: String,
    /// `direct message`, `group`, `channel`, `webhook`…
    pub chat_type: String,
    /// The user's display name.
    pub user_name: Option<String>,
    /// Thread or topic, if any.
    pub thread: Option<String>,
}

impl SessionContext {
    pub(super) fn describe(&self) -> String {
        let mut line = format!(
            "This conversation is a {} on {}",
            self.chat_type, self.platform
        );
        if let Some(thread) = &self.thread {
            line.push_str(&format!(", in thread {thread}"));
        }
        if let Some(user) = &self.user_name {
            line.push_str(&format!("; the user is {user}"));
        }
        line.push('.');
        line
    }
}
