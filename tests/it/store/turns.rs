//! A job's start and a turn's commit: what the start reads, and the
//! commit's writes landing whole, once, on both backends.

use crate::backend_tests;

use switchboard::store::{
    Committed, Completion, Fence, InboxInsert, JobReads, JobStart, NewInboxEvent, NewMessage,
    Outbound, Started, Store, TurnCommit, TurnRecord,
};

use super::dm;

backend_tests!(
    a_turn_commits_whole_once_and_a_second_commit_writes_nothing,
    a_commit_that_fails_midway_writes_nothing_and_holds_no_lock,
    a_commit_under_a_lost_lease_writes_nothing,
    a_jobs_start_reads_the_open_session_and_the_owners_notes,
    a_job_asked_to_be_first_waits_behind_an_earlier_event,
);

/// Stores an event for `key`; its inbox id.
async fn event(store: &Store, key: &str, dedupe_key: &str) -> i64 {
    match store
        .inbox_insert(&NewInboxEvent {
            platform: "telegram",
            dedupe_key,
            session_key: key,
            payload: "{}",
        })
        .await
        .unwrap()
    {
        InboxInsert::Inserted(id) => id,
        InboxInsert::Duplicate => panic!("the event was not stored"),
    }
}

fn record(session_id: &str) -> TurnRecord {
    TurnRecord {
        session_id: session_id.into(),
        started_at: 1,
        finished_at: 2,
        model_calls: 2,
        tool_calls: 1,
        prompt_tokens: 100,
        completion_tokens: 10,
        cache_read_tokens: 60,
        cache_write_tokens: 0,
        outcome: "final".into(),
        model: Some("m".into()),
        cost_micros: 0,
        platform: Some("telegram".into()),
        chat_id: Some("42".into()),
        user_id: Some("42".into()),
        job_id: None,
    }
}

async fn a_turn_commits_whole_once_and_a_second_commit_writes_nothing(store: Store) {
    let key = "telegram:dm:42";
    let session = store.open_session(&dm(key)).await.unwrap();
    let inbox_id = event(&store, key, "telegram:u-1").await;
    let record = record(&session.id);
    let message = |role, content| NewMessage {
        role,
        content,
        ..Default::default()
    };
    let reply = |body: &str| Outbound {
        platform: "telegram".into(),
        chat_id: "42".into(),
        thread_id: None,
        reply_to: Some("7".into()),
        body: body.into(),
        draft_of: None,
    };
    // A later message of the session, steered into this turn.
    let steered = event(&store, key, "telegram:u-9").await;
    let done = Completion {
        inbox_id,
        session_key: key.into(),
        outcome: "final".into(),
        outbox: vec![reply("first part"), reply("second part")],
        fence: None,
        steered: vec![steered],
    };
    let turn = TurnCommit {
        session_id: &session.id,
        messages: vec![message("user", "hi"), message("assistant", "hello")],
        record: &record,
        held: false,
    };
    let Some(Committed { last_id, outbox }) =
        store.commit_turn(Some(&turn), Some(&done)).await.unwrap()
    else {
        panic!("the first commit wrote nothing");
    };
    let stored = store.messages(&session.id).await.unwrap();
    let contents: Vec<&str> = stored.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(contents, ["hi", "hello"]);
    assert_eq!(last_id, Some(stored[1].id));
    assert_eq!(outbox.len(), 2);
    for (id, body) in outbox.iter().zip(["first part", "second part"]) {
        let row = store.outbox_row(*id).await.unwrap().expect("outbox row");
        assert_eq!((row.inbox_id, row.body.as_str()), (Some(inbox_id), body));
    }
    assert_eq!(
        store.turns(&session.id).await.unwrap(),
        std::slice::from_ref(&record)
    );
    assert!(store.inbox_pending(10).await.unwrap().is_empty());

    // The same event again (its first commit landed, its answer was lost):
    // nothing of this one is written.
    let again = TurnCommit {
        session_id: &session.id,
        messages: vec![message("assistant", "hello again")],
        record: &record,
        held: false,
    };
    assert_eq!(
        store.commit_turn(Some(&again), Some(&done)).await.unwrap(),
        None
    );
    assert_eq!(store.messages(&session.id).await.unwrap().len(), 2);
    assert_eq!(store.turns(&session.id).await.unwrap().len(), 1);
    assert_eq!(store.outbox_for(inbox_id).await.unwrap().len(), 2);

    // A turn without an event (a scheduled run's) still commits.
    let alone = TurnCommit {
        session_id: &session.id,
        messages: vec![message("assistant", "ran")],
        record: &record,
        held: false,
    };
    let committed = store.commit_turn(Some(&alone), None).await.unwrap();
    let stored = store.messages(&session.id).await.unwrap();
    assert_eq!(
        committed,
        Some(Committed {
            last_id: Some(stored[2].id),
            outbox: Vec::new()
        })
    );
}

async fn a_commit_that_fails_midway_writes_nothing_and_holds_no_lock(store: Store) {
    let key = "telegram:dm:42";
    let session = store.open_session(&dm(key)).await.unwrap();
    let inbox_id = event(&store, key, "telegram:u-2").await;
    let done = Completion {
        inbox_id,
        session_key: key.into(),
        outcome: "final".into(),
        outbox: Vec::new(),
        fence: None,
        steered: Vec::new(),
    };
    // Its messages name a session that does not exist: the statement
    // after the event's completion fails.
    let record = record("no-such-session");
    let orphan = TurnCommit {
        session_id: "no-such-session",
        messages: vec![NewMessage {
            role: "assistant",
            content: "lost",
            ..Default::default()
        }],
        record: &record,
        held: false,
    };
    for _ in 0..3 {
        store
            .commit_turn(Some(&orphan), Some(&done))
            .await
            .expect_err("a message of no session is refused");
    }
    let pending = store.inbox_pending(10).await.unwrap();
    assert_eq!(
        pending.iter().map(|r| r.id).collect::<Vec<_>>(),
        [inbox_id],
        "the event's completion went back with the rest"
    );
    // Neither the write lock nor a transaction was left behind: the next
    // commit, on whichever connection, lands.
    let record = self::record(&session.id);
    let turn = TurnCommit {
        session_id: &session.id,
        messages: vec![NewMessage {
            role: "assistant",
            content: "kept",
            ..Default::default()
        }],
        record: &record,
        held: false,
    };
    let committed = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        store.commit_turn(Some(&turn), Some(&done)),
    )
    .await
    .expect("the commit waited on a lock left behind")
    .unwrap();
    assert!(committed.is_some());
    assert!(store.inbox_pending(10).await.unwrap().is_empty());
    let stored = store.messages(&session.id).await.unwrap();
    assert_eq!(
        stored
            .iter()
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>(),
        ["kept"]
    );
}

/// What a start that was to start read.
fn started(start: Started) -> JobStart {
    match start {
        Started::Now(read) => *read,
        other => panic!("not started: {other:?}"),
    }
}

async fn a_jobs_start_reads_the_open_session_and_the_owners_notes(store: Store) {
    let key = "telegram:dm:42";
    let mine = store.add_note("telegram:42", "likes tea").await.unwrap();
    store.add_note("telegram:7", "someone else").await.unwrap();
    let second = store.add_note("telegram:42", "works nights").await.unwrap();
    let new = dm(key);
    let reads = JobReads {
        open: Some(&new),
        notes_of: Some("telegram:42"),
        first_of: None,
    };

    let first = event(&store, key, "telegram:u-3").await;
    let start = started(store.start_job(first, reads).await.unwrap());
    let (created, fresh) = start.session.expect("a session");
    assert!(fresh, "none was open: this start created it");
    assert_eq!(
        (created.key.as_str(), created.user_id.as_deref()),
        (key, Some("42"))
    );
    assert_eq!(
        store.open_session_by_key(key).await.unwrap().as_ref(),
        Some(&created)
    );
    let notes = start.notes.expect("notes read");
    assert_eq!(
        notes
            .iter()
            .map(|n| (n.id, n.content.as_str()))
            .collect::<Vec<_>>(),
        [(mine, "likes tea"), (second, "works nights")],
        "the owner's notes, oldest first, no one else's"
    );

    let next = event(&store, key, "telegram:u-4").await;
    let start = started(store.start_job(next, reads).await.unwrap());
    assert_eq!(
        start.session,
        Some((created.clone(), false)),
        "the open one"
    );
    let asked_nothing = started(store.start_job(next, JobReads::default()).await.unwrap());
    assert_eq!(asked_nothing, JobStart::default(), "nothing read unasked");
    let pending = store.inbox_pending(10).await.unwrap();
    let attempts: Vec<(i64, i64)> = pending.iter().map(|r| (r.id, r.attempts)).collect();
    assert_eq!(attempts, [(first, 1), (next, 2)], "each start counted");

    assert!(store.inbox_mark_processed(next, "final").await.unwrap());
    assert!(store.end_session(&created.id, "test").await.unwrap());
    assert_eq!(
        store.start_job(next, reads).await.unwrap(),
        Started::Done,
        "a processed event is not started"
    );
    assert_eq!(
        store.open_session_by_key(key).await.unwrap(),
        None,
        "nor is a session opened for it"
    );
}

async fn a_commit_under_a_lost_lease_writes_nothing(store: Store) {
    let key = "telegram:dm:42";
    let lease = format!("session:{key}");
    let session = store.open_session(&dm(key)).await.unwrap();
    let inbox_id = event(&store, key, "telegram:u-5").await;
    let fence = |holder: &str, token| Fence {
        name: lease.clone(),
        holder: holder.into(),
        token,
    };
    assert_eq!(
        store.lease_acquire(&lease, "a", 60_000).await.unwrap(),
        Some(1)
    );
    store.lease_release(&lease, "a", 1).await.unwrap();
    assert_eq!(
        store.lease_acquire(&lease, "b", 60_000).await.unwrap(),
        Some(2)
    );
    let record = record(&session.id);
    let turn = TurnCommit {
        session_id: &session.id,
        messages: vec![NewMessage {
            role: "assistant",
            content: "from b",
            ..Default::default()
        }],
        record: &record,
        held: false,
    };
    let done = |fence| Completion {
        inbox_id,
        session_key: key.into(),
        outcome: "final".into(),
        outbox: vec![Outbound {
            platform: "telegram".into(),
            chat_id: "42".into(),
            thread_id: None,
            reply_to: None,
            body: "answer".into(),
            draft_of: None,
        }],
        fence: Some(fence),
        steered: Vec::new(),
    };
    for stale in [fence("a", 1), fence("b", 1), fence("a", 2)] {
        match store
            .commit_turn(Some(&turn), Some(&done(stale.clone())))
            .await
        {
            Err(switchboard::store::StoreError::Fenced { lease: named }) => {
                assert_eq!(named, lease)
            }
            other => panic!("{stale:?} committed: {other:?}"),
        }
    }
    assert!(store.messages(&session.id).await.unwrap().is_empty());
    assert!(store.turns(&session.id).await.unwrap().is_empty());
    assert!(store.outbox_for(inbox_id).await.unwrap().is_empty());
    assert_eq!(store.inbox_pending(10).await.unwrap().len(), 1);

    // Its holder's commit lands, on whichever connection: nothing was
    // left locked; once.
    let committed = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        store.commit_turn(Some(&turn), Some(&done(fence("b", 2)))),
    )
    .await
    .expect("the commit waited on a lock left behind")
    .unwrap()
    .expect("the holder's commit landed");
    assert_eq!(committed.outbox.len(), 1);
    assert_eq!(
        store
            .commit_turn(Some(&turn), Some(&done(fence("b", 2))))
            .await
            .unwrap(),
        None
    );
    assert_eq!(store.messages(&session.id).await.unwrap().len(), 1);
    assert!(store.inbox_pending(10).await.unwrap().is_empty());
}

/// With several replicas a job starts only as its session's first event
/// waiting (`first_of`): behind an earlier one (stored by another replica,
/// its notice not here yet) it writes nothing and says so, in the same
/// statement as the start; another session's events do not hold it back.
async fn a_job_asked_to_be_first_waits_behind_an_earlier_event(store: Store) {
    let key = "webhook:github:o/r:pr:1";
    let earlier = event(&store, key, "github:d-1").await;
    event(&store, "webhook:github:o/r:pr:2", "github:d-2").await;
    let later = event(&store, key, "github:d-3").await;
    let first = JobReads {
        first_of: Some(key),
        ..JobReads::default()
    };
    assert_eq!(
        store.start_job(later, first).await.unwrap(),
        Started::Behind
    );
    let attempts = |rows: Vec<switchboard::store::InboxRow>, id: i64| {
        rows.iter().find(|r| r.id == id).map(|r| r.attempts)
    };
    assert_eq!(
        attempts(store.inbox_pending(10).await.unwrap(), later),
        Some(0),
        "nothing written"
    );
    started(store.start_job(earlier, first).await.unwrap());
    assert!(store.inbox_mark_processed(earlier, "ok").await.unwrap());
    started(store.start_job(later, first).await.unwrap());
    assert_eq!(
        attempts(store.inbox_pending(10).await.unwrap(), later),
        Some(1)
    );
    assert!(store.inbox_mark_processed(later, "ok").await.unwrap());
    assert_eq!(store.start_job(later, first).await.unwrap(), Started::Done);
}
