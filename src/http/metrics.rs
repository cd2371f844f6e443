//! `GET /metrics` and the middleware that counts and times every request.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub(super) async fn render() -> impl IntoResponse {
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        crate::telemetry::metrics().render(),
    )
}

/// The `method` label: one of HTTP's methods, else `OTHER` (any token is a
/// valid method, so a scanner could otherwise add a series per request).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "OTHER",
    }
}

/// Records `switchboard_http_requests_total{method,route,status}` and
/// `switchboard_http_request_duration_seconds{method,route}`. Every label
/// comes from a closed set: the method from [`method_label`], the route is
/// the matched route pattern (unmatched paths share one value), the status
/// a code the gateway answers with.
pub(super) async fn track(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = method_label(request.method());
    let started = Instant::now();
    let response = next.run(request).await;
    crate::telemetry::events::emit(crate::telemetry::events::HttpAnswered {
        method,
        route: &route,
        status: response.status().as_u16(),
        took: started.elapsed(),
    });
    response
}
