//! What the webhook benches share: the signed `pull_request` delivery, the
//! gateway configuration that takes them without limits, the load client
//! ([`wrk`]), and how a bench reads its knobs.

#![allow(dead_code)]

use std::path::Path;

use serde_json::json;

pub mod wrk;

/// The route's shared secret.
pub const SECRET: &str = "bench-secret-of-32-bytes-or-more";

/// `name` from the environment as a number, or `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Delivery `i`, a `synchronize` of pull request `pr`.
pub fn body(i: usize, pr: usize) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "action": "synchronize",
        "number": pr,
        "pull_request": {
            "number": pr, "title": format!("Change {i}"),
            "body": "A change worth reviewing: it reworks the parser's error paths and adds tests.",
            "draft": false, "user": {"login": "octocat"},
            "html_url": format!("https://github.com/octo-org/hello-world/pull/{pr}"),
            "head": {"ref": "topic", "sha": "6dcb09b5b57875f334f61aebed695e2e4193db5e"},
            "base": {"ref": "main"},
        },
        "repository": {"full_name": "octo-org/hello-world"},
        "sender": {"login": "octocat", "type": "User"},
    }))
    .unwrap()
}

/// A gateway on `listen` with SQLite in `dir`, the model at `model`, and
/// one GitHub route (`/webhooks/github`, secret from
/// `GITHUB_WEBHOOK_SECRET`) whose rate limit and queues never refuse.
pub fn gateway_toml(dir: &Path, listen: &str, model: &str) -> String {
    let db = format!("sqlite://{}", dir.join("bench.db").display());
    gateway_toml_on(dir, listen, model, &db)
}

/// [`gateway_toml`] with the database at `storage` (a URL).
pub fn gateway_toml_on(dir: &Path, listen: &str, model: &str, storage: &str) -> String {
    format!(
        r#"
        [server]
        listen = "{listen}"
        shutdown_grace_secs = 1
        [storage]
        url = "{storage}"
        [log]
        level = "error"
        [llm]
        base_url = "{model}"
        api_key_env = ""
        max_retries = 0
        [agent]
        workspace = "{ws}"
        [sessions]
        queue_cap = 1000000
        max_pending = 1000000
        [webhook]
        enabled = true
        [[webhook.routes]]
        name = "github"
        path = "/webhooks/github"
        scheme = "github"
        secret_env = "GITHUB_WEBHOOK_SECRET"
        rate_limit_per_minute = 100000000
        "#,
        ws = dir.join("ws").display(),
    )
}
