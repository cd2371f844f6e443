//! The tool runtime: what a model can call, how calls are checked, coerced
//! and dispatched, and which tools a session sees.
//!
//! - [`registry`]: tools registered once, availability probes cached, and a
//!   dispatch that never fails upward (every failure becomes JSON).
//! - [`coerce`]: schema-driven repair of the argument types models get wrong.
//! - [`toolsets`]: named bundles, platform presets, and the per-session list.
//! - [`builtin`]: the tools switchboard ships; [`mcp`]: tools from MCP servers.

pub mod builtin;
pub mod coerce;
pub mod mcp;

pub mod registry;
pub mod runtime;
pub mod sandbox;
pub mod sanitize;
pub mod toolsets;
pub mod workspace;

pub use registry::{Availability, RegisterMode, Registry, RegistryError, ToolEntry};
pub use runtime::ToolRuntime;
pub use toolsets::{SessionView, ToolsetError, Toolsets};

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Default cap on one tool result, in characters.
pub const DEFAULT_MAX_RESULT_CHARS: usize = 100_000;

/// How a tool may share a batch of parallel calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    /// Reads only: may run beside anything parallel-safe.
    ReadOnly,
    /// Touches the path named by argument `arg`: parallel only when no other
    /// call in the batch touches an overlapping path.
    PathScoped {
        /// Argument holding the path.
        arg: &'static str,
    },
    /// Must run alone (side effects, or it needs the human).
    Exclusive,
}

/// The emoji of a tool that declares none.
pub const DEFAULT_EMOJI: &str = "🔧";

/// What a tool declares about itself.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// Unique name, as the model calls it.
    pub name: String,
    /// The toolset it belongs to.
    pub toolset: String,
    /// Description shown to the model.
    pub description: String,
    /// JSON Schema of the arguments (an `object` schema).
    pub parameters: Value,
    /// Emoji shown next to tool activity.
    pub emoji: &'static str,
    /// Environment variables it needs (for display).
    pub requires_env: Vec<String>,
    /// Largest result passed to the model; longer results are spilled.
    pub max_result_chars: usize,
    /// Batch behaviour.
    pub concurrency: Concurrency,
}

impl ToolSpec {
    /// A spec with the defaults: no env, 100 000 chars, exclusive.
    pub fn new(name: &str, toolset: &str, description: &str, parameters: Value) -> Self {
        Self {
            name: name.into(),
            toolset: toolset.into(),
            description: description.into(),
            parameters,
            emoji: DEFAULT_EMOJI,
            requires_env: Vec::new(),
            max_result_chars: DEFAULT_MAX_RESULT_CHARS,
            concurrency: Concurrency::Exclusive,
        }
    }

    /// Sets the emoji.
    pub fn emoji(mut self, emoji: &'static str) -> Self {
        self.emoji = emoji;
        self
    }

    /// Sets the batch behaviour.
    pub fn concurrency(mut self, concurrency: Concurrency) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// Sets the result cap.
    pub fn max_result_chars(mut self, chars: usize) -> Self {
        self.max_result_chars = chars;
        self
    }

    /// Declares the environment variables the tool needs.
    pub fn requires_env<S: Into<String>>(mut self, vars: impl IntoIterator<Item = S>) -> Self {
        self.requires_env = vars.into_iter().map(Into::into).collect();
        self
    }

    /// The OpenAI function-calling form of this tool.
    pub fn function_schema(&self) -> Value {
        serde_json::json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            }
        })
    }
}

/// Why a tool call failed; rendered to the model as `{"error": …}`.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not fit the schema or the tool's rules.
    #[error("invalid arguments: {0}")]
    InvalidArgs(String),
    /// A policy (approvals, workspace confinement, SSRF guard) refused.
    #[error("{0}")]
    Refused(String),
    /// The work itself failed.
    #[error("{0}")]
    Failed(String),
    /// The call was cancelled (turn interrupted, daemon stopping).
    #[error("cancelled")]
    Cancelled,
}

/// The decision of the approval hook on a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalVerdict {
    /// Run it.
    Allow,
    /// Do not run it; `reason` goes to the model.
    Deny {
        /// Why.
        reason: String,
    },
}

/// Asked before `terminal` or `process start` runs anything.
#[async_trait::async_trait]
pub trait ApprovalHook: Send + Sync {
    /// Decides whether `command` may run in this session. May wait for a
    /// human; must respect `ctx.cancel`.
    async fn review(&self, command: &str, ctx: &ToolContext) -> ApprovalVerdict;
}

/// The hook used when no policy is wired: allow everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct AllowAll;

#[async_trait::async_trait]
impl ApprovalHook for AllowAll {
    async fn review(&self, _command: &str, _ctx: &ToolContext) -> ApprovalVerdict {
        ApprovalVerdict::Allow
    }
}

/// Everything a tool call may need from its session.
#[derive(Clone)]
pub struct ToolContext {
    /// The session's id.
    pub session_id: String,
    /// The session's key.
    pub session_key: String,
    /// The user whose turn it is, `<platform>:<id>`.
    pub user: Option<String>,
    /// The session's workspace (canonical, exists).
    pub workspace: PathBuf,
    /// Decides on dangerous commands.
    pub approvals: Arc<dyn ApprovalHook>,
    /// Fires when the turn is interrupted or the daemon stops.
    pub cancel: CancellationToken,
    /// The event the turn answers (none outside a session's turn): what a
    /// background process reports is addressed as it.
    pub origin: Option<Arc<crate::platform::InboundEvent>>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("session_key", &self.session_key)
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// A context for `session_key` whose workspace is `root/<safe key>`,
    /// created if missing.
    pub fn for_session(
        root: &std::path::Path,
        session_id: &str,
        session_key: &str,
        approvals: Arc<dyn ApprovalHook>,
    ) -> std::io::Result<Self> {
        let workspace = workspace::session_dir(root, session_key)?;
        Ok(Self {
            session_id: session_id.into(),
            session_key: session_key.into(),
            user: None,
            workspace,
            approvals,
            cancel: CancellationToken::new(),
            origin: None,
        })
    }
}

/// Why a tool cannot work now, in a sentence for the operator and the
/// model (a backend not configured, a server not connected).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

impl From<String> for Unavailable {
    fn from(reason: String) -> Self {
        Self(reason)
    }
}

impl From<&str> for Unavailable {
    fn from(reason: &str) -> Self {
        Self(reason.to_string())
    }
}

/// A callable tool.
#[async_trait::async_trait]
pub trait Tool: Send + Sync {
    /// The declaration.
    fn spec(&self) -> ToolSpec;

    /// Whether the tool can work now; `Err` carries the reason. Cached by
    /// the registry for 30 s. The default is always available.
    fn check(&self) -> Result<(), Unavailable> {
        Ok(())
    }

    /// The name of a check several tools share (one MCP server's tools,
    /// the tools of one command backend): the registry runs it once for
    /// all of them per probe. `None`: the check is the tool's own.
    fn shared_check(&self) -> Option<String> {
        None
    }

    /// A schema that depends on the current state (e.g. the configured
    /// targets of `send_message`); `None` keeps the declared one.
    fn dynamic_parameters(&self) -> Option<Value> {
        None
    }

    /// Runs the call with already-coerced arguments.
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError>;
}

/// Reads a required string argument.
pub fn arg_str<'a>(args: &'a Value, name: &str) -> Result<&'a str, ToolError> {
    args.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::InvalidArgs(format!("`{name}` (string) is required")))
}

/// Reads an optional string argument.
pub fn arg_opt_str<'a>(args: &'a Value, name: &str) -> Option<&'a str> {
    args.get(name).and_then(Value::as_str)
}

/// Reads an optional non-negative integer argument.
pub fn arg_opt_u64(args: &Value, name: &str) -> Result<Option<u64>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            ToolError::InvalidArgs(format!("`{name}` must be a non-negative integer"))
        }),
    }
}
