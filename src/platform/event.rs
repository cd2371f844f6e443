//! Inbound events as adapters hand them over: who wrote what where, with
//! the files attached and whether it was written in a thread. Adapters
//! translate; deciding what an event means is the sessions' intake.

use serde::{Deserialize, Serialize};

use super::{ChatRef, PlatformId};

/// Where a message was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatKind {
    /// A one-to-one conversation with the bot.
    Dm,
    /// A group, channel or guild text channel.
    Group,
}

/// What kind of file came with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttachmentKind {
    /// A picture (`vision_analyze` can look at it).
    Image,
    /// A voice note or an audio file: heard through `[transcription]`
    /// before its turn, never handed to the agent as a file.
    Audio,
    /// Anything else.
    Document,
}

/// A file that came with a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// Picture or document.
    pub kind: AttachmentKind,
    /// The platform's reference to fetch it by (Telegram's file id).
    pub file: String,
    /// A name safe to save it under (letters, digits, `-`, `_`, one `.`;
    /// see [`Attachment::safe_name`]).
    pub name: String,
    /// Its MIME type, when the platform says.
    #[serde(default)]
    pub mime: Option<String>,
    /// Its size in bytes, when the platform says.
    #[serde(default)]
    pub size: Option<u64>,
    /// A link the agent can open, where the platform gives one.
    #[serde(default)]
    pub url: Option<String>,
    /// How long it plays in seconds (audio), when the platform says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_secs: Option<u32>,
}

impl Attachment {
    /// A name safe to save a file under: the letters, digits, `-` and `_`
    /// of `stem`, then the extension of `original` where it is a plain one
    /// (at most eight letters or digits), else `fallback`.
    pub fn safe_name(stem: &str, original: Option<&str>, fallback: &str) -> String {
        let stem: String = stem
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        let extension = original
            .and_then(|n| n.rsplit_once('.'))
            .map(|(_, ext)| ext)
            .filter(|e| {
                !e.is_empty() && e.len() <= 8 && e.chars().all(|c| c.is_ascii_alphanumeric())
            })
            .map_or_else(|| fallback.to_string(), str::to_ascii_lowercase);
        format!("{stem}.{extension}")
    }
}

/// A message (or webhook event) from a platform, already translated by its
/// adapter. Adapters know nothing about agents; this is all they hand on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboundEvent {
    /// Platform name.
    pub platform: PlatformId,
    /// DM or group.
    pub kind: ChatKind,
    /// Chat or channel id (for webhooks: the route name).
    pub chat_id: String,
    /// Thread, topic, Slack `thread_ts`, or the webhook entity.
    pub thread_id: Option<String>,
    /// Sender id on the platform.
    pub user_id: String,
    /// Sender display name.
    pub user_name: String,
    /// Roles of the sender (Discord).
    #[serde(default)]
    pub roles: Vec<String>,
    /// Message text (or rendered webhook prompt).
    pub text: String,
    /// The platform's id for this event, for deduplication.
    pub event_id: String,
    /// The platform's id of the message, for replying to it.
    #[serde(default)]
    pub message_id: Option<String>,
    /// Whether the bot was mentioned or replied to.
    #[serde(default)]
    pub mentioned: bool,
    /// Whether the sender is a bot.
    #[serde(default)]
    pub from_bot: bool,
    /// Written in an existing thread: a reply there continues the bot's
    /// conversation without a mention.
    #[serde(default)]
    pub in_thread: bool,
    /// Files that came with it (fetched or described before it is stored).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    /// A new message, or a change to message `message_id`.
    #[serde(default, skip_serializing_if = "Revision::is_new")]
    pub revision: Revision,
}

/// What an event does to a chat's messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Revision {
    /// A message was written.
    #[default]
    New,
    /// Message `message_id` was edited; `text` is what it says now.
    Edited,
    /// Message `message_id` was deleted.
    Deleted,
}

impl Revision {
    /// A new message.
    pub fn is_new(&self) -> bool {
        *self == Revision::New
    }
}

impl InboundEvent {
    /// Where the event was written: replies go there.
    pub fn chat(&self) -> ChatRef {
        ChatRef {
            platform: self.platform.clone(),
            chat: self.chat_id.clone(),
            thread: self.thread_id.clone(),
        }
    }

    /// Who wrote it.
    pub fn actor(&self) -> Actor {
        Actor {
            platform: self.platform.clone(),
            user_id: self.user_id.clone(),
            name: self.user_name.clone(),
            account: None,
        }
    }
}

/// A person acting on a platform (writing, pressing a button).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Actor {
    /// Platform name.
    pub platform: PlatformId,
    /// User id on it.
    pub user_id: String,
    /// Display name.
    pub name: String,
    /// A forge account's number, when the event gave it: it stays with the
    /// account when its login (`user_id`) is renamed or taken by another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<u64>,
}

impl Actor {
    /// `<platform>:<user id>`, the form requesters are stored in.
    pub fn key(&self) -> String {
        format!("{}:{}", self.platform, self.user_id)
    }

    /// How they are named in messages: their name, else their key.
    pub fn shown(&self) -> String {
        if self.name.is_empty() {
            self.key()
        } else {
            self.name.clone()
        }
    }
}
