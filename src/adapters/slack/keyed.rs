//! Messages sent under a key: the key rides in the message's metadata,
//! by which a restart finds a message whose `ts` a crash lost.

use std::time::Duration;

use serde_json::Value;
use slack_morphism::prelude::*;

use super::Slack;
use crate::platform::{ChatRef, PlatformError};

/// The metadata event type of a message sent under a key.
const KEY_EVENT: &str = "switchboard_message";

/// `content`, the `i`th message of a text sent under `key`, carrying its
/// key (the first one's as it is, the next ones numbered).
pub(super) fn marked(content: SlackMessageContent, key: &str, i: usize) -> SlackMessageContent {
    let key = if i == 0 {
        key.to_string()
    } else {
        format!("{key}.{i}")
    };
    content.with_metadata(SlackMessageMetadata {
        event_type: KEY_EVENT.into(),
        event_payload: Some([("key".to_string(), key)].into()),
    })
}

/// The bot's message in `at` that carries `key` (sent at `sent_ms`), among
/// the chat's (or thread's) latest.
pub(super) async fn find(
    slack: &Slack,
    at: &ChatRef,
    key: &str,
    sent_ms: i64,
) -> Result<Option<String>, PlatformError> {
    let api = slack.gateway.config.slack.api_url.trim_end_matches('/');
    // From a minute before it was sent: the page holds it however long
    // the thread or busy the channel.
    let oldest = format!("{}.000000", (sent_ms / 1000 - 60).max(0));
    let mut query = vec![
        ("channel", at.chat.as_str()),
        ("include_all_metadata", "true"),
        ("oldest", oldest.as_str()),
        ("inclusive", "true"),
        ("limit", "200"),
    ];
    let method = match at.thread.as_deref() {
        Some(ts) => {
            query.push(("ts", ts));
            "conversations.replies"
        }
        None => "conversations.history",
    };
    let answer: Value = slack
        .files
        .get(format!("{api}/{method}"))
        .bearer_auth(&slack.token.token_value.0)
        .query(&query)
        .send()
        .await
        .map_err(|e| PlatformError::Unavailable(e.to_string()))?
        .json()
        .await
        .map_err(|e| PlatformError::Unavailable(e.to_string()))?;
    match answer["error"].as_str() {
        _ if answer["ok"] == true => {}
        Some("ratelimited") => {
            return Err(PlatformError::RateLimited {
                retry_after: Duration::from_secs(1),
            });
        }
        why => {
            return Err(PlatformError::Rejected(why.unwrap_or("not ok").to_string()));
        }
    }
    Ok(answer["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| {
            m["user"] == slack.bot_user.as_str()
                && m["metadata"]["event_type"] == KEY_EVENT
                && m["metadata"]["event_payload"]["key"] == key
        })
        .and_then(|m| m["ts"].as_str())
        .map(str::to_string))
}
