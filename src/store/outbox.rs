//! The outbox: what the sessions owe the chats. A turn's answer is
//! written here in the transaction that completes its inbox event (see
//! [`Store::commit_turn`]), then sent; what a crash left unsent is sent by
//! the next start instead of running the turn again.
//!
//! [`Store::commit_turn`]: super::Store::commit_turn

use super::{Backend, Result, Store, now_ms, storable, with_pool};

/// A message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outbound {
    /// Platform name.
    pub platform: String,
    /// Chat or channel (for the webhook receiver: the route).
    pub chat_id: String,
    /// Thread, topic or webhook entity.
    pub thread_id: Option<String>,
    /// The platform message it answers.
    pub reply_to: Option<String>,
    /// Markdown text.
    pub body: String,
    /// The inbox event whose streamed draft this message ends: it is
    /// written into the draft's messages rather than sent anew.
    pub draft_of: Option<i64>,
}

/// The messages an answer streaming into a chat shows in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Draft {
    /// The answer's messages, in order.
    pub messages: Vec<String>,
    /// The message saying which tool is at work.
    pub status: Option<String>,
    /// The key of the next message, while it is being sent (its id not
    /// stored yet): a crash there leaves it, and the platform may find
    /// the message by it.
    pub sending: Option<String>,
}

impl Draft {
    /// Whether it shows nothing.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty() && self.status.is_none() && self.sending.is_none()
    }
}

/// A stored message to send, with how sending it went.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct OutboxRow {
    /// Order of creation, which is sending order.
    pub id: i64,
    /// The inbox event it answers.
    pub inbox_id: Option<i64>,
    /// The session that sends it.
    pub session_key: String,
    /// Platform name.
    pub platform: String,
    /// Chat or channel.
    pub chat_id: String,
    /// Thread, topic or webhook entity.
    pub thread_id: Option<String>,
    /// The platform message it answers.
    pub reply_to: Option<String>,
    /// Markdown text.
    pub body: String,
    /// The inbox event whose streamed draft it ends.
    pub draft_of: Option<i64>,
    /// `pending`, `sent` or `failed` (gave up).
    pub status: String,
    /// Sending attempts made.
    pub attempts: i64,
    /// Error of the last failed attempt.
    pub last_error: Option<String>,
    /// Created (Unix ms).
    pub created_at: i64,
    /// Last change (Unix ms).
    pub updated_at: i64,
}

impl OutboxRow {
    /// The message, without its record.
    pub fn outbound(&self) -> Outbound {
        Outbound {
            platform: self.platform.clone(),
            chat_id: self.chat_id.clone(),
            thread_id: self.thread_id.clone(),
            reply_to: self.reply_to.clone(),
            body: self.body.clone(),
            draft_of: self.draft_of,
        }
    }
}

macro_rules! outbox_columns {
    () => {
        "id, inbox_id, session_key, platform, chat_id, thread_id, reply_to, body, draft_of, status, \
         attempts, last_error, created_at, updated_at"
    };
}

/// Pushes onto `$qb` (a query builder of either backend) the insert of
/// `$rows`, outbound messages for inbox event `$inbox_id` of session
/// `$key`, in order.
macro_rules! outbound_rows {
    ($qb:expr, $inbox_id:expr, $key:expr, $rows:expr, $now:expr) => {{
        let (inbox_id, key, now): (i64, &str, i64) = ($inbox_id, $key, $now);
        $qb.push(
            "INSERT INTO outbox (inbox_id, session_key, platform, chat_id, thread_id, reply_to, \
             body, draft_of, status, attempts, created_at, updated_at) ",
        );
        $qb.push_values($rows, |mut row, o: &$crate::store::Outbound| {
            row.push_bind(inbox_id)
                .push_bind(key)
                .push_bind(o.platform.as_str())
                .push_bind(o.chat_id.as_str())
                .push_bind(o.thread_id.as_deref())
                .push_bind(o.reply_to.as_deref())
                .push_bind($crate::store::storable(&o.body))
                .push_bind(o.draft_of)
                .push("'pending'")
                .push("0")
                .push_bind(now)
                .push_bind(now);
        });
    }};
}
pub(super) use outbound_rows;

impl Store {
    /// Records one sending attempt of row `id`: `error` is `None` when it
    /// went through; `last` gives up on a failure.
    pub async fn outbox_attempt(&self, id: i64, error: Option<&str>, last: bool) -> Result<()> {
        let status = match (error, last) {
            (None, _) => "sent",
            (Some(_), true) => "failed",
            (Some(_), false) => "pending",
        };
        let error = error.map(storable);
        with_pool!(self, pool => sqlx::query(
            "UPDATE outbox SET attempts = attempts + 1, status = $1, last_error = $2, updated_at = $3 \
             WHERE id = $4")
            .bind(status).bind(error.as_deref()).bind(now_ms()).bind(id)
            .execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Rows not yet sent, oldest first.
    pub async fn outbox_pending(&self, limit: i64) -> Result<Vec<OutboxRow>> {
        let sql = concat!(
            "SELECT ",
            outbox_columns!(),
            " FROM outbox WHERE status = 'pending' ORDER BY id LIMIT $1"
        );
        Ok(with_pool!(self, pool => sqlx::query_as(sql).bind(limit).fetch_all(pool).await?))
    }

    /// The rows of sessions `keys` not sent yet, in sending order (one
    /// statement on PostgreSQL).
    pub async fn outbox_pending_of(&self, keys: &[&str]) -> Result<Vec<OutboxRow>> {
        let sql = concat!(
            "SELECT ",
            outbox_columns!(),
            " FROM outbox WHERE status = 'pending' AND session_key = ANY($1) ORDER BY id"
        );
        let pool = match &self.backend {
            Backend::Postgres(pool) => {
                return Ok(sqlx::query_as(sql).bind(keys).fetch_all(pool).await?);
            }
            Backend::Sqlite(pool) => pool,
        };
        let sql = concat!(
            "SELECT ",
            outbox_columns!(),
            " FROM outbox WHERE status = 'pending' AND session_key = $1 ORDER BY id"
        );
        let mut rows = Vec::new();
        for key in keys {
            let of: Vec<OutboxRow> = sqlx::query_as(sql).bind(*key).fetch_all(pool).await?;
            rows.extend(of);
        }
        rows.sort_by_key(|r| r.id);
        Ok(rows)
    }

    /// What was written for inbox event `inbox_id`, in sending order.
    pub async fn outbox_for(&self, inbox_id: i64) -> Result<Vec<OutboxRow>> {
        let sql = concat!(
            "SELECT ",
            outbox_columns!(),
            " FROM outbox WHERE inbox_id = $1 ORDER BY id"
        );
        Ok(with_pool!(self, pool => sqlx::query_as(sql).bind(inbox_id).fetch_all(pool).await?))
    }

    /// What inbox event `inbox_id`'s streamed answer shows so far.
    pub async fn draft(&self, inbox_id: i64) -> Result<Draft> {
        let stored: Option<(String, Option<String>, Option<String>)> = with_pool!(self, pool => sqlx::query_as(
            "SELECT messages, status, sending FROM drafts WHERE inbox_id = $1")
            .bind(inbox_id).fetch_optional(pool).await?);
        Ok(
            stored.map_or_else(Draft::default, |(messages, status, sending)| Draft {
                messages: serde_json::from_str(&messages).unwrap_or_default(),
                status,
                sending,
            }),
        )
    }

    /// Records what inbox event `inbox_id`'s streamed answer shows.
    pub async fn set_draft(&self, inbox_id: i64, draft: &Draft) -> Result<()> {
        let messages = serde_json::to_string(&draft.messages).unwrap_or_else(|_| "[]".into());
        with_pool!(self, pool => sqlx::query(
            "INSERT INTO drafts (inbox_id, messages, status, sending, updated_at) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (inbox_id) DO UPDATE SET messages = excluded.messages, \
             status = excluded.status, sending = excluded.sending, updated_at = excluded.updated_at")
            .bind(inbox_id).bind(messages).bind(draft.status.as_deref())
            .bind(draft.sending.as_deref()).bind(now_ms())
            .execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Forgets inbox event `inbox_id`'s draft: its answer is in place.
    pub async fn drop_draft(&self, inbox_id: i64) -> Result<()> {
        with_pool!(self, pool => sqlx::query("DELETE FROM drafts WHERE inbox_id = $1")
            .bind(inbox_id).execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Row `id`.
    pub async fn outbox_row(&self, id: i64) -> Result<Option<OutboxRow>> {
        let sql = concat!("SELECT ", outbox_columns!(), " FROM outbox WHERE id = $1");
        Ok(with_pool!(self, pool => sqlx::query_as(sql).bind(id).fetch_optional(pool).await?))
    }

    /// The latest rows, newest first.
    pub async fn outbox(&self, limit: i64) -> Result<Vec<OutboxRow>> {
        let sql = concat!(
            "SELECT ",
            outbox_columns!(),
            " FROM outbox ORDER BY id DESC LIMIT $1"
        );
        Ok(with_pool!(self, pool => sqlx::query_as(sql).bind(limit).fetch_all(pool).await?))
    }
}
