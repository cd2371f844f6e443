//! SQLite's half of the inbox's writes: the connection the committers
//! keep, and the keys held until they are indexed ([`keys`](super::keys)).

use super::Queued;
use super::keys::{self, Keying, Keys};
use crate::store::Result;

/// SQLite's half of [`insert_batch`], without `RETURNING` (sqlx would
/// report the rows of an insert whose commit failed, see `returning!`) and
/// in one trip to the connection's thread: the keys already indexed are
/// read, and the other rows inserted (a repeat's first) by a statement that
/// skips indexed keys itself; a key still held in memory
/// ([`keys`]) is a duplicate before either. The ids are then the
/// consecutive ones ending at the connection's last insert rowid (every
/// insert into the inbox holds the keys' lock). Returns `(id, key)` of the
/// rows it inserted, whose keys it holds.
pub(in crate::store) async fn sqlite_insert(
    conn: &mut sqlx::SqliteConnection,
    keys: &Keys,
    batch: &[Queued],
) -> Result<Vec<(i64, String)>> {
    let mut tail = keys::lock(keys, conn).await?;
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<&Queued> = batch
        .iter()
        .filter(|q| tail.get(&q.dedupe_key).is_none() && seen.insert(q.dedupe_key.as_str()))
        .collect();
    if unique.is_empty() {
        return Ok(Vec::new());
    }
    // A process that does not hold keys itself also looks above the mark,
    // where the daemon's held events are.
    let above = !tail.defers();
    let mut qb = sqlx::QueryBuilder::new("SELECT dedupe_key FROM inbox_keys WHERE dedupe_key IN ");
    push_keys(&mut qb, unique.iter().copied());
    if above {
        qb.push(" UNION ALL SELECT dedupe_key FROM inbox WHERE id > (SELECT upto FROM inbox_keyed) AND dedupe_key IN ");
        push_keys(&mut qb, unique.iter().copied());
    }
    qb.push("; ");
    qb.push(insert_into!());
    qb.push("SELECT * FROM (");
    values_of(unique.iter().copied(), &mut qb);
    qb.push(") AS v WHERE NOT EXISTS (SELECT 1 FROM inbox_keys k WHERE k.dedupe_key = v.column2)");
    if above {
        qb.push(" AND NOT EXISTS (SELECT 1 FROM inbox t WHERE t.id > (SELECT upto FROM inbox_keyed) AND t.dedupe_key = v.column2)");
    }
    tail.writing();
    let steps = crate::store::sqlite_batch(conn, qb.build(), "inbox")
        .await
        .finished()?;
    let rows = sqlite_ids(conn, &steps, unique, tail.upto()).await?;
    tail.stored(rows.iter().cloned());
    tail.written(conn).await;
    Ok(rows)
}

/// Pushes onto `qb` the `VALUES` list of `rows`.
fn values_of<'a>(
    rows: impl Iterator<Item = &'a Queued>,
    qb: &mut sqlx::QueryBuilder<sqlx::Sqlite>,
) {
    qb.push_values(rows, |mut row, q| {
        row.push_bind(q.platform.as_str())
            .push_bind(q.dedupe_key.as_str())
            .push_bind(q.session_key.as_str())
            .push_bind(q.payload.as_str())
            .push_bind(q.received_at);
    });
}

/// Runs `work` on the connection the inbox's committers keep (one from
/// `pool` when none is kept), and keeps it after work that went through
/// (work that failed may have left it in a state its return to the pool
/// clears) while the pool is open: closing it waits for every connection.
pub(in crate::store) async fn on_held<T>(
    pool: &sqlx::SqlitePool,
    held: &Held,
    work: impl AsyncFnOnce(&mut sqlx::SqliteConnection) -> Result<T>,
) -> Result<T> {
    let mut kept = lock_held(held).await;
    let mut conn = match kept.as_mut().and_then(|k| k.take()) {
        Some(conn) => conn,
        None => Box::pin(pool.acquire()).await?,
    };
    let result = work(&mut conn).await;
    if let (Some(kept), Ok(_), false) = (kept.as_mut(), &result, pool.is_closed()) {
        **kept = Some(conn);
    }
    result
}

/// Indexes held keys of the inbox ([`keys`]) in the committers' turn, as
/// many as `keying` says: between a busy intake's batches only once too
/// many are held. False when that failed (logged).
pub(in crate::store) async fn key_held(
    pool: &sqlx::SqlitePool,
    (held, keys): (&Held, &Keys),
    keying: Keying,
) -> bool {
    if pool.is_closed() {
        // The store closed: the next process keys them.
        return true;
    }
    let keyed = on_held(pool, held, async |conn| {
        let mut tail = keys::lock(keys, conn).await?;
        if keying == Keying::Quiet || tail.len() >= keys::MOST {
            tail.key_chunk(conn, keying).await?;
        }
        Ok(())
    })
    .await;
    keyed.map_or_else(
        |err| {
            tracing::warn!(error = %err, "inbox keys not indexed; trying again in a while");
            false
        },
        |()| true,
    )
}

/// The `(id, key)` of the rows a [`sqlite_insert`] inserted, all above
/// `upto`.
pub(in crate::store) async fn sqlite_ids(
    conn: &mut sqlx::SqliteConnection,
    steps: &crate::store::Steps,
    unique: Vec<&Queued>,
    upto: i64,
) -> Result<Vec<(i64, String)>> {
    use sqlx::Row;
    let stored = steps
        .get(0)?
        .rows
        .iter()
        .map(|row| row.try_get::<String, _>(0))
        .collect::<Result<std::collections::HashSet<String>, _>>()?;
    let fresh: Vec<&Queued> = unique
        .into_iter()
        .filter(|q| !stored.contains(&q.dedupe_key))
        .collect();
    let done = &steps.get(1)?.result;
    let n = fresh.len() as i64;
    if done.rows_affected() as i64 == n {
        let first = done.last_insert_rowid() - n + 1;
        return Ok((first..)
            .zip(fresh)
            .map(|(id, q)| (id, q.dedupe_key.clone()))
            .collect());
    }
    // Someone else wrote some of them meanwhile (not this process): read
    // back which rows hold them.
    tracing::warn!(
        events = n,
        inserted = done.rows_affected(),
        "inbox rows written by another writer during a batch"
    );
    let mut back = sqlx::QueryBuilder::new("SELECT id, dedupe_key FROM inbox WHERE id > ");
    back.push_bind(upto);
    back.push(" AND dedupe_key IN ");
    push_keys(&mut back, fresh.into_iter());
    Ok(back.build_query_as().fetch_all(conn).await?)
}

/// Pushes onto `qb` the list `(…)` of `rows`' dedupe keys.
fn push_keys<'a>(
    qb: &mut sqlx::QueryBuilder<sqlx::Sqlite>,
    rows: impl Iterator<Item = &'a Queued>,
) {
    qb.push("(");
    let mut keys = qb.separated(", ");
    for q in rows {
        keys.push_bind(q.dedupe_key.as_str());
    }
    qb.push(")");
}

/// SQLite: the connection the inbox's committers keep between batches
/// (`None`: each batch takes one from the pool). A connection that finds
/// the database changed by another drops its whole page cache (SQLite's
/// write-ahead log has no finer invalidation): two connections taking
/// turns read every page each batch touches back from the files, a
/// seventh of SQLite's work in a `perf` of the ingest bench. Kept, it
/// also skips the ping a connection's return to the pool costs.
pub(in crate::store) type Held =
    Option<std::sync::Arc<tokio::sync::Mutex<Option<sqlx::pool::PoolConnection<sqlx::Sqlite>>>>>;

/// The kept connection's place, while the caller holds it (`None` when
/// batches take their connection from the pool).
pub(in crate::store) async fn lock_held(
    held: &Held,
) -> Option<tokio::sync::MutexGuard<'_, Option<sqlx::pool::PoolConnection<sqlx::Sqlite>>>> {
    match held {
        Some(held) => Some(held.lock().await),
        None => None,
    }
}

/// SQLite: the id of the event stored under `key`, held in `tail` or
/// found by [`keys::ID_OF`].
pub(in crate::store) async fn sqlite_id_of(
    conn: &mut sqlx::SqliteConnection,
    tail: &keys::Tail,
    key: &str,
) -> Result<Option<i64>> {
    if let Some(id) = tail.get(key) {
        return Ok(Some(id));
    }
    Ok(sqlx::query_scalar(keys::ID_OF)
        .bind(key)
        .fetch_optional(conn)
        .await?)
}
