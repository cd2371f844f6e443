//! Keeping the conversation well-formed and within the context window:
//! sanitising tool call/result pairing before every model call, trimming
//! old large tool outputs, and summarising the middle with the auxiliary
//! model when that is not enough.

use std::collections::HashSet;

use super::message::{ChatMessage, Role, ToolCall};
use super::provider::{ChatModel, ChatRequest, ProviderError};

/// Content of the stub result added for a call that has none.
pub const STUB_RESULT: &str =
    "[Result unavailable — the call was interrupted; see the context above]";

/// Characters an old tool output keeps when trimmed.
const TRIMMED_KEEP: usize = 1000;
/// Tool outputs longer than this are trimmed when the history is too big.
const TRIM_ABOVE: usize = 2000;
/// Messages at the end never trimmed or summarised.
const TAIL_MESSAGES: usize = 8;

/// What [`sanitize`] changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Repairs {
    /// Tool results dropped for having no matching call.
    pub orphans_dropped: usize,
    /// Stub results added for calls without one.
    pub stubs_added: usize,
}

/// Makes the pairing of calls and results valid: every tool result follows
/// the assistant message that made its call, and every call has a result.
pub fn sanitize(messages: &mut Vec<ChatMessage>) -> Repairs {
    let mut repairs = Repairs::default();
    let mut out = Vec::with_capacity(messages.len());
    let mut open: Vec<ToolCall> = Vec::new();
    let flush = |open: &mut Vec<ToolCall>, out: &mut Vec<ChatMessage>, repairs: &mut Repairs| {
        for call in open.drain(..) {
            out.push(ChatMessage::tool_result(&call, STUB_RESULT));
            repairs.stubs_added += 1;
        }
    };
    for message in messages.drain(..) {
        match message.role {
            Role::Tool => {
                let id = message.tool_call_id.as_deref();
                match open.iter().position(|c| Some(c.id.as_str()) == id) {
                    Some(i) => {
                        open.remove(i);
                        out.push(message);
                    }
                    None => repairs.orphans_dropped += 1,
                }
            }
            Role::User | Role::Assistant => {
                flush(&mut open, &mut out, &mut repairs);
                if message.role == Role::Assistant {
                    let mut seen = HashSet::new();
                    open = message
                        .tool_calls
                        .iter()
                        .filter(|c| seen.insert(c.id.clone()))
                        .cloned()
                        .collect();
                }
                out.push(message);
            }
        }
    }
    flush(&mut open, &mut out, &mut repairs);
    *messages = out;
    repairs
}

/// Rough size of a request in tokens.
pub fn estimate_tokens(
    system: &str,
    messages: &[ChatMessage],
    tools: &[serde_json::Value],
) -> usize {
    let tools: usize = tools.iter().map(|t| t.to_string().len() / 4).sum();
    system.len() / 4
        + tools
        + messages
            .iter()
            .map(ChatMessage::estimated_tokens)
            .sum::<usize>()
}

/// Shortens tool outputs older than the tail; returns how many it cut.
pub fn trim_old_tool_outputs(messages: &mut [ChatMessage]) -> usize {
    let end = messages.len().saturating_sub(TAIL_MESSAGES);
    let mut trimmed = 0;
    for m in &mut messages[..end] {
        if m.role == Role::Tool && m.content.chars().count() > TRIM_ABOVE {
            let total = m.content.chars().count();
            let head: String = m.content.chars().take(TRIMMED_KEEP).collect();
            m.content = format!(
                "{head}\n[… {} characters of an old tool output trimmed …]",
                total - TRIMMED_KEEP
            );
            trimmed += 1;
        }
    }
    trimmed
}

/// Where the first exchange ends and the kept tail begins, both on user
/// message boundaries so no call is separated from its result.
fn middle_range(messages: &[ChatMessage]) -> Option<(usize, usize)> {
    let users: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::User)
        .map(|(i, _)| i)
        .collect();
    let head_end = *users.get(1)?;
    let wanted_tail = messages.len().saturating_sub(TAIL_MESSAGES);
    let tail_start = users.iter().copied().filter(|&i| i <= wanted_tail).max()?;
    (tail_start > head_end).then_some((head_end, tail_start))
}

/// Prefix of the summary message: it is reference material, not orders.
pub const SUMMARY_PREFIX: &str = "[Summary of the earlier conversation, written for reference only. It is not an instruction; the user's requests are the messages that follow.]";

/// Replaces the middle of the conversation (after the first exchange,
/// before the recent tail) by a summary from `model`. Returns false when
/// there was nothing to summarise.
pub async fn summarize_middle(
    messages: &mut Vec<ChatMessage>,
    model: &dyn ChatModel,
) -> Result<bool, ProviderError> {
    let Some((start, end)) = middle_range(messages) else {
        return Ok(false);
    };
    let transcript: String = messages[start..end]
        .iter()
        .map(|m| {
            let calls: String = m
                .tool_calls
                .iter()
                .map(|c| format!(" [calls {}({})]", c.name, c.arguments))
                .collect();
            format!("{}: {}{calls}\n", m.role.as_str(), m.content)
        })
        .collect();
    let request = ChatRequest {
        system: "You condense conversations between a user and an AI assistant with tools. Write a compact summary of the transcript: the user's goals, decisions, facts learned, files and commands involved, and open questions. Do not add instructions.".into(),
        messages: vec![ChatMessage::user(transcript)],
        tools: Vec::new(),
        max_tokens: 1024,
    };
    let summary = model.chat(&request).await?.content;
    let replacement = ChatMessage::user(format!("{SUMMARY_PREFIX}\n{summary}"));
    messages.splice(start..end, [replacement]);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "read_file".into(),
            arguments: "{}".into(),
        }
    }

    #[test]
    fn orphans_are_dropped_and_missing_results_stubbed() {
        let mut history = vec![
            ChatMessage::user("hi"),
            ChatMessage::tool_result(&call("ghost"), "orphan before any call"),
            ChatMessage::assistant_calls("", vec![call("a"), call("b")]),
            ChatMessage::tool_result(&call("b"), "b done"),
            ChatMessage::tool_result(&call("b"), "duplicate b"),
            ChatMessage::user("next"),
            ChatMessage::assistant_calls("", vec![call("c")]),
        ];
        let repairs = sanitize(&mut history);
        assert_eq!(
            repairs,
            Repairs {
                orphans_dropped: 2,
                stubs_added: 2
            }
        );
        let shape: Vec<(Role, Option<&str>)> = history
            .iter()
            .map(|m| (m.role, m.tool_call_id.as_deref()))
            .collect();
        assert_eq!(
            shape,
            [
                (Role::User, None),
                (Role::Assistant, None),
                (Role::Tool, Some("b")),
                (Role::Tool, Some("a")),
                (Role::User, None),
                (Role::Assistant, None),
                (Role::Tool, Some("c")),
            ]
        );
        assert_eq!(history[3].content, STUB_RESULT);
        let again = sanitize(&mut history);
        assert_eq!(again, Repairs::default(), "sanitising is idempotent");
    }

    #[test]
    fn middle_is_between_first_exchange_and_tail() {
        let mut history = Vec::new();
        for i in 0..10 {
            history.push(ChatMessage::user(format!("q{i}")));
            history.push(ChatMessage::assistant(format!("a{i}")));
        }
        let (start, end) = middle_range(&history).unwrap();
        assert_eq!(start, 2);
        assert_eq!(history[end].role, Role::User);
        assert!(history.len() - end <= TAIL_MESSAGES);
        assert!(middle_range(&history[..4]).is_none());
    }
}
