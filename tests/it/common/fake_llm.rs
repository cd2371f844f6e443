//! A scripted model server speaking the OpenAI chat-completions and
//! Anthropic Messages wire formats, recording every request.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Response, StatusCode};
use axum::routing::post;
use futures::StreamExt;
use serde_json::{Value, json};

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// 200 with this JSON body.
    Json(Value),
    /// This status, headers and body.
    Status(u16, Vec<(&'static str, String)>, String),
    /// 200 text/event-stream with these chunks, then `[DONE]`.
    Sse(Vec<Value>),
    /// 200 text/event-stream with these chunks, one every `gap`.
    SlowSse(Vec<Value>, std::time::Duration),
    /// Wait this long, then answer with the inner reply.
    Delayed(std::time::Duration, Box<Reply>),
    /// 200 text/event-stream with these chunks, then the connection
    /// breaks (no `[DONE]`, the body cut short).
    BrokenSse(Vec<Value>),
}

/// Answers a request from what it asks (used once the script is empty).
pub type Responder = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

#[derive(Clone, Default)]
struct Shared {
    script: Arc<Mutex<VecDeque<Reply>>>,
    requests: Arc<Mutex<Vec<(HeaderMap, Value)>>>,
    responder: Arc<Mutex<Option<Responder>>>,
}

/// A running fake model.
pub struct FakeLlm {
    /// Base URL (`http://127.0.0.1:port/v1`).
    pub url: String,
    shared: Shared,
}

impl FakeLlm {
    /// Starts a server answering with `script` in order.
    pub async fn start(script: Vec<Reply>) -> Self {
        let shared = Shared::default();
        shared.script.lock().unwrap().extend(script);
        let app = Router::new()
            .route("/v1/chat/completions", post(answer))
            .route("/v1/messages", post(answer))
            .with_state(shared.clone());
        let addr = super::serve(app).await;
        Self {
            url: format!("http://{addr}/v1"),
            shared,
        }
    }

    /// A server answering every request with `responder`.
    pub async fn responding(responder: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Self {
        let llm = Self::start(Vec::new()).await;
        *llm.shared.responder.lock().unwrap() = Some(Arc::new(responder));
        llm
    }

    /// Request bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.shared
            .requests
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| b.clone())
            .collect()
    }

    /// Headers of request `i`.
    pub fn headers(&self, i: usize) -> HeaderMap {
        self.shared.requests.lock().unwrap()[i].0.clone()
    }

    /// Scripted replies not used yet.
    pub fn remaining(&self) -> usize {
        self.shared.script.lock().unwrap().len()
    }
}

async fn answer(
    State(shared): State<Shared>,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> Response<Body> {
    let next = shared.script.lock().unwrap().pop_front();
    let responder = shared.responder.lock().unwrap().clone();
    let reply = next
        .or_else(|| responder.map(|r| r(&body.0)))
        .unwrap_or_else(|| Reply::Json(text("(script exhausted)")));
    shared.requests.lock().unwrap().push((headers, body.0));
    render(reply).await
}

fn render(reply: Reply) -> std::pin::Pin<Box<dyn Future<Output = Response<Body>> + Send>> {
    Box::pin(async move {
        match reply {
            Reply::Json(v) => Response::builder()
                .header("content-type", "application/json")
                .body(Body::from(v.to_string()))
                .unwrap(),
            Reply::Status(code, headers, body) => {
                let mut r = Response::builder().status(StatusCode::from_u16(code).unwrap());
                for (k, v) in headers {
                    r = r.header(k, v);
                }
                r.body(Body::from(body)).unwrap()
            }
            Reply::Sse(chunks) => {
                let mut text: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
                text.push_str("data: [DONE]\n\n");
                Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(Body::from(text))
                    .unwrap()
            }
            Reply::SlowSse(chunks, gap) => {
                let events = futures::stream::iter(chunks).then(move |c| async move {
                    tokio::time::sleep(gap).await;
                    Ok::<_, std::convert::Infallible>(format!("data: {c}\n\n"))
                });
                Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(Body::from_stream(events))
                    .unwrap()
            }
            Reply::BrokenSse(chunks) => {
                // Each piece flushed before the next (a pause between
                // them), so the client reads the text before the break.
                let pause = || tokio::time::sleep(std::time::Duration::from_millis(20));
                let events = futures::stream::iter(chunks)
                    .then(move |c| async move {
                        pause().await;
                        Ok::<_, std::io::Error>(format!("data: {c}\n\n"))
                    })
                    .chain(futures::stream::once(async move {
                        pause().await;
                        Err(std::io::Error::other("the connection broke"))
                    }));
                Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(Body::from_stream(events))
                    .unwrap()
            }
            Reply::Delayed(wait, inner) => {
                tokio::time::sleep(wait).await;
                render(*inner).await
            }
        }
    })
}

/// `content` as OpenAI stream chunks of about `size` characters each,
/// the last one finishing the answer.
pub fn text_stream(content: &str, size: usize) -> Vec<Value> {
    let chars: Vec<char> = content.chars().collect();
    let mut chunks: Vec<Value> = chars
        .chunks(size.max(1))
        .map(|piece| {
            json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "model": "fake",
                "choices": [{"index": 0, "delta": {"content": piece.iter().collect::<String>()},
                "finish_reason": null}]})
        })
        .collect();
    chunks.push(
        json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "model": "fake",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3000, "total_tokens": 3010}}),
    );
    chunks
}

/// An OpenAI final answer.
pub fn text(content: &str) -> Value {
    json!({
        "id": "chatcmpl-x", "object": "chat.completion", "model": "fake",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    })
}

/// An OpenAI answer calling tools: `(id, name, arguments JSON text)`.
pub fn calls(calls: &[(&str, &str, &str)]) -> Value {
    calls_finishing(calls, "tool_calls")
}

/// The same with another finish reason (`length` for cut-off output).
pub fn calls_finishing(calls: &[(&str, &str, &str)], finish: &str) -> Value {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
        .collect();
    json!({
        "id": "chatcmpl-x", "object": "chat.completion", "model": "fake",
        "choices": [{"index": 0, "finish_reason": finish,
                     "message": {"role": "assistant", "content": null, "tool_calls": tool_calls}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}
    })
}
