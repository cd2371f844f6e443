//! Checks that a well-typed configuration is also usable: URLs parse,
//! secrets named for enabled components are present, routes make sense.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use super::Env;
use super::identity;
use super::{Config, DeliverKind, SignatureScheme, SlackMode, TelegramMode};

mod forge;

/// One thing wrong with the configuration: the key and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted key, e.g. `telegram.token_env`; empty for file-level errors.
    pub key: String,
    /// Why the value cannot be used.
    pub reason: String,
    file: Option<PathBuf>,
}

impl Problem {
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            reason: reason.into(),
            file: None,
        }
    }

    /// A parse error of the whole file, folded onto one line.
    pub(super) fn syntax(message: String) -> Self {
        let lines: Vec<&str> = message
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('|') && !l.contains(" | "))
            .collect();
        let reason = match lines.as_slice() {
            [] => message.clone(),
            [one] => (*one).to_string(),
            [first, .., last] => format!("{first}: {last}"),
        };
        Self::new("", reason)
    }

    pub fn in_file(mut self, path: &Path) -> Self {
        self.file = Some(path.to_path_buf());
        self
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}: ", file.display())?;
        }
        if self.key.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.key, self.reason)
        }
    }
}

/// Whether a component will start, and why (or why not).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ComponentStatus {
    /// `telegram`, `discord`, `slack` or `webhook`.
    pub name: &'static str,
    /// True when the component starts with this configuration.
    pub enabled: bool,
    /// A short explanation.
    pub detail: String,
}

/// The adapters this binary was built with.
pub const COMPILED_ADAPTERS: &[(&str, bool)] = &[
    ("telegram", cfg!(feature = "telegram")),
    ("discord", cfg!(feature = "discord")),
    ("slack", cfg!(feature = "slack")),
    ("webhook", cfg!(feature = "webhook")),
];

fn compiled(name: &str) -> bool {
    COMPILED_ADAPTERS.iter().any(|(n, on)| *n == name && *on)
}

/// What each adapter will do with this configuration.
pub fn component_statuses(config: &Config) -> Vec<ComponentStatus> {
    let enabled = [
        ("telegram", config.telegram.enabled, mode_telegram(config)),
        ("discord", config.discord.enabled, "gateway".to_string()),
        ("slack", config.slack.enabled, mode_slack(config)),
        (
            "webhook",
            config.webhook.enabled,
            format!("{} route(s)", config.webhook.routes.len()),
        ),
    ];
    enabled
        .into_iter()
        .map(|(name, on, detail)| {
            let (enabled, detail) = if !compiled(name) {
                (false, format!("not built in (cargo feature `{name}`)"))
            } else if on {
                (true, detail)
            } else {
                (false, format!("{name}.enabled = false"))
            };
            ComponentStatus {
                name,
                enabled,
                detail,
            }
        })
        .collect()
}

fn mode_telegram(config: &Config) -> String {
    match config.telegram.mode {
        TelegramMode::Polling => "long polling".into(),
        TelegramMode::Webhook => "webhook".into(),
    }
}

fn mode_slack(config: &Config) -> String {
    match config.slack.mode {
        SlackMode::Socket => "socket mode".into(),
        SlackMode::Events => "events api".into(),
    }
}

/// Paths the gateway serves itself; webhook routes may not take them.
pub const RESERVED_PATHS: &[&str] = &[
    "/healthz",
    "/readyz",
    "/metrics",
    "/telegram/webhook",
    "/slack/events",
    "/slack/interactivity",
];

/// The smallest request head limit that still fits the platforms' own
/// requests (Slack's and GitHub's signature headers, a browser's cookies).
const MIN_HEADER_BYTES: usize = 1024;

/// Collects every problem of a typed configuration.
pub fn validate(config: &Config, env: &Env) -> Vec<Problem> {
    let mut v = Validator {
        env,
        problems: Vec::new(),
    };
    v.server(config);
    v.storage(config);
    v.log(config);
    v.llm(config);
    v.approvals(config);
    v.sessions(config);
    v.telegram(config);
    v.discord(config);
    v.slack(config);
    v.webhook(config);
    v.mcp(config);
    v.transcription(config);
    v.cron(config);
    v.console(config);
    v.budgets(config);
    v.problems
}

struct Validator<'a> {
    env: &'a Env,
    problems: Vec<Problem>,
}

impl Validator<'_> {
    fn push(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.problems.push(Problem::new(key, reason));
    }

    fn url(&mut self, key: &str, value: &str) {
        match url::Url::parse(value) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            Ok(u) => self.push(
                key,
                format!("{value:?} is not an http(s) URL (scheme `{}`)", u.scheme()),
            ),
            Err(err) => self.push(key, format!("{value:?} is not a valid URL: {err}")),
        }
    }

    fn secret(&mut self, key: &str, var: &str, because: &str) {
        if var.trim().is_empty() {
            self.push(
                key,
                format!("must name an environment variable (required because {because})"),
            );
        } else if self.env.get(var).is_none() {
            self.push(
                key,
                format!("environment variable {var} is not set (required because {because})"),
            );
        }
    }

    /// [`secret`](Self::secret), and the value at least `min` bytes long
    /// once trimmed (a one-space or short secret is guessed or forged).
    fn strong_secret(&mut self, key: &str, var: &str, because: &str, min: usize) {
        self.secret(key, var, because);
        if let Some(value) = self.env.get(var)
            && value.trim().len() < min
        {
            self.push(
                key,
                format!(
                    "{var} holds {} bytes; a secret needs at least {min} (e.g. `openssl rand -hex 32`)",
                    value.trim().len()
                ),
            );
        }
    }

    fn transcription(&mut self, c: &Config) {
        let t = &c.transcription;
        if t.base_url.is_empty() {
            return;
        }
        self.url("transcription.base_url", &t.base_url);
        if t.model.trim().is_empty() {
            self.push("transcription.model", "must name a model");
        }
        self.positive("transcription.max_bytes", t.max_bytes);
        self.positive("transcription.max_seconds", u64::from(t.max_seconds));
        self.positive("transcription.timeout_secs", t.timeout_secs);
    }

    fn cron(&mut self, c: &Config) {
        let mut names = std::collections::BTreeSet::new();
        for (i, job) in c.cron.jobs.iter().enumerate() {
            let key = |field: &str| format!("cron.jobs[{i}].{field}");
            let name = job.name.trim();
            if name.is_empty() {
                self.push(key("name"), "every job needs a name");
            } else if !names.insert(name) {
                self.push(key("name"), format!("{name:?} names two jobs"));
            }
            if let Err(err) = crate::cron::Schedule::parse(&job.schedule, &job.timezone) {
                let field = if err.to_string().contains("time zone") {
                    "timezone"
                } else {
                    "schedule"
                };
                self.push(key(field), err.to_string());
            }
            if job.prompt.trim().is_empty() {
                self.push(key("prompt"), "say what the job asks the agent");
            }
            if !matches!(job.platform.trim(), "telegram" | "discord" | "slack") {
                self.push(
                    key("platform"),
                    format!("{:?} is not telegram, discord or slack", job.platform),
                );
            }
            if job.chat.trim().is_empty() {
                self.push(key("chat"), "name the chat the job posts to");
            }
        }
    }

    fn console(&mut self, c: &Config) {
        let console = &c.console;
        if !console.enabled {
            return;
        }
        self.strong_secret(
            "console.token_env",
            &console.token_env,
            "console.enabled = true",
            32,
        );
        if console.listen == c.server.listen && console.listen.port() != 0 {
            self.push(
                "console.listen",
                "must differ from server.listen: the console is never served on the webhook port",
            );
        }
        self.positive("console.session_hours", console.session_hours);
    }

    fn budgets(&mut self, c: &Config) {
        let b = &c.budgets;
        for (model, price) in &b.prices {
            let fine = |p: f64| p.is_finite() && p >= 0.0;
            if ![price.input, price.output]
                .into_iter()
                .chain(price.cache_read)
                .chain(price.cache_write)
                .all(fine)
            {
                self.push(
                    format!("budgets.prices.{model}"),
                    "input, output, cache_read and cache_write are prices per million tokens, 0 or more",
                );
            }
        }
        if !(1..=100).contains(&b.warn_percent) {
            self.push("budgets.warn_percent", "must be between 1 and 100");
        }
        let mut cost_capped = false;
        for (level, caps) in [
            ("user", &b.user),
            ("chat", &b.chat),
            ("route", &b.route),
            ("job", &b.job),
        ] {
            for (field, value) in [
                ("daily_cost", caps.daily_cost),
                ("monthly_cost", caps.monthly_cost),
            ] {
                if !value.is_finite() || value < 0.0 {
                    self.push(
                        format!("budgets.{level}.{field}"),
                        "must be 0 (no cap) or more",
                    );
                }
                cost_capped |= value > 0.0;
            }
        }
        if cost_capped {
            let models = std::iter::once(&c.llm.model)
                .chain(c.llm.models.iter())
                .chain(c.llm.model_by_platform.values())
                .chain(c.llm.model_by_chat.values())
                .chain(c.llm.model_by_user.values())
                .chain(c.llm.fallback.iter().filter_map(|f| f.model.as_ref()));
            let unpriced: std::collections::BTreeSet<&str> = models
                .filter(|m| !b.prices.contains_key(m.as_str()))
                .map(String::as_str)
                .collect();
            if !unpriced.is_empty() {
                self.push(
                    "budgets.prices",
                    format!(
                        "cost caps are set but these models have no price, so their turns would cost nothing: {}",
                        unpriced.into_iter().collect::<Vec<_>>().join(", ")
                    ),
                );
            }
        }
    }

    fn positive(&mut self, key: &str, value: u64) {
        if value == 0 {
            self.push(key, "must be greater than 0");
        }
    }

    fn adapter_built(&mut self, name: &str, enabled: bool) {
        if enabled && !compiled(name) {
            self.push(
                format!("{name}.enabled"),
                format!("this binary was built without the `{name}` cargo feature"),
            );
        }
    }

    fn server(&mut self, c: &Config) {
        if !c.server.public_url.is_empty() {
            self.url("server.public_url", &c.server.public_url);
        }
        self.positive("server.max_body_bytes", c.server.max_body_bytes as u64);
        self.positive("server.request_timeout_secs", c.server.request_timeout_secs);
        self.positive("server.max_connections", c.server.max_connections as u64);
        self.positive(
            "server.header_read_timeout_secs",
            c.server.header_read_timeout_secs,
        );
        self.positive("server.max_headers", c.server.max_headers as u64);
        if c.server.max_header_bytes < MIN_HEADER_BYTES {
            self.push(
                "server.max_header_bytes",
                format!("must be at least {MIN_HEADER_BYTES}"),
            );
        }
    }

    fn storage(&mut self, c: &Config) {
        let url = &c.storage.url;
        let ok = match url.split_once(':') {
            Some(("sqlite", rest)) => !rest.trim_start_matches('/').is_empty(),
            Some(("postgres" | "postgresql", _)) => url::Url::parse(url).is_ok(),
            _ => false,
        };
        if !ok {
            self.push(
                "storage.url",
                format!(
                    "{:?} is neither sqlite://PATH nor postgres://USER@HOST/DB",
                    super::redact_url(url)
                ),
            );
        }
        self.positive("storage.max_connections", c.storage.max_connections.into());
        if c.cluster.lease_secs < 3 {
            self.push(
                "cluster.lease_secs",
                "must be at least 3 (a lease is renewed every third of it)",
            );
        }
    }

    fn log(&mut self, c: &Config) {
        if let Err(err) = tracing_subscriber::EnvFilter::try_new(&c.log.level) {
            self.push(
                "log.level",
                format!("{:?} is not a valid filter: {err}", c.log.level),
            );
        }
    }

    fn llm(&mut self, c: &Config) {
        self.url("llm.base_url", &c.llm.base_url);
        if c.llm.model.trim().is_empty() {
            self.push("llm.model", "must not be empty");
        }
        self.positive("llm.request_timeout_secs", c.llm.request_timeout_secs);
        self.positive("llm.max_tokens", c.llm.max_tokens.into());
        self.positive("llm.context_window", c.llm.context_window.into());
        if let Some(base) = &c.llm.auxiliary.base_url {
            self.url("llm.auxiliary.base_url", base);
        }
        for (i, fallback) in c.llm.fallback.iter().enumerate() {
            if fallback
                .model
                .as_deref()
                .is_none_or(|m| m.trim().is_empty())
            {
                self.push(
                    format!("llm.fallback[{i}].model"),
                    "name the fallback's model",
                );
            }
            if let Some(base) = &fallback.base_url {
                self.url(&format!("llm.fallback[{i}].base_url"), base);
            }
        }
        if c.llm
            .models
            .iter()
            .any(|m| m.trim().is_empty() || m.contains(char::is_whitespace))
        {
            self.push("llm.models", "model names must be non-empty single words");
        }
        for (table, map) in [
            ("llm.model_by_chat", &c.llm.model_by_chat),
            ("llm.model_by_user", &c.llm.model_by_user),
        ] {
            for key in map.keys() {
                let valid = key
                    .split_once(':')
                    .is_some_and(|(p, id)| !p.is_empty() && !id.is_empty());
                if !valid {
                    self.push(
                        format!("{table}.{key}"),
                        "keys are platform:id, e.g. \"telegram:42\"",
                    );
                }
            }
        }
        let needs_model =
            c.telegram.enabled || c.discord.enabled || c.slack.enabled || c.webhook.enabled;
        if needs_model && !c.llm.api_key_env.is_empty() {
            self.secret(
                "llm.api_key_env",
                &c.llm.api_key_env,
                "an adapter is enabled; set api_key_env = \"\" for a keyless endpoint",
            );
        }
    }

    fn approvals(&mut self, c: &Config) {
        for (i, approver) in c.approvals.approvers.iter().enumerate() {
            if let Err(why) = identity::check(approver, None) {
                self.push(format!("approvals.approvers[{i}]"), why);
            }
        }
        if let Some(target) = &c.approvals.route_to {
            if !matches!(target.platform.as_str(), "telegram" | "discord" | "slack") {
                self.push(
                    "approvals.route_to.platform",
                    format!(
                        "{:?} is not one of telegram, discord, slack",
                        target.platform
                    ),
                );
            }
            if target.chat.trim().is_empty() {
                self.push("approvals.route_to.chat", "must not be empty");
            }
        }
    }

    fn sessions(&mut self, c: &Config) {
        let s = &c.sessions;
        if s.queue_cap == 0 {
            self.push("sessions.queue_cap", "must be at least 1");
        }
        if s.max_pending == 0 {
            self.push("sessions.max_pending", "must be at least 1");
        }
        let policies = std::iter::once(("sessions.reset".to_string(), s.reset)).chain(
            s.reset_by_platform
                .iter()
                .map(|(p, r)| (format!("sessions.reset_by_platform.{p}"), *r)),
        );
        for (key, policy) in policies {
            if policy.daily_hour > 23 {
                self.push(format!("{key}.daily_hour"), "must be an hour from 0 to 23");
            }
            if policy.idle_minutes == 0 {
                self.push(format!("{key}.idle_minutes"), "must be at least 1");
            }
        }
        for platform in s.reset_by_platform.keys() {
            if !matches!(
                platform.as_str(),
                "telegram" | "discord" | "slack" | "webhook" | "cli"
            ) {
                self.push(
                    format!("sessions.reset_by_platform.{platform}"),
                    "not one of telegram, discord, slack, webhook, cli",
                );
            }
        }
    }

    fn telegram(&mut self, c: &Config) {
        let t = &c.telegram;
        self.url("telegram.api_url", &t.api_url);
        self.adapter_built("telegram", t.enabled);
        if !t.enabled {
            return;
        }
        self.secret(
            "telegram.token_env",
            &t.token_env,
            "telegram.enabled = true",
        );
        if t.mode == TelegramMode::Webhook {
            if c.server.public_url.is_empty() {
                self.push(
                    "server.public_url",
                    "must be set when telegram.mode = \"webhook\"",
                );
            }
            let key = "telegram.webhook_secret_env";
            self.strong_secret(
                key,
                &t.webhook_secret_env,
                "telegram.mode = \"webhook\"",
                16,
            );
            // Telegram takes 1–256 of these characters, and refuses the
            // webhook otherwise.
            if let Some(value) = self.env.get(&t.webhook_secret_env)
                && (value.len() > 256
                    || !value
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-')))
            {
                self.push(
                    key,
                    format!(
                        "{} must be at most 256 characters of A-Z, a-z, 0-9, _ and - (Telegram refuses others)",
                        t.webhook_secret_env
                    ),
                );
            }
        }
    }

    fn discord(&mut self, c: &Config) {
        let d = &c.discord;
        self.url("discord.api_url", &d.api_url);
        for (key, ids) in [
            ("discord.allowed_users", &d.allowed_users),
            ("discord.allowed_roles", &d.allowed_roles),
            ("discord.allowed_channels", &d.allowed_channels),
            ("discord.allowed_bots", &d.allowed_bots),
        ] {
            if let Some(bad) = ids.iter().find(|id| {
                id.is_empty() || id.len() > 20 || !id.bytes().all(|b| b.is_ascii_digit())
            }) {
                self.push(
                    key,
                    format!("{bad:?} is not a snowflake id (digits, as Discord's developer mode copies them)"),
                );
            }
        }
        self.adapter_built("discord", d.enabled);
        if d.enabled {
            self.secret("discord.token_env", &d.token_env, "discord.enabled = true");
        }
    }

    fn slack(&mut self, c: &Config) {
        let s = &c.slack;
        self.url("slack.api_url", &s.api_url);
        self.adapter_built("slack", s.enabled);
        if !s.enabled {
            return;
        }
        self.secret(
            "slack.bot_token_env",
            &s.bot_token_env,
            "slack.enabled = true",
        );
        match s.mode {
            SlackMode::Socket => self.secret(
                "slack.app_token_env",
                &s.app_token_env,
                "slack.mode = \"socket\"",
            ),
            SlackMode::Events => self.secret(
                "slack.signing_secret_env",
                &s.signing_secret_env,
                "slack.mode = \"events\"",
            ),
        }
    }

    fn webhook(&mut self, c: &Config) {
        self.adapter_built("webhook", c.webhook.enabled);
        self.positive(
            "webhook.replay_window_days",
            c.webhook.replay_window_days.into(),
        );
        let mut names = HashSet::new();
        let mut paths = HashSet::new();
        for (i, route) in c.webhook.routes.iter().enumerate() {
            let key = |field: &str| format!("webhook.routes[{i}].{field}");
            if route.name.trim().is_empty() {
                self.push(key("name"), "must not be empty");
            } else if !names.insert(route.name.as_str()) {
                self.push(
                    key("name"),
                    format!("duplicate route name {:?}", route.name),
                );
            }
            if !route.path.starts_with('/') || route.path.contains(char::is_whitespace) {
                self.push(
                    key("path"),
                    format!("{:?} must start with / and hold no spaces", route.path),
                );
            } else if !paths.insert(route.path.as_str()) {
                self.push(
                    key("path"),
                    format!("duplicate route path {:?}", route.path),
                );
            } else if RESERVED_PATHS.contains(&route.path.as_str()) {
                self.push(
                    key("path"),
                    format!("{:?} is reserved by the gateway", route.path),
                );
            }
            if route.rate_limit_per_minute == 0 {
                self.push(key("rate_limit_per_minute"), "must be at least 1");
            }
            if route.approval_comments && route.deliver.kind != DeliverKind::GithubComment {
                self.push(
                    key("approval_comments"),
                    "needs deliver.kind = \"github_comment\" (the prompt is a PR comment)",
                );
            }
            let platform = route.scheme.login_platform();
            for (j, approver) in route.approvers.iter().enumerate() {
                if let Err(why) = identity::check(approver, Some(platform)) {
                    self.push(key(&format!("approvers[{j}]")), why);
                }
            }
            if let Some(forge) = &route.forge {
                for (j, login) in forge.commands_from.iter().enumerate() {
                    if let Err(why) = identity::check(login, Some(platform)) {
                        self.push(key(&format!("forge.commands_from[{j}]")), why);
                    }
                }
            }
            if route.approval_comments && route.approvers.is_empty() {
                self.push(
                    key("approvers"),
                    "approval_comments needs at least one GitHub login",
                );
            }
            if route.scheme == SignatureScheme::Hmac && route.signature_header.is_none() {
                self.push(key("signature_header"), "required when scheme = \"hmac\"");
            }
            if route.deliver.kind == DeliverKind::GithubComment {
                self.url(&key("deliver.api_url"), &route.deliver.api_url);
            }
            if route.deliver.kind == DeliverKind::Chat
                && (route.deliver.platform.is_none() || route.deliver.chat.is_none())
            {
                self.push(key("deliver"), "kind = \"chat\" needs platform and chat");
            }
            if let Some(forge) = &route.forge {
                self.forge(&key, route, forge, c.webhook.enabled);
            }
            if !c.webhook.enabled {
                continue;
            }
            match &route.secret_env {
                Some(var) => {
                    self.strong_secret(&key("secret_env"), var, "webhook.enabled = true", 16)
                }
                None if route.insecure && c.server.listen.ip().is_loopback() => {}
                None if route.insecure => self.push(
                    key("insecure"),
                    "unsigned routes are allowed only when server.listen is a loopback address",
                ),
                None => self.push(
                    key("secret_env"),
                    "a route without a secret must set insecure = true and listen on loopback",
                ),
            }
            if route.deliver.kind == DeliverKind::GithubComment {
                self.secret(
                    &key("deliver.token_env"),
                    &route.deliver.token_env,
                    "deliver.kind = \"github_comment\"",
                );
            }
        }
    }

    fn mcp(&mut self, c: &Config) {
        let mut names = HashSet::new();
        for (i, server) in c.mcp.servers.iter().enumerate() {
            let key = |field: &str| format!("mcp.servers[{i}].{field}");
            let valid_name = !server.name.is_empty()
                && server
                    .name
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_');
            if !valid_name {
                self.push(
                    key("name"),
                    format!("{:?} must be non-empty [A-Za-z0-9_-]", server.name),
                );
            } else if !names.insert(server.name.as_str()) {
                self.push(
                    key("name"),
                    format!("duplicate server name {:?}", server.name),
                );
            }
            match (&server.command, &server.url) {
                (Some(_), None) => {}
                (None, Some(url)) => self.url(&key("url"), url),
                _ => self.push(
                    key("command"),
                    "set exactly one of command (stdio) or url (HTTP)",
                ),
            }
            for (header, var) in &server.headers {
                let field = key(&format!("headers.{header}"));
                if server.url.is_none() {
                    self.push(field, "headers are sent to url servers only");
                } else if reqwest::header::HeaderName::from_bytes(header.as_bytes()).is_err() {
                    self.push(field, format!("{header:?} is not a valid HTTP header name"));
                } else if var.trim().is_empty() {
                    self.push(field, "name the environment variable that holds the value");
                }
            }
        }
    }
}
