//! Sending what the outbox holds. A row is sent through its platform's
//! port; while the platform is down, not connected yet, or asks us to wait,
//! it is tried again with jittered, doubling waits for up to [`PATIENCE`],
//! then given up (and logged). Each attempt is recorded on the row. When
//! the daemon stops first the row stays pending and the next start sends
//! it: a turn's answer outlives a platform outage and a crash, and the turn
//! is never run again for it.
//!
//! An answer that streamed into the chat is written into the messages its
//! draft showed (edited to their final text, more sent for what does not
//! fit, those left over deleted), so it shows once; edits are idempotent,
//! so doing it again after a crash changes nothing.

use std::time::{Duration, Instant};

use super::manager::Inner;
use crate::platform::{Backoff, ChatRef, Platform, PlatformError};
use crate::store::Outbound;

/// How long a message is tried before it is given up.
pub(super) const PATIENCE: Duration = Duration::from_secs(15 * 60);

/// Sends row `id` (`out`); false when the daemon stopped first.
pub(super) async fn send(inner: &Inner, id: i64, out: &Outbound) -> bool {
    let to = ChatRef {
        platform: out.platform.as_str().into(),
        chat: out.chat_id.clone(),
        thread: out.thread_id.clone(),
    };
    let platforms = inner.platforms();
    // The row's id: a resend after a crash is the same message.
    let key = format!("sb{id}");
    let started = Instant::now();
    let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
    loop {
        let result = match platforms.port(&to.platform) {
            Some(port) => match out.draft_of {
                Some(inbox_id) => finish(inner, port.as_ref(), &to, out, inbox_id, &key).await,
                None => {
                    port.send_keyed(&to, out.reply_to.as_deref(), &out.body, &key)
                        .await
                }
            },
            None if platforms.profile(&to.platform).is_none() => Err(PlatformError::Rejected(
                format!("platform {} is not configured", to.platform),
            )),
            None => Err(PlatformError::Unavailable(format!(
                "{} is not connected",
                to.platform
            ))),
        };
        let (error, told, transient) = match &result {
            Ok(_) => (None, None, false),
            Err(e @ PlatformError::RateLimited { retry_after }) => {
                (Some(e.to_string()), Some(*retry_after), true)
            }
            Err(e @ PlatformError::Unavailable(_)) => (Some(e.to_string()), None, true),
            Err(e) => (Some(e.to_string()), None, false),
        };
        let last = !transient || started.elapsed() >= PATIENCE;
        if !record(inner, id, error.as_deref(), last).await {
            return false;
        }
        match error {
            None => return true,
            Some(error) if last => {
                tracing::error!(outbox.id = id, platform = %to.platform, chat = %to.chat, error, attempts = backoff.tries() + 1, "reply not delivered; given up");
                return true;
            }
            Some(error) => {
                tracing::warn!(outbox.id = id, platform = %to.platform, chat = %to.chat, error, "reply not delivered yet; trying again");
                if !backoff.pause(&inner.stop, told).await {
                    return false;
                }
            }
        }
    }
}

/// Records an attempt at row `id` (`outbox_attempt`). While the store
/// cannot take it (a full disk, the database away) it is tried again, so
/// a row that went out is not left pending, to be sent again at the next
/// start; false when the daemon stopped first (the row then stays
/// pending, and its resend carries the same key).
async fn record(inner: &Inner, id: i64, error: Option<&str>, last: bool) -> bool {
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(10));
    loop {
        match inner.store.outbox_attempt(id, error, last).await {
            Ok(()) => return true,
            Err(err) if err.is_retryable() => {
                tracing::warn!(outbox.id = id, error = %err, "could not record the sending attempt; trying again");
                if !backoff.pause(&inner.stop, None).await {
                    return false;
                }
            }
            Err(err) => {
                tracing::warn!(outbox.id = id, error = %err, "could not record the sending attempt");
                return true;
            }
        }
    }
}

/// Writes `out`, the end of inbox event `inbox_id`'s turn, into the
/// messages its draft shows (sent anew when it shows none), and deletes
/// its status message.
async fn finish(
    inner: &Inner,
    port: &dyn Platform,
    to: &ChatRef,
    out: &Outbound,
    inbox_id: i64,
    key: &str,
) -> Result<String, PlatformError> {
    let mut draft = super::reclaim::reclaimed(&inner.store, port, to, inbox_id)
        .await
        .map_err(|e| PlatformError::Unavailable(format!("the draft could not be read: {e}")))?;
    if draft.sending.is_some() {
        // A message a crash left half sent is looked for again first.
        return Err(PlatformError::Unavailable(
            "a message of the draft could not be looked for yet".into(),
        ));
    }
    let last = if draft.messages.is_empty() {
        port.send_keyed(to, out.reply_to.as_deref(), &out.body, key)
            .await?
    } else {
        let pieces = port.split(&out.body);
        let pace = port.pace(to, out.reply_to.as_deref());
        for (i, piece) in pieces.iter().enumerate() {
            if i > 0
                && let Some(pace) = pace
            {
                // The chat's edit pace holds for the last writes too.
                tokio::time::sleep(pace).await;
            }
            let edited = match draft.messages.get(i) {
                Some(id) => port.edit(to, id, piece).await,
                None => Err(PlatformError::NotFound("past the draft".into())),
            };
            match edited {
                Ok(()) => continue,
                // Deleted in the chat, or past what the draft showed.
                Err(PlatformError::NotFound(_)) => {}
                Err(err) => return Err(err),
            }
            let id = port
                .send_keyed(to, None, piece, &format!("{key}.{i}"))
                .await?;
            match draft.messages.get_mut(i) {
                Some(slot) => *slot = id,
                None => draft.messages.push(id),
            }
            // A retry edits what this sent instead of sending it again.
            if let Err(err) = inner.store.set_draft(inbox_id, &draft).await {
                tracing::debug!(inbox.id = inbox_id, error = %err, "draft not updated");
            }
        }
        let kept = pieces.len().max(1);
        let extra = draft.messages.split_off(kept.min(draft.messages.len()));
        delete_all(
            port,
            to,
            extra.into_iter().chain(draft.status.take()).collect(),
        )
        .await;
        draft.messages.last().cloned().unwrap_or_default()
    };
    delete_all(port, to, draft.status.into_iter().collect()).await;
    if let Err(err) = inner.store.drop_draft(inbox_id).await {
        tracing::debug!(inbox.id = inbox_id, error = %err, "draft not dropped");
    }
    Ok(last)
}

/// Deletes `messages` the gateway sent to `to`, logging what fails.
async fn delete_all(port: &dyn Platform, to: &ChatRef, messages: Vec<String>) {
    for message in messages {
        if let Err(err) = crate::platform::retrying(|| port.delete(to, &message)).await {
            tracing::warn!(platform = %to.platform, error = %err, "a streamed message was not deleted");
        }
    }
}

/// Deletes what a turn that ended with nothing to say streamed (here, or
/// in a first run cut off before its end).
pub(super) async fn withdraw(inner: &Inner, inbox_id: i64, to: &ChatRef) {
    let Some(port) = inner.platforms().port(&to.platform) else {
        return;
    };
    let draft = match super::reclaim::reclaimed(&inner.store, port.as_ref(), to, inbox_id).await {
        Ok(draft) if !draft.is_empty() => draft,
        Ok(_) => return,
        Err(err) => {
            tracing::warn!(inbox.id = inbox_id, error = %err, "the streamed messages could not be read; left as they are");
            return;
        }
    };
    let all = draft
        .messages
        .iter()
        .chain(&draft.status)
        .cloned()
        .collect();
    delete_all(port.as_ref(), to, all).await;
    if let Err(err) = inner.store.drop_draft(inbox_id).await {
        tracing::debug!(inbox.id = inbox_id, error = %err, "draft not dropped");
    }
}

impl super::SessionManager {
    /// Sends given-up outbox row `id` again (from the operator console),
    /// with the usual patience; false when it was not given up.
    pub async fn retry_outbound(&self, id: i64) -> Result<bool, crate::store::StoreError> {
        let inner = &self.inner;
        if !inner.store.outbox_requeue(id).await? {
            return Ok(false);
        }
        let Some(row) = inner.store.outbox_row(id).await? else {
            return Ok(false);
        };
        let worker = self.inner.clone();
        self.inner.tracker.spawn(async move {
            send(&worker, id, &row.outbound()).await;
        });
        Ok(true)
    }
}
