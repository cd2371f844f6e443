//! Per-turn accounting (model calls, tool calls, tokens and outcome), and
//! the one transaction that ends a turn: its answer, its record, the
//! session's activity, what it sends (the outbox) and its inbox event's
//! completion commit together or not at all.

use super::outbox::outbound_rows;
use super::sessions::message_rows;
use super::{Backend, NewMessage, Outbound, Result, Store, StoreError, now_ms, with_pool};

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
    /// Of the input tokens, those read from the provider's prompt cache.
    pub cache_read_tokens: i64,
    /// Of the input tokens, those written to the provider's prompt cache.
    pub cache_write_tokens: i64,
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

/// Pushes onto `$qb` (a query builder of either backend) the insert of
/// `$turn`.
macro_rules! turn_row {
    ($qb:expr, $turn:expr) => {{
        $qb.push(
            "INSERT INTO turns (session_id, started_at, finished_at, model_calls, tool_calls, \
             prompt_tokens, completion_tokens, cache_read_tokens, cache_write_tokens, outcome, \
             model, cost_micros, platform, chat_id, user_id, job_id) ",
        );
        $qb.push_values(std::iter::once($turn), |mut row, turn: &TurnRecord| {
            row.push_bind(turn.session_id.as_str())
                .push_bind(turn.started_at)
                .push_bind(turn.finished_at)
                .push_bind(turn.model_calls)
                .push_bind(turn.tool_calls)
                .push_bind(turn.prompt_tokens)
                .push_bind(turn.completion_tokens)
                .push_bind(turn.cache_read_tokens)
                .push_bind(turn.cache_write_tokens)
                .push_bind(crate::store::storable(&turn.outcome))
                .push_bind(turn.model.as_deref())
                .push_bind(turn.cost_micros)
                .push_bind(turn.platform.as_deref())
                .push_bind(turn.chat_id.as_deref())
                .push_bind(turn.user_id.as_deref())
                .push_bind(turn.job_id.as_deref());
        });
    }};
}

/// Pushes onto `$qb` the completion of inbox event `$done` (unless it was
/// completed already).
macro_rules! complete_event {
    ($qb:expr, $done:expr, $now:expr) => {{
        let done: &Completion = $done;
        $qb.push("UPDATE inbox SET processed_at = ")
            .push_bind($now)
            .push(", outcome = ")
            .push_bind(done.outcome.as_str())
            .push(" WHERE id = ")
            .push_bind(done.inbox_id)
            .push(" AND processed_at IS NULL");
    }};
}

/// Pushes onto `$qb` the completion, as steered into another's turn, of
/// the events `$done` took in (its `steered`, not empty).
macro_rules! complete_steered {
    ($qb:expr, $done:expr, $now:expr) => {{
        let done: &Completion = $done;
        $qb.push("UPDATE inbox SET processed_at = ")
            .push_bind($now)
            .push(", outcome = 'steered' WHERE processed_at IS NULL AND id IN (");
        let mut ids = $qb.separated(", ");
        for id in &done.steered {
            ids.push_bind(*id);
        }
        $qb.push(")");
    }};
}

/// Pushes onto `$qb` the activity of session `$id` at `$now`.
macro_rules! touch_session {
    ($qb:expr, $id:expr, $now:expr) => {{
        let id: &str = $id;
        $qb.push("UPDATE sessions SET last_active_at = ")
            .push_bind($now)
            .push(" WHERE id = ")
            .push_bind(id);
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
    /// Whether it held the budgets (`budgets::Meter`): the hold goes with
    /// the record that now counts its calls.
    pub held: bool,
}

/// Pushes onto `$qb` the removal of session `$id`'s budget hold.
macro_rules! release_hold {
    ($qb:expr, $id:expr) => {{
        let id: &str = $id;
        $qb.push("DELETE FROM budget_holds WHERE session_id = ")
            .push_bind(id);
    }};
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
    /// Later events of the session the turn took in (steered): completed
    /// with it, as `steered`, unless completed already.
    pub steered: Vec<i64>,
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
    /// One function on purpose: the transaction's statements read in the
    /// order they run.
    pub async fn commit_turn(
        &self,
        turn: Option<&TurnCommit<'_>>,
        done: Option<&Completion>,
    ) -> Result<Option<Committed>> {
        let now = now_ms();
        let fence = done.and_then(|d| d.fence.as_ref());
        match &self.backend {
            Backend::Sqlite(pool) => {
                // One trip: the whole transaction, its checks statements
                // that stop it (before its `COMMIT`) when they fail.
                let mut qb = super::SqliteWrite::batch();
                let mut n = 0;
                let mut next = |qb: &mut sqlx::QueryBuilder<sqlx::Sqlite>| {
                    qb.push("; ");
                    n += 1;
                    n
                };
                let fenced = fence.map(|fence| {
                    let at = next(&mut qb);
                    super::sqlite_require(&mut qb, |qb| {
                        qb.push("EXISTS (");
                        super::leases::fence_row(qb, fence);
                        qb.push(")");
                    });
                    (at, fence)
                });
                let completed = done.map(|done| {
                    next(&mut qb);
                    complete_event!(qb, done, now);
                    let at = next(&mut qb);
                    super::sqlite_require(&mut qb, |qb| {
                        qb.push("changes() > 0");
                    });
                    at
                });
                if let Some(done) = done.filter(|d| !d.steered.is_empty()) {
                    next(&mut qb);
                    complete_steered!(qb, done, now);
                }
                let appended = turn.filter(|t| !t.messages.is_empty()).map(|turn| {
                    let at = next(&mut qb);
                    message_rows!(qb, turn.session_id, &turn.messages);
                    at
                });
                if let Some(turn) = turn {
                    next(&mut qb);
                    turn_row!(qb, turn.record);
                    next(&mut qb);
                    touch_session!(qb, turn.session_id, now);
                    if turn.held {
                        next(&mut qb);
                        release_hold!(qb, turn.session_id);
                    }
                }
                let queued = done.filter(|d| !d.outbox.is_empty()).map(|done| {
                    let at = next(&mut qb);
                    outbound_rows!(qb, done.inbox_id, &done.session_key, &done.outbox, now);
                    at
                });
                next(&mut qb);
                qb.push("COMMIT");
                let (write, steps) =
                    super::SqliteWrite::run((pool, &self.gate), qb.build(), "commit_turn").await?;
                if let Some((at, fence)) = fenced
                    && steps.refused_at(at)
                {
                    write.end(false).await?;
                    return Err(StoreError::Fenced {
                        lease: fence.name.clone(),
                    });
                }
                if completed.is_some_and(|at| steps.refused_at(at)) {
                    write.end(false).await?;
                    return Ok(None);
                }
                let steps = write.committed(steps)?;
                let last_id = appended
                    .map(|at| steps.get(at).map(|s| s.result.last_insert_rowid()))
                    .transpose()?;
                let outbox = match (queued, done) {
                    (Some(at), Some(done)) => {
                        // One statement's rows: consecutive ids ending at
                        // the last insert rowid (the write lock is held).
                        let last = steps.get(at)?.result.last_insert_rowid();
                        let first = last - done.outbox.len() as i64 + 1;
                        (first..=last).collect()
                    }
                    _ => Vec::new(),
                };
                Ok(Some(Committed { last_id, outbox }))
            }
            Backend::Postgres(pool) => {
                let mut tx = Box::pin(pool.begin()).await?;
                if let Some(fence) = fence {
                    super::leases::check_fence!(tx, fence);
                }
                // The inbox row first: a second commit of the same event
                // stops here.
                if let Some(done) = done {
                    let mut qb = sqlx::QueryBuilder::new("");
                    complete_event!(qb, done, now);
                    if qb.build().execute(&mut *tx).await?.rows_affected() == 0 {
                        tx.rollback().await?;
                        return Ok(None);
                    }
                    if !done.steered.is_empty() {
                        let mut qb = sqlx::QueryBuilder::new("");
                        complete_steered!(qb, done, now);
                        qb.build().execute(&mut *tx).await?;
                    }
                }
                let mut last_id = None;
                if let Some(turn) = turn {
                    if !turn.messages.is_empty() {
                        let mut qb = sqlx::QueryBuilder::new("");
                        message_rows!(qb, turn.session_id, &turn.messages);
                        qb.push(" RETURNING id");
                        let ids: Vec<i64> = qb.build_query_scalar().fetch_all(&mut *tx).await?;
                        last_id = ids.into_iter().max();
                    }
                    let mut qb = sqlx::QueryBuilder::new("");
                    turn_row!(qb, turn.record);
                    qb.build().execute(&mut *tx).await?;
                    let mut qb = sqlx::QueryBuilder::new("");
                    touch_session!(qb, turn.session_id, now);
                    qb.build().execute(&mut *tx).await?;
                    if turn.held {
                        let mut qb = sqlx::QueryBuilder::new("");
                        release_hold!(qb, turn.session_id);
                        qb.build().execute(&mut *tx).await?;
                    }
                }
                let mut outbox = Vec::new();
                if let Some(done) = done {
                    for o in &done.outbox {
                        let mut qb = sqlx::QueryBuilder::new("");
                        outbound_rows!(
                            qb,
                            done.inbox_id,
                            &done.session_key,
                            std::iter::once(o),
                            now
                        );
                        qb.push(" RETURNING id");
                        outbox.push(qb.build_query_scalar().fetch_one(&mut *tx).await?);
                    }
                }
                tx.commit().await?;
                Ok(Some(Committed { last_id, outbox }))
            }
        }
    }

    /// Records a finished turn.
    pub async fn record_turn(&self, turn: &TurnRecord) -> Result<()> {
        with_pool!(self, pool => {
            let mut qb = sqlx::QueryBuilder::new("");
            turn_row!(qb, turn);
            qb.build().execute(pool).await?;
        });
        Ok(())
    }

    /// A session's turns, oldest first.
    pub async fn turns(&self, session_id: &str) -> Result<Vec<TurnRecord>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT session_id, started_at, finished_at, model_calls, tool_calls, prompt_tokens, \
             completion_tokens, cache_read_tokens, cache_write_tokens, outcome, model, cost_micros, platform, chat_id, user_id, job_id \
             FROM turns WHERE session_id = $1 ORDER BY id")
            .bind(session_id).fetch_all(pool).await?))
    }
}
