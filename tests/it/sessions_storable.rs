//! What can be acknowledged can be stored: an event whose texts hold NUL
//! bytes (which PostgreSQL's text cannot) is taken, stored and answered on
//! both backends, its session found again by its key.

use crate::common;
use crate::sessions_manager::{dm, setup_with};

use common::fake_llm::{FakeLlm, Reply, text};
use switchboard::sessions::Submitted;

async fn nul_event_is_answered(storage_url: Option<String>) {
    let llm = FakeLlm::start(vec![
        Reply::Json(text("first")),
        Reply::Json(text("second")),
    ])
    .await;
    let s = setup_with(
        &llm,
        move |c| {
            if let Some(url) = storage_url {
                c.storage.url = url;
            }
        },
        |_| {},
    )
    .await;
    for (i, reply) in ["first", "second"].iter().enumerate() {
        let mut event = dm("1", &format!("nul\u{0}{i}"), "title\u{0}with a NUL");
        event.user_name = "Eve\u{0}".into();
        event.message_id = Some(format!("m\u{0}{i}"));
        assert_eq!(s.manager.submit(event).await.unwrap(), Submitted::Accepted);
        assert_eq!(s.adapter.wait(i + 1).await[i].1, *reply);
    }
    let session = s
        .store
        .open_session_by_key("telegram:dm:1")
        .await
        .unwrap()
        .expect("one session, found again by its key");
    let stored = s.store.messages(&session.id).await.unwrap();
    assert_eq!(stored.len(), 4, "both turns stored in the one session");
    assert_eq!(stored[0].content, "title\u{FFFD}with a NUL");
    let sent = llm.requests()[1]["messages"].to_string();
    assert!(sent.contains("first"), "the second turn saw the first");
}

#[tokio::test]
async fn an_event_with_nul_bytes_is_stored_and_answered_on_sqlite() {
    nul_event_is_answered(None).await;
}

#[tokio::test]
async fn an_event_with_nul_bytes_is_stored_and_answered_on_postgres() {
    let Some(db) = common::PgTestDb::create().await else {
        return;
    };
    nul_event_is_answered(Some(db.config.url.clone())).await;
    db.drop().await;
}
