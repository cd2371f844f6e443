//! The operator console (`[console]`): a small server-rendered web page on
//! a listener of its own (never the webhook port) for what the CLI knows —
//! health, approvals, sessions, deliveries, jobs and spend.
//!
//! Login is a token from an environment variable, compared in constant
//! time, exchanged for a session cookie (HttpOnly, SameSite=Strict, Secure
//! behind https) that expires; every form carries the login's CSRF token,
//! checked on every action; every action is recorded in `console_audit`
//! with `console` as the actor (approval decisions also in the approvals'
//! hash chain, through the same broker path as a chat's button). Pages
//! use no script and nothing from elsewhere: they work offline.

mod actions;
mod auth;
mod charts;
mod pages;

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::routing::{get, post};
use secrecy::SecretString;

use crate::approvals::Broker;
use crate::cluster::Cluster;
use crate::config::Config;
use crate::platform::Actor;
use crate::sessions::SessionManager;
use crate::store::Store;
use crate::telemetry::Health;

/// What the console reads and acts on, handed over by the daemon.
#[derive(Clone, Debug)]
pub struct State {
    /// The loaded configuration.
    pub config: Arc<Config>,
    /// The database.
    pub store: Store,
    /// Outbound retries go through it.
    pub sessions: SessionManager,
    /// Approval decisions go through it, as a chat's buttons do.
    pub broker: Arc<Broker>,
    /// Component readiness.
    pub health: Health,
    /// This replica among the others.
    pub cluster: Cluster,
}

/// The console's shared state.
#[derive(Clone)]
pub(crate) struct Console {
    state: State,
    logins: Arc<auth::Logins>,
}

/// Who acts through the console, in audits and decisions.
fn operator() -> Actor {
    Actor {
        platform: "console".into(),
        user_id: "operator".into(),
        name: "console".into(),
        account: None,
    }
}

/// The console's routes over `state`, logging in with `token`.
pub fn router(state: State, token: SecretString) -> Router {
    let c = &state.config;
    let secure = c.server.public_url.starts_with("https://");
    let hours = c.console.session_hours.max(1);
    let server = c.server.clone();
    let console = Console {
        logins: Arc::new(auth::Logins::new(token, secure, hours)),
        state,
    };
    let app = Router::new()
        .route("/login", get(auth::login_page).post(auth::login))
        .route("/logout", post(auth::logout))
        .route("/", get(pages::overview))
        .route("/approvals", get(pages::approvals))
        .route("/approvals/{id}", post(actions::decide))
        .route("/sessions", get(pages::sessions))
        .route("/sessions/{id}", get(pages::transcript))
        .route("/deliveries", get(pages::deliveries))
        .route("/outbox/{id}/retry", post(actions::retry))
        .route("/jobs", get(pages::jobs))
        .with_state(console)
        .layer(axum::middleware::from_fn(headers));
    crate::http::bounded(app, &server)
}

/// What every answer of the console carries: nothing runs but its own
/// inline styles, nothing is framed, cached or sent on as a referrer.
async fn headers(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    response
}
