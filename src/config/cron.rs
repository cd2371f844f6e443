//! `[cron]` (scheduled jobs) and `[budgets]` (what turns may cost).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `[cron]`: scheduled agent jobs.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CronConfig {
    /// Run due jobs (when off, stored jobs are kept as they are and
    /// nothing fires).
    pub enabled: bool,
    /// Jobs one person may keep through the `cronjob` tool.
    pub max_jobs_per_user: usize,
    /// Toolsets of jobs created from group chats (a job created in a
    /// direct message gets its platform's preset).
    pub group_toolsets: Vec<String>,
    /// Jobs from the configuration; they are (re)written into storage at
    /// start and removed when they leave the file.
    pub jobs: Vec<CronJobConfig>,
}

impl Default for CronConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_jobs_per_user: 10,
            group_toolsets: vec!["safe".into()],
            jobs: Vec::new(),
        }
    }
}

/// One `[[cron.jobs]]` entry.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CronJobConfig {
    /// Unique name (`switchboard cron show NAME`).
    pub name: String,
    /// A cron expression (`0 9 * * 1-5`), `every 30m`, or `at
    /// 2026-12-01T09:00`.
    pub schedule: String,
    /// IANA time zone the schedule is read in (`Europe/Berlin`).
    pub timezone: String,
    /// What the agent is asked at each run.
    pub prompt: String,
    /// Platform the answer is posted to.
    pub platform: String,
    /// Chat (channel) the answer is posted to.
    pub chat: String,
    /// Thread or topic in that chat.
    pub thread: String,
    /// Whom failures are reported to: a chat on the same platform (default
    /// the target chat).
    pub notify_chat: String,
    /// Toolsets of its runs (default the platform's preset).
    pub toolsets: Vec<String>,
    /// What happens to slots that came due while the daemon was down.
    pub missed: MissedPolicy,
    /// With `missed = "all"`: at most this many late runs.
    pub missed_limit: u32,
}

/// Runs due while the daemon was down (or paused behind a full gateway).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MissedPolicy {
    /// Not run; the next slot is waited for.
    #[default]
    Skip,
    /// Run once, for the latest missed slot.
    Once,
    /// Run each missed slot, the latest `missed_limit` of them.
    All,
}

impl MissedPolicy {
    /// Its name in config and storage.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::Once => "once",
            Self::All => "all",
        }
    }

    /// The policy named `name` (`skip` when unknown).
    pub fn parse(name: &str) -> Self {
        match name {
            "once" => Self::Once,
            "all" => Self::All,
            _ => Self::Skip,
        }
    }
}

/// `[budgets]`: what turns may cost, per user, chat, webhook route and job.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetsConfig {
    /// Price per million tokens, by model name.
    pub prices: BTreeMap<String, Price>,
    /// Share of a cap (percent) at which the chat is warned, once per
    /// window.
    pub warn_percent: u32,
    /// What a webhook route past its budget answers: `accept` (202, the
    /// delivery recorded as over budget) or `reject` (429).
    pub webhook_over_budget: OverBudget,
    /// Caps per user (`platform:user`).
    pub user: Caps,
    /// Caps per chat or channel.
    pub chat: Caps,
    /// Caps per webhook route.
    pub route: Caps,
    /// Caps per scheduled job.
    pub job: Caps,
}

impl Default for BudgetsConfig {
    fn default() -> Self {
        Self {
            prices: BTreeMap::new(),
            warn_percent: 80,
            webhook_over_budget: OverBudget::Accept,
            user: Caps::default(),
            chat: Caps::default(),
            route: Caps::default(),
            job: Caps::default(),
        }
    }
}

impl BudgetsConfig {
    /// Whether any cap is set.
    pub fn capped(&self) -> bool {
        [&self.user, &self.chat, &self.route, &self.job]
            .iter()
            .any(|c| c.any())
    }
}

/// A model's price, per million tokens, in the currency caps are in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Price {
    /// Per million prompt (input) tokens.
    pub input: f64,
    /// Per million completion (output) tokens.
    pub output: f64,
    /// Per million input tokens read from the provider's prompt cache
    /// (unset: priced as input).
    pub cache_read: Option<f64>,
    /// Per million input tokens written to the provider's prompt cache
    /// (unset: priced as input).
    pub cache_write: Option<f64>,
}

/// Daily and monthly caps (UTC days and months); 0 is no cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Caps {
    /// Cost per UTC day.
    pub daily_cost: f64,
    /// Cost per UTC month.
    pub monthly_cost: f64,
    /// Tokens (prompt and completion) per UTC day.
    pub daily_tokens: u64,
    /// Tokens per UTC month.
    pub monthly_tokens: u64,
}

impl Caps {
    /// Whether any cap is set.
    pub fn any(&self) -> bool {
        self.daily_cost > 0.0
            || self.monthly_cost > 0.0
            || self.daily_tokens > 0
            || self.monthly_tokens > 0
    }
}

/// A webhook route's answer when it is over budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OverBudget {
    /// 202; the delivery is recorded as over budget and not run.
    #[default]
    Accept,
    /// 429, so the sender may deliver it again later.
    Reject,
}
