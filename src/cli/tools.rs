//! `switchboard tools` and `switchboard toolsets`.

use std::fmt::Write;
use std::time::Duration;

use serde_json::{Value, json};

use crate::config::{Config, Env};
use crate::tools::{ToolRuntime, mcp};

/// How long `tools` waits for each MCP server.
const MCP_PROBE: Duration = Duration::from_secs(10);

/// The `tools` report: every tool (or those of a platform's preset) with
/// its toolset and availability.
pub async fn tools(
    config: &Config,
    env: &Env,
    platform: Option<&str>,
    as_json: bool,
) -> anyhow::Result<String> {
    let runtime = ToolRuntime::build(config, env, crate::adapters::platforms(config))?;
    let mut clients = Vec::new();
    let mut mcp_errors = Vec::new();
    for server in &config.mcp.servers {
        match tokio::time::timeout(
            MCP_PROBE,
            mcp::connect_and_register(server, env, &runtime.registry),
        )
        .await
        {
            Ok(Ok((client, _alive))) => clients.push(client),
            Ok(Err(err)) => mcp_errors.push((server.name.clone(), err.to_string())),
            Err(_) => mcp_errors.push((server.name.clone(), "no answer".into())),
        }
    }
    let names: Vec<String> = match platform {
        Some(p) => {
            let enabled = match runtime.platforms.profile(p) {
                Some(profile) => profile.toolsets.clone(),
                None => vec![crate::tools::toolsets::preset_name(p)],
            };
            let on = runtime.toolsets.resolve_all(&enabled)?;
            let off = runtime
                .toolsets
                .resolve_all(&config.tools.disabled_toolsets)?;
            on.difference(&off).cloned().collect()
        }
        None => runtime.registry.names(),
    };
    let rows: Vec<serde_json::Value> = names
        .iter()
        .map(|name| match runtime.registry.get(name) {
            Some(entry) => {
                let availability = runtime.registry.availability(name);
                let reason = match &availability {
                    crate::tools::Availability::Available => None,
                    crate::tools::Availability::Unavailable(r) => Some(r.clone()),
                };
                json!({
                    "name": name,
                    "emoji": entry.spec.emoji,
                    "toolset": entry.spec.toolset,
                    "requires_env": entry.spec.requires_env,
                    "available": reason.is_none(),
                    "reason": reason,
                })
            }
            None => json!({
                "name": name,
                "emoji": null,
                "toolset": null,
                "requires_env": [],
                "available": false,
                "reason": "not registered",
            }),
        })
        .collect();
    for client in clients {
        let _ = client.cancel().await;
    }
    if as_json {
        return Ok(serde_json::to_string_pretty(
            &json!({"tools": rows, "mcp_errors": mcp_errors}),
        )? + "\n");
    }
    let mut out = String::new();
    for row in &rows {
        let state = if row["available"] == true {
            "available".to_string()
        } else {
            format!("unavailable: {}", row["reason"].as_str().unwrap_or(""))
        };
        let toolset = row["toolset"].as_str().unwrap_or("-");
        let needs: Vec<&str> = row["requires_env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let needs = if needs.is_empty() {
            String::new()
        } else {
            format!("  (needs {})", needs.join(", "))
        };
        let _ = writeln!(
            out,
            "{} {:<16} {:<16} {state}{needs}",
            row["emoji"].as_str().unwrap_or(crate::tools::DEFAULT_EMOJI),
            row["name"].as_str().unwrap_or(""),
            toolset
        );
    }
    for (server, err) in mcp_errors {
        let _ = writeln!(out, "mcp-{server}: unreachable: {err}");
    }
    Ok(out)
}

/// The `toolsets` report: every toolset with its tool count, or one
/// toolset's resolved tools.
pub fn toolsets(
    config: &Config,
    env: &Env,
    name: Option<&str>,
    as_json: bool,
) -> anyhow::Result<String> {
    let runtime = ToolRuntime::build(config, env, crate::adapters::platforms(config))?;
    match name {
        Some(name) => {
            let tools: Vec<String> = runtime.toolsets.resolve(name)?.iter().cloned().collect();
            if as_json {
                Ok(serde_json::to_string_pretty(&json!({"toolset": name, "tools": tools}))? + "\n")
            } else {
                Ok(tools.iter().map(|t| format!("{t}\n")).collect())
            }
        }
        None => {
            let mut rows = Vec::new();
            for toolset in runtime.toolsets.names() {
                let tools: Vec<String> = runtime
                    .toolsets
                    .resolve(&toolset)?
                    .iter()
                    .cloned()
                    .collect();
                let description = runtime.toolsets.description(&toolset).unwrap_or("");
                rows.push(json!({"name": toolset, "description": description, "tools": tools}));
            }
            if as_json {
                return Ok(serde_json::to_string_pretty(&json!({"toolsets": rows}))? + "\n");
            }
            let mut out = String::new();
            for row in rows {
                let count = row["tools"].as_array().map_or(0, Vec::len);
                let _ = writeln!(
                    out,
                    "{:<18} {count:>3} tools  {}",
                    row["name"].as_str().unwrap_or(""),
                    row["description"].as_str().unwrap_or("")
                );
            }
            Ok(out)
        }
    }
}
