//! Fencing when the database is slow: a replica whose renewals hang ends
//! its terms before their leases can lapse, so the replica that takes a
//! lease over never finds the former holder still at work.

use super::*;

use sqlx::Connection;
use switchboard::cluster::Cluster;
use switchboard::config::ClusterConfig;
use switchboard::telemetry::Health;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

async fn join(store: &Store, name: &str, tasks: &TaskTracker, stop: &CancellationToken) -> Cluster {
    let config = ClusterConfig {
        name: name.into(),
        lease_secs: 3,
        ..ClusterConfig::default()
    };
    Cluster::join(store, &config, Health::default(), tasks, stop.clone())
        .await
        .unwrap()
}

/// Another transaction holds the replica's row, so each renewal waits
/// (longer than the lease) for the database. The term still ends while its
/// lease has time left, and only then does a standby get it. The renewal
/// once waited out its own timeout before looking at the deadline: the
/// term ended as the lease lapsed, and a standby polled Telegram beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_renewals_hang_ends_its_term_before_the_lease_lapses() {
    const LEASE: &str = "ingress:telegram";
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let store = db.store().await;
    let tasks = TaskTracker::new();
    let stop = CancellationToken::new();
    let stuck = join(&store, "stuck", &tasks, &stop).await;
    let term = stuck
        .try_hold(LEASE, &stop)
        .await
        .unwrap()
        .expect("the lease is free");

    let mut blocker = sqlx::postgres::PgConnection::connect(&db.config.url)
        .await
        .unwrap();
    sqlx::query("BEGIN").execute(&mut blocker).await.unwrap();
    sqlx::query("SELECT 1 FROM replicas WHERE id = $1 FOR UPDATE")
        .bind(stuck.id())
        .execute(&mut blocker)
        .await
        .unwrap();

    tokio::time::timeout(Duration::from_secs(10), term.ended.cancelled())
        .await
        .expect("the term ended");
    let now = store.db_now_ms().await.unwrap();
    let lease = store
        .leases()
        .await
        .unwrap()
        .into_iter()
        .find(|l| l.name == LEASE)
        .expect("the lease is still recorded");
    assert_eq!(lease.holder, stuck.id(), "nobody else took it yet");
    let left = lease.expires_at - now;
    assert!(
        left >= 100,
        "the term ended {left} ms before its lease lapses; a standby may take it at once"
    );

    let standby = join(&store, "standby", &tasks, &stop).await;
    let taken = tokio::time::timeout(Duration::from_secs(10), standby.lead(LEASE, &stop))
        .await
        .expect("the standby takes the lapsed lease")
        .expect("not stopped");
    assert!(taken.token > term.token);

    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
    blocker.close().await.unwrap();
    stop.cancel();
    tasks.close();
    tasks.wait().await;
    store.close().await;
    db.drop().await;
}
