//! Slack events as inbound events: messages and mentions (with their files:
//! pictures, documents, audio clips), edits (`message_changed`) and
//! deletions (`message_deleted`). Events API and Socket Mode both hand the
//! event over as JSON.

use serde_json::Value;

use super::ID;
use crate::platform::{Attachment, AttachmentKind, ChatKind, InboundEvent, Revision};

/// Who the bot is, as events name it.
pub(super) struct Me<'a> {
    /// The bot's user id.
    pub(super) user: &'a str,
    /// Bot ids whose messages count like a person's.
    pub(super) allowed_bots: &'a [String],
}

/// The inbound event of an Events API `event`, if it is a message for the
/// bot to consider.
pub(super) fn message_event(event: &Value, me: &Me<'_>) -> Option<InboundEvent> {
    let kind = event["type"].as_str()?;
    if kind != "message" && kind != "app_mention" {
        return None;
    }
    match event["subtype"].as_str() {
        Some("message_changed") => return changed_event(event, me),
        Some("message_deleted") => return deleted_event(event),
        _ => {}
    }
    // Joins, topic changes and the like are not messages to answer.
    if let Some(sub) = event["subtype"].as_str()
        && sub != "file_share"
        && sub != "thread_broadcast"
    {
        return None;
    }
    let user = event["user"].as_str()?;
    let channel = event["channel"].as_str()?;
    let ts = event["ts"].as_str()?;
    let raw = event["text"].as_str().unwrap_or_default();
    let mention = format!("<@{}>", me.user);
    let text = raw.replace(&mention, "").trim().to_string();
    let dm = event["channel_type"].as_str() == Some("im");
    let allowed_bot = event["bot_id"]
        .as_str()
        .is_some_and(|b| me.allowed_bots.iter().any(|a| a == b));
    let from_bot =
        user == me.user || (event.get("bot_id").is_some_and(|b| !b.is_null()) && !allowed_bot);
    // In channels the conversation lives in the thread of the message
    // that started it.
    let thread = event["thread_ts"]
        .as_str()
        .map(str::to_string)
        .or_else(|| (!dm).then(|| ts.to_string()));
    Some(InboundEvent {
        platform: ID.into(),
        kind: if dm { ChatKind::Dm } else { ChatKind::Group },
        chat_id: channel.into(),
        thread_id: thread,
        user_id: user.into(),
        user_name: user.into(),
        roles: Vec::new(),
        text,
        // `message` and `app_mention` both arrive for a mention, and
        // Slack retries: the message itself is the identity.
        event_id: format!("{channel}:{ts}"),
        message_id: Some(ts.into()),
        mentioned: dm || kind == "app_mention" || raw.contains(&mention),
        from_bot,
        in_thread: event["thread_ts"].is_string(),
        attachments: files(event),
        revision: Revision::New,
    })
}

/// The message's files that can be downloaded (their private URL needs the
/// bot's token, so the intake fetches them through the port).
fn files(event: &Value) -> Vec<Attachment> {
    let Some(files) = event["files"].as_array() else {
        return Vec::new();
    };
    files
        .iter()
        .filter_map(|f| {
            let id = f["id"].as_str()?;
            let url = f["url_private_download"]
                .as_str()
                .or(f["url_private"].as_str())?;
            let mime = f["mimetype"].as_str().map(str::to_string);
            let kind = match mime.as_deref() {
                _ if f["subtype"] == "slack_audio" => AttachmentKind::Audio,
                Some(t) if t.starts_with("audio/") => AttachmentKind::Audio,
                Some(t) if t.starts_with("image/") => AttachmentKind::Image,
                _ => AttachmentKind::Document,
            };
            let fallback = f["filetype"]
                .as_str()
                .filter(|t| t.len() <= 8 && t.chars().all(|c| c.is_ascii_alphanumeric()))
                .unwrap_or("bin");
            Some(Attachment {
                kind,
                file: id.to_string(),
                name: Attachment::safe_name(id, f["name"].as_str(), fallback),
                mime,
                size: f["size"].as_u64(),
                url: Some(url.to_string()),
                duration_secs: f["duration_ms"]
                    .as_u64()
                    .map(|ms| u32::try_from(ms.div_ceil(1000)).unwrap_or(u32::MAX)),
            })
        })
        .collect()
}

/// A `message_changed` event: the message as it reads now.
fn changed_event(event: &Value, me: &Me<'_>) -> Option<InboundEvent> {
    let mut message = event.get("message")?.clone();
    message["channel"] = event["channel"].clone();
    message["channel_type"] = event["channel_type"].clone();
    message["type"] = "message".into();
    let edited_at = message["edited"]["ts"]
        .as_str()
        .or(event["event_ts"].as_str())
        .unwrap_or_default()
        .to_string();
    let mut edited = message_event(&message, me)?;
    edited.event_id = format!("{}:edited:{edited_at}", edited.event_id);
    edited.revision = Revision::Edited;
    Some(edited)
}

/// A `message_deleted` event: which message is gone.
fn deleted_event(event: &Value) -> Option<InboundEvent> {
    let channel = event["channel"].as_str()?;
    let ts = event["deleted_ts"].as_str()?;
    let before = &event["previous_message"];
    Some(InboundEvent {
        platform: ID.into(),
        kind: ChatKind::Group,
        chat_id: channel.into(),
        thread_id: before["thread_ts"].as_str().map(str::to_string),
        user_id: before["user"].as_str().unwrap_or_default().into(),
        user_name: String::new(),
        roles: Vec::new(),
        text: String::new(),
        event_id: format!("{channel}:{ts}:deleted"),
        message_id: Some(ts.into()),
        mentioned: false,
        from_bot: before.get("bot_id").is_some_and(|b| !b.is_null()),
        in_thread: false,
        attachments: Vec::new(),
        revision: Revision::Deleted,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_shared_audio_clip_and_a_picture_are_attachments() {
        let me = Me {
            user: "UBOT",
            allowed_bots: &[],
        };
        let event = json!({
            "type": "message", "subtype": "file_share", "channel": "D1", "channel_type": "im",
            "user": "U1", "ts": "1700000000.000100", "text": "",
            "files": [
                {"id": "F1", "name": "audio_message.webm", "mimetype": "audio/webm", "filetype": "webm",
                 "subtype": "slack_audio", "size": 5120, "duration_ms": 4200,
                 "url_private": "https://files.slack.com/files-pri/T-F1/audio_message.webm",
                 "url_private_download": "https://files.slack.com/files-pri/T-F1/download/audio_message.webm"},
                {"id": "F2", "name": "../../etc/shot.PNG", "mimetype": "image/png", "filetype": "png",
                 "size": 99, "url_private": "https://files.slack.com/files-pri/T-F2/shot.png"},
                {"id": "F3", "name": "gone.txt", "mimetype": "text/plain"}
            ]
        });
        let e = message_event(&event, &me).unwrap();
        let listed: Vec<_> = e
            .attachments
            .iter()
            .map(|a| {
                (
                    a.kind,
                    a.name.as_str(),
                    a.url.as_deref(),
                    a.size,
                    a.duration_secs,
                )
            })
            .collect();
        assert_eq!(
            listed,
            [
                (
                    AttachmentKind::Audio,
                    "F1.webm",
                    Some("https://files.slack.com/files-pri/T-F1/download/audio_message.webm"),
                    Some(5120),
                    Some(5)
                ),
                (
                    AttachmentKind::Image,
                    "F2.png",
                    Some("https://files.slack.com/files-pri/T-F2/shot.png"),
                    Some(99),
                    None
                ),
            ]
        );
    }
}
