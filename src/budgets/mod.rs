//! Spend caps (`[budgets]`). Every turn records its tokens and its cost
//! (tokens × the model's price per million), counted against its user,
//! its chat (for webhooks, its route) and its scheduled job. Before a new
//! turn is taken, each scope's spend in the current UTC day and month is
//! compared with its caps: past the warning share the chat is told once
//! per window; at the cap the turn is refused until the window resets.
//! Inside a turn, each model call is checked and held before it is made
//! ([`Meter`]), so a running turn stops at the cap too.

mod meter;

use std::collections::BTreeMap;

pub use meter::{Call, HOLD_TTL_MS, Meter};

use crate::agent::provider::Usage;
use crate::config::{BudgetsConfig, Caps, Config, Price};
use crate::platform::InboundEvent;
use crate::store::{CronJob, Spent, Store, StoreError};

/// What a turn with `usage` on `model` cost, in millionths of the prices'
/// currency (0 for a model without a price). Input read from or written
/// to the provider's prompt cache is priced at the cache's prices, where
/// the model has them, and as input where not.
pub fn cost_micros(prices: &BTreeMap<String, Price>, model: &str, usage: Usage) -> i64 {
    prices.get(model).map_or(0, |p| {
        let read = usage.cache_read_tokens.min(usage.prompt_tokens);
        let written = usage.cache_write_tokens.min(usage.prompt_tokens - read);
        let plain = usage.prompt_tokens - read - written;
        (plain as f64 * p.input
            + read as f64 * p.cache_read.unwrap_or(p.input)
            + written as f64 * p.cache_write.unwrap_or(p.input)
            + usage.completion_tokens as f64 * p.output)
            .round() as i64
    })
}

pub use crate::clock::utc;

/// An amount in millionths, as `1.23`.
pub fn money(micros: i64) -> String {
    format!("{:.2}", micros as f64 / 1e6)
}

/// Whom spend is counted against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// A person on a platform.
    User {
        /// Platform.
        platform: String,
        /// User id.
        user: String,
    },
    /// A chat or channel.
    Chat {
        /// Platform.
        platform: String,
        /// Chat id.
        chat: String,
    },
    /// A webhook route.
    Route(String),
    /// A scheduled job.
    Job(String),
}

impl Scope {
    /// Its storage key, `user:telegram:42` and so on.
    pub fn key(&self) -> String {
        match self {
            Self::User { platform, user } => format!("user:{platform}:{user}"),
            Self::Chat { platform, chat } => format!("chat:{platform}:{chat}"),
            Self::Route(route) => format!("route:{route}"),
            Self::Job(job) => format!("job:{job}"),
        }
    }

    /// How it is named in a message.
    pub fn label(&self) -> String {
        match self {
            Self::User { .. } => "Your usage".into(),
            Self::Chat { .. } => "This chat".into(),
            Self::Route(route) => format!("Webhook route {route}"),
            Self::Job(job) => format!("Scheduled job {job}"),
        }
    }

    fn caps<'a>(&self, budgets: &'a BudgetsConfig) -> &'a Caps {
        match self {
            Self::User { .. } => &budgets.user,
            Self::Chat { .. } => &budgets.chat,
            Self::Route(_) => &budgets.route,
            Self::Job(_) => &budgets.job,
        }
    }
}

/// A daily or a monthly window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// The UTC day.
    Day,
    /// The UTC month.
    Month,
}

impl Window {
    /// `daily` or `monthly`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Day => "daily",
            Self::Month => "monthly",
        }
    }

    /// Start and end (Unix ms) of the window `now` is in.
    pub fn bounds(self, now: i64) -> (i64, i64) {
        match self {
            Self::Day => crate::clock::day_bounds(now),
            Self::Month => crate::clock::month_bounds(now),
        }
    }
}

/// One scope's spend in one window against its caps.
#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    /// Whose.
    pub scope: Scope,
    /// Which window.
    pub window: Window,
    /// Its start and end (Unix ms).
    pub bounds: (i64, i64),
    /// Spent, in millionths.
    pub cost_micros: i64,
    /// Tokens used.
    pub tokens: i64,
    /// Held by running turns, in millionths (part of `cost_micros`).
    pub held_micros: i64,
    /// Tokens held by running turns (part of `tokens`).
    pub held_tokens: i64,
    /// The cost cap in millionths (0: none).
    pub cost_cap: i64,
    /// The token cap (0: none).
    pub token_cap: i64,
}

impl Standing {
    fn new(
        scope: &Scope,
        window: Window,
        bounds: (i64, i64),
        spent: Spent,
        caps: (f64, u64),
    ) -> Self {
        Self {
            scope: scope.clone(),
            window,
            bounds,
            cost_micros: spent.cost_micros + spent.held_micros,
            tokens: spent.tokens + spent.held_tokens,
            held_micros: spent.held_micros,
            held_tokens: spent.held_tokens,
            cost_cap: (caps.0 * 1e6).round() as i64,
            token_cap: i64::try_from(caps.1).unwrap_or(i64::MAX),
        }
    }

    /// The larger share of a cap used (0 without caps).
    pub fn share(&self) -> f64 {
        let part = |used: i64, cap: i64| {
            if cap > 0 {
                used as f64 / cap as f64
            } else {
                0.0
            }
        };
        part(self.cost_micros, self.cost_cap).max(part(self.tokens, self.token_cap))
    }

    /// `12.30 of 20.00, 1 200 of 50 000 tokens`, for what is capped.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.cost_cap > 0 {
            parts.push(format!(
                "{} of {}",
                money(self.cost_micros),
                money(self.cost_cap)
            ));
        }
        if self.token_cap > 0 {
            parts.push(format!("{} of {} tokens", self.tokens, self.token_cap));
        }
        if parts.is_empty() {
            parts.push(format!(
                "{} ({} tokens), no cap",
                money(self.cost_micros),
                self.tokens
            ));
        }
        if self.held_micros > 0 || self.held_tokens > 0 {
            parts.push(format!(
                "of which {} ({} tokens) held by running requests",
                money(self.held_micros),
                self.held_tokens
            ));
        }
        parts.join(", ")
    }

    /// The heads-up past the warning share.
    fn warning(&self) -> String {
        format!(
            "Heads-up: {} has used {:.0}% of its {} budget ({}). At 100% new requests are refused until {}.",
            self.scope.label(),
            self.share() * 100.0,
            self.window.name(),
            self.describe(),
            utc(self.bounds.1)
        )
    }
}

impl Caps {
    /// The cost and token caps of `window`.
    fn of(&self, window: Window) -> (f64, u64) {
        match window {
            Window::Day => (self.daily_cost, self.daily_tokens),
            Window::Month => (self.monthly_cost, self.monthly_tokens),
        }
    }
}

/// Each capped window of `scope` at `now`.
pub async fn standings(
    store: &Store,
    budgets: &BudgetsConfig,
    scope: &Scope,
    now: i64,
) -> Result<Vec<Standing>, StoreError> {
    let caps = scope.caps(budgets);
    let mut out = Vec::new();
    for window in [Window::Day, Window::Month] {
        let (cost, tokens) = caps.of(window);
        if cost <= 0.0 && tokens == 0 {
            continue;
        }
        let bounds = window.bounds(now);
        let spent = store.spend(scope, bounds.0, now).await?;
        out.push(Standing::new(scope, window, bounds, spent, (cost, tokens)));
    }
    Ok(out)
}

/// Spend in the `window` that `now` is in, per user, chat, route and job
/// (the largest first within each), each with its standing against its
/// cap in that window when it has one.
pub async fn usage_in(
    store: &Store,
    budgets: &BudgetsConfig,
    window: Window,
    now: i64,
) -> Result<Vec<(crate::store::UsageRow, Option<Standing>)>, StoreError> {
    let mut out = Vec::new();
    for row in store.usage_since(window.bounds(now).0).await? {
        let scope = match row.level.as_str() {
            "user" => Scope::User {
                platform: row.platform.clone(),
                user: row.id.clone(),
            },
            "chat" => Scope::Chat {
                platform: row.platform.clone(),
                chat: row.id.clone(),
            },
            "route" => Scope::Route(row.id.clone()),
            _ => Scope::Job(row.id.clone()),
        };
        let standing = standings(store, budgets, &scope, now)
            .await?
            .into_iter()
            .find(|s| s.window == window);
        out.push((row, standing));
    }
    Ok(out)
}

/// What the caps say about a new turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Go ahead (with warnings to show first, each given once).
    Clear(Vec<String>),
    /// Refused, and why.
    Over(String),
}

/// The scopes an event's turn is counted against.
pub(crate) fn scopes_of(event: &InboundEvent) -> Vec<Scope> {
    if event.platform.as_str() == "webhook" {
        return vec![Scope::Route(event.chat_id.clone())];
    }
    vec![
        Scope::User {
            platform: event.platform.to_string(),
            user: event.user_id.clone(),
        },
        Scope::Chat {
            platform: event.platform.to_string(),
            chat: event.chat_id.clone(),
        },
    ]
}

/// Checks `scopes` against their caps at `now`: refused at a cap, warned
/// (once per window) past the warning share.
async fn check(
    store: &Store,
    budgets: &BudgetsConfig,
    scopes: &[Scope],
    now: i64,
) -> Result<Verdict, StoreError> {
    let mut warnings = Vec::new();
    for scope in scopes {
        for standing in standings(store, budgets, scope, now).await? {
            let share = standing.share();
            if share >= 1.0 {
                return Ok(Verdict::Over(format!(
                    "{} has reached its {} budget ({}). New requests are refused until {}.",
                    scope.label(),
                    standing.window.name(),
                    standing.describe(),
                    utc(standing.bounds.1)
                )));
            }
            if share * 100.0 >= f64::from(budgets.warn_percent)
                && store
                    .budget_noticed(&scope.key(), standing.bounds.0, "warn")
                    .await?
            {
                warnings.push(standing.warning());
            }
        }
    }
    Ok(Verdict::Clear(warnings))
}

/// The caps' verdict on a new turn for `event` (always clear when no cap
/// is set).
pub async fn check_event(
    store: &Store,
    config: &Config,
    event: &InboundEvent,
    now: i64,
) -> Result<Verdict, StoreError> {
    if !config.budgets.capped() {
        return Ok(Verdict::Clear(Vec::new()));
    }
    check(store, &config.budgets, &scopes_of(event), now).await
}

/// Why `job`'s next run is refused (its own caps, its owner's, its
/// chat's), if it is.
pub async fn job_refusal(
    store: &Store,
    config: &Config,
    job: &CronJob,
    now: i64,
) -> Result<Option<String>, StoreError> {
    if !config.budgets.capped() {
        return Ok(None);
    }
    let mut scopes = vec![
        Scope::Job(job.id.clone()),
        Scope::Chat {
            platform: job.platform.clone(),
            chat: job.chat_id.clone(),
        },
    ];
    if !job.owner_user.is_empty() {
        scopes.push(Scope::User {
            platform: job.platform.clone(),
            user: job.owner_user.clone(),
        });
    }
    Ok(match check(store, &config.budgets, &scopes, now).await? {
        Verdict::Over(why) => Some(why),
        Verdict::Clear(_) => None,
    })
}

/// What `/usage` answers in `event`'s chat: the sender's and the chat's
/// spend today and this month, against their caps.
pub async fn usage_report(
    store: &Store,
    config: &Config,
    event: &InboundEvent,
    now: i64,
) -> Result<String, StoreError> {
    let mut lines = Vec::new();
    for scope in scopes_of(event) {
        let caps = scope.caps(&config.budgets);
        for window in [Window::Day, Window::Month] {
            let bounds = window.bounds(now);
            let spent = store.spend(&scope, bounds.0, now).await?;
            let standing = Standing::new(&scope, window, bounds, spent, caps.of(window));
            let left = if standing.cost_cap > 0 {
                format!(
                    "; {} left until {}",
                    money((standing.cost_cap - standing.cost_micros).max(0)),
                    utc(bounds.1)
                )
            } else if standing.token_cap > 0 {
                format!(
                    "; {} tokens left until {}",
                    (standing.token_cap - standing.tokens).max(0),
                    utc(bounds.1)
                )
            } else {
                String::new()
            };
            lines.push(format!(
                "{} {}: {}{left}",
                scope.label(),
                match window {
                    Window::Day => "today",
                    Window::Month => "this month",
                },
                standing.describe()
            ));
        }
    }
    Ok(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_utc_days_and_months() {
        let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap().as_millisecond();
        let now = at("2026-02-14T15:30:00Z");
        assert_eq!(
            Window::Day.bounds(now),
            (at("2026-02-14T00:00:00Z"), at("2026-02-15T00:00:00Z"))
        );
        assert_eq!(
            Window::Month.bounds(now),
            (at("2026-02-01T00:00:00Z"), at("2026-03-01T00:00:00Z"))
        );
    }

    #[test]
    fn a_turn_costs_its_tokens_at_its_models_price() {
        let prices = BTreeMap::from([(
            "m".to_string(),
            Price {
                input: 2.5,
                output: 10.0,
                cache_read: Some(0.25),
                cache_write: Some(3.0),
            },
        )]);
        let usage = Usage::new(1000, 100);
        // 1000 × 2.5 + 100 × 10 millionths.
        assert_eq!(cost_micros(&prices, "m", usage), 3500);
        assert_eq!(cost_micros(&prices, "other", usage), 0);
        let cached = Usage {
            cache_read_tokens: 600,
            cache_write_tokens: 200,
            ..usage
        };
        // 200 × 2.5 + 600 × 0.25 + 200 × 3 + 100 × 10.
        assert_eq!(cost_micros(&prices, "m", cached), 2250);
        let unpriced = BTreeMap::from([(
            "m".to_string(),
            Price {
                cache_read: None,
                cache_write: None,
                ..prices["m"]
            },
        )]);
        assert_eq!(
            cost_micros(&unpriced, "m", cached),
            3500,
            "without cache prices, cached input is priced as input"
        );
    }
}
