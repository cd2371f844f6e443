//! Drain semantics of the daemon: components get the grace period to finish
//! after shutdown, and no longer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use switchboard::config::{Config, Env};
use switchboard::daemon::Daemon;

fn config(dir: &std::path::Path, grace_secs: u64) -> Config {
    let mut config = Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.server.shutdown_grace_secs = grace_secs;
    config.storage.url = format!("sqlite://{}/sb.db", dir.display());
    config
}

#[tokio::test]
async fn running_work_finishes_before_exit() {
    let dir = tempfile::tempdir().unwrap();
    let finished = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let flag = finished.clone();
    let daemon = Daemon::new(config(dir.path(), 10), Env::default()).component(
        "turn",
        move |ctx| async move {
            ctx.health.set("turn", true, "running");
            let _ = started_tx.send(());
            ctx.stop.cancelled().await;
            // Finishing the current turn takes a while after the stop.
            tokio::time::sleep(Duration::from_millis(300)).await;
            ctx.gateway
                .sessions
                .recent_events("turn", 1)
                .await
                .expect("storage still open while draining");
            flag.store(true, Ordering::SeqCst);
        },
    );
    let shutdown = async move {
        started_rx.await.unwrap();
        "test"
    };
    let began = Instant::now();
    daemon.run_until(shutdown).await.unwrap();
    assert!(
        finished.load(Ordering::SeqCst),
        "returned before the work finished"
    );
    assert!(began.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn overrunning_work_is_abandoned_after_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let daemon =
        Daemon::new(config(dir.path(), 1), Env::default()).component("stuck", |_ctx| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        });
    let began = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(20), daemon.run_until(async { "test" }))
        .await
        .expect("run_until must return after the grace period");
    result.unwrap();
    let took = began.elapsed();
    assert!(took >= Duration::from_secs(1), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[tokio::test]
async fn approvals_pending_at_start_are_expired() {
    use switchboard::store::{ApprovalRecord, ApprovalStatus, PatternKeys, Store, now_ms};
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), 5);
    let store = Store::open(&config.storage).await.unwrap();
    let record = ApprovalRecord {
        id: "ab".repeat(16),
        session_id: "s".into(),
        session_key: "telegram:dm:1".into(),
        requester: "telegram:1".into(),
        command: "rm -rf build".into(),
        pattern_keys: PatternKeys(vec!["recursive_delete".into()]),
        status: ApprovalStatus::Pending,
        approver: None,
        reason: None,
        created_at: now_ms(),
        expires_at: now_ms() + 300_000,
        decided_at: None,
    };
    store.insert_approval(&record).await.unwrap();
    Daemon::new(config, Env::default())
        .run_until(async { "test" })
        .await
        .unwrap();
    let after = store.approval(&record.id).await.unwrap().unwrap();
    assert_eq!(after.status, ApprovalStatus::Expired);
    assert_eq!(after.reason.as_deref(), Some("gateway restarted"));
    assert_eq!(store.audit_rows().await.unwrap()[0].event, "expired");
}
