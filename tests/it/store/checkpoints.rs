//! SQLite's write-ahead log copied in the background as the inbox's
//! commits grow it, not inside a commit its senders wait for.

use std::time::Duration;

use futures::FutureExt;
use switchboard::store::{NewInboxEvent, Store};

/// Stores `count` deliveries of 16 KiB (four pages of the log each),
/// numbered from `from`, 16 at a time so that they share commits.
async fn deliver(store: &Store, from: usize, count: usize) {
    let payload = format!("{{\"body\":\"{}\"}}", "x".repeat(16 * 1024));
    for chunk in (from..from + count).collect::<Vec<_>>().chunks(16) {
        let inserts = chunk.iter().map(|n| {
            let (store, payload) = (store.clone(), payload.clone());
            async move {
                let key = format!("webhook:github:{n}");
                store
                    .inbox_insert(&NewInboxEvent {
                        platform: "webhook",
                        dedupe_key: &key,
                        session_key: "webhook:github:o/r#1",
                        payload: &payload,
                    })
                    .await
                    .unwrap();
            }
        });
        futures::future::join_all(inserts).await;
    }
}

#[tokio::test]
async fn the_inbox_asks_for_a_checkpoint_once_its_commits_grew_the_log() {
    let (store, _dir) = crate::common::sqlite_store().await;
    deliver(&store, 0, 20).await;
    assert!(
        store.log_grown().now_or_never().is_none(),
        "80 pages of log: no checkpoint asked for yet"
    );

    // About 4 000 pages: past the 2 500 the inbox lets grow.
    deliver(&store, 20, 1000).await;
    tokio::time::timeout(Duration::from_secs(30), store.log_grown())
        .await
        .expect("the inbox asked for a checkpoint");
    store.checkpoint_grown().await.unwrap();
    assert!(
        store.checkpoint().await.unwrap(),
        "nothing written meanwhile: the whole log was copied"
    );

    // Counted from what the checkpoint copied, not from the log's length.
    deliver(&store, 1020, 20).await;
    assert!(store.log_grown().now_or_never().is_none());
    store.close().await;
}
