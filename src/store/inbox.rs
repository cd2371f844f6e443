//! The durable inbox: inbound events committed before the platform is
//! acknowledged, deduplicated by platform event id, replayed after a crash.

use super::{Result, Store, now_ms, with_pool};

/// An inbound event to commit.
#[derive(Debug, Clone)]
pub struct NewInboxEvent<'a> {
    /// Platform name.
    pub platform: &'a str,
    /// Platform-unique event id (Telegram update_id, Slack event_id, GitHub
    /// delivery id, Discord message id), prefixed by the platform.
    pub dedupe_key: &'a str,
    /// The session the event belongs to.
    pub session_key: &'a str,
    /// The event itself, as JSON.
    pub payload: &'a str,
}

/// What committing an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboxInsert {
    /// Stored under this id; it will be processed.
    Inserted(i64),
    /// Already stored earlier: a redelivery to drop.
    Duplicate,
}

/// A stored inbound event.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct InboxRow {
    /// Arrival order.
    pub id: i64,
    /// Platform name.
    pub platform: String,
    /// Deduplication key.
    pub dedupe_key: String,
    /// Session key.
    pub session_key: String,
    /// JSON payload.
    pub payload: String,
    /// Arrival time (Unix ms).
    pub received_at: i64,
    /// How many times processing was started.
    pub attempts: i64,
    /// When processing finished, if it did.
    pub processed_at: Option<i64>,
    /// How it finished.
    pub outcome: Option<String>,
}

macro_rules! inbox_columns {
    () => {
        "id, platform, dedupe_key, session_key, payload, received_at, attempts, processed_at, outcome"
    };
}

impl Store {
    /// Commits an event unless one with the same dedupe key exists.
    pub async fn inbox_insert(&self, event: &NewInboxEvent<'_>) -> Result<InboxInsert> {
        let id: Option<i64> = with_pool!(self, pool => sqlx::query_scalar(
            "INSERT INTO inbox (platform, dedupe_key, session_key, payload, received_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (dedupe_key) DO NOTHING RETURNING id")
            .bind(event.platform).bind(event.dedupe_key).bind(event.session_key)
            .bind(event.payload).bind(now_ms())
            .fetch_optional(pool).await?);
        Ok(id.map_or(InboxInsert::Duplicate, InboxInsert::Inserted))
    }

    /// Counts a processing attempt of an event.
    pub async fn inbox_record_attempt(&self, id: i64) -> Result<()> {
        with_pool!(self, pool => sqlx::query("UPDATE inbox SET attempts = attempts + 1 WHERE id = $1")
            .bind(id).execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Marks an event processed. Returns false if it already was.
    pub async fn inbox_mark_processed(&self, id: i64, outcome: &str) -> Result<bool> {
        let n = with_pool!(self, pool => sqlx::query(
            "UPDATE inbox SET processed_at = $1, outcome = $2 WHERE id = $3 AND processed_at IS NULL")
            .bind(now_ms()).bind(outcome).bind(id).execute(pool).await?.rows_affected());
        Ok(n == 1)
    }

    /// Unprocessed events in arrival order (per session, arrival order is
    /// processing order).
    pub async fn inbox_pending(&self, limit: i64) -> Result<Vec<InboxRow>> {
        let sql = concat!(
            "SELECT ",
            inbox_columns!(),
            " FROM inbox WHERE processed_at IS NULL ORDER BY id LIMIT $1"
        );
        Ok(with_pool!(self, pool => sqlx::query_as(sql).bind(limit).fetch_all(pool).await?))
    }

    /// An event by id.
    pub async fn inbox_event(&self, id: i64) -> Result<Option<InboxRow>> {
        let sql = concat!("SELECT ", inbox_columns!(), " FROM inbox WHERE id = $1");
        Ok(with_pool!(self, pool => sqlx::query_as(sql).bind(id).fetch_optional(pool).await?))
    }
}
