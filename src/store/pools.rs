//! The pools a store opens: the main one and the inbox's own.

use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::SqlitePoolOptions;

/// How long a PostgreSQL connection sits unused before it is pinged as it
/// is taken again.
pub(super) const IDLE_PING: Duration = Duration::from_secs(1);

/// A pool of `max` connections to PostgreSQL. sqlx pings a connection as
/// it goes back to the pool and, unless told otherwise, again as it is
/// taken: a statement cost three round trips to the server, itself and two
/// pings (a `Sync` and the server's answer; a `perf` of the ingest bench at
/// 2 000 pull requests put the two at 12 % of the process's CPU). It is
/// pinged as it is taken only when it sat unused for [`IDLE_PING`], long
/// enough for the server to have ended it (a restart, an idle timeout on
/// the way); one the server ended sooner fails its statement with an
/// error that says storage is away (retryable), its callers wait for
/// storage and try again, and the pool opens another connection.
pub(super) fn postgres_pool(max: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .test_before_acquire(false)
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(10))
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= IDLE_PING {
                    use sqlx::Connection;
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
}

/// A pool of one PostgreSQL connection for a listener (`LISTEN`), which
/// holds it while it listens and takes it again when it broke; as sqlx's
/// own `PgListener::connect` makes, without the timeouts that would end
/// the connection it listens on.
pub(super) fn listener_pool() -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(1)
        .max_lifetime(None)
        .idle_timeout(None)
        .acquire_timeout(Duration::from_secs(10))
}

/// A listener's connection options: the store's, with the server's idle
/// timeouts off for it (a connection that only listens sits idle between
/// notices, and one the server ended loses the notices until it is back).
pub(super) fn listener_options(
    store: &sqlx::postgres::PgConnectOptions,
) -> sqlx::postgres::PgConnectOptions {
    store.clone().options([
        ("idle_session_timeout", "0"),
        ("idle_in_transaction_session_timeout", "0"),
    ])
}

/// Whether the PostgreSQL server at `url` lets this host in as the URL's
/// role with no password (its `pg_hba.conf` trusts the address): a command
/// allowed the network could then connect as the gateway does. `Err` when
/// it could not be told (the URL unreadable, the server not answering).
pub async fn postgres_lets_in_without_password(url: &str) -> Result<bool, String> {
    use sqlx::ConnectOptions;
    let options: sqlx::postgres::PgConnectOptions = url.parse().map_err(|e| format!("{e}"))?;
    let options = options.password("");
    match tokio::time::timeout(Duration::from_secs(3), options.connect()).await {
        Err(_) => Err("no answer within 3 s".into()),
        Ok(Ok(conn)) => {
            use sqlx::Connection;
            let _ = conn.close().await;
            Ok(true)
        }
        // Class 28: the server refused the role without a password.
        Ok(Err(sqlx::Error::Database(e))) if e.code().is_some_and(|c| c.starts_with("28")) => {
            Ok(false)
        }
        Ok(Err(e)) => Err(e.to_string()),
    }
}

/// Whether a SQLite URL names a database in memory (`sqlite::memory:`,
/// `mode=memory`): sqlx gives it a file name of its own making, and no
/// file holds it.
pub(super) fn sqlite_in_memory(url: &str) -> bool {
    let rest = url.trim_start_matches("sqlite:").trim_start_matches("//");
    let (database, params) = rest.split_once('?').unwrap_or((rest, ""));
    database == ":memory:" || params.split('&').any(|p| p == "mode=memory")
}

/// A pool of `max` connections to a SQLite file. A local file needs no
/// liveness ping before each query, and no recycling of its connections
/// (which would also run a reaper task that busy-loops under tokio's
/// paused test clock). A transaction SQLite ended itself is caught as the
/// connection is next taken.
pub(super) fn sqlite_pool(max: u32) -> SqlitePoolOptions {
    SqlitePoolOptions::new()
        .test_before_acquire(false)
        .idle_timeout(None)
        .max_lifetime(None)
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(10))
        .before_acquire(|conn, _| {
            Box::pin(async move {
                use sqlx::Connection;
                if !conn.is_in_transaction() {
                    return Ok(true);
                }
                // A transaction dropped unfinished is rolled back on the
                // connection's worker; the ping waits for that. A count
                // still above zero means SQLite had ended it itself (a
                // COMMIT refused for a full disk is rolled back by SQLite,
                // so sqlx's ROLLBACK fails): the connection is closed, or
                // its next transaction would be a savepoint that never
                // commits and holds the write lock.
                conn.ping().await?;
                Ok(!conn.is_in_transaction())
            })
        })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_database_in_memory_is_told_from_a_file() {
        for url in [
            "sqlite::memory:",
            "sqlite://:memory:",
            "sqlite://?mode=memory",
            "sqlite://shared?mode=memory&cache=shared",
        ] {
            assert!(super::sqlite_in_memory(url), "{url}");
        }
        for url in [
            "sqlite://data/switchboard.db",
            "sqlite:///var/lib/switchboard/db.sqlite?mode=rwc",
            "sqlite://memory.db",
        ] {
            assert!(!super::sqlite_in_memory(url), "{url}");
        }
    }
}
