//! What turns cost, summed per user, chat, webhook route and job, and the
//! budget warnings already given.

use super::{Result, Store, now_ms, with_pool};
use crate::budgets::Scope;

/// One row of a usage summary.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct UsageRow {
    /// `user`, `chat`, `route` or `job`.
    pub level: String,
    /// Platform (empty for jobs).
    pub platform: String,
    /// User, chat, route or job id.
    pub id: String,
    /// Turns.
    pub turns: i64,
    /// Tokens, prompt and completion.
    pub tokens: i64,
    /// Cost in millionths.
    pub cost_micros: i64,
}

impl Store {
    /// Cost (millionths) and tokens of `scope`'s turns since `since`.
    pub async fn spend(&self, scope: &Scope, since: i64) -> Result<(i64, i64)> {
        let (filter, a, b) = match scope {
            Scope::User { platform, user } => (
                "platform = $1 AND user_id = $2",
                platform.as_str(),
                user.as_str(),
            ),
            Scope::Chat { platform, chat } => (
                "platform = $1 AND chat_id = $2",
                platform.as_str(),
                chat.as_str(),
            ),
            Scope::Route(route) => ("platform = $1 AND chat_id = $2", "webhook", route.as_str()),
            Scope::Job(job) => ("$1 = '' AND job_id = $2", "", job.as_str()),
        };
        let sql = format!(
            "SELECT CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT), \
             CAST(COALESCE(SUM(prompt_tokens + completion_tokens), 0) AS BIGINT) \
             FROM turns WHERE {filter} AND finished_at >= $3"
        );
        Ok(
            with_pool!(self, pool => sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(a).bind(b).bind(since).fetch_one(pool).await?),
        )
    }

    /// Spend since `since` per user, chat (routes are the webhook's
    /// chats) and job, the largest first.
    pub async fn usage_since(&self, since: i64) -> Result<Vec<UsageRow>> {
        let sql = "SELECT level, platform, id, turns, tokens, cost_micros FROM ( \
            SELECT 'user' AS level, COALESCE(platform, '') AS platform, user_id AS id, \
              COUNT(*) AS turns, CAST(SUM(prompt_tokens + completion_tokens) AS BIGINT) AS tokens, \
              CAST(SUM(cost_micros) AS BIGINT) AS cost_micros \
              FROM turns WHERE finished_at >= $1 AND user_id IS NOT NULL AND platform <> 'webhook' \
              GROUP BY platform, user_id \
            UNION ALL SELECT CASE WHEN platform = 'webhook' THEN 'route' ELSE 'chat' END, \
              COALESCE(platform, ''), chat_id, COUNT(*), CAST(SUM(prompt_tokens + completion_tokens) AS BIGINT), \
              CAST(SUM(cost_micros) AS BIGINT) \
              FROM turns WHERE finished_at >= $1 AND chat_id IS NOT NULL GROUP BY platform, chat_id \
            UNION ALL SELECT 'job', '', job_id, COUNT(*), CAST(SUM(prompt_tokens + completion_tokens) AS BIGINT), \
              CAST(SUM(cost_micros) AS BIGINT) \
              FROM turns WHERE finished_at >= $1 AND job_id IS NOT NULL GROUP BY job_id \
            ) AS spend ORDER BY level, cost_micros DESC, tokens DESC, id";
        Ok(with_pool!(self, pool => sqlx::query_as(sql).bind(since).fetch_all(pool).await?))
    }

    /// Records that `scope` was given warning `level` in the window that
    /// starts at `window_at`; false when it was already.
    pub async fn budget_noticed(&self, scope: &str, window_at: i64, level: &str) -> Result<bool> {
        let added = with_pool!(self, pool => sqlx::query(
            "INSERT INTO budget_notices (scope, window_at, level, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (scope, window_at, level) DO NOTHING")
            .bind(scope).bind(window_at).bind(level).bind(now_ms())
            .execute(pool).await?.rows_affected());
        Ok(added == 1)
    }
}
