//! The webhook receiver: `POST <route.path>` for GitHub, GitLab and CI
//! senders. Checks in order: body cap (413, the router's layer) →
//! signature (401) → per-route rate limit (429 + Retry-After) → filter →
//! idempotency on the delivery id and the inbox commit (through the
//! session manager; 503 + Retry-After when it is full) → 202, and the agent
//! runs in the background under the route's (restricted) toolsets. The
//! answer goes to the route's delivery target.

pub mod deliver;
pub mod events;
mod limit;
pub mod template;
pub mod verify;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use crate::approvals::{Actor, ApprovalPrompter, ChatRef, Prompt};
use crate::config::WebhookRoute;
use crate::daemon::Gateway;
use crate::http::AppState;
use crate::sessions::{ChatKind, InboundEvent, Replier, Submitted};
use deliver::{Deliverer, IssueRef};
use events::{Classified, classify, delivery_id, event_name};
use limit::RateLimiter;
use verify::Verifier;

/// Seconds a sender is asked to wait when the gateway is full.
const BUSY_RETRY_SECS: u64 = 5;

struct RouteState {
    route: WebhookRoute,
    verifier: Verifier,
    limiter: RateLimiter,
    gateway: Gateway,
}

/// One route's answers and approval prompts.
struct Routes {
    deliverers: HashMap<String, (WebhookRoute, Deliverer)>,
}

impl Routes {
    fn get(&self, route: &str) -> Option<&(WebhookRoute, Deliverer)> {
        self.deliverers.get(route)
    }
}

/// Mounts the configured routes and registers the webhook platform's
/// replier (delivery) and approval prompter (PR comments).
pub fn router(gateway: &Gateway) -> axum::Router<AppState> {
    let config = &gateway.config;
    let mut app = axum::Router::new();
    if !config.webhook.enabled {
        return app;
    }
    let http = reqwest::Client::builder()
        .user_agent(concat!("switchboard/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_default();
    let mut deliverers = HashMap::new();
    for route in &config.webhook.routes {
        let secret = route
            .secret_env
            .as_deref()
            .and_then(|name| gateway.env.get(name));
        let state = Arc::new(RouteState {
            route: route.clone(),
            verifier: Verifier::new(route.scheme, secret, route.signature_header.as_deref()),
            limiter: RateLimiter::per_minute(route.rate_limit_per_minute),
            gateway: gateway.clone(),
        });
        app = app.route(&route.path, post(receive).with_state(state));
        let deliverer = Deliverer::new(
            route,
            &gateway.env,
            gateway.store.clone(),
            gateway.outbound.clone(),
            http.clone(),
        );
        deliverers.insert(route.name.clone(), (route.clone(), deliverer));
        tracing::info!(route = %route.name, path = %route.path, scheme = ?route.scheme, "webhook route mounted");
    }
    let routes = Arc::new(Routes { deliverers });
    gateway.replies.register("webhook", routes.clone());
    let broker = gateway.broker.clone();
    let prompter = routes.clone();
    tokio::spawn(async move { broker.register_prompter("webhook", prompter).await });
    gateway.health.set("webhook", true, "routes mounted");
    app
}

fn answer(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

fn retry_after(status: StatusCode, secs: u64, body: Value) -> Response {
    let mut resp = answer(status, body);
    if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

async fn receive(
    State(state): State<Arc<RouteState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let route = &state.route;
    let now = crate::store::now_ms() / 1000;
    if let Err(err) = state.verifier.verify(&headers, &body, now) {
        tracing::warn!(route = %route.name, error = %err, "webhook refused");
        metrics::counter!("switchboard_webhook_requests_total", "route" => route.name.clone(), "outcome" => "unauthorized").increment(1);
        return answer(
            StatusCode::UNAUTHORIZED,
            json!({ "error": err.to_string() }),
        );
    }
    if let Err(wait) = state.limiter.take() {
        metrics::counter!("switchboard_webhook_requests_total", "route" => route.name.clone(), "outcome" => "rate_limited").increment(1);
        return retry_after(
            StatusCode::TOO_MANY_REQUESTS,
            wait,
            json!({ "error": "rate limit exceeded" }),
        );
    }
    let payload = match parse_payload(&headers, &body) {
        Ok(v) => v,
        Err(err) => {
            return answer(StatusCode::BAD_REQUEST, json!({ "error": err }));
        }
    };
    let event = event_name(route.scheme, &headers, &payload);
    let delivery = delivery_id(route.scheme, &headers, &body);
    let outcome = match classify(route, &event, &delivery, &payload) {
        Classified::Skip(reason) => {
            tracing::debug!(route = %route.name, event, reason, "webhook event skipped");
            answer(
                StatusCode::OK,
                json!({ "status": "ignored", "reason": reason }),
            )
        }
        Classified::Approval { text, login } => {
            approval_comment(&state, &payload, &text, &login).await
        }
        Classified::Run {
            entity,
            prompt,
            sender,
        } => {
            let inbound = InboundEvent {
                platform: "webhook".into(),
                kind: ChatKind::Group,
                chat_id: route.name.clone(),
                thread_id: Some(entity.clone()),
                user_id: sender.clone(),
                user_name: sender,
                roles: Vec::new(),
                text: prompt,
                event_id: format!("{}:{delivery}", route.name),
                message_id: None,
                mentioned: true,
                from_bot: false,
                entity: Some(entity),
            };
            submit(&state, inbound).await
        }
    };
    let label = match outcome.status().as_u16() {
        202 => "accepted",
        200 => "acknowledged",
        503 => "busy",
        _ => "error",
    };
    metrics::counter!("switchboard_webhook_requests_total", "route" => route.name.clone(), "outcome" => label).increment(1);
    outcome
}

/// The JSON payload: the body itself, or its `payload` field when the
/// sender posts a form (GitHub's `application/x-www-form-urlencoded`
/// content type). The signature was checked over the raw body either way.
fn parse_payload(headers: &HeaderMap, body: &[u8]) -> Result<Value, String> {
    let form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if form {
        let payload = url::form_urlencoded::parse(body)
            .find(|(k, _)| k == "payload")
            .map(|(_, v)| v.into_owned())
            .ok_or("form body without a payload field")?;
        return serde_json::from_str(&payload).map_err(|e| format!("payload is not JSON: {e}"));
    }
    serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))
}

async fn submit(state: &RouteState, event: InboundEvent) -> Response {
    match state.gateway.sessions.submit(event).await {
        Ok(Submitted::Accepted) => answer(StatusCode::ACCEPTED, json!({ "status": "accepted" })),
        Ok(Submitted::Duplicate) => answer(StatusCode::OK, json!({ "status": "duplicate" })),
        Ok(Submitted::Busy) => retry_after(
            StatusCode::SERVICE_UNAVAILABLE,
            BUSY_RETRY_SECS,
            json!({ "error": "the gateway is busy; retry later" }),
        ),
        Ok(Submitted::Ignored(reason)) => answer(
            StatusCode::OK,
            json!({ "status": "ignored", "reason": reason }),
        ),
        Ok(Submitted::Pairing | Submitted::Command) => {
            answer(StatusCode::OK, json!({ "status": "acknowledged" }))
        }
        Err(err) => {
            tracing::error!(error = %err, "webhook event could not be stored");
            retry_after(
                StatusCode::SERVICE_UNAVAILABLE,
                BUSY_RETRY_SECS,
                json!({ "error": "the event could not be stored; retry later" }),
            )
        }
    }
}

/// `/approve <id>` or `/deny <id>` in a PR comment: counts only from the
/// route's approvers, and only when the route asks on pull requests.
async fn approval_comment(
    state: &RouteState,
    payload: &Value,
    text: &str,
    login: &str,
) -> Response {
    let route = &state.route;
    if !route.approval_comments {
        return answer(
            StatusCode::OK,
            json!({ "status": "ignored", "reason": "approval comments are off for this route" }),
        );
    }
    // On a route serving many pull requests "the oldest pending" is
    // ambiguous: the comment must name the approval.
    let named = text
        .split_whitespace()
        .nth(1)
        .is_some_and(|w| w.len() == 32 && w.chars().all(|c| c.is_ascii_hexdigit()));
    if !named {
        return answer(
            StatusCode::OK,
            json!({ "status": "refused", "reason": "name the approval id: /approve <id>" }),
        );
    }
    let chat = ChatRef {
        platform: "webhook".into(),
        chat: route.name.clone(),
        thread: None,
    };
    let actor = Actor {
        platform: "github".into(),
        user_id: login.to_string(),
        name: format!("@{login}"),
    };
    let listed = route
        .approvers
        .iter()
        .any(|a| a.trim_start_matches('@').eq_ignore_ascii_case(login));
    let broker = &state.gateway.broker;
    let result = if listed {
        broker.resolve_text_vouched(&chat, &actor, text).await
    } else {
        broker.resolve_text(&chat, &actor, text).await
    };
    let number = template::lookup(payload, "issue.number").and_then(Value::as_u64);
    match result {
        Some(Ok(decision)) => {
            tracing::info!(route = %route.name, login, pr = ?number, decision = %decision.describe(), "approval decided by comment");
            answer(
                StatusCode::OK,
                json!({ "status": "decided", "decision": decision.describe() }),
            )
        }
        Some(Err(refusal)) => {
            tracing::warn!(route = %route.name, login, refusal = %refusal, "approval comment refused");
            answer(
                StatusCode::OK,
                json!({ "status": "refused", "reason": refusal.to_string() }),
            )
        }
        None => answer(StatusCode::OK, json!({ "status": "ignored" })),
    }
}

#[async_trait::async_trait]
impl Replier for Routes {
    async fn reply(&self, event: &InboundEvent, text: &str) {
        let entity = event.entity.as_deref().unwrap_or(&event.event_id);
        match self.get(&event.chat_id) {
            Some((_, deliverer)) => deliverer.deliver(entity, text).await,
            None => tracing::warn!(route = %event.chat_id, "answer for an unknown route dropped"),
        }
    }

    async fn busy(&self, event: &InboundEvent, text: &str) {
        tracing::warn!(route = %event.chat_id, notice = text, "webhook event refused: busy");
    }

    async fn notice(&self, event: &InboundEvent, text: &str) {
        tracing::info!(route = %event.chat_id, entity = ?event.entity, notice = text, "webhook session notice");
    }
}

/// Fenced so that a command holding backticks cannot break out.
fn code_block(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}\n{text}\n{fence}")
}

#[async_trait::async_trait]
impl ApprovalPrompter for Routes {
    async fn show(&self, chat: &ChatRef, prompt: &Prompt) -> Result<String, String> {
        let (route, deliverer) = self
            .get(&chat.chat)
            .ok_or_else(|| format!("unknown webhook route {}", chat.chat))?;
        let github = deliverer
            .github()
            .ok_or("this route does not answer on GitHub")?;
        let issue = chat
            .thread
            .as_deref()
            .and_then(IssueRef::parse)
            .ok_or("this session names no pull request")?;
        let approvers: Vec<String> = route
            .approvers
            .iter()
            .map(|a| format!("@{}", a.trim_start_matches('@')))
            .collect();
        let body = format!(
            "⚠️ **Approval needed** — the agent wants to run:\n\n{}\n\nReason: {}\n\n\
             {} can answer with a comment: `/approve {id}`, `/approve {id} session`, \
             `/approve {id} always` or `/deny {id} [reason]`.",
            code_block(&prompt.command),
            prompt.reasons.join("; "),
            approvers.join(", "),
            id = prompt.approval_id
        );
        let id = github.create_comment(&issue, &body).await?;
        Ok(format!("{}#{id}", issue.repo))
    }

    async fn close(&self, chat: &ChatRef, message_id: &str, outcome: &str) -> Result<(), String> {
        let (_, deliverer) = self
            .get(&chat.chat)
            .ok_or_else(|| format!("unknown webhook route {}", chat.chat))?;
        let github = deliverer
            .github()
            .ok_or("this route does not answer on GitHub")?;
        let (repo, id) = message_id
            .split_once('#')
            .ok_or("malformed prompt reference")?;
        github.update_comment(repo, id, outcome).await
    }

    fn asks_for_humanless(&self, chat: &ChatRef) -> bool {
        self.get(&chat.chat)
            .is_some_and(|(route, d)| route.approval_comments && d.github().is_some())
    }
}
