//! A fake OpenAI-compatible speech-to-text server:
//! `POST /v1/audio/transcriptions`, multipart `file`, `model`,
//! `response_format` and `language`, answered `{"text": …}` as OpenAI
//! does. The "audio" of a test is the words it says, as UTF-8 bytes, so the
//! transcript is the file's content. Failures can be scripted with the
//! real error bodies (OpenAI's `{"error": {…}}`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Multipart, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// One transcription request as the server read it.
#[derive(Debug, Clone, Default)]
pub struct Heard {
    pub auth: String,
    pub model: String,
    pub response_format: String,
    pub language: String,
    pub file_name: String,
    pub content_type: String,
    pub audio: Vec<u8>,
}

#[derive(Clone)]
struct Shared {
    requests: Arc<Mutex<Vec<Heard>>>,
    failures: Arc<Mutex<VecDeque<(u16, Value)>>>,
    /// While true, requests are read and then held unanswered.
    held: Arc<tokio::sync::watch::Sender<bool>>,
}

pub struct FakeTranscriber {
    /// Used as `transcription.base_url`.
    pub url: String,
    shared: Shared,
}

impl FakeTranscriber {
    pub async fn start() -> Self {
        let shared = Shared {
            requests: Default::default(),
            failures: Default::default(),
            held: Arc::new(tokio::sync::watch::Sender::new(false)),
        };
        let app = Router::new()
            .route("/v1/audio/transcriptions", post(transcribe))
            .with_state(shared.clone());
        let addr = super::serve(app).await;
        Self {
            url: format!("http://{addr}/v1"),
            shared,
        }
    }

    /// Answers the next requests with these statuses and bodies, in turn.
    pub fn fail(&self, answers: Vec<(u16, Value)>) {
        self.shared.failures.lock().unwrap().extend(answers);
    }

    /// Holds every request, once read, until [`release`](Self::release).
    pub fn hold(&self) {
        self.shared.held.send_replace(true);
    }

    pub fn release(&self) {
        self.shared.held.send_replace(false);
    }

    pub fn requests(&self) -> Vec<Heard> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Waits until `n` requests arrived.
    pub async fn wait(&self, n: usize) -> Vec<Heard> {
        for _ in 0..400 {
            let heard = self.requests();
            if heard.len() >= n {
                return heard;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("expected {n} transcriptions, saw {:?}", self.requests());
    }
}

/// OpenAI's 5xx answer body.
pub fn server_error() -> Value {
    json!({"error": {"message": "The server had an error while processing your request. Sorry about that!",
                     "type": "server_error", "param": null, "code": null}})
}

/// OpenAI's answer to audio it cannot decode.
pub fn invalid_file() -> Value {
    json!({"error": {"message": "Invalid file format. Supported formats: ['flac', 'm4a', 'mp3', 'mp4', 'mpeg', 'mpga', 'oga', 'ogg', 'wav', 'webm']",
                     "type": "invalid_request_error", "param": null, "code": null}})
}

async fn transcribe(
    State(shared): State<Shared>,
    headers: HeaderMap,
    mut form: Multipart,
) -> Response {
    let mut heard = Heard {
        auth: super::authorization(&headers),
        ..Heard::default()
    };
    while let Ok(Some(field)) = form.next_field().await {
        let name = field.name().unwrap_or_default().to_string();
        if name == "file" {
            heard.file_name = field.file_name().unwrap_or_default().to_string();
            heard.content_type = field.content_type().unwrap_or_default().to_string();
            heard.audio = field.bytes().await.unwrap().to_vec();
            continue;
        }
        let value = field.text().await.unwrap();
        match name.as_str() {
            "model" => heard.model = value,
            "response_format" => heard.response_format = value,
            "language" => heard.language = value,
            _ => {}
        }
    }
    let said = String::from_utf8_lossy(&heard.audio).into_owned();
    let missing_file = heard.file_name.is_empty();
    shared.requests.lock().unwrap().push(heard);
    let _ = shared.held.subscribe().wait_for(|held| !held).await;
    if let Some((status, body)) = shared.failures.lock().unwrap().pop_front() {
        return (StatusCode::from_u16(status).unwrap(), Json(body)).into_response();
    }
    if missing_file {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": {"message": "Missing file", "type": "invalid_request_error"}})),
        )
            .into_response();
    }
    Json(json!({"text": said})).into_response()
}
