//! Edits and deletions of a message the sessions were handed. Before its
//! turn starts, an edited message's new text replaces it (in the inbox and
//! in the job waiting for the worker) and a deleted one is dropped; while
//! its turn runs, an edit is a new message (queued, or interrupting the
//! turn, per `busy_input_mode`) and a deletion cancels the turn (a pending
//! approval is withdrawn with it) and nothing is said. A change to a
//! message answered already: an edit is a new message, a deletion nothing.
//! With several replicas, a change that reaches a replica without the
//! session's worker is relayed to the one that runs it.

use std::collections::HashMap;
use std::sync::Mutex;

use super::manager::{SessionManager, Submitted};
use crate::platform::{InboundEvent, Revision};
use crate::store::StoreError;

/// The changes to a worker's events, and the one its turn is for.
#[derive(Debug, Default)]
pub(super) struct Revisions(Mutex<State>);

#[derive(Debug, Default)]
struct State {
    /// The inbox event whose turn runs.
    current: Option<i64>,
    /// What became of events since they were handed over.
    changed: HashMap<i64, Change>,
}

/// What became of an event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) enum Change {
    /// Its message says this now.
    Edited(String),
    /// Its message was deleted.
    Deleted,
}

/// Where an edit or deletion found its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) enum Found {
    /// Its turn runs.
    Running,
    /// It waits.
    Waiting,
}

impl Revisions {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The turn for inbox event `id` starts: what became of it meanwhile.
    pub(super) fn start(&self, id: i64) -> Option<Change> {
        let mut state = self.lock();
        state.current = Some(id);
        state.changed.remove(&id)
    }

    /// The turn for inbox event `id` ended: whether its message was
    /// deleted while it ran.
    pub(super) fn end(&self, id: i64) -> bool {
        let mut state = self.lock();
        state.current = None;
        state.changed.remove(&id) == Some(Change::Deleted)
    }

    /// Records `change` to inbox event `id`.
    pub(super) fn change(&self, id: i64, change: Change) -> Found {
        let mut state = self.lock();
        let running = state.current == Some(id);
        // An edit while the turn runs is a message of its own.
        if !running || change == Change::Deleted {
            state.changed.insert(id, change);
        }
        if running {
            Found::Running
        } else {
            Found::Waiting
        }
    }
}

impl SessionManager {
    /// Applies an edit or deletion event. `None`: the edit is a new
    /// message, to be taken as one.
    pub(super) async fn revise(
        &self,
        event: &InboundEvent,
    ) -> Result<Option<Submitted>, StoreError> {
        let inner = &self.inner;
        let Some(message) = event.message_id.as_deref() else {
            return Ok(Some(Submitted::Ignored("a change to no message")));
        };
        let row = inner
            .store
            .inbox_pending_message(&event.platform, &event.chat_id, message)
            .await?
            // Only its author edits a message (who deleted one is not
            // always said).
            .filter(|row| event.revision == Revision::Deleted || written_by(row, &event.user_id));
        let Some(row) = row else {
            // Answered already, or never taken.
            return Ok(match event.revision {
                Revision::Edited => None,
                _ => Some(Submitted::Ignored("a deleted message not waiting")),
            });
        };
        let change = match event.revision {
            Revision::Edited => Change::Edited(event.text.clone()),
            _ => Change::Deleted,
        };
        // Its worker runs here, on another replica, or nowhere.
        let found = match apply(inner, &row.session_key, row.id, change.clone()) {
            Some(found) => found,
            None => self
                .relay_revision(&row.session_key, row.id, &change)
                .await
                .unwrap_or(Found::Waiting),
        };
        match (found, change) {
            (Found::Running, Change::Edited(_)) => Ok(None),
            (Found::Running, Change::Deleted) => {
                tracing::info!(
                    inbox.id = row.id,
                    "message deleted while its turn ran; turn cancelled"
                );
                Ok(Some(Submitted::Accepted))
            }
            (Found::Waiting, Change::Edited(text)) => {
                let mut edited: InboundEvent = match serde_json::from_str(&row.payload) {
                    Ok(original) => original,
                    Err(_) => return Ok(None),
                };
                edited.text = text;
                let payload = serde_json::to_string(&edited).unwrap_or_default();
                inner.store.inbox_revise(row.id, &payload).await?;
                tracing::info!(
                    inbox.id = row.id,
                    "message edited before its turn; the edit replaces it"
                );
                Ok(Some(Submitted::Accepted))
            }
            (Found::Waiting, Change::Deleted) => {
                inner.store.inbox_mark_processed(row.id, "deleted").await?;
                tracing::info!(
                    inbox.id = row.id,
                    "message deleted before its turn; dropped"
                );
                Ok(Some(Submitted::Accepted))
            }
        }
    }
}

/// Whether stored event `row` is a message of user `user_id`.
fn written_by(row: &crate::store::InboxRow, user_id: &str) -> bool {
    serde_json::from_str::<InboundEvent>(&row.payload).is_ok_and(|event| event.user_id == user_id)
}

/// Applies `change` to inbox event `id` of session `key` if this replica
/// runs its worker (a deletion while its turn runs cancels the turn):
/// where it found the event, else `None`.
pub(super) fn apply(
    inner: &super::manager::Inner,
    key: &str,
    id: i64,
    change: Change,
) -> Option<Found> {
    let state = inner.mailboxes.state(key)?;
    // Edited or deleted before a turn took it in: not steered as it was.
    state.steers.forget(id);
    let found = state.revisions.change(id, change.clone());
    if found == Found::Running && change == Change::Deleted {
        state.interrupt();
    }
    Some(found)
}
