//! `send_message`: post to a named target (`[tools.send_message.targets]`)
//! on any connected platform.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::config::ChatTarget;
use crate::platform::{ChatRef, Platforms, retrying};
use crate::tools::{Tool, ToolContext, ToolError, ToolSpec, Unavailable, arg_str};

/// Longest message the tool sends.
const MAX_TEXT_CHARS: usize = 8000;

/// `send_message`.
#[derive(Debug, Clone)]
pub struct SendMessage {
    targets: BTreeMap<String, ChatTarget>,
    platforms: Arc<Platforms>,
}

impl SendMessage {
    /// The tool over the configured targets and the connected platforms.
    pub fn new(targets: BTreeMap<String, ChatTarget>, platforms: Arc<Platforms>) -> Self {
        Self { targets, platforms }
    }

    fn reachable(&self) -> Vec<&String> {
        let connected = self.platforms.connected();
        self.targets
            .iter()
            .filter(|(_, t)| connected.iter().any(|c| *c == t.platform.as_str()))
            .map(|(name, _)| name)
            .collect()
    }
}

#[async_trait]
impl Tool for SendMessage {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "send_message",
            "messaging",
            "Send a message to one of the configured chats (for notifications outside this conversation).",
            json!({
                "type": "object",
                "properties": {
                    "target": {"type": "string", "description": "Name of a configured target."},
                    "text": {"type": "string", "description": "Message text."}
                },
                "required": ["target", "text"]
            }),
        )
        .emoji("📨")
    }

    fn check(&self) -> Result<(), Unavailable> {
        if self.targets.is_empty() {
            Err("no targets configured ([tools.send_message.targets])".into())
        } else if self.reachable().is_empty() {
            Err("none of the configured targets' platforms is connected".into())
        } else {
            Ok(())
        }
    }

    fn dynamic_parameters(&self) -> Option<Value> {
        let names = self.reachable();
        Some(json!({
            "type": "object",
            "properties": {
                "target": {"type": "string", "enum": names, "description": "Name of a configured target."},
                "text": {"type": "string", "description": "Message text."}
            },
            "required": ["target", "text"]
        }))
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let name = arg_str(&args, "target")?;
        let text = arg_str(&args, "text")?;
        if text.trim().is_empty() {
            return Err(ToolError::InvalidArgs("text is empty".into()));
        }
        if text.chars().count() > MAX_TEXT_CHARS {
            return Err(ToolError::InvalidArgs(format!(
                "text is longer than {MAX_TEXT_CHARS} characters"
            )));
        }
        let target = self.targets.get(name).ok_or_else(|| {
            ToolError::InvalidArgs(format!(
                "unknown target {name:?}; configured: {}",
                self.targets.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })?;
        let port = self
            .platforms
            .port(&target.platform)
            .ok_or_else(|| ToolError::Failed(format!("{} is not connected", target.platform)))?;
        let to = ChatRef {
            platform: target.platform.as_str().into(),
            chat: target.chat.clone(),
            thread: None,
        };
        let id = retrying(|| port.send(&to, None, text))
            .await
            .map_err(|e| ToolError::Failed(format!("sending failed: {e}")))?;
        Ok(
            json!({"sent": true, "target": name, "platform": target.platform, "message_id": id})
                .to_string(),
        )
    }
}
