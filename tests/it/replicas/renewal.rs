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

/// Lease `name` as the database records it.
async fn lease(store: &Store, name: &str) -> switchboard::store::LeaseRow {
    store
        .leases()
        .await
        .unwrap()
        .into_iter()
        .find(|l| l.name == name)
        .expect("the lease is recorded")
}

/// When `term` ends, the time its lease `name` has left in the database
/// (which still names `holder`).
async fn left_when_it_ends(
    store: &Store,
    term: &switchboard::cluster::Term,
    name: &str,
    holder: &str,
) -> i64 {
    tokio::time::timeout(Duration::from_secs(10), term.ended.cancelled())
        .await
        .expect("the term ended");
    let now = store.db_now_ms().await.unwrap();
    let lease = lease(store, name).await;
    assert_eq!(lease.holder, holder, "nobody else took {name} yet");
    lease.expires_at - now
}

/// Another transaction holds the replica's row, so each renewal waits
/// (longer than the lease) for the database. A term taken before, and one
/// taken while a renewal already waits, each end while their lease has
/// time left, and only then does a standby get it. The renewal once
/// waited out its own timeout before looking at the deadline: the term
/// ended as the lease lapsed, and a standby polled Telegram beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_renewals_hang_ends_its_terms_before_their_leases_lapse() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    // The stuck replica's waiting statements hold connections of its own
    // pool, not the standby's.
    let (mine, theirs) = (db.store().await, db.store().await);
    let tasks = TaskTracker::new();
    let stop = CancellationToken::new();
    let stuck = join(&mine, "stuck", &tasks, &stop).await;
    let first = stuck
        .try_hold("ingress:telegram", &stop)
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

    let left = left_when_it_ends(&theirs, &first, "ingress:telegram", stuck.id()).await;
    assert!(
        left >= 100,
        "the term ended {left} ms before its lease lapses; a standby may take it at once"
    );
    // Nothing held now; a renewal waits on the row.
    let second = stuck
        .try_hold("ingress:discord", &stop)
        .await
        .unwrap()
        .expect("the lease is free");
    let left = left_when_it_ends(&theirs, &second, "ingress:discord", stuck.id()).await;
    assert!(
        left >= 100,
        "a term taken while a renewal waited ended {left} ms before its lease lapses"
    );

    let standby = join(&theirs, "standby", &tasks, &stop).await;
    let taken = tokio::time::timeout(
        Duration::from_secs(10),
        standby.lead("ingress:telegram", &stop),
    )
    .await
    .expect("the standby takes the lapsed lease")
    .expect("not stopped");
    assert!(taken.token > first.token);

    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
    blocker.close().await.unwrap();
    stop.cancel();
    tasks.close();
    tasks.wait().await;
    mine.close().await;
    theirs.close().await;
    db.drop().await;
}

/// The database answers a replica taking a lease only as the lease is
/// about to lapse (its statement waited on a row another transaction was
/// writing; the expiry it set was counted from before the wait). Nothing
/// starts under it: the lease is given back at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_too_late_to_be_trusted_is_given_back() {
    const LEASE: &str = "ingress:slack";
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let store = db.store().await;
    let tasks = TaskTracker::new();
    let stop = CancellationToken::new();
    let slow = join(&store, "slow", &tasks, &stop).await;

    let mut writer = sqlx::postgres::PgConnection::connect(&db.config.url)
        .await
        .unwrap();
    sqlx::query("BEGIN").execute(&mut writer).await.unwrap();
    sqlx::query(
        "INSERT INTO leases (name, holder, token, acquired_at, expires_at) \
         VALUES ($1, 'someone', 1, 0, 0)",
    )
    .bind(LEASE)
    .execute(&mut writer)
    .await
    .unwrap();
    let taking = {
        let (slow, stop) = (slow.clone(), stop.clone());
        tokio::spawn(async move { slow.try_hold(LEASE, &stop).await.unwrap() })
    };
    // Its statement waits on the row the other transaction writes.
    let waits = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                 AND pid IN (SELECT pid FROM pg_locks WHERE relation = 'leases'::regclass)";
    common::eventually_within(
        "the taking waits on the row",
        Duration::from_secs(10),
        || {
            let url = db.config.url.clone();
            async move {
                let mut c = sqlx::postgres::PgConnection::connect(&url).await.unwrap();
                let n: i64 = sqlx::query_scalar(waits).fetch_one(&mut c).await.unwrap();
                c.close().await.unwrap();
                n > 0
            }
        },
    )
    .await;
    // The database takes five sixths of the lease and more to answer.
    tokio::time::sleep(slow.lease_ttl() * 5 / 6 + Duration::from_millis(100)).await;
    sqlx::query("ROLLBACK").execute(&mut writer).await.unwrap();
    writer.close().await.unwrap();

    assert!(taking.await.unwrap().is_none(), "no term under it");
    assert!(slow.held().is_empty());
    assert_eq!(
        lease(&store, LEASE).await.expires_at,
        0,
        "given back, not left to lapse"
    );

    stop.cancel();
    tasks.close();
    tasks.wait().await;
    store.close().await;
    db.drop().await;
}
