//! The durable inbox: inbound events committed before the platform is
//! acknowledged, deduplicated by platform event id, replayed after a crash.

use tokio::sync::{mpsc, oneshot};

use keys::Keying;
pub(super) use keys::{Keys, of_file as keys_of_file};
pub(super) use sqlite::{Held, lock_held};
use sqlite::{key_held, on_held, sqlite_id_of, sqlite_insert};

use super::{Backend, Result, Store, now_ms, storable, with_pool};

/// The start of an insert into the inbox.
macro_rules! insert_into {
    () => {
        "INSERT INTO inbox (platform, dedupe_key, session_key, payload, received_at) "
    };
}

// After `insert_into!`, which `sqlite` uses.
mod keys;
mod sqlite;

/// Most events committed in one transaction.
const BATCH: usize = 256;

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

/// An event waiting for the group commit.
pub(super) struct Queued {
    platform: String,
    dedupe_key: String,
    session_key: String,
    payload: String,
    received_at: i64,
    reply: oneshot::Sender<Result<InboxInsert>>,
}

/// How many old deliveries one statement of
/// [`Store::inbox_forget_deliveries`] deletes.
const FORGET_BATCH: i64 = 1000;

/// Group commit: concurrent inserts share one transaction, so a burst of
/// deliveries costs one commit instead of one each (and SQLite writers do
/// not queue on its single write lock).
pub(super) type InboxQueue = mpsc::Sender<Queued>;

/// One multi-row statement per batch (one round trip to the database's
/// worker instead of one per event); rows that hit an existing dedupe key
/// are duplicates, as is a repeat within the batch.
async fn insert_batch(
    backend: &Backend,
    (held, keys): (&Held, &Keys),
    batch: &[Queued],
) -> Result<Vec<InboxInsert>> {
    let rows: Vec<(i64, String)> = match backend {
        Backend::Sqlite(pool) => {
            on_held(pool, held, async |conn| {
                sqlite_insert(conn, keys, batch).await
            })
            .await?
        }
        Backend::Postgres(pool) => {
            // Columns as arrays: one statement whatever the batch's size,
            // prepared once per connection and planned as one.
            let column = |f: fn(&Queued) -> &str| batch.iter().map(f).collect::<Vec<_>>();
            let received: Vec<i64> = batch.iter().map(|q| q.received_at).collect();
            sqlx::query_as(concat!(
                insert_into!(),
                "SELECT p, d, s, b, r FROM UNNEST($1::text[], $2::text[], $3::text[], \
                 $4::text[], $5::int8[]) WITH ORDINALITY AS t (p, d, s, b, r, n) ORDER BY n \
                 ON CONFLICT (dedupe_key) DO NOTHING RETURNING id, dedupe_key"
            ))
            .bind(column(|q| &q.platform))
            .bind(column(|q| &q.dedupe_key))
            .bind(column(|q| &q.session_key))
            .bind(column(|q| &q.payload))
            .bind(received)
            .fetch_all(pool)
            .await?
        }
    };
    let mut ids: std::collections::HashMap<String, i64> =
        rows.into_iter().map(|(id, key)| (key, id)).collect();
    Ok(batch
        .iter()
        .map(|q| {
            ids.remove(&q.dedupe_key)
                .map_or(InboxInsert::Duplicate, InboxInsert::Inserted)
        })
        .collect())
}

/// Committers taking turns: while one batch is written, the next one is
/// gathered and waits at the door, so the writer never waits for a batch.
pub(super) const COMMITTERS: usize = 2;

/// SQLite: the write-ahead log's index, and whom to wake when a batch
/// leaves [`EARLY_CHECKPOINT`](super::checkpoints::EARLY_CHECKPOINT) of its frames
/// uncopied ([`Store::log_grown`]).
pub(super) type LogWatch = Option<(
    std::sync::Arc<std::path::Path>,
    std::sync::Arc<tokio::sync::Notify>,
)>;

/// Takes what is queued, commits it together, answers each caller. A
/// failed batch is retried one event at a time, so one bad event fails
/// alone. Ends when every store handle is gone.
pub(super) fn start_group_commit(
    backend: Backend,
    gate: std::sync::Arc<super::WriteGate>,
    log: LogWatch,
    (held, keys): (Held, Keys),
) -> InboxQueue {
    let (tx, rx) = mpsc::channel::<Queued>(4 * BATCH);
    let rx = std::sync::Arc::new(tokio::sync::Mutex::new(rx));
    for _ in 0..COMMITTERS {
        let (backend, rx, gate, log, held, keys) = (
            backend.clone(),
            rx.clone(),
            gate.clone(),
            log.clone(),
            held.clone(),
            keys.clone(),
        );
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(BATCH);
            // SQLite: no indexing tried before this (after a failure).
            let mut pause = tokio::time::Instant::now();
            loop {
                let turn = {
                    let mut rx = rx.lock().await;
                    let unkeyed = match &backend {
                        Backend::Sqlite(pool) => {
                            !pool.is_closed()
                                && tokio::time::Instant::now() >= pause
                                && keys.held() > 0
                        }
                        Backend::Postgres(_) => false,
                    };
                    let waited = if unkeyed {
                        let next = rx.recv_many(&mut batch, BATCH);
                        tokio::time::timeout(keys::QUIET, next).await.ok()
                    } else {
                        Some(rx.recv_many(&mut batch, BATCH).await)
                    };
                    match waited {
                        Some(0) => return,
                        Some(_) => {}
                        None => {
                            if let Backend::Sqlite(pool) = &backend {
                                let _turn = gate.first().await;
                                if !key_held(pool, (&held, &keys), Keying::Quiet).await {
                                    pause = tokio::time::Instant::now() + keys::AFTER_FAILURE;
                                }
                            }
                            continue;
                        }
                    }
                    match backend {
                        Backend::Sqlite(_) => {
                            Some(gather_until_turn(&mut rx, &mut batch, &gate).await)
                        }
                        Backend::Postgres(_) => {
                            gather_on_their_way(&mut rx, &mut batch).await;
                            None
                        }
                    }
                };
                let stored = batch.len();
                commit(&backend, (&held, &keys), &mut batch).await;
                if let Backend::Sqlite(pool) = &backend
                    && tokio::time::Instant::now() >= pause
                    && keys.held() >= keys::MOST
                    && !key_held(pool, (&held, &keys), Keying::Busy { stored }).await
                {
                    pause = tokio::time::Instant::now() + keys::AFTER_FAILURE;
                }
                drop(turn);
                if let Some((index, grown)) = &log
                    && super::log_index::frames(index)
                        .is_some_and(|f| f.uncopied() >= super::checkpoints::EARLY_CHECKPOINT)
                {
                    grown.notify_one();
                }
            }
        });
    }
    tx
}

/// SQLite writes one transaction at a time, the inbox's first
/// ([`WriteGate`](super::WriteGate)): `batch` takes in what arrives until
/// the writer is free, and is written at once. A batch closed earlier (after
/// a few yields, as on PostgreSQL) took in every sender of the one being
/// written, which then waited together while this one was written, and the
/// writer and the handlers took turns instead of working side by side.
async fn gather_until_turn(
    rx: &mut mpsc::Receiver<Queued>,
    batch: &mut Vec<Queued>,
    gate: &super::WriteGate,
) -> super::WriteTurn {
    let turn = gate.first();
    tokio::pin!(turn);
    loop {
        let room = BATCH - batch.len();
        tokio::select! {
            biased;
            turn = &mut turn => {
                take_queued(rx, batch);
                return turn;
            }
            n = rx.recv_many(batch, room), if room > 0 => {
                if n == 0 {
                    return turn.await;
                }
            }
        }
    }
}

/// PostgreSQL writes batches side by side, one per committer: `batch`
/// takes in the requests already on their way, then is written.
async fn gather_on_their_way(rx: &mut mpsc::Receiver<Queued>, batch: &mut Vec<Queued>) {
    for _ in 0..4 {
        tokio::task::yield_now().await;
        take_queued(rx, batch);
    }
}

/// Adds to `batch` what is queued now, up to [`BATCH`].
fn take_queued(rx: &mut mpsc::Receiver<Queued>, batch: &mut Vec<Queued>) {
    while batch.len() < BATCH {
        match rx.try_recv() {
            Ok(q) => batch.push(q),
            Err(_) => break,
        }
    }
}

/// Commits `batch` and answers its callers, leaving it empty.
async fn commit(backend: &Backend, writes: (&Held, &Keys), batch: &mut Vec<Queued>) {
    match insert_batch(backend, writes, batch).await {
        Ok(results) => {
            for (q, r) in batch.drain(..).zip(results) {
                let _ = q.reply.send(Ok(r));
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, events = batch.len(), "inbox batch failed; committing one by one");
            for q in batch.drain(..) {
                let one = std::slice::from_ref(&q);
                let r = insert_batch(backend, writes, one).await.map(|r| r[0]);
                let _ = q.reply.send(r);
            }
        }
    }
}

impl Store {
    /// Commits an event unless one with the same dedupe key exists. Returns
    /// once it is durable; concurrent calls share a transaction.
    pub async fn inbox_insert(&self, event: &NewInboxEvent<'_>) -> Result<InboxInsert> {
        let queue = self.inbox_queue.get_or_init(|| {
            let log = (self.log_index.clone()).map(|index| (index, self.log_grown.clone()));
            start_group_commit(
                self.inbox_backend.clone(),
                self.gate.clone(),
                log,
                (self.inbox_held.clone(), self.inbox_keys.clone()),
            )
        });
        let (reply, answer) = oneshot::channel();
        let queued = Queued {
            platform: event.platform.to_string(),
            dedupe_key: event.dedupe_key.to_string(),
            session_key: event.session_key.to_string(),
            payload: event.payload.to_string(),
            received_at: now_ms(),
            reply,
        };
        queue
            .send(queued)
            .await
            .map_err(|_| super::StoreError::Unavailable(sqlx::Error::PoolClosed))?;
        answer
            .await
            .map_err(|_| super::StoreError::Unavailable(sqlx::Error::PoolClosed))?
    }

    /// Claims the run of a chat command carried by `event` (its dedupe key
    /// is the message's), for every replica and across restarts: true when
    /// this call claimed it, false when it was claimed before (a platform's
    /// redelivery, Discord's catch-up after a restart, Slack's second event
    /// for one message on another replica). Kept as an inbox event already
    /// processed, which no worker takes.
    pub async fn inbox_claim_command(&self, event: &NewInboxEvent<'_>) -> Result<bool> {
        let pool = match &self.backend {
            Backend::Postgres(pool) => {
                let n = sqlx::query(concat!(
                    "INSERT INTO inbox (platform, dedupe_key, session_key, payload, received_at, processed_at, outcome) ",
                    "VALUES ($1, $2, $3, $4, $5, $5, 'command') ON CONFLICT (dedupe_key) DO NOTHING"
                ))
                .bind(event.platform)
                .bind(event.dedupe_key)
                .bind(event.session_key)
                .bind(event.payload)
                .bind(now_ms())
                .execute(pool)
                .await?
                .rows_affected();
                return Ok(n == 1);
            }
            Backend::Sqlite(pool) => pool,
        };
        let mut conn = Box::pin(pool.acquire()).await?;
        let mut tail = keys::lock(&self.inbox_keys, &mut conn).await?;
        if tail.get(event.dedupe_key).is_some() {
            return Ok(false);
        }
        tail.writing();
        let done = sqlx::query(
            "INSERT INTO inbox (platform, dedupe_key, session_key, payload, received_at, processed_at, outcome) \
             SELECT $1, $2, $3, $4, $5, $5, 'command' \
             WHERE NOT EXISTS (SELECT 1 FROM inbox_keys WHERE dedupe_key = $2) \
             AND NOT EXISTS (SELECT 1 FROM inbox WHERE id > (SELECT upto FROM inbox_keyed) AND dedupe_key = $2)",
        )
        .bind(event.platform)
        .bind(event.dedupe_key)
        .bind(event.session_key)
        .bind(event.payload)
        .bind(now_ms())
        .execute(&mut *conn)
        .await?;
        let claimed = done.rows_affected() == 1;
        if claimed {
            tail.stored([(done.last_insert_rowid(), event.dedupe_key.to_string())]);
        }
        tail.written(&mut conn).await;
        Ok(claimed)
    }

    /// Gives up the claim of a command that failed before it ran
    /// ([`inbox_claim_command`](Self::inbox_claim_command)): its next
    /// delivery runs it.
    pub async fn inbox_release_command(&self, dedupe_key: &str) -> Result<()> {
        let pool = match &self.backend {
            Backend::Postgres(pool) => {
                sqlx::query("DELETE FROM inbox WHERE dedupe_key = $1 AND outcome = 'command'")
                    .bind(dedupe_key)
                    .execute(pool)
                    .await?;
                return Ok(());
            }
            Backend::Sqlite(pool) => pool,
        };
        let mut conn = Box::pin(pool.acquire()).await?;
        let mut tail = keys::lock(&self.inbox_keys, &mut conn).await?;
        let Some(id) = sqlite_id_of(&mut conn, &tail, dedupe_key).await? else {
            return Ok(());
        };
        tail.writing();
        let gone = sqlx::query("DELETE FROM inbox WHERE id = $1 AND outcome = 'command'")
            .bind(id)
            .execute(&mut *conn)
            .await?
            .rows_affected();
        if gone == 1 {
            tail.forget(dedupe_key);
        }
        tail.written(&mut conn).await;
        Ok(())
    }

    /// Indexes the keys of every event stored so far (SQLite keeps the
    /// newest in memory until the intake is quiet, see `inbox/keys.rs`).
    pub async fn inbox_key_all(&self) -> Result<()> {
        if let Backend::Sqlite(pool) = &self.backend {
            let mut conn = Box::pin(pool.acquire()).await?;
            let mut tail = keys::lock(&self.inbox_keys, &mut conn).await?;
            tail.key_all(&mut conn).await?;
        }
        Ok(())
    }

    /// The id of the event stored under `dedupe_key`.
    pub(super) async fn inbox_id_of(&self, dedupe_key: &str) -> Result<Option<i64>> {
        match &self.backend {
            Backend::Postgres(pool) => Ok(sqlx::query_scalar(
                "SELECT id FROM inbox WHERE dedupe_key = $1",
            )
            .bind(dedupe_key)
            .fetch_optional(pool)
            .await?),
            Backend::Sqlite(pool) => {
                let mut conn = Box::pin(pool.acquire()).await?;
                let tail = keys::lock(&self.inbox_keys, &mut conn).await?;
                sqlite_id_of(&mut conn, &tail, dedupe_key).await
            }
        }
    }

    /// Marks an event processed. Returns false if it already was.
    pub async fn inbox_mark_processed(&self, id: i64, outcome: &str) -> Result<bool> {
        let n = with_pool!(self, pool => sqlx::query(
            "UPDATE inbox SET processed_at = $1, outcome = $2 WHERE id = $3 AND processed_at IS NULL")
            .bind(now_ms()).bind(outcome).bind(id).execute(pool).await?.rows_affected());
        Ok(n == 1)
    }

    /// Forgets the processed webhook deliveries received before `before`
    /// (ms since the epoch): the end of their replay window, after which
    /// the same body is a new delivery. Unprocessed ones stay whatever
    /// their age, and so do the reports posted into webhook sessions
    /// (`webhook:process:…`): a watch not cleared when it was told reports
    /// again after a restart, and its report's key makes that a duplicate.
    /// Deletes in batches of [`FORGET_BATCH`], each its own short write,
    /// so that a first sweep over months of deliveries does not hold the
    /// write lock for long. Returns how many went.
    pub async fn inbox_forget_deliveries(&self, before: i64) -> Result<u64> {
        // Only indexed keys leave with their events.
        self.inbox_key_all().await?;
        // The platform is written out, not bound: the partial index
        // `inbox_webhook_age` serves only a literal match.
        const FORGET: &str = "DELETE FROM inbox WHERE id IN (SELECT id FROM inbox \
             WHERE platform = 'webhook' AND received_at < $1 AND processed_at IS NOT NULL \
             AND dedupe_key NOT LIKE 'webhook:process:%' LIMIT $2)";
        let mut gone = 0;
        loop {
            let n = with_pool!(self, pool => sqlx::query(FORGET)
                .bind(before).bind(FORGET_BATCH).execute(pool).await?.rows_affected());
            gone += n;
            if n < FORGET_BATCH as u64 {
                return Ok(gone);
            }
            tokio::task::yield_now().await;
        }
    }

    /// The unprocessed event of `platform` that is message `message_id` in
    /// chat `chat_id` (a message's edits and deletion name it by its id,
    /// which is only a chat's own on Telegram and Slack; a Discord thread
    /// is a channel of its own, so a message in one names the thread).
    pub async fn inbox_pending_message(
        &self,
        platform: &str,
        chat_id: &str,
        message_id: &str,
    ) -> Result<Option<InboxRow>> {
        let needle = serde_json::to_string(message_id).unwrap_or_default();
        let like = format!(
            "%\"message_id\":{}%",
            needle
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        );
        let sql = concat!(
            "SELECT ",
            inbox_columns!(),
            " FROM inbox WHERE processed_at IS NULL AND platform = $1 \
             AND payload LIKE $2 ESCAPE '\\' ORDER BY id"
        );
        let rows: Vec<InboxRow> = with_pool!(self, pool => sqlx::query_as(sql)
            .bind(platform).bind(like).fetch_all(pool).await?);
        Ok(rows.into_iter().find(|row| {
            serde_json::from_str::<serde_json::Value>(&row.payload).is_ok_and(|v| {
                v["message_id"].as_str() == Some(message_id)
                    && v.get("revision").is_none()
                    && (v["chat_id"].as_str() == Some(chat_id)
                        || v["thread_id"].as_str() == Some(chat_id))
            })
        }))
    }

    /// Replaces what unprocessed event `id` says (its message was edited).
    pub async fn inbox_revise(&self, id: i64, payload: &str) -> Result<bool> {
        let n = with_pool!(self, pool => sqlx::query(
            "UPDATE inbox SET payload = $1 WHERE id = $2 AND processed_at IS NULL")
            .bind(storable(payload)).bind(id).execute(pool).await?.rows_affected());
        Ok(n == 1)
    }

    /// Replaces what unprocessed event `id` of session `key` says with
    /// what was heard in it (its voice notes transcribed) and writes
    /// `quote`, which shows the chat what was heard, to the outbox, in one
    /// transaction: a replay neither hears it again nor shows it twice.
    /// The outbox row's id; `None` when the event was processed already.
    pub async fn inbox_heard(
        &self,
        id: i64,
        key: &str,
        payload: &str,
        quote: &super::Outbound,
    ) -> Result<Option<i64>> {
        let now = now_ms();
        with_pool!(self, pool => {
            let mut tx = super::begin_write!(self, pool);
            let n = sqlx::query(
                "UPDATE inbox SET payload = $1 WHERE id = $2 AND processed_at IS NULL")
                .bind(storable(payload)).bind(id).execute(&mut *tx).await?.rows_affected();
            if n == 0 {
                tx.rollback().await?;
                return Ok(None);
            }
            let mut qb = sqlx::QueryBuilder::new("");
            super::outbox::outbound_rows!(qb, id, key, std::iter::once(quote), now);
            qb.push(" RETURNING id");
            let row = qb.build_query_scalar().fetch_one(&mut *tx).await?;
            tx.commit().await?;
            Ok(Some(row))
        })
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

    /// `platform`'s events among the newest `window` events of the inbox,
    /// in arrival order; a bounded look back (it reads the id index only).
    pub async fn inbox_latest(&self, platform: &str, window: i64) -> Result<Vec<InboxRow>> {
        let sql = concat!(
            "SELECT ",
            inbox_columns!(),
            " FROM inbox WHERE id > (SELECT COALESCE(MAX(id), 0) FROM inbox) - $1",
            " AND platform = $2 ORDER BY id"
        );
        Ok(
            with_pool!(self, pool => sqlx::query_as(sql).bind(window).bind(platform).fetch_all(pool).await?),
        )
    }

    /// Session `key`'s unprocessed events, in arrival order.
    pub async fn inbox_pending_of(&self, key: &str) -> Result<Vec<InboxRow>> {
        let sql = concat!(
            "SELECT ",
            inbox_columns!(),
            " FROM inbox WHERE session_key = $1 AND processed_at IS NULL ORDER BY id"
        );
        Ok(with_pool!(self, pool => sqlx::query_as(sql).bind(key).fetch_all(pool).await?))
    }

    /// The unprocessed events of sessions `keys`, in arrival order (one
    /// statement on PostgreSQL).
    pub async fn inbox_pending_of_many(&self, keys: &[&str]) -> Result<Vec<InboxRow>> {
        let Backend::Postgres(pool) = &self.backend else {
            let mut rows = Vec::new();
            for key in keys {
                rows.extend(self.inbox_pending_of(key).await?);
            }
            rows.sort_by_key(|r| r.id);
            return Ok(rows);
        };
        let sql = concat!(
            "SELECT ",
            inbox_columns!(),
            " FROM inbox WHERE session_key = ANY($1) AND processed_at IS NULL ORDER BY id"
        );
        Ok(sqlx::query_as(sql).bind(keys).fetch_all(pool).await?)
    }

    /// The newest event of session `key` that is someone's message. No
    /// index serves it (it reads back from the newest event): only for a
    /// process watch kept without the event that started it, by a replica
    /// from before watches kept it.
    pub async fn inbox_last_of(&self, key: &str) -> Result<Option<InboxRow>> {
        let sql = concat!(
            "SELECT ",
            inbox_columns!(),
            // A command's claim is nobody's message to answer.
            " FROM inbox WHERE session_key = $1 AND (outcome IS NULL OR outcome <> 'command')",
            " ORDER BY id DESC LIMIT 1"
        );
        Ok(with_pool!(self, pool => sqlx::query_as(sql).bind(key).fetch_optional(pool).await?))
    }

    /// An event by id.
    pub async fn inbox_event(&self, id: i64) -> Result<Option<InboxRow>> {
        let sql = concat!("SELECT ", inbox_columns!(), " FROM inbox WHERE id = $1");
        Ok(with_pool!(self, pool => sqlx::query_as(sql).bind(id).fetch_optional(pool).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(n: usize) -> Queued {
        Queued {
            platform: "webhook".into(),
            dedupe_key: format!("webhook:{n}"),
            session_key: "webhook:route:1".into(),
            payload: "{}".into(),
            received_at: 0,
            reply: oneshot::channel().0,
        }
    }

    /// While another writes, a SQLite batch takes in every event that
    /// arrives; with the writer free, it is written with what it has.
    #[tokio::test]
    async fn a_sqlite_batch_gathers_until_the_writer_is_free() {
        let gate = std::sync::Arc::new(super::super::WriteGate::new());
        let (tx, mut rx) = mpsc::channel(16);
        let writing = gate.first().await;
        tx.send(queued(1)).await.unwrap();
        let gathering = {
            let gate = gate.clone();
            tokio::spawn(async move {
                let mut batch = Vec::new();
                rx.recv_many(&mut batch, BATCH).await;
                let turn = gather_until_turn(&mut rx, &mut batch, &gate).await;
                drop(turn);
                (batch.len(), rx)
            })
        };
        // Long past a few yields' gathering.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        for n in 2..=4 {
            tx.send(queued(n)).await.unwrap();
        }
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        drop(writing);
        let bound = std::time::Duration::from_secs(10);
        let (gathered, mut rx) = tokio::time::timeout(bound, gathering)
            .await
            .expect("the batch was written once the writer was free")
            .unwrap();
        assert_eq!(
            gathered, 4,
            "the batch took in what arrived while it waited"
        );

        tx.send(queued(5)).await.unwrap();
        let mut batch = Vec::new();
        rx.recv_many(&mut batch, BATCH).await;
        let gathered = gather_until_turn(&mut rx, &mut batch, &gate);
        let _turn = tokio::time::timeout(bound, gathered)
            .await
            .expect("with the writer free, the batch is written at once");
        assert_eq!(batch.len(), 1);
    }
}
