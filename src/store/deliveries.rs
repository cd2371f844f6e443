//! Webhook answers: the bot's one comment per pull request, and a record of
//! every delivery with its attempts.

use super::{Result, Store, now_ms, returning, storable, with_pool};

/// A recorded delivery.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DeliveryRow {
    /// Order of creation.
    pub id: i64,
    /// Webhook route name.
    pub route: String,
    /// Entity the answer is about (`github:<repo>:pr:<n>`).
    pub entity: String,
    /// `github_comment`, `chat:<platform>:<chat>` or `log`.
    pub target: String,
    /// `pending`, `delivered` or `failed`.
    pub status: String,
    /// Attempts made.
    pub attempts: i64,
    /// Error of the last failed attempt.
    pub last_error: Option<String>,
    /// Created (Unix ms).
    pub created_at: i64,
    /// Last attempt (Unix ms).
    pub updated_at: i64,
}

impl Store {
    /// The bot's comment id on `entity`, if it commented before.
    pub async fn bot_comment(&self, entity: &str) -> Result<Option<String>> {
        Ok(with_pool!(self, pool => sqlx::query_scalar(
            "SELECT comment_id FROM bot_comments WHERE entity = $1")
            .bind(storable(entity)).fetch_optional(pool).await?))
    }

    /// Remembers the bot's comment id on `entity`.
    pub async fn set_bot_comment(&self, entity: &str, comment_id: &str) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "INSERT INTO bot_comments (entity, comment_id, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (entity) DO UPDATE SET comment_id = excluded.comment_id, updated_at = excluded.updated_at")
            .bind(storable(entity)).bind(storable(comment_id)).bind(now_ms()).execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Starts a delivery record; returns its id.
    pub async fn delivery_start(&self, route: &str, entity: &str, target: &str) -> Result<i64> {
        let now = now_ms();
        Ok(returning!(&self.backend, ex => sqlx::query_scalar(
            "INSERT INTO deliveries (route, entity, target, status, attempts, created_at, updated_at) \
             VALUES ($1, $2, $3, 'pending', 0, $4, $4) RETURNING id")
            .bind(route).bind(storable(entity)).bind(storable(target)).bind(now)
            .fetch_one(ex).await?))
    }

    /// Records one attempt: `error` is `None` when it went through; `last`
    /// marks a failure as final.
    pub async fn delivery_attempt(&self, id: i64, error: Option<&str>, last: bool) -> Result<()> {
        let status = match (error, last) {
            (None, _) => "delivered",
            (Some(_), true) => "failed",
            (Some(_), false) => "pending",
        };
        with_pool!(self, pool => sqlx::query(
            "UPDATE deliveries SET attempts = attempts + 1, status = $1, last_error = $2, updated_at = $3 \
             WHERE id = $4")
            .bind(status).bind(error.map(storable)).bind(now_ms()).bind(id).execute(pool).await?.rows_affected());
        Ok(())
    }

    /// The latest deliveries, newest first.
    pub async fn deliveries(&self, limit: i64) -> Result<Vec<DeliveryRow>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT id, route, entity, target, status, attempts, last_error, created_at, updated_at \
             FROM deliveries ORDER BY id DESC LIMIT $1")
            .bind(limit).fetch_all(pool).await?))
    }
}
