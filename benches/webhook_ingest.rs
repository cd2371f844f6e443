//! Durable webhook ingest under load: signed `pull_request` deliveries
//! posted over many connections to the real daemon (signature verified,
//! rate limit, filter, deduplicated and committed to the SQLite inbox before
//! the 202), and in the same run to a bare axum handler that answers 202
//! without looking. Prints both rates, their ratio and the latency
//! percentiles. The model accepts connections and never answers, so each
//! session's first turn waits and the rest queue: what is measured is the
//! ingest path, not the agent.
//!
//! Run: `cargo bench --bench webhook_ingest` (REQUESTS=N, CONNECTIONS=C;
//! INGEST_ONLY=1 skips the baseline, for profiling).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::routing::post;
use switchboard::adapters::webhook::verify::github_signature;
use switchboard::config::{Config, Env, load_from_str};
use switchboard::daemon::{Daemon, Gateway};

mod support;
use support::{SECRET, body, env_usize, gateway_toml};

struct Run {
    rate: f64,
    p50: Duration,
    p99: Duration,
    accepted: usize,
}

async fn load(url: String, offset: usize, requests: usize, connections: usize) -> Run {
    let client = switchboard::http::client::builder()
        .pool_max_idle_per_host(connections)
        .build()
        .unwrap();
    let next = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicUsize::new(0));
    let began = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (client, url, next, accepted) =
            (client.clone(), url.clone(), next.clone(), accepted.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= requests {
                    return latencies;
                }
                let body = body(offset + i, (offset + i) % 50 + 1);
                let sig = github_signature(SECRET, &body);
                let start = Instant::now();
                let resp = client
                    .post(&url)
                    .header("x-github-event", "pull_request")
                    .header("x-github-delivery", format!("bench-{}", offset + i))
                    .header("x-hub-signature-256", sig)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                latencies.push(start.elapsed());
                if resp.is_ok_and(|r| r.status() == StatusCode::ACCEPTED) {
                    accepted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let elapsed = began.elapsed();
    all.sort();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    Run {
        rate: requests as f64 / elapsed.as_secs_f64(),
        p50: pct(0.50),
        p99: pct(0.99),
        accepted: accepted.load(Ordering::Relaxed),
    }
}

async fn bare_handler() -> String {
    let app = axum::Router::new().route(
        "/webhooks/github",
        post(|_body: axum::body::Bytes| async { StatusCode::ACCEPTED }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/webhooks/github")
}

/// A model endpoint that accepts connections and never answers.
async fn silent_model() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    format!("http://{addr}/v1")
}

async fn daemon(dir: &std::path::Path) -> (String, Gateway, tokio::sync::oneshot::Sender<()>) {
    let model = silent_model().await;
    let toml = gateway_toml(dir, "127.0.0.1:0", &model);
    let env = Env::from_pairs([("GITHUB_WEBHOOK_SECRET", SECRET)]);
    let config: Config = load_from_str(&toml, &env).unwrap();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let d = switchboard::adapters::install(Daemon::new(config, env)).component(
        "bench",
        move |ctx| async move {
            let _ = ready_tx.send((ctx.local_addr, ctx.gateway.clone()));
            ctx.stop.cancelled().await;
        },
    );
    tokio::spawn(async move {
        let _ = d
            .run_until(async move {
                let _ = stop_rx.await;
                "bench done"
            })
            .await;
    });
    let (addr, gateway) = ready_rx.await.unwrap();
    (format!("http://{addr}/webhooks/github"), gateway, stop_tx)
}

fn main() {
    let requests = env_usize("REQUESTS", 4000);
    let connections = env_usize("CONNECTIONS", 32);
    // The daemon's own runtime, so the in-process daemon (and the bare
    // baseline beside it) run as in production.
    let rt = switchboard::runtime::build().unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let bare_url = bare_handler().await;
        let (daemon_url, gateway, stop) = daemon(dir.path()).await;
        // Warm both up (connections, SQLite pages, code paths).
        load(bare_url.clone(), 10_000_000, 200, connections).await;
        load(daemon_url.clone(), 20_000_000, 200, connections).await;

        if std::env::var("INGEST_ONLY").is_ok() {
            // For profilers: the ingest path alone.
            let ingest = load(daemon_url, 0, requests, connections).await;
            println!("switchboard ingest: {:.0} req/s", ingest.rate);
            let _ = stop.send(());
            return;
        }
        let bare = load(bare_url, 0, requests, connections).await;
        let ingest = load(daemon_url, 0, requests, connections).await;
        let stored = gateway
            .store
            .inbox_pending(1_000_000)
            .await
            .unwrap()
            .len();
        println!("webhook ingest, {requests} signed pull_request deliveries over {connections} connections");
        println!(
            "  bare axum handler : {:>8.0} req/s   p50 {:>7.2?}   p99 {:>7.2?}",
            bare.rate, bare.p50, bare.p99
        );
        println!(
            "  switchboard ingest: {:>8.0} req/s   p50 {:>7.2?}   p99 {:>7.2?}   ({} accepted with 202)",
            ingest.rate, ingest.p50, ingest.p99, ingest.accepted
        );
        println!(
            "  ratio             : {:.1} % of the bare handler's rate (target >= 25 %)",
            100.0 * ingest.rate / bare.rate
        );
        println!("  committed to the inbox: {stored} rows (the agent has not run them yet)");
        assert_eq!(ingest.accepted, requests, "every delivery was accepted");
        let _ = stop.send(());
    });
}
