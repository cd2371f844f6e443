//! kill -9 at random moments under sustained webhook load, on both
//! backends. One sender per pull request posts its events in order and
//! retries each until it is acknowledged (as GitHub redelivers); the daemon
//! is killed three times at random and started again at once. Checked per
//! event from what the fake model and the fake GitHub saw: nothing lost
//! (every event asked and answered), never asked again once its answer was
//! delivered (only turns cut off mid-flight are asked twice), and per pull
//! request asked and answered in arrival order.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;

use super::{Daemon, FakeGithub, FakeLlm, PgTestDb, Reply, StorageConfig, Store, common, text};
use super::{marker, marker_in, send, write_config};

const PRS: usize = 24;
const PER_PR: usize = 25;
const KILLS: usize = 3;
/// Between two events of one pull request.
const PACE: Duration = Duration::from_millis(200);

async fn chaos(storage: StorageConfig) {
    let dir = tempfile::tempdir().unwrap();
    let asked: Arc<Mutex<Vec<(Instant, usize)>>> = Arc::default();
    let log = asked.clone();
    let llm = FakeLlm::responding(move |request| {
        let m = marker(request).expect("every request names its event");
        log.lock().unwrap().push((Instant::now(), m));
        Reply::Json(text(&format!("answer marker-{m:03}")))
    })
    .await;
    let github = FakeGithub::start().await;
    write_config(dir.path(), &storage.url, &llm.url, &github.url);
    let started = Instant::now();
    let path = dir.path().to_path_buf();
    let mut daemon = tokio::task::spawn_blocking(move || Daemon::start(&path))
        .await
        .unwrap();
    let addr = Arc::new(Mutex::new(daemon.addr.clone()));

    let client = switchboard::http::client::client();
    let mut senders = tokio::task::JoinSet::new();
    for pr in 0..PRS {
        let (client, addr) = (client.clone(), addr.clone());
        senders.spawn(async move {
            let mut retries: BTreeMap<Option<u16>, usize> = BTreeMap::new();
            for k in 0..PER_PR {
                let i = k * PRS + pr;
                let body = common::pr_push(pr + 1, &format!("marker-{i:03}"));
                let delivery = format!("chaos-{i}");
                loop {
                    let to = addr.lock().unwrap().clone();
                    let status = send(&client, &to, &delivery, body.clone()).await;
                    if matches!(status, Some(200 | 202)) {
                        break;
                    }
                    *retries.entry(status).or_default() += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tokio::time::sleep(PACE).await;
            }
            retries
        });
    }

    let run = PACE * PER_PR as u32;
    let mut kills: Vec<Duration> = (0..KILLS)
        .map(|_| run.mul_f64(rand::rng().random_range(0.1..0.85)))
        .collect();
    kills.sort();
    for at in kills {
        tokio::time::sleep(at.saturating_sub(started.elapsed())).await;
        daemon.kill();
        let path = dir.path().to_path_buf();
        daemon = tokio::task::spawn_blocking(move || Daemon::start(&path))
            .await
            .unwrap();
        *addr.lock().unwrap() = daemon.addr.clone();
    }
    // Why senders had to try again: no answer (down) or a status.
    let mut retried: BTreeMap<Option<u16>, usize> = BTreeMap::new();
    while let Some(r) = senders.join_next().await {
        for (status, n) in r.unwrap() {
            *retried.entry(status).or_default() += n;
        }
    }
    let took = started.elapsed();
    let store = Store::open(&storage).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !store.inbox_pending(10).await.unwrap().is_empty()
        || !store.outbox_pending(10).await.unwrap().is_empty()
    {
        daemon.assert_running();
        assert!(Instant::now() < deadline, "the backlog was not worked off");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    daemon.stop();

    let events = PRS * PER_PR;
    let asked = asked.lock().unwrap().clone();
    let answered: Vec<(Instant, usize)> = github
        .seen()
        .iter()
        .filter_map(|s| Some((s.at, marker_in(s.body["body"].as_str()?)?)))
        .collect();
    let mut asks: BTreeMap<usize, Vec<Instant>> = BTreeMap::new();
    for (at, m) in &asked {
        asks.entry(*m).or_default().push(*at);
    }
    let mut answers: BTreeMap<usize, Vec<Instant>> = BTreeMap::new();
    for (at, m) in &answered {
        answers.entry(*m).or_default().push(*at);
    }
    let lost: Vec<usize> = (0..events)
        .filter(|i| !asks.contains_key(i) || !answers.contains_key(i))
        .collect();
    let rerun: Vec<usize> = asks
        .iter()
        .filter(|(m, at)| at.iter().any(|a| answers.get(m).is_some_and(|d| *a > d[0])))
        .map(|(m, _)| *m)
        .collect();
    let asked_twice = asks.values().filter(|a| a.len() > 1).count();
    let resent = answers.values().filter(|a| a.len() > 1).count();
    eprintln!(
        "chaos on {:?}: {events} events in {took:?}, {KILLS} kills, sender retries {retried:?}; \
         lost {}, run again after their answer {}, asked twice (cut off mid-turn) {asked_twice}, \
         answer sent twice (cut off mid-send) {resent}",
        store.kind(),
        lost.len(),
        rerun.len()
    );
    assert!(lost.is_empty(), "lost: {lost:?}");
    assert!(
        rerun.is_empty(),
        "asked again after their answer went out: {rerun:?}"
    );
    // A kill cuts off at most the turn (or the send) each session has in flight.
    assert!(asked_twice <= KILLS * PRS, "{asked_twice} asked twice");
    assert!(resent <= KILLS * PRS, "{resent} sent twice");
    // Per pull request, each event's first ask and first answer come in
    // arrival order.
    for (what, seen) in [("asked", &asks), ("answered", &answers)] {
        common::assert_in_order(what, seen, PRS, usize::MAX);
    }
    let outbox = store.outbox(10_000).await.unwrap();
    assert_eq!(outbox.len(), events, "one answer recorded per event");
    assert!(outbox.iter().all(|o| o.status == "sent"));
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_kill_9_at_random_under_load_loses_nothing_and_runs_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let storage = StorageConfig {
        url: format!("sqlite://{}/chaos.db", dir.path().display()),
        ..StorageConfig::default()
    };
    chaos(storage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_kill_9_at_random_under_load_loses_nothing_and_runs_nothing_twice() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    chaos(db.config.clone()).await;
    db.drop().await;
}
