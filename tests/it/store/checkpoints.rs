//! SQLite's write-ahead log copied in the background as the inbox's
//! commits grow it, not inside a commit its senders wait for; the
//! connection the inbox keeps for its commits.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use futures::FutureExt;
use sqlx::Connection;
use switchboard::store::{NewInboxEvent, Store};

/// The frames of the log of the database at `file`, and how many of them a
/// checkpoint copied, read off the log's index as SQLite lays it out
/// (<https://www.sqlite.org/walformat.html>). The descriptor stays open:
/// closing one would drop SQLite's locks on the file in this process.
fn frames(file: &Path) -> (u32, u32) {
    let mut name = file.as_os_str().to_owned();
    name.push("-shm");
    let index = Box::leak(Box::new(std::fs::File::open(name).unwrap()));
    let mut head = [0; 100];
    index.read_exact_at(&mut head, 0).unwrap();
    let word = |at: usize| u32::from_ne_bytes(head[at..at + 4].try_into().unwrap());
    (word(16), word(96))
}

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
    let (store, dir) = crate::common::sqlite_store().await;
    let file = dir.path().join("test.db");
    deliver(&store, 0, 20).await;
    assert!(
        store.log_grown().now_or_never().is_none(),
        "80 pages of log: no checkpoint asked for yet"
    );

    // About 4 000 pages: past the 2 500 the inbox lets grow.
    deliver(&store, 20, 1000).await;
    // Their keys indexed now, not when the intake is quiet, mid-test.
    store.inbox_key_all().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), store.log_grown())
        .await
        .expect("the inbox asked for a checkpoint");
    let (written, copied) = frames(&file);
    assert!(
        written - copied >= 2500,
        "{written} written, {copied} copied"
    );

    // A reader on the log keeps it from starting over.
    let mut reader = sqlx::SqliteConnection::connect(&format!("sqlite://{}", file.display()))
        .await
        .unwrap();
    sqlx::query("BEGIN").execute(&mut reader).await.unwrap();
    sqlx::query("SELECT count(*) FROM inbox")
        .execute(&mut reader)
        .await
        .unwrap();
    store.checkpoint_grown().await.unwrap();
    assert_eq!(frames(&file), (written, written), "the whole log copied");

    // Counted from what the checkpoint copied, not from the log's length.
    let _ = store.log_grown().now_or_never();
    deliver(&store, 1020, 20).await;
    let (grown, _) = frames(&file);
    assert!(grown > written, "the log went on, {grown} frames");
    assert!(store.log_grown().now_or_never().is_none());
    sqlx::query("ROLLBACK").execute(&mut reader).await.unwrap();
    reader.close().await.unwrap();
    store.close().await;
}

#[tokio::test]
async fn closing_the_store_takes_back_the_connection_the_inbox_keeps() {
    let (store, _dir) = crate::common::sqlite_store().await;
    deliver(&store, 0, 40).await;
    tokio::time::timeout(Duration::from_secs(10), store.close())
        .await
        .expect("the store closed: the inbox gave its connection back");
}
