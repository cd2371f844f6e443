//! What the operator console reads beyond the other tables' own
//! queries: its audit trail, activity per minute and spend per day, and
//! sending a given-up message again.

use super::{Result, Store, now_ms, storable, with_pool};

/// One console action.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct ConsoleAudit {
    /// When (Unix ms).
    pub at: i64,
    /// Who (`console`).
    pub actor: String,
    /// What: `login`, `approve`, `retry`, ….
    pub action: String,
    /// On what.
    pub target: String,
    /// How it went.
    pub outcome: String,
}

impl Store {
    /// Records a console action.
    pub async fn console_audit(
        &self,
        actor: &str,
        action: &str,
        target: &str,
        outcome: &str,
    ) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "INSERT INTO console_audit (at, actor, action, target, outcome) VALUES ($1, $2, $3, $4, $5)")
            .bind(now_ms()).bind(actor).bind(action).bind(storable(target)).bind(storable(outcome))
            .execute(pool).await?.rows_affected());
        Ok(())
    }

    /// The latest console actions, newest first.
    pub async fn console_audits(&self, limit: i64) -> Result<Vec<ConsoleAudit>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT at, actor, action, target, outcome FROM console_audit ORDER BY id DESC LIMIT $1")
            .bind(limit).fetch_all(pool).await?))
    }

    /// Turns finished and messages sent per minute since `since`: (minute
    /// start, turns, sent).
    pub async fn activity_per_minute(&self, since: i64) -> Result<Vec<(i64, i64, i64)>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT minute, CAST(SUM(turns) AS BIGINT), CAST(SUM(sent) AS BIGINT) FROM ( \
               SELECT (finished_at / 60000) * 60000 AS minute, 1 AS turns, 0 AS sent FROM turns WHERE finished_at >= $1 \
               UNION ALL SELECT (updated_at / 60000) * 60000, 0, 1 FROM outbox WHERE status = 'sent' AND updated_at >= $1 \
             ) AS activity GROUP BY minute ORDER BY minute")
            .bind(since).fetch_all(pool).await?))
    }

    /// Tokens and cost (millionths) per UTC day since `since`: (day start,
    /// tokens, cost).
    pub async fn spend_per_day(&self, since: i64) -> Result<Vec<(i64, i64, i64)>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT (finished_at / 86400000) * 86400000 AS day, \
             CAST(SUM(prompt_tokens + completion_tokens) AS BIGINT), CAST(SUM(cost_micros) AS BIGINT) \
             FROM turns WHERE finished_at >= $1 GROUP BY day ORDER BY day")
            .bind(since).fetch_all(pool).await?))
    }

    /// Puts given-up row `id` back to pending; false when it was not
    /// given up.
    pub async fn outbox_requeue(&self, id: i64) -> Result<bool> {
        let changed = with_pool!(self, pool => sqlx::query(
            "UPDATE outbox SET status = 'pending', updated_at = $1 WHERE id = $2 AND status = 'failed'")
            .bind(now_ms()).bind(id).execute(pool).await?.rows_affected());
        Ok(changed == 1)
    }
}
