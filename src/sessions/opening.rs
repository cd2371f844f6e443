//! How a job finds its session: its inbox event started with what the turn
//! reads first (one trip to storage), the session ended when its reset
//! policy says so, and the conversation opened on it.

use std::sync::Arc;

use super::live::{Watched, Watcher};
use super::manager::Inner;
use super::questions::PortQuestions;
use super::reset::reset_due;
use crate::agent::{Conversation, SessionContext};
use crate::platform::{ChatKind, InboundEvent};
use crate::store::{JobReads, JobStart, MemoryNote, NewSession, Session, Started};

/// The session `event` opens under `key`; it belongs to the sender when
/// there is a `human` behind the platform.
pub(super) fn new_session<'a>(
    key: &'a str,
    event: &'a InboundEvent,
    human: bool,
) -> NewSession<'a> {
    NewSession {
        key,
        platform: &event.platform,
        chat_id: &event.chat_id,
        thread_id: event.thread_id.as_deref(),
        user_id: human.then_some(event.user_id.as_str()),
    }
}

/// Why a session's conversation could not be opened.
#[derive(Debug, thiserror::Error)]
pub(super) enum OpenError {
    /// The event's platform has no profile (it is not compiled in).
    #[error("no profile for platform {0}")]
    NoProfile(String),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The conversation's history could not be read.
    #[error(transparent)]
    Agent(#[from] crate::agent::AgentError),
}

impl OpenError {
    /// The database's error, when it was one.
    pub(super) fn store(&self) -> Option<&crate::store::StoreError> {
        match self {
            Self::Store(err) | Self::Agent(crate::agent::AgentError::Store(err)) => Some(err),
            _ => None,
        }
    }
}

pub(super) async fn open_conversation(
    inner: &Arc<Inner>,
    key: &str,
    event: &InboundEvent,
    known: Known,
    (draft, steers): (&super::live::Slot, &Arc<super::steer::Steers>),
) -> Result<Conversation, OpenError> {
    let profile = inner
        .platforms()
        .profile(&event.platform)
        .ok_or_else(|| OpenError::NoProfile(event.platform.to_string()))?;
    // Sessions without a person behind them (automated events) ask for
    // approval in the configured approver chat, never of whoever wrote
    // the payload, and ask no questions.
    let human = profile.human;
    let new = new_session(key, event, human);
    let (session, fresh) = match known {
        Known::Open(session, fresh) => Ok((*session, fresh)),
        Known::Absent => inner.store.create_session(&new).await,
        Known::Unread => inner.store.open_session(&new).await.map(|s| (s, false)),
    }?;
    let context = SessionContext {
        platform: event.platform.to_string(),
        chat_type: match (human, event.kind) {
            (false, _) => format!("{} event", event.platform),
            (true, ChatKind::Dm) => "direct message".into(),
            (true, ChatKind::Group) => "group chat".into(),
        },
        user_name: Some(event.user_name.clone()),
        thread: event.thread_id.clone(),
    };
    let job = crate::cron::job_of_session(key);
    let enabled = match job {
        // A job's run has the job's toolsets (its platform's preset when
        // it names none; the group ones when it is gone). Storage failing
        // fails the opening: a job's run never gets other toolsets for it.
        Some(id) => match inner.store.job(id).await? {
            Some(job) => job.toolsets.map_or_else(
                || profile.toolsets_for(&event.chat_id).to_vec(),
                |t| t.split(',').map(str::to_string).collect(),
            ),
            None => inner.config.cron.group_toolsets.clone(),
        },
        None => profile.toolsets_for(&event.chat_id).to_vec(),
    };
    let mut disabled = inner.config.tools.disabled_toolsets.clone();
    if job.is_some() || !human {
        // Only a person's own conversation makes jobs.
        disabled.push("cron".into());
    }
    let toolsets = (enabled, disabled);
    let deps = inner.deps.clone();
    let approvals: Arc<dyn crate::tools::ApprovalHook> = if human {
        // Its draft shows when a command waits for approval.
        Arc::new(Watched::new(inner.approvals.clone(), draft.clone()))
    } else {
        inner.approvals.clone()
    };
    let opened = if fresh {
        Ok(Conversation::fresh(
            deps, session, context, toolsets, approvals,
        ))
    } else {
        Conversation::open(deps, session, context, toolsets, approvals).await
    };
    let mut conversation = opened?.with_events(Arc::new(Watcher::new(
        inner.platforms().clone(),
        event.chat(),
        draft.clone(),
    )));
    if human {
        conversation = conversation.with_steering(steers.clone());
    }
    if human {
        let questions = Arc::new(PortQuestions {
            platforms: inner.platforms().clone(),
            questions: inner.questions.clone(),
            chat: event.chat(),
            user: Some(event.user_id.clone()),
        });
        if job.is_none() {
            // A job's run cannot make jobs.
            conversation = conversation.with_jobs(Arc::new(crate::cron::Desk::new(
                inner.store.clone(),
                inner.config.cron.clone(),
                event,
                questions.clone(),
                inner.cron_wake.clone(),
            )));
        }
        conversation = conversation.with_clarify(questions);
    }
    Ok(conversation)
}

/// What [`apply_reset`] did.
pub(super) enum Reset {
    /// The session was ended (the user told).
    Done,
    /// It stays; what the check learnt of it.
    Kept(Known),
}

/// What is known of a key's open session before opening its conversation.
#[derive(Default)]
pub(super) enum Known {
    /// It was read (or created, `true`: it holds nothing yet): this one.
    Open(Box<Session>, bool),
    /// It was looked for: there is none.
    Absent,
    /// Not looked at.
    #[default]
    Unread,
}

/// Ends the session of `key` when its reset policy says so, telling the
/// user (the turn leaves its `place` first). `open`: the loaded
/// conversation's session id and last activity; without it the session is
/// `known`, or else read.
pub(super) async fn apply_reset(
    inner: &Arc<Inner>,
    key: &str,
    event: &InboundEvent,
    (open, known): (Option<(String, i64)>, Known),
    place: &mut super::pressure::Place<'_>,
) -> Reset {
    let (open, read) = match (open, known) {
        (Some(open), _) => (Some(open), Known::Unread),
        (None, Known::Open(s, fresh)) => (
            Some((s.id.clone(), s.last_active_at)),
            Known::Open(s, fresh),
        ),
        (None, Known::Absent) => (None, Known::Absent),
        (None, Known::Unread) => match inner.store.open_session_by_key(key).await {
            Ok(Some(s)) => (
                Some((s.id.clone(), s.last_active_at)),
                Known::Open(Box::new(s), false),
            ),
            Ok(None) => (None, Known::Absent),
            Err(err) => {
                tracing::warn!(session.key = %key, error = %err, "could not read the session");
                (None, Known::Unread)
            }
        },
    };
    let Some((id, last_active)) = open else {
        return Reset::Kept(read);
    };
    let policy = inner.config.sessions.reset_for(&event.platform);
    let Some(reason) = reset_due(&policy, last_active, inner.clock.now_ms()) else {
        return Reset::Kept(read);
    };
    match inner.store.end_session(&id, reason.end_reason()).await {
        Ok(_) => {
            tracing::info!(session.key = %key, reason = reason.end_reason(), "session reset");
            place.leave();
            inner.replies.notice(event, &reason.notice(&policy)).await;
            Reset::Done
        }
        Err(err) => {
            tracing::warn!(session.key = %key, error = %err, "could not reset the session");
            Reset::Kept(Known::Unread)
        }
    }
}

/// What a job read with its start, for its turn.
#[derive(Default)]
pub(super) struct Ahead {
    /// The session, when no conversation was loaded.
    pub(super) session: Known,
    /// The memory notes of whom the turn is likely for, and whose.
    pub(super) notes: Option<(String, Vec<MemoryNote>)>,
}

/// What [`start`] found.
pub(super) enum Start {
    /// The event started; what was read with it.
    Ahead(Ahead),
    /// It was processed already, or the daemon stopped while storage was
    /// away (it stays pending).
    Done,
    /// An earlier event of its session waits in the inbox (`first_of`).
    Behind,
}

/// Starts inbox event `inbox_id` and reads ahead, in the same trip, what
/// its turn reads first: the open session when no conversation is loaded
/// (created if there is none), and the notes of the conversation's owner
/// (of the writer, for a conversation not loaded with a person behind it).
/// With `first_of` (its session's key, several replicas) it starts only as
/// the session's first event waiting. A start storage failed under is
/// tried again once it answers: the start is what tells a second job for
/// a processed event. Another failure is logged and the job runs (the turn
/// reads what it needs itself).
pub(super) async fn start(
    inner: &Inner,
    key: &str,
    conversation: &Option<(Conversation, i64)>,
    (inbox_id, first_of): (i64, Option<&str>),
    event: &InboundEvent,
) -> Start {
    let human = inner
        .platforms()
        .profile(&event.platform)
        .is_some_and(|p| p.human);
    // The turn acts for its sender (Conversation::act_for): their notes.
    let sender = crate::agent::layer::Owner {
        platform: event.platform.to_string(),
        user_id: event.user_id.clone(),
    }
    .key();
    let owner = match conversation {
        Some((c, _)) => c.owner_key().map(|_| sender),
        None => human.then_some(sender),
    };
    let new = new_session(key, event, human);
    let reads = JobReads {
        open: conversation.is_none().then_some(&new),
        notes_of: owner.as_deref(),
        first_of,
    };
    loop {
        return match inner.store.start_job(inbox_id, reads).await {
            Ok(Started::Done) => Start::Done,
            Ok(Started::Behind) => Start::Behind,
            Ok(Started::Now(read)) => {
                let JobStart { session, notes } = *read;
                Start::Ahead(Ahead {
                    session: match session {
                        Some((s, fresh)) => Known::Open(Box::new(s), fresh),
                        None => Known::Unread,
                    },
                    notes: owner.zip(notes),
                })
            }
            Err(err) if err.is_retryable() => {
                tracing::warn!(session.key = %key, inbox.id = inbox_id, error = %err, "could not start the event; trying again once storage answers");
                if !inner.store.until_back(&inner.stop).await {
                    return Start::Done;
                }
                continue;
            }
            Err(err) => {
                tracing::warn!(session.key = %key, inbox.id = inbox_id, error = %err, "could not start the event");
                Start::Ahead(Ahead::default())
            }
        };
    }
}
