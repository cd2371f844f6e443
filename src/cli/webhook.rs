//! `switchboard webhook test ROUTE --event E --file payload.json`: signs a
//! payload with the route's secret, the way its sender would, and posts it
//! to the running daemon.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;

use crate::adapters::webhook::verify::{github_signature, hex_hmac, standard_signature};
use crate::config::{Config, Env, SignatureScheme};
use crate::store::{new_id, now_ms};

/// `switchboard webhook …`.
#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Sign a payload with a route's secret and post it to the daemon.
    Test {
        /// Route name from `[[webhook.routes]]`.
        route: String,
        /// Event name (`pull_request`, `check_run`, …), sent the way the
        /// route's scheme carries it.
        #[arg(long)]
        event: String,
        /// JSON payload file.
        #[arg(long, value_name = "PATH")]
        file: PathBuf,
        /// Base URL of the daemon [default: from `server.listen`].
        #[arg(long)]
        url: Option<String>,
    },
}

/// Runs a webhook subcommand; returns the exit code (0 when the daemon
/// answered 2xx).
pub async fn run(config: &Config, env: &Env, command: WebhookCommand) -> anyhow::Result<u8> {
    let WebhookCommand::Test {
        route,
        event,
        file,
        url,
    } = command;
    let Some(r) = config.webhook.routes.iter().find(|r| r.name == route) else {
        let names: Vec<&str> = config
            .webhook
            .routes
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        anyhow::bail!("no webhook route {route:?} (routes: {})", names.join(", "));
    };
    let body = std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
    serde_json::from_slice::<serde_json::Value>(&body)
        .with_context(|| format!("{} is not JSON", file.display()))?;
    let secret = match &r.secret_env {
        Some(name) => Some(
            env.get(name)
                .with_context(|| format!("{name} is not set (the route's secret_env)"))?
                .to_string(),
        ),
        None => None,
    };
    let delivery = new_id();
    let mut headers: Vec<(String, String)> = Vec::new();
    match r.scheme {
        SignatureScheme::Github => {
            headers.push(("x-github-event".into(), event.clone()));
            headers.push(("x-github-delivery".into(), delivery.clone()));
            if let Some(s) = &secret {
                headers.push(("x-hub-signature-256".into(), github_signature(s, &body)));
            }
        }
        SignatureScheme::Gitlab => {
            headers.push(("x-gitlab-event".into(), event.clone()));
            headers.push(("x-gitlab-event-uuid".into(), delivery.clone()));
            if let Some(s) = &secret {
                headers.push(("x-gitlab-token".into(), s.clone()));
            }
        }
        SignatureScheme::Hmac => {
            headers.push(("x-event-type".into(), event.clone()));
            headers.push(("idempotency-key".into(), delivery.clone()));
            if let (Some(s), Some(h)) = (&secret, &r.signature_header) {
                headers.push((h.clone(), hex_hmac(s.as_bytes(), &body)));
            }
        }
        SignatureScheme::StandardWebhooks => {
            let ts = now_ms() / 1000;
            headers.push(("x-event-type".into(), event.clone()));
            headers.push(("webhook-id".into(), delivery.clone()));
            headers.push(("webhook-timestamp".into(), ts.to_string()));
            if let Some(s) = &secret {
                headers.push((
                    "webhook-signature".into(),
                    standard_signature(s, &delivery, ts, &body),
                ));
            }
        }
    }
    let base = url.unwrap_or_else(|| super::local_base(config));
    let target = format!("{}{}", base.trim_end_matches('/'), r.path);
    let mut req = crate::http::client::client()
        .post(&target)
        .header("content-type", "application/json")
        .body(body);
    for (k, v) in &headers {
        req = req.header(k, v);
    }
    let resp = req
        .send()
        .await
        .with_context(|| format!("cannot reach the daemon at {target}"))?;
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    println!("POST {target} (delivery {delivery}) -> {status}");
    if !text.is_empty() {
        println!("{text}");
    }
    Ok(if status.is_success() { 0 } else { 1 })
}
