//! A fake GitHub REST API for issue comments: creates and updates comments
//! the way api.github.com does, records every request, and can be told to
//! fail the next requests with a status, to fail everything for a while
//! (an outage), or to hold requests unanswered.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use serde_json::{Value, json};

use super::outage::{Answer, Outage};

/// A recorded request: method, path, authorization header, JSON body.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub method: &'static str,
    pub path: String,
    pub auth: String,
    pub body: Value,
}

#[derive(Clone, Default)]
struct Shared {
    seen: Arc<Mutex<Vec<Seen>>>,
    fail_next: Arc<Mutex<Vec<u16>>>,
    down: Outage,
    held: Arc<tokio::sync::watch::Sender<bool>>,
    next_id: Arc<Mutex<u64>>,
}

/// A running fake.
pub struct FakeGithub {
    /// Base URL, used as `deliver.api_url`.
    pub url: String,
    shared: Shared,
}

impl FakeGithub {
    pub async fn start() -> Self {
        let shared = Shared::default();
        *shared.next_id.lock().unwrap() = 9000;
        let app = Router::new()
            .route(
                "/repos/{owner}/{repo}/issues/{number}/comments",
                post(create),
            )
            .route("/repos/{owner}/{repo}/issues/comments/{id}", patch(update))
            .route("/user", get(who))
            .with_state(shared.clone());
        let addr = super::serve(app).await;
        Self {
            url: format!("http://{addr}"),
            shared,
        }
    }

    /// Fails the next requests with these statuses, in order.
    pub fn fail_next(&self, statuses: &[u16]) {
        self.shared.fail_next.lock().unwrap().extend(statuses);
    }

    /// Fails every request with `status` for `how_long` (with
    /// `Retry-After: retry_after` when given).
    pub fn outage(&self, status: u16, how_long: Duration, retry_after: Option<u64>) {
        let mut answer = Answer::json(status, json!({"message": "Server Error"}));
        if let Some(secs) = retry_after {
            answer = answer.header("retry-after", secs);
        }
        self.shared.down.start(how_long, vec![answer]);
    }

    /// While on, requests are recorded and left unanswered.
    pub fn hold(&self, on: bool) {
        self.shared.held.send_replace(on);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    /// Waits until `n` requests arrived.
    pub async fn wait(&self, n: usize) -> Vec<Seen> {
        for _ in 0..400 {
            if self.seen().len() >= n {
                return self.seen();
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        panic!("expected {n} GitHub requests, saw {:?}", self.seen());
    }
}

/// The token's owner (not recorded: it is asked once, at start).
pub const TOKEN_OWNER: &str = "gateway-token-owner";

/// Fails only during an outage (`fail_next` is for the comments).
async fn who(State(shared): State<Shared>) -> Response {
    if let Some(failed) = shared.down.answer() {
        return failed;
    }
    Json(json!({"login": TOKEN_OWNER, "type": "User", "id": 1})).into_response()
}

fn record(shared: &Shared, method: &'static str, path: String, headers: &HeaderMap, body: Value) {
    let auth = super::authorization(headers);
    shared.seen.lock().unwrap().push(Seen {
        at: Instant::now(),
        method,
        path,
        auth,
        body,
    });
}

/// What a request gets instead of its answer: nothing while held, an
/// error during an outage or when one was asked for.
async fn failure(shared: &Shared) -> Option<Response> {
    let mut held = shared.held.subscribe();
    let _ = held.wait_for(|on| !on).await;
    if let Some(failure) = shared.down.answer() {
        return Some(failure);
    }
    let mut fail = shared.fail_next.lock().unwrap();
    if fail.is_empty() {
        return None;
    }
    let status = StatusCode::from_u16(fail.remove(0)).unwrap();
    Some((status, Json(json!({"message": "Server Error"}))).into_response())
}

async fn create(
    State(shared): State<Shared>,
    Path((owner, repo, number)): Path<(String, String, u64)>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let path = format!("/repos/{owner}/{repo}/issues/{number}/comments");
    record(&shared, "POST", path, &headers, body.clone());
    if let Some(f) = failure(&shared).await {
        return f;
    }
    let id = {
        let mut next = shared.next_id.lock().unwrap();
        *next += 1;
        *next
    };
    (
        StatusCode::CREATED,
        Json(json!({
            "id": id,
            "node_id": "IC_x",
            "url": format!("https://api.github.com/repos/{owner}/{repo}/issues/comments/{id}"),
            "body": body["body"],
            "user": {"login": "switchboard-bot", "type": "Bot"},
        })),
    )
        .into_response()
}

async fn update(
    State(shared): State<Shared>,
    Path((owner, repo, id)): Path<(String, String, u64)>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let path = format!("/repos/{owner}/{repo}/issues/comments/{id}");
    record(&shared, "PATCH", path, &headers, body.clone());
    if let Some(f) = failure(&shared).await {
        return f;
    }
    Json(json!({"id": id, "body": body["body"]})).into_response()
}
