//! A turn killed with SIGKILL while it holds the budgets (#49): its hold
//! survives the process, and the restarted daemon's turn, picked up
//! again, counts the calls made before the kill as its own, so the cap
//! still stops it where it would have stopped without the kill.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;

use super::{Daemon, send, write_config_with};
use crate::common::fake_github::FakeGithub;
use crate::common::fake_llm::{FakeLlm, Reply, calls, text};
use crate::common::{PgTestDb, eventually_within};
use switchboard::config::StorageConfig;
use switchboard::store::Store;

/// Only output is priced, 1000 per million: a call's 5 tokens cost 5000
/// millionths and its estimate (the default 4096-token output cap) 4.096.
/// The cap, 4.108, leaves room for calls while the turn has used at most
/// 12 tokens: three calls (0, 5 and 10 used before them), not a fourth;
/// the wrap-up (a 1024-token cap) still fits after them.
const BUDGET: &str = r#"
[budgets.prices."gpt-4.1-mini"]
input = 0.0
output = 1000.0
[budgets.route]
daily_cost = 4.108
"#;

async fn a_killed_turn_keeps_counting_its_calls(storage: StorageConfig) {
    let dir = tempfile::tempdir().unwrap();
    // The model calls a tool whenever it may; its third answer hangs until
    // the daemon is killed.
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let llm = FakeLlm::responding(move |request| {
        if request.get("tools").is_none() {
            return Reply::Json(text("wrapped up"));
        }
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let mut call = calls(&[(&format!("c{n}"), "web_search", r#"{"query": "x"}"#)]);
        call["usage"] = json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15});
        if n == 2 {
            return Reply::Delayed(Duration::from_secs(60), Box::new(Reply::Json(call)));
        }
        Reply::Json(call)
    })
    .await;
    let github = FakeGithub::start().await;
    write_config_with(dir.path(), &storage.url, &llm.url, &github.url, BUDGET);
    let client = switchboard::http::client::client();

    let first = Daemon::start(dir.path());
    let body = crate::common::pr_push(1, "marker-00");
    assert_eq!(send(&client, &first.addr, "d-1", body).await, Some(202));
    eventually_within("the third call hangs", Duration::from_secs(30), || {
        std::future::ready(asked.load(Ordering::SeqCst) == 3)
    })
    .await;
    first.kill();
    let store = Store::open(&storage).await.unwrap();
    let session = store.list_sessions(10).await.unwrap().remove(0);
    assert_eq!(
        store.held_usage(&session.id).await.unwrap(),
        Some((20, 10, 10_000)),
        "the hold outlives the process with the two calls that answered"
    );

    let second = Daemon::start(dir.path());
    eventually_within("the stop is posted", Duration::from_secs(30), || {
        std::future::ready(github.seen().iter().any(|s| {
            s.body["body"]
                .as_str()
                .is_some_and(|b| b.contains("stopped here"))
        }))
    })
    .await;
    second.stop();
    assert_eq!(
        asked.load(Ordering::SeqCst),
        4,
        "after the restart only the interrupted third call is made again"
    );
    let posted = github.seen();
    let said = posted.last().unwrap().body["body"].as_str().unwrap();
    assert!(
        said.starts_with("wrapped up\n\n(Webhook route github is at ")
            && said.contains(" of 4.11 of its daily budget, and my next step could go past it"),
        "{said}"
    );
    let turns = store.turns(&session.id).await.unwrap();
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert_eq!(turns[0].outcome, "over_budget");
    assert_eq!(
        (
            turns[0].prompt_tokens,
            turns[0].completion_tokens,
            turns[0].cost_micros
        ),
        (40, 20, 20_000),
        "the two calls before the kill are counted with the one after it and the wrap-up"
    );
    assert_eq!(store.held_usage(&session.id).await.unwrap(), None);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_counts_a_killed_turns_calls_against_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/budget.db", dir.path().display());
    a_killed_turn_keeps_counting_its_calls(StorageConfig {
        url,
        ..StorageConfig::default()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_counts_a_killed_turns_calls_against_the_cap() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    a_killed_turn_keeps_counting_its_calls(db.config.clone()).await;
    db.drop().await;
}
