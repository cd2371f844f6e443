//! Decision commands written in a chat (`/approve`, `/deny`): which
//! request they mean, and the command decided.

use super::{Broker, Waiter};
use crate::approvals::{Actor, ChatRef, Choice, Decision, Refusal};
use crate::platform::ChatCommand;

impl Broker {
    /// Carries out a decision command (`/approve [id] [session|always]`,
    /// `/deny [id] [reason]`) written in `chat`: on the approval it names,
    /// else on the one waiting there — in the thread it was written in, or
    /// anywhere in the chat when written outside a thread — if only one
    /// is; with more, the person is asked to name one. Returns the
    /// decision and the command it was on. `vouched` is for an actor the
    /// caller has already authorised (a webhook route's own approver list,
    /// checked on a signature-verified delivery); they act only on the
    /// requests of their own chat.
    pub async fn decide_command(
        &self,
        chat: &ChatRef,
        actor: &Actor,
        command: &ChatCommand,
        vouched: bool,
    ) -> Result<(Decision, String), Refusal> {
        let Some((choice, named, reason)) = Choice::of_command(command) else {
            return Err(Refusal::NothingPending);
        };
        let here = |w: &Waiter| w.chat.platform == chat.platform && w.chat.chat == chat.chat;
        let relayed = self.relay.get().is_some();
        // Each request the command may mean, with its command.
        let mut meant: Vec<(String, String)> = {
            let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            match &named {
                // Asked elsewhere, or (with a relay) perhaps on another
                // replica, which checks the chat.
                Some(id) if vouched && !relayed && !pending.get(id).is_some_and(here) => {
                    return Err(Refusal::Unknown);
                }
                Some(id) => vec![(
                    id.clone(),
                    pending
                        .get(id)
                        .map(|w| w.command.clone())
                        .unwrap_or_default(),
                )],
                None => {
                    let mut waiting: Vec<(&String, &Waiter)> = pending
                        .iter()
                        .filter(|(_, w)| {
                            here(w) && (chat.thread.is_none() || w.chat.thread == chat.thread)
                        })
                        .collect();
                    waiting.sort_by_key(|(_, w)| w.created_at);
                    waiting
                        .into_iter()
                        .map(|(id, w)| (id.clone(), w.command.clone()))
                        .collect()
                }
            }
        };
        if named.is_none() && relayed {
            // Asked in this chat by a turn on another replica?
            let elsewhere = self
                .store
                .pending_prompts_in(&chat.platform, &chat.chat, chat.thread.as_deref(), 3)
                .await
                .map_err(|_| Refusal::Storage)?;
            for found in elsewhere {
                if !meant.iter().any(|(id, _)| *id == found.0) {
                    meant.push(found);
                }
            }
        }
        let (id, asked) = match meant.len() {
            0 => return Err(Refusal::NothingPending),
            1 => meant.remove(0),
            _ => {
                let listed: Vec<String> = meant
                    .iter()
                    .map(|(id, command)| format!("{id} ({})", shown_briefly(command)))
                    .collect();
                return Err(Refusal::WhichOne(listed.join(", ")));
            }
        };
        let asked = if asked.is_empty() {
            match self.store.approval(&id).await {
                Ok(Some(record)) => record.command,
                _ => asked,
            }
        } else {
            asked
        };
        let decision = self
            .decide(&id, choice, actor, reason, vouched.then_some(chat))
            .await?;
        Ok((decision, asked))
    }
}

/// A command as a reply names it: on one line, its control characters
/// escaped, clipped.
pub fn shown_briefly(command: &str) -> String {
    let line =
        crate::approvals::scripts::plain(&command.split_whitespace().collect::<Vec<_>>().join(" "));
    crate::render::clip(&line, 80)
}
