//! Background processes whose end a session is to be told of, kept until
//! it is told (so a restart can tell it).

use super::{Result, Store, storable, with_pool};

/// A process a session is waiting to hear the end of.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ProcessWatch {
    /// The `process` tool's id for it.
    pub id: String,
    /// The session to tell.
    pub session_key: String,
    /// What it runs.
    pub command: String,
    /// Its process id.
    pub pid: i64,
    /// Its start time in clock ticks since boot, which tells it apart from
    /// a later process given the same pid.
    pub pid_start: i64,
    /// When it was started (Unix ms).
    pub started_at: i64,
    /// The event whose turn started it, as the inbox keeps events (JSON):
    /// its reports are addressed as that event, to its chat and thread and
    /// from its sender. Empty when a replica from before watches kept it
    /// stored the watch: its reports are addressed as the session's
    /// latest message.
    pub origin: String,
}

impl Store {
    /// Keeps `watch` until [`Store::unwatch_process`].
    pub async fn watch_process(&self, watch: &ProcessWatch) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "INSERT INTO process_watches (id, session_key, command, pid, pid_start, started_at, host, origin) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING")
            .bind(&watch.id).bind(&watch.session_key).bind(storable(&watch.command))
            .bind(watch.pid).bind(watch.pid_start).bind(watch.started_at).bind(crate::cluster::host())
            .bind(&watch.origin)
            .execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Forgets the watch `id` (its end was told).
    pub async fn unwatch_process(&self, id: &str) -> Result<()> {
        with_pool!(self, pool => sqlx::query("DELETE FROM process_watches WHERE id = $1")
            .bind(id).execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Every watch of a process on this machine not told yet, oldest
    /// first (replicas on other machines watch theirs).
    pub async fn process_watches(&self) -> Result<Vec<ProcessWatch>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT id, session_key, command, pid, pid_start, started_at, origin \
             FROM process_watches WHERE host = $1 OR host = '' ORDER BY started_at, id")
            .bind(crate::cluster::host()).fetch_all(pool).await?))
    }
}
