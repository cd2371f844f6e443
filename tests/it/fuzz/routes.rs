//! Targets through the running daemon: mutated, correctly signed (and now
//! and then wrongly signed) requests to each webhook scheme, Slack's Events
//! API and interactivity endpoints, and Telegram's webhook. Each answer
//! must be a 2xx or 4xx, never a 5xx; the daemon must not panic anywhere
//! (not in a handler, not in the turn or delivery that follows) and must
//! still be healthy and stop cleanly at the end. Runs in a process of its
//! own so that a panic hook can count every panic in it.

use super::{ci_cases, fuzz, github_fixture, mangled_bytes, mutated};
use crate::common;
use crate::common::fake_llm::{FakeLlm, Reply, text};
use crate::common::fake_slack::{BOT_USER, FakeSlack};
use crate::common::fake_telegram::FakeTelegram;
use crate::common::in_process::{InProcess, daemon_config};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use serde_json::{Value, json};
use switchboard::adapters::webhook::verify::{github_signature, standard_signature};
use switchboard::config::{Env, SlackMode, TelegramMode, load_from_str};

const GITHUB_SECRET: &str = "gh-fuzz-secret";
const GITLAB_TOKEN: &str = "gl-fuzz-token";
const STANDARD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const TELEGRAM_SECRET: &str = "tg-fuzz-secret-0123456789";

static PANICS: AtomicU64 = AtomicU64::new(0);

const ROUTES: &str = r#"
[[webhook.routes]]
name = "github"
path = "/hooks/github"
scheme = "github"
secret_env = "GITHUB_WEBHOOK_SECRET"
bot_login = "switchboard-bot"
rate_limit_per_minute = 100000
[webhook.routes.deliver]
kind = "log"

[[webhook.routes]]
name = "gitlab"
path = "/hooks/gitlab"
scheme = "gitlab"
secret_env = "GITLAB_TOKEN"
rate_limit_per_minute = 100000
[webhook.routes.deliver]
kind = "log"

[[webhook.routes]]
name = "ci"
path = "/hooks/ci"
scheme = "standard-webhooks"
secret_env = "CI_SECRET"
rate_limit_per_minute = 100000
prompt = "CI says {data.status} for {data.ref}: {data.log}"
[webhook.routes.deliver]
kind = "log"
"#;

/// A request to send: which endpoint, the document, and whether to sign it
/// correctly.
#[derive(Debug, Clone)]
struct Sent {
    target: usize,
    body: Vec<u8>,
    signed: bool,
}

fn samples() -> Vec<Value> {
    let mention = json!({"type": "app_mention", "user": "U1", "channel": "C1", "ts": "1764000000.000100",
        "text": format!("<@{BOT_USER}> hello"), "event_ts": "1764000000.000100", "thread_ts": "1764000000.000001"});
    let press = json!({
        "type": "block_actions",
        "user": {"id": "U1", "username": "u1", "team_id": "T0001"},
        "team": {"id": "T0001"},
        "channel": {"id": "C1", "name": "ops"},
        "container": {"type": "message", "message_ts": "1764000000.000200", "channel_id": "C1"},
        "message": {"type": "message", "ts": "1764000000.000200", "text": "Approval needed"},
        "trigger_id": "1.2.3",
        "response_url": "https://hooks.slack.com/actions/T/1/x",
        "actions": [{"type": "button", "action_id": "switchboard_approval_0",
                     "block_id": "switchboard_approval", "value": "approve:ab12cd34:once",
                     "action_ts": "1764000001.000"}],
    });
    let mut telegram = FakeTelegram::message(7, 7, "Ann", 11, "hello");
    telegram["update_id"] = json!(1);
    vec![
        github_fixture("pull_request.opened"),
        github_fixture("issue_comment.created"),
        json!({"object_kind": "merge_request", "user": {"username": "ann"},
               "project": {"id": 7, "path_with_namespace": "team/app"},
               "object_attributes": {"iid": 3, "title": "Fix", "action": "open",
                                     "description": "body", "url": "https://gitlab.example.com/x"}}),
        json!({"type": "ci.finished", "timestamp": "2026-12-01T00:00:00Z",
               "data": {"status": "failed", "ref": "main", "log": "error: boom"}}),
        json!({"token": "legacy", "team_id": "T0001", "api_app_id": "A0001",
               "type": "event_callback", "event_id": "Ev1", "event_time": 1_764_000_000,
               "event": mention}),
        press,
        telegram,
        json!({"type": "url_verification", "challenge": "c", "token": "t"}),
    ]
}

/// Where each sample goes.
const TARGETS: [&str; 8] = [
    "/hooks/github",
    "/hooks/github",
    "/hooks/gitlab",
    "/hooks/ci",
    "/slack/events",
    "/slack/interactivity",
    "/telegram/webhook",
    "/slack/events",
];

fn requests() -> impl Strategy<Value = Sent> {
    let samples = samples();
    (0..samples.len(), prop::bool::weighted(0.9)).prop_flat_map(move |(target, signed)| {
        mutated(samples[target].clone())
            .prop_flat_map(mangled_bytes)
            .prop_map(move |body| Sent {
                target,
                body,
                signed,
            })
    })
}

async fn send(http: &reqwest::Client, base: &str, n: u64, sent: &Sent) -> u16 {
    let path = TARGETS[sent.target];
    let now = switchboard::store::now_ms() / 1000;
    let mut body = sent.body.clone();
    let mut req = http.post(format!("{base}{path}"));
    let key = |real: &str| {
        if sent.signed {
            real.to_string()
        } else {
            "wrong".into()
        }
    };
    match path {
        "/hooks/github" => {
            let event = if sent.target == 0 {
                "pull_request"
            } else {
                "issue_comment"
            };
            req = req
                .header("content-type", "application/json")
                .header("x-github-event", event)
                .header("x-github-delivery", format!("fuzz-{n}"))
                .header(
                    "x-hub-signature-256",
                    github_signature(&key(GITHUB_SECRET), &body),
                );
        }
        "/hooks/gitlab" => {
            req = req
                .header("content-type", "application/json")
                .header("x-gitlab-event", "Merge Request Hook")
                .header("x-gitlab-event-uuid", format!("fuzz-{n}"))
                .header("x-gitlab-token", key(GITLAB_TOKEN));
        }
        "/hooks/ci" => {
            let id = format!("msg_fuzz{n}");
            req = req
                .header("content-type", "application/json")
                .header("webhook-id", &id)
                .header("webhook-timestamp", now.to_string())
                .header(
                    "webhook-signature",
                    standard_signature(&key(STANDARD_SECRET), &id, now, &body),
                );
        }
        "/slack/events" | "/slack/interactivity" => {
            if path.ends_with("interactivity") {
                body = url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("payload", &String::from_utf8_lossy(&body))
                    .finish()
                    .into_bytes();
                req = req.header("content-type", "application/x-www-form-urlencoded");
            } else {
                req = req.header("content-type", "application/json");
            }
            let signature =
                switchboard::adapters::slack::verify::sign(&key(SLACK_SECRET), now, &body);
            req = req
                .header("x-slack-request-timestamp", now.to_string())
                .header("x-slack-signature", signature);
        }
        _ => {
            req = req
                .header("content-type", "application/json")
                .header("x-telegram-bot-api-secret-token", key(TELEGRAM_SECRET));
        }
    }
    req.body(body).send().await.unwrap().status().as_u16()
}

/// Fuzzes every route of one daemon with `cases` requests.
pub fn all(cases: u32) -> u64 {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (daemon, _slack, _tg, _llm) = rt.block_on(async {
        let slack = FakeSlack::start().await;
        let tg = FakeTelegram::start().await;
        let llm = FakeLlm::responding(|_| Reply::Json(text("noted"))).await;
        let mut config = daemon_config(dir.path(), &llm.url);
        config.webhook = load_from_str(ROUTES, &Env::default()).unwrap().webhook;
        config.webhook.enabled = true;
        config.slack.enabled = true;
        config.slack.open = true;
        config.slack.mode = SlackMode::Events;
        config.slack.api_url = slack.url.clone();
        config.telegram.enabled = true;
        config.telegram.mode = TelegramMode::Webhook;
        config.telegram.api_url = tg.url.clone();
        config.telegram.allowed_users = vec![7];
        config.server.public_url = "https://bot.example.com/".into();
        config.sessions.max_pending = 1_000_000;
        config.sessions.queue_cap = 100_000;
        let env = Env::from_pairs([
            ("GITHUB_WEBHOOK_SECRET", GITHUB_SECRET),
            ("GITLAB_TOKEN", GITLAB_TOKEN),
            ("CI_SECRET", STANDARD_SECRET),
            ("SLACK_BOT_TOKEN", "xoxb-test"),
            ("SLACK_SIGNING_SECRET", SLACK_SECRET),
            ("TELEGRAM_BOT_TOKEN", "123:test-token"),
            ("TELEGRAM_WEBHOOK_SECRET", TELEGRAM_SECRET),
        ]);
        let daemon = InProcess::start(config, env).await;
        common::ready(&daemon.gateway, "slack").await;
        common::ready(&daemon.gateway, "telegram").await;
        (daemon, slack, tg, llm)
    });
    let http = switchboard::http::client::client();
    let counter = Arc::new(AtomicU64::new(0));
    let statuses = Arc::new(std::sync::Mutex::new(
        std::collections::BTreeMap::<u16, u64>::new(),
    ));
    let tried = fuzz("daemon routes", cases, requests(), |sent| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let status = rt.block_on(send(&http, &daemon.base, n, &sent));
        *statuses.lock().unwrap().entry(status).or_default() += 1;
        prop_assert!(
            (200..500).contains(&status),
            "{} answered {status} to {:?}",
            TARGETS[sent.target],
            String::from_utf8_lossy(&sent.body)
        );
        Ok(())
    });
    rt.block_on(async {
        // Let the turns and deliveries the accepted requests started run.
        common::eventually("every accepted event processed", || async {
            daemon.gateway.sessions.pending() == 0
        })
        .await;
        let health = http
            .get(format!("{}/healthz", daemon.base))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), 200);
        daemon.shutdown().await;
    });
    println!("daemon routes answered: {:?}", statuses.lock().unwrap());
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "the daemon panicked");
    tried
}

#[test]
fn daemon_routes_per_scheme_and_platform() {
    const PROBE: &str = "SWITCHBOARD_FUZZ_ROUTES";
    if std::env::var_os(PROBE).is_none() {
        common::run_alone("fuzz::routes::daemon_routes_per_scheme_and_platform", PROBE);
        return;
    }
    all(ci_cases());
}
