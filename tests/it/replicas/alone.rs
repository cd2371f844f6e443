//! One replica on PostgreSQL with the others' machinery on: a pool of one
//! connection, the inbox's order against events whose notice never came,
//! and a burst over sessions nobody runs yet.

use super::*;

/// `storage.max_connections = 1`: the listeners for other replicas' events
/// and relayed presses hold connections of their own, not the pool's one,
/// so the statements still get it and every event is answered (the
/// listeners once took two of the pool's connections for good, and a pool
/// of two never ran a turn).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_a_pool_of_one_connection_answers_every_event() {
    const PRS: usize = 2;
    const PER_PR: usize = 3;
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (llm, asked) = marking_model().await;
    let github = FakeGithub::start().await;
    let storage = StorageConfig {
        max_connections: 1,
        ..db.config.clone()
    };
    let (a, _dir) = one_replica(&storage, &llm, &github).await;
    let client = switchboard::http::client::client();
    for k in 0..PER_PR {
        for pr in 0..PRS {
            let i = k * PRS + pr;
            let body = common::pr_push(pr + 1, &format!("marker-{i:03}"));
            let status = deliver(&client, &a.base, &format!("one-{i}"), body).await;
            assert_eq!(status, Some(202), "delivery {i}");
        }
    }
    let store = db.store().await;
    answered_each_once(&store, &asked, &github, (PRS, PRS * PER_PR)).await;
    a.shutdown().await;
    store.close().await;
    db.drop().await;
}

/// An event another replica stored for a session this one runs, its
/// notice not here (lost, or still on its way), and a later event handed
/// to the session's worker: the later one's start finds the earlier one
/// waiting (in the same statement) and the worker runs both in the
/// inbox's order, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_event_waits_for_an_earlier_one_whose_notice_never_came() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (llm, asked) = marking_model().await;
    let github = FakeGithub::start().await;
    let (a, _dir) = one_replica(&db.config, &llm, &github).await;
    let client = switchboard::http::client::client();
    let first = common::pr_push(1, "marker-000");
    assert_eq!(deliver(&client, &a.base, "order-0", first).await, Some(202));
    let store = db.store().await;
    eventually_within("the first answered", Duration::from_secs(20), || async {
        store.inbox_pending(10).await.unwrap().is_empty() && !github.seen().is_empty()
    })
    .await;
    // Another replica's event: stored, never noticed.
    let row = store.inbox_latest("webhook", 10).await.unwrap().remove(0);
    let stored = store
        .inbox_insert(&switchboard::store::NewInboxEvent {
            platform: &row.platform,
            dedupe_key: "github:order-1",
            session_key: &row.session_key,
            payload: &row.payload.replace("marker-000", "marker-001"),
        })
        .await
        .unwrap();
    assert!(matches!(
        stored,
        switchboard::store::InboxInsert::Inserted(_)
    ));
    let later = common::pr_push(1, "marker-002");
    assert_eq!(deliver(&client, &a.base, "order-2", later).await, Some(202));
    let asks = answered_each_once(&store, &asked, &github, (1, 3)).await;
    assert!(
        asks[&1][0] < asks[&2][0],
        "the earlier event first: {asks:?}"
    );
    a.shutdown().await;
    store.close().await;
    db.drop().await;
}

/// A burst over many pull requests, none of them live: their sessions are
/// taken over together once the intake is quiet (#45), and every event is
/// still run once, in its pull request's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_over_many_pull_requests_is_taken_over_together_and_answered_once() {
    const PRS: usize = 40;
    const PER_PR: usize = 3;
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (llm, asked) = marking_model().await;
    let github = FakeGithub::start().await;
    let (a, _dir) = one_replica(&db.config, &llm, &github).await;
    let client = switchboard::http::client::client();
    let mut senders = tokio::task::JoinSet::new();
    for pr in 0..PRS {
        let (client, base) = (client.clone(), a.base.clone());
        senders.spawn(async move {
            for k in 0..PER_PR {
                let i = k * PRS + pr;
                let body = common::pr_push(pr + 1, &format!("marker-{i:03}"));
                let status = deliver(&client, &base, &format!("burst-{i}"), body).await;
                assert_eq!(status, Some(202), "delivery {i}");
            }
        });
    }
    while let Some(r) = senders.join_next().await {
        r.unwrap();
    }
    let events = PRS * PER_PR;
    let store = a.store.clone();
    answered_each_once(&store, &asked, &github, (PRS, events)).await;
    let inbox = store.inbox_latest("webhook", 1000).await.unwrap();
    assert_eq!(inbox.len(), events);
    assert!(inbox.iter().all(|r| r.attempts == 1), "each started once");
    let leases = store.leases().await.unwrap();
    let sessions = leases
        .iter()
        .filter(|l| l.name.starts_with("session:"))
        .count();
    assert_eq!(sessions, PRS, "one lease a pull request: {leases:?}");
    assert!(
        leases.iter().all(|l| l.token == 1),
        "each session taken once: {leases:?}"
    );
    a.shutdown().await;
    db.drop().await;
}
