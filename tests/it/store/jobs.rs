//! A person's limit on chat-made jobs holds when their confirmations are
//! pressed at the same moment.

use crate::backend_tests;

use switchboard::store::{CronJob, Store, now_ms};

backend_tests!(confirmations_pressed_at_once_make_no_job_past_the_limit);

fn chat_job(id: String) -> CronJob {
    let now = now_ms();
    CronJob {
        id,
        name: "digest".into(),
        origin: "chat".into(),
        schedule: "0 9 * * *".into(),
        timezone: String::new(),
        prompt: "the digest".into(),
        toolsets: None,
        platform: "telegram".into(),
        chat_id: "-100".into(),
        thread_id: None,
        owner_user: "ann".into(),
        owner_chat: "-100".into(),
        owner_thread: None,
        owner_event: String::new(),
        missed: "skip".into(),
        missed_limit: 5,
        paused: 0,
        next_at: Some(now + 60_000),
        created_at: now,
        updated_at: now,
    }
}

async fn confirmations_pressed_at_once_make_no_job_past_the_limit(store: Store) {
    let tries = (0..12).map(|n| {
        let store = store.clone();
        tokio::spawn(async move { store.add_chat_job(&chat_job(format!("job-{n}")), 3).await })
    });
    let made = futures::future::join_all(tries)
        .await
        .into_iter()
        .filter(|made| *made.as_ref().unwrap().as_ref().unwrap())
        .count();
    assert_eq!(made, 3, "as many made as the limit");
    assert_eq!(store.jobs_owned("telegram", "ann").await.unwrap(), 3);
    // Another person's jobs count on their own.
    let mut bob = chat_job("job-bob".into());
    bob.owner_user = "bob".into();
    assert!(store.add_chat_job(&bob, 3).await.unwrap());
}
