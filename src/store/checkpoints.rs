//! SQLite's write-ahead log kept short off the request path: checkpoints
//! run in the background as the inbox's commits grow the log, not inside
//! a commit its senders wait for.

use super::{Backend, Result, Store, log_index};

/// Frames of SQLite's write-ahead log (4 KiB pages) after which a commit
/// checkpoints (`wal_autocheckpoint`): the safety net, should the
/// background checkpoints fall behind.
pub(super) const AUTOCHECKPOINT: u32 = 40_000;

/// Frames left uncopied after which the inbox asks for a checkpoint in
/// the background. At a burst's pace (tens of thousands of frames a
/// second) a commit crossing `AUTOCHECKPOINT` (10 000 then) copied them
/// all and synced two files while every sender of its batch waited: tens
/// of milliseconds, several times a second.
pub(super) const EARLY_CHECKPOINT: u32 = 2_500;

/// Frames in the log after which a background checkpoint ends with the
/// frames written meanwhile copied between two of the writers' turns, so
/// that the next commit starts the log over. Under a steady stream of
/// commits a checkpoint beside them never copies the last frame, and the
/// log would grow to `AUTOCHECKPOINT`.
const RESTART_AT: u32 = 32_000;

impl Store {
    /// SQLite: copies the write-ahead log into the database without
    /// blocking readers or writers (a passive checkpoint), and says whether
    /// every frame of the log got copied. PostgreSQL: does nothing. The
    /// daemon calls it every second.
    pub async fn checkpoint(&self) -> Result<bool> {
        let Backend::Sqlite(pool) = &self.backend else {
            return Ok(true);
        };
        passive(&mut *pool.acquire().await?).await
    }

    /// SQLite, once the log has [`grown`](Self::log_grown): a checkpoint
    /// beside the writers and, once the log is [`RESTART_AT`] frames long
    /// and that checkpoint left fewer than [`EARLY_CHECKPOINT`] uncopied,
    /// a second one between two of their turns (the inbox's commits wait
    /// for it as for another write): it copies those few, so the next
    /// commit starts the log over. A first checkpoint that could not copy
    /// (another one running, a reader on an old snapshot) leaves the
    /// second to a later round: copying the whole log between two writes
    /// is the stall this avoids.
    pub async fn checkpoint_grown(&self) -> Result<()> {
        let Backend::Sqlite(pool) = &self.backend else {
            return Ok(());
        };
        passive(&mut *pool.acquire().await?).await?;
        let close = (self.log_index.as_deref())
            .and_then(log_index::frames)
            .is_some_and(|f| f.written >= RESTART_AT && f.uncopied() < EARLY_CHECKPOINT);
        if !close {
            return Ok(());
        }
        // The writers take their turn before their connection: this takes
        // a connection only once it has its turn, and none is left waiting
        // for one while they wait for it. The inbox's is idle while
        // another holds the turn (kept by its committers, or in its pool);
        // the store's may all be busy with turns.
        let _turn = self.gate.first().await;
        let Backend::Sqlite(inbox) = &self.inbox_backend else {
            return Ok(());
        };
        let mut kept = super::inbox::lock_held(&self.inbox_held).await;
        if let Some(conn) = kept.as_deref_mut().and_then(Option::as_mut) {
            return passive(conn).await.map(drop);
        }
        match inbox.try_acquire() {
            Some(mut conn) => passive(&mut conn).await.map(drop),
            None => Ok(()),
        }
    }

    /// Returns once the inbox's commits have left [`EARLY_CHECKPOINT`]
    /// frames of SQLite's write-ahead log uncopied into the database: a
    /// [`checkpoint`](Self::checkpoint) now copies them beside the intake,
    /// instead of a commit copying them all as it crosses
    /// [`AUTOCHECKPOINT`] while its senders wait. Never for PostgreSQL.
    pub async fn log_grown(&self) {
        self.log_grown.notified().await;
    }
}

/// A passive checkpoint on `conn`: whether it copied every frame.
async fn passive(conn: &mut sqlx::SqliteConnection) -> Result<bool> {
    let (busy, frames, copied): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
        .fetch_one(conn)
        .await?;
    Ok(busy == 0 && frames == copied)
}
