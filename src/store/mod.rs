//! Durable state: sessions, messages, the inbound-event inbox, the outbox,
//! approvals, the permanent allowlist, pairing and memory notes.
//!
//! Two sqlx backends chosen by URL: SQLite (embedded default; WAL, busy
//! timeout, FTS5) and PostgreSQL (production, full-text via tsvector). Both
//! speak the same SQL wherever the dialects agree (`$n` placeholders,
//! `ON CONFLICT`, `RETURNING`); the few statements that differ (full-text
//! search) are written per backend. The same test suite runs on both.

mod approvals;
mod audit;
mod checkpoints;
mod console;
mod cron;
mod deliveries;
mod forge;
mod health;
mod inbox;
mod jobs;
mod leases;
mod log_index;
mod memory;
mod outbox;
mod pairing;
mod pools;
mod processes;
mod sessions;
mod turns;
mod usage;

pub use approvals::{AllowEntry, ApprovalRecord, ApprovalStatus, PatternKeys};
pub use audit::{
    AuditEvent, AuditKind, AuditRow, ChainCheck, GENESIS, Grant, PromptRef, Settlement,
};
pub use console::ConsoleAudit;
pub use cron::{CronJob, CronRun};
pub use deliveries::DeliveryRow;
pub use forge::{ForgeOutput, OutputAttempt};
pub use health::{DISK_FLOOR, PROBE_TIMEOUT};
pub use inbox::{InboxInsert, InboxRow, NewInboxEvent};
pub use jobs::{JobReads, JobStart, Started};
pub use leases::{Fence, LeaseRow, ReplicaActivity, ReplicaRow};
pub use log_index::LogMark;
pub use memory::MemoryNote;
pub use outbox::{Draft, Outbound, OutboxRow};
pub use pairing::{PairedUser, PairingRequest};
pub use pools::postgres_lets_in_without_password;
pub use processes::ProcessWatch;
pub use sessions::{MessageHit, NewMessage, NewSession, Session, StoredMessage};
pub use turns::{Committed, Completion, TurnCommit, TurnRecord};
pub use usage::{Hold, Limit, Spent, UsageRow};

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::PgPool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqliteSynchronous};

use crate::config::StorageConfig;
use pools::{postgres_pool, sqlite_in_memory, sqlite_pool};

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("migrations/postgres");

/// Runs `$body` with `$pool` bound to whichever pool the store holds. The
/// body is written once and compiled for both backends.
macro_rules! with_pool {
    ($store:expr, $pool:ident => $body:expr) => {
        match &$store.backend {
            $crate::store::Backend::Sqlite($pool) => $body,
            $crate::store::Backend::Postgres($pool) => $body,
        }
    };
}
pub(crate) use with_pool;

/// Begins a write transaction on `$pool` (inside [`with_pool!`]): `BEGIN
/// IMMEDIATE` on SQLite, so the write lock is taken up front and other
/// writers are waited out (a deferred transaction that has to upgrade
/// fails at once with SQLITE_BUSY), a plain `BEGIN` on PostgreSQL.
///
/// Boxed, as every acquire of a pool's connection in the store: sqlx holds
/// a whole connection attempt inline while it acquires (13 KB for
/// PostgreSQL, 3 KB for SQLite), and a future awaiting it unboxed carries
/// as much for as long as it lives, on either backend (a call compiles
/// both): every turn, and every session's worker, idle or not
/// (PERFORMANCE.md, "What a live session holds").
macro_rules! begin_write {
    ($store:expr, $pool:ident) => {
        match $store.backend {
            $crate::store::Backend::Sqlite(_) => {
                Box::pin($pool.begin_with("BEGIN IMMEDIATE")).await?
            }
            $crate::store::Backend::Postgres(_) => Box::pin($pool.begin()).await?,
        }
    };
}
pub(crate) use begin_write;

/// Runs `$body`, one write whose statement returns rows (`RETURNING`),
/// on `$backend` with `$executor` bound to where it runs: on SQLite an
/// explicit transaction, committed after it. sqlx hands SQLite's returned
/// rows back before the statement's implicit commit and drops that
/// commit's error (launchbadge/sqlx#2099), so on a full disk an insert
/// would report an id that was never stored; the explicit `COMMIT`
/// reports it. PostgreSQL commits before answering, so it runs as is.
macro_rules! returning {
    ($backend:expr, $executor:ident => $body:expr) => {
        match $backend {
            $crate::store::Backend::Sqlite(pool) => {
                let mut tx = Box::pin(pool.begin_with("BEGIN IMMEDIATE")).await?;
                let out = {
                    let $executor = &mut *tx;
                    $body
                };
                tx.commit().await?;
                out
            }
            $crate::store::Backend::Postgres($executor) => $body,
        }
    };
}
pub(crate) use returning;

/// SQLite: runs the statements `query` holds (separated by `;`, their
/// parameters bound in order, or by number: `$n` is the query's n-th) in one trip to the connection's thread; what
/// each gave, in order (`what` names the batch in errors). Every statement
/// is otherwise a trip of its own, two thread wake-ups that cost more CPU
/// than a small write (PERFORMANCE.md, "CPU per turn"). sqlx runs such a
/// query statement by statement but marks it deprecated
/// (launchbadge/sqlx#3108: only its SQLite driver can); the store's tests
/// run every caller on SQLite, so an upgrade that drops it fails them.
#[allow(deprecated)]
async fn sqlite_batch(
    conn: &mut sqlx::SqliteConnection,
    query: sqlx::query::Query<'_, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
    what: &'static str,
) -> Steps {
    use futures::TryStreamExt;
    let mut steps = Vec::new();
    let mut rows = Vec::new();
    let mut stream = query.fetch_many(conn);
    let stopped = loop {
        match stream.try_next().await {
            Ok(Some(sqlx::Either::Left(result))) => steps.push(Step {
                result,
                rows: std::mem::take(&mut rows),
            }),
            Ok(Some(sqlx::Either::Right(row))) => rows.push(row),
            Ok(None) => break None,
            Err(err) => break Some(err),
        }
    };
    Steps {
        what,
        steps,
        stopped,
    }
}

/// SQLite: pushes onto `qb` a statement that stops its batch, failing,
/// unless `condition` (an SQL expression `push` pushes) holds, so that the
/// statements after it (a `COMMIT` among them) run only if it does;
/// [`Steps::refused_at`] tells this stop from others. Outside a trigger
/// SQLite has no statement that raises an error on a condition, but
/// `abs()` of the smallest integer is one ("integer overflow").
fn sqlite_require(
    qb: &mut sqlx::QueryBuilder<sqlx::Sqlite>,
    push: impl FnOnce(&mut sqlx::QueryBuilder<sqlx::Sqlite>),
) {
    qb.push("SELECT abs(CASE WHEN ");
    push(qb);
    qb.push(" THEN 0 ELSE -9223372036854775807 - 1 END)");
}

/// What one statement of a [`sqlite_batch`] gave.
struct Step {
    result: sqlx::sqlite::SqliteQueryResult,
    rows: Vec<sqlx::sqlite::SqliteRow>,
}

/// What the statements of a [`sqlite_batch`] gave, in order, and the
/// error of the one that failed, which stopped it.
struct Steps {
    what: &'static str,
    steps: Vec<Step>,
    stopped: Option<sqlx::Error>,
}

impl Steps {
    /// These, or the error that stopped the batch short.
    fn finished(mut self) -> Result<Self> {
        match self.stopped.take() {
            Some(err) => Err(err.into()),
            None => Ok(self),
        }
    }

    /// Whether the batch stopped at statement `at`, a [`sqlite_require`]
    /// whose condition did not hold.
    fn refused_at(&self, at: usize) -> bool {
        self.steps.len() == at
            && matches!(&self.stopped, Some(sqlx::Error::Database(db)) if db.message() == "integer overflow")
    }

    /// Statement `at`'s (an error if the batch stopped short of it).
    fn get(&self, at: usize) -> Result<&Step> {
        self.steps.get(at).ok_or_else(|| StoreError::Corrupt {
            what: self.what,
            reason: format!(
                "statement {at} of a batch gave nothing ({} did)",
                self.steps.len()
            ),
        })
    }
}

/// SQLite: a write transaction that a batch ([`sqlite_batch`]) begins with
/// its first statement, `BEGIN IMMEDIATE`, instead of sqlx's `begin`, a
/// trip of its own. sqlx does not know of it, so nothing of sqlx's ends
/// it: [`end`](Self::end) does (`COMMIT` or `ROLLBACK`), or else its
/// connection is closed as it drops instead of going back to the pool —
/// after an error, or with its future dropped mid-batch, the transaction
/// may still be open, and closing the connection rolls it back.
struct SqliteWrite {
    conn: sqlx::pool::PoolConnection<sqlx::Sqlite>,
    ended: bool,
    /// Its turn at the writer, until it drops.
    _turn: WriteTurn,
}

/// SQLite writes one transaction at a time. A writer that finds another
/// writing waits in SQLite's busy handler, which sleeps 1, 2, 5, 10 … up to
/// 100 ms between looks and so wakes long after the lock is free: the
/// intake's batches, waiting so behind turns being opened or committed,
/// stalled for tens of milliseconds. The store's own writers take turns
/// here instead, woken as the one before ends, and the inbox's batches go
/// first: others enter the queue one at a time, so a batch waits at most
/// for the write in progress and one more.
#[derive(Debug)]
pub(crate) struct WriteGate {
    turn: std::sync::Arc<tokio::sync::Mutex<()>>,
    others: tokio::sync::Semaphore,
}

/// A writer's turn at [`WriteGate`].
pub(crate) struct WriteTurn {
    _turn: tokio::sync::OwnedMutexGuard<()>,
}

impl WriteGate {
    fn new() -> Self {
        Self {
            turn: Default::default(),
            others: tokio::sync::Semaphore::new(1),
        }
    }

    /// The inbox's turn: next after the write in progress and at most one
    /// other waiting.
    pub(crate) async fn first(&self) -> WriteTurn {
        WriteTurn {
            _turn: self.turn.clone().lock_owned().await,
        }
    }

    /// Any other writer's turn.
    pub(crate) async fn next(&self) -> WriteTurn {
        // The semaphore is never closed.
        let _queued = self.others.acquire().await;
        self.first().await
    }
}

impl SqliteWrite {
    /// A batch's start: its first statement, whose result is the
    /// batch's first, begins the transaction.
    fn batch() -> sqlx::QueryBuilder<sqlx::Sqlite> {
        sqlx::QueryBuilder::new("BEGIN IMMEDIATE")
    }

    /// Runs `query`, begun as [`batch`](Self::batch) begins, on a
    /// connection of `pool` in one trip; the transaction it leaves open and
    /// what each statement gave (the batch may have stopped short).
    async fn run(
        (pool, gate): (&SqlitePool, &WriteGate),
        query: sqlx::query::Query<'_, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
        what: &'static str,
    ) -> Result<(Self, Steps)> {
        let turn = gate.next().await;
        let mut write = Self {
            conn: Box::pin(pool.acquire()).await?,
            ended: false,
            _turn: turn,
        };
        let steps = sqlite_batch(&mut write.conn, query, what).await;
        Ok((write, steps))
    }

    /// Runs `query`, a whole transaction (`BEGIN IMMEDIATE; …; COMMIT`), on
    /// a connection of `pool` in one trip; what each statement gave.
    async fn whole(
        pool: (&SqlitePool, &WriteGate),
        query: sqlx::query::Query<'_, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
        what: &'static str,
    ) -> Result<Steps> {
        let (write, steps) = Self::run(pool, query, what).await?;
        write.committed(steps)
    }

    /// `steps`, those of a batch whose last statement is its `COMMIT`, if
    /// it ran to the end; else the error that stopped it (the connection,
    /// maybe still in the transaction, is closed as this drops).
    fn committed(mut self, steps: Steps) -> Result<Steps> {
        let steps = steps.finished()?;
        self.ended = true;
        Ok(steps)
    }

    /// Ends the transaction with `COMMIT` (`commit`) or `ROLLBACK`.
    async fn end(mut self, commit: bool) -> Result<()> {
        let sql = if commit { "COMMIT" } else { "ROLLBACK" };
        sqlx::raw_sql(sql).execute(&mut *self.conn).await?;
        self.ended = true;
        Ok(())
    }
}

impl Drop for SqliteWrite {
    fn drop(&mut self) {
        if !self.ended {
            self.conn.close_on_drop();
        }
    }
}

/// Failures of the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// `storage.url` is not a URL this store understands.
    #[error("storage.url: {0}")]
    Url(String),
    /// The database could not be reached (retryable).
    #[error("database unreachable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// A statement failed.
    #[error("database error: {0}")]
    Query(#[source] sqlx::Error),
    /// Applying the migrations failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// SQLite's file system is (nearly) full (retryable).
    #[error("disk full under {dir}: {detail}")]
    Full {
        /// The database's directory.
        dir: String,
        /// Free space, or why it could not be read.
        detail: String,
    },
    /// The lease a write was made under is no longer this replica's:
    /// another replica took the session over, and the write was not made.
    #[error("lease {lease} is no longer held by this replica")]
    Fenced {
        /// The lease's name.
        lease: String,
    },
    /// Another daemon runs on the same SQLite file.
    #[error(
        "another switchboard daemon is running on {file}: SQLite runs one replica \
         (several replicas share a PostgreSQL database)"
    )]
    Busy {
        /// The database file.
        file: String,
    },
    /// A stored value could not be decoded.
    #[error("corrupt stored value in {what}: {reason}")]
    Corrupt {
        /// Table and column.
        what: &'static str,
        /// What was wrong.
        reason: String,
    },
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        match err {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_) => StoreError::Unavailable(err),
            sqlx::Error::Database(ref db) if health::away(db.as_ref()) => {
                StoreError::Unavailable(err)
            }
            other => StoreError::Query(other),
        }
    }
}

impl StoreError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_) | StoreError::Full { .. })
    }
}

/// Result of store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Clone, Debug)]
pub(crate) enum Backend {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Handle to the database; cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    backend: Backend,
    /// The inbox's group commit's own connections (the pool itself for an
    /// in-memory SQLite database): a delivery's commit never queues for a
    /// connection behind the turns a burst opens.
    inbox_backend: Backend,
    /// Serialises appends to the audit chain within this process.
    audit_lock: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// SQLite: the writers' turns (see [`WriteGate`]).
    gate: std::sync::Arc<WriteGate>,
    /// SQLite on a file: the connection the inbox's committers keep.
    inbox_held: inbox::Held,
    /// SQLite: the keys of the inbox's events not yet indexed.
    inbox_keys: inbox::Keys,
    /// The inbox's group commit, started on first use.
    inbox_queue: std::sync::Arc<std::sync::OnceLock<inbox::InboxQueue>>,
    /// SQLite: the directory of the database file, whose free space counts
    /// in [`Store::ping`].
    disk: Option<std::sync::Arc<Path>>,
    /// SQLite: the database file.
    file: Option<std::sync::Arc<Path>>,
    /// SQLite: the write-ahead log's index (`-shm`), beside the file a link
    /// points at (SQLite follows links); none under a VFS named in the URL,
    /// which may keep the index in memory and leave a stale file.
    log_index: Option<std::sync::Arc<Path>>,
    /// SQLite: woken when the inbox's commits left the write-ahead log
    /// long enough to copy in the background ([`Store::log_grown`]).
    log_grown: std::sync::Arc<tokio::sync::Notify>,
    /// PostgreSQL: notices on their way out (see `notify_soon`).
    notices: std::sync::Arc<std::sync::OnceLock<tokio::sync::mpsc::Sender<(&'static str, String)>>>,
    /// PostgreSQL: what this schema's notice channels end with (see
    /// `leases::channel`): NOTIFY reaches the whole database, and two
    /// deployments in two schemas of it must not hear each other.
    scope: std::sync::Arc<str>,
}

/// Which database a store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// Embedded SQLite file.
    Sqlite,
    /// PostgreSQL server.
    Postgres,
}

impl Store {
    /// Connects to the database named by `config.url` (creating a SQLite
    /// file and its directory if missing). Does not migrate.
    pub async fn connect(config: &StorageConfig) -> Result<Self> {
        let url = config.url.as_str();
        let mut disk = None;
        let mut db_file = None;
        let mut scope = String::new();
        let (backend, inbox_backend) = if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)
                .map_err(|e| StoreError::Url(e.to_string()))?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_millis(config.busy_timeout_ms))
                .foreign_keys(true)
                // The daemon checkpoints in the background (see
                // `checkpoint` and `log_grown`) long before this, which is
                // the safety net and what resets a log written all the
                // while: the commit that crosses it checkpoints, with
                // little left to copy.
                .pragma(
                    "wal_autocheckpoint",
                    checkpoints::AUTOCHECKPOINT.to_string(),
                )
                // 1 MiB of page cache per connection, not SQLite's 2 MiB:
                // the kernel caches the file too, and a pool of busy
                // connections otherwise keeps 16 MiB after a burst.
                .pragma("cache_size", "-1024");
            let file = options.get_filename();
            let in_memory = sqlite_in_memory(url);
            if !in_memory {
                let dir = match file.parent() {
                    Some(dir) if !dir.as_os_str().is_empty() => dir,
                    _ => Path::new("."),
                };
                crate::private::private_dir(dir)
                    .and_then(|()| crate::private::private_file(file))
                    .map_err(|e| {
                        StoreError::Url(format!("cannot create {}: {e}", file.display()))
                    })?;
                disk = Some(std::sync::Arc::from(dir));
                db_file = Some(std::sync::Arc::from(file));
            }
            let pool = sqlite_pool(config.max_connections)
                .connect_with(options.clone())
                .await?;
            // In memory, a second pool could open a database of its own
            // (`cache=private`). On a file, the inbox writes through one
            // connection, which its committers keep (`inbox::Held`).
            let inbox = if in_memory {
                pool.clone()
            } else {
                sqlite_pool(1).connect_lazy_with(options)
            };
            (Backend::Sqlite(pool), Backend::Sqlite(inbox))
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            let pool = postgres_pool(config.max_connections).connect(url).await?;
            let inbox = postgres_pool(inbox::COMMITTERS as u32).connect_lazy(url)?;
            let schema: String = sqlx::query_scalar("SELECT COALESCE(current_schema(), '')")
                .fetch_one(&pool)
                .await?;
            use sha2::Digest;
            scope = hex::encode(&sha2::Sha256::digest(schema.as_bytes())[..6]);
            (Backend::Postgres(pool), Backend::Postgres(inbox))
        } else {
            return Err(StoreError::Url(format!(
                "unsupported database URL {:?}",
                crate::config::redact_url(url)
            )));
        };
        let log_index = db_file
            .as_deref()
            .filter(|_| !url.contains("vfs="))
            .map(|file: &Path| {
                let mut name = std::fs::canonicalize(file)
                    .unwrap_or_else(|_| file.to_path_buf())
                    .into_os_string();
                name.push("-shm");
                std::sync::Arc::from(Path::new(&name))
            });
        Ok(Self {
            backend,
            inbox_backend,
            audit_lock: Default::default(),
            gate: std::sync::Arc::new(WriteGate::new()),
            inbox_held: db_file.is_some().then(Default::default),
            inbox_keys: inbox::keys_of_file(db_file.as_deref()),
            inbox_queue: Default::default(),
            disk,
            file: db_file,
            log_index,
            log_grown: Default::default(),
            notices: Default::default(),
            scope: scope.into(),
        })
    }

    /// SQLite: takes the database file for this process alone, as long as
    /// the returned lock lives (a second daemon on the same file is
    /// refused: SQLite runs one replica). `None` for PostgreSQL and an
    /// in-memory database.
    pub fn lock_single_replica(&self) -> Result<Option<nix::fcntl::Flock<std::fs::File>>> {
        let Some(file) = self.file.as_deref() else {
            return Ok(None);
        };
        let mut name = file.as_os_str().to_owned();
        name.push(".lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&name)
            .map_err(|e| {
                StoreError::Url(format!("cannot open {}: {e}", Path::new(&name).display()))
            })?;
        let lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|_| StoreError::Busy {
                file: file.display().to_string(),
            })?;
        // The one process running sessions on the file: its inbox's keys
        // may wait in memory to be indexed.
        self.inbox_keys.defer();
        Ok(Some(lock))
    }

    /// A SQLite file: a mark of its write-ahead log that changes with every
    /// commit, by any connection or process (see `log_index.rs`). `None` for
    /// PostgreSQL, an in-memory database, a VFS named in the URL, an index
    /// that is not a regular file, or one caught while it is written.
    pub fn log_mark(&self) -> Option<LogMark> {
        log_index::mark(self.log_index.as_deref()?)
    }

    /// Connects and applies pending migrations.
    pub async fn open(config: &StorageConfig) -> Result<Self> {
        let store = Self::connect(config).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// Applies every pending migration; running it again changes nothing.
    /// Returns how many migrations were applied now.
    pub async fn migrate(&self) -> Result<usize> {
        let before = self.applied_migrations().await?;
        match &self.backend {
            Backend::Sqlite(pool) => SQLITE_MIGRATIONS.run(pool).await?,
            Backend::Postgres(pool) => POSTGRES_MIGRATIONS.run(pool).await?,
        }
        Ok(self.applied_migrations().await? - before)
    }

    async fn applied_migrations(&self) -> Result<usize> {
        let exists_sql = match self.kind() {
            BackendKind::Sqlite => {
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'"
            }
            BackendKind::Postgres => {
                "SELECT COUNT(*) FROM pg_tables WHERE tablename = '_sqlx_migrations' AND schemaname = current_schema()"
            }
        };
        let exists: i64 =
            with_pool!(self, pool => sqlx::query_scalar(exists_sql).fetch_one(pool).await?);
        if exists == 0 {
            return Ok(0);
        }
        let n: i64 = with_pool!(self, pool => sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations WHERE success").fetch_one(pool).await?);
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// The schema version: the newest applied migration, 0 when none.
    pub async fn schema_version(&self) -> Result<i64> {
        if self.applied_migrations().await? == 0 {
            return Ok(0);
        }
        let v: Option<i64> = with_pool!(self, pool => sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success").fetch_one(pool).await?);
        Ok(v.unwrap_or(0))
    }

    /// Which backend this store uses.
    pub fn kind(&self) -> BackendKind {
        match self.backend {
            Backend::Sqlite(_) => BackendKind::Sqlite,
            Backend::Postgres(_) => BackendKind::Postgres,
        }
    }

    /// Closes every pooled connection (waits for checked-out ones).
    pub async fn close(&self) {
        with_pool!(self, pool => pool.close().await);
        match &self.inbox_backend {
            Backend::Sqlite(pool) => {
                // Marked closed now: no batch keeps a connection after this.
                let closing = pool.close();
                if let Some(mut kept) = inbox::lock_held(&self.inbox_held).await {
                    kept.take();
                }
                closing.await
            }
            Backend::Postgres(pool) => pool.close().await,
        }
    }
}

/// Milliseconds since the Unix epoch: the timestamp format of every table.
pub fn now_ms() -> i64 {
    crate::clock::Clock::system().now_ms()
}

/// `text` as both backends can store it: PostgreSQL's text cannot hold NUL,
/// so each NUL becomes U+FFFD (the replacement character). Text without
/// one is not copied.
pub fn storable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        std::borrow::Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// A fresh random identifier: 128 bits from the OS generator, as hex.
pub fn new_id() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::WriteGate;
    use std::sync::{Arc, Mutex};

    /// The inbox's batch, arriving while others wait, goes after the write
    /// in progress and at most one of them.
    #[tokio::test]
    async fn the_inbox_waits_for_one_other_writer_at_most() {
        let gate = Arc::new(WriteGate::new());
        let order = Arc::new(Mutex::new(Vec::new()));
        let writing = gate.next().await;
        let mut waiting = Vec::new();
        for n in 0..4 {
            let (gate, order) = (gate.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                let _turn = gate.next().await;
                order.lock().unwrap().push(format!("other {n}"));
            }));
            tokio::task::yield_now().await;
        }
        let inbox = {
            let (gate, order) = (gate.clone(), order.clone());
            tokio::spawn(async move {
                let _turn = gate.first().await;
                order.lock().unwrap().push("inbox".to_string());
            })
        };
        tokio::task::yield_now().await;
        drop(writing);
        inbox.await.unwrap();
        for w in waiting {
            w.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        let at = order.iter().position(|o| o == "inbox").unwrap();
        assert!(at <= 1, "{order:?}");
        assert_eq!(order.len(), 5);
    }

    /// In memory, the inbox commits through the store's own pool: a pool
    /// of its own would be a database of its own.
    #[tokio::test]
    async fn an_in_memory_store_keeps_its_deliveries() {
        let config = crate::config::StorageConfig {
            url: "sqlite::memory:".into(),
            ..Default::default()
        };
        let store = super::Store::open(&config).await.unwrap();
        let inserted = store
            .inbox_insert(&super::NewInboxEvent {
                platform: "webhook",
                dedupe_key: "webhook:github:1",
                session_key: "webhook:github:o/r#1",
                payload: "{}",
            })
            .await
            .unwrap();
        let super::InboxInsert::Inserted(id) = inserted else {
            panic!("{inserted:?}");
        };
        let row = store.inbox_event(id).await.unwrap().unwrap();
        assert_eq!(row.dedupe_key, "webhook:github:1");
        store.close().await;
    }
}
