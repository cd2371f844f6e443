//! Time to the first visible words of an answer against time to the whole
//! answer, for a model that streams for about ten seconds: the daemon in
//! this process, a model server on loopback streaming 200 chunks 50 ms
//! apart, and small Telegram Bot API and Slack Web API servers that note
//! when each message is sent or edited. Each platform runs twice in the
//! same run: with `stream` on, and with it off (the baseline: the answer
//! arrives whole at the end).
//!
//! Discord is left out: its gateway needs a WebSocket server, and its
//! streaming goes through the same draft code the two measured here do.
//!
//! Run: `cargo bench --bench live_reply` (CHUNKS=N, GAP_MS=N to change
//! the stream).

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use futures::StreamExt;
use serde_json::{Value, json};
use switchboard::config::{Config, Env, SlackMode};
use switchboard::daemon::Daemon;

const CHAT: i64 = 4242;
const SECRET: &str = "bench-signing-secret";

/// When each write reached a fake platform, and the text it carried.
#[derive(Clone, Default)]
struct Writes(Arc<Mutex<Vec<(Instant, String)>>>);

impl Writes {
    fn note(&self, text: &str) {
        self.0
            .lock()
            .unwrap()
            .push((Instant::now(), text.to_string()));
    }

    /// The first write, and the first one showing `whole`.
    fn times(&self, whole: &str) -> Option<(Instant, Instant)> {
        let writes = self.0.lock().unwrap();
        let first = writes.first()?.0;
        let full = writes.iter().find(|(_, t)| t.trim() == whole.trim())?.0;
        Some((first, full))
    }
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// A model server streaming `chunks` words `gap` apart.
async fn model(chunks: usize, gap: Duration) -> String {
    let app = Router::new().route(
        "/chat/completions",
        post(move || async move {
            let events = futures::stream::iter(0..=chunks).then(move |i| async move {
                tokio::time::sleep(gap).await;
                let chunk = if i < chunks {
                    json!({"id": "c", "object": "chat.completion.chunk", "model": "bench",
                        "choices": [{"index": 0, "delta": {"content": format!("w{i} ")},
                        "finish_reason": null}]})
                } else {
                    json!({"id": "c", "object": "chat.completion.chunk", "model": "bench",
                        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                };
                Ok::<_, std::convert::Infallible>(format!("data: {chunk}\n\n"))
            });
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(events))
                .unwrap()
        }),
    );
    serve(app).await
}

#[derive(Clone)]
struct TelegramState {
    writes: Writes,
    update: Arc<Mutex<Option<Value>>>,
    next: Arc<Mutex<i64>>,
}

fn ok(result: Value) -> Response {
    axum::Json(json!({"ok": true, "result": result})).into_response()
}

async fn telegram_method(
    State(s): State<TelegramState>,
    Path((_, method)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let bot = json!({"id": 999, "is_bot": true, "first_name": "Switchboard", "username": "sb_bot"});
    match method.to_ascii_lowercase().as_str() {
        "getme" => ok(
            json!({"id": 999, "is_bot": true, "first_name": "Switchboard",
            "username": "sb_bot", "can_join_groups": true, "can_read_all_group_messages": false,
            "supports_inline_queries": false, "can_connect_to_business": false,
            "has_main_web_app": false}),
        ),
        "getupdates" => {
            let update = s.update.lock().unwrap().take();
            match update {
                Some(u) => ok(json!([u])),
                None => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    ok(json!([]))
                }
            }
        }
        "sendmessage" | "editmessagetext" => {
            let text = body["text"].as_str().unwrap_or_default();
            s.writes.note(text);
            let id = if method.eq_ignore_ascii_case("sendmessage") {
                let mut next = s.next.lock().unwrap();
                *next += 1;
                json!(*next)
            } else {
                body["message_id"].clone()
            };
            ok(
                json!({"message_id": id, "date": 1_764_000_000, "text": text, "from": bot,
                "chat": {"id": CHAT, "type": "private", "first_name": "Ann"}}),
            )
        }
        _ => ok(json!(true)),
    }
}

async fn slack_method(
    State(writes): State<Writes>,
    Path(method): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let reply = match method.as_str() {
        "auth.test" => json!({"ok": true, "url": "https://bench.slack.com/", "team": "Bench",
            "user": "switchboard", "team_id": "T1", "user_id": "UBOT", "bot_id": "B1"}),
        "chat.postMessage" | "chat.update" => {
            writes.note(body["text"].as_str().unwrap_or_default());
            let ts = body["ts"].as_str().unwrap_or("1764000001.000100");
            json!({"ok": true, "channel": body["channel"], "ts": ts,
                "message": {"type": "message", "ts": ts, "text": body["text"], "user": "UBOT"}})
        }
        "users.info" => json!({"ok": false, "error": "user_not_found"}),
        _ => json!({"ok": true}),
    };
    axum::Json(reply).into_response()
}

/// The daemon on `config`, `go` asking it, until the answer is in: when
/// the first write and the whole answer reached the platform, from the ask.
async fn run(
    config: Config,
    env: Env,
    go: impl AsyncFnOnce(String),
    writes: &Writes,
    whole: &str,
) -> (Duration, Duration) {
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let daemon = switchboard::adapters::install(Daemon::new(config, env)).component(
        "bench",
        move |ctx| async move {
            let _ = ready_tx.send(ctx.local_addr);
            ctx.stop.cancelled().await;
        },
    );
    let task = tokio::spawn(async move {
        daemon
            .run_until(async move {
                let _ = stop_rx.await;
                "bench"
            })
            .await
            .unwrap();
    });
    let addr = ready_rx.await.unwrap();
    let asked = Instant::now();
    go(format!("http://{addr}")).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let (first, full) = loop {
        if let Some(times) = writes.times(whole) {
            break times;
        }
        assert!(Instant::now() < deadline, "the answer never arrived");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
    (first - asked, full - asked)
}

fn base_config(dir: &std::path::Path, model: &str, stream: bool) -> Config {
    let mut config = Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.server.shutdown_grace_secs = 1;
    config.storage.url = format!("sqlite://{}/bench.db", dir.display());
    config.llm.base_url = model.to_string();
    config.llm.api_key_env = String::new();
    config.llm.max_retries = 0;
    config.llm.stream = true;
    config.agent.workspace = dir.join("ws");
    config.chat.stream = stream;
    config
}

async fn telegram(model: &str, stream: bool, whole: &str) -> (Duration, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let state = TelegramState {
        writes: Writes::default(),
        update: Arc::new(Mutex::new(None)),
        next: Arc::new(Mutex::new(100)),
    };
    let url = serve(
        Router::new()
            .route("/{bot}/{method}", any(telegram_method))
            .with_state(state.clone()),
    )
    .await;
    let mut config = base_config(dir.path(), model, stream);
    config.telegram.enabled = true;
    config.telegram.api_url = url;
    config.telegram.allowed_users = vec![CHAT];
    let env = Env::from_pairs([("TELEGRAM_BOT_TOKEN", "1:bench")]);
    let update = state.update.clone();
    run(
        config,
        env,
        async move |_| {
            *update.lock().unwrap() = Some(json!({"update_id": 1, "message": {
                "message_id": 10, "date": 1_764_000_000, "text": "count",
                "chat": {"id": CHAT, "type": "private", "first_name": "Ann"},
                "from": {"id": CHAT, "is_bot": false, "first_name": "Ann"}}}));
        },
        &state.writes,
        whole,
    )
    .await
}

async fn slack(model: &str, stream: bool, whole: &str) -> (Duration, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let writes = Writes::default();
    let url = serve(
        Router::new()
            .route("/api/{method}", any(slack_method))
            .with_state(writes.clone()),
    )
    .await;
    let mut config = base_config(dir.path(), model, stream);
    config.slack.enabled = true;
    config.slack.mode = SlackMode::Events;
    config.slack.api_url = format!("{url}/api");
    let env = Env::from_pairs([
        ("SLACK_BOT_TOKEN", "xoxb-bench"),
        ("SLACK_SIGNING_SECRET", SECRET),
    ]);
    run(
        config,
        env,
        async move |base| {
            let body = serde_json::to_vec(&json!({"token": "t", "team_id": "T1",
                "api_app_id": "A1", "type": "event_callback", "event_id": "Ev1",
                "event_time": 1_764_000_000, "event": {"type": "message", "channel_type": "im",
                "user": "U1", "channel": "D1", "ts": "1764000000.000100", "text": "count",
                "event_ts": "1764000000.000100"}}))
            .unwrap();
            let ts = switchboard::store::now_ms() / 1000;
            let signature = switchboard::adapters::slack::verify::sign(SECRET, ts, &body);
            let sent = switchboard::http::client::client()
                .post(format!("{base}/slack/events"))
                .header("content-type", "application/json")
                .header("x-slack-request-timestamp", ts.to_string())
                .header("x-slack-signature", signature)
                .body(body)
                .send()
                .await
                .unwrap();
            assert!(sent.status().is_success(), "{}", sent.status());
        },
        &writes,
        whole,
    )
    .await
}

fn main() {
    let chunks = support::env_usize("CHUNKS", 200);
    let gap = Duration::from_millis(support::env_usize("GAP_MS", 50) as u64);
    let whole: String = (0..chunks).map(|i| format!("w{i} ")).collect();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let model = model(chunks, gap).await;
        println!(
            "live_reply: a {chunks}-chunk answer streamed over {:.1} s",
            (gap * chunks as u32).as_secs_f64()
        );
        for (name, on, off) in [
            (
                "telegram",
                telegram(&model, true, &whole).await,
                telegram(&model, false, &whole).await,
            ),
            (
                "slack",
                slack(&model, true, &whole).await,
                slack(&model, false, &whole).await,
            ),
        ] {
            println!(
                "{name:>9}: streamed: first words {:>6.2} s, whole answer {:>6.2} s | sent whole: {:>6.2} s | first words {:.0}x sooner, whole answer {:.2}x the time",
                on.0.as_secs_f64(),
                on.1.as_secs_f64(),
                off.1.as_secs_f64(),
                off.1.as_secs_f64() / on.0.as_secs_f64().max(1e-3),
                on.1.as_secs_f64() / off.1.as_secs_f64().max(1e-3),
            );
        }
    });
}
