//! The session key an inbound event belongs to (SPEC §5): DM
//! `<platform>:dm:<chat>[:<thread>]`, group
//! `<platform>:group:<chat>[:<thread>][:<user>]`, and for platforms whose
//! events are about entities `<platform>:<chat>:<entity>` (a route's pull
//! request: `<platform>:<route>:github:<repo>:pr:<n>`).

use crate::platform::{ChatKind, InboundEvent, KeyScheme};

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

/// The session key of an event on a platform whose keys follow `scheme`.
pub fn session_key(event: &InboundEvent, rules: KeyRules, scheme: KeyScheme) -> String {
    if scheme == KeyScheme::Entity {
        let entity = event.thread_id.as_deref().unwrap_or(&event.event_id);
        return format!(
            "{}:{}:{entity}",
            part(&event.platform),
            part(&event.chat_id)
        );
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

    const CHAT: KeyScheme = KeyScheme::Conversation;

    pub(crate) fn event(kind: ChatKind, thread: Option<&str>) -> InboundEvent {
        InboundEvent {
            platform: "chat".into(),
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
            in_thread: false,
            attachments: Vec::new(),
            revision: crate::platform::Revision::New,
        }
    }

    #[test]
    fn keys_follow_the_spec() {
        let rules = KeyRules::default();
        assert_eq!(
            session_key(&event(ChatKind::Dm, None), rules, CHAT),
            "chat:dm:-100"
        );
        assert_eq!(
            session_key(&event(ChatKind::Dm, Some("7")), rules, CHAT),
            "chat:dm:-100:7"
        );
        assert_eq!(
            session_key(&event(ChatKind::Group, None), rules, CHAT),
            "chat:group:-100:42"
        );
        assert_eq!(
            session_key(&event(ChatKind::Group, Some("7")), rules, CHAT),
            "chat:group:-100:7"
        );
        let shared = KeyRules {
            group_sessions_per_user: false,
            thread_sessions_per_user: true,
        };
        assert_eq!(
            session_key(&event(ChatKind::Group, None), shared, CHAT),
            "chat:group:-100"
        );
        assert_eq!(
            session_key(&event(ChatKind::Group, Some("7")), shared, CHAT),
            "chat:group:-100:7:42"
        );
        let mut hook = event(ChatKind::Group, Some("github:acme/app:pr:12"));
        hook.platform = "hook".into();
        hook.chat_id = "github".into();
        assert_eq!(
            session_key(&hook, rules, KeyScheme::Entity),
            "hook:github:github:acme/app:pr:12"
        );
    }

    #[test]
    fn separators_in_ids_cannot_forge_keys() {
        let mut e = event(ChatKind::Group, None);
        e.chat_id = "-100:42".into();
        e.user_id = "x".into();
        assert_eq!(
            session_key(&e, KeyRules::default(), CHAT),
            "chat:group:-100_42:x"
        );
    }
}
