//! Spend caps (#23): with a fake model reporting usage and a price per
//! million tokens, a person's turns are counted; past 80 % of the daily
//! cap the chat is warned once; at the cap new messages are refused with
//! a clear message and nothing is stored, until the window resets; `/usage`
//! says what was spent and what is left; a webhook route over its budget
//! answers 202 and records the event as over budget (or 429); a job over
//! its budget is not run and its owner is told. On SQLite and PostgreSQL.

use crate::common;

use std::sync::Arc;

use common::fake_github::FakeGithub;
use common::fake_llm::{FakeLlm, Reply, text};
use common::fake_telegram::FakeTelegram;
use common::in_process::{
    InProcess, daemon_config, github_route, start_telegram as start, telegram_config,
};
use switchboard::adapters::webhook::verify::github_signature;
use switchboard::config::{Config, CronJobConfig, Env, OverBudget, Price, StorageConfig};
use switchboard::cron::Scheduler;

const ANN: i64 = 1001;

/// Every turn of the fake model: 10 prompt and 5 completion tokens; at
/// 1000 per million each, 0.015.
fn priced(config: &mut Config) {
    config.budgets.prices.insert(
        config.llm.model.clone(),
        Price {
            input: 1000.0,
            output: 1000.0,
        },
    );
}

fn telegram(
    dir: &std::path::Path,
    tg: &FakeTelegram,
    llm: &FakeLlm,
    storage: &Option<StorageConfig>,
) -> Config {
    let mut config = telegram_config(dir, tg, &llm.url, storage.as_ref(), ANN);
    priced(&mut config);
    config
}

fn sent(tg: &FakeTelegram) -> Vec<String> {
    tg.texts()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_daily_budget_warns_once_at_80_percent_and_refuses_at_the_cap() {
    common::on_both_backends(|storage| async move {
        let tg = FakeTelegram::start().await;
        let llm =
            FakeLlm::start((1..=4).map(|i| Reply::Json(text(&format!("answer {i}")))).collect())
                .await;
        let dir = tempfile::tempdir().unwrap();
        let mut config = telegram(dir.path(), &tg, &llm, &storage);
        config.budgets.user.daily_cost = 0.05;
        let daemon = start(&config).await;
        let mut expected = Vec::new();
        for i in 1..=3 {
            tg.push(FakeTelegram::message(ANN, ANN, "Ann", i, &format!("question {i}")));
            expected.push(format!("answer {i}"));
            common::eventually("answered", || async { sent(&tg) == expected }).await;
        }
        // 0.045 spent: 90 % of 0.05.
        tg.push(FakeTelegram::message(ANN, ANN, "Ann", 4, "question 4"));
        common::eventually("warned, then answered", || async { sent(&tg).len() == 5 }).await;
        let shown = sent(&tg);
        assert!(
            shown[3].starts_with("Heads-up: Your usage has used 90% of its daily budget (0.04 of 0.05)")
                || shown[3].starts_with("Heads-up: Your usage has used 90% of its daily budget (0.05 of 0.05)"),
            "{shown:?}"
        );
        assert_eq!(shown[4], "answer 4");
        // 0.06 spent: refused, and nothing stored.
        let stored = common::inbox_count(&daemon.gateway.store, "telegram").await;
        for id in [5, 6] {
            tg.push(FakeTelegram::message(ANN, ANN, "Ann", id, "question past the cap"));
        }
        common::eventually("refused twice", || async { sent(&tg).len() == 7 }).await;
        let shown = sent(&tg);
        for refusal in &shown[5..] {
            assert!(
                refusal.starts_with("Your usage has reached its daily budget (0.06 of 0.05). New requests are refused until "),
                "{refusal}"
            );
        }
        assert_eq!(
            shown.iter().filter(|t| t.starts_with("Heads-up")).count(),
            1,
            "warned once"
        );
        assert_eq!(common::inbox_count(&daemon.gateway.store, "telegram").await, stored);
        assert_eq!(llm.requests().len(), 4, "no turn past the cap");
        // /usage still answers, with what was spent and what is left.
        tg.push(FakeTelegram::message(ANN, ANN, "Ann", 7, "/usage"));
        common::eventually("usage said", || async { sent(&tg).len() == 8 }).await;
        let usage = sent(&tg).pop().unwrap();
        assert!(
            usage.contains("Your usage today: 0.06 of 0.05; 0.00 left until")
                && usage.contains("This chat today: 0.06 (60 tokens), no cap"),
            "{usage}"
        );
        let turns = daemon.gateway.store.usage_since(0).await.unwrap();
        let user = turns.iter().find(|r| r.level == "user").unwrap();
        assert_eq!((user.turns, user.tokens, user.cost_micros), (4, 60, 60_000));
        daemon.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_route_over_budget_records_the_event_or_answers_429() {
    for (mode, status) in [(OverBudget::Accept, 202), (OverBudget::Reject, 429)] {
        common::on_both_backends(|storage| async move {
            let llm = FakeLlm::start(vec![Reply::Json(text("LGTM"))]).await;
            let gh = FakeGithub::start().await;
            let dir = tempfile::tempdir().unwrap();
            let mut config = daemon_config(dir.path(), &llm.url);
            if let Some(storage) = &storage {
                config.storage = storage.clone();
            }
            config.webhook.enabled = true;
            config.webhook.routes = github_route(&gh.url);
            priced(&mut config);
            config.budgets.route.daily_tokens = 10;
            config.budgets.webhook_over_budget = mode;
            let daemon = InProcess::start(
                config,
                Env::from_pairs([
                    ("GITHUB_WEBHOOK_SECRET", "s3cret"),
                    ("GITHUB_TOKEN", "ghs_t"),
                ]),
            )
            .await;
            let http = switchboard::http::client::client();
            let post = |delivery: &'static str, body: Vec<u8>| {
                let http = http.clone();
                let url = format!("{}/webhooks/github", daemon.base);
                async move {
                    http.post(url)
                        .header("content-type", "application/json")
                        .header("x-github-event", "pull_request")
                        .header("x-github-delivery", delivery)
                        .header("x-hub-signature-256", github_signature("s3cret", &body))
                        .body(body)
                        .send()
                        .await
                        .unwrap()
                }
            };
            assert_eq!(post("d1", common::pr_push(1, "first")).await.status(), 202);
            let store = daemon.gateway.store.clone();
            common::eventually("the first turn is counted", || async {
                store
                    .usage_since(0)
                    .await
                    .unwrap()
                    .iter()
                    .any(|r| r.level == "route")
            })
            .await;
            let over = post("d2", common::pr_push(2, "second")).await;
            assert_eq!(over.status(), status);
            let body: serde_json::Value = over.json().await.unwrap();
            let inbox = common::inbox_count(&store, "webhook").await;
            match mode {
                OverBudget::Accept => {
                    assert_eq!(body["status"], "over budget", "{body}");
                    assert_eq!(inbox, 2, "recorded");
                    assert!(
                        store.inbox_pending(10).await.unwrap().is_empty(),
                        "and not run"
                    );
                }
                OverBudget::Reject => {
                    assert!(body["error"].as_str().unwrap().contains("budget"), "{body}");
                    assert_eq!(inbox, 1, "not stored: the sender delivers it again later");
                }
            }
            assert_eq!(llm.requests().len(), 1);
            daemon.shutdown().await;
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_over_its_budget_is_not_run_and_its_owner_is_told() {
    common::on_both_backends(|storage| async move {
        let tg = FakeTelegram::start().await;
        let llm = FakeLlm::start(vec![Reply::Json(text("digest"))]).await;
        let dir = tempfile::tempdir().unwrap();
        let mut config = telegram(dir.path(), &tg, &llm, &storage);
        config.cron.enabled = false;
        config.cron.jobs = vec![CronJobConfig {
            name: "digest".into(),
            schedule: "every 1m".into(),
            prompt: "digest".into(),
            platform: "telegram".into(),
            chat: ANN.to_string(),
            ..CronJobConfig::default()
        }];
        config.budgets.job.daily_tokens = 10;
        let daemon = start(&config).await;
        let mut ticking = config.clone();
        ticking.cron.enabled = true;
        let s = Scheduler::new(
            daemon.gateway.store.clone(),
            daemon.gateway.sessions.clone(),
            Arc::new(ticking),
        );
        let t0 = switchboard::store::now_ms();
        s.sync_config(t0).await.unwrap();
        assert_eq!(s.tick(t0 + 60_000).await.unwrap().fired, 1);
        common::eventually("the run posts", || async { sent(&tg) == ["digest"] }).await;
        let refused = common::until("the next slot is refused", || async {
            let tick = s.tick(t0 + 120_000).await.unwrap();
            (tick.refused == 1).then_some(tick)
        })
        .await;
        assert_eq!(refused.fired, 0);
        common::eventually("the owner is told", || async {
            s.tick(t0 + 121_000).await.unwrap();
            sent(&tg).len() == 2
        })
        .await;
        let told = sent(&tg).pop().unwrap();
        assert!(
            told.contains("\"digest\"")
                && told.contains("was not run")
                && told.contains("daily budget"),
            "{told}"
        );
        let runs = daemon.gateway.store.runs(None, 10).await.unwrap();
        assert_eq!(runs[0].status, "refused");
        assert_eq!(llm.requests().len(), 1);
        daemon.shutdown().await;
    })
    .await;
}
