//! The HTTP router, driven with `oneshot` (no socket): health, readiness,
//! metrics, body cap and request timeout.

use crate::common;

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::{get, post};
use http_body_util::BodyExt;
use switchboard::config::ServerConfig;
use switchboard::http::{AppState, router};
use switchboard::telemetry::Health;
use tower::ServiceExt;

struct Harness {
    app: Router,
    health: Health,
    state: AppState,
    _dir: tempfile::TempDir,
}

async fn harness(server: ServerConfig) -> Harness {
    let (store, dir) = common::sqlite_store().await;
    let health = Health::default();
    let state = AppState {
        store,
        health: health.clone(),
    };
    let extra = Router::new()
        .route(
            "/test/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "late"
            }),
        )
        .route(
            "/test/echo",
            post(|body: axum::body::Bytes| async move { body.len().to_string() }),
        );
    Harness {
        app: router(state.clone(), &server, extra),
        health,
        state,
        _dir: dir,
    }
}

async fn call(app: &Router, request: Request<Body>) -> (StatusCode, String) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn get_req(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

#[tokio::test]
async fn healthz_answers_ok() {
    let h = harness(ServerConfig::default()).await;
    let (status, body) = call(&h.app, get_req("/healthz")).await;
    assert_eq!(status, StatusCode::OK);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["status"], "ok");
    assert_eq!(json["version"], env!("CARGO_PKG_VERSION"));
}

#[tokio::test]
async fn readyz_reports_storage_and_components() {
    let h = harness(ServerConfig::default()).await;
    let (status, body) = call(&h.app, get_req("/readyz")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["checks"]["storage"]["ready"], true);

    h.health.set("telegram", false, "connecting to the Bot API");
    let (status, body) = call(&h.app, get_req("/readyz")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["status"], "not ready");
    assert_eq!(json["reasons"][0], "telegram: connecting to the Bot API");

    h.health.set("telegram", true, "connected");
    let (status, _) = call(&h.app, get_req("/readyz")).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn readyz_fails_when_storage_is_gone() {
    let h = harness(ServerConfig::default()).await;
    h.state.store.close().await;
    let (status, body) = call(&h.app, get_req("/readyz")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["checks"]["storage"]["ready"], false);
    assert!(
        json["reasons"][0]
            .as_str()
            .unwrap()
            .starts_with("storage: ")
    );
}

#[tokio::test]
async fn metrics_count_requests_by_route_and_status() {
    let h = harness(ServerConfig::default()).await;
    call(&h.app, get_req("/healthz")).await;
    call(&h.app, get_req("/no/such/path/123")).await;
    let (status, body) = call(&h.app, get_req("/metrics")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("switchboard_build_info{version=\""), "{body}");
    let healthz = body
        .lines()
        .find(|l| {
            l.starts_with("switchboard_http_requests_total") && l.contains("route=\"/healthz\"")
        })
        .unwrap_or_else(|| panic!("no healthz counter in\n{body}"));
    assert!(healthz.contains("status=\"200\""));
    assert!(
        body.contains("route=\"unmatched\""),
        "unknown paths share one label"
    );
    assert!(
        !body.contains("/no/such/path"),
        "raw paths never become labels"
    );
    assert!(body.contains("switchboard_http_request_duration_seconds_bucket"));
}

#[tokio::test]
async fn junk_methods_and_paths_add_no_series() {
    let h = harness(ServerConfig::default()).await;
    for i in 0..400 {
        let request = Request::builder()
            .method(format!("JUNK{i}").as_str())
            .uri(format!("/scan/{i}/x"))
            .body(Body::empty())
            .unwrap();
        call(&h.app, request).await;
    }
    let (_, body) = call(&h.app, get_req("/metrics")).await;
    assert!(!body.contains("JUNK"), "raw methods never become labels");
    assert!(!body.contains("/scan/"), "raw paths never become labels");
    let allowed = [
        "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "CONNECT", "TRACE", "OTHER",
    ];
    let series: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("switchboard_http_requests_total{"))
        .collect();
    for line in &series {
        let method = line
            .split("method=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap();
        assert!(allowed.contains(&method), "{line}");
    }
    assert!(
        body.contains("method=\"OTHER\",route=\"unmatched\""),
        "junk is counted, under one series"
    );
    assert!(series.len() < 100, "{} series", series.len());
}

#[tokio::test]
async fn oversized_body_gets_413() {
    let server = ServerConfig {
        max_body_bytes: 1024,
        ..ServerConfig::default()
    };
    let h = harness(server).await;
    let (status, body) = call(
        &h.app,
        Request::post("/test/echo")
            .body(Body::from(vec![b'x'; 1000]))
            .unwrap(),
    )
    .await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "1000"));
    let (status, _) = call(
        &h.app,
        Request::post("/test/echo")
            .body(Body::from(vec![b'x'; 1025]))
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    // A streamed body without Content-Length is cut off too.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..4).map(|_| Ok(vec![b'y'; 512])).collect();
    let streamed = Body::from_stream(futures_stream(chunks));
    let (status, _) = call(&h.app, Request::post("/test/echo").body(streamed).unwrap()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

fn futures_stream(
    items: Vec<Result<Vec<u8>, std::io::Error>>,
) -> impl futures_core::Stream<Item = Result<Vec<u8>, std::io::Error>> + Send + 'static {
    tokio_stream::iter(items)
}

#[tokio::test]
async fn slow_request_gets_408() {
    let server = ServerConfig {
        request_timeout_secs: 2,
        ..ServerConfig::default()
    };
    let h = harness(server).await;
    tokio::time::pause();
    let (status, _) = call(&h.app, get_req("/test/slow")).await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
}
