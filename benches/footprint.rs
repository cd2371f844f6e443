//! The daemon's footprint, measured on the optimised `switchboard` binary
//! started as its own process on the embedded defaults (SQLite, adapters
//! off but the webhook receiver): its size on disk (as built and with every
//! symbol stripped), the time from exec to a ready `/readyz`, and its
//! resident memory idle; after SESSIONS sessions each hold a stored
//! conversation of 2 × TURNS messages, and QUIET_SECS after they went idle
//! (the pre-burst figure); after DELIVERIES signed webhook deliveries spread
//! over PRS pull requests, and QUIET_SECS after that burst, as a share of
//! the pre-burst figure. The model is a loopback fake that answers at once,
//! so every delivery is a whole turn.
//!
//! Run: `cargo bench --bench footprint` (SESSIONS=10000 TURNS=10
//! DELIVERIES=100000 PRS=2000 CONNECTIONS=16 QUIET_SECS=60; set any of them
//! lower for a quick look).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::routing::post;
use serde_json::json;
use switchboard::adapters::webhook::verify::github_signature;

mod support;
use support::{SECRET, body, env_usize, gateway_toml};

/// Resident memory of `pid` in KiB: total, anonymous, file-backed.
fn rss(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("RssAnon:"), field("RssFile:"))
}

/// Prints and returns the resident memory of `pid`, in KiB.
fn report(what: &str, pid: u32) -> u64 {
    let (total, anon, file) = rss(pid);
    println!(
        "{what:<34} RSS {:>6.1} MiB  (anonymous {:>6.1}, file {:>5.1})",
        total as f64 / 1024.0,
        anon as f64 / 1024.0,
        file as f64 / 1024.0
    );
    total
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The binary's size as built, and with every symbol stripped when binutils'
/// objcopy is at hand.
fn sizes(bin: &Path, dir: &Path) {
    let built = std::fs::metadata(bin).unwrap().len();
    println!("binary {:<27} {:>6.1} MiB", "(as built)", mib(built));
    let stripped = dir.join("stripped");
    let ok = Command::new("objcopy")
        .arg("--strip-all")
        .arg(bin)
        .arg(&stripped)
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        let size = std::fs::metadata(&stripped).unwrap().len();
        println!(
            "binary {:<27} {:>6.1} MiB",
            "(all symbols stripped)",
            mib(size)
        );
    } else {
        println!("binary (stripped): objcopy is not available");
    }
}

/// A chat-completions endpoint that answers every request at once with a
/// review of realistic length.
async fn instant_model() -> String {
    let answer = "The change looks right. The new branch in `parse` handles the empty \
                  case, and the test covers it. Two small points: the error message \
                  could name the field, and the loop in `merge` clones each entry where \
                  a borrow would do. Neither blocks the merge."
        .repeat(2);
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |_body: axum::body::Bytes| {
            let answer = answer.clone();
            async move {
                axum::Json(json!({
                    "id": "chatcmpl-footprint",
                    "object": "chat.completion",
                    "choices": [{
                        "index": 0,
                        "message": {"role": "assistant", "content": answer},
                        "finish_reason": "stop",
                    }],
                    "usage": {"prompt_tokens": 900, "completion_tokens": 120, "total_tokens": 1020},
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/v1")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn config(dir: &Path, port: u16, model: &str) -> PathBuf {
    let path = dir.join("gateway.toml");
    std::fs::write(
        &path,
        gateway_toml(dir, &format!("127.0.0.1:{port}"), model),
    )
    .unwrap();
    path
}

/// Posts deliveries `first..first + count`, delivery `i` to the PR
/// `pr_of(i)`, over `connections` connections; returns how many got 202.
async fn post_all(
    base: &str,
    first: usize,
    count: usize,
    connections: usize,
    pr_of: impl Fn(usize) -> usize + Copy + Send + 'static,
) -> usize {
    let client = switchboard::http::client::client();
    let url = format!("{base}/webhooks/github");
    let next = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (client, url, next, accepted) =
            (client.clone(), url.clone(), next.clone(), accepted.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= count {
                    return;
                }
                let i = first + n;
                let body = body(i, pr_of(i));
                let resp = client
                    .post(&url)
                    .header("x-github-event", "pull_request")
                    .header("x-github-delivery", format!("footprint-{i}"))
                    .header("x-hub-signature-256", github_signature(SECRET, &body))
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                if resp.is_ok_and(|r| r.status().as_u16() == 202) {
                    accepted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    accepted.load(Ordering::Relaxed)
}

/// Turns finished so far, from the daemon's own metrics.
async fn turns(base: &str) -> usize {
    let Ok(resp) = switchboard::http::client::client()
        .get(format!("{base}/metrics"))
        .send()
        .await
    else {
        return 0;
    };
    let text = resp.text().await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("switchboard_turns_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as usize
}

async fn until_turns(base: &str, expected: usize, limit: Duration) -> Duration {
    let start = Instant::now();
    while turns(base).await < expected {
        assert!(
            start.elapsed() < limit,
            "only {} of {expected} turns after {limit:?}",
            turns(base).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    start.elapsed()
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        // A clean stop, as systemd would ask for it.
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.0.wait();
    }
}

fn main() {
    let sessions = env_usize("SESSIONS", 10_000).max(1);
    let per_session = env_usize("TURNS", 10).max(1);
    let deliveries = env_usize("DELIVERIES", 100_000);
    let prs = env_usize("PRS", 2_000).max(1);
    let connections = env_usize("CONNECTIONS", 16).max(1);
    let quiet = Duration::from_secs(env_usize("QUIET_SECS", 60) as u64);
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_switchboard"));
    let dir = tempfile::tempdir().unwrap();
    sizes(&bin, dir.path());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let model = instant_model().await;
        let port = free_port();
        let path = config(dir.path(), port, &model);
        let base = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        let child = Command::new(&bin)
            .arg("--config")
            .arg(&path)
            .arg("run")
            .env("GITHUB_WEBHOOK_SECRET", SECRET)
            .stdout(Stdio::null())
            // MIMALLOC_SHOW_STATS=1 shows the allocator's figures at exit.
            .stderr(if std::env::var_os("MIMALLOC_SHOW_STATS").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .unwrap();
        let daemon = Daemon(child);
        let pid = daemon.0.id();
        let client = switchboard::http::client::client();
        loop {
            let ready = client.get(format!("{base}/readyz")).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "not ready in 30 s"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        println!(
            "{:<34} {:>6.1} ms",
            "ready after exec",
            started.elapsed().as_secs_f64() * 1e3
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        let idle = report("idle, 2 s after ready", pid);

        // Round robin, so every session's conversation grows turn by turn
        // while the others run.
        let began = Instant::now();
        let total = sessions * per_session;
        let accepted = post_all(&base, 0, total, connections, move |i| {
            1_000_000 + i % sessions
        })
        .await;
        assert_eq!(accepted, total, "every delivery is acknowledged");
        until_turns(&base, total, Duration::from_secs(3600)).await;
        let secs = began.elapsed().as_secs_f64();
        println!(
            "{sessions} sessions × {per_session} turns: answered in {secs:.1} s ({:.0} turns/s)",
            total as f64 / secs
        );
        let messages = 2 * per_session;
        report(
            &format!("after {sessions} sessions ({messages} messages)"),
            pid,
        );
        tokio::time::sleep(quiet).await;
        let before = report(
            &format!("{sessions} sessions, {} s idle", quiet.as_secs()),
            pid,
        );
        println!(
            "{:<34} {:>6.1} MiB above idle ({:.1} KiB a session)",
            "idle sessions cost",
            before.saturating_sub(idle) as f64 / 1024.0,
            before.saturating_sub(idle) as f64 / sessions as f64
        );

        let began = Instant::now();
        let accepted = post_all(&base, total, deliveries, connections, move |i| i % prs + 1).await;
        assert_eq!(accepted, deliveries, "every delivery is acknowledged");
        until_turns(&base, total + deliveries, Duration::from_secs(3600)).await;
        let secs = began.elapsed().as_secs_f64();
        println!(
            "{deliveries} deliveries over {prs} PRs: answered in {secs:.1} s ({:.0} turns/s)",
            deliveries as f64 / secs
        );
        report(&format!("after {deliveries} deliveries"), pid);
        tokio::time::sleep(quiet).await;
        let after = report(&format!("{} s after the burst", quiet.as_secs()), pid);
        println!(
            "{:<34} {:>+6.1} % of the pre-burst RSS",
            "after the burst, idle",
            (after as f64 / before as f64 - 1.0) * 100.0
        );
        let db = std::fs::metadata(dir.path().join("bench.db")).map_or(0, |m| m.len());
        println!("{:<34} {:>6.1} MiB", "SQLite database", mib(db));
        drop(daemon);
    });
}
