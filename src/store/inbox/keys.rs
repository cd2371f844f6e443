//! SQLite: the inbox's dedupe keys, indexed after their events. A unique
//! index on the key put every delivery on a page of its own (the keys are
//! random: a body's hash, a platform's event id), a page of the
//! write-ahead log each; the inbox's rows themselves are appended, a batch
//! sharing its pages. So an event is stored with its key unindexed, and
//! the key reaches `inbox_keys` later, many at once: when the intake has
//! been quiet for [`QUIET`], or a few between batches once [`MOST`] wait.
//!
//! Until then the key is held here, in memory, by the one process that
//! runs sessions on the file (it holds the single-replica lock; every
//! store it opens on the file shares these keys). Every insert into the
//! inbox takes this lock, so an event is a duplicate when its key is in
//! `inbox_keys` or held here. The keys a process held when it stopped are
//! keyed before the next one takes its first event. Any other process
//! (the command line) indexes what it stores right after storing it, and
//! its lookups by key also read the few unkeyed rows above the mark.

use std::collections::HashMap;

use sqlx::SqliteConnection;

use crate::store::Result;

/// Keys not yet in `inbox_keys` past which the group commit indexes some
/// after each batch, whatever the intake does ([`Keying::Busy`]).
pub(in crate::store) const MOST: usize = 8192;

/// How many keys a quiet intake's group commit indexes at once.
const CHUNK: usize = 512;

/// The fewest keys indexed after a batch of a busy intake.
const BUSY_CHUNK: usize = 256;

/// How many held keys the group commit indexes in its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Keying {
    /// The intake has been quiet for [`QUIET`]: [`CHUNK`] of them, again
    /// while it stays quiet.
    Quiet,
    /// After a batch of `stored` events, once [`MOST`] are held: twice
    /// that (at least [`BUSY_CHUNK`]), so the held keys shrink while each
    /// batch waits for only a few. A large chunk here was the intake's
    /// periodic stall: its random keys dirtied a page of `inbox_keys` each,
    /// and every sender waited for that commit (2 048 keys: 10–38 ms, every
    /// 100–200 ms of a 100 000-delivery run). Smaller chunks spread fewer
    /// keys over each page: 64 cost a fifth of the throughput, 256 was
    /// within the noise.
    Busy { stored: usize },
}

impl Keying {
    /// How many of the held keys to index now.
    fn chunk(self) -> usize {
        match self {
            Keying::Quiet => CHUNK,
            Keying::Busy { stored } => (2 * stored).max(BUSY_CHUNK),
        }
    }
}

/// How long indexing waits after it failed (a full disk, storage away).
pub(in crate::store) const AFTER_FAILURE: std::time::Duration = std::time::Duration::from_secs(5);

/// How long the intake waits for nothing before its keys are indexed.
pub(in crate::store) const QUIET: std::time::Duration = std::time::Duration::from_millis(50);

/// The events stored above `inbox_keyed`'s mark, by key.
#[derive(Debug, Default)]
pub(in crate::store) struct Tail {
    /// Whether what earlier processes left unkeyed was keyed.
    synced: bool,
    /// Whether held keys wait ([`KeysOf::defer`]).
    defer: bool,
    /// The events up to this id are keyed.
    upto: i64,
    keys: HashMap<String, i64>,
}

/// The inbox's unkeyed events (unused on PostgreSQL, whose inbox keeps
/// its unique index).
pub(in crate::store) type Keys = std::sync::Arc<KeysOf>;

/// A database's held keys, and whether this process may hold them.
#[derive(Debug, Default)]
pub(in crate::store) struct KeysOf {
    tail: tokio::sync::Mutex<Tail>,
    /// Whether keys wait to be indexed: only in the process that holds
    /// the database's single-replica lock (the daemon). Any other (the
    /// command line) indexes what it stores at once, so that the daemon
    /// finds it.
    defer: std::sync::atomic::AtomicBool,
}

impl KeysOf {
    /// From now on, keys wait to be indexed.
    pub(in crate::store) fn defer(&self) {
        self.defer.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// How many keys are held, without waiting: one while a write holds
    /// them (some may be, and the committers' wait for a quiet intake must
    /// not queue behind that write).
    pub(in crate::store) fn held(&self) -> usize {
        self.tail.try_lock().map_or(1, |tail| tail.len())
    }
}

/// The keys of the database in `file`, shared by every store of this
/// process on it (one of its own for a database in memory).
pub(in crate::store) fn of_file(file: Option<&std::path::Path>) -> Keys {
    type Open = std::collections::HashMap<std::path::PathBuf, std::sync::Weak<KeysOf>>;
    static OPEN: std::sync::LazyLock<std::sync::Mutex<Open>> =
        std::sync::LazyLock::new(Default::default);
    let Some(file) = file else {
        return Keys::default();
    };
    let path = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    let mut open = OPEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    open.retain(|_, keys| keys.strong_count() > 0);
    if let Some(keys) = open.get(&path).and_then(std::sync::Weak::upgrade) {
        return keys;
    }
    let keys = Keys::default();
    open.insert(path, std::sync::Arc::downgrade(&keys));
    keys
}

/// The id of the event stored under `$1` that `inbox_keys` has or that
/// waits above the mark (held by this process or another).
pub(in crate::store) const ID_OF: &str = "SELECT id FROM inbox_keys WHERE dedupe_key = $1 \
     UNION ALL SELECT id FROM inbox WHERE id > (SELECT upto FROM inbox_keyed) AND dedupe_key = $1 \
     LIMIT 1";

/// Locks `keys`; the first lock of a process keys what earlier ones left
/// unkeyed, on `conn`.
pub(in crate::store) async fn lock<'a>(
    keys: &'a KeysOf,
    conn: &mut SqliteConnection,
) -> Result<tokio::sync::MutexGuard<'a, Tail>> {
    let mut tail = keys.tail.lock().await;
    tail.defer = keys.defer.load(std::sync::atomic::Ordering::Relaxed);
    if !tail.synced {
        let (upto,): (i64,) = sqlx::query_as("SELECT upto FROM inbox_keyed")
            .fetch_one(&mut *conn)
            .await?;
        let (last,): (i64,) = sqlx::query_as("SELECT COALESCE(MAX(id), 0) FROM inbox")
            .fetch_one(&mut *conn)
            .await?;
        tail.upto = upto;
        tail.key_upto(conn, last).await?;
        tail.synced = true;
    }
    Ok(tail)
}

impl Tail {
    /// Before a write into the inbox: until [`written`](Self::written),
    /// the next lock keys what the table holds, as after a restart, in
    /// case the write committed and its keys were never held (a failure
    /// after the commit, or the caller's future dropped).
    pub(in crate::store) fn writing(&mut self) {
        self.synced = false;
    }

    /// After a write, whose keys are held: indexes them now unless this
    /// process defers. On a failure the next lock indexes them.
    pub(in crate::store) async fn written(&mut self, conn: &mut SqliteConnection) {
        if !self.defer
            && let Err(err) = self.key_all(conn).await
        {
            tracing::warn!(error = %err, "inbox keys not indexed after a write; indexing them before the next");
            return;
        }
        self.synced = true;
    }

    /// The id of the unkeyed event stored under `key`.
    pub(in crate::store) fn get(&self, key: &str) -> Option<i64> {
        self.keys.get(key).copied()
    }

    /// Holds the keys of events just stored.
    pub(in crate::store) fn stored(&mut self, rows: impl IntoIterator<Item = (i64, String)>) {
        self.keys
            .extend(rows.into_iter().map(|(id, key)| (key, id)));
    }

    /// Lets go of `key`, its event gone.
    pub(in crate::store) fn forget(&mut self, key: &str) {
        self.keys.remove(key);
    }

    /// Whether this process holds keys ([`KeysOf::defer`]).
    pub(in crate::store) fn defers(&self) -> bool {
        self.defer
    }

    /// How many keys are held.
    pub(in crate::store) fn len(&self) -> usize {
        self.keys.len()
    }

    /// The id below which `inbox_keys` is checked in SQL and above which
    /// an event's key is held here.
    pub(in crate::store) fn upto(&self) -> i64 {
        self.upto
    }

    /// Indexes every held key.
    pub(in crate::store) async fn key_all(&mut self, conn: &mut SqliteConnection) -> Result<()> {
        match self.keys.values().max() {
            Some(&last) => self.key_upto(conn, last).await,
            None => Ok(()),
        }
    }

    /// Indexes the oldest held keys, as many as `keying` says.
    pub(in crate::store) async fn key_chunk(
        &mut self,
        conn: &mut SqliteConnection,
        keying: Keying,
    ) -> Result<()> {
        let mut ids: Vec<i64> = self.keys.values().copied().collect();
        if ids.is_empty() {
            return Ok(());
        }
        let at = keying.chunk().min(ids.len()) - 1;
        let (_, &mut last, _) = ids.select_nth_unstable(at);
        self.key_upto(conn, last).await
    }

    /// Moves the keys of the events up to `last` into `inbox_keys`, and
    /// the mark with them, in one transaction.
    async fn key_upto(&mut self, conn: &mut SqliteConnection, last: i64) -> Result<()> {
        if last <= self.upto {
            return Ok(());
        }
        let mut tx = Box::pin(sqlx::Connection::begin_with(conn, "BEGIN IMMEDIATE")).await?;
        sqlx::query(
            "INSERT OR IGNORE INTO inbox_keys (dedupe_key, id) \
             SELECT dedupe_key, id FROM inbox WHERE id > $1 AND id <= $2 ORDER BY id",
        )
        .bind(self.upto)
        .bind(last)
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE inbox_keyed SET upto = max(upto, $1)")
            .bind(last)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        self.upto = last;
        self.keys.retain(|_, id| *id > last);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use sqlx::Connection;

    use super::*;

    /// A busy intake's committer indexes a few keys after each batch
    /// (twice the batch, at least [`BUSY_CHUNK`]), the oldest first; a
    /// quiet one indexes [`CHUNK`] at a time.
    #[tokio::test]
    async fn a_busy_intake_indexes_a_few_keys_after_each_batch() {
        let mut conn = SqliteConnection::connect("sqlite::memory:").await.unwrap();
        for table in [
            "CREATE TABLE inbox (id INTEGER PRIMARY KEY, dedupe_key TEXT NOT NULL)",
            "CREATE TABLE inbox_keys (dedupe_key TEXT PRIMARY KEY, id INTEGER NOT NULL)",
            "CREATE TABLE inbox_keyed (upto INTEGER NOT NULL)",
            "INSERT INTO inbox_keyed VALUES (0)",
        ] {
            sqlx::query(table).execute(&mut conn).await.unwrap();
        }
        let held = MOST + 2000;
        let mut tail = Tail::default();
        let mut rows = Vec::new();
        for id in 1..=held as i64 {
            let key = format!(
                "webhook:{:016x}",
                (id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            );
            sqlx::query("INSERT INTO inbox (id, dedupe_key) VALUES ($1, $2)")
                .bind(id)
                .bind(&key)
                .execute(&mut conn)
                .await
                .unwrap();
            rows.push((id, key));
        }
        tail.stored(rows);

        let mut indexed = 0;
        for (keying, more) in [
            (Keying::Busy { stored: 3 }, BUSY_CHUNK),
            (Keying::Busy { stored: 200 }, 400),
            (Keying::Quiet, CHUNK),
        ] {
            tail.key_chunk(&mut conn, keying).await.unwrap();
            indexed += more;
            let (count, newest): (i64, i64) =
                sqlx::query_as("SELECT COUNT(*), MAX(id) FROM inbox_keys")
                    .fetch_one(&mut conn)
                    .await
                    .unwrap();
            assert_eq!(count as usize, indexed, "{keying:?} indexed {more} keys");
            assert_eq!(newest as usize, indexed, "the oldest keys went first");
            assert_eq!(tail.upto(), newest);
            assert_eq!(
                tail.len(),
                held - indexed,
                "what was indexed is no longer held"
            );
        }
    }
}
