//! The conversation as the agent keeps it: provider-neutral messages and
//! tool calls, convertible to and from stored rows.

use serde::{Deserialize, Serialize};

use crate::store::{NewMessage, StoredMessage};

/// Who said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The person.
    User,
    /// The model.
    Assistant,
    /// A tool result.
    Tool,
}

impl Role {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// A call the model asked for. `arguments` is the raw JSON text the model
/// wrote (it may be invalid; the loop checks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-assigned id, echoed by the result.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as JSON text.
    pub arguments: String,
    /// What the provider attached to the call and wants back with it
    /// (an OpenAI-compatible endpoint's `extra_content`, such as Gemini's
    /// thought signature), kept as it came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<serde_json::Value>,
}

/// One message of a conversation (serialised whole in context
/// checkpoints).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who.
    pub role: Role,
    /// Text.
    pub content: String,
    /// Calls (assistant messages).
    pub tool_calls: Vec<ToolCall>,
    /// The call answered (tool messages).
    pub tool_call_id: Option<String>,
    /// The tool that answered (tool messages).
    pub name: Option<String>,
    /// The notes its sender saved, as they went to the model with this
    /// message (a turn's own message). Never stored with the message; the
    /// model sees them only in turns of the same sender.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recalled: Option<Recalled>,
}

/// A sender's saved notes, as one of their messages carried them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recalled {
    /// Whose (`<platform>:<user id>`).
    pub owner: String,
    /// The notes' section.
    pub notes: String,
}

impl ChatMessage {
    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::plain(Role::User, text)
    }

    /// An assistant message without calls.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::plain(Role::Assistant, text)
    }

    fn plain(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: text.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            recalled: None,
        }
    }

    /// An assistant message with calls.
    pub fn assistant_calls(text: impl Into<String>, calls: Vec<ToolCall>) -> Self {
        Self {
            tool_calls: calls,
            ..Self::assistant(text)
        }
    }

    /// The result of a call.
    pub fn tool_result(call: &ToolCall, content: impl Into<String>) -> Self {
        Self {
            role: Role::Tool,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: Some(call.id.clone()),
            name: Some(call.name.clone()),
            recalled: None,
        }
    }

    /// Rough size in tokens (4 characters a token).
    pub fn estimated_tokens(&self) -> usize {
        let calls: usize = self
            .tool_calls
            .iter()
            .map(|c| {
                c.name.len()
                    + c.arguments.len()
                    + c.extra.as_ref().map_or(0, |e| e.to_string().len())
                    + 16
            })
            .sum();
        let notes = self.recalled.as_ref().map_or(0, |r| r.notes.len());
        (self.content.len() + calls + notes) / 4 + 4
    }

    /// Roughly how much memory the message holds, in bytes: its text and
    /// calls with what each allocation costs beside them.
    pub fn heap_bytes(&self) -> usize {
        let text = |s: &str| s.len() + 16;
        let calls: usize = self
            .tool_calls
            .iter()
            .map(|c| text(&c.id) + text(&c.name) + text(&c.arguments))
            .sum();
        std::mem::size_of::<Self>()
            + text(&self.content)
            + calls
            + self.tool_call_id.as_deref().map_or(0, text)
            + self.name.as_deref().map_or(0, text)
            + self
                .recalled
                .as_ref()
                .map_or(0, |r| text(&r.owner) + text(&r.notes))
    }

    /// A stored row back into a message; unknown roles (system rows from
    /// older versions) are skipped.
    pub fn from_stored(row: &StoredMessage) -> Option<Self> {
        let role = match row.role.as_str() {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => return None,
        };
        let tool_calls = row
            .tool_calls
            .as_deref()
            .and_then(|json| serde_json::from_str(json).ok())
            .unwrap_or_default();
        Some(Self {
            role,
            content: row.content.clone(),
            tool_calls,
            tool_call_id: row.tool_call_id.clone(),
            name: row.name.clone(),
            recalled: None,
        })
    }

    /// Its tool calls as stored: a JSON array, none when it has none.
    pub(crate) fn stored_calls(&self) -> Option<String> {
        (!self.tool_calls.is_empty())
            .then(|| serde_json::to_string(&self.tool_calls).unwrap_or_default())
    }

    /// The row to store for it, with `calls` from [`stored_calls`](Self::stored_calls).
    pub(crate) fn to_row<'a>(&'a self, calls: Option<&'a str>) -> NewMessage<'a> {
        NewMessage {
            role: self.role.as_str(),
            content: &self.content,
            tool_calls: calls,
            tool_call_id: self.tool_call_id.as_deref(),
            name: self.name.as_deref(),
        }
    }
}
