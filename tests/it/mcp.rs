//! MCP servers: a real stdio server process (tests/fixtures/mcp_fixture.rs)
//! and an in-process streamable HTTP server, both driven through the
//! registry; a dying server makes its tools unavailable and comes back.

use crate::common;
use common::tools::runtime;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::response::IntoResponse;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, schemars, tool, tool_handler, tool_router};
use serde_json::json;
use switchboard::config::{Env, McpServerConfig};
use switchboard::telemetry::Health;
use switchboard::tools::mcp;
use tokio_util::sync::CancellationToken;

/// The fixture server binary, built by cargo beside the test binaries.
fn fixture() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let debug = exe.parent().unwrap().parent().unwrap();
    let path = debug.join("examples").join("mcp_fixture");
    assert!(
        path.exists(),
        "{} missing: build with cargo test (it builds examples)",
        path.display()
    );
    path
}

fn stdio_server(timeout_secs: u64) -> McpServerConfig {
    McpServerConfig {
        name: "fixture".into(),
        command: Some(fixture().display().to_string()),
        args: vec![],
        env: Default::default(),
        url: None,
        headers: Default::default(),
        timeout_secs,
    }
}

async fn until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn a_stdio_server_starts_from_an_empty_environment_plus_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    let mut server = stdio_server(5);
    server.env.insert("FIXTURE_SETTING".into(), "on".into());
    let (_client, _alive) = mcp::connect_and_register(&server, &Env::default(), &rt.registry)
        .await
        .unwrap();
    let names = rt.registry.dispatch("env", json!({}), &ctx).await;
    assert_eq!(
        names, "FIXTURE_SETTING,PATH",
        "the daemon's environment leaked"
    );
}

#[tokio::test]
async fn stdio_server_tools_dispatch_through_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    let (client, _alive) =
        mcp::connect_and_register(&stdio_server(1), &Env::default(), &rt.registry)
            .await
            .unwrap();

    let tools = rt.toolsets.resolve("mcp-fixture").unwrap();
    assert_eq!(
        tools.iter().cloned().collect::<Vec<_>>(),
        ["add", "crash", "echo", "env", "fail", "slow"]
    );
    assert!(rt.toolsets.resolve("all").unwrap().contains("echo"));

    let echo = rt
        .registry
        .dispatch("echo", json!({"text": "hi there"}), &ctx)
        .await;
    assert_eq!(echo, "hi there");
    let add = rt
        .registry
        .dispatch("add", json!({"a": "40", "b": 2}), &ctx)
        .await;
    assert_eq!(add, "42", "arguments coerced by the MCP schema");
    let fail = common::call(&rt, "fail", json!({}), &ctx).await;
    assert!(
        fail["error"]
            .as_str()
            .unwrap()
            .contains("failed on purpose"),
        "{fail}"
    );
    let slow = common::call(&rt, "slow", json!({"ms": 1500}), &ctx).await;
    assert!(
        slow["error"]
            .as_str()
            .unwrap()
            .contains("did not answer within"),
        "{slow}"
    );
    let _ = client.cancel().await;
}

#[tokio::test]
async fn a_dead_server_goes_unavailable_and_is_reconnected() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    let health = Health::default();
    let stop = CancellationToken::new();
    let supervisor = tokio::spawn(mcp::supervise(
        stdio_server(5),
        Env::default(),
        rt.registry.clone(),
        health.clone(),
        stop.clone(),
    ));

    let registry = rt.registry.clone();
    until("first connection", Duration::from_secs(20), || {
        registry.get("echo").is_some()
    })
    .await;
    assert!(health.snapshot()["mcp-fixture"].ready);
    let generation = rt.registry.generation();

    let crashed = common::call(&rt, "crash", json!({}), &ctx).await;
    assert!(crashed.get("error").is_some(), "{crashed}");
    let h = health.clone();
    until("unhealthy", Duration::from_secs(10), || {
        !h.snapshot()["mcp-fixture"].ready
    })
    .await;
    until("re-registration", Duration::from_secs(20), || {
        registry.generation() > generation + 1 && h.snapshot()["mcp-fixture"].ready
    })
    .await;
    assert_eq!(
        rt.registry
            .dispatch("echo", json!({"text": "back"}), &ctx)
            .await,
        "back"
    );

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), supervisor)
        .await
        .unwrap()
        .unwrap();
    assert!(!health.snapshot().contains_key("mcp-fixture"));
}

#[tokio::test]
async fn unavailable_while_disconnected() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    let (client, alive) =
        mcp::connect_and_register(&stdio_server(5), &Env::default(), &rt.registry)
            .await
            .unwrap();
    alive.store(false, std::sync::atomic::Ordering::SeqCst);
    rt.registry.invalidate_checks();
    let out = common::call(&rt, "echo", json!({"text": "x"}), &ctx).await;
    assert_eq!(
        out["error"],
        "Tool echo is currently unavailable: MCP server fixture is not connected"
    );
    assert!(
        !rt.toolsets
            .session_tools(&["mcp-fixture".into()], &[])
            .unwrap()
            .iter()
            .any(|t| t.spec.name == "echo")
    );
    let _ = client.cancel().await;
}

#[tokio::test]
async fn a_server_that_cannot_start_is_reported() {
    let rt = runtime();
    let mut config = stdio_server(5);
    config.command = Some("/nonexistent/mcp-server".into());
    let err = mcp::connect_and_register(&config, &Env::default(), &rt.registry)
        .await
        .unwrap_err();
    assert!(matches!(err, mcp::McpError::Spawn { .. }), "{err}");
    assert!(err.to_string().contains("cannot start"), "{err}");
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct MulArgs {
    a: i64,
    b: i64,
}

#[derive(Clone)]
struct Remote;

#[tool_router]
impl Remote {
    #[tool(description = "Multiply two integers")]
    fn multiply(&self, Parameters(MulArgs { a, b }): Parameters<MulArgs>) -> String {
        (a * b).to_string()
    }
}

#[tool_handler]
impl ServerHandler for Remote {}

/// An in-process streamable HTTP MCP server; with `token`, it answers
/// 401 to requests without `Authorization: Bearer <token>`.
async fn http_server(token: Option<&'static str>) -> String {
    let config = StreamableHttpServerConfig::default();
    let service: StreamableHttpService<Remote, LocalSessionManager> =
        StreamableHttpService::new(|| Ok(Remote), Arc::default(), config);
    let router =
        axum::Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn(
                move |req: axum::extract::Request, next: axum::middleware::Next| async move {
                    let expected = token.map(|t| format!("Bearer {t}"));
                    let given = req
                        .headers()
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    if expected.is_some() && given != expected {
                        return axum::http::StatusCode::UNAUTHORIZED.into_response();
                    }
                    next.run(req).await
                },
            ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{addr}/mcp")
}

fn http_config(url: String, headers: &[(&str, &str)]) -> McpServerConfig {
    McpServerConfig {
        name: "remote".into(),
        command: None,
        args: vec![],
        env: Default::default(),
        url: Some(url),
        headers: headers
            .iter()
            .map(|(h, v)| (h.to_string(), v.to_string()))
            .collect(),
        timeout_secs: 5,
    }
}

#[tokio::test]
async fn streamable_http_server_tools_work_too() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    let server = http_config(http_server(None).await, &[]);
    let (client, _) = mcp::connect_and_register(&server, &Env::default(), &rt.registry)
        .await
        .unwrap();
    assert_eq!(
        rt.registry.get("multiply").unwrap().spec.toolset,
        "mcp-remote"
    );
    assert_eq!(
        rt.registry
            .dispatch("multiply", json!({"a": 6, "b": 7}), &ctx)
            .await,
        "42"
    );
    let _ = client.cancel().await;
}

#[tokio::test]
async fn an_http_server_that_needs_a_token_gets_it_from_the_environment() {
    let url = http_server(Some("s3cret")).await;
    let rt = runtime();
    let bare = mcp::connect_and_register(
        &http_config(url.clone(), &[]),
        &Env::default(),
        &rt.registry,
    )
    .await;
    assert!(bare.is_err(), "refused without the header");

    let server = http_config(url, &[("Authorization", "REMOTE_MCP_AUTH")]);
    let missing = mcp::connect_and_register(&server, &Env::default(), &rt.registry)
        .await
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(missing.contains("REMOTE_MCP_AUTH is not set"), "{missing}");

    let env = Env::from_pairs([("REMOTE_MCP_AUTH", "Bearer s3cret")]);
    let (client, _) = mcp::connect_and_register(&server, &env, &rt.registry)
        .await
        .unwrap();
    assert!(rt.registry.get("multiply").is_some());
    let _ = client.cancel().await;
}
