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
    if !lost.is_empty() {
        for row in store.inbox_latest("webhook", 100_000).await.unwrap() {
            if let Some(m) = marker_in(&row.payload)
                && lost.contains(&m)
            {
                eprintln!(
                    "lost: event {m} of {} attempts {} outcome {:?} processed {:?} received {} asked {:?} answered {:?}",
                    row.session_key,
                    row.attempts,
                    row.outcome,
                    row.processed_at.map(|p| p - row.received_at),
                    row.received_at,
                    asks.get(&m),
                    answers.get(&m)
                );
            }
        }
    }
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

/// Two replicas of the real binary behind a round-robin sender, each
/// killed with SIGKILL in turn and kept down a while (#48): once back, a
/// replica makes its share of the model calls again within seconds, and
/// nothing is lost, run again after its answer, or answered out of order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_back_makes_its_share_of_the_calls_again() {
    const PRS: usize = 40;
    const PACE: Duration = Duration::from_millis(400);
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let asked: Arc<Mutex<Vec<(Instant, usize, String)>>> = Arc::default();
    let log = asked.clone();
    let llm = FakeLlm::responding(move |request| {
        let m = marker(request).expect("every request names its event");
        let by = request["model"].as_str().unwrap_or_default().to_string();
        log.lock().unwrap().push((Instant::now(), m, by));
        Reply::Delayed(
            Duration::from_millis(20),
            Box::new(Reply::Json(text(&format!("answer marker-{m:06}")))),
        )
    })
    .await;
    let github = FakeGithub::start().await;
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    for (i, dir) in dirs.iter().enumerate() {
        let more = format!("[cluster]\nname = \"r{i}\"\nlease_secs = {LEASE_SECS}\n");
        write_config_with(dir.path(), &db.config.url, &llm.url, &github.url, &more);
        let path = dir.path().join("gateway.toml");
        let config = std::fs::read_to_string(&path).unwrap().replacen(
            "max_retries = 0",
            &format!("max_retries = 0\nmodel = \"model-r{i}\""),
            1,
        );
        std::fs::write(&path, config).unwrap();
    }
    let start = |i: usize| {
        let path = dirs[i].path().to_path_buf();
        tokio::task::spawn_blocking(move || Daemon::start(&path))
    };
    let mut daemons = vec![Some(start(0).await.unwrap()), Some(start(1).await.unwrap())];
    let addrs: Arc<Mutex<Vec<Option<String>>>> = Arc::new(Mutex::new(
        daemons
            .iter()
            .map(|d| d.as_ref().map(|d| d.addr.clone()))
            .collect(),
    ));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = switchboard::http::client::client();
    let mut senders = tokio::task::JoinSet::new();
    for pr in 0..PRS {
        let (client, addrs, stop) = (client.clone(), addrs.clone(), stop.clone());
        senders.spawn(async move {
            let (mut k, mut to) = (0, pr);
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let i = k * PRS + pr;
                let body = common::pr_push(pr + 1, &format!("marker-{i:06}"));
                loop {
                    let addr = addrs.lock().unwrap()[to % 2].clone();
                    to += 1;
                    if let Some(addr) = addr
                        && matches!(
                            send(&client, &addr, &format!("share-{i}"), body.clone()).await,
                            Some(200 | 202)
                        )
                    {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                k += 1;
                tokio::time::sleep(PACE).await;
            }
            k
        });
    }
    // Of the calls in the last three seconds since `from`, how many, and
    // the share replica `i` made.
    let share = |i: usize, from: Instant| {
        let from = from.max(Instant::now() - Duration::from_secs(3));
        let asked = asked.lock().unwrap();
        let recent: Vec<_> = asked.iter().filter(|(at, _, _)| *at >= from).collect();
        let mine = recent
            .iter()
            .filter(|(_, _, by)| *by == format!("model-r{i}"))
            .count();
        (recent.len(), mine as f64 / recent.len().max(1) as f64)
    };
    let began = Instant::now();
    common::eventually_within("both replicas answer", Duration::from_secs(20), || async {
        let (n, s) = share(0, began);
        n >= 40 && s > 0.2 && s < 0.8
    })
    .await;
    let store = db.store().await;
    let mut back_after = Vec::new();
    let mut downs = Vec::new();
    for victim in [0, 1] {
        addrs.lock().unwrap()[victim] = None;
        daemons[victim].take().unwrap().kill();
        // Kept down until its leases lapsed and the survivor took every
        // session.
        let survivor = format!("r{}", 1 - victim);
        let down = Instant::now();
        common::eventually_within(
            "the survivor owns every session",
            Duration::from_secs(20),
            || async {
                store
                    .session_shares(1_000)
                    .await
                    .unwrap()
                    .iter()
                    .any(|(_, name, owned)| *name == survivor && *owned == PRS as i64)
            },
        )
        .await;
        let down = down.elapsed();
        let daemon = start(victim).await.unwrap();
        addrs.lock().unwrap()[victim] = Some(daemon.addr.clone());
        daemons[victim] = Some(daemon);
        let back = Instant::now();
        common::eventually_within(
            "the replica back makes 30 % of the calls",
            Duration::from_secs(30),
            || async {
                let (n, s) = share(victim, back);
                n >= 40 && s >= 0.3
            },
        )
        .await;
        back_after.push(back.elapsed());
        downs.push(down);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut sent = 0;
    while let Some(k) = senders.join_next().await {
        sent += k.unwrap();
    }
    common::eventually_within("every event answered", Duration::from_secs(60), || async {
        store.inbox_pending(10).await.unwrap().is_empty()
            && store.outbox_pending(10).await.unwrap().is_empty()
    })
    .await;
    for d in daemons.into_iter().flatten() {
        d.stop();
    }
    let mut asks: BTreeMap<usize, Vec<Instant>> = BTreeMap::new();
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for (at, m, model) in asked.lock().unwrap().iter() {
        asks.entry(*m).or_default().push(*at);
        *by.entry(model.clone()).or_default() += 1;
    }
    let mut answers: BTreeMap<usize, Vec<Instant>> = BTreeMap::new();
    for s in github.seen() {
        if let Some(m) = s.body["body"].as_str().and_then(marker_in) {
            answers.entry(m).or_default().push(s.at);
        }
    }
    let unanswered: Vec<usize> = asks
        .keys()
        .copied()
        .filter(|m| !answers.contains_key(m))
        .collect();
    let rerun: Vec<usize> = asks
        .iter()
        .filter(|(m, at)| at.iter().any(|a| answers.get(m).is_some_and(|d| *a > d[0])))
        .map(|(m, _)| *m)
        .collect();
    let asked_twice = asks.values().filter(|a| a.len() > 1).count();
    eprintln!(
        "2 replicas, each killed once and kept down until the other owned every session \
         ({downs:?}): {sent} events over {PRS} PRs; \
         back to >= 30 % of the calls after {back_after:?}; calls by replica {by:?}; \
         unanswered {}, run again after their answer {}, asked twice (cut off mid-turn) \
         {asked_twice}",
        unanswered.len(),
        rerun.len()
    );
    if asks.len() != sent {
        for row in store.inbox_latest("webhook", 100_000).await.unwrap() {
            if let Some(m) = marker_in(&row.payload)
                && !asks.contains_key(&m)
            {
                eprintln!(
                    "never asked: event {m} of {} attempts {} outcome {:?} processed {:?} received {}",
                    row.session_key,
                    row.attempts,
                    row.outcome,
                    row.processed_at.map(|p| p - row.received_at),
                    row.received_at
                );
            }
        }
    }
    assert_eq!(asks.len(), sent, "every event sent was asked");
    assert!(unanswered.is_empty(), "unanswered: {unanswered:?}");
    assert!(rerun.is_empty(), "run again after their answer: {rerun:?}");
    assert!(asked_twice <= 2 * PRS, "{asked_twice} asked twice");
    for (what, seen) in [("asked", &asks), ("answered", &answers)] {
        common::assert_in_order(what, seen, PRS, usize::MAX);
    }
    store.close().await;
    db.drop().await;
}
