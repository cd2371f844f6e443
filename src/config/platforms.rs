//! Config sections of the platform adapters, the webhook receiver and MCP.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `[telegram]`: the Telegram adapter.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelegramConfig {
    /// Whether the adapter starts.
    pub enabled: bool,
    /// Environment variable holding the bot token.
    pub token_env: String,
    /// Bot API base URL; point it at a self-hosted Bot API server if needed.
    pub api_url: String,
    /// `polling` (default) or `webhook` (route `POST /telegram/webhook`,
    /// needs `server.public_url`).
    pub mode: TelegramMode,
    /// Environment variable holding the webhook secret token (webhook mode).
    pub webhook_secret_env: String,
    /// Numeric user ids allowed to talk to the bot; empty means pairing.
    pub allowed_users: Vec<i64>,
    /// Everyone may talk to the bot when no user (or role) allowlist is
    /// set; otherwise (the default) strangers get a pairing code in a
    /// direct message and are ignored in groups.
    pub open: bool,
    /// In groups, answer only when mentioned or replied to.
    pub require_mention: bool,
    /// Toolsets for Telegram sessions; unset means `gateway-telegram`.
    pub toolsets: Option<Vec<String>>,
    /// Stream answers here; unset: `[chat] stream`.
    pub stream: Option<bool>,
    /// Tool progress here; unset: `[chat] progress`.
    pub progress: Option<super::Progress>,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            token_env: "TELEGRAM_BOT_TOKEN".into(),
            api_url: "https://api.telegram.org".into(),
            mode: TelegramMode::Polling,
            webhook_secret_env: "TELEGRAM_WEBHOOK_SECRET".into(),
            allowed_users: Vec::new(),
            require_mention: true,
            open: false,
            toolsets: None,
            stream: None,
            progress: None,
        }
    }
}

/// How Telegram updates reach the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TelegramMode {
    /// getUpdates long polling.
    Polling,
    /// setWebhook pointing at `server.public_url`.
    Webhook,
}

/// `[discord]`: the Discord adapter.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiscordConfig {
    /// Whether the adapter starts.
    pub enabled: bool,
    /// Environment variable holding the bot token.
    pub token_env: String,
    /// REST base URL; the gateway URL is discovered through it.
    pub api_url: String,
    /// Snowflake ids of users allowed to talk to the bot.
    pub allowed_users: Vec<String>,
    /// Everyone may talk to the bot when no user (or role) allowlist is
    /// set; otherwise (the default) strangers get a pairing code in a
    /// direct message and are ignored in groups.
    pub open: bool,
    /// Snowflake ids of roles whose members may talk to the bot.
    pub allowed_roles: Vec<String>,
    /// Snowflake ids of channels the bot answers in.
    pub allowed_channels: Vec<String>,
    /// User ids of bots whose messages are taken like a person's; other
    /// bots, webhooks and the bot itself are ignored.
    pub allowed_bots: Vec<String>,
    /// In guild channels, answer only when mentioned.
    pub require_mention: bool,
    /// Start a thread on the message that opens a conversation in a guild
    /// channel and talk there (one thread per conversation).
    pub auto_thread: bool,
    /// Toolsets for Discord sessions; unset means `gateway-discord`.
    pub toolsets: Option<Vec<String>>,
    /// Stream answers here; unset: `[chat] stream`.
    pub stream: Option<bool>,
    /// Tool progress here; unset: `[chat] progress`.
    pub progress: Option<super::Progress>,
}

impl Default for DiscordConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            token_env: "DISCORD_BOT_TOKEN".into(),
            api_url: "https://discord.com".into(),
            allowed_users: Vec::new(),
            allowed_roles: Vec::new(),
            allowed_channels: Vec::new(),
            allowed_bots: Vec::new(),
            require_mention: true,
            open: false,
            auto_thread: false,
            toolsets: None,
            stream: None,
            progress: None,
        }
    }
}

/// `[slack]`: the Slack adapter.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlackConfig {
    /// Whether the adapter starts.
    pub enabled: bool,
    /// `socket` (Socket Mode, default) or `events` (HTTP Events API on
    /// `POST /slack/events` and `POST /slack/interactivity`).
    pub mode: SlackMode,
    /// Environment variable holding the bot token (`xoxb-…`).
    pub bot_token_env: String,
    /// Environment variable holding the app-level token (`xapp-…`), Socket
    /// Mode only.
    pub app_token_env: String,
    /// Environment variable holding the signing secret, Events API only.
    pub signing_secret_env: String,
    /// Web API base URL.
    pub api_url: String,
    /// User ids allowed to talk to the bot; empty means pairing (everyone
    /// in the workspace only with `open = true`).
    pub allowed_users: Vec<String>,
    /// Everyone may talk to the bot when no user (or role) allowlist is
    /// set; otherwise (the default) strangers get a pairing code in a
    /// direct message and are ignored in groups.
    pub open: bool,
    /// Channel ids the bot answers in; empty means every channel it is in.
    pub allowed_channels: Vec<String>,
    /// Bot ids (`B…`) whose messages are taken like a person's; other bots
    /// and the bot itself are ignored.
    pub allowed_bots: Vec<String>,
    /// In channels, answer only when mentioned.
    pub require_mention: bool,
    /// Toolsets for Slack sessions; unset means `gateway-slack`.
    pub toolsets: Option<Vec<String>>,
    /// Stream answers here; unset: `[chat] stream`.
    pub stream: Option<bool>,
    /// Tool progress here; unset: `[chat] progress`.
    pub progress: Option<super::Progress>,
}

impl Default for SlackConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            mode: SlackMode::Socket,
            bot_token_env: "SLACK_BOT_TOKEN".into(),
            app_token_env: "SLACK_APP_TOKEN".into(),
            signing_secret_env: "SLACK_SIGNING_SECRET".into(),
            api_url: "https://slack.com/api".into(),
            allowed_users: Vec::new(),
            allowed_channels: Vec::new(),
            allowed_bots: Vec::new(),
            require_mention: true,
            open: false,
            toolsets: None,
            stream: None,
            progress: None,
        }
    }
}

/// How Slack events reach the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SlackMode {
    /// Socket Mode websocket, opened with the app-level token.
    Socket,
    /// HTTP Events API, verified with the signing secret.
    Events,
}

/// `[webhook]`: the webhook receiver.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhookConfig {
    /// Whether the webhook routes are mounted.
    pub enabled: bool,
    /// How long a delivery's body is remembered: within this many days
    /// the same body on the same route is a duplicate, whatever its
    /// delivery id (GitHub, GitLab and `hmac` sign the body alone).
    pub replay_window_days: u32,
    /// One entry per endpoint (`[[webhook.routes]]`).
    pub routes: Vec<WebhookRoute>,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            replay_window_days: 7,
            routes: Vec::new(),
        }
    }
}

/// `[[webhook.routes]]`: one webhook endpoint.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookRoute {
    /// Unique route name, used in session keys and `switchboard webhook test`.
    pub name: String,
    /// URL path, e.g. `/webhooks/github`.
    pub path: String,
    /// Signature scheme: `github`, `gitlab`, `hmac` or `standard-webhooks`.
    pub scheme: SignatureScheme,
    /// Environment variable holding the shared secret.
    #[serde(default)]
    pub secret_env: Option<String>,
    /// Header carrying the hex HMAC-SHA256 signature (`hmac` scheme only).
    #[serde(default)]
    pub signature_header: Option<String>,
    /// Accept unsigned requests; allowed only when `server.listen` is a
    /// loopback address.
    #[serde(default)]
    pub insecure: bool,
    /// Event filter, `event` or `event.action` (e.g. `pull_request.opened`).
    #[serde(default)]
    pub events: Vec<String>,
    /// Field conditions on the payload, all of which must hold: a dot path
    /// and the values it may have, e.g. `"workflow_run.conclusion" =
    /// ["failure", "timed_out"]`.
    #[serde(default)]
    pub when: BTreeMap<String, Vec<String>>,
    /// Prompt template with `{dot.path}` lookups into the payload.
    #[serde(default)]
    pub prompt: Option<String>,
    /// The bot's login: `issue_comment` events run only when they mention
    /// `@<bot_login>`, and its own comments are ignored.
    #[serde(default)]
    pub bot_login: Option<String>,
    /// Requests accepted per minute on this route; beyond it 429 with
    /// Retry-After.
    #[serde(default = "default_rate_limit")]
    pub rate_limit_per_minute: u32,
    /// How events become sessions: `entity` (one conversation per pull
    /// request or pipeline, default) or `event` (one per delivery).
    #[serde(default)]
    pub group_by: GroupBy,
    /// Ask for approvals on the pull request itself (a comment with the
    /// approval id), answered by `/approve <id>` or `/deny <id>` comments
    /// from `approvers`.
    #[serde(default)]
    pub approval_comments: bool,
    /// GitHub logins whose `/approve` and `/deny` comments count.
    #[serde(default)]
    pub approvers: Vec<String>,
    /// Toolsets for this route's sessions; unset means `gateway-webhook`.
    #[serde(default)]
    pub toolsets: Option<Vec<String>>,
    /// Where the agent's answer goes.
    #[serde(default)]
    pub deliver: DeliverConfig,
    /// Review pull requests and triage CI on the forge the events come
    /// from: the `forge_*` read tools, inline reviews, a check run. The
    /// answer is then posted there, whatever `deliver` says.
    #[serde(default)]
    pub forge: Option<super::ForgeConfig>,
}

fn default_rate_limit() -> u32 {
    120
}

/// How webhook events are grouped into sessions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupBy {
    /// One session per pull request, issue or pipeline.
    #[default]
    Entity,
    /// One session per delivery.
    Event,
}

/// How a webhook request is authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SignatureScheme {
    /// `X-Hub-Signature-256: sha256=<hex HMAC>`.
    Github,
    /// `X-Gitlab-Token: <secret>`.
    Gitlab,
    /// A configurable header with a hex HMAC-SHA256 of the body.
    Hmac,
    /// Standard Webhooks / Svix: `webhook-id`, `webhook-timestamp`,
    /// `webhook-signature`.
    StandardWebhooks,
}

impl SignatureScheme {
    /// The platform the logins of a route's comments are on: `gitlab` for
    /// GitLab's scheme, else `github`.
    pub fn login_platform(self) -> &'static str {
        match self {
            SignatureScheme::Gitlab => "gitlab",
            _ => "github",
        }
    }
}

/// `[webhook.routes.deliver]`: where a webhook run's answer goes.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeliverConfig {
    /// `github_comment`, `chat` or `log`.
    pub kind: DeliverKind,
    /// GitHub REST API base URL (`github_comment`).
    pub api_url: String,
    /// Environment variable holding the GitHub token (`github_comment`).
    pub token_env: String,
    /// Platform of the chat target (`chat`).
    pub platform: Option<String>,
    /// Chat or channel id (`chat`).
    pub chat: Option<String>,
}

impl Default for DeliverConfig {
    fn default() -> Self {
        Self {
            kind: DeliverKind::Log,
            api_url: "https://api.github.com".into(),
            token_env: "GITHUB_TOKEN".into(),
            platform: None,
            chat: None,
        }
    }
}

/// Delivery target kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliverKind {
    /// A comment on the pull request or issue, through the GitHub REST API.
    GithubComment,
    /// A message in a chat on a connected platform.
    Chat,
    /// Only the log.
    Log,
}

/// `[mcp]`: MCP tool servers.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// One entry per server (`[[mcp.servers]]`).
    pub servers: Vec<McpServerConfig>,
}

/// `[[mcp.servers]]`: one MCP server, stdio (`command`) or HTTP (`url`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Server name; its tools join toolset `mcp-<name>`.
    pub name: String,
    /// Program to start for a stdio server.
    #[serde(default)]
    pub command: Option<String>,
    /// Arguments of `command`.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment of `command`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Streamable HTTP endpoint of a remote server.
    #[serde(default)]
    pub url: Option<String>,
    /// HTTP headers sent to a `url` server, each value the name of the
    /// environment variable that holds the header's value (a bearer
    /// token: `Authorization = "MY_MCP_AUTH"` with
    /// `MY_MCP_AUTH="Bearer …"`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Time limit of one tool call on this server, in seconds.
    #[serde(default = "default_mcp_timeout")]
    pub timeout_secs: u64,
}

fn default_mcp_timeout() -> u64 {
    60
}
