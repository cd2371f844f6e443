//! Reading `gateway.toml` and the `SWITCHBOARD_<SECTION>__<KEY>` overrides.

use std::path::{Path, PathBuf};

use config::{Environment, File, FileFormat};

use super::Env;
use super::validate::Problem;
use super::{Config, validate};

/// Keys whose environment override is a comma-separated list.
const LIST_KEYS: &[&str] = &[
    "approvals.approvers",
    "telegram.allowed_users",
    "telegram.toolsets",
    "discord.allowed_users",
    "discord.allowed_roles",
    "discord.allowed_channels",
    "discord.allowed_bots",
    "discord.toolsets",
    "slack.allowed_users",
    "slack.allowed_channels",
    "slack.allowed_bots",
    "slack.toolsets",
];

/// Why a configuration could not be used. Each problem renders as one line
/// that names the key and the reason.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file named with `--config` does not exist or cannot be read.
    #[error("{}: cannot read config file: {reason}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What the OS or the parser said.
        reason: String,
    },
    /// The file or an override does not fit the schema, or fails a check.
    #[error("{}", render(.0))]
    Invalid(Vec<Problem>),
}

fn render(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where the configuration came from, for the start-up log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// A file on disk.
    File(PathBuf),
    /// No file at the default path: the built-in defaults.
    Defaults,
}

/// Loads and validates the configuration.
///
/// `explicit` is the `--config` argument: a file named there must exist.
/// Without it `./gateway.toml` is used when present and the built-in
/// defaults otherwise.
pub fn load(explicit: Option<&Path>, env: &Env) -> Result<(Config, ConfigSource), ConfigError> {
    load_scoped(explicit, env, |_| true)
}

/// [`load`] for a command that reads storage alone (`cluster status`):
/// only the `[storage]` and `[cluster]` keys are checked, so it runs
/// without the secrets the daemon's other parts name.
pub fn load_storage(
    explicit: Option<&Path>,
    env: &Env,
) -> Result<(Config, ConfigSource), ConfigError> {
    load_scoped(explicit, env, |p| {
        p.key.is_empty() || p.key.starts_with("storage.") || p.key.starts_with("cluster.")
    })
}

fn load_scoped(
    explicit: Option<&Path>,
    env: &Env,
    checked: fn(&Problem) -> bool,
) -> Result<(Config, ConfigSource), ConfigError> {
    let (text, source) = match explicit {
        Some(path) => (read(path)?, ConfigSource::File(path.to_path_buf())),
        None => {
            let path = Path::new("gateway.toml");
            if path.exists() {
                (read(path)?, ConfigSource::File(path.to_path_buf()))
            } else {
                (String::new(), ConfigSource::Defaults)
            }
        }
    };
    let mut config = parse(&text, env, checked).map_err(|err| match (err, &source) {
        (ConfigError::Invalid(problems), ConfigSource::File(path)) => {
            ConfigError::Invalid(problems.into_iter().map(|p| p.in_file(path)).collect())
        }
        (err, _) => err,
    })?;
    if let ConfigSource::File(path) = &source {
        config.file = Some(std::path::absolute(path).unwrap_or_else(|_| path.clone()));
    }
    Ok((config, source))
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|err| ConfigError::Unreadable {
        path: path.to_path_buf(),
        reason: err.to_string(),
    })
}

/// Parses TOML text, applies the environment overrides found in `env`, and
/// validates the result against `env` (for the secrets it names).
pub fn load_from_str(toml: &str, env: &Env) -> Result<Config, ConfigError> {
    parse(toml, env, |_| true)
}

/// [`load_from_str`] keeping only the problems `checked` accepts.
fn parse(toml: &str, env: &Env, checked: fn(&Problem) -> bool) -> Result<Config, ConfigError> {
    let mut overrides = Environment::with_prefix("SWITCHBOARD")
        .prefix_separator("_")
        .separator("__")
        .try_parsing(true)
        .list_separator(",")
        .source(Some(env.overrides("SWITCHBOARD_")));
    for key in LIST_KEYS {
        overrides = overrides.with_list_parse_key(key);
    }
    let merged = config::Config::builder()
        .add_source(File::from_str(toml, FileFormat::Toml))
        .add_source(overrides)
        .build()
        .map_err(|err| ConfigError::Invalid(vec![Problem::syntax(err.to_string())]))?;
    let config: Config = merged.try_deserialize().map_err(|err| {
        let key = error_key(&err);
        let mut reason = explain_enum(&strip_key_suffix(&err.to_string()));
        let var = format!("SWITCHBOARD_{}", key.to_uppercase().replace('.', "__"));
        if env.get(&var).is_some() {
            reason.push_str(&format!(" (set by {var})"));
        }
        ConfigError::Invalid(vec![Problem::new(key, reason)])
    })?;
    let problems: Vec<Problem> = validate(&config, env).into_iter().filter(checked).collect();
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(ConfigError::Invalid(problems))
    }
}

/// The key a deserialization error is about, as the `config` crate
/// tracks it while it walks the tables (`webhook.routes[0].path`); `.`
/// when it names none (the top level).
fn error_key(err: &config::ConfigError) -> String {
    use config::ConfigError as E;
    let key = match err {
        E::Type { key, .. } | E::At { key, .. } => key.clone(),
        E::NotFound(key) => Some(key.clone()),
        _ => None,
    };
    let key = key.filter(|k| !k.is_empty());
    // An unknown key is named by its own path, not its table's.
    let message = err.to_string();
    let unknown = message
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(name, _)| name);
    match (key, unknown) {
        (Some(table), Some(name)) => format!("{table}.{name}"),
        (None, Some(name)) => name.to_string(),
        (Some(key), None) => key,
        (None, None) => ".".into(),
    }
}

/// The `config` crate appends " for key `x`" or "in <origin>" to messages;
/// the key is already in front of ours.
fn strip_key_suffix(message: &str) -> String {
    let cut = [" for key `", " in the environment", " for key \""]
        .iter()
        .filter_map(|marker| message.find(marker))
        .min()
        .unwrap_or(message.len());
    message[..cut].trim().to_string()
}

/// The `config` crate words a bad enum value as "enum X does not have
/// variant constructor v"; say it the serde way, with the accepted values.
fn explain_enum(message: &str) -> String {
    let Some((head, value)) = message.split_once(" does not have variant constructor ") else {
        return message.to_string();
    };
    let accepted = match head.trim_start_matches("enum ") {
        "ApprovalMode" => accepted::<super::ApprovalMode>(),
        "BusyInputMode" => accepted::<super::BusyInputMode>(),
        "LlmProvider" => accepted::<super::LlmProvider>(),
        "LogFormat" => accepted::<super::LogFormat>(),
        "TelegramMode" => accepted::<super::TelegramMode>(),
        "SlackMode" => accepted::<super::SlackMode>(),
        "SignatureScheme" => accepted::<super::SignatureScheme>(),
        "DeliverKind" => accepted::<super::DeliverKind>(),
        _ => String::new(),
    };
    format!("unknown variant `{value}`{accepted}")
}

/// ", expected one of `a`, `b`" for a unit-variant enum, as serde says it.
fn accepted<T: serde::de::DeserializeOwned>() -> String {
    match serde_json::from_str::<T>("\"\"") {
        Err(err) => {
            let text = err.to_string();
            text.find(", expected")
                .map(|at| {
                    text[at..]
                        .split(" at line")
                        .next()
                        .unwrap_or_default()
                        .to_string()
                })
                .unwrap_or_default()
        }
        Ok(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::{explain_enum, strip_key_suffix};

    #[test]
    fn enum_errors_list_the_accepted_values() {
        assert_eq!(
            explain_enum("enum SlackMode does not have variant constructor sockets"),
            "unknown variant `sockets`, expected `socket` or `events`"
        );
        assert_eq!(explain_enum("something else"), "something else");
    }

    #[test]
    fn key_suffixes_are_stripped() {
        assert_eq!(
            strip_key_suffix("invalid type: string \"x\", expected u64 for key `server.a`"),
            "invalid type: string \"x\", expected u64"
        );
    }
}
