//! `[sessions]`: how conversations split into sessions, how much may wait,
//! and when a conversation starts over on its own.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `[sessions]`: session keys, queues and reset policies.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsConfig {
    /// In group chats, each user gets their own session.
    pub group_sessions_per_user: bool,
    /// In threads, each user gets their own session.
    pub thread_sessions_per_user: bool,
    /// Messages waiting per session while a turn runs (busy mode `queue`).
    pub queue_cap: usize,
    /// Events accepted but not yet processed, across all sessions; beyond
    /// it chats get a busy reply and webhooks 503 + Retry-After.
    pub max_pending: usize,
    /// Seconds a session worker with nothing to do stays in memory.
    pub worker_idle_secs: u64,
    /// Workers kept in memory when they hold nothing: past this many live
    /// workers, one idle for 30 s retires at once instead of after
    /// `worker_idle_secs` (a new one starts with the session's next
    /// message).
    pub max_idle_workers: usize,
    /// MiB of conversation history held in memory across all sessions.
    /// Past it, a session that has nothing more waiting drops its history
    /// after its turn and reads it again from storage on its next message
    /// (an idle session drops it after 30 s anyway).
    pub history_cache_mb: u64,
    /// Messages one person may send a minute in the chat platforms (a
    /// token bucket, bursts up to it); past it they are told once to slow
    /// down and their messages are refused without being stored. 0: no
    /// limit.
    pub user_messages_per_minute: u32,
    /// The same for one chat or channel, whoever writes. 0: no limit.
    pub chat_messages_per_minute: u32,
    /// Reset policy of every platform without its own.
    pub reset: ResetPolicy,
    /// Reset policies by platform (`telegram`, `discord`, `slack`,
    /// `webhook`, `cli`), e.g. `[sessions.reset_by_platform.slack]`.
    pub reset_by_platform: BTreeMap<String, ResetPolicy>,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        Self {
            group_sessions_per_user: true,
            thread_sessions_per_user: false,
            queue_cap: 32,
            max_pending: 10_000,
            worker_idle_secs: 600,
            max_idle_workers: 1000,
            history_cache_mb: 64,
            user_messages_per_minute: 0,
            chat_messages_per_minute: 0,
            reset: ResetPolicy::default(),
            reset_by_platform: BTreeMap::new(),
        }
    }
}

impl SessionsConfig {
    /// The reset policy of `platform`.
    pub fn reset_for(&self, platform: &str) -> ResetPolicy {
        self.reset_by_platform
            .get(platform)
            .copied()
            .unwrap_or(self.reset)
    }
}

/// When a conversation starts over without anyone asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResetPolicy {
    /// `idle`, `daily`, `both` or `none`.
    pub mode: ResetMode,
    /// Minutes without a message after which the next one starts a new
    /// conversation (`idle`, `both`).
    pub idle_minutes: u64,
    /// Hour of the day (0–23, UTC) at which conversations start over
    /// (`daily`, `both`).
    pub daily_hour: u32,
}

impl Default for ResetPolicy {
    fn default() -> Self {
        Self {
            mode: ResetMode::Both,
            idle_minutes: 1440,
            daily_hour: 4,
        }
    }
}

/// Reset modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResetMode {
    /// After `idle_minutes` without a message.
    Idle,
    /// Once a day at `daily_hour`.
    Daily,
    /// Whichever comes first.
    Both,
    /// Never; only `/new` starts over.
    None,
}
