//! On SQLite the daemon keeps the newest dedupe keys in memory and indexes
//! them later: a key is a duplicate whether it is held, indexed, left
//! unindexed by a process that stopped, or looked up from a second store on
//! the file; another process indexes its keys as it stores them.

use sqlx::Connection;
use switchboard::config::StorageConfig;
use switchboard::store::{InboxInsert, NewInboxEvent, Store};

/// SQLite on the file at `path`.
fn on_file(path: &std::path::Path) -> StorageConfig {
    StorageConfig {
        url: format!("sqlite://{}", path.display()),
        ..StorageConfig::default()
    }
}

fn event(key: &str) -> NewInboxEvent<'_> {
    NewInboxEvent {
        platform: "webhook",
        dedupe_key: key,
        session_key: "webhook:github:o/r#1",
        payload: "{}",
    }
}

async fn insert(store: &Store, key: &str) -> InboxInsert {
    store.inbox_insert(&event(key)).await.unwrap()
}

/// The file's single-replica lock, as the daemon holds it.
type Single = Option<nix::fcntl::Flock<std::fs::File>>;

/// A store on a new file `name` in `dir`, holding the single-replica lock
/// as the daemon does (its keys wait to be indexed).
async fn daemon_store(dir: &tempfile::TempDir, name: &str) -> (StorageConfig, Store, Single) {
    let config = on_file(&dir.path().join(name));
    let store = Store::open(&config).await.unwrap();
    let single = store.lock_single_replica().unwrap();
    (config, store, single)
}

#[tokio::test]
async fn a_key_is_a_duplicate_held_indexed_and_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (config, store, single) = daemon_store(&dir, "keys.db").await;

    // Held in memory: a redelivery, a command's claim, a lookup.
    let InboxInsert::Inserted(a) = insert(&store, "webhook:a").await else {
        panic!("the first delivery is stored");
    };
    assert_eq!(insert(&store, "webhook:a").await, InboxInsert::Duplicate);
    assert!(
        !store
            .inbox_claim_command(&event("webhook:a"))
            .await
            .unwrap()
    );
    let beside = Store::open(&config).await.unwrap();
    assert_eq!(
        beside.inbox_state("webhook:a").await.unwrap().map(|s| s.0),
        Some(a),
        "a second store on the file finds the held key"
    );
    assert_eq!(insert(&beside, "webhook:a").await, InboxInsert::Duplicate);

    // Indexed.
    store.inbox_key_all().await.unwrap();
    assert_eq!(insert(&store, "webhook:a").await, InboxInsert::Duplicate);
    assert!(
        !store
            .inbox_claim_command(&event("webhook:a"))
            .await
            .unwrap()
    );
    assert_eq!(
        store.inbox_state("webhook:a").await.unwrap().map(|s| s.0),
        Some(a)
    );

    // A claim held, then given up: the next delivery of it is new.
    assert!(
        store
            .inbox_claim_command(&event("webhook:c"))
            .await
            .unwrap()
    );
    assert_eq!(insert(&store, "webhook:c").await, InboxInsert::Duplicate);
    store.inbox_release_command("webhook:c").await.unwrap();
    assert!(
        store
            .inbox_claim_command(&event("webhook:c"))
            .await
            .unwrap()
    );

    // Left unindexed by a process that stopped, and one a command line
    // stored meanwhile: both duplicates for the next process.
    let InboxInsert::Inserted(b) = insert(&store, "webhook:b").await else {
        panic!("a new delivery is stored");
    };
    store.close().await;
    beside.close().await;
    drop((store, beside, single));
    let mut other = sqlx::SqliteConnection::connect(&config.url).await.unwrap();
    sqlx::query(
        "INSERT INTO inbox (platform, dedupe_key, session_key, payload, received_at) \
         VALUES ('webhook', 'webhook:elsewhere', 'webhook:github:o/r#1', '{}', 0)",
    )
    .execute(&mut other)
    .await
    .unwrap();
    other.close().await.unwrap();
    let store = Store::open(&config).await.unwrap();
    assert_eq!(
        store.inbox_state("webhook:b").await.unwrap().map(|s| s.0),
        Some(b)
    );
    for key in ["webhook:a", "webhook:b", "webhook:c", "webhook:elsewhere"] {
        assert_eq!(insert(&store, key).await, InboxInsert::Duplicate, "{key}");
    }
    assert!(matches!(
        insert(&store, "webhook:d").await,
        InboxInsert::Inserted(_)
    ));
    // Without the single-replica lock (the command line), a key is
    // indexed as it is stored, for the daemon to find.
    let indexed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM inbox_keys WHERE dedupe_key = 'webhook:d'")
            .fetch_one(&mut sqlx::SqliteConnection::connect(&config.url).await.unwrap())
            .await
            .unwrap();
    assert_eq!(indexed, 1);
    store.close().await;
}

/// The daemon's held keys are indexed once the intake is quiet, however
/// few came in.
#[tokio::test]
async fn held_keys_are_indexed_once_the_intake_is_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let (config, store, _single) = daemon_store(&dir, "quiet.db").await;
    for key in ["webhook:1", "webhook:2"] {
        assert!(matches!(
            insert(&store, key).await,
            InboxInsert::Inserted(_)
        ));
    }
    let reader = sqlx::SqlitePool::connect(&config.url).await.unwrap();
    crate::common::eventually("the held keys are indexed", || {
        let reader = reader.clone();
        async move {
            let indexed: i64 = sqlx::query_scalar("SELECT count(*) FROM inbox_keys")
                .fetch_one(&reader)
                .await
                .unwrap();
            indexed == 2
        }
    })
    .await;
    reader.close().await;
    store.close().await;
}

/// Keys are indexed a chunk at a time in key order, and the mark moves
/// only when a pass has gone through them all: part way through, a key
/// indexed above the mark and one still held are both duplicates, for
/// this store, for a second one of the process on the file (sharing its
/// held keys) and for the next process.
#[tokio::test]
async fn keys_indexed_part_way_through_a_pass_are_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let (config, store, single) = daemon_store(&dir, "pass.db").await;
    let keys: Vec<String> = (0..5000u64)
        .map(|n| format!("webhook:{:016x}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
        .collect();
    let stored = futures::future::join_all(keys.iter().map(|key| insert(&store, key))).await;
    assert!(stored.iter().all(|s| matches!(s, InboxInsert::Inserted(_))));

    // The quiet intake indexes a chunk every 50 ms: catch keys indexed
    // above the mark.
    let reader = sqlx::SqlitePool::connect(&config.url).await.unwrap();
    crate::common::eventually("a pass is part way through", || {
        let reader = reader.clone();
        async move {
            let above: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM inbox_keys WHERE id > (SELECT upto FROM inbox_keyed)",
            )
            .fetch_one(&reader)
            .await
            .unwrap();
            above > 0
        }
    })
    .await;
    let beside = Store::open(&config).await.unwrap();
    for on in [&store, &beside] {
        let again = futures::future::join_all(keys.iter().map(|key| insert(on, key))).await;
        assert!(again.iter().all(|s| *s == InboxInsert::Duplicate));
    }
    beside.close().await;
    store.close().await;
    drop((store, beside, single));

    let store = Store::open(&config).await.unwrap();
    let _single = store.lock_single_replica().unwrap();
    let again = futures::future::join_all(keys.iter().map(|key| insert(&store, key))).await;
    assert!(again.iter().all(|s| *s == InboxInsert::Duplicate));
    store.inbox_key_all().await.unwrap();
    let (indexed, mark): (i64, i64) =
        sqlx::query_as("SELECT (SELECT count(*) FROM inbox_keys), (SELECT upto FROM inbox_keyed)")
            .fetch_one(&reader)
            .await
            .unwrap();
    assert_eq!(indexed, keys.len() as i64);
    assert_eq!(mark, keys.len() as i64);
    reader.close().await;
    store.close().await;
}

/// An event another process stored without indexing its key (it stopped
/// between its commit and the index) is still a duplicate once the
/// daemon's mark has passed it.
#[tokio::test]
async fn another_process_s_unindexed_event_stays_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let (config, store, _single) = daemon_store(&dir, "foreign.db").await;
    assert!(matches!(
        insert(&store, "webhook:before").await,
        InboxInsert::Inserted(_)
    ));
    let other = sqlx::SqlitePool::connect(&config.url).await.unwrap();
    sqlx::query(
        "INSERT INTO inbox (platform, dedupe_key, session_key, payload, received_at) \
         VALUES ('webhook', 'webhook:unindexed', 'webhook:github:o/r#1', '{}', 0)",
    )
    .execute(&other)
    .await
    .unwrap();
    let InboxInsert::Inserted(after) = insert(&store, "webhook:after").await else {
        panic!("a new delivery is stored");
    };
    crate::common::eventually("the mark passes the other process's event", || {
        let other = other.clone();
        async move {
            let upto: i64 = sqlx::query_scalar("SELECT upto FROM inbox_keyed")
                .fetch_one(&other)
                .await
                .unwrap();
            upto >= after
        }
    })
    .await;
    assert_eq!(
        insert(&store, "webhook:unindexed").await,
        InboxInsert::Duplicate
    );
    other.close().await;
    store.close().await;
}
