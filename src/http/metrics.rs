//! `GET /metrics` and the middleware that counts and times every request.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub(super) async fn render() -> impl IntoResponse {
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        crate::telemetry::metrics().render(),
    )
}

/// Records `switchboard_http_requests_total{method,route,status}` and
/// `switchboard_http_request_duration_seconds{method,route}`. Unmatched
/// paths share one label value so scanners cannot blow up cardinality.
pub(super) async fn track(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().as_str().to_string();
    let started = Instant::now();
    let response = next.run(request).await;
    crate::telemetry::events::emit(crate::telemetry::events::HttpAnswered {
        method: &method,
        route: &route,
        status: response.status().as_u16(),
        took: started.elapsed(),
    });
    response
}
