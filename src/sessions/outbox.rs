//! Sending what the outbox holds. A row is sent through its platform's
//! port; while the platform is down, not connected yet, or asks us to wait,
//! it is tried again with jittered, doubling waits for up to [`PATIENCE`],
//! then given up (and logged). Each attempt is recorded on the row. When
//! the daemon stops first the row stays pending and the next start sends
//! it: a turn's answer outlives a platform outage and a crash, and the turn
//! is never run again for it.

use std::time::{Duration, Instant};

use super::manager::Inner;
use crate::platform::{Backoff, ChatRef, PlatformError};
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
            Some(port) => {
                port.send_keyed(&to, out.reply_to.as_deref(), &out.body, &key)
                    .await
            }
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
        if let Err(err) = inner.store.outbox_attempt(id, error.as_deref(), last).await {
            tracing::warn!(outbox.id = id, error = %err, "could not record the sending attempt");
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
