//! The one intake stage every inbound event passes, in this order:
//!
//! 1. access — allowlists, bots, pairing for unknown DM senders;
//! 2. a pending `clarify` question in that chat takes the message as its
//!    answer;
//! 3. a [`ChatCommand`] is answered at once, never queued behind the turn
//!    that may be waiting for it (`/approve`, `/stop`);
//! 4. the mention rule — in groups with `require_mention`, only messages
//!    that mention the bot, or replies in a thread where the bot already
//!    has an open session;
//! 5. the sender's and the chat's rate limits (chat platforms), past which
//!    nothing is stored and the sender is told once;
//! 6. the budget caps of the sender, the chat or the route (a warning once
//!    per window past its share; refused at the cap);
//! 7. attachments are fetched through the platform's port (or described by
//!    their link); audio stays with the event, heard by its worker;
//! 8. the inbox commit, after the session's mailbox slot is reserved so a
//!    busy answer stores nothing.
//!
//! Button presses come in through [`SessionManager::press`]: approval
//! choices go to the broker, question choices to the questions.

use tokio::sync::{mpsc, oneshot};

use super::access::{self, Access};
use super::keys::session_key;
use super::manager::{SessionManager, Submitted};
use super::throttle::Verdict;
use super::worker::Job;
use crate::approvals::Choice;
use crate::config::BusyInputMode;
use crate::platform::{
    Actor, Attachment, AttachmentKind, ChatCommand, ChatKind, ChatRef, InboundEvent, Revision,
    retrying,
};
use crate::store::{InboxInsert, NewInboxEvent, StoreError, storable};
use crate::telemetry::events;

const BUSY: &str = "I'm still working on earlier messages; please send this again in a moment.";
const QUEUED: &str = "Got it — I'll get to this as soon as I finish the current request.";
const SLOW_DOWN: &str = "You're sending messages faster than I can take them. Please slow down: messages sent in the next moments are not read.";

/// Who an event handed to a session comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    /// A person's message.
    Person,
    /// A person's `/steer <words>`.
    PersonSteering,
    /// The gateway itself (a report, a scheduled job, a webhook).
    Gateway,
}

/// A button pressed on a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Press {
    /// Where the prompt is.
    pub chat: ChatRef,
    /// Who pressed.
    pub actor: Actor,
    /// The button's data.
    pub data: String,
}

/// Every text of `event` as both backends can store it (no NUL: see
/// [`storable`]), before anything is decided or stored: what can be
/// acknowledged can be stored, and the session key derived from it is the
/// one storage holds.
fn make_storable(event: &mut InboundEvent) {
    let fix = |text: &mut String| {
        if let std::borrow::Cow::Owned(clean) = storable(text) {
            *text = clean;
        }
    };
    for text in [
        &mut event.chat_id,
        &mut event.user_id,
        &mut event.user_name,
        &mut event.text,
        &mut event.event_id,
    ] {
        fix(text);
    }
    for text in event
        .thread_id
        .iter_mut()
        .chain(event.message_id.iter_mut())
    {
        fix(text);
    }
    event.roles.iter_mut().for_each(fix);
    for attachment in &mut event.attachments {
        fix(&mut attachment.file);
        fix(&mut attachment.name);
        attachment.mime.iter_mut().for_each(fix);
    }
}

impl SessionManager {
    /// Takes one inbound event through the intake.
    pub async fn submit(&self, event: InboundEvent) -> Result<Submitted, StoreError> {
        Ok(self.submit_tracked(event).await?.0)
    }

    /// Like [`submit`](Self::submit); for an accepted event also returns a
    /// receiver that fires once it has been processed.
    pub async fn submit_tracked(
        &self,
        mut event: InboundEvent,
    ) -> Result<(Submitted, Option<oneshot::Receiver<()>>), StoreError> {
        let inner = &self.inner;
        make_storable(&mut event);
        if event.revision == Revision::Deleted {
            // Who deleted it is not always said; what it removes is only
            // the message itself.
            return Ok((
                self.revise(&event).await?.unwrap_or(Submitted::Accepted),
                None,
            ));
        }
        let Some(profile) = inner.platforms().profile(&event.platform) else {
            tracing::warn!(platform = %event.platform, "event from a platform without a profile ignored");
            return Ok((Submitted::Ignored("unknown platform"), None));
        };
        match access::check(&profile.access, &event, &inner.store).await? {
            Access::Allowed => {}
            Access::Ignored(reason) => {
                tracing::debug!(platform = %event.platform, user = %event.user_id, reason, "event ignored");
                return Ok((Submitted::Ignored(reason), None));
            }
            Access::NeedsPairing => {
                let outcome = access::request_code(&inner.store, &event).await?;
                inner
                    .replies
                    .reply(&event, &access::pairing_message(&event.platform, &outcome))
                    .await;
                return Ok((Submitted::Pairing, None));
            }
        }
        let command = ChatCommand::parse(&event.text);
        // Only a message just written answers: an edit (which some
        // platforms also send for a thread made on an old message) replays
        // words written before the question, perhaps an "Allow" meant for
        // another.
        if command.is_none()
            && event.revision.is_new()
            && let Some(answered) =
                inner
                    .questions
                    .answer_text(&event.chat(), &event.user_id, &event.text)
        {
            self.close_question(answered).await;
            return Ok((Submitted::Command, None));
        }
        let key = session_key(&event, inner.settings.rules, profile.keys);
        // `/steer <words>`: the words are a message, for the running turn.
        let (command, steer) = match command {
            Some(ChatCommand::Steer(words)) if !words.is_empty() => {
                event.text = words;
                (None, true)
            }
            other => (other, false),
        };
        if let Some(command) = command {
            // A command runs for the message that brought it, once: not for
            // an edit of it (nor Discord's thread made on an old message),
            // and not again when the platform delivers it twice (Slack's
            // `message` and `app_mention`, a retry). `/approve` without an
            // id would decide whatever waits next.
            if event.revision == Revision::Edited {
                return Ok((Submitted::Ignored("an edited command is not run"), None));
            }
            // The claim is stored: a replay after a restart or on another
            // replica is a duplicate too.
            let run = format!("{}:{}", event.platform, event.event_id);
            let payload = serde_json::to_string(&event).unwrap_or_default();
            let claimed = inner
                .store
                .inbox_claim_command(&NewInboxEvent {
                    platform: &event.platform,
                    dedupe_key: &run,
                    session_key: &key,
                    payload: &payload,
                })
                .await?;
            if !claimed {
                return Ok((Submitted::Duplicate, None));
            }
            let reply = match self.command(&key, &event, &command).await {
                Ok(reply) => reply,
                Err(err) => {
                    // Not run: its next delivery runs it (if the claim
                    // cannot be given up either, it is not run twice).
                    if let Err(also) = inner.store.inbox_release_command(&run).await {
                        tracing::warn!(run, error = %also, "a failed command's claim stays: its next delivery is dropped");
                    }
                    return Err(err);
                }
            };
            inner.replies.reply(&event, &reply).await;
            return Ok((Submitted::Command, None));
        }
        if event.kind == ChatKind::Group && profile.access.require_mention && !event.mentioned {
            let continues =
                event.in_thread && inner.store.open_session_by_key(&key).await?.is_some();
            if !continues {
                tracing::debug!(platform = %event.platform, user = %event.user_id, "event ignored: no mention");
                return Ok((Submitted::Ignored("the bot was not mentioned"), None));
            }
        }
        if event.revision == Revision::Edited {
            if let Some(applied) = self.revise(&event).await? {
                return Ok((applied, None));
            }
            // A message of its own.
            event.revision = Revision::New;
        }
        if profile.human
            && let Verdict::Refused { tell } = inner.throttle.check(&event)
        {
            tracing::info!(platform = %event.platform, user = %event.user_id, chat = %event.chat_id, "message refused: past the rate limit");
            if tell {
                inner.replies.notice(&event, SLOW_DOWN).await;
            }
            return Ok((Submitted::Throttled, None));
        }
        let now = inner.clock.now_ms();
        match crate::budgets::check_event(&inner.store, &inner.config, &event, now).await? {
            crate::budgets::Verdict::Clear(warnings) => {
                for warning in warnings {
                    inner.replies.notice(&event, &warning).await;
                }
            }
            crate::budgets::Verdict::Over(why) => {
                tracing::info!(platform = %event.platform, user = %event.user_id, chat = %event.chat_id, reason = %why, "event refused: over budget");
                if profile.human {
                    inner.replies.notice(&event, &why).await;
                } else if inner.config.budgets.webhook_over_budget
                    == crate::config::OverBudget::Accept
                {
                    // Kept, and marked as not run.
                    let dedupe = format!("{}:{}", event.platform, event.event_id);
                    if let Some((id, _)) = self.store_event(&key, &event, &dedupe).await? {
                        inner.store.inbox_mark_processed(id, "over_budget").await?;
                    }
                }
                return Ok((Submitted::OverBudget, None));
            }
        }
        events::emit(events::EventAccepted {
            platform: &event.platform,
        });
        self.attachments(&mut event, &key).await;
        let dedupe = format!("{}:{}", event.platform, event.event_id);
        let from = if steer {
            Origin::PersonSteering
        } else {
            Origin::Person
        };
        self.enqueue(&key, event, &dedupe, from).await
    }

    /// Stores `event` in the inbox under `dedupe` and hands it to session
    /// `key`'s worker (refused when the gateway is full). Written by a
    /// person (`from`), it waits, interrupts or is steered into the running
    /// turn, per `busy_input_mode` (or `/steer`), when the session is busy,
    /// and they are told.
    pub(super) async fn enqueue(
        &self,
        key: &str,
        event: InboundEvent,
        dedupe: &str,
        from: Origin,
    ) -> Result<(Submitted, Option<oneshot::Receiver<()>>), StoreError> {
        let from_person = from != Origin::Gateway;
        let inner = &self.inner;
        let (tx, state) = match &inner.ownership {
            Some(own) => match self.live_worker(key) {
                Some(worker) => worker,
                None => return self.enqueue_shared(own, key, event, dedupe).await,
            },
            None => self.worker(key),
        };
        let permit = if self.pending() >= inner.settings.max_pending {
            None
        } else {
            match tx.try_reserve_owned() {
                Ok(permit) => Some(permit),
                // Its lease just ended here: the session is the next
                // owner's (or this replica's again).
                Err(mpsc::error::TrySendError::Closed(_)) => match &inner.ownership {
                    Some(own) => return self.enqueue_shared(own, key, event, dedupe).await,
                    None => None,
                },
                Err(_) => None,
            }
        };
        let Some(permit) = permit else {
            events::emit(events::EventRefused {
                platform: &event.platform,
                session_key: key,
                pending: self.pending(),
            });
            if from_person {
                inner.replies.busy(&event, BUSY).await;
            }
            return Ok((Submitted::Busy, None));
        };
        let Some((inbox_id, _)) = self.store_event(key, &event, dedupe).await? else {
            return Ok((Submitted::Duplicate, None));
        };
        let was_busy = state.busy() || state.waiting() > 0;
        let steer = from_person
            && (from == Origin::PersonSteering || inner.settings.busy == BusyInputMode::Steer);
        // Only the running turn's own sender steers it, with words alone
        // (attachments wait for a turn that fetches and hears them); what
        // the gateway posts (a process's report) is a turn of its own.
        if was_busy
            && steer
            && state.steerable_by(&event.actor().key())
            && !event.text.trim().is_empty()
            && event.attachments.is_empty()
        {
            state.steers.push(inbox_id, &event.text);
            inner.replies.notice(&event, super::steer::STEERED).await;
        } else if was_busy && from_person {
            match inner.settings.busy {
                BusyInputMode::Interrupt => {
                    state.interrupt();
                }
                BusyInputMode::Queue | BusyInputMode::Steer => {
                    if state.should_ack(inner.settings.ack_every) {
                        inner.replies.notice(&event, QUEUED).await;
                    }
                }
            }
        }
        let (done, rx) = oneshot::channel();
        self.enqueued(&state);
        permit.send(Job {
            inbox_id,
            event: Box::new(event),
            resumed: false,
            done: Some(done),
        });
        Ok((Submitted::Accepted, Some(rx)))
    }

    /// Commits `event` to the inbox under `dedupe` for session `key`:
    /// its id and stored JSON, or `None` for a redelivery.
    pub(super) async fn store_event(
        &self,
        key: &str,
        event: &InboundEvent,
        dedupe: &str,
    ) -> Result<Option<(i64, String)>, StoreError> {
        let payload = serde_json::to_string(event).unwrap_or_default();
        let _storing = self.inner.pressure.storing();
        let inserted = self
            .inner
            .store
            .inbox_insert(&NewInboxEvent {
                platform: &event.platform,
                dedupe_key: dedupe,
                session_key: key,
                payload: &payload,
            })
            .await?;
        Ok(match inserted {
            InboxInsert::Inserted(id) => Some((id, payload)),
            InboxInsert::Duplicate => None,
        })
    }

    /// A button press: an approval choice (through the broker) or a
    /// question's choice. `Ok` carries what the presser is told it did,
    /// `Err` why the press does not count: both are words for the presser
    /// (relayed between replicas as they are), so both stay text.
    pub async fn press(&self, press: &Press) -> Result<String, String> {
        if let Some((id, choice)) = Choice::parse_button(&press.data) {
            return self
                .inner
                .broker
                .resolve(&id, choice, &press.actor, None)
                .await
                .map(|decision| format!("Done: {}.", decision.describe()))
                .map_err(|refusal| refusal.to_string());
        }
        if super::questions::is_button(&press.data) {
            if !self.inner.questions.holds(&press.data)
                && let Some(answer) = self.relay_press(press).await
            {
                return answer;
            }
            let answered = self
                .inner
                .questions
                .answer_button(&press.data, &press.actor.user_id)
                .map_err(str::to_string)?;
            let answer = answered.answer.clone();
            self.close_question(answered).await;
            return Ok(answer);
        }
        Err("This button is no longer active.".into())
    }

    /// Closes an answered question's prompt to show the answer.
    pub(super) async fn close_question(&self, answered: super::questions::Answered) {
        let Some(message) = answered.message else {
            return;
        };
        let Some(port) = self.inner.platforms().port(&answered.chat.platform) else {
            return;
        };
        if let Err(err) = retrying(|| port.edit(&answered.chat, &message, &answered.outcome)).await
        {
            tracing::warn!(platform = %answered.chat.platform, error = %err, "question prompt not closed");
        }
    }

    /// Turns the event's attachments into notes for the agent: fetched
    /// into the session's workspace through the port, or described by the
    /// link the platform gave.
    async fn attachments(&self, event: &mut InboundEvent, key: &str) {
        if event.attachments.is_empty() {
            return;
        }
        let port = self
            .inner
            .platforms()
            .port(&event.platform)
            .filter(|p| p.capabilities().downloads);
        let workspace =
            crate::tools::workspace::session_dir(&self.inner.config.agent.workspace, key);
        let (audio, files): (Vec<_>, Vec<_>) = std::mem::take(&mut event.attachments)
            .into_iter()
            .partition(|a| a.kind == AttachmentKind::Audio);
        // Audio stays with the event, to be heard before its turn.
        event.attachments = audio;
        for attachment in files {
            let fetched = match (&port, &workspace) {
                (Some(port), Ok(workspace)) => {
                    fetch_into(port.as_ref(), &attachment, workspace).await
                }
                (None, _) => Err(Unfetched::NotConnected),
                (_, Err(err)) => Err(Unfetched::Io(std::io::Error::new(
                    err.kind(),
                    err.to_string(),
                ))),
            };
            let note = note(&attachment, fetched);
            if !event.text.is_empty() {
                event.text.push('\n');
            }
            event.text.push_str(&note);
        }
    }
}

/// What the agent is told about an attachment.
/// Fetches `attachment` into the daemon's staging directory, where no
/// command reaches, then moves it into the workspace's `attachments/`
/// beneath the workspace: the agent cannot make that directory a way for
/// the daemon to write elsewhere.
async fn fetch_into(
    port: &dyn crate::platform::Platform,
    attachment: &Attachment,
    workspace: &std::path::Path,
) -> Result<std::path::PathBuf, Unfetched> {
    let staging = crate::tools::workspace::staging_dir(workspace)?;
    let fetched = port.fetch(attachment, &staging).await?;
    let (root, file) = (workspace.to_path_buf(), fetched.clone());
    let moved = tokio::task::spawn_blocking(move || {
        crate::tools::workspace::move_beneath(&root, &file, "attachments")
    })
    .await
    .map_err(|_| Unfetched::Io(std::io::ErrorKind::Interrupted.into()))
    .and_then(|r| r.map_err(Unfetched::Io));
    if moved.is_err() {
        let _ = tokio::fs::remove_file(&fetched).await;
    }
    moved
}

/// Why an attachment is not in the workspace.
#[derive(Debug, thiserror::Error)]
enum Unfetched {
    #[error("not downloaded")]
    NotConnected,
    #[error(transparent)]
    Platform(#[from] crate::platform::PlatformError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

fn note(a: &Attachment, fetched: Result<std::path::PathBuf, Unfetched>) -> String {
    let what = match a.kind {
        AttachmentKind::Image => "photo",
        AttachmentKind::Audio => "voice note",
        AttachmentKind::Document => "document",
    };
    match (fetched, &a.url) {
        (Ok(path), _) => {
            let path = format!(
                "attachments/{}",
                path.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| a.name.clone())
            );
            match a.kind {
                AttachmentKind::Image => format!(
                    "[The user sent a photo, saved as {path}; use vision_analyze with that path to look at it.]"
                ),
                AttachmentKind::Document | AttachmentKind::Audio => {
                    format!("[The user sent a document, saved as {path}.]")
                }
            }
        }
        (Err(_), Some(url)) => match a.kind {
            AttachmentKind::Image => format!(
                "[The user sent an image, {}: {url}; use vision_analyze with that URL to look at it.]",
                a.name
            ),
            AttachmentKind::Document | AttachmentKind::Audio => format!(
                "[The user attached {} ({}, {} bytes): {url}]",
                a.name,
                a.mime.as_deref().unwrap_or("unknown type"),
                a.size.unwrap_or(0)
            ),
        },
        (Err(err), None) => {
            tracing::warn!(error = %err, "attachment could not be downloaded");
            format!("[The user sent a {what}, but it could not be downloaded.]")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attachment(kind: AttachmentKind, url: Option<&str>) -> Attachment {
        Attachment {
            kind,
            file: "f1".into(),
            name: "shot.png".into(),
            mime: Some("image/png".into()),
            size: Some(99),
            url: url.map(str::to_string),
            duration_secs: None,
        }
    }

    #[test]
    fn the_agent_is_told_where_a_file_is() {
        let image = attachment(AttachmentKind::Image, None);
        assert_eq!(
            note(&image, Ok("/ws/s/attachments/shot.png".into())),
            "[The user sent a photo, saved as attachments/shot.png; use vision_analyze with that path to look at it.]"
        );
        assert_eq!(
            note(&image, Err(Unfetched::NotConnected)),
            "[The user sent a photo, but it could not be downloaded.]"
        );
        let linked = attachment(AttachmentKind::Image, Some("https://cdn.example/shot.png"));
        assert_eq!(
            note(&linked, Err(Unfetched::NotConnected)),
            "[The user sent an image, shot.png: https://cdn.example/shot.png; use vision_analyze with that URL to look at it.]"
        );
        let mut doc = attachment(
            AttachmentKind::Document,
            Some("https://cdn.example/log.txt"),
        );
        doc.name = "log.txt".into();
        doc.mime = Some("text/plain".into());
        doc.size = Some(12);
        assert_eq!(
            note(&doc, Err(Unfetched::NotConnected)),
            "[The user attached log.txt (text/plain, 12 bytes): https://cdn.example/log.txt]"
        );
    }
}
