//! A platform answering errors for a while, for the fakes: while the
//! window is open each request gets the next of its answers in turn.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// One error answer.
#[derive(Debug, Clone)]
pub struct Answer {
    status: u16,
    content_type: &'static str,
    body: String,
    headers: Vec<(&'static str, String)>,
}

impl Answer {
    /// `status` with a JSON body.
    pub fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            content_type: "application/json",
            body: body.to_string(),
            headers: Vec::new(),
        }
    }

    /// `status` with an HTML page, as a load balancer in front answers.
    pub fn html(status: u16, body: &str) -> Self {
        Self {
            status,
            content_type: "text/html",
            body: body.to_string(),
            headers: Vec::new(),
        }
    }

    /// With one more header.
    pub fn header(mut self, name: &'static str, value: impl ToString) -> Self {
        self.headers.push((name, value.to_string()));
        self
    }

    pub fn response(&self) -> Response {
        let mut response = (
            StatusCode::from_u16(self.status).unwrap(),
            self.body.clone(),
        )
            .into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(self.content_type),
        );
        for (name, value) in &self.headers {
            headers.insert(*name, value.parse().unwrap());
        }
        response
    }
}

struct Window {
    until: Instant,
    answers: Vec<Answer>,
    served: usize,
}

/// An outage a fake consults before answering; cheap to clone.
#[derive(Clone, Default)]
pub struct Outage(Arc<Mutex<Option<Window>>>);

impl Outage {
    /// Opens the window for `how_long`.
    pub fn start(&self, how_long: Duration, answers: Vec<Answer>) {
        assert!(!answers.is_empty());
        *self.0.lock().unwrap() = Some(Window {
            until: Instant::now() + how_long,
            answers,
            served: 0,
        });
    }

    /// The error to answer with now, if the window is open.
    pub fn answer(&self) -> Option<Response> {
        let mut window = self.0.lock().unwrap();
        let w = window.as_mut().filter(|w| Instant::now() < w.until)?;
        let answer = &w.answers[w.served % w.answers.len()];
        w.served += 1;
        Some(answer.response())
    }
}
