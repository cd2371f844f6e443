//! Messages of a streamed answer that a crash left half sent: each is
//! sent under a key of its own, recorded with the draft first
//! (`drafts.sending`); after a restart the platform is asked for the
//! message by that key (Discord's enforced nonce, Slack's metadata), so
//! the answer is written into it instead of leaving it stray.

use std::time::Duration;

use crate::platform::{ChatRef, Platform, PlatformError};
use crate::store::{Draft as StoredDraft, Store};

/// Longest a restart looks for a message a crash left half sent.
const RECLAIM_WAIT: Duration = Duration::from_secs(15);

/// `n` in base 36.
fn base36(mut n: u64) -> String {
    let mut digits = Vec::new();
    loop {
        digits.push(char::from_digit((n % 36) as u32, 36).unwrap_or('0'));
        n /= 36;
        if n == 0 {
            break;
        }
    }
    digits.iter().rev().collect()
}

/// The key of the `n`th message a stream sends for inbox event
/// `inbox_id` at `now_ms`: its own among every send (at most 23
/// characters, so Discord's 25-character nonce holds it with a piece
/// number).
pub(super) fn key(inbox_id: i64, now_ms: i64, n: u64) -> String {
    format!(
        "d{}.{}{}",
        base36(inbox_id.unsigned_abs()),
        base36(now_ms.unsigned_abs() % 36u64.pow(5)),
        base36(n)
    )
}

/// A message of a draft being sent: the key it goes under (see [`key`]),
/// its place (`s`: the status message) and when.
pub(super) fn sending(key: &str, place: Option<usize>, at_ms: i64) -> String {
    let place = place.map_or_else(|| "s".to_string(), |i| i.to_string());
    format!("{key} {place} {at_ms}")
}

/// Inbox event `inbox_id`'s stored draft, with the message a crash left
/// half sent (its id never stored) found again where the platform can.
/// While the platform cannot be asked, `sending` stays set, for a later
/// look.
pub(super) async fn reclaimed(
    store: &Store,
    port: &dyn Platform,
    chat: &ChatRef,
    inbox_id: i64,
) -> Result<StoredDraft, crate::store::StoreError> {
    let mut draft = store.draft(inbox_id).await?;
    let Some(record) = draft.sending.clone() else {
        return Ok(draft);
    };
    let mut parts = record.split(' ');
    let (key, place, at) = (parts.next(), parts.next(), parts.next());
    let at = at.and_then(|t| t.parse::<i64>().ok()).unwrap_or(0);
    // Only a message that would take the place next free is looked for.
    let slot = match place {
        Some("s") if draft.status.is_none() => Some(None),
        Some(i) if i.parse::<usize>().ok() == Some(draft.messages.len()) => Some(Some(())),
        _ => None,
    };
    if let (Some(key), Some(slot)) = (key, slot) {
        let looked = tokio::time::timeout(
            RECLAIM_WAIT,
            crate::platform::retrying(|| port.reclaim(chat, key, at)),
        )
        .await;
        match looked {
            Ok(Ok(Some(id))) => match slot {
                None => draft.status = Some(id),
                Some(()) => draft.messages.push(id),
            },
            Ok(Ok(None)) => {}
            Ok(Err(PlatformError::Unavailable(why))) => {
                tracing::warn!(inbox.id = inbox_id, error = %why, "a message a crash left half sent could not be looked for yet");
                return Ok(draft);
            }
            Err(_) => {
                tracing::warn!(
                    inbox.id = inbox_id,
                    "looking for a message a crash left half sent timed out"
                );
                return Ok(draft);
            }
            Ok(Err(err)) => {
                tracing::warn!(inbox.id = inbox_id, error = %err, "a message a crash left half sent was not found");
            }
        }
    }
    draft.sending = None;
    if let Err(err) = store.set_draft(inbox_id, &draft).await {
        tracing::warn!(inbox.id = inbox_id, error = %err, "the draft's found message not stored yet");
    }
    Ok(draft)
}
