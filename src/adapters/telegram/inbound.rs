//! Telegram updates as inbound events: private chats, groups (mentioned by
//! @username, a text mention, or a reply to the bot), forum topics as
//! threads, and photos or documents saved into the session's workspace.

use teloxide::prelude::*;
use teloxide::types::{MessageEntityKind, MessageKind};

use crate::sessions::{ChatKind, InboundEvent};

/// Who the bot is.
#[derive(Debug, Clone)]
pub struct BotIdentity {
    /// Numeric user id.
    pub id: UserId,
    /// `@username` without the `@`.
    pub username: String,
}

/// A file to fetch before the event is handed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// Telegram file id for getFile.
    pub file_id: String,
    /// Stable id, used as the file name.
    pub unique_id: String,
    /// Extension to save it with.
    pub extension: String,
    /// `photo` or `document`.
    pub kind: &'static str,
}

/// Whether the message addresses the bot: an @mention, a text mention, a
/// command aimed at it, or a reply to one of its messages.
fn addresses_bot(msg: &Message, me: &BotIdentity) -> bool {
    let handle = format!("@{}", me.username.to_ascii_lowercase());
    let entities = msg
        .parse_entities()
        .or_else(|| msg.parse_caption_entities());
    let mentioned = entities.is_some_and(|entities| {
        entities.iter().any(|e| match e.kind() {
            MessageEntityKind::Mention => e.text().eq_ignore_ascii_case(&handle),
            MessageEntityKind::TextMention { user } => user.id == me.id,
            MessageEntityKind::BotCommand => e.text().to_ascii_lowercase().ends_with(&handle),
            _ => false,
        })
    });
    let replied = msg
        .reply_to_message()
        .and_then(|r| r.from.as_ref())
        .is_some_and(|u| u.id == me.id);
    mentioned || replied
}

/// The event of a message, with the attachment to fetch, if any; `None`
/// for messages that are not from a person (channel posts, service
/// messages).
pub fn message_event(
    update_id: u32,
    msg: &Message,
    me: &BotIdentity,
) -> Option<(InboundEvent, Option<Attachment>)> {
    if !matches!(msg.kind, MessageKind::Common(_)) {
        return None;
    }
    let from = msg.from.as_ref()?;
    let raw = msg.text().or_else(|| msg.caption()).unwrap_or_default();
    // The bot's own handle is noise to the agent.
    let handle = format!("@{}", me.username);
    let text = raw.replace(&handle, "").trim().to_string();
    let attachment = if let Some(sizes) = msg.photo() {
        sizes
            .iter()
            .max_by_key(|p| u64::from(p.width) * u64::from(p.height))
            .map(|p| Attachment {
                file_id: p.file.id.to_string(),
                unique_id: p.file.unique_id.to_string(),
                extension: "jpg".into(),
                kind: "photo",
            })
    } else {
        msg.document().map(|d| Attachment {
            file_id: d.file.id.to_string(),
            unique_id: d.file.unique_id.to_string(),
            extension: d
                .file_name
                .as_deref()
                .and_then(|n| n.rsplit_once('.'))
                .map(|(_, ext)| ext)
                .filter(|e| e.len() <= 8 && e.chars().all(|c| c.is_ascii_alphanumeric()))
                .unwrap_or("bin")
                .to_ascii_lowercase(),
            kind: "document",
        })
    };
    if text.is_empty() && attachment.is_none() {
        return None;
    }
    let private = msg.chat.is_private();
    let thread_id = msg
        .is_topic_message
        .then_some(msg.thread_id)
        .flatten()
        .map(|t| t.0.0.to_string());
    let event = InboundEvent {
        platform: "telegram".into(),
        kind: if private {
            ChatKind::Dm
        } else {
            ChatKind::Group
        },
        chat_id: msg.chat.id.0.to_string(),
        thread_id,
        user_id: from.id.0.to_string(),
        user_name: from.full_name(),
        roles: Vec::new(),
        text,
        event_id: update_id.to_string(),
        message_id: Some(msg.id.0.to_string()),
        mentioned: private || addresses_bot(msg, me),
        from_bot: from.is_bot,
        entity: None,
    };
    Some((event, attachment))
}
