//! OpenAI-compatible chat completions (OpenAI, OpenRouter, Ollama, vLLM,
//! llama.cpp, LM Studio…), plain or streamed; streamed tool-call deltas
//! are assembled by index. Reasoning is dropped: `reasoning_content` is
//! never read, `<think>` blocks are cut from the assembled text.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use super::{
    ChatModel, ChatRequest, ChatResponse, Events, FinishReason, Live, ModelEndpoint, ProviderError,
    Usage, is_event_stream, send,
};
use crate::agent::message::{ChatMessage, Role, ToolCall};
use crate::agent::reasoning::strip_reasoning;

/// Client of one OpenAI-compatible endpoint.
#[derive(Debug, Clone)]
pub struct OpenAi {
    endpoint: ModelEndpoint,
    http: reqwest::Client,
    /// Send the output cap as `max_completion_tokens` (what OpenAI's API
    /// wants, and its reasoning models require) rather than `max_tokens`
    /// (what most other servers know). Starts from the host and flips when
    /// the server names the other one.
    completion_tokens: Arc<AtomicBool>,
}

impl OpenAi {
    /// A client for `endpoint` over `http`.
    pub fn new(endpoint: ModelEndpoint, http: reqwest::Client) -> Self {
        let openai = url::Url::parse(&endpoint.base_url)
            .ok()
            .and_then(|u| u.host_str().map(|h| h == "api.openai.com"))
            .unwrap_or(false);
        Self {
            endpoint,
            http,
            completion_tokens: Arc::new(AtomicBool::new(openai)),
        }
    }

    fn token_field(&self) -> &'static str {
        if self.completion_tokens.load(Ordering::Relaxed) {
            "max_completion_tokens"
        } else {
            "max_tokens"
        }
    }

    fn body<'a>(&'a self, request: &'a ChatRequest) -> Body<'a> {
        let messages = Messages {
            system: &request.system,
            history: &request.messages,
        };
        let cap = Some(request.max_tokens);
        let (max_tokens, max_completion_tokens) = if self.completion_tokens.load(Ordering::Relaxed)
        {
            (None, cap)
        } else {
            (cap, None)
        };
        let stream = self.endpoint.stream;
        Body {
            model: request.model.as_deref().unwrap_or(&self.endpoint.model),
            messages,
            max_tokens,
            max_completion_tokens,
            tools: (!request.tools.schemas.is_empty()).then_some(&*request.tools.json),
            stream,
            stream_options: stream.then(|| json!({"include_usage": true})),
        }
    }
}

/// A chat completions request, written from what it borrows: the history
/// is not copied into JSON values per call, and the tools' schemas go in as
/// the session's view wrote them.
#[derive(serde::Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Messages<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a serde_json::value::RawValue>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<Value>,
}

/// The system prompt, then the history, as the API's messages.
struct Messages<'a> {
    system: &'a str,
    history: &'a [ChatMessage],
}

impl serde::Serialize for Messages<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let system = std::iter::once(Wire::System {
            content: self.system,
        });
        serializer.collect_seq(system.chain(self.history.iter().map(Wire::from)))
    }
}

/// One message on the wire.
#[derive(serde::Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum Wire<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    Assistant {
        content: &'a str,
        #[serde(skip_serializing_if = "Calls::is_empty")]
        tool_calls: Calls<'a>,
    },
    Tool {
        tool_call_id: Option<&'a str>,
        content: &'a str,
    },
}

impl<'a> From<&'a ChatMessage> for Wire<'a> {
    fn from(m: &'a ChatMessage) -> Self {
        let content = m.content.as_str();
        match m.role {
            Role::User => Wire::User { content },
            Role::Tool => Wire::Tool {
                tool_call_id: m.tool_call_id.as_deref(),
                content,
            },
            Role::Assistant => Wire::Assistant {
                content,
                tool_calls: Calls(&m.tool_calls),
            },
        }
    }
}

/// An assistant message's calls: `{"id", "type": "function", "function":
/// {"name", "arguments"}}` each.
struct Calls<'a>(&'a [ToolCall]);

impl Calls<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl serde::Serialize for Calls<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Call<'a> {
            id: &'a str,
            r#type: &'static str,
            function: Function<'a>,
            #[serde(skip_serializing_if = "Option::is_none")]
            extra_content: Option<&'a Value>,
        }
        #[derive(serde::Serialize)]
        struct Function<'a> {
            name: &'a str,
            arguments: &'a str,
        }
        serializer.collect_seq(self.0.iter().map(|c| Call {
            id: &c.id,
            r#type: "function",
            function: Function {
                name: &c.name,
                arguments: &c.arguments,
            },
            extra_content: c.extra.as_ref(),
        }))
    }
}

fn finish(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("stop") | None => FinishReason::Stop,
        Some("tool_calls") | Some("function_call") => FinishReason::ToolCalls,
        Some("length") => FinishReason::Length,
        Some(_) => FinishReason::Other,
    }
}

/// A usage object: OpenAI's `prompt_tokens_details.cached_tokens` (or
/// DeepSeek's `prompt_cache_hit_tokens`) are read from the cache, and
/// `prompt_tokens_details.cache_write_tokens` (OpenRouter's) written to
/// it; all are part of `prompt_tokens`.
fn usage(v: &Value) -> Usage {
    let first = |paths: &[&str]| {
        paths
            .iter()
            .find_map(|p| v.pointer(p).and_then(Value::as_u64))
            .unwrap_or(0)
    };
    let prompt = first(&["/prompt_tokens"]);
    Usage {
        prompt_tokens: prompt,
        completion_tokens: first(&["/completion_tokens"]),
        cache_read_tokens: first(&[
            "/prompt_tokens_details/cached_tokens",
            "/prompt_cache_hit_tokens",
        ])
        .min(prompt),
        cache_write_tokens: first(&["/prompt_tokens_details/cache_write_tokens"]).min(prompt),
    }
}

/// Arguments as JSON text, whether the server sent a string or an object.
fn arguments_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn fallback_id(index: usize) -> String {
    format!("call_{index}_{}", &crate::store::new_id()[..8])
}

fn parse_complete(body: &Value) -> Result<ChatResponse, ProviderError> {
    let choice = body
        .pointer("/choices/0")
        .ok_or_else(|| ProviderError::Malformed("no choices".into()))?;
    let message = &choice["message"];
    let tool_calls = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .enumerate()
                .map(|(i, c)| ToolCall {
                    id: c["id"]
                        .as_str()
                        .map_or_else(|| fallback_id(i), str::to_string),
                    name: c
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    arguments: arguments_text(
                        c.pointer("/function/arguments").unwrap_or(&Value::Null),
                    ),
                    extra: c.get("extra_content").filter(|v| !v.is_null()).cloned(),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(ChatResponse {
        content: strip_reasoning(message["content"].as_str().unwrap_or("")).into_owned(),
        tool_calls,
        finish: finish(choice["finish_reason"].as_str()),
        usage: usage(&body["usage"]),
    })
}

#[derive(Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
    extra: Option<Value>,
}

async fn read_stream(
    mut events: Events,
    live: Option<&Live>,
) -> Result<ChatResponse, ProviderError> {
    let mut content = String::new();
    let mut calls: BTreeMap<usize, PartialCall> = BTreeMap::new();
    let mut finish_reason = None;
    let mut total = Usage::default();
    loop {
        let chunk = match events.next_event().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(err) => return Err(super::broken(err, &content, !calls.is_empty())),
        };
        if let Some(error) = chunk.get("error") {
            let body = error.to_string();
            if super::is_context_overflow(&body) {
                return Err(ProviderError::ContextOverflow { body });
            }
            return Err(ProviderError::Server {
                status: 500,
                body,
                retry_after: None,
            });
        }
        if chunk["usage"].is_object() {
            total = usage(&chunk["usage"]);
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            continue;
        };
        if let Some(text) = choice.pointer("/delta/content").and_then(Value::as_str) {
            content.push_str(text);
            if let Some(live) = live {
                live.0.text(text);
            }
        }
        for delta in choice
            .pointer("/delta/tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = delta["index"].as_u64().unwrap_or(0) as usize;
            let call = calls.entry(index).or_default();
            if let Some(id) = delta["id"].as_str().filter(|s| !s.is_empty()) {
                call.id = Some(id.to_string());
            }
            if let Some(name) = delta.pointer("/function/name").and_then(Value::as_str) {
                call.name.push_str(name);
            }
            if let Some(args) = delta.pointer("/function/arguments") {
                call.arguments.push_str(&arguments_text(args));
            }
            if let Some(extra) = delta.get("extra_content").filter(|v| !v.is_null()) {
                call.extra = Some(extra.clone());
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            finish_reason = Some(reason.to_string());
        }
    }
    Ok(ChatResponse {
        content: strip_reasoning(&content).into_owned(),
        tool_calls: calls
            .into_iter()
            .map(|(index, c)| ToolCall {
                id: c.id.unwrap_or_else(|| fallback_id(index)),
                name: c.name,
                arguments: c.arguments,
                extra: c.extra,
            })
            .collect(),
        finish: finish(finish_reason.as_deref()),
        usage: total,
    })
}

/// Whether a refusal is about the name of the output-cap parameter
/// (`Unsupported parameter: 'max_tokens' … Use 'max_completion_tokens'`,
/// or a server that does not know `max_completion_tokens`).
fn names_token_field(body: &str) -> bool {
    body.contains("max_completion_tokens") || body.contains("'max_tokens'")
}

#[async_trait::async_trait]
impl ChatModel for OpenAi {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        match self.chat_once(request).await {
            Err(ProviderError::Rejected { status: 400, body }) if names_token_field(&body) => {
                let now = !self.completion_tokens.load(Ordering::Relaxed);
                self.completion_tokens.store(now, Ordering::Relaxed);
                tracing::info!(
                    field = self.token_field(),
                    "the model server wants the other output-cap parameter"
                );
                self.chat_once(request).await
            }
            other => other,
        }
    }
}

impl OpenAi {
    async fn chat_once(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let url = format!(
            "{}/chat/completions",
            self.endpoint.base_url.trim_end_matches('/')
        );
        let mut http = self.http.post(url).json(&self.body(request));
        if let Some(key) = &self.endpoint.api_key {
            http = http.bearer_auth(secrecy::ExposeSecret::expose_secret(key));
        }
        let timeout = self.endpoint.timeout;
        let response = send(http, timeout, self.endpoint.stream).await?;
        if is_event_stream(&response) {
            read_stream(Events::new(response, timeout), request.live.as_ref()).await
        } else {
            let body: Value = response
                .json()
                .await
                .map_err(|e| ProviderError::Malformed(e.to_string()))?;
            parse_complete(&body)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(base_url: &str) -> OpenAi {
        let endpoint = ModelEndpoint {
            provider: crate::config::LlmProvider::Openai,
            base_url: base_url.into(),
            model: "m".into(),
            api_key: None,
            timeout: std::time::Duration::from_secs(1),
            stream: false,
        };
        OpenAi::new(endpoint, crate::http::client::client())
    }

    #[test]
    fn openai_itself_gets_max_completion_tokens_and_others_max_tokens() {
        assert_eq!(
            client("https://api.openai.com/v1").token_field(),
            "max_completion_tokens"
        );
        for other in ["http://127.0.0.1:11434/v1", "https://openrouter.ai/api/v1"] {
            assert_eq!(client(other).token_field(), "max_tokens", "{other}");
        }
        assert!(names_token_field(
            "Unsupported parameter: 'max_tokens' is not supported with this model."
        ));
        assert!(!names_token_field("Invalid 'messages[1].content'"));
    }

    #[test]
    fn the_history_goes_out_in_the_chat_completions_shape() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"a.txt"}"#.into(),
            extra: None,
        };
        let request = ChatRequest {
            system: "be brief".into(),
            messages: vec![
                ChatMessage::user("what is in a.txt?"),
                ChatMessage {
                    tool_calls: vec![call.clone()],
                    ..ChatMessage::assistant("")
                },
                ChatMessage::tool_result(&call, "hello"),
                ChatMessage::assistant("It says hello."),
            ],
            tools: Default::default(),
            max_tokens: 64,
            model: None,
            live: None,
        };
        let body = serde_json::to_value(client("http://127.0.0.1:1/v1").body(&request)).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "m",
                "max_tokens": 64,
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "what is in a.txt?"},
                    {"role": "assistant", "content": "", "tool_calls": [{
                        "id": "call_1", "type": "function",
                        "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"},
                    }]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "hello"},
                    {"role": "assistant", "content": "It says hello."},
                ],
            })
        );
    }
}
