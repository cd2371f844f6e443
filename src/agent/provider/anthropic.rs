//! Anthropic Messages, natively: `tool_use` blocks from the assistant,
//! `tool_result` blocks (grouped in one user turn) back; streamed when
//! `llm.stream` is on; prompt-cache breakpoints on the tools, the system
//! prompt and the newest message, so each call reuses the prefix the last
//! one cached.

use serde_json::{Value, json};

use super::{
    ChatModel, ChatRequest, ChatResponse, Events, FinishReason, Live, ModelEndpoint, ProviderError,
    Usage, is_event_stream, send,
};
use crate::agent::message::{ChatMessage, Role, ToolCall};

/// The API version this client speaks.
const API_VERSION: &str = "2023-06-01";

/// Client of the Anthropic Messages API.
#[derive(Debug, Clone)]
pub struct Anthropic {
    endpoint: ModelEndpoint,
    http: reqwest::Client,
}

impl Anthropic {
    /// A client for `endpoint` over `http`.
    pub fn new(endpoint: ModelEndpoint, http: reqwest::Client) -> Self {
        Self { endpoint, http }
    }
}

/// Messages in Anthropic's shape: alternating user/assistant turns, tool
/// results as `tool_result` blocks inside user turns.
fn wire_messages(messages: &[ChatMessage]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for m in messages {
        let (role, blocks) = match m.role {
            Role::User => ("user", vec![json!({"type": "text", "text": m.content})]),
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id,
                    "content": m.content,
                })],
            ),
            Role::Assistant => {
                let mut blocks = Vec::new();
                if !m.content.is_empty() {
                    blocks.push(json!({"type": "text", "text": m.content}));
                }
                for call in &m.tool_calls {
                    let input: Value =
                        serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
                    blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
                }
                if blocks.is_empty() {
                    blocks.push(json!({"type": "text", "text": ""}));
                }
                ("assistant", blocks)
            }
        };
        match out.last_mut() {
            Some(last) if last["role"] == role => {
                if let Some(content) = last["content"].as_array_mut() {
                    content.extend(blocks);
                }
            }
            _ => out.push(json!({"role": role, "content": blocks})),
        }
    }
    out
}

fn wire_tools(tools: &[Value]) -> Vec<Value> {
    tools
        .iter()
        .map(|t| {
            let f = &t["function"];
            json!({
                "name": f["name"],
                "description": f["description"],
                "input_schema": f["parameters"],
            })
        })
        .collect()
}

fn parse(body: &Value) -> Result<ChatResponse, ProviderError> {
    let blocks = body["content"]
        .as_array()
        .ok_or_else(|| ProviderError::Malformed("no content blocks".into()))?;
    let mut content = String::new();
    let mut tool_calls = Vec::new();
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => content.push_str(block["text"].as_str().unwrap_or("")),
            Some("tool_use") => tool_calls.push(ToolCall {
                id: block["id"].as_str().unwrap_or("").to_string(),
                name: block["name"].as_str().unwrap_or("").to_string(),
                arguments: block["input"].to_string(),
            }),
            _ => {}
        }
    }
    let finish = match body["stop_reason"].as_str() {
        Some("end_turn") | Some("stop_sequence") | None => FinishReason::Stop,
        Some("tool_use") => FinishReason::ToolCalls,
        Some("max_tokens") => FinishReason::Length,
        Some(_) => FinishReason::Other,
    };
    Ok(ChatResponse {
        content: crate::agent::reasoning::strip_reasoning(&content).into_owned(),
        tool_calls,
        finish,
        usage: Usage {
            prompt_tokens: body
                .pointer("/usage/input_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            completion_tokens: body
                .pointer("/usage/output_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        },
    })
}

/// Marks `block` as the end of a cached prefix.
fn cache_here(block: &mut Value) {
    block["cache_control"] = json!({"type": "ephemeral"});
}

/// Assembles a streamed answer into the shape of a whole one (content
/// blocks, stop reason, usage), so [`parse`] reads both.
async fn read_stream(
    mut events: Events,
    live: Option<&Live>,
) -> Result<ChatResponse, ProviderError> {
    let mut blocks: Vec<Value> = Vec::new();
    let mut inputs: Vec<String> = Vec::new();
    let mut body = json!({"content": [], "usage": {}});
    while let Some(event) = events.next_event().await? {
        match event["type"].as_str() {
            Some("message_start") => {
                body["usage"]["input_tokens"] = event["message"]["usage"]["input_tokens"].clone();
            }
            Some("content_block_start") => {
                blocks.push(event["content_block"].clone());
                inputs.push(String::new());
            }
            Some("content_block_delta") => {
                let (Some(block), Some(input)) = (blocks.last_mut(), inputs.last_mut()) else {
                    continue;
                };
                let delta = &event["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => {
                        let more = delta["text"].as_str().unwrap_or("");
                        if let Some(live) = live {
                            live.0.text(more);
                        }
                        match block.get_mut("text") {
                            Some(Value::String(text)) => text.push_str(more),
                            _ => block["text"] = json!(more),
                        }
                    }
                    Some("input_json_delta") => {
                        input.push_str(delta["partial_json"].as_str().unwrap_or(""));
                    }
                    _ => {}
                }
            }
            Some("content_block_stop") => {
                if let (Some(block), Some(input)) = (blocks.last_mut(), inputs.last())
                    && block["type"] == "tool_use"
                    && !input.is_empty()
                {
                    block["input"] = serde_json::from_str(input).map_err(|e| {
                        ProviderError::Malformed(format!("tool input in the stream: {e}"))
                    })?;
                }
            }
            Some("message_delta") => {
                body["stop_reason"] = event["delta"]["stop_reason"].clone();
                body["usage"]["output_tokens"] = event["usage"]["output_tokens"].clone();
            }
            Some("error") => {
                let text = event["error"].to_string();
                if super::is_context_overflow(&text) {
                    return Err(ProviderError::ContextOverflow { body: text });
                }
                return Err(ProviderError::Server {
                    status: 529,
                    body: text,
                    retry_after: None,
                });
            }
            Some("message_stop") => break,
            _ => {}
        }
    }
    body["content"] = Value::Array(blocks);
    parse(&body)
}

#[async_trait::async_trait]
impl ChatModel for Anthropic {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let mut system = json!([{"type": "text", "text": request.system}]);
        cache_here(&mut system[0]);
        let mut messages = wire_messages(&request.messages);
        if let Some(last) = messages
            .last_mut()
            .and_then(|m| m["content"].as_array_mut())
            .and_then(|blocks| blocks.last_mut())
        {
            cache_here(last);
        }
        let mut body = json!({
            "model": request.model.as_deref().unwrap_or(&self.endpoint.model),
            "max_tokens": request.max_tokens,
            "system": system,
            "messages": messages,
        });
        if !request.tools.schemas.is_empty() {
            let mut tools = wire_tools(&request.tools.schemas);
            if let Some(last) = tools.last_mut() {
                cache_here(last);
            }
            body["tools"] = Value::Array(tools);
        }
        if self.endpoint.stream {
            body["stream"] = json!(true);
        }
        let base = self.endpoint.base_url.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base);
        let mut http = self
            .http
            .post(format!("{base}/v1/messages"))
            .header("anthropic-version", API_VERSION)
            .json(&body);
        if let Some(key) = &self.endpoint.api_key {
            http = http.header("x-api-key", secrecy::ExposeSecret::expose_secret(key));
        }
        let timeout = self.endpoint.timeout;
        let response = send(http, timeout, self.endpoint.stream).await?;
        if is_event_stream(&response) {
            return read_stream(Events::new(response, timeout), request.live.as_ref()).await;
        }
        let body: Value = response
            .json()
            .await
            .map_err(|e| ProviderError::Malformed(e.to_string()))?;
        parse(&body)
    }
}
