//! Per-turn accounting (model calls, tool calls, tokens and outcome), and
//! the one transaction that ends a turn: its answer, its record, the
//! session's activity, what it sends (the outbox) and its inbox event's
//! completion commit together or not at all.

use super::outbox::insert_outbound;
use super::sessions::insert_message;
use super::{NewMessage, Outbound, Result, Store, now_ms, with_pool};

/// One finished turn.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct TurnRecord {
    /// Session.
    pub session_id: String,
    /// Start (Unix ms).
    pub started_at: i64,
    /// End (Unix ms).
    pub finished_at: i64,
    /// Model calls made.
    pub model_calls: i64,
    /// Tool calls run.
    pub tool_calls: i64,
    /// Input tokens over all calls.
    pub prompt_tokens: i64,
    /// Output tokens over all calls.
    pub completion_tokens: i64,
    /// How it ended.
    pub outcome: String,
    /// The model that answered (priced by `[budgets.prices]`).
    pub model: Option<String>,
    /// What it cost, in millionths of the prices' currency.
    pub cost_micros: i64,
    /// Whom it is counted against: platform, chat and user of its
    /// session, and the scheduled job it ran for.
    pub platform: Option<String>,
    /// Chat (for webhooks, the route).
    pub chat_id: Option<String>,
    /// User.
    pub user_id: Option<String>,
    /// Scheduled job.
    pub job_id: Option<String>,
}

/// Writes `$turn` through `$executor` (a pool or a transaction).
macro_rules! insert_turn {
    ($executor:expr, $turn:expr) => {{
        let turn: &TurnRecord = $turn;
        sqlx::query(
            "INSERT INTO turns (session_id, started_at, finished_at, model_calls, tool_calls, \
             prompt_tokens, completion_tokens, outcome, model, cost_micros, platform, chat_id, \
             user_id, job_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        )
        .bind(&turn.session_id)
        .bind(turn.started_at)
        .bind(turn.finished_at)
        .bind(turn.model_calls)
        .bind(turn.tool_calls)
        .bind(turn.prompt_tokens)
        .bind(turn.completion_tokens)
        .bind(crate::store::storable(&turn.outcome))
        .bind(turn.model.as_deref())
        .bind(turn.cost_micros)
        .bind(turn.platform.as_deref())
        .bind(turn.chat_id.as_deref())
        .bind(turn.user_id.as_deref())
        .bind(turn.job_id.as_deref())
        .execute($executor)
        .await?;
    }};
}

/// The writes a turn ends with.
#[derive(Debug, Clone)]
pub struct TurnCommit<'a> {
    /// Its session.
    pub session_id: &'a str,
    /// The turn's messages not stored yet, its final answer last.
    pub messages: Vec<NewMessage<'a>>,
    /// Its accounting.
    pub record: &'a TurnRecord,
}

/// The inbox event a turn answered, completed in the turn's transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The event.
    pub inbox_id: i64,
    /// Its session.
    pub session_key: String,
    /// How it ended (`final`, `error`, …).
    pub outcome: String,
    /// What to send for it, in order.
    pub outbox: Vec<Outbound>,
    /// The session's lease it is written under, with several replicas:
    /// nothing is written unless it is still held.
    pub fence: Option<super::Fence>,
}

/// What [`Store::commit_turn`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The id of the last message it appended.
    pub last_id: Option<i64>,
    /// The outbox rows, in order.
    pub outbox: Vec<i64>,
}

impl Store {
    /// Ends a turn in one transaction: appends its messages, records it,
    /// touches its session, writes the outbox rows and marks the event
    /// processed. `None` when the event was already processed (an earlier
    /// commit landed though its answer was lost): nothing is written then.
    pub async fn commit_turn(
        &self,
        turn: Option<&TurnCommit<'_>>,
        done: Option<&Completion>,
    ) -> Result<Option<Committed>> {
        let now = now_ms();
        with_pool!(self, pool => {
            let mut tx = super::begin_write!(self, pool);
            // The inbox row first: a second commit of the same event stops
            // here.
            if let Some(fence) = done.and_then(|d| d.fence.as_ref()) {
                super::leases::check_fence!(self, &mut *tx, fence, tx);
            }
            if let Some(done) = done {
                let completed = sqlx::query(
                    "UPDATE inbox SET processed_at = $1, outcome = $2 WHERE id = $3 AND processed_at IS NULL")
                    .bind(now).bind(done.outcome.as_str()).bind(done.inbox_id)
                    .execute(&mut *tx).await?.rows_affected();
                if completed == 0 {
                    tx.rollback().await?;
                    return Ok(None);
                }
            }
            let mut last_id = None;
            if let Some(turn) = turn {
                for message in &turn.messages {
                    last_id = Some(insert_message!(&mut *tx, turn.session_id, message));
                }
                insert_turn!(&mut *tx, turn.record);
                sqlx::query("UPDATE sessions SET last_active_at = $1 WHERE id = $2")
                    .bind(now).bind(turn.session_id).execute(&mut *tx).await?;
            }
            let mut outbox = Vec::new();
            if let Some(done) = done {
                for o in &done.outbox {
                    let key = done.session_key.as_str();
                    outbox.push(insert_outbound!(&mut *tx, done.inbox_id, key, o, now));
                }
            }
            tx.commit().await?;
            Ok(Some(Committed { last_id, outbox }))
        })
    }

    /// Records a finished turn.
    pub async fn record_turn(&self, turn: &TurnRecord) -> Result<()> {
        with_pool!(self, pool => insert_turn!(pool, turn));
        Ok(())
    }

    /// A session's turns, oldest first.
    pub async fn turns(&self, session_id: &str) -> Result<Vec<TurnRecord>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT session_id, started_at, finished_at, model_calls, tool_calls, prompt_tokens, \
             completion_tokens, outcome, model, cost_micros, platform, chat_id, user_id, job_id \
             FROM turns WHERE session_id = $1 ORDER BY id")
            .bind(session_id).fetch_all(pool).await?))
    }
}
