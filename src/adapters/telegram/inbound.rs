//! Telegram updates as inbound events: private chats, groups (mentioned by
//! @username, a text mention, or a reply to the bot), forum topics as
//! threads, and photos, voice notes, audio files or documents as attachments
//! the intake fetches (audio is heard before its turn).

use teloxide_core::types::{Message, MessageEntityKind, MessageKind, UserId};

use crate::platform::{Attachment, AttachmentKind, ChatKind, InboundEvent};

/// Who the bot is.
#[derive(Debug, Clone)]
pub struct BotIdentity {
    /// Numeric user id.
    pub id: UserId,
    /// `@username` without the `@`.
    pub username: String,
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

/// Whether `text` is a command addressed to another bot
/// (`/approve@other_bot`): that bot's, not this one's.
fn for_another_bot(text: &str, me: &BotIdentity) -> bool {
    let first = text.split_whitespace().next().unwrap_or_default();
    first.starts_with('/')
        && first
            .split_once('@')
            .is_some_and(|(_, bot)| !bot.eq_ignore_ascii_case(&me.username))
}

/// `text` without `@username` however its letters are cased (usernames
/// are ASCII, and Telegram matches them case-insensitively).
fn without_handle(text: &str, username: &str) -> String {
    let handle = format!("@{}", username.to_ascii_lowercase());
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, _) in lower.match_indices(&handle) {
        out.push_str(&text[at..start]);
        at = start + handle.len();
    }
    out.push_str(&text[at..]);
    out
}

/// The message's file: its largest photo size, a voice note, an audio
/// file or a document.
fn attachment(msg: &Message) -> Option<Attachment> {
    let file = |kind, meta: &teloxide_core::types::FileMeta, name: String, mime| Attachment {
        kind,
        file: meta.id.to_string(),
        name,
        mime,
        size: Some(u64::from(meta.size)),
        url: None,
        duration_secs: None,
    };
    let name = |meta: &teloxide_core::types::FileMeta, original: Option<&str>, fallback| {
        Attachment::safe_name(&meta.unique_id.0, original, fallback)
    };
    if let Some(sizes) = msg.photo() {
        return sizes
            .iter()
            .max_by_key(|p| u64::from(p.width) * u64::from(p.height))
            .map(|p| {
                let jpg = name(&p.file, None, "jpg");
                file(
                    AttachmentKind::Image,
                    &p.file,
                    jpg,
                    Some("image/jpeg".into()),
                )
            });
    }
    if let Some(voice) = msg.voice() {
        let mime = voice
            .mime_type
            .as_ref()
            .map_or("audio/ogg".into(), ToString::to_string);
        return Some(Attachment {
            duration_secs: Some(voice.duration.seconds()),
            ..file(
                AttachmentKind::Audio,
                &voice.file,
                name(&voice.file, None, "ogg"),
                Some(mime),
            )
        });
    }
    if let Some(audio) = msg.audio() {
        let saved = name(&audio.file, audio.file_name.as_deref(), "mp3");
        return Some(Attachment {
            duration_secs: Some(audio.duration.seconds()),
            ..file(
                AttachmentKind::Audio,
                &audio.file,
                saved,
                audio.mime_type.as_ref().map(ToString::to_string),
            )
        });
    }
    msg.document().map(|d| {
        let saved = name(&d.file, d.file_name.as_deref(), "bin");
        file(
            AttachmentKind::Document,
            &d.file,
            saved,
            d.mime_type.as_ref().map(ToString::to_string),
        )
    })
}

/// The event of a message, with its attachment; `None` for messages that
/// are not from a person (channel posts, service messages).
pub fn message_event(update_id: u32, msg: &Message, me: &BotIdentity) -> Option<InboundEvent> {
    if !matches!(msg.kind, MessageKind::Common(_)) {
        return None;
    }
    let from = msg.from.as_ref()?;
    let raw = msg.text().or_else(|| msg.caption()).unwrap_or_default();
    if for_another_bot(raw, me) {
        return None;
    }
    // The bot's own handle is noise to the agent.
    let text = without_handle(raw, &me.username).trim().to_string();
    let attachment = attachment(msg);
    if text.is_empty() && attachment.is_none() {
        return None;
    }
    let private = msg.chat.is_private();
    let thread_id = msg
        .is_topic_message
        .then_some(msg.thread_id)
        .flatten()
        .map(|t| t.0.0.to_string());
    Some(InboundEvent {
        platform: super::ID.into(),
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
        in_thread: false,
        attachments: attachment.into_iter().collect(),
        revision: crate::platform::Revision::New,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> BotIdentity {
        BotIdentity {
            id: UserId(7),
            username: "Switchboard_bot".into(),
        }
    }

    #[test]
    fn a_command_for_another_bot_is_not_ours() {
        assert!(for_another_bot("/approve@other_bot always", &me()));
        assert!(!for_another_bot("/approve@switchboard_BOT always", &me()));
        assert!(!for_another_bot("/approve always", &me()));
        assert!(!for_another_bot("mail me@example.com", &me()));
        assert_eq!(
            without_handle(
                "/approve@SWITCHBOARD_bot session, @switchboard_bot",
                "Switchboard_bot"
            ),
            "/approve session, "
        );
        assert_eq!(
            without_handle("é @Switchboard_botx", "switchboard_bot"),
            "é x"
        );
    }
}
