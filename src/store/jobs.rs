//! A job's start: its inbox event's attempt counted (unless processed
//! already, or behind an earlier event of its session) with what its turn
//! reads first, in one trip to storage.

use super::{Backend, Result, Store, now_ms};

/// [`Store::start_job`]'s first eight parameters: the event, the new
/// session's id, what the session is made of (all `NULL` when `open` is
/// `None`) and the time.
macro_rules! start_binds {
    ($query:expr, $id:expr, $new_id:expr, $open:expr) => {
        $query
            .bind($id)
            .bind($new_id)
            .bind($open.map(|n| n.key))
            .bind($open.map(|n| n.platform))
            .bind($open.map(|n| n.chat_id))
            .bind($open.and_then(|n| n.thread_id))
            .bind($open.and_then(|n| n.user_id))
            .bind(now_ms())
    };
}

/// [`Store::start_job`]'s condition that no earlier event of session
/// `first_of` (parameter `$p`) waits; `NULL` matches nothing.
macro_rules! first_waiting {
    ($p:literal) => {
        concat!(
            "AND NOT EXISTS (SELECT 1 FROM inbox earlier WHERE earlier.session_key = ",
            $p,
            " AND earlier.processed_at IS NULL AND earlier.id < $1)"
        )
    };
}

/// What [`Store::start_job`] reads besides starting the event.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobReads<'a> {
    /// The session to read: the open one of its key, else this one,
    /// created.
    pub open: Option<&'a super::NewSession<'a>>,
    /// Whose memory notes to read (`<platform>:<user id>`).
    pub notes_of: Option<&'a str>,
    /// The event's session key, when it starts only as its session's
    /// first event waiting (several replicas: an earlier one, stored by
    /// another replica, may not have reached this one's worker yet).
    pub first_of: Option<&'a str>,
}

/// What [`Store::start_job`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// The event was started; what was read with it.
    Now(Box<JobStart>),
    /// It was processed already (by an earlier job for it, here or on
    /// another replica): nothing written.
    Done,
    /// An earlier event of its session waits (`JobReads::first_of`):
    /// nothing written.
    Behind,
}

/// What [`Store::start_job`] read; `None` where it was not asked to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobStart {
    /// The open session, and whether this start created it (it holds
    /// nothing yet).
    pub session: Option<(super::Session, bool)>,
    /// The owner's notes, oldest first.
    pub notes: Option<Vec<super::MemoryNote>>,
}

impl Store {
    /// Starts processing event `id`: counts the attempt, unless the event
    /// was processed already (by an earlier job for it, here or on another
    /// replica) or an earlier event of its session waits (`first_of`),
    /// which write nothing; and reads what its turn needs first (`reads`).
    /// On SQLite all of it is one trip; on PostgreSQL the start, the
    /// inbox's order and the session are one statement.
    pub async fn start_job(&self, id: i64, reads: JobReads<'_>) -> Result<Started> {
        use sqlx::{FromRow, Row};
        match &self.backend {
            Backend::Sqlite(pool) => {
                // One transaction, one trip. A parameter not bound (`None`)
                // matches nothing; the insert runs only if the event was
                // started (`changes()` is the update's) and a session was
                // asked for.
                let sql = concat!(
                    "BEGIN IMMEDIATE; ",
                    "UPDATE inbox SET attempts = attempts + 1 WHERE id = $1 AND processed_at IS NULL ",
                    first_waiting!("$10"),
                    "; ",
                    super::sessions::insert_session!(),
                    "SELECT $2, $3, $4, $5, $6, $7, $8, $8 WHERE changes() = 1 AND $3 IS NOT NULL ",
                    "ON CONFLICT DO NOTHING; ",
                    "SELECT ",
                    super::sessions::session_columns!(),
                    " FROM sessions WHERE key = $3 AND ended_at IS NULL; ",
                    "SELECT ",
                    super::memory::note_columns!(),
                    " FROM memory_notes WHERE user_key = $9 ORDER BY id; ",
                    "SELECT 1 FROM inbox WHERE id = $1 AND processed_at IS NULL; ",
                    "COMMIT"
                );
                let new_id = reads.open.map(|_| super::new_id());
                let open = reads.open;
                let query = start_binds!(sqlx::query(sql), id, new_id.as_deref(), open)
                    .bind(reads.notes_of)
                    .bind(reads.first_of);
                let steps =
                    super::SqliteWrite::whole((pool, &self.gate), query, "start_job").await?;
                if steps.get(1)?.result.rows_affected() == 0 {
                    return Ok(match steps.get(5)?.rows.is_empty() {
                        true => Started::Done,
                        false => Started::Behind,
                    });
                }
                let session = match open {
                    Some(_) => {
                        let row = steps.get(3)?.rows.first().ok_or_else(|| {
                            super::StoreError::Corrupt {
                                what: "sessions",
                                reason: "no session open after its insert".into(),
                            }
                        })?;
                        let session = super::Session::from_row(row)?;
                        let fresh = new_id.as_deref() == Some(session.id.as_str());
                        Some((session, fresh))
                    }
                    None => None,
                };
                let notes = match reads.notes_of {
                    Some(_) => Some(
                        steps
                            .get(4)?
                            .rows
                            .iter()
                            .map(super::MemoryNote::from_row)
                            .collect::<std::result::Result<_, _>>()?,
                    ),
                    None => None,
                };
                Ok(Started::Now(Box::new(JobStart { session, notes })))
            }
            Backend::Postgres(pool) => {
                // One statement, one commit: the attempt counted, the
                // session created if none is open (only if the event was
                // started), and the open one read. A row exactly; its
                // session columns are NULL when none was asked for, or when
                // another writer opened it after this statement began.
                let sql = concat!(
                    "WITH started AS (",
                    "UPDATE inbox SET attempts = attempts + 1 WHERE id = $1 AND processed_at IS NULL ",
                    first_waiting!("$9"),
                    " RETURNING id), made AS (",
                    super::sessions::insert_session!(),
                    "SELECT $2, $3, $4, $5, $6, $7, $8, $8 WHERE EXISTS (SELECT 1 FROM started) ",
                    "AND $3 IS NOT NULL ON CONFLICT DO NOTHING RETURNING ",
                    super::sessions::session_columns!(),
                    ") SELECT (SELECT count(*) FROM started) AS started, ",
                    "($9::text IS NOT NULL AND EXISTS (SELECT 1 FROM inbox earlier ",
                    "WHERE earlier.session_key = $9 AND earlier.processed_at IS NULL ",
                    "AND earlier.id < $1)) AS behind, ",
                    "open.* FROM (SELECT 1) one ",
                    "LEFT JOIN (SELECT true AS fresh, ",
                    super::sessions::session_columns!(),
                    " FROM made UNION ALL SELECT false, ",
                    super::sessions::session_columns!(),
                    " FROM sessions WHERE key = $3 AND ended_at IS NULL ",
                    "AND EXISTS (SELECT 1 FROM started) AND NOT EXISTS (SELECT 1 FROM made)) open ON true"
                );
                let open = reads.open;
                let row = start_binds!(sqlx::query(sql), id, open.map(|_| super::new_id()), open)
                    .bind(reads.first_of)
                    .fetch_one(pool)
                    .await?;
                if row.try_get::<i64, _>("started")? == 0 {
                    return Ok(match row.try_get::<bool, _>("behind")? {
                        true => Started::Behind,
                        false => Started::Done,
                    });
                }
                let session = match open {
                    Some(new) => Some(match row.try_get::<Option<bool>, _>("fresh")? {
                        Some(fresh) => (super::Session::from_row(&row)?, fresh),
                        None => self.create_session(new).await?,
                    }),
                    None => None,
                };
                let notes = match reads.notes_of {
                    Some(owner) => Some(self.notes(owner).await?),
                    None => None,
                };
                Ok(Started::Now(Box::new(JobStart { session, notes })))
            }
        }
    }
}
