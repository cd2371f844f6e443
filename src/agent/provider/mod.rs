//! Model providers: OpenAI-compatible chat completions (plain and
//! streaming) and Anthropic Messages, behind one [`ChatModel`] trait, plus
//! retries with backoff that honour `Retry-After`.

mod anthropic;
mod openai;

pub use anthropic::Anthropic;
pub use openai::OpenAi;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::message::{ChatMessage, ToolCall};
use crate::config::{Config, Env, LlmEndpointConfig, LlmProvider};

/// What is sent to the model.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// System prompt.
    pub system: String,
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// The tools offered (OpenAI function schemas); none by default.
    pub tools: Arc<crate::tools::SessionView>,
    /// Output cap.
    pub max_tokens: u32,
    /// The model to ask instead of the endpoint's own (a session's choice).
    pub model: Option<String>,
    /// Where the answer's text goes as it streams in.
    pub live: Option<Live>,
}

/// What watches a streamed answer arrive.
pub trait TextSink: Send + Sync {
    /// A call starts (or starts again after a failure): text before this
    /// is not the answer.
    fn restart(&self);
    /// More of the answer's text (reasoning included: the watcher hides it).
    fn text(&self, delta: &str);
}

/// A [`TextSink`] a request carries.
#[derive(Clone)]
pub struct Live(pub Arc<dyn TextSink>);

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Live")
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// A final answer.
    Stop,
    /// It asked for tools.
    ToolCalls,
    /// It hit the output cap (arguments may be cut off).
    Length,
    /// Anything else.
    Other,
}

/// Tokens used by one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens, all of them: cached ones included.
    pub prompt_tokens: u64,
    /// Output tokens.
    pub completion_tokens: u64,
    /// Of the input tokens, those read from the provider's prompt cache
    /// (priced apart, usually far below input).
    pub cache_read_tokens: u64,
    /// Of the input tokens, those written to the provider's prompt cache
    /// (priced apart, usually above input).
    pub cache_write_tokens: u64,
}

impl Usage {
    /// `prompt` tokens in, `completion` out, none of them cached.
    pub fn new(prompt: u64, completion: u64) -> Self {
        Self {
            prompt_tokens: prompt,
            completion_tokens: completion,
            ..Self::default()
        }
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
    }
}

/// The model's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatResponse {
    /// Text.
    pub content: String,
    /// Calls asked for.
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped.
    pub finish: FinishReason,
    /// Tokens used.
    pub usage: Usage,
}

/// Failures talking to a model.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderError {
    /// 429: try again later.
    #[error("rate limited by the model provider")]
    RateLimited {
        /// What `Retry-After` asked for.
        retry_after: Option<Duration>,
    },
    /// 5xx: the provider failed (retryable).
    #[error("model provider error {status}: {body}")]
    Server {
        /// HTTP status.
        status: u16,
        /// Start of the body.
        body: String,
        /// What `Retry-After` asked for.
        retry_after: Option<Duration>,
    },
    /// Connection or timeout (retryable).
    #[error("cannot reach the model provider: {0}")]
    Transport(String),
    /// The request does not fit the model's context window (OpenAI's
    /// `context_length_exceeded`, Anthropic's "prompt is too long", vLLM,
    /// llama.cpp's `exceed_context_size_error`, Ollama): it must shrink
    /// before it is sent again.
    #[error("the request is longer than the model's context window: {body}")]
    ContextOverflow {
        /// Start of the body.
        body: String,
    },
    /// Another 4xx: the request is wrong; retrying will not help.
    #[error("model provider refused the request ({status}): {body}")]
    Rejected {
        /// HTTP status.
        status: u16,
        /// Start of the body.
        body: String,
    },
    /// The answer could not be understood.
    #[error("unexpected answer from the model provider: {0}")]
    Malformed(String),
    /// The call was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// A streamed answer broke after it had written text (and begun no
    /// tool call): retryable, and what it wrote is kept in case no
    /// attempt does better.
    #[error("the answer's stream broke: {cause}")]
    Broken {
        /// The text so far, reasoning left out.
        partial: String,
        /// Why it broke.
        cause: String,
    },
}

impl ProviderError {
    /// Whether asking again, or another endpoint, may succeed: the
    /// provider is down, overloaded or unreachable (not: the request itself
    /// is wrong).
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            ProviderError::RateLimited { .. }
                | ProviderError::Server { .. }
                | ProviderError::Transport(_)
                | ProviderError::Broken { .. }
        )
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::RateLimited { retry_after }
            | ProviderError::Server { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// A chat model.
#[async_trait::async_trait]
pub trait ChatModel: Send + Sync {
    /// One call, no retries.
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError>;
}

/// `err`, a streamed answer's failure, as [`ProviderError::Broken`] when
/// the connection broke after `text` was written and before any tool call
/// began (a half-written call is not kept).
fn broken(err: ProviderError, text: &str, calling: bool) -> ProviderError {
    let partial = crate::agent::reasoning::strip_reasoning(text);
    match err {
        ProviderError::Transport(cause) if !calling && !partial.trim().is_empty() => {
            ProviderError::Broken {
                partial: partial.into_owned(),
                cause,
            }
        }
        other => other,
    }
}

/// The note that ends an answer whose stream broke for good.
pub const CUT_OFF: &str = "(The answer was cut off: the connection to the model broke.)";

/// Longest wait between retries (also caps `Retry-After`).
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Calls `model`, retrying retryable failures up to `max_retries` times
/// with exponential backoff (1 s, 2 s, 4 s… or what `Retry-After` says),
/// and giving up at once on cancellation.
pub async fn chat_with_retries(
    model: &dyn ChatModel,
    request: &ChatRequest,
    max_retries: u32,
    cancel: &CancellationToken,
) -> Result<ChatResponse, ProviderError> {
    let mut attempt = 0;
    // The longest text a broken stream left, given back with the final
    // failure when no attempt finished.
    let mut partial: Option<String> = None;
    loop {
        if let Some(live) = &request.live {
            live.0.restart();
        }
        let started = std::time::Instant::now();
        let result = tokio::select! {
            r = model.chat(request) => r,
            _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
        };
        crate::telemetry::events::emit(crate::telemetry::events::ModelCalled {
            took: started.elapsed(),
        });
        let result = match result {
            Err(ProviderError::Broken {
                partial: text,
                cause,
            }) => {
                if partial.as_ref().is_none_or(|p| p.len() < text.len()) {
                    partial = Some(text);
                }
                Err(ProviderError::Transport(cause))
            }
            other => other,
        };
        match result {
            Err(err) if err.retryable() && attempt < max_retries => {
                let backoff = Duration::from_secs(1 << attempt.min(6));
                let wait = err.retry_after().unwrap_or(backoff).min(MAX_BACKOFF);
                tracing::warn!(error = %err, attempt, wait_ms = wait.as_millis() as u64, "model call failed; retrying");
                attempt += 1;
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
                }
            }
            Err(err) if err.retryable() => {
                return Err(match partial {
                    Some(partial) => ProviderError::Broken {
                        partial,
                        cause: err.to_string(),
                    },
                    None => err,
                });
            }
            other => return other,
        }
    }
}

/// Parses `Retry-After` (seconds, or an HTTP date ignored as unknown).
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// Turns a non-success HTTP answer into the right error.
async fn status_error(response: reqwest::Response) -> ProviderError {
    let status = response.status().as_u16();
    let after = retry_after(response.headers());
    let body: String = response
        .text()
        .await
        .unwrap_or_default()
        .chars()
        .take(500)
        .collect();
    if is_context_overflow(&body) {
        return ProviderError::ContextOverflow { body };
    }
    match status {
        429 => ProviderError::RateLimited { retry_after: after },
        500..=599 => ProviderError::Server {
            status,
            body,
            retry_after: after,
        },
        _ => ProviderError::Rejected { status, body },
    }
}

/// Whether an error body says the request exceeds the context window, in
/// any of the wordings providers use: OpenAI and OpenRouter ("maximum
/// context length", code `context_length_exceeded`), vLLM (the same
/// sentence in its own error object), Anthropic ("prompt is too long",
/// `request_too_large`), llama.cpp (`exceed_context_size_error`, "exceeds
/// the available context size", "Context size has been exceeded") and
/// Ollama or LM Studio ("input length exceeds the context length"). Some
/// of them answer 500 rather than 400, so the body decides, not the status.
pub fn is_context_overflow(body: &str) -> bool {
    const MARKERS: [&str; 9] = [
        "context_length_exceeded",
        "maximum context length",
        "exceed_context_size_error",
        "exceeds the available context size",
        "context size has been exceeded",
        "exceeds the context length",
        "prompt is too long",
        "request_too_large",
        "context window",
    ];
    let body = body.to_lowercase();
    MARKERS.iter().any(|m| body.contains(m))
}

/// Sends a model request. A whole answer must arrive within `timeout`; a
/// streamed one must start within it, and then each of its events within
/// `timeout` of the one before (see [`next_event`]), however long the
/// whole answer takes.
async fn send(
    request: reqwest::RequestBuilder,
    timeout: Duration,
    stream: bool,
) -> Result<reqwest::Response, ProviderError> {
    let response = if stream {
        tokio::time::timeout(timeout, request.send())
            .await
            .map_err(|_| ProviderError::Transport(format!("no answer within {timeout:?}")))?
    } else {
        request.timeout(timeout).send().await
    };
    let response = response.map_err(transport)?;
    if !response.status().is_success() {
        return Err(status_error(response).await);
    }
    Ok(response)
}

/// Whether `response` is a server-sent event stream.
fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"))
}

/// The events of a streamed answer, each awaited at most `gap` after the
/// one before.
struct Events {
    inner: std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Send>,
    >,
    gap: Duration,
}

impl Events {
    fn new(response: reqwest::Response, gap: Duration) -> Self {
        Self {
            inner: Box::pin(sse_stream::SseStream::from_bytes_stream(
                response.bytes_stream(),
            )),
            gap,
        }
    }

    /// The next event's data as JSON; `None` at the end (or `[DONE]`).
    async fn next_event(&mut self) -> Result<Option<Value>, ProviderError> {
        use futures::StreamExt;
        loop {
            let event = tokio::time::timeout(self.gap, self.inner.next())
                .await
                .map_err(|_| {
                    ProviderError::Transport(format!("the stream stalled for {:?}", self.gap))
                })?;
            let Some(event) = event else {
                return Ok(None);
            };
            let event =
                event.map_err(|e| ProviderError::Transport(format!("stream broke: {e}")))?;
            let data = event.data.as_deref().unwrap_or_default().trim();
            if data == "[DONE]" {
                return Ok(None);
            }
            if data.is_empty() {
                continue;
            }
            return serde_json::from_str(data)
                .map(Some)
                .map_err(|e| ProviderError::Malformed(format!("bad stream chunk: {e}")));
        }
    }
}

fn transport(err: reqwest::Error) -> ProviderError {
    ProviderError::Transport(err.without_url().to_string())
}

/// Where and how to reach one model.
#[derive(Debug, Clone)]
pub struct ModelEndpoint {
    /// Wire protocol.
    pub provider: LlmProvider,
    /// Base URL.
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// API key, if any (its Debug output is redacted).
    pub api_key: Option<secrecy::SecretString>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Stream answers.
    pub stream: bool,
}

impl ModelEndpoint {
    /// The main model of a configuration.
    pub fn main(config: &Config, env: &Env) -> Self {
        Self {
            provider: config.llm.provider,
            base_url: config.llm.base_url.clone(),
            model: config.llm.model.clone(),
            api_key: env.secret(&config.llm.api_key_env),
            timeout: Duration::from_secs(config.llm.request_timeout_secs),
            stream: config.llm.stream,
        }
    }

    /// The auxiliary model (compression, smart approvals): each unset key
    /// falls back to the main model's.
    pub fn auxiliary(config: &Config, env: &Env) -> Self {
        Self {
            stream: false,
            ..Self::derived(config, env, &config.llm.auxiliary)
        }
    }

    /// An endpoint described against `[llm]` (the auxiliary model, a
    /// fallback): each unset key falls back to the main model's.
    pub fn derived(config: &Config, env: &Env, other: &LlmEndpointConfig) -> Self {
        let key_var = other
            .api_key_env
            .as_deref()
            .unwrap_or(&config.llm.api_key_env);
        Self {
            provider: other.provider.unwrap_or(config.llm.provider),
            base_url: other
                .base_url
                .clone()
                .unwrap_or_else(|| config.llm.base_url.clone()),
            model: other
                .model
                .clone()
                .unwrap_or_else(|| config.llm.model.clone()),
            api_key: env.secret(key_var),
            timeout: Duration::from_secs(config.llm.request_timeout_secs),
            stream: config.llm.stream,
        }
    }

    /// A client for this endpoint.
    pub fn client(&self, http: reqwest::Client) -> Arc<dyn ChatModel> {
        match self.provider {
            LlmProvider::Openai => Arc::new(OpenAi::new(self.clone(), http)),
            LlmProvider::Anthropic => Arc::new(Anthropic::new(self.clone(), http)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_context_overflow;

    #[test]
    fn too_long_is_recognised_in_every_providers_words_and_nothing_else() {
        for body in [
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","code":"context_length_exceeded"}}"#,
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens"}"#,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#,
            r#"{"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}"#,
            r#"{"error":{"message":"the input length exceeds the context length"}}"#,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210412 tokens > 200000 maximum"}}"#,
            r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}"#,
        ] {
            assert!(is_context_overflow(body), "{body}");
        }
        for body in [
            r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#,
            r#"{"error":{"message":"Rate limit reached for gpt-4o on tokens per min (TPM)","code":"rate_limit_exceeded"}}"#,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            r#"{"error":{"message":"max_tokens is too large: 200000. This model supports at most 16384 completion tokens"}}"#,
        ] {
            assert!(!is_context_overflow(body), "{body}");
        }
    }
}
