//! web_extract (readable text, SSRF guard on every hop, size cap) and
//! web_search (SearXNG, Brave and Tavily wire formats) against local fakes.

use crate::common;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect};
use axum::routing::{get, post};
use common::call;
use serde_json::{Value, json};
use switchboard::config::{Config, Env, SearchProvider};
use switchboard::tools::ToolRuntime;

type Seen = Arc<Mutex<Vec<String>>>;

async fn serve(seen: Seen) -> String {
    let app = Router::new()
        .route(
            "/page",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                    "<html><head><title>Release notes</title><script>evil()</script></head>\
                     <body><h1>Version 2</h1><p>Faster <b>builds</b>.</p><ul><li>one</li></ul></body></html>",
                )
            }),
        )
        .route("/redirect", get(|| async { Redirect::temporary("/page") }))
        .route("/to-private", get(|| async { Redirect::temporary("http://10.255.255.1/admin") }))
        .route("/to-metadata", get(|| async { Redirect::temporary("http://169.254.169.254/latest/meta-data/") }))
        .route("/big", get(|| async { ([(header::CONTENT_TYPE, "text/plain")], "y".repeat(100_000)) }))
        .route("/bin", get(|| async { ([(header::CONTENT_TYPE, "application/octet-stream")], vec![0u8; 10]) }))
        .route("/missing", get(|| async { StatusCode::NOT_FOUND }))
        .route(
            "/search",
            get(|State(seen): State<Seen>, Query(q): Query<Vec<(String, String)>>| async move {
                seen.lock().unwrap().push(format!("searxng {q:?}"));
                axum::Json(json!({"results": [
                    {"title": "Rust", "url": "https://rust-lang.org", "content": "A language"},
                    {"title": "Tokio", "url": "https://tokio.rs", "content": "Async runtime"}
                ]}))
            }),
        )
        .route(
            "/brave",
            get(|State(seen): State<Seen>, headers: HeaderMap, Query(q): Query<Vec<(String, String)>>| async move {
                let token = headers.get("x-subscription-token").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                seen.lock().unwrap().push(format!("brave {q:?} token={token}"));
                if token != "brave-key" {
                    return StatusCode::UNAUTHORIZED.into_response();
                }
                axum::Json(json!({"web": {"results": [{"title": "B", "url": "https://b.example", "description": "from brave"}]}})).into_response()
            }),
        )
        .route(
            "/tavily",
            post(|State(seen): State<Seen>, headers: HeaderMap, body: axum::Json<Value>| async move {
                let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                seen.lock().unwrap().push(format!("tavily {} auth={auth}", body.0));
                axum::Json(json!({"results": [{"title": "T", "url": "https://t.example", "content": "from tavily"}]}))
            }),
        )
        .with_state(seen);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn runtime(edit: impl FnOnce(&mut Config), env: Env) -> ToolRuntime {
    let mut config = Config::default();
    edit(&mut config);
    ToolRuntime::build(&config, &env, switchboard::adapters::platforms(&config)).unwrap()
}

fn allow_loopback(c: &mut Config) {
    c.tools.web_extract.allow_hosts = vec!["127.0.0.1".into()];
}

#[tokio::test]
async fn extracts_readable_text_and_follows_redirects() {
    let base = serve(Seen::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime(allow_loopback, Env::default());
    let page = call(
        &rt,
        "web_extract",
        json!({"url": format!("{base}/redirect")}),
        &ctx,
    )
    .await;
    assert_eq!(page["title"], "Release notes", "{page}");
    assert_eq!(page["url"], format!("{base}/page"));
    let content = page["content"].as_str().unwrap();
    assert!(
        content.contains("Version 2") && content.contains("builds"),
        "{content}"
    );
    assert!(
        !content.contains("<p>") && !content.contains("evil()"),
        "{content}"
    );
}

#[tokio::test]
async fn loopback_private_and_metadata_addresses_are_refused() {
    let base = serve(Seen::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let strict = runtime(|_| {}, Env::default());
    let port = base.rsplit(':').next().unwrap();
    for url in [
        format!("{base}/page"),
        format!("http://localhost:{port}/page"),
        format!("http://[::1]:{port}/page"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://10.0.0.1/".to_string(),
        "http://0.0.0.0/".to_string(),
    ] {
        let out = call(&strict, "web_extract", json!({"url": url}), &ctx).await;
        let err = out["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{url} fetched: {out}"));
        assert!(err.contains("not allowed"), "{url}: {err}");
    }
    let file = call(
        &strict,
        "web_extract",
        json!({"url": "file:///etc/passwd"}),
        &ctx,
    )
    .await;
    assert!(
        file["error"]
            .as_str()
            .unwrap()
            .contains("only http and https")
    );

    // An allowed host cannot bounce the fetch to a forbidden one.
    let lenient = runtime(allow_loopback, Env::default());
    for hop in ["to-private", "to-metadata"] {
        let out = call(
            &lenient,
            "web_extract",
            json!({"url": format!("{base}/{hop}")}),
            &ctx,
        )
        .await;
        assert!(
            out["error"]
                .as_str()
                .unwrap_or_default()
                .contains("not allowed"),
            "{hop}: {out}"
        );
    }
    let via_name = call(
        &lenient,
        "web_extract",
        json!({"url": format!("http://localhost:{port}/page")}),
        &ctx,
    )
    .await;
    assert!(
        via_name["error"]
            .as_str()
            .unwrap_or_default()
            .contains("not allowed"),
        "only the listed host name is allowed"
    );
}

#[tokio::test]
async fn bodies_are_capped_and_odd_content_refused() {
    let base = serve(Seen::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime(
        |c| {
            allow_loopback(c);
            c.tools.web_extract.max_body_bytes = 1000;
        },
        Env::default(),
    );
    let big = call(
        &rt,
        "web_extract",
        json!({"url": format!("{base}/big")}),
        &ctx,
    )
    .await;
    assert_eq!(big["content"].as_str().unwrap().len(), 1000);
    let bin = call(
        &rt,
        "web_extract",
        json!({"url": format!("{base}/bin")}),
        &ctx,
    )
    .await;
    assert!(
        bin["error"]
            .as_str()
            .unwrap()
            .contains("unsupported content type")
    );
    let missing = call(
        &rt,
        "web_extract",
        json!({"url": format!("{base}/missing")}),
        &ctx,
    )
    .await;
    assert!(missing["error"].as_str().unwrap().contains("404"));
}

#[tokio::test]
async fn search_speaks_searxng_brave_and_tavily() {
    let seen = Seen::default();
    let base = serve(seen.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());

    let none = runtime(|_| {}, Env::default());
    assert!(!none.registry.availability("web_search").is_available());

    let searx = runtime(
        |c| {
            c.tools.web_search.provider = SearchProvider::Searxng;
            c.tools.web_search.url = base.clone();
        },
        Env::default(),
    );
    let out = call(
        &searx,
        "web_search",
        json!({"query": "rust async", "max_results": "1"}),
        &ctx,
    )
    .await;
    assert_eq!(
        out["results"],
        json!([{"title": "Rust", "url": "https://rust-lang.org", "snippet": "A language"}])
    );

    let brave_config = |c: &mut Config| {
        c.tools.web_search.provider = SearchProvider::Brave;
        c.tools.web_search.url = format!("{base}/brave");
        c.tools.web_search.api_key_env = "BRAVE_KEY".into();
    };
    assert!(
        !runtime(brave_config, Env::default())
            .registry
            .availability("web_search")
            .is_available(),
        "no key"
    );
    let brave = runtime(brave_config, Env::from_pairs([("BRAVE_KEY", "brave-key")]));
    let out = call(&brave, "web_search", json!({"query": "tokio"}), &ctx).await;
    assert_eq!(out["results"][0]["snippet"], "from brave", "{out}");

    let tavily = runtime(
        |c| {
            c.tools.web_search.provider = SearchProvider::Tavily;
            c.tools.web_search.url = format!("{base}/tavily");
            c.tools.web_search.api_key_env = "TAVILY_KEY".into();
        },
        Env::from_pairs([("TAVILY_KEY", "tvly-1")]),
    );
    let out = call(&tavily, "web_search", json!({"query": "axum"}), &ctx).await;
    assert_eq!(out["results"][0]["url"], "https://t.example");

    let log = seen.lock().unwrap().clone();
    assert!(
        log[0].contains("(\"q\", \"rust async\")") && log[0].contains("(\"format\", \"json\")"),
        "{log:?}"
    );
    assert!(
        log[1].contains("token=brave-key") && log[1].contains("(\"count\", \"8\")"),
        "{log:?}"
    );
    assert!(
        log[2].contains("\"query\":\"axum\"") && log[2].contains("auth=Bearer tvly-1"),
        "{log:?}"
    );
}
