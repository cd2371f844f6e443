//! The webhook receiver: `POST <route.path>` for GitHub, GitLab and CI
//! senders. Checks in order: body cap (413, the router's layer) →
//! signature (401) → per-route rate limit (429 + Retry-After) → filter →
//! idempotency on the delivery id and the inbox commit (through the
//! session manager; 503 + Retry-After when it is full) → 202, and the agent
//! runs in the background under the route's (restricted) toolsets. The
//! answer goes to the route's delivery target.

pub mod deliver;
pub mod events;
pub mod review;
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

use crate::adapters::Gateway;
use crate::config::{Config, DeliverKind, WebhookRoute};
use crate::http::AppState;
use crate::platform::RateLimiter;
use crate::platform::{
    AccessRules, Actor, Capabilities, ChatCommand, ChatKind, ChatRef, InboundEvent, KeyScheme,
    Platform, PlatformError, Preset, Profile, Prompt, PromptKind,
};
use crate::sessions::Submitted;
use crate::telemetry::events as internal;
use deliver::{Deliverer, IssueRef};
use events::{Classified, classify, delivery_id, event_name};
use verify::Verifier;

/// The platform id.
pub const ID: &str = crate::platform::WEBHOOK;

/// Webhook payloads are written by strangers (PR titles, CI logs): their
/// sessions get read-only research tools and clarify, nothing that runs
/// commands or writes files.
pub const WEBHOOK_TOOLS: &[&str] = &["web_search", "web_extract", "vision_analyze", "clarify"];

/// The webhook receiver as `[webhook]` describes it: signed deliveries
/// from anyone, sessions per entity (a pull request, a pipeline) with no
/// person behind them, the restricted preset unless a route names its own
/// toolsets; routes that answer on pull requests ask for approval there.
pub fn profile(config: &Config) -> Profile {
    let routes = &config.webhook.routes;
    Profile {
        id: ID.into(),
        access: AccessRules {
            open_when_empty: true,
            ..AccessRules::default()
        },
        toolsets: vec![crate::tools::toolsets::preset_name(ID)],
        chat_toolsets: routes
            .iter()
            .filter_map(|r| {
                let toolsets = match (&r.toolsets, &r.forge) {
                    (Some(named), _) => named.clone(),
                    // A route with a forge reads it; nothing else changes.
                    (None, Some(_)) => {
                        vec![crate::tools::toolsets::preset_name(ID), "forge".to_string()]
                    }
                    (None, None) => return None,
                };
                Some((r.name.clone(), toolsets))
            })
            .collect(),
        preset: Preset {
            description: "Webhook runs: untrusted input, read-only tools",
            tools: WEBHOOK_TOOLS,
            includes: &[],
        },
        human: false,
        keys: KeyScheme::Entity,
        asks_in: routes
            .iter()
            .filter(|r| r.approval_comments && r.deliver.kind == DeliverKind::GithubComment)
            .map(|r| r.name.clone())
            .collect(),
        // A comment counts only from the route's approvers.
        approvers: routes
            .iter()
            .filter(|r| r.approval_comments)
            .map(|r| (r.name.clone(), r.approvers.clone()))
            .collect(),
        live: crate::platform::STILL,
    }
}

/// Seconds a sender is asked to wait when the gateway is full.
const BUSY_RETRY_SECS: u64 = 5;

struct RouteState {
    route: WebhookRoute,
    verifier: Verifier,
    limiter: RateLimiter,
    gateway: Gateway,
    /// The login the route's token belongs to, learnt at start: its
    /// comments are the gateway's own and never commands.
    own_login: Arc<std::sync::OnceLock<String>>,
}

/// One route's answers and approval prompts.
struct Routes {
    deliverers: HashMap<String, (WebhookRoute, Deliverer)>,
    forges: Arc<crate::forge::Forges>,
}

impl Routes {
    fn get(&self, route: &str) -> Option<&(WebhookRoute, Deliverer)> {
        self.deliverers.get(route)
    }
}

/// Mounts the configured routes and attaches the webhook platform's port
/// (answers delivered to the route's target, approval prompts as PR
/// comments).
pub fn router(gateway: &Gateway) -> axum::Router<AppState> {
    let config = &gateway.config;
    let mut app = axum::Router::new();
    if !config.webhook.enabled {
        return app;
    }
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
            own_login: Arc::default(),
        });
        let deliverer = Deliverer::new(
            route,
            &gateway.env,
            gateway.sessions.deliveries(),
            gateway.platforms.clone(),
        );
        if let Some(github) = deliverer
            .github()
            .filter(|_| route.scheme == crate::config::SignatureScheme::Github)
            .cloned()
        {
            let (own, name) = (state.own_login.clone(), route.name.clone());
            let stop = gateway.sessions.stopping();
            // Until it is known, approval comments are refused (the token's
            // own comments, which the model may word, must not decide).
            gateway.tasks.spawn(async move {
                let mut wait = std::time::Duration::from_secs(1);
                loop {
                    let asked = tokio::time::timeout(std::time::Duration::from_secs(10), github.login());
                    match asked.await {
                        Ok(Ok(login)) => {
                            tracing::info!(route = %name, login, "the route's token belongs to this login");
                            let _ = own.set(login);
                            return;
                        }
                        Ok(Err(err)) => {
                            tracing::warn!(route = %name, error = %err, "cannot learn the login of the route's token; trying again")
                        }
                        Err(_) => tracing::warn!(route = %name, "learning the login of the route's token timed out; trying again"),
                    }
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(wait) => {}
                    }
                    wait = (wait * 2).min(std::time::Duration::from_secs(300));
                }
            });
        }
        app = app.route(&route.path, post(receive).with_state(state));
        deliverers.insert(route.name.clone(), (route.clone(), deliverer));
        tracing::info!(route = %route.name, path = %route.path, scheme = ?route.scheme, "webhook route mounted");
    }
    let routes = Arc::new(Routes {
        deliverers,
        forges: gateway.forges.clone(),
    });
    gateway.platforms.attach(ID, routes);
    let broker = gateway.broker.clone();
    gateway
        .tasks
        .spawn(async move { broker.platform_attached(ID).await });
    gateway.health.set(ID, true, "routes mounted");
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
        internal::emit(internal::WebhookAnswered {
            route: &route.name,
            outcome: "unauthorized",
        });
        return answer(
            StatusCode::UNAUTHORIZED,
            json!({ "error": err.to_string() }),
        );
    }
    if let Err(wait) = state.limiter.take() {
        internal::emit(internal::WebhookAnswered {
            route: &route.name,
            outcome: "rate_limited",
        });
        return retry_after(
            StatusCode::TOO_MANY_REQUESTS,
            wait,
            json!({ "error": "rate limit exceeded" }),
        );
    }
    let payload = match parse_payload(&headers, &body) {
        Ok(v) => v,
        Err(err) => {
            tracing::warn!(route = %route.name, error = %err, "webhook body unreadable");
            internal::emit(internal::WebhookAnswered {
                route: &route.name,
                outcome: "malformed",
            });
            return answer(StatusCode::BAD_REQUEST, json!({ "error": err.to_string() }));
        }
    };
    let event = event_name(route.scheme, &headers, &payload);
    let delivery = delivery_id(route.scheme, &headers, &body);
    let own = state.own_login.get().map(String::as_str);
    let outcome = match classify(route, own, &event, &delivery, &payload) {
        Classified::Skip(reason) => {
            tracing::debug!(route = %route.name, event, reason, "webhook event skipped");
            answer(
                StatusCode::OK,
                json!({ "status": "ignored", "reason": reason }),
            )
        }
        Classified::Approval {
            text,
            login,
            account,
        } => approval_comment(&state, &payload, &text, (&login, account)).await,
        Classified::Run {
            entity,
            prompt,
            sender,
        } => {
            let event_id = format!("{}:{delivery}", route.name);
            let (prompt, describe) =
                match forge_intake(&state, (&event, &event_id, &entity), prompt, &payload).await {
                    Ok(prompts) => prompts,
                    Err(answered) => return answered,
                };
            let inbound = InboundEvent {
                platform: ID.into(),
                kind: ChatKind::Group,
                chat_id: route.name.clone(),
                thread_id: Some(entity),
                user_id: sender.clone(),
                user_name: sender,
                roles: Vec::new(),
                text: prompt,
                // A forge route's answer finds its event's scope by it.
                message_id: route.forge.is_some().then(|| event_id.clone()),
                event_id,
                mentioned: true,
                from_bot: false,
                in_thread: false,
                attachments: Vec::new(),
                revision: crate::platform::Revision::New,
            };
            let second = describe.map(|text| {
                let id = review::describe_id(&inbound.event_id);
                InboundEvent {
                    text,
                    message_id: Some(id.clone()),
                    event_id: id,
                    ..inbound.clone()
                }
            });
            let first = submit(&state, inbound).await;
            match second {
                // Both are stored before the delivery is answered: when the
                // second is not, the sender's retry brings it (the first is
                // then a duplicate).
                Some(second) if first.status().is_success() => {
                    let answered = submit(&state, second).await;
                    if answered.status().is_success() {
                        first
                    } else {
                        answered
                    }
                }
                _ => first,
            }
        }
    };
    let label = match outcome.status().as_u16() {
        202 => "accepted",
        200 => "acknowledged",
        503 => "busy",
        _ => "error",
    };
    internal::emit(internal::WebhookAnswered {
        route: &route.name,
        outcome: label,
    });
    outcome
}

/// The prompt of an event on a route with a forge (its scope stored), or
/// the answer when it does not run.
async fn forge_intake(
    state: &RouteState,
    ids: (&str, &str, &str),
    prompt: String,
    payload: &Value,
) -> Result<(String, Option<String>), Response> {
    let route = &state.route;
    let Some(forge) = state.gateway.forges.get(&route.name) else {
        return Ok((prompt, None));
    };
    let done = |status: &str, reason: &str| {
        internal::emit(internal::WebhookAnswered {
            route: &route.name,
            outcome: "acknowledged",
        });
        answer(
            StatusCode::OK,
            json!({ "status": status, "reason": reason }),
        )
    };
    match review::intake(forge, route, ids, prompt, payload).await {
        Ok(review::Intake::Run(prompt, describe)) => Ok((prompt, describe)),
        Ok(review::Intake::Done(reason)) => Err(done("done", reason)),
        Ok(review::Intake::Skip(reason)) => Err(done("ignored", reason)),
        Err(err) => {
            tracing::error!(route = %route.name, error = %err, "webhook event could not be stored");
            Err(retry_after(
                StatusCode::SERVICE_UNAVAILABLE,
                BUSY_RETRY_SECS,
                json!({ "error": "the event could not be stored; retry later" }),
            ))
        }
    }
}

/// Why a signed body holds no payload.
#[derive(Debug, thiserror::Error)]
enum Unreadable {
    #[error("form body without a payload field")]
    NoPayloadField,
    #[error("payload is not JSON: {0}")]
    FormPayload(serde_json::Error),
    #[error("body is not JSON: {0}")]
    Body(serde_json::Error),
}

/// The JSON payload: the body itself, or its `payload` field when the
/// sender posts a form (GitHub's `application/x-www-form-urlencoded`
/// content type). The signature was checked over the raw body either way.
fn parse_payload(headers: &HeaderMap, body: &[u8]) -> Result<Value, Unreadable> {
    let form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if form {
        let payload = url::form_urlencoded::parse(body)
            .find(|(k, _)| k == "payload")
            .map(|(_, v)| v.into_owned())
            .ok_or(Unreadable::NoPayloadField)?;
        return serde_json::from_str(&payload).map_err(Unreadable::FormPayload);
    }
    serde_json::from_slice(body).map_err(Unreadable::Body)
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
        // (Routes have their own limit; a chat's never applies here.)
        Ok(Submitted::Throttled) => retry_after(
            StatusCode::TOO_MANY_REQUESTS,
            BUSY_RETRY_SECS,
            json!({ "error": "too many events; retry later" }),
        ),
        Ok(Submitted::OverBudget) => match state.gateway.config.budgets.webhook_over_budget {
            crate::config::OverBudget::Accept => answer(
                StatusCode::ACCEPTED,
                json!({ "status": "over budget", "reason": "the route's budget is spent; the event was recorded and not run" }),
            ),
            crate::config::OverBudget::Reject => retry_after(
                StatusCode::TOO_MANY_REQUESTS,
                BUSY_RETRY_SECS,
                json!({ "error": "the route's budget is spent; retry after it resets" }),
            ),
        },
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
    (login, account): (&str, Option<u64>),
) -> Response {
    let route = &state.route;
    if !route.approval_comments {
        return answer(
            StatusCode::OK,
            json!({ "status": "ignored", "reason": "approval comments are off for this route" }),
        );
    }
    if route.deliver.kind == crate::config::DeliverKind::GithubComment
        && route.bot_login.is_none()
        && state.own_login.get().is_none()
    {
        // Its token's own comments are not told apart yet.
        return answer(
            StatusCode::OK,
            json!({ "status": "refused", "reason": "the login of the route's token is not known yet; try again shortly" }),
        );
    }
    // On a route serving many pull requests "the oldest pending" is
    // ambiguous: the comment must name the approval.
    let command = ChatCommand::parse(text).filter(|c| {
        matches!(
            c,
            ChatCommand::Approve { id: Some(_), .. } | ChatCommand::Deny { id: Some(_), .. }
        )
    });
    let Some(command) = command else {
        return answer(
            StatusCode::OK,
            json!({ "status": "refused", "reason": "name the approval id: /approve <id>" }),
        );
    };
    let chat = ChatRef {
        platform: ID.into(),
        chat: route.name.clone(),
        thread: None,
    };
    let actor = Actor {
        platform: "github".into(),
        user_id: login.to_string(),
        name: format!("@{login}"),
        account,
    };
    let result = state.gateway.sessions.decide(&chat, &actor, &command).await;
    let number = crate::render::template::lookup(payload, "issue.number").and_then(Value::as_u64);
    match result {
        Ok((decision, asked)) => {
            tracing::info!(route = %route.name, login, pr = ?number, decision = %decision.describe(), "approval decided by comment");
            answer(
                StatusCode::OK,
                json!({ "status": "decided", "decision": decision.describe(), "command": asked }),
            )
        }
        Err(refusal) => {
            tracing::warn!(route = %route.name, login, refusal = %refusal, "approval comment refused");
            answer(
                StatusCode::OK,
                json!({ "status": "refused", "reason": refusal.to_string() }),
            )
        }
    }
}

impl Routes {
    fn github(
        &self,
        route: &str,
    ) -> Result<(&WebhookRoute, &deliver::GithubClient), PlatformError> {
        let (route, deliverer) = self
            .get(route)
            .ok_or_else(|| PlatformError::NotFound(format!("webhook route {route}")))?;
        let github = deliverer.github().ok_or_else(|| {
            PlatformError::Rejected("this route does not answer on GitHub".into())
        })?;
        Ok((route, github))
    }
}

/// A GitHub answer as the port's error.
fn github_error(err: crate::forge::api::Failure) -> PlatformError {
    PlatformError::Unavailable(err.message)
}

#[async_trait::async_trait]
impl Platform for Routes {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            text_limit: 65_000,
            buttons: false,
            edits: true,
            threads: true,
            downloads: false,
        }
    }

    /// The answer goes to the route's delivery target; failures are
    /// retried and recorded there.
    async fn send(
        &self,
        to: &ChatRef,
        reply_to: Option<&str>,
        text: &str,
    ) -> Result<String, PlatformError> {
        let entity = to.thread.as_deref().unwrap_or_default();
        // A forge route's run answers on the forge, as its event's scope
        // (found by the event id it replies to) says.
        if let (Some(forge), Some(event_id)) = (self.forges.get(&to.chat), reply_to) {
            forge.publish(event_id, entity, text).await?;
            return Ok(String::new());
        }
        let (_, deliverer) = self
            .get(&to.chat)
            .ok_or_else(|| PlatformError::NotFound(format!("webhook route {}", to.chat)))?;
        deliverer.deliver(entity, text).await?;
        Ok(String::new())
    }

    async fn ask(&self, at: &ChatRef, prompt: &Prompt) -> Result<String, PlatformError> {
        if prompt.kind != PromptKind::Approval {
            return Err(PlatformError::Rejected(
                "webhook sessions ask no questions".into(),
            ));
        }
        let (route, github) = self.github(&at.chat)?;
        let issue = at
            .thread
            .as_deref()
            .and_then(IssueRef::parse)
            .ok_or_else(|| PlatformError::Rejected("this session names no pull request".into()))?;
        let approvers: Vec<String> = route
            .approvers
            .iter()
            .filter_map(|a| a.strip_prefix("github:"))
            .map(|who| match who.strip_prefix('#') {
                Some(number) => format!("account {number}"),
                None => format!("@{}", who.trim_start_matches('@')),
            })
            .collect();
        let body = format!(
            "{}\n\n{} can answer with a comment: `/approve {id}`, `/approve {id} session`, \
             `/approve {id} always` or `/deny {id} [reason]`.",
            prompt.text,
            approvers.join(", "),
            id = prompt.id
        );
        let id = github
            .create_comment(&issue, &body)
            .await
            .map_err(github_error)?;
        Ok(format!("{}#{id}", issue.repo))
    }

    async fn edit(&self, at: &ChatRef, message: &str, outcome: &str) -> Result<(), PlatformError> {
        let (_, github) = self.github(&at.chat)?;
        let (repo, id) = message
            .split_once('#')
            .ok_or_else(|| PlatformError::Rejected("malformed prompt reference".into()))?;
        github
            .update_comment(repo, id, outcome)
            .await
            .map_err(github_error)
    }
}
