//! Whether storage can take writes now, and waiting until it can again:
//! the one answer readiness, the session workers and the adapters share.
//!
//! "Away" covers a database that cannot be reached (a PostgreSQL restart
//! or a cut network) and one that cannot write (a full disk, I/O errors):
//! both pass, and what was refused in between is refused whole.

use std::path::Path;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Result, Store, StoreError, with_pool};

/// Below this much free space on a SQLite database's file system, storage
/// counts as full: the next checkpoint or write-ahead-log page may not fit.
pub const DISK_FLOOR: u64 = 1 << 20;

/// How long a probe may take before storage counts as away.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// First and longest wait between probes while storage is away.
const FIRST_WAIT: Duration = Duration::from_millis(200);
const LONGEST_WAIT: Duration = Duration::from_secs(5);

/// How often a process waiting for storage says why it is away.
const SAY_AWAY_EVERY: Duration = Duration::from_secs(60);

/// Whether a database error means storage cannot take writes now but may
/// later: SQLite's disk full (13) and I/O errors (10, with its extended
/// codes); PostgreSQL's connection exceptions (class 08), insufficient
/// resources (class 53: disk full, out of memory, too many connections),
/// a server shutting down or recovering (57P01–57P03), the connection's
/// database dropped (57P04) and a connection the server ended for sitting
/// idle, in a transaction or not (25P03, 57P05): the next connection
/// answers, or the probe says storage is away.
pub(super) fn away(err: &(dyn sqlx::error::DatabaseError + 'static)) -> bool {
    if let Some(pg) = err.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        let code = pg.code();
        return code.starts_with("08")
            || code.starts_with("53")
            || matches!(
                code,
                "57P01" | "57P02" | "57P03" | "57P04" | "57P05" | "25P03"
            );
    }
    err.code()
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| matches!(code & 0xff, 10 | 13))
}

/// Free bytes an unprivileged writer may use on the file system of `dir`.
fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    let stat = nix::sys::statvfs::statvfs(dir).map_err(std::io::Error::from)?;
    Ok(stat.blocks_available().saturating_mul(stat.fragment_size()))
}

impl Store {
    /// Whether storage can take writes: the database answers a round trip
    /// and, for SQLite, its file system has [`DISK_FLOOR`] free. Used by
    /// `/readyz`.
    pub async fn ping(&self) -> Result<()> {
        with_pool!(self, pool => sqlx::query("SELECT 1").execute(pool).await?.rows_affected());
        if let Some(dir) = self.disk.as_deref() {
            let free = free_bytes(dir).map_err(|e| StoreError::Full {
                dir: dir.display().to_string(),
                detail: e.to_string(),
            })?;
            if free < DISK_FLOOR {
                return Err(StoreError::Full {
                    dir: dir.display().to_string(),
                    detail: format!("{} KiB free, {} KiB needed", free / 1024, DISK_FLOOR / 1024),
                });
            }
        }
        Ok(())
    }

    /// Why storage is away now (the probe failed or took over 2 s).
    async fn probe(&self) -> Option<String> {
        match tokio::time::timeout(PROBE_TIMEOUT, self.ping()).await {
            Ok(Ok(())) => None,
            Ok(Err(err)) => Some(err.to_string()),
            Err(_) => Some(format!("no answer within {PROBE_TIMEOUT:?}")),
        }
    }

    /// Whether storage is away now (the probe failed or took over 2 s).
    pub async fn is_away(&self) -> bool {
        self.probe().await.is_some()
    }

    /// Waits until storage can take writes again, probing with doubling
    /// waits (200 ms up to 5 s); false when `stop` comes first. Why it is
    /// away is logged once a minute for the whole process, however many
    /// wait: an outage that does not pass (a dropped database) is said.
    pub async fn until_back(&self, stop: &CancellationToken) -> bool {
        static SAID: std::sync::Mutex<Option<tokio::time::Instant>> = std::sync::Mutex::new(None);
        let mut wait = FIRST_WAIT;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return false,
                _ = tokio::time::sleep(wait) => {}
            }
            let Some(why) = self.probe().await else {
                return true;
            };
            let now = tokio::time::Instant::now();
            let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
            if said.is_none_or(|at| now.duration_since(at) >= SAY_AWAY_EVERY) {
                *said = Some(now);
                tracing::error!(error = %why, "storage away; work waits for it");
            }
            drop(said);
            wait = (wait * 2).min(LONGEST_WAIT);
        }
    }

    /// Whether `err` is storage being away (retryable by nature, or the
    /// probe fails now), rather than something wrong with what was asked.
    pub async fn failed_from_away(&self, err: &StoreError) -> bool {
        err.is_retryable() || self.is_away().await
    }
}
