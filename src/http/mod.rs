//! The HTTP face of the daemon: health, readiness, metrics, and (from the
//! adapters) webhook and platform callback routes. [`router`] builds the
//! whole `Router` so tests can drive it with `oneshot`, no socket needed.

pub mod client;
mod health;
mod metrics;
mod serve;

pub use serve::{Limits, serve};

use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::StatusCode;
use axum::routing::get;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::config::ServerConfig;
use crate::store::Store;
use crate::telemetry::Health;

/// What the handlers share.
#[derive(Clone, Debug)]
pub struct AppState {
    /// The database.
    pub store: Store,
    /// Component readiness.
    pub health: Health,
}

/// `app` with the body cap (413) and the request timeout (408) every
/// listener of the gateway has, the operator console's included.
pub fn bounded(app: Router, server: &ServerConfig) -> Router {
    app.layer(DefaultBodyLimit::max(server.max_body_bytes))
        .layer(RequestBodyLimitLayer::new(server.max_body_bytes))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            Duration::from_secs(server.request_timeout_secs),
        ))
}

/// Builds the router with its layers: per-request span, metrics, timeout
/// (408) and body cap (413). `routes` are the components' own routes
/// (webhooks, platform callbacks); they get the same layers.
pub fn router(state: AppState, server: &ServerConfig, routes: Router<AppState>) -> Router {
    // Install the recorder before the first request is counted.
    crate::telemetry::metrics();
    let app = Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics::render))
        .merge(routes)
        .with_state(state)
        .layer(axum::middleware::from_fn(metrics::track));
    bounded(app, server).layer(
        TraceLayer::new_for_http().make_span_with(|request: &Request| {
            // The path only: query strings may carry tokens.
            tracing::info_span!(
                "http",
                http.method = %request.method(),
                http.path = %request.uri().path(),
            )
        }),
    )
}
