//! SQLite: the inbox's dedupe keys, indexed after their events. A unique
//! index on the key put every delivery on a page of its own (the keys are
//! random: a body's hash, a platform's event id), a page of the
//! write-ahead log each; the inbox's rows themselves are appended, a batch
//! sharing its pages. So an event is stored with its key unindexed, and
//! the key reaches `inbox_keys` later, many at once: when the intake has
//! been quiet for [`QUIET`], or a few between batches once [`MOST`] wait.
//! Each chunk is the next held keys in key order ([`Tail::key_chunk`]'s
//! pass), neighbours that share the index's pages: taken oldest first,
//! each landed on a page of its own, and indexing them cost a third of a
//! busy intake's throughput.
//!
//! Until then the key is held here, in memory, by the one process that
//! runs sessions on the file (it holds the single-replica lock; every
//! store it opens on the file shares these keys). Every insert into the
//! inbox takes this lock, so an event is a duplicate when its key is in
//! `inbox_keys` or held here. The keys a process held when it stopped are
//! keyed before the next one takes its first event. Any other process
//! (the command line) indexes what it stores right after storing it, and
//! its lookups by key also read the rows above the mark (a pass's worth).
//! Should it stop between the two, the daemon finds the ids it skipped
//! and indexes those rows from the table before its mark passes them.

use std::collections::BTreeMap;
use std::ops::Bound;

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

/// The events stored above `inbox_keyed`'s mark whose keys are not
/// indexed yet, by key (a pass part way through has indexed others above
/// the mark).
#[derive(Debug, Default)]
pub(in crate::store) struct Tail {
    /// Whether what earlier processes left unkeyed was keyed.
    synced: bool,
    /// Whether held keys wait ([`KeysOf::defer`]).
    defer: bool,
    /// The events up to this id are keyed.
    upto: i64,
    /// The held keys, in key order for [`Tail::key_chunk`]'s pass.
    keys: BTreeMap<String, i64>,
    sweep: Sweep,
    /// The newest event this process stored or indexed.
    seen: i64,
    /// Events between two of this process's that another process stored
    /// (ids, inclusive), read from the table at the next chunk: another
    /// process indexes its keys after its commit, and may stop before.
    foreign: Vec<(i64, i64)>,
}

/// Where [`Tail::key_chunk`] is in its pass over the held keys, in key
/// order: the newest event and the greatest key held when the pass began,
/// and the last key indexed. The keys held then are the pass's (newer
/// ones wait for the next, so that a pass ends however the keys grow);
/// once it has indexed them all, every event up to that newest one is
/// keyed.
#[derive(Debug, Default)]
struct Sweep {
    top: i64,
    last: Option<String>,
    after: Option<String>,
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
        self.tail
            .try_lock()
            .map_or(1, |tail| tail.len() + tail.foreign.len())
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

/// Indexes the keys of the events with ids in `($1, $2]`, read from the
/// table, in key order (the oldest event first for a key stored twice).
const KEY_RANGE: &str = "INSERT OR IGNORE INTO inbox_keys (dedupe_key, id) \
     SELECT dedupe_key, id FROM inbox WHERE id > $1 AND id <= $2 ORDER BY dedupe_key, id";

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

    /// Holds the keys of events just stored; the ids skipped since the
    /// last ones were another process's ([`foreign`](Self::foreign)).
    pub(in crate::store) fn stored(&mut self, rows: impl IntoIterator<Item = (i64, String)>) {
        let mut ids = Vec::new();
        for (id, key) in rows {
            ids.push(id);
            self.keys.insert(key, id);
        }
        ids.sort_unstable();
        for id in ids {
            if id > self.seen + 1 {
                self.foreign.push((self.seen + 1, id - 1));
            }
            self.seen = self.seen.max(id);
        }
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

    /// The id up to which every event's key is in `inbox_keys`; above
    /// it, a key is held here or was indexed by a pass part way through.
    pub(in crate::store) fn upto(&self) -> i64 {
        self.upto
    }

    /// Indexes every held key, and another process's events seen.
    pub(in crate::store) async fn key_all(&mut self, conn: &mut SqliteConnection) -> Result<()> {
        let held = self.keys.values().copied().max();
        let foreign = self.foreign.iter().map(|&(_, to)| to).max();
        match held.max(foreign) {
            Some(last) => self.key_upto(conn, last).await,
            None => Ok(()),
        }
    }

    /// Indexes held keys, as many as `keying` says, the next ones in key
    /// order after those it indexed last: a chunk of neighbouring keys
    /// shares the pages of `inbox_keys` it lands on, where the same number
    /// of the oldest (random keys) took a page each. Once a pass has
    /// indexed every key, the mark moves to the newest event held when it
    /// began.
    pub(in crate::store) async fn key_chunk(
        &mut self,
        conn: &mut SqliteConnection,
        keying: Keying,
    ) -> Result<()> {
        if self.keys.is_empty() && self.foreign.is_empty() {
            return Ok(());
        }
        if self.sweep.top <= self.upto {
            self.sweep = Sweep {
                top: self.keys.values().copied().max().unwrap_or(self.upto),
                last: self.keys.keys().next_back().cloned(),
                after: None,
            };
        }
        let (chunk, passed) = self.next_chunk(keying.chunk());
        let mut tx = Box::pin(sqlx::Connection::begin_with(conn, "BEGIN IMMEDIATE")).await?;
        for &(from, to) in &self.foreign {
            sqlx::query(KEY_RANGE)
                .bind(from - 1)
                .bind(to)
                .execute(&mut *tx)
                .await?;
        }
        if !chunk.is_empty() {
            let mut qb =
                sqlx::QueryBuilder::new("INSERT OR IGNORE INTO inbox_keys (dedupe_key, id) ");
            qb.push_values(&chunk, |mut row, (key, id)| {
                row.push_bind(key.as_str()).push_bind(*id);
            });
            qb.build().execute(&mut *tx).await?;
        }
        let top = self.sweep.top;
        if passed {
            sqlx::query("UPDATE inbox_keyed SET upto = max(upto, $1)")
                .bind(top)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        self.foreign.clear();
        for (key, _) in &chunk {
            self.keys.remove(key);
        }
        if let Some((key, _)) = chunk.last() {
            self.sweep.after = Some(key.clone());
        }
        if passed {
            self.upto = self.upto.max(top);
            self.keys.retain(|_, id| *id > top);
            self.sweep = Sweep::default();
        }
        Ok(())
    }

    /// The pass's next `n` keys after its last, and whether they end it.
    /// Keys stored since it began wait for the next pass, wherever they
    /// sort, so that a pass ends however the keys grow.
    fn next_chunk(&self, n: usize) -> (Vec<(String, i64)>, bool) {
        let Some(last) = self.sweep.last.as_deref() else {
            return (Vec::new(), true);
        };
        let from = match self.sweep.after.as_deref() {
            Some(after) if after >= last => return (Vec::new(), true),
            Some(after) => Bound::Excluded(after),
            None => Bound::Unbounded,
        };
        let top = self.sweep.top;
        let mut next = (self.keys.range::<str, _>((from, Bound::Included(last))))
            .filter(|&(_, &id)| id <= top);
        let chunk = next
            .by_ref()
            .take(n)
            .map(|(key, &id)| (key.clone(), id))
            .collect();
        (chunk, next.next().is_none())
    }

    /// Moves the keys of the events up to `last` into `inbox_keys`, and
    /// the mark with them, in one transaction.
    async fn key_upto(&mut self, conn: &mut SqliteConnection, last: i64) -> Result<()> {
        if last <= self.upto {
            self.seen = self.seen.max(last).max(self.upto);
            return Ok(());
        }
        let mut tx = Box::pin(sqlx::Connection::begin_with(conn, "BEGIN IMMEDIATE")).await?;
        sqlx::query(KEY_RANGE)
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
        self.seen = self.seen.max(last);
        self.keys.retain(|_, id| *id > last);
        for range in &mut self.foreign {
            range.0 = range.0.max(last + 1);
        }
        self.foreign.retain(|&(from, to)| from <= to);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use sqlx::Connection;

    use super::*;

    async fn schema() -> SqliteConnection {
        let mut conn = SqliteConnection::connect("sqlite::memory:").await.unwrap();
        for table in [
            "CREATE TABLE inbox (id INTEGER PRIMARY KEY, dedupe_key TEXT NOT NULL)",
            "CREATE TABLE inbox_keys (dedupe_key TEXT PRIMARY KEY, id INTEGER NOT NULL)",
            "CREATE TABLE inbox_keyed (upto INTEGER NOT NULL)",
            "INSERT INTO inbox_keyed VALUES (0)",
        ] {
            sqlx::query(table).execute(&mut conn).await.unwrap();
        }
        conn
    }

    /// Stores events `ids` (random-looking keys) and holds their keys.
    async fn store(
        conn: &mut SqliteConnection,
        tail: &mut Tail,
        ids: std::ops::RangeInclusive<i64>,
    ) {
        let mut rows = Vec::new();
        for id in ids {
            let key = format!(
                "webhook:{:016x}",
                (id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            );
            rows.push((id, key));
        }
        store_rows(conn, tail, rows).await;
    }

    async fn store_rows(conn: &mut SqliteConnection, tail: &mut Tail, rows: Vec<(i64, String)>) {
        for (id, key) in &rows {
            sqlx::query("INSERT INTO inbox (id, dedupe_key) VALUES ($1, $2)")
                .bind(id)
                .bind(key)
                .execute(&mut *conn)
                .await
                .unwrap();
        }
        tail.stored(rows);
    }

    /// The indexed keys, in key order.
    async fn indexed(conn: &mut SqliteConnection) -> Vec<String> {
        sqlx::query_scalar("SELECT dedupe_key FROM inbox_keys ORDER BY dedupe_key")
            .fetch_all(conn)
            .await
            .unwrap()
    }

    /// Every stored key is indexed or held, never both.
    async fn each_key_once(conn: &mut SqliteConnection, tail: &Tail) {
        let stored: Vec<String> =
            sqlx::query_scalar("SELECT dedupe_key FROM inbox ORDER BY dedupe_key")
                .fetch_all(&mut *conn)
                .await
                .unwrap();
        let mut both = indexed(conn).await;
        both.extend(tail.keys.keys().cloned());
        both.sort();
        assert_eq!(both, stored, "each key indexed or held, once");
    }

    /// Indexes quiet chunks until the pass under way ends (ten at most),
    /// checking after each that every key is indexed or held, once.
    async fn end_the_pass(conn: &mut SqliteConnection, tail: &mut Tail) {
        let mark = tail.upto();
        for _ in 0..10 {
            if tail.upto() > mark {
                return;
            }
            tail.key_chunk(conn, Keying::Quiet).await.unwrap();
            each_key_once(conn, tail).await;
        }
    }

    /// A process that finds every event indexed counts none of them as
    /// another's when it stores the next, nor the ids of the newest ones
    /// deleted since (a command's claim given up).
    #[tokio::test]
    async fn events_indexed_before_a_start_are_not_another_process_s() {
        for (mark, next) in [(2, 3), (5, 6)] {
            let mut conn = schema().await;
            for sql in [
                "INSERT INTO inbox (id, dedupe_key) VALUES (1, 'a'), (2, 'b')",
                "INSERT INTO inbox_keys (dedupe_key, id) VALUES ('a', 1), ('b', 2)",
            ] {
                sqlx::query(sql).execute(&mut conn).await.unwrap();
            }
            sqlx::query("UPDATE inbox_keyed SET upto = $1")
                .bind(mark)
                .execute(&mut conn)
                .await
                .unwrap();
            let keys = KeysOf::default();
            let mut tail = lock(&keys, &mut conn).await.unwrap();
            tail.stored([(next, "c".to_string())]);
            assert!(tail.foreign.is_empty(), "mark {mark}: {:?}", tail.foreign);
        }
    }

    /// Another process's rows found with nothing held are indexed by the
    /// quiet intake all the same: they count as held.
    #[tokio::test]
    async fn another_process_s_rows_alone_count_as_held() {
        let mut conn = schema().await;
        let keys = KeysOf::default();
        let mut tail = lock(&keys, &mut conn).await.unwrap();
        store(&mut conn, &mut tail, 1..=1).await;
        sqlx::query("INSERT INTO inbox (id, dedupe_key) VALUES (2, 'cli:claim')")
            .execute(&mut conn)
            .await
            .unwrap();
        store(&mut conn, &mut tail, 3..=3).await;
        // This process's own events go (claims given up), the other's stays.
        sqlx::query("DELETE FROM inbox WHERE id IN (1, 3)")
            .execute(&mut conn)
            .await
            .unwrap();
        let own: Vec<String> = tail.keys.keys().cloned().collect();
        for key in &own {
            tail.forget(key);
        }
        drop(tail);
        assert_eq!(
            keys.held(),
            1,
            "the other process's row waits to be indexed"
        );
        let mut tail = lock(&keys, &mut conn).await.unwrap();
        tail.key_chunk(&mut conn, Keying::Quiet).await.unwrap();
        assert_eq!(indexed(&mut conn).await, ["cli:claim"]);
        drop(tail);
        assert_eq!(keys.held(), 0);
    }

    /// A busy intake's committer indexes a few keys after each batch
    /// (twice the batch, at least [`BUSY_CHUNK`]), a quiet one [`CHUNK`]
    /// at a time; each chunk the next held keys in key order, so that
    /// neighbours share pages of `inbox_keys`.
    #[tokio::test]
    async fn a_busy_intake_indexes_a_few_neighbouring_keys_after_each_batch() {
        let mut conn = schema().await;
        let held = MOST + 2000;
        let mut tail = Tail::default();
        store(&mut conn, &mut tail, 1..=held as i64).await;

        let mut done = 0;
        for (keying, more) in [
            (Keying::Busy { stored: 3 }, BUSY_CHUNK),
            (Keying::Busy { stored: 200 }, 400),
            (Keying::Quiet, CHUNK),
        ] {
            tail.key_chunk(&mut conn, keying).await.unwrap();
            done += more;
            let keys = indexed(&mut conn).await;
            assert_eq!(keys.len(), done, "{keying:?} indexed {more} keys");
            let first_held = tail.keys.keys().next().unwrap();
            assert!(
                keys.last().unwrap() < first_held,
                "the chunks went through the keys in order"
            );
            assert_eq!(
                tail.len(),
                held - done,
                "what was indexed is no longer held"
            );
            assert_eq!(tail.upto(), 0, "the mark waits for the pass to end");
            each_key_once(&mut conn, &tail).await;
        }
    }

    /// A key stored during a pass waits for the next one, wherever it
    /// sorts (behind where the pass is, ahead of it, past its end); the
    /// pass ends with the mark at the newest event held when it began.
    #[tokio::test]
    async fn a_pass_moves_the_mark_to_the_newest_event_it_began_with() {
        let mut conn = schema().await;
        let mut tail = Tail::default();
        store(&mut conn, &mut tail, 1..=2000).await;
        tail.key_chunk(&mut conn, Keying::Quiet).await.unwrap();
        let early = "webhook:".to_string();
        let middle = format!("{}0", tail.keys.keys().nth(700).unwrap());
        let late = "webhook:~".to_string();
        let during = vec![
            (2001, early.clone()),
            (2002, middle.clone()),
            (2003, late.clone()),
        ];
        store_rows(&mut conn, &mut tail, during).await;
        end_the_pass(&mut conn, &mut tail).await;
        assert_eq!(tail.upto(), 2000, "the mark is the pass's first newest");
        let upto: i64 = sqlx::query_scalar("SELECT upto FROM inbox_keyed")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(upto, 2000, "and is stored");
        for (key, id) in [(&early, 2001), (&middle, 2002), (&late, 2003)] {
            assert_eq!(tail.get(key), Some(id), "{key} waits for the next pass");
        }
        assert_eq!(tail.len(), 3);

        tail.key_chunk(&mut conn, Keying::Busy { stored: 1 })
            .await
            .unwrap();
        assert_eq!(tail.upto(), 2003, "the next pass ends with them");
        assert_eq!(tail.len(), 0);
        each_key_once(&mut conn, &tail).await;
    }

    /// Keys that only grow (a chat's update ids) still end a pass under
    /// a busy intake, which indexes only while [`MOST`] are held, whether
    /// they sort past the pass's greatest key or before one (a webhook's
    /// key held beside them): the new ones wait for the next pass.
    #[tokio::test]
    async fn a_pass_ends_while_new_keys_keep_coming_in_its_way() {
        for beside in [None, Some("webhook:x")] {
            let mut conn = schema().await;
            let mut tail = Tail::default();
            let key = |id: i64| format!("telegram:{id:012}");
            let mut rows: Vec<(i64, String)> = (1..MOST as i64).map(|id| (id, key(id))).collect();
            rows.push((
                MOST as i64,
                beside.map_or_else(|| key(MOST as i64), String::from),
            ));
            store_rows(&mut conn, &mut tail, rows).await;
            let mut next = MOST as i64 + 1;
            for _ in 0..200 {
                if tail.upto() > 0 {
                    break;
                }
                if tail.len() >= MOST {
                    tail.key_chunk(&mut conn, Keying::Busy { stored: 200 })
                        .await
                        .unwrap();
                }
                let batch = (next..next + 200).map(|id| (id, key(id))).collect();
                store_rows(&mut conn, &mut tail, batch).await;
                next += 200;
            }
            assert_eq!(
                tail.upto(),
                MOST as i64,
                "the pass ended with the keys it began with ({beside:?} beside)"
            );
            each_key_once(&mut conn, &tail).await;
        }
    }

    /// An event another process stored between two of this one's, whose
    /// key that process never indexed, is indexed from the table before
    /// the mark passes it.
    #[tokio::test]
    async fn another_process_s_unindexed_event_is_indexed_before_the_mark_passes_it() {
        let mut conn = schema().await;
        let mut tail = Tail::default();
        store(&mut conn, &mut tail, 1..=100).await;
        sqlx::query("INSERT INTO inbox (id, dedupe_key) VALUES (101, 'cli:claim')")
            .execute(&mut conn)
            .await
            .unwrap();
        store(&mut conn, &mut tail, 102..=200).await;
        end_the_pass(&mut conn, &mut tail).await;
        assert_eq!(tail.upto(), 200);
        assert!(indexed(&mut conn).await.contains(&"cli:claim".to_string()));
        each_key_once(&mut conn, &tail).await;
    }
}
