//! PostgreSQL connections: a query the server ends, and the inbox's own
//! connections while the pool's wait on a lock.

use switchboard::store::{InboxInsert, NewInboxEvent, Store};

/// A PostgreSQL store with one pooled connection, that connection's query
/// waiting on a lock the test holds.
struct Locked {
    store: Store,
    admin: sqlx::PgPool,
    lock: sqlx::Transaction<'static, sqlx::Postgres>,
    waiting: tokio::task::JoinHandle<switchboard::store::Result<Vec<switchboard::store::Session>>>,
    /// The store's `application_name`.
    name: String,
}

/// A PostgreSQL store with one pooled connection, known to the server by
/// the name returned, and a pool of the test's own.
async fn one_connection(db: &crate::common::PgTestDb) -> (Store, sqlx::PgPool, String) {
    one_connection_with(db, "").await
}

/// [`one_connection`] with server settings (`-c name=value`, URL-encoded,
/// each ending in `%20`) before the schema's.
async fn one_connection_with(
    db: &crate::common::PgTestDb,
    settings: &str,
) -> (Store, sqlx::PgPool, String) {
    let name = format!("sb_{}", switchboard::store::new_id());
    let url = db
        .config
        .url
        .replace("options=", &format!("options={settings}"));
    let config = switchboard::config::StorageConfig {
        url: format!("{url}&application_name={name}"),
        max_connections: 1,
        ..db.config.clone()
    };
    let store = Store::open(&config).await.unwrap();
    let admin = sqlx::PgPool::connect(&crate::common::postgres_url())
        .await
        .unwrap();
    (store, admin, name)
}

/// Ends the server's connections named `name`: whether each was ended.
async fn terminate(admin: &sqlx::PgPool, name: &str) -> Vec<bool> {
    sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
    )
    .bind(name)
    .fetch_all(admin)
    .await
    .unwrap()
}

async fn pool_waiting_on_a_lock(db: &crate::common::PgTestDb) -> Locked {
    let (store, admin, name) = one_connection(db).await;
    let mut lock = admin.begin().await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "LOCK TABLE {}.sessions IN ACCESS EXCLUSIVE MODE",
        db.schema()
    )))
    .execute(&mut *lock)
    .await
    .unwrap();
    let waiting = tokio::spawn({
        let store = store.clone();
        async move { store.list_sessions(1).await }
    });
    crate::common::eventually("the store's query waits on the lock", || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
        )
        .bind(&name)
        .fetch_one(&admin)
        .await
        .unwrap()
            == 1
    })
    .await;
    Locked {
        store,
        admin,
        lock,
        waiting,
        name,
    }
}

/// A PostgreSQL restart ends every connection with `57P01` (terminating
/// connection due to administrator command), also one in the middle of a
/// query: the store says so as storage away (retryable, so a turn waits
/// instead of failing) and takes a new connection once the server answers.
#[tokio::test]
async fn a_query_the_server_ends_is_storage_away_and_the_store_comes_back() {
    let Some(db) = crate::common::PgTestDb::create().await else {
        return;
    };
    let locked = pool_waiting_on_a_lock(&db).await;
    assert_eq!(terminate(&locked.admin, &locked.name).await, [true]);
    let err = locked.waiting.await.unwrap().unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    locked.lock.rollback().await.unwrap();
    locked.store.list_sessions(1).await.unwrap();
    locked.store.ping().await.unwrap();
    locked.store.close().await;
    locked.admin.close().await;
    db.drop().await;
}

/// A connection is pinged as it is taken only after it sat unused for a
/// second (`store::pools::IDLE_PING`; taken sooner, the ping it had as it
/// went back to the pool stands): one the server ended while it sat unused
/// is then found and replaced, and the statement runs.
#[tokio::test]
async fn a_connection_the_server_ended_while_unused_is_replaced_before_the_next_statement() {
    let Some(db) = crate::common::PgTestDb::create().await else {
        return;
    };
    let (store, admin, name) = one_connection(&db).await;
    store.list_sessions(1).await.unwrap();
    assert_eq!(
        terminate(&admin, &name).await,
        [true],
        "the store's one connection, unused"
    );
    // What is tested is the pause itself: longer than the pool's.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    store
        .list_sessions(1)
        .await
        .expect("the ended connection was replaced before the statement");
    assert!(!store.is_away().await);
    store.close().await;
    admin.close().await;
    db.drop().await;
}

/// A server that ends idle connections (`idle_session_timeout`, 57P05):
/// a statement on a connection it ended, taken within the second no ping
/// runs (`IDLE_PING`), fails as storage away, retryable, so its turn waits
/// for storage instead of failing its event; the next statement gets a
/// new connection.
#[tokio::test]
async fn a_connection_ended_for_sitting_idle_is_storage_away() {
    let Some(db) = crate::common::PgTestDb::create().await else {
        return;
    };
    let (store, admin, name) = one_connection_with(&db, "-c%20idle_session_timeout%3D200%20").await;
    let ended = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
        )
        .bind(&name)
        .fetch_one(&admin)
        .await
        .unwrap()
            == 0
    };
    store.list_sessions(1).await.unwrap();
    let used = std::time::Instant::now();
    crate::common::eventually("the server ends the idle connection", ended).await;
    let statement = store.list_sessions(1).await;
    // Past the pool's second its ping would find the connection ended
    // first and the statement would run: then nothing is tested.
    if used.elapsed() < std::time::Duration::from_millis(900) {
        let err = statement.expect_err("the ended connection was used");
        assert!(err.is_retryable(), "{err:?}");
    }
    store
        .list_sessions(1)
        .await
        .expect("a new connection after the ended one");
    store.close().await;
    admin.close().await;
    db.drop().await;
}

/// The inbox commits through connections of its own: with every pooled
/// connection held by a query waiting on a lock (the turns a burst opens,
/// in the daemon), a delivery is still committed, not queued behind them
/// until the pool's wait gives up.
#[tokio::test]
async fn a_delivery_commits_while_every_pooled_connection_waits_on_a_lock() {
    let Some(db) = crate::common::PgTestDb::create().await else {
        return;
    };
    let locked = pool_waiting_on_a_lock(&db).await;
    let inserted = locked
        .store
        .inbox_insert(&NewInboxEvent {
            platform: "webhook",
            dedupe_key: "webhook:github:while-locked",
            session_key: "webhook:github:o/r#1",
            payload: "{}",
        })
        .await
        .unwrap();
    assert!(matches!(inserted, InboxInsert::Inserted(_)), "{inserted:?}");
    assert!(
        !locked.waiting.is_finished(),
        "the lock was held throughout"
    );
    locked.lock.rollback().await.unwrap();
    locked.waiting.await.unwrap().unwrap();
    locked.store.close().await;
    locked.admin.close().await;
    db.drop().await;
}
