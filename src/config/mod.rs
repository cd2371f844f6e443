//! Typed configuration: the contract of `gateway.toml` (SPEC §10).
//!
//! Every struct rejects unknown keys, every field has a default, and secrets
//! appear only as the *names* of environment variables. Loading (file +
//! `SWITCHBOARD_<SECTION>__<KEY>` overrides) lives in [`load`]; the checks
//! that need more than a type (URLs, secrets present, route sanity) live in
//! [`validate`].

mod cron;
mod env;
mod forge;
pub mod identity;
mod load;
mod platforms;
mod sessions;
mod tools;
mod validate;

pub use cron::{BudgetsConfig, Caps, CronConfig, CronJobConfig, MissedPolicy, OverBudget, Price};
pub use env::Env;
pub use forge::{BlockingConclusion, ForgeConfig};
pub use load::{ConfigError, ConfigSource, load, load_from_str, load_storage};
pub use platforms::{
    DeliverConfig, DeliverKind, DiscordConfig, GroupBy, McpConfig, McpServerConfig,
    SignatureScheme, SlackConfig, SlackMode, TelegramConfig, TelegramMode, WebhookConfig,
    WebhookRoute,
};
pub use sessions::{ResetMode, ResetPolicy, SessionsConfig};
pub use tools::{
    SandboxConfig, SandboxMode, SearchProvider, SendMessageConfig, TerminalBackend, TerminalConfig,
    ToolsConfig, VisionConfig, WebExtractConfig, WebSearchConfig,
};
pub use validate::{ComponentStatus, Problem, component_statuses, validate};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The whole gateway configuration.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// HTTP listener: health, metrics, webhooks, Slack events, Telegram webhook.
    pub server: ServerConfig,
    /// Where sessions, messages, the inbox and approvals are kept.
    pub storage: StorageConfig,
    /// Log level and format.
    pub log: LogConfig,
    /// The language model the agents talk to.
    pub llm: LlmConfig,
    /// Agent loop behaviour shared by every session.
    pub agent: AgentConfig,
    /// Dangerous-command approvals.
    pub approvals: ApprovalsConfig,
    /// Session keys, queues and reset policies.
    pub sessions: SessionsConfig,
    /// Telegram adapter.
    pub telegram: TelegramConfig,
    /// Discord adapter.
    pub discord: DiscordConfig,
    /// Slack adapter.
    pub slack: SlackConfig,
    /// Webhook receiver (GitHub, GitLab, CI).
    pub webhook: WebhookConfig,
    /// Built-in tools.
    pub tools: ToolsConfig,
    /// MCP tool servers.
    pub mcp: McpConfig,
    /// Several replicas on one PostgreSQL database.
    pub cluster: ClusterConfig,
    /// How answers appear in the chat platforms (each platform's section
    /// may override it).
    pub chat: ChatConfig,
    /// Voice notes and audio files heard through a speech-to-text
    /// endpoint.
    pub transcription: TranscriptionConfig,
    /// Scheduled agent jobs.
    pub cron: CronConfig,
    /// What turns may cost.
    pub budgets: BudgetsConfig,
    /// The operator console: a web page on a listener of its own.
    pub console: ConsoleConfig,
    /// The file it was read from (none on the built-in defaults), hidden
    /// from commands like the daemon's other paths.
    #[serde(skip)]
    pub file: Option<PathBuf>,
}

/// `[console]`: the operator console.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// Serve it (off by default).
    pub enabled: bool,
    /// Its own address, apart from the webhook listener's.
    pub listen: SocketAddr,
    /// Environment variable holding the login token (required when
    /// enabled).
    pub token_env: String,
    /// How long a login lasts.
    pub session_hours: u64,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            token_env: "SWITCHBOARD_CONSOLE_TOKEN".into(),
            session_hours: 12,
        }
    }
}

/// `[server]`: the HTTP listener.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address the HTTP server binds; port 0 picks a free port.
    pub listen: SocketAddr,
    /// External base URL of this gateway, used to register the Telegram
    /// webhook; empty when the gateway is not reachable from outside.
    pub public_url: String,
    /// Largest request body accepted, in bytes; larger bodies get 413.
    pub max_body_bytes: usize,
    /// Longest time one HTTP request may take before it is answered 408.
    pub request_timeout_secs: u64,
    /// Connections open at once; more are answered 503 and closed.
    pub max_connections: usize,
    /// Longest time a request head may take to arrive (counted from the
    /// connection's start, or from its first byte after a pause); a slower
    /// connection is closed.
    pub header_read_timeout_secs: u64,
    /// Longest time a connection may sit idle between requests; 0 closes
    /// each connection after one request.
    pub keep_alive_secs: u64,
    /// Most header lines in one request; more get 431.
    pub max_headers: usize,
    /// Largest request head (start line and headers), in bytes; larger
    /// gets 431.
    pub max_header_bytes: usize,
    /// How long running turns may take to finish after SIGTERM before the
    /// daemon exits anyway.
    pub shutdown_grace_secs: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            public_url: String::new(),
            max_body_bytes: 1024 * 1024,
            request_timeout_secs: 30,
            max_connections: 4096,
            header_read_timeout_secs: 10,
            keep_alive_secs: 75,
            max_headers: 100,
            max_header_bytes: 32 * 1024,
            shutdown_grace_secs: 30,
        }
    }
}

/// `[storage]`: the database.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// `sqlite://path/to/file.db` (created if missing) or
    /// `postgres://user@host/db`.
    pub url: String,
    /// Largest number of pooled connections.
    pub max_connections: u32,
    /// SQLite only: how long a writer waits for a lock before failing, in
    /// milliseconds.
    pub busy_timeout_ms: u64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            url: "sqlite://data/switchboard.db".into(),
            max_connections: 8,
            busy_timeout_ms: 5000,
        }
    }
}

/// `[cluster]`: replicas sharing one PostgreSQL database (SQLite runs one
/// replica and ignores it).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// This replica's name in `switchboard cluster status` and the logs;
    /// empty: `<hostname>:<pid>`.
    pub name: String,
    /// How long a lease (the leadership of a single-connection ingress, the
    /// ownership of a session) outlives its holder's last renewal: a
    /// replica that dies is taken over within this, plus a second.
    pub lease_secs: u64,
    /// Replicas share the sessions: one owning more than its share hands
    /// some to those owning fewer, each between two of its turns.
    pub rebalance: bool,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            lease_secs: 6,
            rebalance: true,
        }
    }
}

/// `[chat]`: how answers appear in the chat platforms. `[telegram]`,
/// `[discord]` and `[slack]` take the same keys, overriding these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChatConfig {
    /// Stream answers into the chat: the first tokens make a message that
    /// later ones edit, at the platform's edit rate.
    pub stream: bool,
    /// Tool progress shown while a turn runs, in a status message of its
    /// own that is deleted when the answer is in.
    pub progress: Progress,
}

impl Default for ChatConfig {
    fn default() -> Self {
        Self {
            stream: true,
            progress: Progress::Off,
        }
    }
}

/// `[transcription]`: an OpenAI-compatible speech-to-text endpoint
/// (`POST {base_url}/audio/transcriptions`) that voice notes and audio
/// files are sent to before their turn; off while `base_url` is empty (the
/// sender is told why).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TranscriptionConfig {
    /// The endpoint's base URL, e.g. `https://api.openai.com/v1` or a local
    /// whisper server's; empty: voice notes are not transcribed.
    pub base_url: String,
    /// The transcription model.
    pub model: String,
    /// Variable holding its API key; unset or empty: no key is sent.
    pub api_key_env: String,
    /// The language spoken (ISO-639-1, e.g. `en`), as a hint; empty: the
    /// model detects it.
    pub language: String,
    /// Largest audio file heard, in bytes.
    pub max_bytes: u64,
    /// Longest audio heard, in seconds (where the platform says how long).
    pub max_seconds: u32,
    /// How long one transcription may take.
    pub timeout_secs: u64,
}

impl Default for TranscriptionConfig {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            model: "whisper-1".into(),
            api_key_env: "OPENAI_API_KEY".into(),
            language: String::new(),
            max_bytes: 20 * 1024 * 1024,
            max_seconds: 600,
            timeout_secs: 120,
        }
    }
}

/// How much of a turn's tool activity the chat sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Progress {
    /// Nothing.
    #[default]
    Off,
    /// One line naming what is going on ("reading a file…").
    Compact,
    /// The tool and its arguments, shortened.
    Verbose,
}

impl ChatConfig {
    /// This, with a platform's own `stream` and `progress` keys over it.
    pub fn with(&self, stream: Option<bool>, progress: Option<Progress>) -> Self {
        Self {
            stream: stream.unwrap_or(self.stream),
            progress: progress.unwrap_or(self.progress),
        }
    }
}

/// `[log]`: logging.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `human` (default) or `json`; `--log-format` overrides it.
    pub format: LogFormat,
    /// A `tracing` filter such as `info` or `switchboard=debug,sqlx=warn`;
    /// `RUST_LOG` overrides it.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Human,
            level: "info".into(),
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Readable lines for a terminal or journald.
    Human,
    /// One JSON object per line.
    Json,
}

/// `[llm]`: the main model.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    /// `openai` (any OpenAI-compatible endpoint) or `anthropic`.
    pub provider: LlmProvider,
    /// API base URL, e.g. `https://api.openai.com/v1` or an Ollama URL.
    pub base_url: String,
    /// Model name sent with every request.
    pub model: String,
    /// Name of the environment variable holding the API key; empty for
    /// endpoints that need none.
    pub api_key_env: String,
    /// Longest time one model request may take; a streamed answer must
    /// start within it and then never pause for longer.
    pub request_timeout_secs: u64,
    /// Largest number of tokens the model may produce per call.
    pub max_tokens: u32,
    /// The model's context window in tokens; compression starts near it.
    pub context_window: u32,
    /// Stream responses (server-sent events) instead of waiting for the
    /// whole answer.
    pub stream: bool,
    /// Retries of a model call on 429, 5xx and network errors.
    pub max_retries: u32,
    /// Model used for context compression and smart approvals; each unset
    /// key falls back to the main model's.
    pub auxiliary: LlmEndpointConfig,
    /// Models tried in order (`[[llm.fallback]]`) when the main one still
    /// fails after its retries (5xx, 429, timeouts, unreachable); each unset
    /// key falls back to the main model's, `model` is required.
    pub fallback: Vec<LlmEndpointConfig>,
    /// Model names a chat may switch its session to with `/model NAME`,
    /// on the main endpoint; empty, `/model` only says which model answers.
    pub models: Vec<String>,
    /// Model by platform (`discord = "gpt-4.1"`), on the main endpoint.
    pub model_by_platform: BTreeMap<String, String>,
    /// Model by chat, keyed `platform:chat id` (`"slack:C0123"`).
    pub model_by_chat: BTreeMap<String, String>,
    /// Model by user, keyed `platform:user id` (`"telegram:42"`); a user's
    /// model wins over their chat's, which wins over the platform's.
    pub model_by_user: BTreeMap<String, String>,
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            provider: LlmProvider::Openai,
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4.1-mini".into(),
            api_key_env: "OPENAI_API_KEY".into(),
            request_timeout_secs: 120,
            max_tokens: 4096,
            context_window: 128_000,
            stream: true,
            max_retries: 3,
            auxiliary: LlmEndpointConfig::default(),
            fallback: Vec::new(),
            models: Vec::new(),
            model_by_platform: BTreeMap::new(),
            model_by_chat: BTreeMap::new(),
            model_by_user: BTreeMap::new(),
        }
    }
}

/// Another model endpoint, described against `[llm]`: `[llm.auxiliary]`
/// (the helper model) and each `[[llm.fallback]]`; unset keys inherit from
/// `[llm]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlmEndpointConfig {
    /// Wire protocol.
    pub provider: Option<LlmProvider>,
    /// Base URL.
    pub base_url: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// Environment variable with the API key.
    pub api_key_env: Option<String>,
}

/// Wire protocol of a model endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LlmProvider {
    /// OpenAI chat completions, spoken by OpenAI, OpenRouter, Ollama, vLLM…
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

/// `[agent]`: the agent loop.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// Directory under which each session gets its own workspace.
    pub workspace: PathBuf,
    /// What a message arriving during a running turn does: `queue`,
    /// `interrupt` or `steer`.
    pub busy_input_mode: BusyInputMode,
    /// Largest number of model calls in one turn.
    pub max_iterations: u32,
    /// Replaces the built-in system prompt (platform context is appended).
    pub system_prompt: Option<String>,
    /// Model families told to act with their tools rather than describe
    /// what they would do: a model whose name contains one of these
    /// (case-insensitive) gets the tool-use guidance in its system prompt
    /// when it has tools. Empty: nobody.
    pub tool_use_guidance: Vec<String>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            workspace: PathBuf::from("data/workspace"),
            busy_input_mode: BusyInputMode::Queue,
            max_iterations: 90,
            system_prompt: None,
            tool_use_guidance: ["gpt", "codex", "gemini"].map(String::from).to_vec(),
        }
    }
}

/// Policy for messages that arrive while a turn runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BusyInputMode {
    /// Run it after the current turn (FIFO, capped).
    Queue,
    /// Cancel the current turn at the next boundary and run it.
    Interrupt,
    /// Add it to the current turn after its running batch of tool calls
    /// (a turn that makes no more calls leaves it to run after, queued).
    Steer,
}

/// `[approvals]`: dangerous-command approvals.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalsConfig {
    /// `manual` (ask a human), `smart` (auxiliary model first) or `off`.
    pub mode: ApprovalMode,
    /// Seconds a request waits for a decision before it is denied.
    pub timeout_secs: u64,
    /// Platform user ids allowed to approve anyone's request.
    pub approvers: Vec<String>,
    /// Chat that receives approval requests of sessions with no human
    /// (webhook runs); without it such requests are denied.
    pub route_to: Option<ChatTarget>,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        Self {
            mode: ApprovalMode::Manual,
            timeout_secs: 300,
            approvers: Vec::new(),
            route_to: None,
        }
    }
}

impl Config {
    /// The gateway's own paths, which commands the agent runs must never
    /// reach: the workspace root (other sessions' workspaces), on SQLite
    /// the database's directory, the keys it holds (a forge route's
    /// GitHub App key, the ssh backend's identity) and the file its
    /// configuration was read from (`storage.url` may hold a password),
    /// wherever they are.
    pub fn protected_paths(&self) -> Vec<PathBuf> {
        let mut paths = vec![self.agent.workspace.clone()];
        if let Some(file) = self.storage.sqlite_file() {
            paths.push(match file.parent() {
                Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
                _ => file,
            });
        }
        paths.extend(
            self.webhook
                .routes
                .iter()
                .filter_map(|route| route.forge.as_ref()?.private_key_file.clone()),
        );
        let identity = &self.tools.terminal.ssh_identity_file;
        if !identity.is_empty() {
            paths.push(PathBuf::from(identity));
        }
        paths.extend(self.file.clone());
        paths
    }
}

/// A URL with any password replaced by `***`, for logs, reports and
/// errors; one the URL parser cannot read (a mistyped scheme) too.
pub fn redact_url(raw: &str) -> String {
    if let Ok(mut url) = url::Url::parse(raw)
        && url.has_authority()
    {
        if url.password().is_some() {
            let _ = url.set_password(Some("***"));
            return url.to_string();
        }
        return raw.to_string();
    }
    // Whatever sits between the first ':' and the last '@' of what looks
    // like an authority.
    let Some(at) = raw.rfind('@') else {
        return raw.to_string();
    };
    let start = raw[..at].find("//").map_or(0, |i| i + 2);
    match raw[start..at].find(':') {
        Some(colon) => format!("{}:***{}", &raw[..start + colon], &raw[at..]),
        None => raw.to_string(),
    }
}

impl StorageConfig {
    /// The database file of a `sqlite://` URL.
    pub fn sqlite_file(&self) -> Option<PathBuf> {
        let rest = self.url.strip_prefix("sqlite:")?;
        let path = rest.trim_start_matches("//");
        let path = path.split('?').next().unwrap_or(path);
        (!path.is_empty() && path != ":memory:").then(|| PathBuf::from(path))
    }
}

/// How dangerous commands are decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    /// A human decides in the chat.
    Manual,
    /// The auxiliary model decides; escalations and errors go to a human.
    Smart,
    /// No approvals (hard blocks still apply).
    Off,
}

/// A chat on one of the connected platforms.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ChatTarget {
    /// `telegram`, `discord` or `slack`.
    pub platform: String,
    /// The platform's chat or channel id.
    pub chat: String,
}

#[cfg(test)]
mod redaction {
    use super::redact_url;

    #[test]
    fn passwords_are_redacted_from_urls_even_mistyped_ones() {
        assert_eq!(
            redact_url("postgres://app:hunter2@db:5432/sb"),
            "postgres://app:***@db:5432/sb"
        );
        assert_eq!(redact_url("postgres://app@db/sb"), "postgres://app@db/sb");
        assert_eq!(redact_url("sqlite://data/x.db"), "sqlite://data/x.db");
        for typo in [
            "postgres//app:hunter2@db/sb",
            "postgress:/app:hunter2@db/sb",
            "app:hunter2@db/sb",
        ] {
            let shown = redact_url(typo);
            assert!(!shown.contains("hunter2"), "{shown}");
        }
    }
}
