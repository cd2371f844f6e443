//! Full-text search over stored messages, on both backends: what it
//! finds, its syntax taken as text, and SQLite's index catching up; the
//! mark by which the upkeep that catches it up sees nothing was written.

use crate::backend_tests;

use std::time::{Duration, Instant};

use switchboard::store::{BackendKind, LogMark, NewMessage, NewSession, Store};

use super::{dm, say};

backend_tests!(
    search_finds_words_and_scopes_to_user,
    search_treats_syntax_as_text,
    search_indexes_what_was_stored_since_once,
    the_log_mark_moves_with_every_commit_and_nothing_else,
);

async fn search_finds_words_and_scopes_to_user(store: Store) {
    let alice = store.open_session(&dm("telegram:dm:alice")).await.unwrap();
    let bob = store
        .open_session(&NewSession {
            user_id: Some("bob"),
            ..dm("telegram:dm:bob")
        })
        .await
        .unwrap();
    for (session, text) in [
        (&alice.id, "the deploy pipeline failed on staging"),
        (&alice.id, "lunch plans"),
        (&bob.id, "staging deploy is green again"),
    ] {
        say(&store, session, "user", text).await;
    }
    let all = store
        .search_messages("DEPLOY staging", None, 10)
        .await
        .unwrap();
    assert_eq!(all.len(), 2, "{all:?}");
    let only_bob = store
        .search_messages("deploy", Some(("telegram", "bob")), 10)
        .await
        .unwrap();
    assert_eq!(only_bob.len(), 1);
    assert_eq!(only_bob[0].session_key, "telegram:dm:bob");
    assert!(
        store
            .search_messages("nonexistentword", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .search_messages("staging", None, 1)
            .await
            .unwrap()
            .len(),
        1,
        "limit"
    );
}

async fn search_treats_syntax_as_text(store: Store) {
    let s = store.open_session(&dm("telegram:dm:7")).await.unwrap();
    say(&store, &s.id, "user", "error: NEAR(foo) OR \"bar\"").await;
    for hostile in [
        "\"",
        "NEAR(",
        "foo OR",
        "*",
        "a\"b",
        "'; DROP TABLE messages; --",
        "   ",
        "!!!",
    ] {
        store.search_messages(hostile, None, 5).await.unwrap();
    }
    let hits = store.search_messages("near(foo)", None, 5).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(
        store.messages(&s.id).await.unwrap().len(),
        1,
        "table intact"
    );
}

async fn search_indexes_what_was_stored_since_once(store: Store) {
    let sqlite = store.kind() == BackendKind::Sqlite;
    let s = store.open_session(&dm("telegram:dm:8")).await.unwrap();
    // More than one of the index's transactions holds.
    let texts: Vec<String> = (0..2001).map(|i| format!("rollout step {i}")).collect();
    let rows: Vec<NewMessage> = texts
        .iter()
        .map(|content| NewMessage {
            role: "user",
            content,
            ..Default::default()
        })
        .collect();
    store.append_messages(&s.id, &rows).await.unwrap();
    assert_eq!(
        store.index_messages().await.unwrap(),
        if sqlite { 2001 } else { 0 }
    );
    assert_eq!(store.index_messages().await.unwrap(), 0, "caught up");
    let hits = store.search_messages("step 7", None, 10).await.unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    // Stored after the last catch-up: the search indexes it first, once.
    say(&store, &s.id, "assistant", "the canary step passed").await;
    say(&store, &s.id, "assistant", "the canary is live").await;
    let canary = store.search_messages("canary", None, 10).await.unwrap();
    assert_eq!(canary.len(), 2, "{canary:?}");
    assert_eq!(store.index_messages().await.unwrap(), 0);
    let again = store.search_messages("canary", None, 10).await.unwrap();
    assert_eq!(again.len(), 2, "indexed once: {again:?}");
    let steps = store.search_messages("step", None, 5000).await.unwrap();
    assert_eq!(steps.len(), 2002);
}

/// The log's mark, once it is not caught mid-write.
async fn settled_mark(store: &Store) -> LogMark {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(mark) = store.log_mark() {
            return mark;
        }
        assert!(Instant::now() < deadline, "the log never settled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn the_log_mark_moves_with_every_commit_and_nothing_else(store: Store) {
    let s = store.open_session(&dm("telegram:dm:9")).await.unwrap();
    if store.kind() == BackendKind::Postgres {
        assert_eq!(store.log_mark(), None);
        assert!(store.checkpoint().await.unwrap());
        return;
    }
    say(&store, &s.id, "user", "the first line").await;
    let written = settled_mark(&store).await;
    assert!(
        store.checkpoint().await.unwrap(),
        "no reader: the whole log copied"
    );
    assert_eq!(store.index_messages().await.unwrap(), 1);
    let indexed = settled_mark(&store).await;
    assert_ne!(indexed, written, "the index's catch-up is a commit");
    assert!(store.checkpoint().await.unwrap());
    assert_eq!(store.index_messages().await.unwrap(), 0);
    let hits = store.search_messages("first", None, 10).await.unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(
        settled_mark(&store).await,
        indexed,
        "checkpoints, reads and a caught-up index write nothing"
    );
    say(&store, &s.id, "assistant", "the second line").await;
    assert_ne!(settled_mark(&store).await, indexed);
}

/// Reading the mark leaves SQLite's own locks on the log's index: closing
/// any descriptor of a file drops all of a process's POSIX locks on it, and
/// a second process that then finds the index unlocked truncates it under
/// the first one's mapping (SIGBUS) and rebuilds it while the first writes.
#[tokio::test]
async fn reading_the_log_mark_leaves_sqlites_locks_on_the_index() {
    let (store, dir) = crate::common::sqlite_store().await;
    let s = store.open_session(&dm("telegram:dm:9")).await.unwrap();
    say(&store, &s.id, "user", "a line").await;
    let index = dir.path().join("test.db-shm");
    let held = locks_held_on(&index);
    assert!(!held.is_empty(), "SQLite holds the index while connected");
    for _ in 0..3 {
        settled_mark(&store).await;
        assert_eq!(locks_held_on(&index), held);
    }
    say(&store, &s.id, "user", "another line").await;
    assert_eq!(locks_held_on(&index), held);
    store.close().await;
}

/// The POSIX locks this process holds on `file`, from `/proc/locks`
/// (`1: POSIX ADVISORY READ <pid> <dev>:<inode> <start> <end>`).
fn locks_held_on(file: &std::path::Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let inode = format!(":{}", std::fs::metadata(file).unwrap().ino());
    let pid = std::process::id().to_string();
    let mut held: Vec<String> = std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 8 && f[1] == "POSIX" && f[4] == pid && f[5].ends_with(&inode))
        .map(|f| format!("{} {}-{}", f[3], f[6], f[7]))
        .collect();
    held.sort();
    held
}
