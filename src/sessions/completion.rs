//! The end of a job: what its turn (or its refusal) sends, as outbox rows
//! for the event's chat, and the one transaction that stores the turn's
//! answer, those rows and the inbox event's completion together, however
//! long storage is away.

use super::manager::Inner;
use crate::agent::{AgentError, Conversation, StopReason, Turn, TurnOutcome};
use crate::platform::InboundEvent;
use crate::store::{Completion, Outbound};

/// What the end of `event`'s turn sends, and how it is recorded.
pub(super) fn completion(
    inner: &Inner,
    key: &str,
    inbox_id: i64,
    event: &InboundEvent,
    result: &Result<TurnOutcome, AgentError>,
) -> Completion {
    match result {
        Ok(out) => {
            let mut completion = done_with(inner, key, inbox_id, event, out.stop.as_str(), []);
            if out.stop == StopReason::Final {
                // The messages it took in are answered with it; a turn
                // that ended otherwise leaves them to be answered on
                // their own.
                completion.steered = out.steered.clone();
            }
            if let Some(notice) = &out.notice {
                completion.outbox = notices(inner, event, [notice.as_str()]);
            }
            if !out.reply.is_empty() {
                completion.outbox.push(outbound(event, &out.reply));
            }
            completion
        }
        Err(err) => {
            tracing::warn!(session.key = %key, error = %err, "turn failed");
            let text = "Sorry, something went wrong while answering; please try again.";
            done_with(inner, key, inbox_id, event, "error", [text])
        }
    }
}

/// Completes event `inbox_id` as `outcome`, telling its chat `texts`
/// where a person reads it.
pub(super) fn done_with<'a>(
    inner: &Inner,
    key: &str,
    inbox_id: i64,
    event: &InboundEvent,
    outcome: &str,
    texts: impl IntoIterator<Item = &'a str>,
) -> Completion {
    Completion {
        inbox_id,
        session_key: key.to_string(),
        outcome: outcome.to_string(),
        outbox: notices(inner, event, texts),
        fence: None,
        steered: Vec::new(),
    }
}

/// `texts` as messages to `event`'s chat where a person reads it; logged
/// otherwise.
fn notices<'a>(
    inner: &Inner,
    event: &InboundEvent,
    texts: impl IntoIterator<Item = &'a str>,
) -> Vec<Outbound> {
    let human = inner.replies.shows_notices(event);
    texts
        .into_iter()
        .filter(|text| {
            if !human {
                tracing::info!(platform = %event.platform, chat = %event.chat_id, thread = ?event.thread_id, notice = text, "session notice");
            }
            human
        })
        .map(|text| outbound(event, text))
        .collect()
}

/// `text` as a reply to `event`.
pub(super) fn outbound(event: &InboundEvent, text: &str) -> Outbound {
    Outbound {
        platform: event.platform.to_string(),
        chat_id: event.chat_id.clone(),
        thread_id: event.thread_id.clone(),
        reply_to: event.message_id.clone(),
        body: text.to_string(),
        draft_of: None,
    }
}

/// Stores the end of the turn and completes its event in one transaction,
/// however long storage is away (an answer sent for an event left pending
/// would be sent again). Returns the outbox rows to send; `None` when the
/// daemon stopped first (the event stays pending) or the commit cannot be
/// made (logged; the event stays pending for the next start).
pub(super) async fn commit(
    inner: &Inner,
    conversation: &mut Option<(Conversation, i64)>,
    turn: Option<&Turn>,
    completion: &Completion,
) -> Option<Vec<(i64, Outbound)>> {
    let mut alone = turn.is_none();
    loop {
        let committed = match (conversation.as_mut(), turn) {
            (Some((conv, _)), Some(turn)) if !alone => conv.commit(turn, Some(completion)).await,
            _ => inner.store.commit_turn(None, Some(completion)).await,
        };
        match committed {
            Ok(Some(c)) => {
                return Some(
                    c.outbox
                        .into_iter()
                        .zip(completion.outbox.clone())
                        .collect(),
                );
            }
            Ok(None) => {
                // An earlier try landed though its answer was lost: send
                // what it wrote, and read the conversation again.
                *conversation = None;
                return match inner.store.outbox_for(completion.inbox_id).await {
                    Ok(rows) => Some(
                        rows.into_iter()
                            .filter(|r| r.status == "pending")
                            .map(|r| (r.id, r.outbound()))
                            .collect(),
                    ),
                    Err(err) => {
                        tracing::error!(inbox.id = completion.inbox_id, error = %err, "could not read what the turn sends; it is sent on the next start");
                        None
                    }
                };
            }
            Err(crate::store::StoreError::Fenced { lease }) => {
                // Another replica took the session over: the event is its
                // to answer.
                tracing::warn!(
                    inbox.id = completion.inbox_id,
                    lease,
                    "session taken over before the end of its turn; the answer is left to the new owner"
                );
                *conversation = None;
                return None;
            }
            Err(err) if inner.store.failed_from_away(&err).await => {
                tracing::warn!(inbox.id = completion.inbox_id, error = %err, "storage down at the end of a turn; waiting for it");
                if !inner.store.until_back(&inner.stop).await {
                    return None;
                }
            }
            Err(err) if !alone => {
                // The answer itself cannot be stored: still complete the
                // event and send what was said.
                tracing::error!(inbox.id = completion.inbox_id, error = %err, "could not store the turn's answer");
                alone = true;
            }
            Err(err) => {
                tracing::error!(inbox.id = completion.inbox_id, error = %err, "could not complete the event");
                return None;
            }
        }
    }
}
