//! Per-turn accounting: model calls, tool calls, tokens and outcome.

use super::{Result, Store, with_pool};

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
}

impl Store {
    /// Records a finished turn.
    pub async fn record_turn(&self, turn: &TurnRecord) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "INSERT INTO turns (session_id, started_at, finished_at, model_calls, tool_calls, prompt_tokens, completion_tokens, outcome) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)")
            .bind(&turn.session_id).bind(turn.started_at).bind(turn.finished_at)
            .bind(turn.model_calls).bind(turn.tool_calls).bind(turn.prompt_tokens)
            .bind(turn.completion_tokens).bind(&turn.outcome)
            .execute(pool).await?.rows_affected());
        Ok(())
    }

    /// A session's turns, oldest first.
    pub async fn turns(&self, session_id: &str) -> Result<Vec<TurnRecord>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT session_id, started_at, finished_at, model_calls, tool_calls, prompt_tokens, completion_tokens, outcome \
             FROM turns WHERE session_id = $1 ORDER BY id")
            .bind(session_id).fetch_all(pool).await?))
    }
}
