//! What a fake forge can be told to do wrong: answer the next request to
//! a path with a failure (a rate limit, an outage), or carry a request
//! out and hold its answer back (the caller dies waiting).

use std::sync::Mutex;

use axum::http::{HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// A failure answered instead of the next request to a path ending so.
struct Failure {
    suffix: String,
    status: u16,
    headers: Vec<(String, String)>,
    body: Value,
}

/// A fake's faults.
pub struct Faults {
    failures: Mutex<Vec<Failure>>,
    held: tokio::sync::watch::Sender<bool>,
    hold_after: Mutex<Option<(String, Option<&'static str>)>>,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            failures: Mutex::new(Vec::new()),
            held: tokio::sync::watch::Sender::new(false),
            hold_after: Mutex::new(None),
        }
    }
}

impl Faults {
    /// Answers the next request to a path ending with `suffix` with this
    /// failure (failures queue up in order).
    pub fn fail_next(&self, suffix: &str, status: u16, headers: &[(&str, &str)], body: Value) {
        self.failures.lock().unwrap().push(Failure {
            suffix: suffix.to_string(),
            status,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body,
        });
    }

    /// The failure queued for `path`, if any (taken).
    pub fn failure(&self, path: &str) -> Option<Response> {
        let failure = {
            let mut queued = self.failures.lock().unwrap();
            let i = queued
                .iter()
                .position(|f| path.ends_with(f.suffix.as_str()))?;
            queued.remove(i)
        };
        let mut resp = (
            StatusCode::from_u16(failure.status).unwrap(),
            axum::Json(failure.body),
        )
            .into_response();
        for (k, v) in failure.headers {
            resp.headers_mut().insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        Some(resp)
    }

    /// While on, requests (with `method`, when given) to paths ending
    /// with `suffix` are carried out and their answers held back; `None`
    /// releases them.
    pub fn hold_after(&self, suffix: Option<&str>, method: Option<&'static str>) {
        *self.hold_after.lock().unwrap() = suffix.map(|s| (s.to_string(), method));
        self.held.send_replace(suffix.is_some());
    }

    /// Whether the answer to `method path` is to be held.
    pub fn holds(&self, method: &str, path: &str) -> bool {
        self.hold_after
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|(suffix, only)| {
                path.ends_with(suffix.as_str()) && only.is_none_or(|m| m == method)
            })
    }

    /// Waits until held answers are released.
    pub async fn released(&self) {
        let mut held = self.held.subscribe();
        let _ = held.wait_for(|on| !on).await;
    }
}
