//! Replicas share the work (#48): under steady load a replica back from a
//! restart, or one that joins, takes its share of the sessions within a
//! few leases; a replica that drains hands its sessions over between
//! turns. Sessions move only between turns: every event is asked and
//! answered once, each pull request's in order.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{common, deliver, env, replica};
use common::fake_github::FakeGithub;
use common::fake_llm::{FakeLlm, Reply, text};
use common::in_process::InProcess;
use common::{PgTestDb, eventually_within, marker, marker_in};
use switchboard::config::{Config, StorageConfig};
use switchboard::store::Store;

/// Between two events of one pull request.
const PACE: Duration = Duration::from_millis(250);

/// Who asked the model about which event, and when.
type Asked = Arc<Mutex<Vec<(Instant, usize, String)>>>;

/// The model answers `answer marker-N` after `thinking`, noting the time,
/// the marker and the model named (each replica names its own).
async fn model(thinking: Duration) -> (FakeLlm, Asked) {
    let asked: Asked = Arc::default();
    let log = asked.clone();
    let llm = FakeLlm::responding(move |request| {
        let m = marker(request).expect("every request names its event");
        let by = request["model"].as_str().unwrap_or_default().to_string();
        log.lock().unwrap().push((Instant::now(), m, by));
        let answer = Reply::Json(text(&format!("answer marker-{m:06}")));
        Reply::Delayed(thinking, Box::new(answer))
    })
    .await;
    (llm, asked)
}

/// Replica `name`, asking the model as `model-<name>`.
fn named(
    dir: &std::path::Path,
    name: &str,
    storage: &StorageConfig,
    llm: &FakeLlm,
    github: &FakeGithub,
) -> Config {
    let mut config = replica(dir, name, storage, llm, github, None);
    config.llm.model = format!("model-{name}");
    config
}

/// Events for `prs` pull requests, each every [`PACE`], to the replicas
/// in `bases` in turn (one that does not take it is skipped), until
/// stopped.
struct Load {
    bases: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    senders: tokio::task::JoinSet<usize>,
}

impl Load {
    fn start(bases: Vec<String>, prs: usize) -> Self {
        let bases = Arc::new(Mutex::new(bases));
        let stop = Arc::new(AtomicBool::new(false));
        let client = switchboard::http::client::client();
        let mut senders = tokio::task::JoinSet::new();
        for pr in 0..prs {
            let (client, bases, stop) = (client.clone(), bases.clone(), stop.clone());
            senders.spawn(async move {
                let mut k = 0;
                let mut to = pr;
                while !stop.load(Ordering::SeqCst) {
                    let i = k * prs + pr;
                    let body = common::pr_push(pr + 1, &format!("marker-{i:06}"));
                    loop {
                        let base = {
                            let bases = bases.lock().unwrap();
                            bases[to % bases.len()].clone()
                        };
                        to += 1;
                        if deliver(&client, &base, &format!("share-{i}"), body.clone()).await
                            == Some(202)
                        {
                            break;
                        }
                    }
                    k += 1;
                    tokio::time::sleep(PACE).await;
                }
                k
            });
        }
        Self {
            bases,
            stop,
            senders,
        }
    }

    fn send_to(&self, bases: Vec<String>) {
        *self.bases.lock().unwrap() = bases;
    }

    /// Stops sending; returns how many events were sent.
    async fn stop(mut self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        let mut sent = 0;
        while let Some(k) = self.senders.join_next().await {
            sent += k.unwrap();
        }
        sent
    }
}

/// Sessions owned per live replica, by name.
async fn owned(store: &Store) -> BTreeMap<String, i64> {
    store
        .session_shares(3_000)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, name, owned)| (name, owned))
        .collect()
}

/// Of the model calls made in the last `window` (none before `since`),
/// how many and the share made by `model-<name>`.
fn share_of(asked: &Asked, name: &str, since: Instant, window: Duration) -> (usize, f64) {
    let from = since.max(Instant::now() - window);
    let asked = asked.lock().unwrap();
    let recent: Vec<_> = asked.iter().filter(|(at, _, _)| *at >= from).collect();
    let mine = recent
        .iter()
        .filter(|(_, _, by)| *by == format!("model-{name}"))
        .count();
    (recent.len(), mine as f64 / recent.len().max(1) as f64)
}

/// Waits for every event sent (`prs` pull requests, `sent` events
/// rounded up to whole rounds) to be answered, then checks each was asked
/// and answered once, in order per pull request.
async fn all_answered_once_in_order(
    store: &Store,
    github: &FakeGithub,
    asked: &Asked,
    prs: usize,
    sent: usize,
) {
    eventually_within("every event answered", Duration::from_secs(60), || async {
        store.inbox_pending(10).await.unwrap().is_empty()
            && store.outbox_pending(10).await.unwrap().is_empty()
    })
    .await;
    let mut asks: BTreeMap<usize, Vec<Instant>> = BTreeMap::new();
    for (at, m, _) in asked.lock().unwrap().iter() {
        asks.entry(*m).or_default().push(*at);
    }
    let mut answers: BTreeMap<usize, Vec<Instant>> = BTreeMap::new();
    for s in github.seen() {
        if let Some(m) = s.body["body"].as_str().and_then(marker_in) {
            answers.entry(m).or_default().push(s.at);
        }
    }
    let twice: Vec<_> = asks.iter().filter(|(_, a)| a.len() > 1).collect();
    assert!(twice.is_empty(), "asked twice: {twice:?}");
    assert!(answers.values().all(|a| a.len() == 1), "each answered once");
    assert_eq!(asks.len(), answers.len(), "every event asked was answered");
    assert!(
        asks.len() >= sent.saturating_sub(prs) && asks.len() <= sent,
        "{} asked of {sent} sent",
        asks.len()
    );
    common::assert_in_order("asked", &asks, prs, usize::MAX);
    common::assert_in_order("answered", &answers, prs, usize::MAX);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_back_from_a_restart_makes_its_share_of_the_calls_within_a_few_leases() {
    const PRS: usize = 16;
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (llm, asked) = model(Duration::from_millis(40)).await;
    let github = FakeGithub::start().await;
    let (da, dbb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = InProcess::start(named(da.path(), "a", &db.config, &llm, &github), env()).await;
    let b = InProcess::start(named(dbb.path(), "b", &db.config, &llm, &github), env()).await;
    let store = db.store().await;
    let started = Instant::now();
    let load = Load::start(vec![a.base.clone(), b.base.clone()], PRS);
    eventually_within(
        "both replicas run turns",
        Duration::from_secs(20),
        || async {
            let (n, share) = share_of(&asked, "a", started, Duration::from_secs(3));
            n > 20 && share > 0.0
        },
    )
    .await;
    // a goes away; b takes every session and keeps them while they stay
    // busy.
    load.send_to(vec![b.base.clone()]);
    a.shutdown().await;
    eventually_within("b owns every session", Duration::from_secs(20), || async {
        owned(&store).await.get("b") == Some(&(PRS as i64))
    })
    .await;
    let back = Instant::now();
    let a = InProcess::start(named(da.path(), "a", &db.config, &llm, &github), env()).await;
    load.send_to(vec![a.base.clone(), b.base.clone()]);
    eventually_within(
        "a makes 30 % of the calls again",
        Duration::from_secs(30),
        || async {
            let (n, share) = share_of(&asked, "a", back, Duration::from_secs(3));
            n >= 20 && share >= 0.3
        },
    )
    .await;
    let took = back.elapsed();
    let (_, taken) = a.gateway.cluster.moves();
    let shares = owned(&store).await;
    let sent = load.stop().await;
    all_answered_once_in_order(&store, &github, &asked, PRS, sent).await;
    eprintln!(
        "restart: a back to >= 30 % of the calls after {took:?} (lease 3 s); sessions {shares:?}; \
         a took {taken} by hand-off; {sent} events"
    );
    assert!(taken > 0, "sessions came to a by hand-off");
    let metrics = switchboard::http::client::client()
        .get(format!("{}/metrics", a.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        "switchboard_cluster_session_moves_total{direction=\"out\"}",
        "switchboard_cluster_session_moves_total{direction=\"in\"}",
        "switchboard_cluster_sessions_owned",
    ] {
        assert!(metrics.contains(series), "{series} in {metrics}");
    }
    a.shutdown().await;
    b.shutdown().await;
    store.close().await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_replica_joining_ends_with_about_a_third_of_the_sessions() {
    const PRS: usize = 18;
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (llm, asked) = model(Duration::from_millis(40)).await;
    let github = FakeGithub::start().await;
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let a = InProcess::start(named(dirs[0].path(), "a", &db.config, &llm, &github), env()).await;
    let b = InProcess::start(named(dirs[1].path(), "b", &db.config, &llm, &github), env()).await;
    let store = db.store().await;
    let load = Load::start(vec![a.base.clone(), b.base.clone()], PRS);
    eventually_within(
        "a and b own every session",
        Duration::from_secs(20),
        || async { owned(&store).await.values().sum::<i64>() == PRS as i64 },
    )
    .await;
    let joined = Instant::now();
    let c = InProcess::start(named(dirs[2].path(), "c", &db.config, &llm, &github), env()).await;
    load.send_to(vec![a.base.clone(), b.base.clone(), c.base.clone()]);
    let third = (PRS / 3) as i64;
    eventually_within(
        "each owns about a third",
        Duration::from_secs(30),
        || async {
            let shares = owned(&store).await;
            shares.len() == 3 && shares.values().all(|n| (third - 1..=third + 1).contains(n))
        },
    )
    .await;
    let took = joined.elapsed();
    let shares = owned(&store).await;
    let (_, to_c) = c.gateway.cluster.moves();
    let sent = load.stop().await;
    all_answered_once_in_order(&store, &github, &asked, PRS, sent).await;
    eprintln!("join: {shares:?} after {took:?}; c took {to_c} by hand-off; {sent} events");
    for r in [a, b, c] {
        r.shutdown().await;
    }
    store.close().await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_replica_hands_its_sessions_over_between_turns() {
    const PRS: usize = 8;
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    // Turns long enough that the drain finds some running.
    let (llm, asked) = model(Duration::from_millis(400)).await;
    let github = FakeGithub::start().await;
    let (da, dbb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = InProcess::start(named(da.path(), "a", &db.config, &llm, &github), env()).await;
    let b = InProcess::start(named(dbb.path(), "b", &db.config, &llm, &github), env()).await;
    let store = db.store().await;
    let load = Load::start(vec![a.base.clone(), b.base.clone()], PRS);
    eventually_within("a owns sessions", Duration::from_secs(20), || async {
        owned(&store).await.get("a").is_some_and(|n| *n >= 2)
    })
    .await;
    load.send_to(vec![b.base.clone()]);
    let had = owned(&store).await.get("a").copied().unwrap_or(0);
    let a_cluster = a.gateway.cluster.clone();
    let drained = Instant::now();
    a.shutdown().await;
    let took = drained.elapsed();
    let (handed, _) = a_cluster.moves();
    eventually_within("b owns every session", Duration::from_secs(10), || async {
        owned(&store).await.get("b") == Some(&(PRS as i64))
    })
    .await;
    let taken = drained.elapsed();
    let sent = load.stop().await;
    all_answered_once_in_order(&store, &github, &asked, PRS, sent).await;
    eprintln!(
        "drain: a owned {had} sessions, stopped in {took:?} and handed {handed} over; \
         b owned all {PRS} after {taken:?}; {sent} events"
    );
    assert!(handed >= 1, "a handed its sessions over as it drained");
    b.shutdown().await;
    store.close().await;
    db.drop().await;
}
