//! Anthropic Messages, natively: `tool_use` blocks from the assistant,
//! `tool_result` blocks (grouped in one user turn) back.

use serde_json::{Value, json};

use super::{
    ChatModel, ChatRequest, ChatResponse, FinishReason, ModelEndpoint, ProviderError, Usage,
    status_error, transport,
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

#[async_trait::async_trait]
impl ChatModel for Anthropic {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let mut body = json!({
            "model": request.model.as_deref().unwrap_or(&self.endpoint.model),
            "max_tokens": request.max_tokens,
            "system": request.system,
            "messages": wire_messages(&request.messages),
        });
        if !request.tools.is_empty() {
            body["tools"] = Value::Array(wire_tools(&request.tools));
        }
        let base = self.endpoint.base_url.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base);
        let mut http = self
            .http
            .post(format!("{base}/v1/messages"))
            .timeout(self.endpoint.timeout)
            .header("anthropic-version", API_VERSION)
            .json(&body);
        if let Some(key) = &self.endpoint.api_key {
            http = http.header("x-api-key", secrecy::ExposeSecret::expose_secret(key));
        }
        let response = http.send().await.map_err(transport)?;
        if !response.status().is_success() {
            return Err(status_error(response).await);
        }
        let body: Value = response
            .json()
            .await
            .map_err(|e| ProviderError::Malformed(e.to_string()))?;
        parse(&body)
    }
}
