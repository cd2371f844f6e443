//! Keeping a conversation inside the model's context window, in this
//! order: shrink old tool outputs and call arguments, summarise the middle
//! with the auxiliary model, shrink the recent tail; save what that gives
//! as the session's checkpoint, so a reload does not summarise again. When
//! the provider still says the request is too long, shrink harder once;
//! when nothing fits, the conversation continues in a new session, linked
//! to this one, that starts from a hand-off note.

use super::Conversation;
use crate::agent::AgentError;
use crate::agent::history::{
    TRIMMED_KEEP, estimate_tokens, is_summary, shrink_tool_io, summarize, summarize_middle,
    summary_message, tail_start, trim_old_tool_outputs,
};
use crate::agent::message::{ChatMessage, Role};
use crate::store::{Store, StoreError};

/// What the chat is told when the conversation moves to a new session.
pub const SPLIT_NOTICE: &str = "This conversation grew too long for the model's context window, so it goes on in a new one that starts from a summary of it.";

/// Share of the request budget (in percent) aimed at after the provider
/// said a request was too long although the estimate said it fit: the
/// estimate was off by at least that much.
const AFTER_OVERFLOW_PERCENT: usize = 60;

/// Share of the request budget (in percent) the recent tail keeps whole
/// when the middle is summarised: it is sized in tokens, so one long
/// message before the running turn is summarised, not only shortened.
const TAIL_PERCENT: usize = 25;

/// Tool outputs and arguments of the recent tail longer than this are
/// shrunk when summarising the middle was not enough.
const TAIL_ABOVE: usize = 4000;

/// The history a session's agent starts from: its checkpoint (the history
/// as last shortened) followed by the messages stored after it, or every
/// stored message when there is no checkpoint. Returns it with the id of
/// the last stored message it covers.
pub(super) async fn restore(
    store: &Store,
    session_id: &str,
) -> Result<(Vec<ChatMessage>, i64), StoreError> {
    let (mut history, through) = match store.context(session_id).await? {
        Some((through, json)) => match serde_json::from_str::<Vec<ChatMessage>>(&json) {
            Ok(history) => (history, through),
            Err(err) => {
                tracing::warn!(session.id = %session_id, error = %err, "unreadable context checkpoint; reading the whole history");
                (Vec::new(), 0)
            }
        },
        None => (Vec::new(), 0),
    };
    let rows = store.messages_after(session_id, through).await?;
    let last = rows.last().map_or(through, |r| r.id);
    history.extend(rows.iter().filter_map(ChatMessage::from_stored));
    Ok((history, last))
}

/// How hard one turn has had to work to fit.
#[derive(Debug, Default)]
pub(super) struct Room {
    /// Times the provider answered that the request was too long.
    overflows: u32,
    /// The conversation moved to a new session during this turn.
    split: bool,
}

impl Room {
    /// The provider said the last request was too long.
    pub(super) fn overflowed(&mut self) {
        self.overflows += 1;
    }
}

/// What fitting came to.
#[derive(Debug, PartialEq, Eq)]
enum Fit {
    Fits,
    TooLong,
}

impl Conversation {
    /// Characters of tool output one turn may add: half the context window
    /// (at four characters a token).
    pub(super) fn tool_output_budget(&self) -> usize {
        self.deps.context_window as usize * 2
    }

    /// Tokens a request may take, leaving room for the answer.
    fn request_budget(&self, after_overflow: bool) -> usize {
        let window = self.deps.context_window as usize;
        let limit = window.saturating_sub(self.deps.max_tokens as usize) * 85 / 100;
        if after_overflow {
            limit * AFTER_OVERFLOW_PERCENT / 100
        } else {
            limit
        }
    }

    /// The auxiliary model's window, taken to be the main model's.
    fn summariser_window(&self) -> usize {
        self.deps.context_window as usize
    }

    /// Tokens the recent tail keeps whole when the middle is summarised.
    fn tail_tokens(&self) -> usize {
        self.request_budget(false) * TAIL_PERCENT / 100
    }

    /// Makes the next request fit: false when even a fresh session cannot
    /// hold the current message. Sets `notice` when the conversation moved
    /// to a new session.
    pub(super) async fn make_room(
        &mut self,
        system: &str,
        tools: usize,
        room: &mut Room,
        notice: &mut Option<String>,
    ) -> Result<bool, AgentError> {
        loop {
            let fit = match room.overflows {
                0 => self.fit(system, tools, false).await?,
                // The estimate was wrong: shrink harder, once.
                1 => self.fit(system, tools, true).await?,
                // Shrinking did not convince the provider.
                _ => Fit::TooLong,
            };
            if fit == Fit::Fits {
                return Ok(true);
            }
            if room.split {
                return Ok(false);
            }
            self.split().await?;
            room.split = true;
            room.overflows = 0;
            super::spend::add_notice(notice, SPLIT_NOTICE);
        }
    }

    /// Shrinks the history until the request fits its budget; saves a
    /// checkpoint when anything changed.
    async fn fit(
        &mut self,
        system: &str,
        tools: usize,
        after_overflow: bool,
    ) -> Result<Fit, AgentError> {
        let limit = self.request_budget(after_overflow);
        // The system prompt and tool schemas do not change while fitting:
        // size them once, not at every step.
        let fixed = estimate_tokens(system, &[]) + tools;
        let fits = |c: &Self| fixed + estimate_tokens("", &c.history) <= limit;
        if !after_overflow && fits(self) {
            return Ok(Fit::Fits);
        }
        // Stored whole before anything is shortened, and before the
        // checkpoint that stands for everything stored so far.
        self.flush().await?;
        let tail_tokens = self.tail_tokens();
        let mut cut = trim_old_tool_outputs(&mut self.history, tail_tokens);
        if after_overflow || !fits(self) {
            let aux = self.deps.auxiliary.clone();
            let sizes = (self.summariser_window(), tail_tokens);
            match summarize_middle(&mut self.history, aux.as_ref(), sizes).await {
                Ok(true) => {
                    cut += 1;
                    let written = self.history.iter_mut().rev().find(|m| is_summary(m));
                    if let Some(summary) = written {
                        self.todos.carry_into(summary);
                    }
                }
                Ok(false) => {}
                Err(err) => tracing::warn!(error = %err, "summarising the conversation failed"),
            }
        }
        for (above, keep) in [
            (TAIL_ABOVE, TAIL_ABOVE / 2),
            (TRIMMED_KEEP, TRIMMED_KEEP / 2),
        ] {
            if fits(self) {
                break;
            }
            let tail = tail_start(&self.history, tail_tokens);
            cut += shrink_tool_io(&mut self.history[tail..], above, keep);
        }
        if cut > 0 {
            tracing::info!(cut, "conversation shortened to fit the context");
            self.save_checkpoint().await;
        }
        Ok(if fits(self) { Fit::Fits } else { Fit::TooLong })
    }

    /// Saves the history as it now is as the session's checkpoint; if that
    /// fails, the conversation stays in memory until its worker leaves.
    async fn save_checkpoint(&mut self) {
        let saved = match serde_json::to_string(&self.history) {
            Ok(json) => self
                .deps
                .store
                .save_context(&self.session.id, self.last_id, &json)
                .await
                .map_err(|e| e.to_string()),
            Err(err) => Err(err.to_string()),
        };
        self.unsaved = saved.is_err();
        if let Err(err) = saved {
            tracing::warn!(error = %err, "could not save the shortened conversation");
        }
    }

    /// Continues in a new session of the same key, linked to this one,
    /// that starts from a hand-off note of everything before the current
    /// turn, followed by the current turn's messages (its tool outputs cut
    /// hard).
    async fn split(&mut self) -> Result<(), AgentError> {
        self.flush().await?;
        let start = self
            .history
            .iter()
            .rposition(|m| m.role == Role::User)
            .unwrap_or(0);
        let mut summary = if start == 0 {
            None
        } else {
            let aux = self.deps.auxiliary.clone();
            let earlier = &self.history[..start];
            Some(
                match summarize(earlier, aux.as_ref(), self.summariser_window()).await {
                    Ok(note) => note,
                    Err(err) => {
                        tracing::warn!(error = %err, "summarising before the split failed");
                        summary_message("(The earlier conversation could not be summarised.)")
                    }
                },
            )
        };
        if let Some(summary) = &mut summary {
            self.todos.carry_into(summary);
        }
        let next = self.deps.store.split_session(&self.session).await?;
        tracing::info!(session.parent = %self.session.id, session.id = %next.id, "conversation continues in a new session");
        self.moved(&next.id).await?;
        self.session = next;
        let mut carried = self.history.split_off(start);
        shrink_tool_io(&mut carried, TRIMMED_KEEP, TRIMMED_KEEP / 2);
        self.history.clear();
        self.unsaved = false;
        for message in summary.into_iter().chain(carried) {
            self.push(message);
        }
        self.flush().await
    }
}
