//! A fake Slack Web API: `<api_url>/<method>` answering the documented
//! `{"ok": true, …}` shapes of auth.test, chat.postMessage, chat.update,
//! chat.postEphemeral and reactions.add/remove, recording each call's
//! bearer token and parameters.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde_json::{Value, json};

use super::files::Files;
use super::outage::{Answer, Outage};

pub const BOT_USER: &str = "UBOT0001";

#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub auth: String,
    pub body: Value,
    /// The `ts` the fake gave a posted message.
    pub ts: String,
    /// Answered with an outage's error.
    pub refused: bool,
    /// When it came.
    pub at: std::time::Instant,
}

#[derive(Clone, Default)]
struct Shared {
    calls: Arc<Mutex<Vec<Call>>>,
    next_ts: Arc<Mutex<u64>>,
    /// `ws://` URL of the Socket Mode server.
    socket_url: Arc<Mutex<String>>,
    /// Frames to send on the open socket.
    socket: Arc<Mutex<Option<tokio::sync::mpsc::UnboundedSender<String>>>>,
    /// Frames the client sent (acknowledgements).
    acks: Arc<Mutex<Vec<Value>>>,
    /// While open, chat.postMessage fails.
    posts_down: Outage,
    /// While on, chat.postMessage posts and never answers (as when the
    /// bot dies before reading the answer).
    hold_posts: Arc<std::sync::atomic::AtomicBool>,
    /// The bot's messages as the channels show them now: (channel, ts) →
    /// the message.
    shown: Arc<Mutex<std::collections::BTreeMap<(String, String), Value>>>,
}

pub struct FakeSlack {
    /// Used as `slack.api_url`.
    pub url: String,
    /// Private files, under `/files-pri/` (downloads need the bot token).
    pub files: Files,
    shared: Shared,
}

impl FakeSlack {
    pub async fn start() -> Self {
        let shared = Shared::default();
        let files = Files::requiring("Bearer xoxb-test");
        let app = Router::new()
            .route("/api/{method}", any(method))
            .nest("/files-pri", files.router())
            .with_state(shared.clone());
        let addr = super::serve(app).await;
        let ws = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        *shared.socket_url.lock().unwrap() = format!("ws://{}/link", ws.local_addr().unwrap());
        tokio::spawn(socket_server(ws, shared.clone()));
        Self {
            url: format!("http://{addr}/api"),
            files,
            shared,
        }
    }

    /// The private download URL of file `path` (see [`Files::serve`]).
    pub fn file_url(&self, path: &str) -> String {
        format!("{}/files-pri/{path}", self.url.trim_end_matches("/api"))
    }

    pub fn calls(&self, method: &str) -> Vec<Call> {
        self.shared
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    /// Sends a Socket Mode envelope once the client is connected.
    pub async fn envelope(&self, envelope: Value) {
        for _ in 0..400 {
            if let Some(tx) = self.shared.socket.lock().unwrap().as_ref() {
                tx.send(envelope.to_string()).unwrap();
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the Socket Mode client never connected");
    }

    /// While `on`, chat.postMessage posts but never answers.
    pub fn hold_posts(&self, on: bool) {
        self.shared
            .hold_posts
            .store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// The texts of the bot's messages `channel` shows now (posted, not
    /// deleted), oldest first.
    pub fn shown(&self, channel: &str) -> Vec<String> {
        self.shared
            .shown
            .lock()
            .unwrap()
            .iter()
            .filter(|((c, _), _)| c == channel)
            .map(|(_, m)| m["text"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Fails every chat.postMessage for `how_long`, with `answers` in turn.
    pub fn fail_posts_for(&self, how_long: Duration, answers: Vec<Answer>) {
        self.shared.posts_down.start(how_long, answers);
    }

    /// The frames the client sent on the socket (its acknowledgements).
    pub fn acks(&self) -> Vec<Value> {
        self.shared.acks.lock().unwrap().clone()
    }

    /// Waits until the client acknowledged `envelope_id`.
    pub async fn acked(&self, envelope_id: &str) {
        for _ in 0..400 {
            if self
                .shared
                .acks
                .lock()
                .unwrap()
                .iter()
                .any(|a| a["envelope_id"] == envelope_id)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("envelope {envelope_id} was not acknowledged");
    }

    pub async fn wait(&self, method: &str, n: usize) -> Vec<Call> {
        for _ in 0..400 {
            let calls = self.calls(method);
            if calls.len() >= n {
                return calls;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("expected {n} {method} calls, saw {:?}", self.calls(method));
    }
}

async fn method(
    State(shared): State<Shared>,
    Path(method): Path<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let auth = super::authorization(&headers);
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let ts = {
        let mut next = shared.next_ts.lock().unwrap();
        *next += 1;
        format!("1764000000.{:06}", *next)
    };
    shared.calls.lock().unwrap().push(Call {
        method: method.clone(),
        auth,
        body: body.clone(),
        ts: ts.clone(),
        refused: false,
        at: std::time::Instant::now(),
    });
    if method == "chat.postMessage"
        && let Some(failure) = shared.posts_down.answer()
    {
        if let Some(call) = shared.calls.lock().unwrap().last_mut() {
            call.refused = true;
        }
        return failure;
    }
    let params: std::collections::HashMap<String, String> = query
        .as_deref()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect()
        })
        .unwrap_or_default();
    match method.as_str() {
        "chat.postMessage" => {
            let mut message = json!({"type": "message", "ts": ts, "text": body["text"],
                                     "user": BOT_USER, "bot_id": "B0001"});
            for field in ["thread_ts", "metadata"] {
                if let Some(v) = body.get(field).filter(|v| !v.is_null()) {
                    message[field] = v.clone();
                }
            }
            let channel = body["channel"].as_str().unwrap_or_default().to_string();
            shared
                .shown
                .lock()
                .unwrap()
                .insert((channel, ts.clone()), message);
            if shared.hold_posts.load(std::sync::atomic::Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
        }
        "chat.update" => {
            let key = (
                body["channel"].as_str().unwrap_or_default().to_string(),
                body["ts"].as_str().unwrap_or_default().to_string(),
            );
            if let Some(m) = shared.shown.lock().unwrap().get_mut(&key) {
                m["text"] = body["text"].clone();
            }
        }
        "chat.delete" => {
            let key = (
                body["channel"].as_str().unwrap_or_default().to_string(),
                body["ts"].as_str().unwrap_or_default().to_string(),
            );
            shared.shown.lock().unwrap().remove(&key);
        }
        "conversations.replies" | "conversations.history" => {
            let channel = params.get("channel").cloned().unwrap_or_default();
            let thread = params.get("ts");
            let metadata = params
                .get("include_all_metadata")
                .is_some_and(|v| v == "true");
            let messages: Vec<Value> = shared
                .shown
                .lock()
                .unwrap()
                .iter()
                .filter(|((c, ts), m)| {
                    *c == channel
                        && thread.is_none_or(|t| ts == t || m["thread_ts"].as_str() == Some(t))
                })
                .map(|(_, m)| {
                    let mut m = m.clone();
                    if !metadata && let Some(o) = m.as_object_mut() {
                        o.remove("metadata");
                    }
                    m
                })
                .collect();
            return Json(json!({"ok": true, "messages": messages, "has_more": false}))
                .into_response();
        }
        _ => {}
    }
    Json(match method.as_str() {
        "auth.test" => json!({
            "ok": true, "url": "https://acme.slack.com/", "team": "Acme", "user": "switchboard",
            "team_id": "T0001", "user_id": BOT_USER, "bot_id": "B0001",
        }),
        "chat.postMessage" => json!({
            "ok": true, "channel": body["channel"], "ts": ts,
            "message": {"type": "message", "ts": ts, "text": body["text"], "user": BOT_USER, "bot_id": "B0001"},
        }),
        "chat.update" => json!({
            "ok": true, "channel": body["channel"], "ts": body["ts"],
            "text": body["text"], "message": {"text": body["text"]},
        }),
        "chat.postEphemeral" => json!({"ok": true, "message_ts": ts}),
        "users.info" if query.as_deref().is_some_and(|q| q.contains("user=U1")) => json!({
            "ok": true,
            "user": {"id": "U1", "team_id": "T0001", "name": "ann", "real_name": "Ann Example",
                     "profile": {"display_name": "annie", "real_name": "Ann Example"}},
        }),
        "users.info" => json!({"ok": false, "error": "user_not_found"}),
        "apps.connections.open" => json!({"ok": true, "url": *shared.socket_url.lock().unwrap()}),
        _ => json!({"ok": true}),
    })
    .into_response()
}

/// Slack's Socket Mode side: a hello on connect, then the envelopes the
/// test sends; whatever the client sends back is recorded.
async fn socket_server(listener: tokio::net::TcpListener, shared: Shared) {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    while let Ok((stream, _)) = listener.accept().await {
        let Ok(ws) = tokio_tungstenite::accept_async(stream).await else {
            continue;
        };
        let (mut sink, mut source) = ws.split();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let hello = json!({"type": "hello", "num_connections": 1,
            "debug_info": {"host": "applink-1", "build_number": 1, "approximate_connection_time": 18060},
            "connection_info": {"app_id": "A0001"}});
        if sink.send(Message::text(hello.to_string())).await.is_err() {
            continue;
        }
        *shared.socket.lock().unwrap() = Some(tx);
        let acks = shared.acks.clone();
        tokio::spawn(async move {
            while let Some(Ok(msg)) = source.next().await {
                if let Message::Text(text) = msg
                    && let Ok(v) = serde_json::from_str::<Value>(&text)
                {
                    acks.lock().unwrap().push(v);
                }
            }
        });
        tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                if sink.send(Message::text(frame)).await.is_err() {
                    break;
                }
            }
        });
    }
}
