//! `[tools]`: configuration of the built-in tools.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `[tools]`: the built-in tools.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsConfig {
    /// Toolsets removed from every session, whatever its preset.
    pub disabled_toolsets: Vec<String>,
    /// The `terminal` and `process` tools.
    pub terminal: TerminalConfig,
    /// The OS sandbox around every command of the local backend.
    pub sandbox: SandboxConfig,
    /// The `web_search` tool.
    pub web_search: WebSearchConfig,
    /// The `web_extract` tool.
    pub web_extract: WebExtractConfig,
    /// The `vision_analyze` tool.
    pub vision: VisionConfig,
    /// The `send_message` tool.
    pub send_message: SendMessageConfig,
}

/// `[tools.terminal]`: where and how commands run.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TerminalConfig {
    /// `local` (a shell on this host, in the session workspace), `docker`
    /// (through the docker CLI) or `ssh` (through the ssh binary).
    pub backend: TerminalBackend,
    /// Default time limit of one foreground command, in seconds.
    pub timeout_secs: u64,
    /// Largest time limit a call may ask for, in seconds.
    pub max_timeout_secs: u64,
    /// Most bytes of output kept per command (head and tail).
    pub output_limit_bytes: usize,
    /// Most bytes of output kept per background process.
    pub process_log_bytes: usize,
    /// Most background processes running per session.
    pub max_processes: usize,
    /// Variables of the daemon's environment that commands also get, beyond
    /// `PATH`, `LANG`, `TERM` and `TZ` (children never get a copy of the
    /// daemon's environment: it holds the gateway's secrets).
    pub env_passthrough: Vec<String>,
    /// Docker CLI binary.
    pub docker_bin: String,
    /// Image for `docker run --rm` (when `docker_container` is empty).
    pub docker_image: String,
    /// Existing container for `docker exec`; takes precedence over the image.
    pub docker_container: String,
    /// Extra arguments for `docker run` (e.g. `--network=none`).
    pub docker_args: Vec<String>,
    /// ssh binary.
    pub ssh_bin: String,
    /// Remote host for the ssh backend.
    pub ssh_host: String,
    /// Remote user.
    pub ssh_user: String,
    /// Remote port.
    pub ssh_port: u16,
    /// Private key file.
    pub ssh_identity_file: String,
    /// Directory on the remote host that commands start in.
    pub ssh_remote_dir: String,
}

impl Default for TerminalConfig {
    fn default() -> Self {
        Self {
            backend: TerminalBackend::Local,
            timeout_secs: 120,
            max_timeout_secs: 600,
            output_limit_bytes: 64 * 1024,
            process_log_bytes: 256 * 1024,
            max_processes: 8,
            env_passthrough: Vec::new(),
            docker_bin: "docker".into(),
            docker_image: "debian:bookworm-slim".into(),
            docker_container: String::new(),
            docker_args: vec!["--network=none".into()],
            ssh_bin: "ssh".into(),
            ssh_host: String::new(),
            ssh_user: String::new(),
            ssh_port: 22,
            ssh_identity_file: String::new(),
            ssh_remote_dir: String::new(),
        }
    }
}

/// `[tools.sandbox]`: what a command of the local backend (and whatever it
/// spawns) can reach. See `docs/security.md`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// `auto` (Landlock, else bubblewrap, else the terminal is
    /// unavailable), `landlock`, `bwrap` or `off` (no sandbox: `check`
    /// warns on every start).
    pub mode: SandboxMode,
    /// Whether commands may use the network. `false` cuts TCP (Landlock)
    /// or every socket but a private loopback (bubblewrap).
    pub network: bool,
    /// Paths under the readable system directories that commands must not
    /// see (by default the gateway's configuration directory, the password
    /// hashes, the SSH host keys and sudo's rules).
    pub hidden: Vec<PathBuf>,
    /// Further directories commands may read (and execute from), such as a
    /// toolchain under `/opt`.
    pub read_only: Vec<PathBuf>,
    /// Further directories commands may write, such as a shared cache.
    pub read_write: Vec<PathBuf>,
    /// The bubblewrap binary.
    pub bwrap_bin: String,
    /// CPU seconds one command (and each process it starts) may use.
    pub cpu_secs: u64,
    /// Address space of each process, in MiB.
    pub memory_mb: u64,
    /// Processes and threads of the command's user at once.
    pub processes: u64,
    /// Largest file a command may write, in MiB.
    pub file_size_mb: u64,
    /// Open files of each process.
    pub open_files: u64,
    /// Free space, in MiB, that commands must leave on every filesystem
    /// they can write (the workspace's is often the database's too): a
    /// command is ended when it falls below it, and one started below half
    /// of it may only remove files. `0` turns the reserve off.
    pub disk_reserve_mb: u64,
    /// Inodes (files, directories, links) kept free the same way.
    pub disk_reserve_inodes: u64,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            mode: SandboxMode::Auto,
            network: true,
            hidden: [
                "/etc/switchboard",
                "/etc/shadow",
                "/etc/gshadow",
                "/etc/ssh",
                "/etc/sudoers",
                "/etc/sudoers.d",
            ]
            .iter()
            .map(PathBuf::from)
            .collect(),
            read_only: Vec::new(),
            read_write: Vec::new(),
            bwrap_bin: "bwrap".into(),
            cpu_secs: 600,
            memory_mb: 4096,
            processes: 1024,
            file_size_mb: 1024,
            open_files: 1024,
            disk_reserve_mb: 512,
            disk_reserve_inodes: 8192,
        }
    }
}

/// Which sandbox commands run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// The best the host offers: Landlock, else bubblewrap.
    Auto,
    /// Linux Landlock (ABI 6 or newer), applied in the child before exec.
    Landlock,
    /// bubblewrap: namespaces and a read-only view of the system.
    Bwrap,
    /// No sandbox, chosen knowingly.
    Off,
}

/// Where terminal commands run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TerminalBackend {
    /// A local shell.
    Local,
    /// The docker CLI.
    Docker,
    /// The ssh binary.
    Ssh,
}

/// `[tools.web_search]`: the search backend; the tool is unavailable
/// without one.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebSearchConfig {
    /// `none`, `searxng`, `brave` or `tavily`.
    pub provider: SearchProvider,
    /// Base URL: the SearXNG instance, or an override of Brave's or
    /// Tavily's API endpoint.
    pub url: String,
    /// Environment variable with the API key (Brave, Tavily).
    pub api_key_env: String,
    /// Most results returned per search.
    pub max_results: usize,
}

impl Default for WebSearchConfig {
    fn default() -> Self {
        Self {
            provider: SearchProvider::None,
            url: String::new(),
            api_key_env: String::new(),
            max_results: 8,
        }
    }
}

/// Web search backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchProvider {
    /// No search: `web_search` is unavailable.
    None,
    /// A SearXNG instance (JSON API).
    Searxng,
    /// Brave Search API.
    Brave,
    /// Tavily API.
    Tavily,
}

/// `[tools.web_extract]`: fetching pages.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebExtractConfig {
    /// Hosts (names or IP literals) that may be fetched even though they
    /// resolve to loopback, private or link-local addresses.
    pub allow_hosts: Vec<String>,
    /// Largest response body read, in bytes.
    pub max_body_bytes: usize,
    /// Time limit of one fetch, in seconds.
    pub timeout_secs: u64,
    /// Most redirects followed (each one re-checked).
    pub max_redirects: usize,
}

impl Default for WebExtractConfig {
    fn default() -> Self {
        Self {
            allow_hosts: Vec::new(),
            max_body_bytes: 2 * 1024 * 1024,
            timeout_secs: 20,
            max_redirects: 5,
        }
    }
}

/// `[tools.vision]`: the multimodal model behind `vision_analyze`; the
/// tool is unavailable until `model` is set.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct VisionConfig {
    /// A vision-capable model name (OpenAI-compatible chat completions).
    pub model: String,
    /// Its base URL; defaults to `llm.base_url`.
    pub base_url: Option<String>,
    /// Its API key variable; defaults to `llm.api_key_env`.
    pub api_key_env: Option<String>,
}

/// `[tools.send_message]`: where `send_message` may send.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SendMessageConfig {
    /// Named targets, e.g. `ops = { platform = "slack", chat = "C0123" }`.
    pub targets: BTreeMap<String, super::ChatTarget>,
}

impl super::Config {
    /// Why commands could reach the gateway's own database, when they
    /// could: storage on PostgreSQL, commands of the local, sandboxed
    /// backend allowed the network, and the server letting this host in
    /// without a password (`lets_in`, as tried by
    /// [`postgres_lets_in_without_password`](crate::store::postgres_lets_in_without_password);
    /// when that is not known, judged from the URL: loopback over TCP with
    /// no password in it). A command would connect from the same address
    /// as the same role, and could change any state of the gateway,
    /// approvals included.
    pub fn storage_open_to_commands(&self, lets_in: Option<bool>) -> Option<String> {
        let url = url::Url::parse(&self.storage.url).ok()?;
        let reachable = matches!(url.scheme(), "postgres" | "postgresql")
            && self.tools.terminal.backend == TerminalBackend::Local
            && self.tools.sandbox.mode != SandboxMode::Off
            && self.tools.sandbox.network;
        if !reachable {
            return None;
        }
        const FIX: &str = "a command can connect to it as the gateway does and change its state, approvals included; make the server ask for a password on TCP connections from this host (pg_hba.conf) or set network = false";
        match lets_in {
            Some(true) => Some(format!(
                "storage's PostgreSQL lets this host in as {:?} without a password, and commands may use the network ([tools.sandbox] network = true): {FIX}",
                url.username()
            )),
            Some(false) => None,
            None => {
                // The host, or the hosts of its `host` and `hostaddr`
                // parameters (a path there is a UNIX socket's directory,
                // which commands cannot connect to).
                let mut hosts: Vec<String> =
                    url.host_str().map(str::to_string).into_iter().collect();
                for (key, value) in url.query_pairs() {
                    if key == "host" || key == "hostaddr" {
                        hosts.extend(value.split(',').map(str::to_string));
                    }
                }
                let local = hosts.iter().find(|host| loopback(host))?;
                let password =
                    url.password().is_some() || url.query_pairs().any(|(k, _)| k == "password");
                (!password).then(|| {
                    format!(
                        "storage is PostgreSQL on {local} with no password in its URL, and commands may use the network ([tools.sandbox] network = true): {FIX}"
                    )
                })
            }
        }
    }
}

/// Whether `host` (a name or an address, as a PostgreSQL URL writes it)
/// is this machine's loopback.
fn loopback(host: &str) -> bool {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase();
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| {
            ip.is_loopback()
                || ip.is_unspecified()
                || matches!(ip, std::net::IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()))
        })
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::*;

    fn on(url: &str, edit: impl FnOnce(&mut Config)) -> Option<String> {
        let mut config = Config::default();
        config.storage.url = url.into();
        edit(&mut config);
        config.storage_open_to_commands(None)
    }

    #[test]
    fn a_passwordless_loopback_postgres_is_open_to_commands_with_the_network() {
        for url in [
            "postgres://postgres@127.0.0.1:5432/test",
            "postgresql://gw@localhost/gw",
            "postgres://gw@[::1]/gw",
            "postgres://gw@LOCALHOST./gw",
            "postgres:///gw?host=127.0.0.1",
            "postgres://gw@db.internal/gw?hostaddr=127.0.0.1",
            "postgres://gw@[::ffff:127.0.0.1]/gw",
        ] {
            let why = on(url, |_| {}).unwrap_or_default();
            assert!(why.contains("network = false"), "{url}: {why}");
        }
    }

    #[test]
    fn a_password_another_host_sqlite_or_no_network_close_it() {
        assert_eq!(on("postgres://gw:secret@127.0.0.1/gw", |_| {}), None);
        assert_eq!(
            on("postgres://gw@127.0.0.1/gw?password=secret", |_| {}),
            None
        );
        assert_eq!(on("postgres:///gw?host=/var/run/postgresql", |_| {}), None);
        assert_eq!(on("postgres://gw@db.internal/gw", |_| {}), None);
        assert_eq!(on("sqlite://data/switchboard.db", |_| {}), None);
        let cut = |c: &mut Config| c.tools.sandbox.network = false;
        assert_eq!(on("postgres://gw@127.0.0.1/gw", cut), None);
        let remote = |c: &mut Config| c.tools.terminal.backend = TerminalBackend::Docker;
        assert_eq!(on("postgres://gw@127.0.0.1/gw", remote), None);
    }

    #[test]
    fn what_the_server_said_outweighs_the_url() {
        let mut config = Config::default();
        config.storage.url = "postgres://gw:secret@db.internal/gw".into();
        let why = config.storage_open_to_commands(Some(true)).unwrap();
        assert!(why.contains("lets this host in as \"gw\""), "{why}");
        config.storage.url = "postgres://gw@127.0.0.1/gw".into();
        assert_eq!(config.storage_open_to_commands(Some(false)), None);
        config.tools.sandbox.network = false;
        assert_eq!(config.storage_open_to_commands(Some(true)), None);
    }
}
