//! What taking sessions over reads and writes, for many sessions at once
//! (#45: a burst for thousands of sessions takes them in a few statements):
//! their leases, the approvals left pending in them, and their unprocessed
//! events, in order, for 600 names (one `= ANY` statement on PostgreSQL, a
//! statement a name on SQLite).

use crate::backend_tests;

use std::time::Duration;

use switchboard::store::{InboxInsert, NewInboxEvent, Store};

use super::approvals::approval;
use super::dm;

backend_tests!(
    leases_of_many_sessions_are_taken_at_once,
    the_pending_events_and_approvals_of_many_sessions_are_read_at_once,
    the_sweep_finds_sessions_whose_events_wait_by_their_owner,
);

async fn leases_of_many_sessions_are_taken_at_once(store: Store) {
    assert_eq!(
        store
            .lease_acquire("session:others", "b", 60_000)
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        store
            .lease_acquire("session:mine", "a", 60_000)
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        store.lease_acquire("session:lapsed", "b", 1).await.unwrap(),
        Some(1)
    );
    // Outlasts the 1 ms lease: a time, not an event.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut names: Vec<String> = [
        "session:free",
        "session:others",
        "session:mine",
        "session:lapsed",
    ]
    .map(String::from)
    .to_vec();
    // Past one statement's 500.
    names.extend((0..600).map(|n| format!("session:n{n}")));
    let tokens = store.lease_acquire_many(&names, "a", 60_000).await.unwrap();
    assert_eq!(tokens.len(), names.len());
    assert_eq!(tokens[..4], [Some(1), None, Some(2), Some(2)]);
    assert!(tokens[4..].iter().all(|t| *t == Some(1)), "{tokens:?}");
    let leases = store.leases().await.unwrap();
    let holder = |name: &str| {
        leases
            .iter()
            .find(|l| l.name == name)
            .map(|l| (l.holder.as_str(), l.token))
    };
    assert_eq!(holder("session:others"), Some(("b", 1)), "not taken");
    assert_eq!(holder("session:lapsed"), Some(("a", 2)));
    assert_eq!(holder("session:n599"), Some(("a", 1)));
    assert!(
        store
            .lease_acquire_many(&[], "a", 60_000)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn the_pending_events_and_approvals_of_many_sessions_are_read_at_once(store: Store) {
    let keys: Vec<String> = (0..600).map(|n| format!("github:pr:{n}")).collect();
    let mut ids = Vec::new();
    // Interleaved: the order read is the inbox's, across sessions.
    for round in 0..2 {
        for key in keys.iter().rev().take(3).chain(&keys[..2]) {
            let id = stored(&store, &format!("{key}:{round}"), key).await;
            ids.push((id, key.clone()));
        }
    }
    // Processed events are not read again.
    assert!(store.inbox_mark_processed(ids[0].0, "ok").await.unwrap());
    let wanted: Vec<&str> = keys.iter().map(String::as_str).collect();
    let pending = store.inbox_pending_of_many(&wanted).await.unwrap();
    let read: Vec<(i64, String)> = pending
        .iter()
        .map(|r| (r.id, r.session_key.clone()))
        .collect();
    assert_eq!(read, ids[1..], "every session's, in the inbox's order");
    let two = store
        .inbox_pending_of_many(&["github:pr:0", "github:pr:599"])
        .await
        .unwrap();
    assert_eq!(two.len(), 3, "{two:?}");
    assert!(store.inbox_pending_of_many(&[]).await.unwrap().is_empty());
    assert_eq!(
        store.inbox_pending_of("github:pr:1").await.unwrap().len(),
        2
    );
    assert!(store.outbox_pending_of(&wanted).await.unwrap().is_empty());

    let first = store.open_session(&dm("telegram:dm:1")).await.unwrap();
    let second = store.open_session(&dm("telegram:dm:2")).await.unwrap();
    let other = store.open_session(&dm("telegram:dm:3")).await.unwrap();
    let mut left = Vec::new();
    for session in [&first, &second, &other] {
        let record = approval(&session.id);
        store.insert_approval(&record).await.unwrap();
        left.push(record.id);
    }
    let mut many: Vec<String> = (10..600).map(|n| format!("telegram:dm:{n}")).collect();
    many.push("telegram:dm:2".into());
    many.push("telegram:dm:1".into());
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let mut found: Vec<String> = store
        .pending_prompts(Some(&many))
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    found.sort();
    let mut expected = left[..2].to_vec();
    expected.sort();
    assert_eq!(found, expected, "the two sessions', not the third's");
    assert_eq!(store.pending_prompts(None).await.unwrap().len(), 3);
    assert!(store.pending_prompts(Some(&[])).await.unwrap().is_empty());
}

/// The sweep's two questions, asked every second: which sessions have
/// events waiting and no owner, and which of a replica's own have events
/// waiting (their notice went astray). Only events older than the bound
/// count, a processed one never, and a session with several waiting is
/// named once.
async fn the_sweep_finds_sessions_whose_events_wait_by_their_owner(store: Store) {
    let mut ids = std::collections::HashMap::new();
    for (n, key) in [
        "dm:a", "dm:a", "dm:a", "dm:b", "dm:b", "dm:c", "dm:d", "dm:e",
    ]
    .into_iter()
    .enumerate()
    {
        let id = stored(&store, &format!("sweep:{n}"), key).await;
        ids.entry(key).or_insert(id);
    }
    // a's first and c's only event are done: a still has two waiting.
    for key in ["dm:a", "dm:c"] {
        assert!(store.inbox_mark_processed(ids[key], "ok").await.unwrap());
    }
    for (name, holder) in [
        ("session:dm:d", "me"),
        ("session:dm:e", "other"),
        ("session:dm:idle", "me"),
    ] {
        assert!(
            store
                .lease_acquire(name, holder, 60_000)
                .await
                .unwrap()
                .is_some()
        );
    }
    let sorted = |mut keys: Vec<String>| {
        keys.sort();
        keys
    };
    // Bounds in the future and the past: every event, then none, is old.
    let (any_age, none) = (-60_000, 60_000);
    assert_eq!(
        sorted(store.sessions_unowned(256, any_age).await.unwrap()),
        ["dm:a", "dm:b"]
    );
    assert!(store.sessions_unowned(256, none).await.unwrap().is_empty());
    assert_eq!(store.sessions_unowned(1, any_age).await.unwrap().len(), 1);
    assert_eq!(
        store.sessions_owned_waiting("me", any_age).await.unwrap(),
        ["dm:d"]
    );
    assert_eq!(
        store
            .sessions_owned_waiting("other", any_age)
            .await
            .unwrap(),
        ["dm:e"]
    );
    assert!(
        store
            .sessions_owned_waiting("me", none)
            .await
            .unwrap()
            .is_empty()
    );
    // Once d's lease lapses, d has no owner.
    store.lease_release("session:dm:d", "me", 1).await.unwrap();
    assert_eq!(
        sorted(store.sessions_unowned(256, any_age).await.unwrap()),
        ["dm:a", "dm:b", "dm:d"]
    );
    assert!(
        store
            .sessions_owned_waiting("me", any_age)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A replica whose clock ran an hour ahead stored a session's first event,
/// one on time its second: the first, dated in the future, does not hide
/// the session from the sweep (which reads each session's oldest), while
/// an event a second ahead (clocks a little apart) is not taken for old.
#[tokio::test]
async fn an_event_dated_in_the_future_hides_no_session_from_the_sweep() {
    let Some(db) = crate::common::PgTestDb::create().await else {
        return;
    };
    let store = db.store().await;
    let raw = sqlx::PgPool::connect(&db.config.url).await.unwrap();
    let now = store.db_now_ms().await.unwrap();
    for (key, session, at) in [
        ("ahead", "dm:f", now + 3_600_000),
        ("a-second-ahead", "dm:g", now + 1_000),
    ] {
        sqlx::query(
            "INSERT INTO inbox (platform, dedupe_key, session_key, payload, received_at) \
             VALUES ('telegram', $1, $2, '{}', $3)",
        )
        .bind(key)
        .bind(session)
        .bind(at)
        .execute(&raw)
        .await
        .unwrap();
    }
    stored(&store, "on-time", "dm:f").await;
    assert!(
        store
            .lease_acquire("session:dm:g", "me", 60_000)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(store.sessions_unowned(256, 2_000).await.unwrap(), ["dm:f"]);
    assert!(
        store
            .sessions_owned_waiting("me", 2_000)
            .await
            .unwrap()
            .is_empty()
    );
    raw.close().await;
    store.close().await;
    db.drop().await;
}

/// Stores a new event of session `key`: its id.
async fn stored(store: &Store, dedupe: &str, key: &str) -> i64 {
    let event = NewInboxEvent {
        platform: "github",
        dedupe_key: dedupe,
        session_key: key,
        payload: "{}",
    };
    match store.inbox_insert(&event).await.unwrap() {
        InboxInsert::Inserted(id) => id,
        InboxInsert::Duplicate => panic!("{dedupe} seen as a duplicate"),
    }
}
