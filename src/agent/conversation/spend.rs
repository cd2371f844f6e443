//! A turn's model calls against the budgets (`[budgets]`): each call is
//! estimated and held by the turn's [`Meter`] before it is made, and
//! settled to its real usage after; a call that could cross a cap is not
//! made.

use std::sync::Arc;

use super::Conversation;
use crate::agent::AgentError;
use crate::agent::history::estimate_tokens;
use crate::agent::provider::Usage;
use crate::budgets::{Call, Meter};
use crate::store::Hold;

impl Conversation {
    /// Who the running turn is counted against: its person (the sender
    /// it acts for, in a shared session) and its scheduled job.
    pub(super) fn charged(&self) -> (Option<String>, Option<String>) {
        let job = crate::cron::job_of_session(&self.session.key).map(str::to_string);
        let user = self
            .owner
            .as_ref()
            .map(|o| o.user_id.clone())
            .or_else(|| self.session.user_id.clone())
            .filter(|user| job.is_none() || user != crate::cron::NO_OWNER);
        (user, job)
    }

    /// Starts the turn's account: a meter when a cap applies to it, and
    /// what its calls used so far (`again`: the turn broke off with its
    /// process, and its hold remembers the calls it made then).
    pub(super) async fn open_meter(&mut self, again: bool) -> Result<(), AgentError> {
        self.used = Usage::default();
        self.used_micros = 0;
        self.meter = None;
        let Some(budgets) = &self.deps.budgets else {
            return Ok(());
        };
        let (user_id, job_id) = self.charged();
        let hold = Hold {
            session_id: self.session.id.clone(),
            platform: self.session.platform.clone(),
            chat_id: self.session.chat_id.clone(),
            user_id,
            job_id,
            used_prompt: 0,
            used_completion: 0,
            used_micros: 0,
            reserved_tokens: 0,
            reserved_micros: 0,
        };
        let models = &self.deps.models;
        let answering = std::iter::once(models.for_session(&self.session))
            .chain(models.fallback_names())
            .map(str::to_string)
            .collect();
        self.meter = Meter::new(
            self.deps.store.clone(),
            Arc::clone(budgets),
            answering,
            hold,
        );
        if again && let Some(meter) = &self.meter {
            (self.used, self.used_micros) = meter.carried().await?;
        }
        Ok(())
    }

    /// Whether the turn may hold the budgets (its commit lets go of
    /// whatever its session holds).
    pub(super) fn holds_budget(&self) -> bool {
        self.meter.is_some()
    }

    /// Before a call on the history (and `nudge`) with tools of
    /// `tool_tokens` and an output cap of `max_tokens`: `None` to go
    /// ahead (warnings past the warning share added to `notice`), or why
    /// it may not be made.
    pub(super) async fn afford(
        &mut self,
        system: &str,
        tool_tokens: usize,
        nudge: Option<&str>,
        max_tokens: u32,
        notice: &mut Option<String>,
    ) -> Result<Option<String>, AgentError> {
        let Some(meter) = &mut self.meter else {
            return Ok(None);
        };
        let counted = estimate_tokens(system, &self.history)
            + tool_tokens
            + nudge.map_or(0, |n| n.len() / 4 + 4);
        self.estimated = counted as u64;
        // The last call's real prompt against its estimate: a provider
        // that counts more tokens than four characters each is believed.
        let prompt = (counted as f64 * self.calibration).ceil() as u64;
        self.asked = prompt;
        let estimate = Usage::new(prompt, max_tokens.into());
        match meter
            .before_call(
                (self.used, self.used_micros),
                estimate,
                self.deps.clock.now_ms(),
            )
            .await?
        {
            Call::Go(warnings) => {
                for warning in warnings {
                    add_notice(notice, &warning);
                }
                Ok(None)
            }
            Call::Stop(why) => Ok(Some(why)),
        }
    }

    /// After a call that was sent but gave no answer (stopped, failed): its
    /// prompt may have been read and billed, so its estimate counts.
    pub(super) async fn unanswered(&mut self) -> Result<(), AgentError> {
        if self.meter.is_none() {
            return Ok(());
        }
        let prompt = std::mem::take(&mut self.asked);
        self.spent(Usage::new(prompt, 0)).await
    }

    /// The conversation went on in session `to` (a split): its hold goes
    /// with it.
    pub(super) async fn moved(&mut self, to: &str) -> Result<(), AgentError> {
        if let Some(meter) = &mut self.meter {
            meter.moved(to).await?;
        }
        Ok(())
    }

    /// After a call that used `usage`: counted, priced as the model that
    /// answered it, and the hold settled.
    pub(super) async fn spent(&mut self, mut usage: Usage) -> Result<(), AgentError> {
        // A metered call whose answer reports no prompt (an endpoint that
        // leaves usage out, a salvaged stream) counts its estimate.
        if usage.prompt_tokens == 0 && self.meter.is_some() {
            usage.prompt_tokens = self.asked;
        }
        self.asked = 0;
        self.used += usage;
        let models = &self.deps.models;
        let model = models.answering(&self.route, models.for_session(&self.session));
        let cost = crate::budgets::cost_micros(&self.deps.prices, model, usage);
        self.used_micros = self.used_micros.saturating_add(cost);
        if usage.prompt_tokens > 0 && self.estimated > 0 {
            self.calibration = (usage.prompt_tokens as f64 / self.estimated as f64).clamp(1.0, 4.0);
        }
        if let Some(meter) = &mut self.meter {
            meter
                .after_call((self.used, self.used_micros), self.deps.clock.now_ms())
                .await?;
        }
        Ok(())
    }
}

/// Adds `text` to what the chat is told besides the answer.
pub(super) fn add_notice(notice: &mut Option<String>, text: &str) {
    match notice {
        Some(told) => {
            told.push_str("\n\n");
            told.push_str(text);
        }
        None => *notice = Some(text.to_string()),
    }
}
