//! Anthropic Messages, natively: `tool_use` blocks from the assistant,
//! `tool_result` blocks (grouped in one user turn) back; streamed when
//! `llm.stream` is on; prompt-cache breakpoints on the tools, the system
//! prompt and the newest message, so each call reuses the prefix the last
//! one cached.

use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq};
use serde_json::value::RawValue;
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

/// A Messages request, written from what it borrows: the history is not
/// copied into JSON values per call, and the tools' schemas go in as the
/// session's view wrote them in this API's shape (once per view).
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    system: [Block<'a>; 1],
    messages: Turns<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
}

/// The history in Anthropic's shape: alternating user and assistant
/// turns, consecutive messages of one side (tool results after a user's
/// message, say) in one turn; the last block of the last turn ends the
/// cached prefix.
struct Turns<'a>(&'a [ChatMessage]);

/// The side a message is on: tool results go back in user turns.
fn side(message: &ChatMessage) -> &'static str {
    match message.role {
        Role::Assistant => "assistant",
        Role::User | Role::Tool => "user",
    }
}

impl Serialize for Turns<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let turns: Vec<&[ChatMessage]> = self.0.chunk_by(|a, b| side(a) == side(b)).collect();
        let count = turns.len();
        let mut seq = serializer.serialize_seq(Some(count))?;
        for (i, messages) in turns.into_iter().enumerate() {
            seq.serialize_element(&Turn {
                messages,
                cached: i + 1 == count,
            })?;
        }
        seq.end()
    }
}

/// One turn: messages of one side, their blocks in order.
struct Turn<'a> {
    messages: &'a [ChatMessage],
    /// Its last block ends the cached prefix.
    cached: bool,
}

impl Serialize for Turn<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut blocks: Vec<Block> = self.messages.iter().flat_map(blocks).collect();
        if self.cached
            && let Some(last) = blocks.last_mut()
        {
            last.cache_control = Some(EPHEMERAL);
        }
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("role", side(&self.messages[0]))?;
        map.serialize_entry("content", &blocks)?;
        map.end()
    }
}

/// A message's content blocks.
fn blocks(message: &ChatMessage) -> Vec<Block<'_>> {
    match message.role {
        Role::User => vec![Block::new(Content::Text {
            text: &message.content,
        })],
        Role::Tool => vec![Block::new(Content::ToolResult {
            tool_use_id: message.tool_call_id.as_deref(),
            content: &message.content,
        })],
        Role::Assistant => {
            let text = (!message.content.is_empty()).then(|| {
                Block::new(Content::Text {
                    text: &message.content,
                })
            });
            let calls = message.tool_calls.iter().map(|call| {
                Block::new(Content::ToolUse {
                    id: &call.id,
                    name: &call.name,
                    input: serde_json::from_str(&call.arguments).unwrap_or_else(|_| empty_input()),
                })
            });
            let mut out: Vec<Block> = text.into_iter().chain(calls).collect();
            if out.is_empty() {
                out.push(Block::new(Content::Text { text: "" }));
            }
            out
        }
    }
}

/// A content block, maybe the end of a cached prefix.
#[derive(Serialize)]
struct Block<'a> {
    #[serde(flatten)]
    content: Content<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

impl<'a> Block<'a> {
    fn new(content: Content<'a>) -> Self {
        Self {
            content,
            cache_control: None,
        }
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Content<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a RawValue,
    },
    ToolResult {
        tool_use_id: Option<&'a str>,
        content: &'a str,
    },
}

/// `{"type": "ephemeral"}`: the block ends a cached prefix.
#[derive(Clone, Copy, Serialize)]
struct CacheControl {
    r#type: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl {
    r#type: "ephemeral",
};

/// What a call whose arguments are not JSON is sent as.
fn empty_input() -> &'static RawValue {
    serde_json::from_str("{}").expect("{} is JSON")
}

/// The tools in Anthropic's shape (name, description, input schema), the
/// last one ending the cached prefix.
fn wire_tools(tools: &[Value]) -> Box<RawValue> {
    let mut tools: Vec<Value> = tools
        .iter()
        .map(|t| {
            let f = &t["function"];
            json!({
                "name": f["name"],
                "description": f["description"],
                "input_schema": f["parameters"],
            })
        })
        .collect();
    if let Some(last) = tools.last_mut() {
        last["cache_control"] = json!(EPHEMERAL);
    }
    serde_json::value::to_raw_value(&tools).expect("JSON values always serialise")
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
                extra: None,
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
            // With prompt caching, most of the prompt is counted apart
            // from `input_tokens`: written to the cache or read from it.
            prompt_tokens: [
                "input_tokens",
                "cache_creation_input_tokens",
                "cache_read_input_tokens",
            ]
            .iter()
            .filter_map(|field| body["usage"][field].as_u64())
            .fold(0, u64::saturating_add),
            completion_tokens: body
                .pointer("/usage/output_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            cache_read_tokens: body["usage"]["cache_read_input_tokens"]
                .as_u64()
                .unwrap_or(0),
            cache_write_tokens: body["usage"]["cache_creation_input_tokens"]
                .as_u64()
                .unwrap_or(0),
        },
    })
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
    loop {
        let event = match events.next_event().await {
            Ok(Some(event)) => event,
            Ok(None) => break,
            Err(err) => {
                let text: String = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
                let calling = blocks.iter().any(|b| b["type"] == "tool_use");
                return Err(super::broken(err, &text, calling));
            }
        };
        match event["type"].as_str() {
            Some("message_start") => {
                for field in [
                    "input_tokens",
                    "cache_creation_input_tokens",
                    "cache_read_input_tokens",
                ] {
                    body["usage"][field] = event["message"]["usage"][field].clone();
                }
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
        let view = &request.tools;
        let tools = (!view.schemas.is_empty())
            .then(|| &**view.anthropic.get_or_init(|| wire_tools(&view.schemas)));
        let body = Body {
            model: request.model.as_deref().unwrap_or(&self.endpoint.model),
            max_tokens: request.max_tokens,
            system: [Block {
                content: Content::Text {
                    text: &request.system,
                },
                cache_control: Some(EPHEMERAL),
            }],
            messages: Turns(&request.messages),
            tools,
            stream: self.endpoint.stream,
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_goes_out_in_the_messages_shape_with_the_cache_marked() {
        let call = |id: &str, arguments: &str| ToolCall {
            id: id.into(),
            name: "read_file".into(),
            arguments: arguments.into(),
            extra: None,
        };
        let (a, b) = (call("t1", r#"{"path":"a.txt"}"#), call("t2", "{not json"));
        let history = vec![
            ChatMessage::user("what is in a.txt and b.txt?"),
            ChatMessage {
                tool_calls: vec![a.clone(), b.clone()],
                ..ChatMessage::assistant("Reading both.")
            },
            ChatMessage::tool_result(&a, "hello"),
            ChatMessage::tool_result(&b, "bye"),
            ChatMessage::assistant(""),
            ChatMessage::user("and now?"),
        ];
        let view = crate::tools::SessionView::new(
            vec!["read_file".into()],
            vec![json!({"type": "function", "function": {
                "name": "read_file", "description": "Read a file.",
                "parameters": {"type": "object"}}})],
        );
        let body = Body {
            model: "claude",
            max_tokens: 64,
            system: [Block {
                content: Content::Text { text: "be brief" },
                cache_control: Some(EPHEMERAL),
            }],
            messages: Turns(&history),
            tools: Some(view.anthropic.get_or_init(|| wire_tools(&view.schemas))),
            stream: false,
        };
        let cache = json!({"type": "ephemeral"});
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({
                "model": "claude",
                "max_tokens": 64,
                "system": [{"type": "text", "text": "be brief", "cache_control": cache}],
                "messages": [
                    {"role": "user", "content": [
                        {"type": "text", "text": "what is in a.txt and b.txt?"}]},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "Reading both."},
                        {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a.txt"}},
                        {"type": "tool_use", "id": "t2", "name": "read_file", "input": {}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "hello"},
                        {"type": "tool_result", "tool_use_id": "t2", "content": "bye"}]},
                    {"role": "assistant", "content": [{"type": "text", "text": ""}]},
                    {"role": "user", "content": [
                        {"type": "text", "text": "and now?", "cache_control": cache}]},
                ],
                "tools": [{"name": "read_file", "description": "Read a file.",
                    "input_schema": {"type": "object"}, "cache_control": cache}],
            })
        );
    }

    #[test]
    fn a_cached_prompt_counts_whole() {
        let body = json!({
            "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 5, "cache_creation_input_tokens": 1000,
                      "cache_read_input_tokens": 2000, "output_tokens": 7}
        });
        let usage = parse(&body).unwrap().usage;
        assert_eq!((usage.prompt_tokens, usage.completion_tokens), (3005, 7));
        assert_eq!(
            (usage.cache_read_tokens, usage.cache_write_tokens),
            (2000, 1000)
        );
    }
}
