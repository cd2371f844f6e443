//! Three replicas of the real binary on one PostgreSQL database, killed
//! with SIGKILL at random (the Telegram poller among them) while 3000
//! signed webhook deliveries spread over all three and a fake Telegram
//! keeps sending messages: every acknowledged event is answered, a turn is
//! asked again only when a kill cut it off, each pull request's events are
//! asked and answered in order, two replicas never poll Telegram at once,
//! and a standby takes the poller's place within the lease.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;

use super::{Daemon, FakeGithub, FakeLlm, PgTestDb, Reply, Store, common, text};
use super::{marker, marker_in, send, write_config_with};
use crate::common::fake_telegram::FakeTelegram;

const REPLICAS: usize = 3;
const PRS: usize = 40;
const EVENTS: usize = 3000;
const MESSAGES: usize = 60;
const KILLS: usize = 4;
const LEASE_SECS: u64 = 3;
/// Between two events of one pull request.
const PACE: Duration = Duration::from_millis(120);
/// Telegram markers start here.
const CHAT_MARKERS: usize = 100_000;
const FIRST_USER: i64 = 2000;

fn extra(name: &str, telegram: &str) -> String {
    let users: Vec<String> = (0..10).map(|u| (FIRST_USER + u).to_string()).collect();
    format!(
        r#"
[cluster]
name = "{name}"
lease_secs = {LEASE_SECS}
[telegram]
enabled = true
api_url = "{telegram}"
allowed_users = [{}]
"#,
        users.join(", ")
    )
}

/// The name of the replica holding the Telegram poller's lease, if any.
async fn poller(store: &Store) -> Option<String> {
    let now = store.db_now_ms().await.ok()?;
    let lease = store
        .leases()
        .await
        .ok()?
        .into_iter()
        .find(|l| l.name == "ingress:telegram" && l.expires_at > now)?;
    let (replicas, _) = store.replicas().await.ok()?;
    replicas
        .into_iter()
        .find(|r| r.id == lease.holder)
        .map(|r| r.name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_killed_at_random_answer_every_event_once_in_order() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let asked: Arc<Mutex<Vec<(Instant, usize)>>> = Arc::default();
    let log = asked.clone();
    let llm = FakeLlm::responding(move |request| {
        let m = marker(request).expect("every request names its event");
        log.lock().unwrap().push((Instant::now(), m));
        Reply::Json(text(&format!("answer marker-{m:06}")))
    })
    .await;
    let github = FakeGithub::start().await;
    let tg = FakeTelegram::start().await;
    let dirs: Vec<tempfile::TempDir> = (0..REPLICAS)
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    for (i, dir) in dirs.iter().enumerate() {
        let more = extra(&format!("r{i}"), &tg.url);
        write_config_with(dir.path(), &db.config.url, &llm.url, &github.url, &more);
    }
    let started = Instant::now();
    let mut daemons: Vec<Option<Daemon>> = Vec::new();
    for dir in &dirs {
        let path = dir.path().to_path_buf();
        daemons.push(Some(
            tokio::task::spawn_blocking(move || Daemon::start(&path))
                .await
                .unwrap(),
        ));
    }
    let addrs: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(
        daemons
            .iter()
            .map(|d| d.as_ref().unwrap().addr.clone())
            .collect(),
    ));

    // Each pull request's events go to the replicas in turn; a replica that
    // does not answer (killed) is skipped for the next.
    let client = switchboard::http::client::client();
    let mut senders = tokio::task::JoinSet::new();
    for pr in 0..PRS {
        let (client, addrs) = (client.clone(), addrs.clone());
        senders.spawn(async move {
            let mut retries = 0usize;
            let mut to = pr;
            for k in 0..EVENTS / PRS {
                let i = k * PRS + pr;
                let body = common::pr_push(pr + 1, &format!("marker-{i:06}"));
                let delivery = format!("replicas-{i}");
                loop {
                    let addr = addrs.lock().unwrap()[to % REPLICAS].clone();
                    to += 1;
                    if matches!(
                        send(&client, &addr, &delivery, body.clone()).await,
                        Some(200 | 202)
                    ) {
                        break;
                    }
                    retries += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                tokio::time::sleep(PACE).await;
            }
            retries
        });
    }
    let sending = PACE * (EVENTS / PRS) as u32;
    // Telegram messages from ten people meanwhile, to whichever replica
    // polls.
    let chats = {
        let tg = tg.clone();
        let every = sending / MESSAGES as u32;
        tokio::spawn(async move {
            for k in 0..MESSAGES {
                let user = FIRST_USER + (k % 10) as i64;
                let text = format!("marker-{:06}", CHAT_MARKERS + k);
                tg.push(FakeTelegram::message(
                    user,
                    user,
                    "Someone",
                    100 + k as i64,
                    &text,
                ));
                tokio::time::sleep(every).await;
            }
        })
    };

    // The kills: at random moments while the events arrive, at least one
    // of them the Telegram poller.
    let store = db.store().await;
    let mut kills: Vec<Duration> = (0..KILLS)
        .map(|_| sending.mul_f64(rand::rng().random_range(0.1..0.8)))
        .collect();
    kills.sort();
    let mut poller_kills = Vec::new();
    for (n, at) in kills.into_iter().enumerate() {
        tokio::time::sleep(at.saturating_sub(started.elapsed())).await;
        let leader = poller(&store).await;
        let victim = match (&leader, n) {
            (Some(name), 0) => name.trim_start_matches('r').parse().unwrap_or(0),
            _ => rand::rng().random_range(0..REPLICAS),
        };
        let killed_poller = leader.as_deref() == Some(&format!("r{victim}"));
        let at = Instant::now();
        daemons[victim].take().unwrap().kill();
        if killed_poller {
            poller_kills.push(at);
        }
        let path = dirs[victim].path().to_path_buf();
        let daemon = tokio::task::spawn_blocking(move || Daemon::start(&path))
            .await
            .unwrap();
        addrs.lock().unwrap()[victim] = daemon.addr.clone();
        daemons[victim] = Some(daemon);
    }
    let mut retried = 0;
    while let Some(r) = senders.join_next().await {
        retried += r.unwrap();
    }
    chats.await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let answered_chats = tg.calls("sendMessage").len();
        if store.inbox_pending(10).await.unwrap().is_empty()
            && store.outbox_pending(10).await.unwrap().is_empty()
            && answered_chats >= MESSAGES
        {
            break;
        }
        if Instant::now() >= deadline {
            let inbox = store.inbox_pending(100_000).await.unwrap();
            let mut by_session: BTreeMap<String, usize> = BTreeMap::new();
            for row in &inbox {
                *by_session.entry(row.session_key.clone()).or_default() += 1;
            }
            let now = store.db_now_ms().await.unwrap();
            let leases: Vec<String> = store
                .leases()
                .await
                .unwrap()
                .into_iter()
                .filter(|l| l.expires_at > now)
                .map(|l| format!("{}@{}", l.name, l.holder))
                .collect();
            panic!(
                "the backlog was not worked off: {} events pending {by_session:?}, {} answers owed, \
                 {answered_chats} chat answers; leases {leases:?}",
                inbox.len(),
                store.outbox_pending(100_000).await.unwrap().len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = started.elapsed();
    for d in daemons.into_iter().flatten() {
        d.stop();
    }

    let asked = asked.lock().unwrap().clone();
    let mut asks: BTreeMap<usize, Vec<Instant>> = BTreeMap::new();
    for (at, m) in &asked {
        asks.entry(*m).or_default().push(*at);
    }
    let mut answers: BTreeMap<usize, Vec<Instant>> = BTreeMap::new();
    for s in github.seen() {
        if let Some(m) = s.body["body"].as_str().and_then(marker_in) {
            answers.entry(m).or_default().push(s.at);
        }
    }
    for c in tg.calls("sendMessage") {
        if let Some(m) = c.body["text"].as_str().and_then(marker_in) {
            answers.entry(m).or_default().push(c.at);
        }
    }
    let all: Vec<usize> = (0..EVENTS)
        .chain(CHAT_MARKERS..CHAT_MARKERS + MESSAGES)
        .collect();
    let lost: Vec<usize> = all
        .iter()
        .copied()
        .filter(|i| !asks.contains_key(i) || !answers.contains_key(i))
        .collect();
    let rerun: Vec<usize> = asks
        .iter()
        .filter(|(m, at)| at.iter().any(|a| answers.get(m).is_some_and(|d| *a > d[0])))
        .map(|(m, _)| *m)
        .collect();
    let asked_twice = asks.values().filter(|a| a.len() > 1).count();
    let resent = answers.values().filter(|a| a.len() > 1).count();
    // Of those, what a person would see twice: a second comment created
    // (a repeated edit of the PR's comment shows nothing new) or a second
    // chat message.
    let mut shown: BTreeMap<usize, usize> = BTreeMap::new();
    for s in github.seen().iter().filter(|s| s.method == "POST") {
        if let Some(m) = s.body["body"].as_str().and_then(marker_in) {
            *shown.entry(m).or_default() += 1;
        }
    }
    for c in tg.calls("sendMessage") {
        if let Some(m) = c.body["text"].as_str().and_then(marker_in) {
            *shown.entry(m).or_default() += 1;
        }
    }
    let shown_twice = shown.values().filter(|n| **n > 1).count();
    // The first poll after each kill of the poller: the takeover.
    let polls: Vec<Instant> = tg.calls("getUpdates").iter().map(|c| c.at).collect();
    let takeovers: Vec<Duration> = poller_kills
        .iter()
        .filter_map(|k| polls.iter().find(|p| *p > k).map(|p| *p - *k))
        .collect();
    eprintln!(
        "{REPLICAS} replicas: {EVENTS} webhook events over {PRS} PRs and {MESSAGES} Telegram \
         messages in {took:?}; {KILLS} kills ({} of the poller), sender retries {retried}; \
         lost {}, run again after their answer {}, asked twice (cut off mid-turn) {asked_twice}, \
         answered twice (cut off mid-send) {resent}, of them shown twice {shown_twice}; \
         Telegram takeovers {takeovers:?}, \
         409 conflicts {}",
        poller_kills.len(),
        lost.len(),
        rerun.len(),
        tg.conflicts()
    );
    assert!(lost.is_empty(), "lost: {lost:?}");
    assert!(
        rerun.is_empty(),
        "asked again after their answer went out: {rerun:?}"
    );
    // A kill cuts off at most the turn (or the send) of each session the
    // killed replica was running.
    assert!(asked_twice <= KILLS * PRS, "{asked_twice} asked twice");
    assert!(resent <= KILLS * PRS, "{resent} answered twice");
    assert_eq!(tg.conflicts(), 0, "two replicas polled Telegram at once");
    assert!(!poller_kills.is_empty(), "the poller was killed");
    for t in &takeovers {
        assert!(
            *t <= Duration::from_secs(LEASE_SECS + 3),
            "a standby took over polling after {t:?}"
        );
    }
    for (what, seen) in [("asked", &asks), ("answered", &answers)] {
        common::assert_in_order(what, seen, PRS, EVENTS);
    }
    store.close().await;
    db.drop().await;
}
