//! Several replicas on one PostgreSQL database (#21): leases by the
//! database's clock, sessions owned by one replica at a time whichever
//! replica takes their events, single-connection ingress held by one
//! replica with the others standing by. Real daemons in this process on a
//! schema of their own; skipped without PostgreSQL (not under `CI=true`).

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cut_proxy::CutProxy;
use common::fake_github::FakeGithub;
use common::fake_llm::{FakeLlm, Reply, text};
use common::fake_telegram::FakeTelegram;
use common::in_process::{InProcess, daemon_config};
use common::{PgTestDb, eventually_within, marker, marker_in};
use switchboard::adapters::webhook::verify::github_signature;
use switchboard::config::{Config, Env, StorageConfig};
use switchboard::store::Store;

mod alone;
mod renewal;
mod sharing;
mod slack;

const SECRET: &str = "replica-secret";
const ANN: i64 = 1001;

async fn leases_are_taken_renewed_lapsed_and_given_up(store: Store) {
    assert_eq!(
        store.lease_acquire("ingress:x", "a", 60_000).await.unwrap(),
        Some(1)
    );
    assert_eq!(
        store.lease_acquire("ingress:x", "b", 60_000).await.unwrap(),
        None,
        "held by a"
    );
    // The holder taking it again starts a new term.
    assert_eq!(
        store.lease_acquire("ingress:x", "a", 60_000).await.unwrap(),
        Some(2)
    );
    let x = |t: i64| vec![("ingress:x".to_string(), t)];
    assert_eq!(
        store
            .lease_renew("a", &x(2), 60_000, &Default::default())
            .await
            .unwrap(),
        x(2)
    );
    assert!(
        store
            .lease_renew("a", &x(1), 60_000, &Default::default())
            .await
            .unwrap()
            .is_empty(),
        "an earlier term is not renewed"
    );
    assert!(
        store
            .lease_renew("b", &x(2), 60_000, &Default::default())
            .await
            .unwrap()
            .is_empty()
    );
    // A lapsed lease is taken over with a greater token, and its old
    // holder's renewal no longer has it.
    assert_eq!(
        store.lease_acquire("session:s", "a", 1).await.unwrap(),
        Some(1)
    );
    // Outlasts the 1 ms lease: a time, not an event (20 ms also pins the unit).
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        store.lease_acquire("session:s", "b", 60_000).await.unwrap(),
        Some(2)
    );
    let renewed = store
        .lease_renew(
            "a",
            &[("session:s".to_string(), 1)],
            60_000,
            &Default::default(),
        )
        .await
        .unwrap();
    assert!(
        !renewed.iter().any(|(n, _)| n == "session:s"),
        "{renewed:?}"
    );
    // Giving up needs the current token.
    store.lease_release("session:s", "b", 1).await.unwrap();
    assert_eq!(
        store.lease_acquire("session:s", "a", 60_000).await.unwrap(),
        None
    );
    store.lease_release("session:s", "b", 2).await.unwrap();
    assert_eq!(
        store.lease_acquire("session:s", "a", 60_000).await.unwrap(),
        Some(3)
    );
    let names: Vec<String> = store
        .leases()
        .await
        .unwrap()
        .into_iter()
        .map(|l| format!("{}={}:{}", l.name, l.holder, l.token))
        .collect();
    assert_eq!(names, ["ingress:x=a:2", "session:s=a:3"]);
    let now = store.db_now_ms().await.unwrap();
    assert!((now - switchboard::store::now_ms()).abs() < 60_000);
}

crate::backend_tests!(leases_are_taken_renewed_lapsed_and_given_up);

#[tokio::test]
async fn two_schemas_of_one_database_never_hear_each_others_notices() {
    let (Some(one), Some(two)) = (PgTestDb::create().await, PgTestDb::create().await) else {
        return;
    };
    let (mine, theirs) = (one.store().await, two.store().await);
    let mut listener = mine.listen(&["switchboard_inbox"]).await.unwrap().unwrap();
    // The other schema's notice is committed first: were it heard, it
    // would come first.
    theirs
        .notify("switchboard_inbox", "7 webhook:github:theirs")
        .await
        .unwrap();
    mine.notify("switchboard_inbox", "7 webhook:github:mine")
        .await
        .unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .expect("its own notice arrives")
        .unwrap();
    assert_eq!(heard.payload(), "7 webhook:github:mine");
    assert!(mine.is_channel(heard.channel(), "switchboard_inbox"));
    assert!(!theirs.is_channel(heard.channel(), "switchboard_inbox"));
    drop(listener);
    mine.close().await;
    theirs.close().await;
    one.drop().await;
    two.drop().await;
}

/// A replica's config: the webhook route (comments to `github`), Telegram
/// polling `tg` when given, on `storage`, with short leases.
fn replica(
    dir: &std::path::Path,
    name: &str,
    storage: &StorageConfig,
    llm: &FakeLlm,
    github: &FakeGithub,
    tg: Option<&FakeTelegram>,
) -> Config {
    let mut config = daemon_config(dir, &llm.url);
    config.storage = storage.clone();
    config.cluster.name = name.into();
    config.cluster.lease_secs = 3;
    config.webhook.enabled = true;
    config.webhook.routes = common::in_process::github_route(&github.url);
    if let Some(tg) = tg {
        config.telegram.enabled = true;
        config.telegram.api_url = tg.url.clone();
        config.telegram.allowed_users = vec![ANN];
    }
    config
}

/// Replica `a` alone on `storage`, and its directory.
async fn one_replica(
    storage: &StorageConfig,
    llm: &FakeLlm,
    github: &FakeGithub,
) -> (InProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let a = InProcess::start(replica(dir.path(), "a", storage, llm, github, None), env()).await;
    (a, dir)
}

fn env() -> Env {
    Env::from_pairs([
        ("GITHUB_WEBHOOK_SECRET", SECRET),
        ("GITHUB_TOKEN", "ghs_replicas"),
        ("TELEGRAM_BOT_TOKEN", "123:replicas"),
    ])
}

/// How long the model takes to answer.
const THINKING: Duration = Duration::from_millis(60);

/// The model answers `answer marker-N` to the event with marker N after
/// [`THINKING`], and notes when it was asked.
async fn marking_model() -> (FakeLlm, Arc<Mutex<Vec<(Instant, usize)>>>) {
    let asked: Arc<Mutex<Vec<(Instant, usize)>>> = Arc::default();
    let log = asked.clone();
    let llm = FakeLlm::responding(move |request| {
        let m = marker(request).expect("every request names its event");
        log.lock().unwrap().push((Instant::now(), m));
        let answer = Reply::Json(text(&format!("answer marker-{m:03}")));
        Reply::Delayed(THINKING, Box::new(answer))
    })
    .await;
    (llm, asked)
}

/// Waits until every one of `events` over `prs` pull requests is answered,
/// and checks each was asked of the model once and answered once, in its
/// pull request's order: when each was asked.
async fn answered_each_once(
    store: &Store,
    asked: &Mutex<Vec<(Instant, usize)>>,
    github: &FakeGithub,
    (prs, events): (usize, usize),
) -> BTreeMap<usize, Vec<Instant>> {
    eventually_within("every event answered", Duration::from_secs(60), || async {
        store.inbox_pending(10).await.unwrap().is_empty()
            && store.outbox_pending(10).await.unwrap().is_empty()
            && github.seen().len() >= events
    })
    .await;
    let mut asks: BTreeMap<usize, Vec<Instant>> = BTreeMap::new();
    for (at, m) in asked.lock().unwrap().iter() {
        asks.entry(*m).or_default().push(*at);
    }
    let mut answers: BTreeMap<usize, Vec<Instant>> = BTreeMap::new();
    for s in github.seen() {
        if let Some(m) = s.body["body"].as_str().and_then(marker_in) {
            answers.entry(m).or_default().push(s.at);
        }
    }
    assert_eq!(asks.len(), events, "every event asked");
    assert!(
        asks.values().all(|a| a.len() == 1),
        "each asked once: {asks:?}"
    );
    assert_eq!(answers.len(), events, "every event answered");
    assert!(answers.values().all(|a| a.len() == 1), "each answered once");
    common::assert_in_order("asked", &asks, prs, usize::MAX);
    common::assert_in_order("answered", &answers, prs, usize::MAX);
    asks
}

/// Posts a signed `pull_request` delivery; `None` when the replica did
/// not answer (it is stopping, or stopped).
async fn deliver(
    client: &reqwest::Client,
    base: &str,
    delivery: &str,
    body: Vec<u8>,
) -> Option<u16> {
    client
        .post(format!("{base}/webhooks/github"))
        .header("x-github-event", "pull_request")
        .header("x-github-delivery", delivery)
        .header("x-hub-signature-256", github_signature(SECRET, &body))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .ok()
        .map(|r| r.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_take_one_pull_requests_events_in_turn_and_answer_each_once() {
    const PRS: usize = 4;
    const PER_PR: usize = 8;
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (llm, asked) = marking_model().await;
    let github = FakeGithub::start().await;
    let (da, dbb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = InProcess::start(
        replica(da.path(), "a", &db.config, &llm, &github, None),
        env(),
    )
    .await;
    let b = InProcess::start(
        replica(dbb.path(), "b", &db.config, &llm, &github, None),
        env(),
    )
    .await;
    let client = switchboard::http::client::client();
    // Each pull request's events go to the replicas in turn, so every
    // session's events arrive at both, one after the other.
    let mut senders = tokio::task::JoinSet::new();
    for pr in 0..PRS {
        let (client, bases) = (client.clone(), [a.base.clone(), b.base.clone()]);
        senders.spawn(async move {
            for k in 0..PER_PR {
                let i = k * PRS + pr;
                let body = common::pr_push(pr + 1, &format!("marker-{i:03}"));
                let status =
                    deliver(&client, &bases[(k + pr) % 2], &format!("rep-{i}"), body).await;
                assert_eq!(status, Some(202), "delivery {i}");
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        });
    }
    while let Some(r) = senders.join_next().await {
        r.unwrap();
    }
    let events = PRS * PER_PR;
    let store = a.store.clone();
    let asks = answered_each_once(&store, &asked, &github, (PRS, events)).await;
    // One replica at a time runs a session: a pull request's next turn
    // starts after the model answered the one before.
    for pr in 0..PRS {
        let mut at: Vec<Instant> = asks
            .iter()
            .filter(|(m, _)| *m % PRS == pr)
            .map(|(_, a)| a[0])
            .collect();
        at.sort();
        for pair in at.windows(2) {
            assert!(
                pair[1] - pair[0] >= THINKING - Duration::from_millis(5),
                "PR {pr}: two turns ran at once ({:?} apart)",
                pair[1] - pair[0]
            );
        }
    }
    let inbox = store.inbox_latest("webhook", 1000).await.unwrap();
    assert_eq!(inbox.len(), events);
    assert!(inbox.iter().all(|r| r.attempts == 1), "each started once");
    a.shutdown().await;
    b.shutdown().await;
    let store = db.store().await;
    let now = store.db_now_ms().await.unwrap();
    let held: Vec<_> = store
        .leases()
        .await
        .unwrap()
        .into_iter()
        .filter(|l| l.expires_at > now)
        .collect();
    assert!(held.is_empty(), "both gave their leases up: {held:?}");
    assert!(store.replicas().await.unwrap().0.is_empty(), "both left");
    store.close().await;
    db.drop().await;
}

/// `replica`'s readiness detail for `component`.
fn detail(replica: &InProcess, component: &str) -> String {
    replica
        .gateway
        .health
        .snapshot()
        .get(component)
        .map(|h| h.detail.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegram_is_polled_by_one_replica_and_a_standby_takes_over() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![
        Reply::Json(text("first answer")),
        Reply::Json(text("second answer")),
        Reply::Json(text("third answer")),
    ])
    .await;
    let github = FakeGithub::start().await;
    // Replica a reaches the database through a proxy the test can cut.
    let (proxy, through_proxy) = CutProxy::before(&db).await;
    let (da, dbb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = InProcess::start(
        replica(da.path(), "a", &through_proxy, &llm, &github, Some(&tg)),
        env(),
    )
    .await;
    eventually_within("a polls", Duration::from_secs(10), || async {
        detail(&a, "telegram") == "polling"
    })
    .await;
    let b = InProcess::start(
        replica(dbb.path(), "b", &db.config, &llm, &github, Some(&tg)),
        env(),
    )
    .await;
    eventually_within("b stands by", Duration::from_secs(10), || async {
        detail(&b, "telegram").starts_with("standby")
    })
    .await;
    assert!(
        b.gateway.health.snapshot()["telegram"].ready,
        "a standby is ready"
    );
    let client = switchboard::http::client::client();
    for (replica, role) in [
        (&a, "replica a: leads telegram"),
        (&b, "replica b: standby"),
    ] {
        let ready = client
            .get(format!("{}/readyz", replica.base))
            .send()
            .await
            .unwrap();
        assert_eq!(ready.status(), 200);
        let body = ready.text().await.unwrap();
        assert!(body.contains(role), "{body}");
    }
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "hello"));
    tg.wait("sendMessage", 1).await;

    // a stops cleanly: it gives the lease up and b polls within a second
    // or two, without two polls ever overlapping.
    let stopped = Instant::now();
    a.shutdown().await;
    eventually_within("b polls", Duration::from_secs(5), || async {
        detail(&b, "telegram") == "polling"
    })
    .await;
    let handover = stopped.elapsed();
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 11, "still there?"));
    tg.wait("sendMessage", 2).await;

    // A replica cut off from the database stops polling before its lease
    // lapses; the other takes over once it has.
    let a = InProcess::start(
        replica(da.path(), "a", &through_proxy, &llm, &github, Some(&tg)),
        env(),
    )
    .await;
    eventually_within("a stands by", Duration::from_secs(10), || async {
        detail(&a, "telegram").starts_with("standby")
    })
    .await;
    b.shutdown().await;
    eventually_within("a polls again", Duration::from_secs(5), || async {
        detail(&a, "telegram") == "polling"
    })
    .await;
    let b = InProcess::start(
        replica(dbb.path(), "b", &db.config, &llm, &github, Some(&tg)),
        env(),
    )
    .await;
    eventually_within("b stands by again", Duration::from_secs(10), || async {
        detail(&b, "telegram").starts_with("standby")
    })
    .await;
    let cut = Instant::now();
    proxy.cut();
    eventually_within("b polls after the cut", Duration::from_secs(10), || async {
        detail(&b, "telegram") == "polling"
    })
    .await;
    let takeover = cut.elapsed();
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 12, "and now?"));
    let sent = tg.wait("sendMessage", 3).await;
    assert_eq!(sent.len(), 3, "each message answered once");
    assert_eq!(
        tg.conflicts(),
        0,
        "two replicas never polled at once (Telegram would answer 409)"
    );
    eprintln!(
        "telegram: handover after a clean stop {handover:?}, takeover after a cut {takeover:?}"
    );
    assert!(
        takeover < Duration::from_secs(3 + 2),
        "taken over within the lease and a second: {takeover:?}"
    );
    proxy.restore();
    a.shutdown().await;
    b.shutdown().await;
    db.drop().await;
}

fn fixture(name: &str) -> serde_json::Value {
    let path = format!("tests/data/github/{name}.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

async fn post_github(base: &str, event: &str, delivery: &str, body: &[u8]) -> serde_json::Value {
    switchboard::http::client::client()
        .post(format!("{base}/webhooks/github"))
        .header("x-github-event", event)
        .header("x-github-delivery", delivery)
        .header("x-hub-signature-256", github_signature(SECRET, body))
        .header("content-type", "application/json")
        .body(body.to_vec())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_given_through_one_replica_resumes_the_turn_on_another() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let llm = FakeLlm::start(vec![
        Reply::Json(common::fake_llm::calls(&[(
            "c1",
            "terminal",
            r#"{"command":"git reset --hard"}"#,
        )])),
        Reply::Json(text("Reset done.")),
    ])
    .await;
    let github = FakeGithub::start().await;
    let (da, dbb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let approving = |mut c: Config| {
        let r = &mut c.webhook.routes[0];
        r.toolsets = Some(vec!["terminal".into()]);
        r.approval_comments = true;
        r.approvers = vec!["github:octo-admin".into()];
        c
    };
    let a = InProcess::start(
        approving(replica(da.path(), "a", &db.config, &llm, &github, None)),
        env(),
    )
    .await;
    let b = InProcess::start(
        approving(replica(dbb.path(), "b", &db.config, &llm, &github, None)),
        env(),
    )
    .await;
    let opened = serde_json::to_vec(&fixture("pull_request.opened")).unwrap();
    assert_eq!(
        post_github(&a.base, "pull_request", "x-1", &opened).await["status"],
        "accepted"
    );
    let seen = github.wait(1).await;
    let prompt = seen[0].body["body"].as_str().unwrap().to_string();
    let id: String = prompt
        .split("/approve ")
        .nth(1)
        .unwrap()
        .chars()
        .take(32)
        .collect();
    assert_eq!(a.gateway.broker.pending_count(), 1, "the turn waits on a");
    assert_eq!(b.gateway.broker.pending_count(), 0);
    let mut comment = fixture("issue_comment.created");
    comment["comment"]["user"] = serde_json::json!({"login": "Octo-Admin", "type": "User"});
    comment["comment"]["body"] = serde_json::json!(format!("/approve {id}"));
    let comment = serde_json::to_vec(&comment).unwrap();
    let answer = post_github(&b.base, "issue_comment", "x-2", &comment).await;
    assert_eq!(answer["status"], "decided", "{answer}");
    let seen = github.wait(3).await;
    assert_eq!(seen[1].method, "PATCH", "the prompt shows the outcome");
    assert!(
        seen[1].body["body"]
            .as_str()
            .unwrap()
            .contains("Allowed once by @Octo-Admin")
    );
    assert_eq!(seen[2].body["body"], "Reset done.");
    assert_eq!(a.gateway.broker.pending_count(), 0);
    a.shutdown().await;
    b.shutdown().await;
    db.drop().await;
}

#[tokio::test]
async fn a_second_daemon_on_one_sqlite_file_is_refused() {
    let llm = FakeLlm::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let first = InProcess::start(daemon_config(dir.path(), &llm.url), Env::default()).await;
    let second =
        switchboard::daemon::Daemon::new(daemon_config(dir.path(), &llm.url), Env::default())
            .run_until(std::future::pending())
            .await
            .expect_err("refused");
    let said = second.to_string();
    assert!(
        said.contains("another switchboard daemon is running on") && said.contains("PostgreSQL"),
        "{said}"
    );
    first.shutdown().await;
    // Once the first is gone, the file is free again.
    let again = InProcess::start(daemon_config(dir.path(), &llm.url), Env::default()).await;
    again.shutdown().await;
}

/// Set in the child process that runs the cluster status test alone: the
/// metrics are the process's, and other tests' replicas lead and step down
/// beside it.
const METRICS_PROBE: &str = "SWITCHBOARD_CLUSTER_METRICS_PROBE";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_status_and_metrics_name_the_leader_and_its_sessions() {
    if std::env::var_os(METRICS_PROBE).is_none() {
        let name = "replicas::cluster_status_and_metrics_name_the_leader_and_its_sessions";
        return tokio::task::spawn_blocking(|| common::run_alone(name, METRICS_PROBE))
            .await
            .unwrap();
    }
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![Reply::Delayed(
        Duration::from_secs(30),
        Box::new(Reply::Json(text("late"))),
    )])
    .await;
    let github = FakeGithub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let a = InProcess::start(
        replica(dir.path(), "alpha", &db.config, &llm, &github, Some(&tg)),
        env(),
    )
    .await;
    eventually_within("alpha polls", Duration::from_secs(10), || async {
        detail(&a, "telegram") == "polling"
    })
    .await;
    // A turn in flight: its session is owned.
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "think hard"));
    eventually_within("a session owned", Duration::from_secs(10), || async {
        detail(&a, "cluster").contains("owns 1 sessions")
    })
    .await;
    let metrics = switchboard::http::client::client()
        .get(format!("{}/metrics", a.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "switchboard_cluster_leader{platform=\"telegram\"} 1",
        "switchboard_cluster_leader{platform=\"slack\"} 0",
        "switchboard_cluster_sessions_owned 1",
        "switchboard_cluster_lease_age_seconds",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    // The daemon's whole configuration, naming secrets this shell does
    // not hold: `cluster status` reads storage alone.
    std::fs::write(
        dir.path().join("gateway.toml"),
        format!(
            "[storage]\nurl = \"{}\"\n[cluster]\nlease_secs = 3\n[llm]\napi_key_env = \"OPENAI_API_KEY\"\n\
             [webhook]\nenabled = true\n[[webhook.routes]]\nname = \"github\"\npath = \"/webhooks/github\"\n\
             scheme = \"github\"\nsecret_env = \"GITHUB_WEBHOOK_SECRET\"\n",
            db.config.url
        ),
    )
    .unwrap();
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .current_dir(dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    let check = cli(&["check"]);
    assert!(
        !check.status.success(),
        "the daemon's own check needs the secrets"
    );
    // A replica that stopped renewing: suspect before its leases lapse.
    let store = db.store().await;
    store.replica_join("ghost-id", "ghost").await.unwrap();
    eventually_within(
        "the ghost missed a renewal",
        Duration::from_secs(5),
        || async {
            let (replicas, now) = store.replicas().await.unwrap();
            replicas
                .iter()
                .any(|r| r.name == "ghost" && now - r.seen_at > 1_600)
        },
    )
    .await;
    // alpha's renewal (every second) reports the turn it runs.
    eventually_within("alpha reports its turn", Duration::from_secs(5), || async {
        let (replicas, _) = store.replicas().await.unwrap();
        replicas.iter().any(|r| r.name == "alpha" && r.turns == 1)
    })
    .await;
    let out = cli(&["cluster", "status", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let replicas = status["replicas"].as_array().unwrap();
    assert_eq!(replicas.len(), 2, "{status}");
    assert_eq!(replicas[0]["name"], "alpha");
    assert_eq!(replicas[0]["alive"], true);
    assert_eq!(replicas[0]["state"], "alive");
    assert_eq!(replicas[0]["sessions"], 1);
    assert_eq!(replicas[0]["turns"], 1);
    assert_eq!(replicas[1]["name"], "ghost");
    assert_eq!(replicas[1]["state"], "suspect", "{status}");
    assert_eq!(replicas[1]["alive"], false);
    // Gone replicas are forgotten after their retention.
    eventually_within(
        "the ghost is old enough",
        Duration::from_secs(5),
        || async {
            let (replicas, now) = store.replicas().await.unwrap();
            replicas
                .iter()
                .any(|r| r.name == "ghost" && now - r.seen_at > 2_000)
        },
    )
    .await;
    assert_eq!(store.replicas_prune(2_000).await.unwrap(), 1);
    let (left, _) = store.replicas().await.unwrap();
    assert_eq!(
        left.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        ["alpha"]
    );
    store.close().await;
    let holds: Vec<&str> = replicas[0]["holds"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["lease"].as_str())
        .collect();
    assert!(holds.contains(&"ingress:telegram"), "{holds:?}");
    assert!(
        holds.iter().any(|h| h.starts_with("session:telegram:dm:")),
        "{holds:?}"
    );
    let text = String::from_utf8(cli(&["cluster", "status"]).stdout).unwrap();
    assert!(
        text.contains("alpha")
            && text.contains("leads telegram; owns 1 sessions, 1 turns running; moves out 0 in 0"),
        "{text}"
    );
    a.shutdown().await;
    db.drop().await;
}
