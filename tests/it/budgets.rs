//! Spend caps (#23): with a fake model reporting usage and a price per
//! million tokens, a person's turns are counted; past 80 % of the daily
//! cap the chat is warned once; at the cap new messages are refused with
//! a clear message and nothing is stored, until the window resets; `/usage`
//! says what was spent and what is left; a webhook route over its budget
//! answers 202 and records the event as over budget (or 429); a job over
//! its budget is not run and its owner is told. Inside a turn (#49),
//! each model call is held against the caps before it is made: a turn
//! stops before the call that could cross a cap, with a wrap-up when that
//! still fits and the reason; concurrent turns of one person share what is
//! left; a webhook route's and a job's turns stop the same way. On SQLite
//! and PostgreSQL.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::fake_github::FakeGithub;
use common::fake_llm::{FakeLlm, Reply, calls, text};
use common::fake_telegram::{BOT_USERNAME, FakeTelegram};
use common::in_process::{
    InProcess, daemon_config, github_route, start_telegram as start, telegram_config,
};
use serde_json::json;
use switchboard::adapters::webhook::verify::github_signature;
use switchboard::budgets::Scope;
use switchboard::config::{Config, CronJobConfig, Env, OverBudget, Price, StorageConfig};
use switchboard::cron::Scheduler;
use switchboard::store::now_ms;

const ANN: i64 = 1001;
const GROUP: i64 = -100_555;

/// Every answer of the fake model: 10 prompt and 5 completion tokens.
/// Only output is priced, 2000 per million: 0.01 a call. With an output
/// cap of 5 tokens, a call's estimate is its real cost.
fn priced(config: &mut Config) {
    config.budgets.prices.insert(
        config.llm.model.clone(),
        Price {
            output: 2000.0,
            ..Price::default()
        },
    );
    config.llm.max_tokens = 5;
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
async fn a_persons_daily_budget_warns_once_and_refuses_at_the_cap() {
    common::on_both_backends(|storage| async move {
        let tg = FakeTelegram::start().await;
        let llm =
            FakeLlm::start((1..=4).map(|i| Reply::Json(text(&format!("answer {i}")))).collect())
                .await;
        let dir = tempfile::tempdir().unwrap();
        let mut config = telegram(dir.path(), &tg, &llm, &storage);
        config.budgets.user.daily_cost = 0.04;
        config.budgets.warn_percent = 70;
        let daemon = start(&config).await;
        let mut expected = Vec::new();
        for i in 1..=3 {
            say(&tg, i, &format!("question {i}"));
            expected.push(format!("answer {i}"));
            common::eventually("answered", || async { sent(&tg) == expected }).await;
        }
        // 0.03 spent: 75 % of 0.04; the next call just fits.
        say(&tg, 4, "question 4");
        common::eventually("warned, then answered", || async { sent(&tg).len() == 5 }).await;
        let shown = sent(&tg);
        assert!(
            shown[3].starts_with("Heads-up: Your usage has used 75% of its daily budget (0.03 of 0.04)"),
            "{shown:?}"
        );
        assert_eq!(shown[4], "answer 4");
        // 0.04 spent: refused, and nothing stored.
        let stored = common::inbox_count(&daemon.store, "telegram").await;
        for id in [5, 6] {
            say(&tg, id, "question past the cap");
        }
        common::eventually("refused twice", || async { sent(&tg).len() == 7 }).await;
        let shown = sent(&tg);
        for refusal in &shown[5..] {
            assert!(
                refusal.starts_with("Your usage has reached its daily budget (0.04 of 0.04). New requests are refused until "),
                "{refusal}"
            );
        }
        assert_eq!(
            shown.iter().filter(|t| t.starts_with("Heads-up")).count(),
            1,
            "warned once"
        );
        assert_eq!(common::inbox_count(&daemon.store, "telegram").await, stored);
        assert_eq!(llm.requests().len(), 4, "no turn past the cap");
        // /usage still answers, with what was spent and what is left.
        say(&tg, 7, "/usage");
        common::eventually("usage said", || async { sent(&tg).len() == 8 }).await;
        let usage = sent(&tg).pop().unwrap();
        assert!(
            usage.contains("Your usage today: 0.04 of 0.04; 0.00 left until")
                && usage.contains("This chat today: 0.04 (60 tokens), no cap"),
            "{usage}"
        );
        let turns = daemon.store.usage_since(0).await.unwrap();
        let user = turns.iter().find(|r| r.level == "user").unwrap();
        assert_eq!((user.turns, user.tokens, user.cost_micros), (4, 60, 40_000));
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
            config.budgets.route.daily_cost = 0.01;
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
            let store = daemon.store.clone();
            common::eventually("the first turn is counted", || async {
                store
                    .usage_since(0)
                    .await
                    .unwrap()
                    .iter()
                    .any(|r| r.level == "route" && r.turns == 1)
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

/// Ann says `text` in her chat with the bot, as message `id`.
fn say(tg: &FakeTelegram, id: i64, text: &str) {
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", id, text));
}

/// A job "digest" every minute in Ann's chat, fired by hand.
fn digest_job(config: &mut Config) {
    config.cron.enabled = false;
    config.cron.jobs = vec![CronJobConfig {
        name: "digest".into(),
        schedule: "every 1m".into(),
        prompt: "digest".into(),
        platform: "telegram".into(),
        chat: ANN.to_string(),
        ..CronJobConfig::default()
    }];
}

/// A scheduler over `daemon`'s sessions that has fired the job's first
/// slot; and the time it started from.
async fn first_run(daemon: &InProcess, config: &Config) -> (Scheduler, i64) {
    let mut ticking = config.clone();
    ticking.cron.enabled = true;
    let s = Scheduler::new(
        daemon.store.clone(),
        daemon.gateway.sessions.clone(),
        Arc::new(ticking),
    );
    let t0 = now_ms();
    s.sync_config(t0).await.unwrap();
    assert_eq!(s.tick(t0 + 60_000).await.unwrap().fired, 1);
    (s, t0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_over_its_budget_is_not_run_and_its_owner_is_told() {
    common::on_both_backends(|storage| async move {
        let tg = FakeTelegram::start().await;
        let llm = FakeLlm::start(vec![Reply::Json(text("digest"))]).await;
        let dir = tempfile::tempdir().unwrap();
        let mut config = telegram(dir.path(), &tg, &llm, &storage);
        digest_job(&mut config);
        config.budgets.job.daily_cost = 0.01;
        let daemon = start(&config).await;
        let (s, t0) = first_run(&daemon, &config).await;
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
        let runs = daemon.store.runs(None, 10).await.unwrap();
        assert_eq!(runs[0].status, "refused");
        assert_eq!(llm.requests().len(), 1);
        daemon.shutdown().await;
    })
    .await;
}

/// The `todo` tool's arguments: harmless, offered to every chat.
const TODO: &str = r#"{"todos": [{"id": "1", "content": "step", "status": "pending"}]}"#;

/// A model answer calling `tool`, using 10 prompt and `completion`
/// output tokens.
fn tool_call(id: &str, tool: &str, args: &str, completion: u64) -> Reply {
    let mut answer = calls(&[(id, tool, args)]);
    answer["usage"] = json!({"prompt_tokens": 10, "completion_tokens": completion,
                             "total_tokens": 10 + completion});
    Reply::Json(answer)
}

/// A model that calls `tool` whenever it is offered tools (after
/// `delay`), and says `wrap_up` when it is not.
async fn looping(tool: &'static str, args: &'static str, delay: Duration) -> FakeLlm {
    let n = std::sync::atomic::AtomicUsize::new(0);
    FakeLlm::responding(move |request| {
        if request.get("tools").is_none() {
            return Reply::Json(text("wrapped up"));
        }
        let id = format!("c{}", n.fetch_add(1, std::sync::atomic::Ordering::SeqCst));
        Reply::Delayed(delay, Box::new(tool_call(&id, tool, args, 5)))
    })
    .await
}

/// Texts sent to Telegram chat `chat`.
fn sent_to(tg: &FakeTelegram, chat: i64) -> Vec<String> {
    tg.calls("sendMessage")
        .iter()
        .filter(|c| c.body["chat_id"] == chat)
        .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// What `scope`'s running turns hold now.
async fn held(store: &switchboard::store::Store, scope: &Scope) -> i64 {
    let spent = store.spend(scope, 0, now_ms()).await.unwrap();
    spent.held_tokens + spent.held_micros
}

fn ann() -> Scope {
    Scope::User {
        platform: "telegram".into(),
        user: ANN.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_turn_stops_before_the_call_that_could_cross_the_cap() {
    common::on_both_backends(|storage| async move {
        let tg = FakeTelegram::start().await;
        // Five tool calls before the answer, 0.01 each: 0.06 in all.
        let mut script: Vec<Reply> = (1..=5)
            .map(|i| tool_call(&format!("t{i}"), "todo", TODO, 5))
            .collect();
        script.push(Reply::Json(text("all done")));
        let llm = FakeLlm::start(script).await;
        let dir = tempfile::tempdir().unwrap();
        let mut config = telegram(dir.path(), &tg, &llm, &storage);
        config.budgets.user.daily_cost = 0.036;
        config.budgets.warn_percent = 50;
        let daemon = start(&config).await;
        say(&tg, 1, "tidy the backlog");
        common::eventually("stopped and told", || async {
            sent(&tg).iter().any(|t| t.contains("stopped here"))
        })
        .await;
        assert_eq!(
            llm.requests().len(),
            3,
            "the calls that fit (0.03), not the one that could cross 0.036"
        );
        let shown = sent(&tg);
        assert_eq!(shown.len(), 2, "{shown:?}");
        assert!(
            shown[0].starts_with("Heads-up: Your usage has used 56% of its daily budget (0.02 of 0.04)"),
            "warned inside the turn: {shown:?}"
        );
        assert!(
            shown[1].starts_with("(Your usage is at 0.03 of 0.04 of its daily budget, and my next step could go past it, so I stopped here. The budget resets at "),
            "{shown:?}"
        );
        let store = &daemon.store;
        let turns = store.usage_since(0).await.unwrap();
        let user = turns.iter().find(|r| r.level == "user").unwrap();
        assert_eq!((user.turns, user.cost_micros), (1, 30_000), "within the cap");
        let session = &store.list_sessions(10).await.unwrap()[0];
        let record = &store.turns(&session.id).await.unwrap()[0];
        assert_eq!((record.outcome.as_str(), record.model_calls), ("over_budget", 3));
        assert_eq!(held(store, &ann()).await, 0, "the hold went with the commit");
        daemon.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_turn_wraps_up_when_the_wrap_up_still_fits() {
    let tg = FakeTelegram::start().await;
    // Tool calls of 1000 output tokens, 0.01 at 10 per million; a call is
    // estimated at its 2000-token cap (0.02), the wrap-up at 1024.
    let llm = FakeLlm::responding(|request| {
        if request.get("tools").is_none() {
            return Reply::Json(text("I sorted four items; the rest is left."));
        }
        tool_call("t", "todo", TODO, 1000)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = telegram(dir.path(), &tg, &llm, &None);
    config
        .budgets
        .prices
        .get_mut(&config.llm.model)
        .unwrap()
        .output = 10.0;
    config.llm.max_tokens = 2000;
    config.budgets.user.daily_cost = 0.052;
    let daemon = start(&config).await;
    say(&tg, 1, "sort the items");
    common::eventually("wrapped up", || async { !sent(&tg).is_empty() }).await;
    let asked = llm.requests();
    assert_eq!(
        asked.len(),
        5,
        "four calls fit (0.04 + 0.02 > 0.052), then the wrap-up"
    );
    assert!(
        asked[4].get("tools").is_none(),
        "the wrap-up offers no tools"
    );
    assert_eq!(asked[4]["max_tokens"], 1024);
    let shown = sent(&tg);
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert!(
        shown[0].starts_with("I sorted four items; the rest is left.\n\n(Your usage is at 0.04 of 0.05 of its daily budget"),
        "{shown:?}"
    );
    let turns = daemon.store.usage_since(0).await.unwrap();
    let user = turns.iter().find(|r| r.level == "user").unwrap();
    assert_eq!(user.cost_micros, 40_050);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_turns_of_one_person_share_what_is_left() {
    common::on_both_backends(|storage| async move {
        let tg = FakeTelegram::start().await;
        // Each turn would go on calling tools for ever, 0.01 a call.
        let llm = looping("todo", TODO, Duration::from_millis(150)).await;
        let dir = tempfile::tempdir().unwrap();
        let mut config = telegram(dir.path(), &tg, &llm, &storage);
        config.budgets.user.daily_cost = 0.055;
        let daemon = start(&config).await;
        say(&tg, 1, "tidy the backlog");
        let mut mention = FakeTelegram::message(
            GROUP,
            ANN,
            "Ann",
            2,
            &format!("@{BOT_USERNAME} plan the week"),
        );
        mention["message"]["entities"] = json!([{"type": "mention", "offset": 0, "length": 16}]);
        tg.push(mention);
        common::eventually("both turns stopped", || async {
            [ANN, GROUP].iter().all(|&chat| {
                sent_to(&tg, chat)
                    .iter()
                    .any(|t| t.contains("I stopped here"))
            })
        })
        .await;
        assert_eq!(
            llm.requests().len(),
            5,
            "five calls of 0.01 fit in 0.055 between both chats; no wrap-up fits"
        );
        let store = &daemon.store;
        let turns = store.usage_since(0).await.unwrap();
        let user = turns.iter().find(|r| r.level == "user").unwrap();
        assert_eq!((user.turns, user.cost_micros), (2, 50_000));
        assert_eq!(held(store, &ann()).await, 0);
        daemon.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_routes_turn_and_a_jobs_turn_stop_the_same_way() {
    common::on_both_backends(|storage| async move {
        // A route: 0.025 a day, its review calling a tool for ever.
        let llm = looping("web_search", r#"{"query": "x"}"#, Duration::ZERO).await;
        let gh = FakeGithub::start().await;
        let dir = tempfile::tempdir().unwrap();
        let mut config = daemon_config(dir.path(), &llm.url);
        if let Some(storage) = &storage {
            config.storage = storage.clone();
        }
        config.webhook.enabled = true;
        config.webhook.routes = github_route(&gh.url);
        priced(&mut config);
        config.budgets.route.daily_cost = 0.025;
        let daemon = InProcess::start(
            config,
            Env::from_pairs([
                ("GITHUB_WEBHOOK_SECRET", "s3cret"),
                ("GITHUB_TOKEN", "ghs_t"),
            ]),
        )
        .await;
        let body = common::pr_push(1, "first");
        let status = switchboard::http::client::client()
            .post(format!("{}/webhooks/github", daemon.base))
            .header("content-type", "application/json")
            .header("x-github-event", "pull_request")
            .header("x-github-delivery", "d1")
            .header("x-hub-signature-256", github_signature("s3cret", &body))
            .body(body)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 202);
        let comment = common::until("the stop is posted", || async {
            gh.seen()
                .into_iter()
                .filter_map(|s| s.body["body"].as_str().map(str::to_string))
                .find(|b| b.contains("stopped here"))
        })
        .await;
        assert!(
            comment.contains("Webhook route github is at 0.02 of 0.03 of its daily budget"),
            "{comment}"
        );
        assert_eq!(llm.requests().len(), 2);
        let turns = daemon.store.usage_since(0).await.unwrap();
        let route = turns.iter().find(|r| r.level == "route").unwrap();
        assert_eq!(route.cost_micros, 20_000);
        daemon.shutdown().await;

        // A job: 0.025 a day, its run calling a tool for ever.
        let tg = FakeTelegram::start().await;
        let llm = looping("todo", TODO, Duration::ZERO).await;
        let dir = tempfile::tempdir().unwrap();
        let mut config = telegram(dir.path(), &tg, &llm, &storage);
        digest_job(&mut config);
        config.budgets.job.daily_cost = 0.025;
        // A job from the configuration is nobody's: a person's cap, however
        // small, does not stop it.
        config.budgets.user.daily_cost = 0.001;
        let daemon = start(&config).await;
        let _ = first_run(&daemon, &config).await;
        let told = common::until("the run stops", || async {
            sent(&tg).into_iter().find(|t| t.contains("stopped here"))
        })
        .await;
        assert!(
            told.contains("Scheduled job")
                && told.contains("is at 0.02 of 0.03 of its daily budget"),
            "{told}"
        );
        assert_eq!(llm.requests().len(), 2);
        daemon.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_shows_what_a_running_turn_holds_beside_what_was_spent() {
    common::on_both_backends(|storage| async move {
        let tg = FakeTelegram::start().await;
        // The first call answers; the second waits on the model.
        let llm = FakeLlm::start(vec![
            tool_call("t1", "todo", TODO, 5),
            Reply::Delayed(Duration::from_secs(30), Box::new(Reply::Json(text("late")))),
        ])
        .await;
        let dir = tempfile::tempdir().unwrap();
        let mut config = telegram(dir.path(), &tg, &llm, &storage);
        config.budgets.user.daily_cost = 0.10;
        let daemon = start(&config).await;
        say(&tg, 1, "tidy the backlog");
        common::eventually("the second call waits", || async {
            llm.requests().len() == 2
        })
        .await;
        say(&tg, 2, "/usage");
        common::eventually("usage said", || async { !sent(&tg).is_empty() }).await;
        let usage = sent(&tg).remove(0);
        // 0.01 used by the first call and 0.01 held for the second.
        assert!(
            usage.contains("Your usage today: 0.02 of 0.10, of which 0.02 (")
                && usage.contains("tokens) held by running requests; 0.08 left until"),
            "{usage}"
        );
        let rows = daemon.store.usage_since(0).await.unwrap();
        let user = rows.iter().find(|r| r.level == "user").unwrap();
        assert_eq!(
            (user.turns, user.cost_micros, user.held_micros),
            (0, 0, 20_000)
        );
        daemon.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_stopped_on_its_way_counts_its_prompt() {
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![Reply::Delayed(
        Duration::from_secs(30),
        Box::new(Reply::Json(text("late"))),
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = telegram(dir.path(), &tg, &llm, &None);
    config.budgets.user.daily_tokens = 1_000_000;
    let daemon = start(&config).await;
    say(&tg, 1, &"a long question ".repeat(400));
    common::eventually("the call is on its way", || async {
        llm.requests().len() == 1
    })
    .await;
    say(&tg, 2, "/stop");
    let store = &daemon.store;
    let record = common::until("the stopped turn is recorded", || async {
        let sessions = store.list_sessions(10).await.unwrap();
        let session = sessions.first()?;
        store.turns(&session.id).await.unwrap().pop()
    })
    .await;
    assert_eq!(record.outcome, "cancelled");
    // 6 400 characters of question alone are 1 600 tokens.
    assert!(
        record.prompt_tokens > 1600 && record.completion_tokens == 0,
        "the prompt sent was counted: {record:?}"
    );
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_refused_at_the_cap_is_answered_again_when_the_day_turns_on_the_daemons_clock() {
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![
        Reply::Json(text("today's answer")),
        Reply::Json(text("tomorrow's answer")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = telegram(dir.path(), &tg, &llm, &None);
    config.budgets.user.daily_cost = 0.01;
    let clock = switchboard::clock::Clock::manual(now_ms());
    let token = Env::from_pairs([("TELEGRAM_BOT_TOKEN", "123:test-token")]);
    let daemon = InProcess::start_on(config, token, clock.clone()).await;
    common::ready(&daemon.gateway, "telegram").await;
    say(&tg, 1, "first");
    common::eventually("answered", || async { sent(&tg).len() == 1 }).await;
    say(&tg, 2, "second");
    common::eventually("refused", || async { sent(&tg).len() == 2 }).await;
    assert!(
        sent(&tg)[1].starts_with("Your usage has reached its daily budget"),
        "{:?}",
        sent(&tg)
    );
    clock.advance(24 * 60 * 60 * 1000);
    say(&tg, 3, "third");
    common::eventually("answered the next day", || async {
        sent(&tg).last().is_some_and(|t| t == "tomorrow's answer")
    })
    .await;
    // The same clock decides the session's daily reset.
    assert_eq!(
        sent(&tg)[2],
        "(Starting a new conversation: conversations start over daily at 04:00 UTC.)"
    );
    assert_eq!(llm.requests().len(), 2);
    daemon.shutdown().await;
}
