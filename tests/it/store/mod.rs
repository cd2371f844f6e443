//! The storage suite: every test runs on SQLite and on PostgreSQL.

use crate::backend_tests;

mod approvals;
mod checkpoints;
mod connections;
mod holds;
mod inbox_keys;
mod jobs;
mod search;
mod takeover;
mod turns;

use approvals::approval;
use switchboard::store::{
    ApprovalRecord, InboxInsert, JobReads, NewInboxEvent, NewMessage, NewSession, PairingRequest,
    Started, Store, now_ms,
};

backend_tests!(
    migrations_run_twice_without_change,
    open_session_is_idempotent_and_reset_makes_a_new_one,
    concurrent_opens_share_one_session,
    messages_keep_order_and_fields,
    inbox_dedupes_and_replays_unprocessed_in_order,
    concurrent_inbox_inserts_share_commits_and_still_dedupe,
    inserts_queued_together_keep_their_order_and_a_repeat_is_a_duplicate,
    webhook_deliveries_past_their_window_are_forgotten_in_batches,
    pairing_approve_and_revoke,
    pairing_codes_expire,
    memory_notes_are_per_user,
    list_sessions_newest_first,
    a_split_session_is_linked_and_its_checkpoint_replaced,
    text_with_nul_bytes_is_stored_on_both_backends,
    a_waiting_message_is_found_by_its_id_and_revised,
    drafts_are_kept_per_event_until_dropped,
);

async fn migrations_run_twice_without_change(store: Store) {
    let version = store.schema_version().await.unwrap();
    assert!(version >= 1, "schema version {version}");
    assert_eq!(
        store.migrate().await.unwrap(),
        0,
        "second run applies nothing"
    );
    assert_eq!(
        store.migrate().await.unwrap(),
        0,
        "third run applies nothing"
    );
    assert_eq!(store.schema_version().await.unwrap(), version);
    store.ping().await.unwrap();
}

/// Appends one plain message to a session; its id.
async fn say(store: &Store, session_id: &str, role: &str, content: &str) -> i64 {
    store
        .append_message(
            session_id,
            &NewMessage {
                role,
                content,
                ..Default::default()
            },
        )
        .await
        .unwrap()
}

pub(crate) fn dm(key: &str) -> NewSession<'_> {
    NewSession {
        key,
        platform: "telegram",
        chat_id: "42",
        thread_id: None,
        user_id: Some("42"),
    }
}

async fn open_session_is_idempotent_and_reset_makes_a_new_one(store: Store) {
    let first = store.open_session(&dm("telegram:dm:42")).await.unwrap();
    let again = store.open_session(&dm("telegram:dm:42")).await.unwrap();
    assert_eq!(first.id, again.id);
    assert_eq!(first.user_id.as_deref(), Some("42"));
    assert!(first.ended_at.is_none());

    assert!(store.end_session(&first.id, "reset").await.unwrap());
    assert!(
        !store.end_session(&first.id, "reset").await.unwrap(),
        "ends once"
    );
    let ended = store.session(&first.id).await.unwrap().unwrap();
    assert_eq!(ended.end_reason.as_deref(), Some("reset"));
    assert!(
        store
            .open_session_by_key("telegram:dm:42")
            .await
            .unwrap()
            .is_none()
    );

    let fresh = store.open_session(&dm("telegram:dm:42")).await.unwrap();
    assert_ne!(fresh.id, first.id);
}

async fn concurrent_opens_share_one_session(store: Store) {
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.open_session(&dm("slack:dm:D1")).await.unwrap().id })
        })
        .collect();
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "one open session per key: {ids:?}");
}

async fn messages_keep_order_and_fields(store: Store) {
    let s = store.open_session(&dm("telegram:dm:1")).await.unwrap();
    let calls =
        r#"[{"id":"c1","type":"function","function":{"name":"read_file","arguments":"{}"}}]"#;
    say(&store, &s.id, "user", "hi").await;
    store
        .append_message(
            &s.id,
            &NewMessage {
                role: "assistant",
                content: "",
                tool_calls: Some(calls),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    store
        .append_message(
            &s.id,
            &NewMessage {
                role: "tool",
                content: "file body ünïcödé",
                tool_call_id: Some("c1"),
                name: Some("read_file"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let history = store.messages(&s.id).await.unwrap();
    let roles: Vec<&str> = history.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool"]);
    assert!(history.windows(2).all(|w| w[0].id < w[1].id));
    assert_eq!(history[1].tool_calls.as_deref(), Some(calls));
    assert_eq!(history[2].tool_call_id.as_deref(), Some("c1"));
    assert_eq!(history[2].name.as_deref(), Some("read_file"));
    assert_eq!(history[2].content, "file body ünïcödé");
}

async fn webhook_deliveries_past_their_window_are_forgotten_in_batches(store: Store) {
    let insert = |platform: &'static str, key: String| {
        let store = store.clone();
        async move {
            let event = NewInboxEvent {
                platform,
                dedupe_key: &key,
                session_key: "webhook:gh:github:o/r:pr:1",
                payload: "{}",
            };
            store.inbox_insert(&event).await.unwrap()
        }
    };
    let inserted = |outcome: InboxInsert| match outcome {
        InboxInsert::Inserted(id) => id,
        InboxInsert::Duplicate => panic!("a duplicate where a new event was expected"),
    };
    // More deliveries than one batch of the sweep deletes.
    let keys: Vec<String> = (0..1500)
        .map(|n| format!("webhook:gh:sha256:{n}"))
        .collect();
    let ids = futures::future::join_all(keys.iter().map(|k| insert("webhook", k.clone()))).await;
    for id in ids {
        assert!(
            store
                .inbox_mark_processed(inserted(id), "ok")
                .await
                .unwrap()
        );
    }
    let kept = [
        ("webhook", "webhook:process:p1:exit", true),
        ("webhook", "webhook:gh:sha256:pending", false),
        ("telegram", "telegram:update:1", true),
    ];
    for (platform, key, processed) in kept {
        let id = inserted(insert(platform, key.to_string()).await);
        if processed {
            assert!(store.inbox_mark_processed(id, "ok").await.unwrap());
        }
    }
    let later = now_ms() + 1;
    assert_eq!(store.inbox_forget_deliveries(later).await.unwrap(), 1500);
    // A forgotten body is new again; the rest are still known.
    inserted(insert("webhook", keys[0].clone()).await);
    for (platform, key, _) in kept {
        assert_eq!(
            insert(platform, key.to_string()).await,
            InboxInsert::Duplicate,
            "{key} is kept"
        );
    }
}

async fn inbox_dedupes_and_replays_unprocessed_in_order(store: Store) {
    let mut ids = Vec::new();
    for n in 0..5 {
        let key = format!("telegram:update:{n}");
        let event = NewInboxEvent {
            platform: "telegram",
            dedupe_key: &key,
            session_key: "telegram:dm:1",
            payload: &format!(r#"{{"n":{n}}}"#),
        };
        match store.inbox_insert(&event).await.unwrap() {
            InboxInsert::Inserted(id) => ids.push(id),
            InboxInsert::Duplicate => panic!("first insert of {key} seen as duplicate"),
        }
        assert_eq!(
            store.inbox_insert(&event).await.unwrap(),
            InboxInsert::Duplicate
        );
    }
    assert!(store.inbox_mark_processed(ids[1], "ok").await.unwrap());
    assert!(
        !store.inbox_mark_processed(ids[1], "ok").await.unwrap(),
        "processed once"
    );
    let nothing = JobReads::default();
    assert_eq!(
        store.start_job(ids[0], nothing).await.unwrap(),
        Started::Now(Box::default()),
        "started, nothing read"
    );
    assert_eq!(
        store.start_job(ids[1], nothing).await.unwrap(),
        Started::Done,
        "a processed event is not started again"
    );

    let pending = store.inbox_pending(100).await.unwrap();
    let pending_ids: Vec<i64> = pending.iter().map(|r| r.id).collect();
    assert_eq!(pending_ids, [ids[0], ids[2], ids[3], ids[4]]);
    assert_eq!(pending[0].attempts, 1);
    assert_eq!(pending[0].payload, r#"{"n":0}"#);
    let done = store.inbox_event(ids[1]).await.unwrap().unwrap();
    assert_eq!(done.outcome.as_deref(), Some("ok"));
    assert!(done.processed_at.is_some());
    // A bounded look back at one platform's newest events.
    for n in 0..3 {
        let key = format!("discord:{n}");
        store
            .inbox_insert(&NewInboxEvent {
                platform: "discord",
                dedupe_key: &key,
                session_key: "discord:dm:1",
                payload: "{}",
            })
            .await
            .unwrap();
    }
    let latest = store.inbox_latest("discord", 2).await.unwrap();
    let keys: Vec<&str> = latest.iter().map(|r| r.dedupe_key.as_str()).collect();
    assert_eq!(keys, ["discord:1", "discord:2"], "newest two, in order");
    assert_eq!(store.inbox_latest("discord", 100).await.unwrap().len(), 3);
    assert!(store.inbox_latest("slack", 100).await.unwrap().is_empty());
}

fn pairing(code: &str, user: &str, expires_in_ms: i64) -> PairingRequest {
    PairingRequest {
        platform: "telegram".into(),
        code: code.into(),
        user_id: user.into(),
        user_name: format!("User {user}"),
        chat_id: user.into(),
        created_at: now_ms(),
        expires_at: now_ms() + expires_in_ms,
    }
}

async fn pairing_approve_and_revoke(store: Store) {
    store
        .insert_pairing_request(&pairing("ABCD2345", "77", 3_600_000))
        .await
        .unwrap();
    store
        .insert_pairing_request(&pairing("EFGH6789", "77", 3_600_000))
        .await
        .unwrap();
    assert_eq!(
        store
            .pairing_requests(Some("telegram"))
            .await
            .unwrap()
            .len(),
        2
    );
    assert!(
        store
            .pairing_requests(Some("slack"))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .approve_pairing("telegram", "WRONG000", "owner")
            .await
            .unwrap()
            .is_none()
    );
    assert!(!store.is_paired("telegram", "77").await.unwrap());

    let paired = store
        .approve_pairing("telegram", "ABCD2345", "owner")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(paired.user_id, "77");
    assert_eq!(paired.user_name, "User 77");
    assert!(store.is_paired("telegram", "77").await.unwrap());
    assert!(
        store.pairing_requests(None).await.unwrap().is_empty(),
        "user's other codes gone"
    );
    assert_eq!(store.paired_users().await.unwrap().len(), 1);

    assert!(store.revoke_pairing("telegram", "77").await.unwrap());
    assert!(!store.revoke_pairing("telegram", "77").await.unwrap());
    assert!(!store.is_paired("telegram", "77").await.unwrap());
}

async fn pairing_codes_expire(store: Store) {
    store
        .insert_pairing_request(&pairing("OLD22222", "5", -1))
        .await
        .unwrap();
    assert!(store.pairing_requests(None).await.unwrap().is_empty());
    assert!(
        store
            .approve_pairing("telegram", "OLD22222", "owner")
            .await
            .unwrap()
            .is_none()
    );
    assert!(!store.is_paired("telegram", "5").await.unwrap());
}

async fn memory_notes_are_per_user(store: Store) {
    let a = store.add_note("telegram:1", "prefers rust").await.unwrap();
    store
        .add_note("telegram:1", "timezone UTC+2")
        .await
        .unwrap();
    store.add_note("slack:U2", "other user").await.unwrap();
    assert_eq!(store.notes("telegram:1").await.unwrap().len(), 2);
    assert!(
        !store.update_note("slack:U2", a, "hijack").await.unwrap(),
        "not theirs"
    );
    assert!(
        !store.delete_note("slack:U2", a).await.unwrap(),
        "not theirs"
    );
    assert!(
        store
            .update_note("telegram:1", a, "prefers Rust 2024")
            .await
            .unwrap()
    );
    assert_eq!(
        store.notes("telegram:1").await.unwrap()[0].content,
        "prefers Rust 2024"
    );
    assert!(store.delete_note("telegram:1", a).await.unwrap());
    assert_eq!(store.notes("telegram:1").await.unwrap().len(), 1);
}

async fn list_sessions_newest_first(store: Store) {
    let a = store.open_session(&dm("telegram:dm:a")).await.unwrap();
    let b = store.open_session(&dm("telegram:dm:b")).await.unwrap();
    // So a's touch is stamped after b's opening: a time, not an event.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    store.touch_session(&a.id).await.unwrap();
    let list = store.list_sessions(10).await.unwrap();
    let keys: Vec<&str> = list.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, ["telegram:dm:a", "telegram:dm:b"]);
    assert_eq!(store.list_sessions(1).await.unwrap().len(), 1);
    let _ = b;
}

async fn concurrent_inbox_inserts_share_commits_and_still_dedupe(store: Store) {
    // 60 concurrent deliveries, every third one a redelivery of an earlier
    // key: the group commit must answer each caller with its own outcome.
    let tasks: Vec<_> = (0..60)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                let key = format!("github:d-{}", if n % 3 == 2 { n - 1 } else { n });
                let payload = format!("event {n}");
                let r = store
                    .inbox_insert(&NewInboxEvent {
                        platform: "webhook",
                        dedupe_key: &key,
                        session_key: "webhook:r:e",
                        payload: &payload,
                    })
                    .await
                    .unwrap();
                (key, r)
            })
        })
        .collect();
    let mut inserted = std::collections::BTreeMap::new();
    let mut duplicates = 0;
    for t in tasks {
        match t.await.unwrap() {
            (key, InboxInsert::Inserted(id)) => {
                assert!(inserted.insert(key, id).is_none(), "a key inserted twice");
            }
            (_, InboxInsert::Duplicate) => duplicates += 1,
        }
    }
    assert_eq!((inserted.len(), duplicates), (40, 20));
    let pending = store.inbox_pending(100).await.unwrap();
    assert_eq!(pending.len(), 40);
    for row in pending {
        assert_eq!(inserted.get(&row.dedupe_key), Some(&row.id));
    }
}

async fn inserts_queued_together_keep_their_order_and_a_repeat_is_a_duplicate(store: Store) {
    // On the test's one thread, the tasks queue their events in the order
    // they were spawned, before the group commit takes them (together, or
    // in batches one after another): the inbox's ids follow that order,
    // which is the order a session runs its events in.
    const KEYS: [&str; 5] = [
        "github:o-0",
        "github:o-1",
        "github:o-0",
        "github:o-2",
        "github:o-3",
    ];
    let tasks: Vec<_> = KEYS
        .into_iter()
        .map(|key| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .inbox_insert(&NewInboxEvent {
                        platform: "webhook",
                        dedupe_key: key,
                        session_key: "webhook:r:o",
                        payload: key,
                    })
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.unwrap());
    }
    let ids: Vec<i64> = outcomes
        .iter()
        .filter_map(|o| match o {
            InboxInsert::Inserted(id) => Some(*id),
            InboxInsert::Duplicate => None,
        })
        .collect();
    assert_eq!(outcomes[2], InboxInsert::Duplicate, "{outcomes:?}");
    assert_eq!(ids.len(), 4, "{outcomes:?}");
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids in queue order: {ids:?}"
    );
    let stored: Vec<String> = store
        .inbox_pending(100)
        .await
        .unwrap()
        .into_iter()
        .map(|row| row.payload)
        .collect();
    assert_eq!(
        stored,
        ["github:o-0", "github:o-1", "github:o-2", "github:o-3"]
    );
}

async fn a_split_session_is_linked_and_its_checkpoint_replaced(store: Store) {
    let old = store.open_session(&dm("telegram:dm:7")).await.unwrap();
    let id = say(&store, &old.id, "user", "hello").await;
    assert_eq!(store.context(&old.id).await.unwrap(), None);
    store.save_context(&old.id, id, "[1]").await.unwrap();
    store.save_context(&old.id, id, "[2]").await.unwrap();
    assert_eq!(
        store.context(&old.id).await.unwrap(),
        Some((id, "[2]".to_string()))
    );
    let later = say(&store, &old.id, "assistant", "hi").await;
    let after = store.messages_after(&old.id, id).await.unwrap();
    assert_eq!(after.iter().map(|m| m.id).collect::<Vec<_>>(), [later]);

    let new = store.split_session(&old).await.unwrap();
    assert_ne!(new.id, old.id);
    assert_eq!(
        (new.key.as_str(), new.parent_id.as_deref()),
        ("telegram:dm:7", Some(old.id.as_str()))
    );
    assert_eq!(new.user_id, old.user_id);
    let ended = store.session(&old.id).await.unwrap().unwrap();
    assert_eq!(ended.end_reason.as_deref(), Some("split"));
    assert_eq!(
        store
            .open_session_by_key("telegram:dm:7")
            .await
            .unwrap()
            .map(|s| s.id),
        Some(new.id.clone())
    );
    assert!(
        store.split_session(&old).await.is_err(),
        "an ended session splits no more"
    );
}

async fn text_with_nul_bytes_is_stored_on_both_backends(store: Store) {
    let session = store.open_session(&dm("telegram:dm:9")).await.unwrap();
    for (role, content) in [
        ("user", "title\u{0}with a NUL"),
        ("tool", "binary\u{0}\u{0}output"),
    ] {
        store
            .append_message(
                &session.id,
                &NewMessage {
                    role,
                    content,
                    name: Some("read\u{0}file"),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }
    let stored = store.messages(&session.id).await.unwrap();
    assert_eq!(stored[0].content, "title\u{FFFD}with a NUL");
    assert_eq!(stored[1].content, "binary\u{FFFD}\u{FFFD}output");
    assert_eq!(stored[1].name.as_deref(), Some("read\u{FFFD}file"));
    let note = store
        .add_note("telegram:9", "remember\u{0}this")
        .await
        .unwrap();
    assert!(
        store
            .update_note("telegram:9", note, "still\u{0}this")
            .await
            .unwrap()
    );
    assert_eq!(
        store.notes("telegram:9").await.unwrap()[0].content,
        "still\u{FFFD}this"
    );
    let record = ApprovalRecord {
        command: "rm -rf /tmp/x\u{0}".into(),
        ..approval(&session.id)
    };
    store.insert_approval(&record).await.unwrap();
    assert_eq!(
        store.approval(&record.id).await.unwrap().unwrap().command,
        "rm -rf /tmp/x\u{FFFD}"
    );
}

async fn a_waiting_message_is_found_by_its_id_and_revised(store: Store) {
    let mut ids = Vec::new();
    // Ids with LIKE's wildcards in them, and one that is a prefix of another.
    for (n, message) in ["1764.0_1", "1764.0%2", "1764", "17640"].iter().enumerate() {
        let payload = serde_json::json!({"platform": "slack", "text": format!("m{n}"),
            "chat_id": "C1", "message_id": message})
        .to_string();
        let key = format!("slack:{n}");
        let event = NewInboxEvent {
            platform: "slack",
            dedupe_key: &key,
            session_key: "slack:dm:D1",
            payload: &payload,
        };
        match store.inbox_insert(&event).await.unwrap() {
            InboxInsert::Inserted(id) => ids.push(id),
            InboxInsert::Duplicate => panic!("duplicate"),
        }
    }
    for (n, message) in ["1764.0_1", "1764.0%2", "1764", "17640"].iter().enumerate() {
        let found = store
            .inbox_pending_message("slack", "C1", message)
            .await
            .unwrap()
            .expect("found");
        assert_eq!(found.id, ids[n], "{message}");
    }
    assert!(
        store
            .inbox_pending_message("slack", "C1", "1764.0x1")
            .await
            .unwrap()
            .is_none(),
        "_ is not a wildcard"
    );
    assert!(
        store
            .inbox_pending_message("telegram", "C1", "1764")
            .await
            .unwrap()
            .is_none()
    );
    // Message ids are a chat's own: the same id in another chat is not it.
    assert!(
        store
            .inbox_pending_message("slack", "C2", "1764")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .inbox_revise(ids[0], r#"{"message_id":"1764.0_1","text":"edited"}"#)
            .await
            .unwrap()
    );
    let pending = store.inbox_pending(10).await.unwrap();
    assert!(pending[0].payload.contains("edited"));
    assert!(store.inbox_mark_processed(ids[2], "deleted").await.unwrap());
    assert!(
        store
            .inbox_pending_message("slack", "C1", "1764")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        !store.inbox_revise(ids[2], "{}").await.unwrap(),
        "processed stays as it was"
    );
}

async fn drafts_are_kept_per_event_until_dropped(store: Store) {
    use switchboard::store::Draft;
    assert!(store.draft(7).await.unwrap().is_empty());
    let draft = Draft {
        messages: vec!["501".into(), "502".into()],
        status: Some("503".into()),
        sending: None,
    };
    store.set_draft(7, &draft).await.unwrap();
    assert_eq!(store.draft(7).await.unwrap(), draft);
    let fewer = Draft {
        messages: vec!["501".into()],
        status: None,
        sending: Some("d7.1".into()),
    };
    store.set_draft(7, &fewer).await.unwrap();
    assert_eq!(store.draft(7).await.unwrap(), fewer);
    assert!(store.draft(8).await.unwrap().is_empty());
    store.drop_draft(7).await.unwrap();
    assert!(store.draft(7).await.unwrap().is_empty());
}

/// A store call's future carries no connection attempt (why: the store's
/// `begin_write!`). The bound has room to grow and none for the 13 KB of
/// PostgreSQL's.
#[tokio::test]
async fn a_store_call_carries_no_connection_attempt() {
    let (store, _dir) = crate::common::sqlite_store().await;
    let quote = switchboard::store::Outbound {
        platform: "telegram".into(),
        chat_id: "1".into(),
        thread_id: None,
        reply_to: None,
        body: "heard".into(),
        draft_of: None,
    };
    let sizes = [
        (
            "commit_turn",
            std::mem::size_of_val(&store.commit_turn(None, None)),
        ),
        (
            "start_job",
            std::mem::size_of_val(&store.start_job(1, JobReads::default())),
        ),
        (
            "add_note",
            std::mem::size_of_val(&store.add_note("u", "note")),
        ),
        (
            "inbox_heard",
            std::mem::size_of_val(&store.inbox_heard(1, "k", "{}", &quote)),
        ),
    ];
    println!("{sizes:?}");
    for (call, bytes) in sizes {
        assert!(bytes < 4 * 1024, "{call}'s future is {bytes} bytes");
    }
    store.close().await;
}
