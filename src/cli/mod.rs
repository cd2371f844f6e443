//! Command-line interface: parse arguments, load the configuration, run one
//! subcommand. Exit codes: 0 success, 1 runtime failure, 78 (EX_CONFIG) an
//! unusable configuration.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod approvals;
mod chat;
mod cluster;
mod cron;
mod pairing;
mod sessions;
mod tools;
#[cfg(feature = "webhook")]
mod webhook;

use crate::config::{self, Config, ConfigError, ConfigSource, Env, LogFormat, redact_url};
use crate::store::Store;

/// Exit code for an unusable configuration (sysexits' EX_CONFIG); the
/// systemd unit does not restart on it.
pub const EXIT_CONFIG: u8 = 78;

/// switchboard: a gateway between chat platforms, webhooks and tool-using
/// LLM agents.
#[derive(Debug, Parser)]
#[command(name = "switchboard", version, about, long_about = None)]
pub struct Cli {
    /// Configuration file [default: ./gateway.toml, or the built-in
    /// defaults when it does not exist].
    #[arg(long, short = 'c', global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Log format; overrides `log.format`.
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogFormat>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway daemon until SIGTERM or SIGINT.
    Run,
    /// Validate the configuration and show what would start.
    Check,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Talk to the agent at the terminal (approvals and questions asked
    /// here).
    Chat {
        /// Send this one message, print the answer, and exit.
        #[arg(long, value_name = "MESSAGE")]
        once: Option<String>,
        /// Who you are in the session key `cli:dm:<user>` [default: $USER].
        #[arg(long)]
        user: Option<String>,
    },
    /// Inspect and manage dangerous-command approvals.
    Approvals {
        /// What to do.
        #[command(subcommand)]
        command: approvals::ApprovalsCommand,
    },
    /// Manage pairing of unknown DM senders.
    Pairing {
        /// What to do.
        #[command(subcommand)]
        command: pairing::PairingCommand,
    },
    /// Replicas sharing the PostgreSQL database, and who holds what.
    Cluster {
        /// What to do.
        #[command(subcommand)]
        command: cluster::ClusterCommand,
    },
    /// Scheduled jobs and their runs (status and delivery).
    Cron {
        /// What to do.
        #[command(subcommand)]
        command: cron::CronCommand,
    },
    /// What turns cost today and this month, per user, chat, webhook
    /// route and job, against the budgets.
    Usage {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Inspect stored sessions.
    Sessions {
        /// What to do.
        #[command(subcommand)]
        command: sessions::SessionsCommand,
    },
    /// Send signed sample payloads to a running daemon.
    #[cfg(feature = "webhook")]
    Webhook {
        /// What to do.
        #[command(subcommand)]
        command: webhook::WebhookCommand,
    },
    /// Ask the running daemon whether it is alive (`GET /healthz`); exit 0
    /// when it answers, 1 otherwise. The container image's health check.
    Healthcheck {
        /// Base URL of the daemon [default: from `server.listen`].
        #[arg(long)]
        url: Option<String>,
    },
    /// List the tools with their toolset and availability.
    Tools {
        /// Only the tools a platform's sessions get (telegram, discord,
        /// slack, cli, webhook).
        #[arg(long)]
        platform: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the toolsets, or the resolved tools of one.
    Toolsets {
        /// A toolset name (aliases such as hermes-telegram accepted).
        name: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    protect_process();
    crate::http::client::install_crypto();
    let cli = Cli::parse();
    let env = Env::from_process();
    let loaded = match cli.command {
        // Reads the database alone: runs without the daemon's secrets.
        Command::Cluster { .. } => config::load_storage(cli.config.as_deref(), &env),
        _ => config::load(cli.config.as_deref(), &env).and_then(check_toolsets),
    };
    let config = match loaded {
        Ok(loaded) => loaded,
        Err(err) => return config_failure(&err),
    };
    let runtime = match cli.command {
        Command::Run => crate::runtime::build(),
        _ => crate::runtime::build_terminal(),
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(dispatch(cli, config, env));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            tracing::error!(error = %format!("{err:#}"), "exiting");
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Before anything is read or created: no core dumps, and no ptrace-class
/// access (`/proc/<pid>/environ`, `mem`) by other processes of the same
/// user; and what the process creates (data directory, database,
/// workspaces) is private to its user whatever umask it was started with.
fn protect_process() {
    if let Err(err) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("warning: cannot mark the process undumpable: {err}");
    }
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
}

/// Toolset names are checked against the platforms' presets, which the
/// adapters describe.
fn check_toolsets(
    (config, source): (Config, ConfigSource),
) -> Result<(Config, ConfigSource), ConfigError> {
    let problems = crate::adapters::check_toolsets(&config);
    if problems.is_empty() {
        return Ok((config, source));
    }
    Err(ConfigError::Invalid(match &source {
        ConfigSource::File(path) => problems.into_iter().map(|p| p.in_file(path)).collect(),
        ConfigSource::Defaults => problems,
    }))
}

fn config_failure(err: &ConfigError) -> ExitCode {
    for line in err.to_string().lines() {
        eprintln!("error: {line}");
    }
    ExitCode::from(EXIT_CONFIG)
}

async fn dispatch(
    cli: Cli,
    (config, source): (Config, ConfigSource),
    env: Env,
) -> anyhow::Result<u8> {
    let format = cli.log_format.unwrap_or(config.log.format);
    match cli.command {
        Command::Run => {
            crate::telemetry::init_logging(format, &config.log.level);
            match &source {
                ConfigSource::File(path) => {
                    tracing::info!(config.path = %path.display(), "configuration loaded");
                }
                ConfigSource::Defaults => {
                    tracing::warn!("no gateway.toml here; running on the built-in defaults");
                }
            }
            crate::adapters::install(crate::daemon::Daemon::new(config, env))
                .run()
                .await?;
            Ok(0)
        }
        Command::Check => {
            let lets_in = match config.storage_open_to_commands(Some(true)) {
                Some(_) => crate::store::postgres_lets_in_without_password(&config.storage.url)
                    .await
                    .ok(),
                None => None,
            };
            print!("{}", check_report(&config, &source, &env, lets_in));
            Ok(0)
        }
        Command::Chat { once, user } => {
            crate::telemetry::init_logging(format, "warn");
            let user = user
                .or_else(|| env.get("USER").map(str::to_string))
                .unwrap_or_else(|| "local".into());
            chat::chat(config, env, once, user).await?;
            Ok(0)
        }
        Command::Approvals { command } => approvals::run(&config, command).await,
        Command::Pairing { command } => pairing::run(&config, command).await,
        Command::Sessions { command } => sessions::run(&config, command).await,
        Command::Cluster { command } => cluster::run(&config, command).await,
        Command::Cron { command } => cron::run(&config, command).await,
        Command::Usage { json } => cron::usage(&config, json).await,
        #[cfg(feature = "webhook")]
        Command::Webhook { command } => webhook::run(&config, &env, command).await,
        Command::Healthcheck { url } => {
            let base = url.unwrap_or_else(|| local_base(&config));
            Ok(healthcheck(&base).await)
        }
        Command::Tools { platform, json } => {
            print!(
                "{}",
                tools::tools(&config, &env, platform.as_deref(), json).await?
            );
            Ok(0)
        }
        Command::Toolsets { name, json } => {
            print!("{}", tools::toolsets(&config, &env, name.as_deref(), json)?);
            Ok(0)
        }
        Command::Migrate => {
            crate::telemetry::init_logging(format, &config.log.level);
            let store = Store::connect(&config.storage).await?;
            let applied = store.migrate().await?;
            println!(
                "applied {applied} migration(s); schema version {} ({:?})",
                store.schema_version().await?,
                store.kind()
            );
            store.close().await;
            Ok(0)
        }
    }
}

/// The store a command at the terminal works on, migrated.
async fn open_store(config: &Config) -> crate::store::Result<Store> {
    Store::open(&config.storage).await
}

/// The text `switchboard check` prints for a valid configuration;
/// `storage_lets_in` is whether PostgreSQL storage let this host in
/// without a password, when that was tried.
pub fn check_report(
    config: &Config,
    source: &ConfigSource,
    env: &Env,
    storage_lets_in: Option<bool>,
) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let origin = match source {
        ConfigSource::File(path) => path.display().to_string(),
        ConfigSource::Defaults => "built-in defaults".into(),
    };
    let _ = writeln!(out, "config: {origin}: ok");
    let _ = writeln!(out, "storage: {}", redact_url(&config.storage.url));
    let _ = writeln!(out, "http: {}", config.server.listen);
    let _ = writeln!(
        out,
        "llm: {:?} {} at {}",
        config.llm.provider,
        config.llm.model,
        redact_url(&config.llm.base_url)
    );
    if config.console.enabled && !config.console.listen.ip().is_loopback() {
        let _ = writeln!(
            out,
            "warning: console.listen = {} is reachable beyond this machine; keep the console on loopback and reach it through an SSH tunnel or a TLS proxy",
            config.console.listen
        );
    }
    let _ = writeln!(out, "components:");
    for c in config::component_statuses(config) {
        let state = if c.enabled { "enabled" } else { "disabled" };
        let _ = writeln!(out, "  {:<9} {:<9} {}", c.name, state, c.detail);
    }
    let _ = writeln!(out, "tools:");
    match crate::tools::ToolRuntime::build(config, env, crate::adapters::platforms(config)) {
        Ok(runtime) => {
            let sandbox = runtime.processes.sandbox();
            if config.tools.terminal.backend == crate::config::TerminalBackend::Local {
                let _ = writeln!(out, "  sandbox: {}", sandbox.describe());
                if sandbox.is_off() {
                    let _ = writeln!(
                        out,
                        "  warning: terminal and process commands run unsandboxed with the daemon's rights ([tools.sandbox] mode = \"off\"); see docs/security.md"
                    );
                }
                if let Some(why) = config.storage_open_to_commands(storage_lets_in) {
                    let _ = writeln!(out, "  warning: {why}");
                }
                for why in sandbox.warnings(&config.agent.workspace) {
                    let _ = writeln!(out, "  warning: {why}");
                }
            }
            let open = [
                ("telegram", config.telegram.enabled && config.telegram.open),
                ("discord", config.discord.enabled && config.discord.open),
                ("slack", config.slack.enabled && config.slack.open),
            ];
            for (id, _) in open.iter().filter(|(_, open)| *open) {
                let Some(profile) = runtime.platforms.profile(id) else {
                    continue;
                };
                let risky: Vec<&str> = ["terminal", "process"]
                    .into_iter()
                    .filter(|tool| {
                        profile.toolsets.iter().any(|set| {
                            runtime
                                .toolsets
                                .resolve(set)
                                .is_ok_and(|tools| tools.contains(*tool))
                        })
                    })
                    .collect();
                if !risky.is_empty() {
                    let _ = writeln!(
                        out,
                        "  warning: {id}.open = true lets anyone who can message the bot use {}; list allowed users instead, or take those tools out of its toolsets",
                        risky.join(" and ")
                    );
                }
            }
            for entry in runtime.registry.entries() {
                let state = match runtime.registry.availability(&entry.spec.name) {
                    crate::tools::Availability::Available => "available".to_string(),
                    crate::tools::Availability::Unavailable(why) => format!("unavailable: {why}"),
                };
                let _ = writeln!(out, "  {:<16} {state}", entry.spec.name);
            }
            for server in &config.mcp.servers {
                let _ = writeln!(
                    out,
                    "  mcp-{:<12} connected at start (`switchboard tools` probes it)",
                    server.name
                );
            }
        }
        Err(err) => {
            let _ = writeln!(out, "  registry error: {err}");
        }
    }
    out
}

/// Where a daemon configured by `config` answers on this machine: its
/// `server.listen`, loopback when that is every address.
pub(crate) fn local_base(config: &Config) -> String {
    let mut addr = config.server.listen;
    if addr.ip().is_unspecified() {
        let loopback: std::net::IpAddr = if addr.is_ipv6() {
            std::net::Ipv6Addr::LOCALHOST.into()
        } else {
            std::net::Ipv4Addr::LOCALHOST.into()
        };
        addr.set_ip(loopback);
    }
    format!("http://{addr}")
}

/// `GET <base>/healthz` within 3 s: 0 when it answers 200, 1 otherwise
/// (with the reason on stderr).
async fn healthcheck(base: &str) -> u8 {
    let url = format!("{}/healthz", base.trim_end_matches('/'));
    let answer = crate::http::client::builder()
        .timeout(std::time::Duration::from_secs(3))
        .build()
        .map_err(|e| e.to_string());
    let answer = match answer {
        Ok(client) => client.get(&url).send().await.map_err(|e| e.to_string()),
        Err(err) => Err(err),
    };
    match answer {
        Ok(resp) if resp.status().is_success() => 0,
        Ok(resp) => {
            eprintln!("unhealthy: {url} answered {}", resp.status());
            1
        }
        Err(err) => {
            eprintln!("unhealthy: {url}: {err}");
            1
        }
    }
}
