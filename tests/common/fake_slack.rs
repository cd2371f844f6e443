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
use axum::routing::any;
use serde_json::{Value, json};

pub const BOT_USER: &str = "UBOT0001";

#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub auth: String,
    pub body: Value,
    /// The `ts` the fake gave a posted message.
    pub ts: String,
}

#[derive(Clone, Default)]
struct Shared {
    calls: Arc<Mutex<Vec<Call>>>,
    next_ts: Arc<Mutex<u64>>,
}

pub struct FakeSlack {
    /// Used as `slack.api_url`.
    pub url: String,
    shared: Shared,
}

impl FakeSlack {
    pub async fn start() -> Self {
        let shared = Shared::default();
        let app = Router::new()
            .route("/api/{method}", any(method))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            url: format!("http://{addr}/api"),
            shared,
        }
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
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Json<Value> {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
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
    });
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
        _ => json!({"ok": true}),
    })
}
