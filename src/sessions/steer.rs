//! Steering: a person's message sent while their session's turn runs is
//! taken into that turn after its current batch of tool calls
//! (`busy_input_mode = "steer"`, or `/steer <text>` in any mode) instead
//! of waiting for a turn of its own. The message is stored in the inbox
//! and queued like any other; the turn that takes it completes it with its
//! own end, so its queued job finds it done. A turn that ends before it
//! takes the message (no tool call left), or that is stopped, leaves it to
//! run as its own.

use std::sync::Mutex;

use crate::agent::layer::{Steer, Steering};

/// What the sender is told when their message goes into the running turn.
pub(super) const STEERED: &str =
    "Added to the request I am working on; I will take it into account.";

/// The messages waiting to be steered into a worker's running turn.
#[derive(Debug, Default)]
pub(super) struct Steers(Mutex<Vec<Steer>>);

impl Steers {
    /// Offers inbox event `id`, saying `text`, to the running turn.
    pub(super) fn push(&self, id: i64, text: &str) {
        self.lock().push(Steer {
            id,
            text: text.to_string(),
        });
    }

    /// Withdraws inbox event `id`: its own turn is starting.
    pub(super) fn forget(&self, id: i64) {
        self.lock().retain(|s| s.id != id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Steer>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Steering for Steers {
    fn take(&self) -> Vec<Steer> {
        std::mem::take(&mut *self.lock())
    }
}
