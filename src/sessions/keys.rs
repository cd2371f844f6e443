//! Inbound events as adapters hand them over, and the session key each one
//! belongs to (SPEC §5): DM `<platform>:dm:<chat>[:<thread>]`, group
//! `<platform>:group:<chat>[:<thread>][:<user>]`, webhook
//! `webhook:<route>:<entity>`.

use serde::{Deserialize, Serialize};

/// Where a message was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatKind {
    /// A one-to-one conversation with the bot.
    Dm,
    /// A group, channel or guild text channel.
    Group,
}

/// A message (or webhook event) from a platform, already parsed by its
/// adapter. Adapters know nothing about agents; this is all they hand on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboundEvent {
    /// Platform name (`telegram`, `slack`, `discord`, `webhook`, `cli`).
    pub platform: String,
    /// DM or group.
    pub kind: ChatKind,
    /// Chat or channel id (for webhooks: the route name).
    pub chat_id: String,
    /// Thread, topic or Slack thread_ts.
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
    /// Webhook entity (`github:<repo>:pr:<n>`), for webhook events.
    #[serde(default)]
    pub entity: Option<String>,
}

/// How group conversations are split into sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRules {
    /// One session per user in a group (default) instead of one per group.
    pub group_sessions_per_user: bool,
    /// In a thread, one session per user too (default off: one per thread).
    pub thread_sessions_per_user: bool,
}

impl Default for KeyRules {
    fn default() -> Self {
        Self {
            group_sessions_per_user: true,
            thread_sessions_per_user: false,
        }
    }
}

/// Characters that would make a key ambiguous are replaced.
fn part(value: &str) -> String {
    value
        .chars()
        .map(|c| {
            if c == ':' || c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// The session key of an event.
pub fn session_key(event: &InboundEvent, rules: KeyRules) -> String {
    if event.platform == "webhook" {
        let entity = event.entity.as_deref().unwrap_or(&event.event_id);
        return format!("webhook:{}:{entity}", part(&event.chat_id));
    }
    let platform = part(&event.platform);
    let chat = part(&event.chat_id);
    let thread = event.thread_id.as_deref().map(part);
    match event.kind {
        ChatKind::Dm => match thread {
            Some(t) => format!("{platform}:dm:{chat}:{t}"),
            None => format!("{platform}:dm:{chat}"),
        },
        ChatKind::Group => {
            let mut key = format!("{platform}:group:{chat}");
            let per_user = match &thread {
                Some(t) => {
                    key.push(':');
                    key.push_str(t);
                    rules.thread_sessions_per_user
                }
                None => rules.group_sessions_per_user,
            };
            if per_user {
                key.push(':');
                key.push_str(&part(&event.user_id));
            }
            key
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn event(kind: ChatKind, thread: Option<&str>) -> InboundEvent {
        InboundEvent {
            platform: "telegram".into(),
            kind,
            chat_id: "-100".into(),
            thread_id: thread.map(str::to_string),
            user_id: "42".into(),
            user_name: "Ann".into(),
            roles: vec![],
            text: "hi".into(),
            event_id: "1".into(),
            message_id: None,
            mentioned: true,
            from_bot: false,
            entity: None,
        }
    }

    #[test]
    fn keys_follow_the_spec() {
        let rules = KeyRules::default();
        assert_eq!(
            session_key(&event(ChatKind::Dm, None), rules),
            "telegram:dm:-100"
        );
        assert_eq!(
            session_key(&event(ChatKind::Dm, Some("7")), rules),
            "telegram:dm:-100:7"
        );
        assert_eq!(
            session_key(&event(ChatKind::Group, None), rules),
            "telegram:group:-100:42"
        );
        assert_eq!(
            session_key(&event(ChatKind::Group, Some("7")), rules),
            "telegram:group:-100:7"
        );
        let shared = KeyRules {
            group_sessions_per_user: false,
            thread_sessions_per_user: true,
        };
        assert_eq!(
            session_key(&event(ChatKind::Group, None), shared),
            "telegram:group:-100"
        );
        assert_eq!(
            session_key(&event(ChatKind::Group, Some("7")), shared),
            "telegram:group:-100:7:42"
        );
        let mut hook = event(ChatKind::Group, None);
        hook.platform = "webhook".into();
        hook.chat_id = "github".into();
        hook.entity = Some("github:acme/app:pr:12".into());
        assert_eq!(
            session_key(&hook, rules),
            "webhook:github:github:acme/app:pr:12"
        );
    }

    #[test]
    fn separators_in_ids_cannot_forge_keys() {
        let mut e = event(ChatKind::Group, None);
        e.chat_id = "-100:42".into();
        e.user_id = "x".into();
        assert_eq!(
            session_key(&e, KeyRules::default()),
            "telegram:group:-100_42:x"
        );
    }
}
