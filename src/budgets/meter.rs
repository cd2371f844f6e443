//! Budgets inside a turn. Before each model call the turn asks its
//! [`Meter`]: the call's estimate (its prompt's tokens and the output cap
//! it sends, priced as the turn's model) is held against every cap that
//! applies, together with what the turn's earlier calls used, what
//! finished turns spent and what other running turns hold. A call that
//! could cross a cap is not made. The hold is a row in storage, checked
//! and written under one lock, so concurrent turns (in other chats, on
//! other replicas) cannot spend the same remainder; after the call it
//! settles to the real usage, and it goes with the turn's commit. A hold
//! whose process died expires after [`HOLD_TTL_MS`].

use std::sync::Arc;

use super::{Scope, Standing, Window, cost_micros, utc};
use crate::agent::provider::Usage;
use crate::config::BudgetsConfig;
use crate::store::{Hold, Limit, Store, StoreError};

/// How long a hold counts without being renewed: while its turn runs it
/// is renewed every quarter of this (however long its tools or approvals
/// take); a turn whose process died stops counting after this (or sooner,
/// when its session's turn is picked up again and holds anew).
pub const HOLD_TTL_MS: i64 = 60 * 60 * 1000;

/// Whether a model call may be made.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// Go ahead; warnings past the warning share to tell the chat (each
    /// once per window).
    Go(Vec<String>),
    /// Not made: the cap it could cross, and when it resets.
    Stop(String),
}

/// One turn's account with the budgets.
#[derive(Debug)]
pub struct Meter {
    store: Store,
    budgets: Arc<BudgetsConfig>,
    /// The models a call may be answered by: the session's and the
    /// fallbacks; a call is estimated at the dearest.
    models: Vec<String>,
    hold: Hold,
    scopes: Vec<Scope>,
    /// Renews the hold while the turn runs, once one was written.
    renewal: Option<Renewal>,
}

/// The task that renews a hold; stopped when dropped.
#[derive(Debug)]
struct Renewal(tokio::task::AbortHandle);

impl Renewal {
    fn start(store: Store, session_id: String) -> Self {
        let every = std::time::Duration::from_millis((HOLD_TTL_MS / 4).unsigned_abs());
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if let Err(err) = store
                    .renew_hold(&session_id, crate::store::now_ms() + HOLD_TTL_MS)
                    .await
                {
                    tracing::warn!(error = %err, "budget hold not renewed");
                }
            }
        });
        Self(task.abort_handle())
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Meter {
    /// The meter of a turn counted against `hold`'s platform, chat, user
    /// and job, whose calls `models` may answer; `None` when no cap
    /// applies to it.
    pub fn new(
        store: Store,
        budgets: Arc<BudgetsConfig>,
        models: Vec<String>,
        hold: Hold,
    ) -> Option<Self> {
        let mut scopes = Vec::new();
        if hold.platform == crate::platform::WEBHOOK {
            scopes.push(Scope::Route(hold.chat_id.clone()));
        } else {
            if let Some(user) = &hold.user_id {
                scopes.push(Scope::User {
                    platform: hold.platform.clone(),
                    user: user.clone(),
                });
            }
            scopes.push(Scope::Chat {
                platform: hold.platform.clone(),
                chat: hold.chat_id.clone(),
            });
        }
        if let Some(job) = &hold.job_id {
            scopes.push(Scope::Job(job.clone()));
        }
        scopes.retain(|s| s.caps(&budgets).any());
        (!scopes.is_empty()).then_some(Self {
            store,
            budgets,
            models,
            hold,
            scopes,
            renewal: None,
        })
    }

    /// The turn's conversation went on in session `to` (a split): the
    /// hold moves with it.
    pub async fn moved(&mut self, to: &str) -> Result<(), StoreError> {
        self.store.move_hold(&self.hold.session_id, to).await?;
        self.hold.session_id = to.to_string();
        if self.renewal.is_some() {
            self.renewal = Some(Renewal::start(self.store.clone(), to.to_string()));
        }
        Ok(())
    }

    /// What the turn's calls used before its process died, as its hold
    /// says (tokens, and their cost in millionths): the turn picked up
    /// again counts them as its own.
    pub async fn carried(&self) -> Result<(Usage, i64), StoreError> {
        let used = self.store.held_usage(&self.hold.session_id).await?;
        Ok(
            used.map_or_else(Default::default, |(prompt, completion, micros)| {
                let usage = Usage::new(
                    u64::try_from(prompt).unwrap_or(0),
                    u64::try_from(completion).unwrap_or(0),
                );
                (usage, micros.max(0))
            }),
        )
    }

    /// What `usage` could cost at the dearest of the models.
    fn dearest(&self, usage: Usage) -> i64 {
        self.models
            .iter()
            .map(|model| cost_micros(&self.budgets.prices, model, usage))
            .max()
            .unwrap_or(0)
    }

    fn set_used(&mut self, (used, micros): (Usage, i64)) {
        self.hold.used_prompt = i64::try_from(used.prompt_tokens).unwrap_or(i64::MAX);
        self.hold.used_completion = i64::try_from(used.completion_tokens).unwrap_or(i64::MAX);
        self.hold.used_micros = micros;
    }

    /// Before a call estimated at `estimate`, with `used` spent by the
    /// turn's calls so far (tokens and cost): holds it when every cap has
    /// room, at `now`.
    pub async fn before_call(
        &mut self,
        used: (Usage, i64),
        estimate: Usage,
        now: i64,
    ) -> Result<Call, StoreError> {
        self.set_used(used);
        self.hold.reserved_tokens = i64::try_from(
            estimate
                .prompt_tokens
                .saturating_add(estimate.completion_tokens),
        )
        .unwrap_or(i64::MAX);
        self.hold.reserved_micros = self.dearest(estimate);
        let mut limits = Vec::new();
        let mut windows = Vec::new();
        for scope in &self.scopes {
            let caps = scope.caps(&self.budgets);
            for window in [Window::Day, Window::Month] {
                let (cost, tokens) = caps.of(window);
                if cost <= 0.0 && tokens == 0 {
                    continue;
                }
                let bounds = window.bounds(now);
                limits.push(Limit {
                    scope: scope.clone(),
                    since: bounds.0,
                    token_cap: i64::try_from(tokens).unwrap_or(i64::MAX),
                    cost_cap: (cost * 1e6).round() as i64,
                });
                windows.push((window, bounds, (cost, tokens)));
            }
        }
        let (fits, spent) = self
            .store
            .reserve_hold(&self.hold, &limits, now, now + HOLD_TTL_MS)
            .await?;
        if fits && self.renewal.is_none() {
            self.renewal = Some(Renewal::start(
                self.store.clone(),
                self.hold.session_id.clone(),
            ));
        }
        // Where each cap stands with this turn's calls so far, but not
        // the one asked about.
        let standings: Vec<Standing> = limits
            .iter()
            .zip(&windows)
            .zip(spent)
            .map(|((limit, &(window, bounds, caps)), mut spent)| {
                // Saturating: a provider's numbers are not to be trusted
                // with wrapping past the cap.
                spent.tokens = spent.tokens.saturating_add(
                    self.hold
                        .used_prompt
                        .saturating_add(self.hold.used_completion),
                );
                spent.cost_micros = spent.cost_micros.saturating_add(self.hold.used_micros);
                Standing::new(&limit.scope, window, bounds, spent, caps)
            })
            .collect();
        let crossed = standings
            .iter()
            .find(|s| self.crossed_by(s))
            .or(standings.first());
        if let (false, Some(crossed)) = (fits, crossed) {
            return Ok(Call::Stop(format!(
                "{} is at {} of its {} budget, and my next step could go past it, so I stopped here. The budget resets at {}.",
                crossed.scope.label(),
                crossed.describe(),
                crossed.window.name(),
                utc(crossed.bounds.1)
            )));
        }
        let mut warnings = Vec::new();
        for standing in &standings {
            if standing.share() * 100.0 >= f64::from(self.budgets.warn_percent)
                && self
                    .store
                    .budget_noticed(&standing.scope.key(), standing.bounds.0, "warn")
                    .await?
            {
                warnings.push(standing.warning());
            }
        }
        Ok(Call::Go(warnings))
    }

    /// Whether the call held in `self.hold` would take `standing` past
    /// one of its caps.
    fn crossed_by(&self, standing: &Standing) -> bool {
        let more_tokens = self.hold.reserved_tokens;
        let more_micros = self.hold.reserved_micros;
        (standing.token_cap > 0 && standing.tokens.saturating_add(more_tokens) > standing.token_cap)
            || (standing.cost_cap > 0
                && standing.cost_micros.saturating_add(more_micros) > standing.cost_cap)
    }

    /// After a call: the hold becomes what the turn's calls used, `used`
    /// (tokens and cost).
    pub async fn after_call(&mut self, used: (Usage, i64), now: i64) -> Result<(), StoreError> {
        if self.renewal.is_none() {
            return Ok(());
        }
        self.set_used(used);
        self.hold.reserved_tokens = 0;
        self.hold.reserved_micros = 0;
        self.store
            .settle_hold(
                &self.hold.session_id,
                (
                    self.hold.used_prompt,
                    self.hold.used_completion,
                    self.hold.used_micros,
                ),
                now + HOLD_TTL_MS,
            )
            .await
    }
}
