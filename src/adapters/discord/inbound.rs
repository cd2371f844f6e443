//! Discord messages as inbound events. DMs and guild channels; a thread is
//! the session thread of its parent channel (so the parent's allowlist
//! entry covers it); the bot's mention is taken out of the text; bots,
//! webhooks and the bot itself are ignored unless allowed; system messages
//! (joins, pins, thread notices) are not messages to answer.

use std::collections::HashMap;
use std::sync::Mutex;

use serenity::http::Http;
use serenity::model::channel::{Channel, ChannelType, Message, MessageType};
use serenity::model::id::{ChannelId, UserId};
use serenity::model::user::User;

use crate::config::DiscordConfig;
use crate::platform::{Attachment, AttachmentKind, ChatKind, InboundEvent};

/// Where a channel sits: the chat an allowlist names, and the thread
/// inside it if the channel is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The channel (a thread's parent).
    pub chat: String,
    /// The thread's own channel id.
    pub thread: Option<String>,
}

impl Place {
    /// A channel that is not a thread.
    pub fn channel(id: ChannelId) -> Self {
        Self {
            chat: id.to_string(),
            thread: None,
        }
    }

    /// `id` if it is a thread (`kind`) under `parent`, else a channel.
    pub fn of(id: ChannelId, kind: ChannelType, parent: Option<ChannelId>) -> Self {
        let is_thread = matches!(
            kind,
            ChannelType::PublicThread | ChannelType::PrivateThread | ChannelType::NewsThread
        );
        match parent {
            Some(parent) if is_thread => Self {
                chat: parent.to_string(),
                thread: Some(id.to_string()),
            },
            _ => Self::channel(id),
        }
    }
}

/// Most channels remembered before the cache starts over.
const PLACES_CAP: usize = 10_000;

/// Which guild channels are threads, looked up once each over REST.
#[derive(Debug, Default)]
pub struct Places {
    known: Mutex<HashMap<ChannelId, Place>>,
}

impl Places {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ChannelId, Place>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers what an interaction's channel object said.
    pub fn learn(&self, id: ChannelId, place: Place) {
        let mut known = self.lock();
        if known.len() >= PLACES_CAP {
            known.clear();
        }
        known.insert(id, place);
    }

    /// Where guild channel `id` sits; a failed lookup counts as a plain
    /// channel (and is asked again next time).
    pub async fn resolve(&self, http: &Http, id: ChannelId) -> Place {
        if let Some(place) = self.lock().get(&id) {
            return place.clone();
        }
        match http.get_channel(id).await {
            Ok(Channel::Guild(channel)) => {
                let place = Place::of(id, channel.kind, channel.parent_id);
                self.learn(id, place.clone());
                place
            }
            Ok(_) => Place::channel(id),
            Err(err) => {
                tracing::warn!(channel = %id, error = %err, "discord channel lookup failed");
                Place::channel(id)
            }
        }
    }
}

/// What a person is called where they wrote: the guild nickname, else
/// the display name, else the username.
pub fn display_name(user: &User, nick: Option<&str>) -> String {
    nick.map(str::to_string)
        .or_else(|| user.global_name.clone())
        .unwrap_or_else(|| user.name.clone())
}

/// Whether `msg` mentions the bot `me` or replies to one of its messages.
fn mentions(msg: &Message, me: UserId) -> bool {
    msg.mentions.iter().any(|u| u.id == me)
        || msg.content.contains(&format!("<@{me}>"))
        || msg.content.contains(&format!("<@!{me}>"))
        || msg
            .referenced_message
            .as_ref()
            .is_some_and(|r| r.author.id == me)
}

/// The message text without the bot's mention.
fn text(msg: &Message, me: UserId) -> String {
    msg.content
        .replace(&format!("<@{me}>"), "")
        .replace(&format!("<@!{me}>"), "")
        .trim()
        .to_string()
}

/// The message's files, as links the agent can follow; audio (voice
/// messages among it) is fetched and heard before the turn.
fn attachments(msg: &Message) -> Vec<Attachment> {
    msg.attachments
        .iter()
        .map(|a| {
            let kind = match a.content_type.as_deref() {
                Some(t) if t.starts_with("image/") => AttachmentKind::Image,
                Some(t) if t.starts_with("audio/") => AttachmentKind::Audio,
                _ => AttachmentKind::Document,
            };
            Attachment {
                kind,
                file: a.id.to_string(),
                name: Attachment::safe_name(&a.id.to_string(), Some(&a.filename), "bin"),
                mime: a.content_type.clone(),
                size: Some(u64::from(a.size)),
                url: Some(a.url.clone()),
                duration_secs: a.duration_secs.map(|s| s.ceil() as u32),
            }
        })
        .collect()
}

/// The inbound event of `msg` (in `place`), if it is one to consider.
/// With `auto_thread`, a guild message outside a thread opens the thread
/// Discord gives the message's own id.
pub fn message_event(
    msg: &Message,
    me: UserId,
    place: Place,
    config: &DiscordConfig,
) -> Option<InboundEvent> {
    if !matches!(msg.kind, MessageType::Regular | MessageType::InlineReply) {
        return None;
    }
    let text = text(msg, me);
    let attachments = attachments(msg);
    if text.is_empty() && attachments.is_empty() {
        return None;
    }
    let dm = msg.guild_id.is_none();
    let author = &msg.author;
    let allowed_bot = config
        .allowed_bots
        .iter()
        .any(|b| *b == author.id.to_string());
    let from_bot = author.id == me || ((author.bot || msg.webhook_id.is_some()) && !allowed_bot);
    let in_thread = place.thread.is_some();
    let thread = match place.thread {
        Some(t) => Some(t),
        None if config.auto_thread && !dm => Some(msg.id.to_string()),
        None => None,
    };
    Some(InboundEvent {
        platform: super::ID.into(),
        kind: if dm { ChatKind::Dm } else { ChatKind::Group },
        chat_id: place.chat,
        thread_id: thread,
        user_id: author.id.to_string(),
        user_name: display_name(author, msg.member.as_ref().and_then(|m| m.nick.as_deref())),
        roles: msg
            .member
            .as_ref()
            .map(|m| m.roles.iter().map(ToString::to_string).collect())
            .unwrap_or_default(),
        text,
        event_id: msg.id.to_string(),
        message_id: Some(msg.id.to_string()),
        mentioned: dm || mentions(msg, me),
        from_bot,
        in_thread,
        attachments,
        revision: crate::platform::Revision::New,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const ME: u64 = 900;

    fn message(extra: Value) -> Message {
        let mut m = json!({
            "id": "1001", "channel_id": "200", "guild_id": "300",
            "author": {"id": "42", "username": "ada", "global_name": "Ada", "discriminator": "0", "avatar": null},
            "member": {"roles": ["77"], "joined_at": "2026-01-01T00:00:00+00:00", "deaf": false, "mute": false, "flags": 0},
            "content": "<@900> hello", "timestamp": "2026-11-29T10:00:00+00:00",
            "edited_timestamp": null, "tts": false, "mention_everyone": false,
            "mentions": [{"id": "900", "username": "switchboard", "discriminator": "0", "avatar": null, "bot": true}],
            "mention_roles": [], "attachments": [], "embeds": [], "pinned": false, "type": 0
        });
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        serde_json::from_value(m).unwrap()
    }

    fn event(extra: Value, config: &DiscordConfig) -> Option<InboundEvent> {
        let msg = message(extra);
        message_event(
            &msg,
            UserId::new(ME),
            Place::channel(msg.channel_id),
            config,
        )
    }

    #[test]
    fn a_guild_mention_becomes_an_event_without_the_mention() {
        let e = event(json!({}), &DiscordConfig::default()).unwrap();
        assert_eq!(e.kind, ChatKind::Group);
        assert_eq!(e.text, "hello");
        assert!(e.mentioned);
        assert!(!e.from_bot);
        assert_eq!(e.roles, vec!["77"]);
        assert_eq!(e.user_name, "Ada");
        let nick = json!({"member": {"roles": [], "nick": "ada-ops", "joined_at": null, "deaf": false, "mute": false}});
        let e = event(nick, &DiscordConfig::default()).unwrap();
        assert_eq!(e.user_name, "ada-ops", "a guild nickname wins");
        assert_eq!(e.event_id, "1001");
        assert_eq!(e.thread_id, None);
    }

    #[test]
    fn unmentioned_bots_and_system_messages_are_told_apart() {
        let plain = event(
            json!({"content": "hi all", "mentions": []}),
            &DiscordConfig::default(),
        );
        assert!(!plain.unwrap().mentioned);
        let bot = json!({"author": {"id": "5", "username": "ci", "discriminator": "0", "avatar": null, "bot": true}});
        assert!(
            event(bot.clone(), &DiscordConfig::default())
                .unwrap()
                .from_bot
        );
        let allowed = DiscordConfig {
            allowed_bots: vec!["5".into()],
            ..DiscordConfig::default()
        };
        assert!(!event(bot, &allowed).unwrap().from_bot);
        let me = json!({"author": {"id": "900", "username": "switchboard", "discriminator": "0", "avatar": null, "bot": true}});
        assert!(event(me, &allowed).unwrap().from_bot);
        assert!(event(json!({"type": 7}), &DiscordConfig::default()).is_none());
        assert!(
            event(
                json!({"content": "<@900>", "attachments": []}),
                &DiscordConfig::default()
            )
            .is_none()
        );
    }

    #[test]
    fn dms_threads_and_auto_threads() {
        let dm = event(
            json!({"guild_id": null, "member": null, "content": "hey", "mentions": []}),
            &DiscordConfig::default(),
        )
        .unwrap();
        assert_eq!(dm.kind, ChatKind::Dm);
        assert!(dm.mentioned);
        let auto = DiscordConfig {
            auto_thread: true,
            ..DiscordConfig::default()
        };
        assert_eq!(
            event(json!({}), &auto).unwrap().thread_id.as_deref(),
            Some("1001")
        );
        let msg = message(json!({"channel_id": "555"}));
        let place = Place::of(
            msg.channel_id,
            ChannelType::PublicThread,
            Some(ChannelId::new(200)),
        );
        let e = message_event(&msg, UserId::new(ME), place, &auto).unwrap();
        assert_eq!(
            (e.chat_id.as_str(), e.thread_id.as_deref()),
            ("200", Some("555"))
        );
    }

    #[test]
    fn replies_to_the_bot_count_as_mentions_and_attachments_are_listed() {
        let reply = json!({
            "content": "and then?", "mentions": [], "type": 19,
            "referenced_message": message(json!({"id": "999", "author": {"id": "900", "username": "switchboard", "discriminator": "0", "avatar": null, "bot": true}})),
            "attachments": [
                {"id": "1", "filename": "log.txt", "size": 12, "url": "https://cdn.example/log.txt", "proxy_url": "https://cdn.example/p", "content_type": "text/plain"},
                {"id": "2", "filename": "shot.png", "size": 99, "url": "https://cdn.example/shot.png", "proxy_url": "https://cdn.example/q", "content_type": "image/png"}
            ]
        });
        let e = event(reply, &DiscordConfig::default()).unwrap();
        assert!(e.mentioned);
        assert_eq!(e.text, "and then?");
        let listed: Vec<(AttachmentKind, &str, Option<&str>)> = e
            .attachments
            .iter()
            .map(|a| (a.kind, a.name.as_str(), a.url.as_deref()))
            .collect();
        assert_eq!(
            listed,
            [
                (
                    AttachmentKind::Document,
                    "1.txt",
                    Some("https://cdn.example/log.txt")
                ),
                (
                    AttachmentKind::Image,
                    "2.png",
                    Some("https://cdn.example/shot.png")
                )
            ]
        );
        assert_eq!(e.attachments[0].mime.as_deref(), Some("text/plain"));
        assert_eq!(e.attachments[0].size, Some(12));
    }
}
