//! A turn's commit: its writes land whole, once, on both backends.

use crate::backend_tests;

use switchboard::store::{
    Committed, Completion, InboxInsert, NewInboxEvent, NewMessage, Outbound, Store, TurnCommit,
    TurnRecord,
};

use super::dm;

backend_tests!(a_turn_commits_whole_once_and_a_second_commit_writes_nothing);

async fn a_turn_commits_whole_once_and_a_second_commit_writes_nothing(store: Store) {
    let key = "telegram:dm:42";
    let session = store.open_session(&dm(key)).await.unwrap();
    let InboxInsert::Inserted(inbox_id) = store
        .inbox_insert(&NewInboxEvent {
            platform: "telegram",
            dedupe_key: "telegram:u-1",
            session_key: key,
            payload: "{}",
        })
        .await
        .unwrap()
    else {
        panic!("the event was not stored");
    };
    let record = TurnRecord {
        session_id: session.id.clone(),
        started_at: 1,
        finished_at: 2,
        model_calls: 2,
        tool_calls: 1,
        prompt_tokens: 100,
        completion_tokens: 10,
        outcome: "final".into(),
        model: Some("m".into()),
        cost_micros: 0,
        platform: Some("telegram".into()),
        chat_id: Some("42".into()),
        user_id: Some("42".into()),
        job_id: None,
    };
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
    let done = Completion {
        inbox_id,
        session_key: key.into(),
        outcome: "final".into(),
        outbox: vec![reply("first part"), reply("second part")],
        fence: None,
    };
    let turn = TurnCommit {
        session_id: &session.id,
        messages: vec![message("user", "hi"), message("assistant", "hello")],
        record: &record,
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
