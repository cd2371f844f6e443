//! PostgreSQL going away under load and coming back, seen through a TCP
//! proxy the test cuts: readiness names storage, webhooks are refused with
//! 503 + Retry-After and nothing is stored half-way, and once the database
//! answers again everything resumes by itself, every acknowledged event
//! processed once.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::PgTestDb;
use common::cut_proxy::CutProxy;
use common::fake_llm::{FakeLlm, Reply, text};
use common::in_process::{InProcess, daemon_config};
use serde_json::Value;
use switchboard::adapters::webhook::verify::github_signature;
use switchboard::config::{Env, StorageConfig, load_from_str};

const SECRET: &str = "outage-secret";

fn body(i: usize) -> Vec<u8> {
    common::pr_push(i % 4 + 1, &format!("marker-{i:03}"))
}

async fn post(http: &reqwest::Client, base: &str, i: usize) -> reqwest::Response {
    let body = body(i);
    http.post(format!("{base}/webhooks/github"))
        .header("x-github-event", "pull_request")
        .header("x-github-delivery", format!("outage-{i}"))
        .header("x-hub-signature-256", github_signature(SECRET, &body))
        .header("content-type", "application/json")
        .body(body)
        .timeout(Duration::from_secs(40))
        .send()
        .await
        .unwrap()
}

/// The markers of the events the model was asked about.
fn asked(llm: &FakeLlm) -> Vec<usize> {
    llm.requests()
        .iter()
        .filter_map(|r| {
            let text = r["messages"].to_string();
            let at = text.rfind("marker-")?;
            text[at + 7..at + 10].parse().ok()
        })
        .collect()
}

/// A proxy in front of the test server and `db`'s storage config through it.
async fn through_proxy(db: &PgTestDb) -> (CutProxy, StorageConfig) {
    let upstream = url::Url::parse(&common::postgres_url()).unwrap();
    let target = format!(
        "{}:{}",
        upstream.host_str().unwrap(),
        upstream.port().unwrap_or(5432)
    );
    let addr = tokio::net::lookup_host(&target)
        .await
        .unwrap()
        .next()
        .unwrap();
    let proxy = CutProxy::start(addr).await;
    let url = db.config.url.replacen(&target, &proxy.addr.to_string(), 1);
    assert_ne!(url, db.config.url);
    (
        proxy,
        StorageConfig {
            url,
            ..db.config.clone()
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_going_away_is_ridden_out_and_nothing_acknowledged_is_lost() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (proxy, storage) = through_proxy(&db).await;

    // Slow enough that turns are in flight when the database goes.
    let llm = FakeLlm::responding(|_| {
        Reply::Delayed(
            Duration::from_millis(300),
            Box::new(Reply::Json(text("reviewed"))),
        )
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = daemon_config(dir.path(), &llm.url);
    config.storage = storage;
    config.webhook = load_from_str(
        r#"
        [[webhook.routes]]
        name = "github"
        path = "/webhooks/github"
        scheme = "github"
        secret_env = "GITHUB_WEBHOOK_SECRET"
        [webhook.routes.deliver]
        kind = "log"
        "#,
        &Env::default(),
    )
    .unwrap()
    .webhook;
    config.webhook.enabled = true;
    let daemon =
        InProcess::start(config, Env::from_pairs([("GITHUB_WEBHOOK_SECRET", SECRET)])).await;
    let http = switchboard::http::client::client();
    let mut acknowledged = BTreeSet::new();
    for i in 0..8 {
        assert_eq!(post(&http, &daemon.base, i).await.status(), 202);
        acknowledged.insert(i);
    }

    proxy.cut();
    let ready = http
        .get(format!("{}/readyz", daemon.base))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
    let why: Value = ready.json().await.unwrap();
    assert!(why["reasons"].to_string().contains("storage"), "{why}");
    for i in 8..12 {
        let refused = post(&http, &daemon.base, i).await;
        assert_eq!(refused.status(), 503, "event {i} during the outage");
        assert!(refused.headers().contains_key("retry-after"));
    }

    proxy.restore();
    common::eventually("ready again", || async {
        http.get(format!("{}/readyz", daemon.base))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    // The sender retries what was refused; new events come too.
    for i in 8..16 {
        assert_eq!(
            post(&http, &daemon.base, i).await.status(),
            202,
            "event {i}"
        );
        acknowledged.insert(i);
    }
    let store = db.store().await;
    common::eventually("every acknowledged event processed", || async {
        store.inbox_pending(100).await.is_ok_and(|p| p.is_empty())
    })
    .await;
    let deliveries = store.deliveries(100).await.unwrap();
    assert_eq!(deliveries.len(), acknowledged.len(), "{deliveries:?}");
    let asked: BTreeSet<usize> = asked(&llm).into_iter().collect();
    assert_eq!(
        asked, acknowledged,
        "every acknowledged event reached the model"
    );
    store.close().await;
    daemon.shutdown().await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegram_keeps_its_updates_while_postgres_is_away() {
    use common::fake_telegram::FakeTelegram;
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (proxy, storage) = through_proxy(&db).await;
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::responding(|_| Reply::Json(text("back again"))).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = daemon_config(dir.path(), &llm.url);
    config.storage = storage;
    config.telegram.enabled = true;
    config.telegram.api_url = tg.url.clone();
    config.telegram.allowed_users = vec![7];
    let daemon = InProcess::start(
        config,
        Env::from_pairs([("TELEGRAM_BOT_TOKEN", "123:test-token")]),
    )
    .await;
    common::ready(&daemon.gateway, "telegram").await;

    proxy.cut();
    let id = tg.push(FakeTelegram::message(7, 7, "Ann", 40, "are you there?"));
    // Polls go on, with backoff (not a tight loop), and none moves past
    // the update that could not be stored.
    let before = tg.calls("getUpdates").len();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let during: Vec<i64> = tg.calls("getUpdates")[before..]
        .iter()
        .map(|c| c.body["offset"].as_i64().unwrap_or(0))
        .collect();
    assert!(
        !during.is_empty() && during.len() <= 6,
        "polls during the outage: {during:?}"
    );
    assert!(
        during.iter().all(|o| *o <= 500),
        "the offset moved past the update: {during:?}"
    );
    assert!(tg.calls("sendMessage").is_empty());

    proxy.restore();
    let sent = tg.wait("sendMessage", 1).await;
    assert_eq!(sent[0].body["text"], "back again");
    common::eventually("the offset moves past the update", || async {
        tg.calls("getUpdates")
            .last()
            .is_some_and(|c| c.body["offset"].as_i64() == Some(id + 1))
    })
    .await;
    assert_eq!(llm.requests().len(), 1, "answered once");
    daemon.shutdown().await;
    db.drop().await;
}
