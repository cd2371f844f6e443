//! Persistent memory notes, one list per user.

use super::{Result, Store, now_ms, returning, with_pool};

/// A stored note.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct MemoryNote {
    /// Note id.
    pub id: i64,
    /// Owner, `<platform>:<user id>`.
    pub user_key: String,
    /// Text.
    pub content: String,
    /// Creation time (Unix ms).
    pub created_at: i64,
    /// Last change (Unix ms).
    pub updated_at: i64,
}

/// A note's columns, in [`MemoryNote`]'s order.
macro_rules! note_columns {
    () => {
        "id, user_key, content, created_at, updated_at"
    };
}
pub(super) use note_columns;

impl Store {
    /// Adds a note for a user; returns its id.
    pub async fn add_note(&self, user_key: &str, content: &str) -> Result<i64> {
        let now = now_ms();
        Ok(returning!(&self.backend, ex => sqlx::query_scalar(
            "INSERT INTO memory_notes (user_key, content, created_at, updated_at) VALUES ($1, $2, $3, $3) RETURNING id")
            .bind(user_key).bind(super::storable(content)).bind(now).fetch_one(ex).await?))
    }

    /// Replaces the text of one of the user's notes. False if no such note.
    pub async fn update_note(&self, user_key: &str, id: i64, content: &str) -> Result<bool> {
        let n = with_pool!(self, pool => sqlx::query(
            "UPDATE memory_notes SET content = $1, updated_at = $2 WHERE id = $3 AND user_key = $4")
            .bind(super::storable(content)).bind(now_ms()).bind(id).bind(user_key).execute(pool).await?.rows_affected());
        Ok(n == 1)
    }

    /// Deletes one of the user's notes. False if no such note.
    pub async fn delete_note(&self, user_key: &str, id: i64) -> Result<bool> {
        let n = with_pool!(self, pool => sqlx::query("DELETE FROM memory_notes WHERE id = $1 AND user_key = $2")
            .bind(id).bind(user_key).execute(pool).await?.rows_affected());
        Ok(n == 1)
    }

    /// A user's notes, oldest first.
    pub async fn notes(&self, user_key: &str) -> Result<Vec<MemoryNote>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            concat!("SELECT ", note_columns!(), " FROM memory_notes WHERE user_key = $1 ORDER BY id"))
            .bind(user_key).fetch_all(pool).await?))
    }
}
