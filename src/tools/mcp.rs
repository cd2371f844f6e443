//! MCP tool servers (`[[mcp.servers]]`): each is connected at start (stdio
//! child process or streamable HTTP), its tools register as toolset
//! `mcp-<name>` and dispatch through the registry with a time limit. A
//! server that fails or dies marks its tools unavailable and is reconnected
//! with exponential backoff.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use secrecy::ExposeSecret;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{RegisterMode, Registry, Tool, ToolContext, ToolError, ToolSpec, Unavailable};
use crate::config::{Env, McpServerConfig};
use crate::telemetry::Health;

/// First reconnect delay; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// Longest reconnect delay.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Time allowed for the handshake and tool listing.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

type Client = RunningService<RoleClient, ()>;

/// The toolset name of a server's tools.
pub fn toolset_name(server: &str) -> String {
    format!("mcp-{server}")
}

/// A tool name the model APIs accept (`[A-Za-z0-9_-]{1,64}`).
fn model_safe(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if safe.is_empty() { "_".into() } else { safe }
}

/// One tool of an MCP server.
struct McpTool {
    server: String,
    remote_name: String,
    spec: ToolSpec,
    peer: Peer<RoleClient>,
    alive: Arc<AtomicBool>,
    timeout: Duration,
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn shared_check(&self) -> Option<String> {
        Some(toolset_name(&self.server))
    }

    fn check(&self) -> Result<(), Unavailable> {
        if self.alive.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(Unavailable(format!(
                "MCP server {} is not connected",
                self.server
            )))
        }
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let arguments = match args {
            Value::Object(map) => map,
            Value::Null => Default::default(),
            other => {
                return Err(ToolError::InvalidArgs(format!(
                    "arguments must be an object, not {other}"
                )));
            }
        };
        let request =
            CallToolRequestParams::new(self.remote_name.clone()).with_arguments(arguments);
        let result = tokio::select! {
            r = tokio::time::timeout(self.timeout, self.peer.call_tool(request)) => r,
            _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        match result {
            Err(_) => Err(ToolError::Failed(format!(
                "MCP server {} did not answer within {:?}",
                self.server, self.timeout
            ))),
            Ok(Err(err)) => Err(ToolError::Failed(format!(
                "MCP server {}: {err}",
                self.server
            ))),
            Ok(Ok(result)) => render(result),
        }
    }
}

fn render(result: CallToolResult) -> Result<String, ToolError> {
    let mut parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block.as_text() {
            Some(text) => text.text.clone(),
            None => serde_json::to_string(block).unwrap_or_default(),
        })
        .collect();
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    if result.is_error == Some(true) {
        Err(ToolError::Failed(text))
    } else {
        Ok(text)
    }
}

/// Why an MCP server could not be connected.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// A configured header cannot be sent.
    #[error("header {name}: {reason}")]
    Header {
        /// The header's configured name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The server's program could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The configured command.
        program: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The MCP handshake failed.
    #[error("handshake failed: {0}")]
    Handshake(String),
    /// Neither `command` nor `url` is configured.
    #[error("neither command nor url is set")]
    NoTransport,
    /// The server did not answer within the limit.
    #[error("{0} timed out after {CONNECT_TIMEOUT:?}")]
    Timeout(&'static str),
    /// `tools/list` failed.
    #[error("tools/list failed: {0}")]
    ListTools(String),
}

/// The headers of a `url` server, their values read from the environment
/// variables the configuration names and marked sensitive (a Debug print
/// shows none of them).
fn headers(
    config: &McpServerConfig,
    env: &Env,
) -> Result<HashMap<HeaderName, HeaderValue>, McpError> {
    config
        .headers
        .iter()
        .map(|(name, var)| {
            let wrong = |reason: String| McpError::Header {
                name: name.clone(),
                reason,
            };
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| wrong("not a valid header name".into()))?;
            let value = env
                .secret(var)
                .ok_or_else(|| wrong(format!("environment variable {var} is not set")))?;
            let mut value = HeaderValue::from_str(value.expose_secret())
                .map_err(|_| wrong(format!("the value of {var} is not a valid header value")))?;
            value.set_sensitive(true);
            Ok((header, value))
        })
        .collect()
}

async fn connect(config: &McpServerConfig, env: &Env) -> Result<Client, McpError> {
    let handshake = async {
        match (&config.command, &config.url) {
            (Some(program), _) => {
                let mut command = tokio::process::Command::new(program);
                // An empty environment plus the server's own: never the
                // daemon's, which holds the gateway's secrets. PATH alone
                // is kept, for `#!/usr/bin/env node` and the like.
                command
                    .args(&config.args)
                    .env_clear()
                    .env("PATH", crate::tools::sandbox::default_path())
                    .envs(&config.env)
                    .kill_on_drop(true);
                let (transport, _stderr) = TokioChildProcess::builder(command)
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .map_err(|source| McpError::Spawn {
                        program: program.clone(),
                        source,
                    })?;
                ().serve(transport)
                    .await
                    .map_err(|e| McpError::Handshake(e.to_string()))
            }
            (None, Some(url)) => {
                let transport = StreamableHttpClientTransport::with_client(
                    crate::http::client::client(),
                    StreamableHttpClientTransportConfig::with_uri(url.as_str())
                        .custom_headers(headers(config, env)?),
                );
                ().serve(transport)
                    .await
                    .map_err(|e| McpError::Handshake(e.to_string()))
            }
            (None, None) => Err(McpError::NoTransport),
        }
    };
    tokio::time::timeout(CONNECT_TIMEOUT, handshake)
        .await
        .map_err(|_| McpError::Timeout("the handshake"))?
}

/// Connects once, registers the server's tools, and returns the running
/// client with the liveness flag its tools share.
pub async fn connect_and_register(
    config: &McpServerConfig,
    env: &Env,
    registry: &Registry,
) -> Result<(Client, Arc<AtomicBool>), McpError> {
    let client = connect(config, env).await?;
    let tools = tokio::time::timeout(CONNECT_TIMEOUT, client.peer().list_all_tools())
        .await
        .map_err(|_| McpError::Timeout("tools/list"))?
        .map_err(|e| McpError::ListTools(e.to_string()))?;
    let toolset = toolset_name(&config.name);
    registry.remove_toolset(&toolset);
    let alive = Arc::new(AtomicBool::new(true));
    for tool in tools {
        let name = model_safe(&tool.name);
        let description = tool.description.as_deref().unwrap_or("").to_string();
        let mut parameters = Value::Object((*tool.input_schema).clone());
        if parameters.get("type").is_none() {
            parameters["type"] = json!("object");
        }
        let spec = ToolSpec::new(&name, &toolset, &description, parameters).emoji("🔌");
        let mcp_tool = McpTool {
            server: config.name.clone(),
            remote_name: tool.name.to_string(),
            spec,
            peer: client.peer().clone(),
            alive: alive.clone(),
            timeout: Duration::from_secs(config.timeout_secs.max(1)),
        };
        if let Err(err) = registry.register(Arc::new(mcp_tool), RegisterMode::Normal) {
            tracing::warn!(mcp.server = %config.name, error = %err, "MCP tool skipped");
        }
    }
    Ok((client, alive))
}

/// Keeps one MCP server connected until `stop` fires: connect, register,
/// wait for the connection to end, mark the tools unavailable, back off,
/// reconnect.
pub async fn supervise(
    config: McpServerConfig,
    env: Env,
    registry: Arc<Registry>,
    health: Health,
    stop: CancellationToken,
) {
    let component = toolset_name(&config.name);
    let mut backoff = FIRST_BACKOFF;
    loop {
        health.set(&component, false, "connecting");
        let attempt = tokio::select! {
            r = connect_and_register(&config, &env, &registry) => r,
            _ = stop.cancelled() => return,
        };
        match attempt {
            Ok((client, alive)) => {
                backoff = FIRST_BACKOFF;
                tracing::info!(mcp.server = %config.name, "MCP server connected");
                health.set(&component, true, "connected");
                let cancel = client.cancellation_token();
                let ended = tokio::select! {
                    reason = client.waiting() => Some(reason),
                    _ = stop.cancelled() => None,
                };
                alive.store(false, Ordering::SeqCst);
                registry.invalidate_checks();
                match ended {
                    None => {
                        cancel.cancel();
                        health.remove(&component);
                        return;
                    }
                    Some(reason) => {
                        tracing::warn!(mcp.server = %config.name, reason = ?reason, retry_in = ?backoff, "MCP server connection ended");
                        health.set(&component, false, "disconnected; reconnecting");
                    }
                }
            }
            Err(err) => {
                tracing::warn!(mcp.server = %config.name, error = %err, retry_in = ?backoff, "MCP server unavailable");
                health.set(&component, false, format!("unavailable: {err}"));
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.cancelled() => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
