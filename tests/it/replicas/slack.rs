//! Replicas relaying what reaches the wrong one, over Slack's Events API
//! (which any replica serves): a clarify question's typed answer and button
//! press, and a message's deletion, each taken by the replica that does not
//! run the conversation and carried to the one that does.

use std::time::{Duration, Instant};

use super::{SECRET, replica};
use crate::common;
use common::PgTestDb;
use common::fake_github::FakeGithub;
use common::fake_llm::{FakeLlm, Reply, text};
use common::in_process::InProcess;
use switchboard::config::Env;

const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

/// A signed Slack request to replica `base`.
async fn slack_post(base: &str, path: &str, body: Vec<u8>) -> u16 {
    let ts = switchboard::store::now_ms() / 1000;
    let content_type = if path.ends_with("interactivity") {
        "application/x-www-form-urlencoded"
    } else {
        "application/json"
    };
    switchboard::http::client::client()
        .post(format!("{base}{path}"))
        .header("content-type", content_type)
        .header("x-slack-request-timestamp", ts.to_string())
        .header(
            "x-slack-signature",
            switchboard::adapters::slack::verify::sign(SLACK_SECRET, ts, &body),
        )
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// `text` written by U1 in their DM `channel` with the bot, as event `id`.
/// (Replicas of tests running at once share NOTIFY channels: each test
/// talks in a DM of its own.)
async fn slack_dm(base: &str, channel: &str, id: &str, ts: &str, text: &str) {
    let body = serde_json::json!({
        "token": "legacy", "team_id": "T0001", "api_app_id": "A0001",
        "type": "event_callback", "event_id": id, "event_time": 1_764_000_000,
        "event": {"type": "message", "channel_type": "im", "user": "U1", "channel": channel,
                  "ts": ts, "text": text, "event_ts": ts},
    });
    let status = slack_post(base, "/slack/events", serde_json::to_vec(&body).unwrap()).await;
    assert_eq!(status, 200, "event {id}");
}

/// Two replicas on `db` taking Slack's Events API, beside the fake Slack.
struct SlackReplicas {
    slack: common::fake_slack::FakeSlack,
    a: InProcess,
    b: InProcess,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    _github: FakeGithub,
}

impl SlackReplicas {
    async fn start(db: &PgTestDb, llm: &FakeLlm) -> Self {
        let slack = common::fake_slack::FakeSlack::start().await;
        let github = FakeGithub::start().await;
        let env = Env::from_pairs([
            ("GITHUB_WEBHOOK_SECRET", SECRET),
            ("GITHUB_TOKEN", "ghs_replicas"),
            ("SLACK_BOT_TOKEN", "xoxb-test"),
            ("SLACK_SIGNING_SECRET", SLACK_SECRET),
        ]);
        let slack_replica = |dir: &std::path::Path, name: &str| {
            let mut c = replica(dir, name, &db.config, llm, &github, None);
            c.slack.enabled = true;
            c.slack.open = true;
            c.slack.mode = switchboard::config::SlackMode::Events;
            c.slack.api_url = slack.url.clone();
            c
        };
        let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = InProcess::start(slack_replica(dirs.0.path(), "a"), env.clone()).await;
        let b = InProcess::start(slack_replica(dirs.1.path(), "b"), env).await;
        common::ready(&a.gateway, "slack").await;
        common::ready(&b.gateway, "slack").await;
        Self {
            slack,
            a,
            b,
            _dirs: dirs,
            _github: github,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_deleted_through_one_replica_cancels_its_turn_on_another() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    // The first turn is still thinking when its message is deleted.
    let llm = FakeLlm::start(vec![
        Reply::Delayed(
            Duration::from_secs(20),
            Box::new(Reply::Json(text("too late"))),
        ),
        Reply::Json(text("Second answered.")),
    ])
    .await;
    let SlackReplicas {
        slack,
        a,
        b,
        _dirs,
        _github,
    } = SlackReplicas::start(&db, &llm).await;

    slack_dm(&a.base, "D7", "Ev1", "1764000000.000100", "a long job").await;
    common::eventually("the model asked", || async { !llm.requests().is_empty() }).await;
    let started = Instant::now();
    // The deletion reaches b, which does not run the session.
    let deleted = serde_json::json!({
        "token": "legacy", "team_id": "T0001", "api_app_id": "A0001",
        "type": "event_callback", "event_id": "Ev2", "event_time": 1_764_000_001,
        "event": {"type": "message", "subtype": "message_deleted", "channel": "D7",
                  "channel_type": "im", "deleted_ts": "1764000000.000100",
                  "event_ts": "1764000000.000200",
                  "previous_message": {"type": "message", "user": "U1", "text": "a long job",
                                       "ts": "1764000000.000100"}},
    });
    let status = slack_post(
        &b.base,
        "/slack/events",
        serde_json::to_vec(&deleted).unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    common::eventually("the turn ended as deleted", || async {
        a.store
            .inbox_latest("slack", 10)
            .await
            .unwrap()
            .iter()
            .any(|row| row.outcome.as_deref() == Some("deleted"))
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "cancelled, not waited out: {:?}",
        started.elapsed()
    );
    // The session goes on: the next message is answered, and nothing was
    // said for the deleted one.
    slack_dm(&b.base, "D7", "Ev3", "1764000000.000300", "something quick").await;
    let posts = slack.wait("chat.postMessage", 1).await;
    assert!(
        posts[0].body.to_string().contains("Second answered."),
        "{:?}",
        posts[0].body
    );
    // A quiet period: nothing more is said or asked.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(slack.calls("chat.postMessage").len(), 1);
    assert_eq!(llm.requests().len(), 2);
    a.shutdown().await;
    b.shutdown().await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_asked_on_one_replica_is_answered_through_another() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let clarify = |q: &str, choices: &str| {
        Reply::Json(common::fake_llm::calls(&[(
            "q",
            "clarify",
            &format!(r#"{{"question":"{q}","choices":{choices}}}"#),
        )]))
    };
    let llm = FakeLlm::start(vec![
        clarify("Which environment?", r#"["staging","production"]"#),
        clarify("Which region?", r#"["eu","us"]"#),
        Reply::Json(text("Deploying to staging in eu.")),
    ])
    .await;
    let SlackReplicas {
        slack,
        a,
        b,
        _dirs,
        _github,
    } = SlackReplicas::start(&db, &llm).await;

    // The conversation starts on a, which runs it from then on.
    slack_dm(&a.base, "D1", "Ev1", "1764000000.000100", "deploy it").await;
    let posts = slack.wait("chat.postMessage", 1).await;
    assert!(posts[0].body.to_string().contains("Which environment?"));
    // The typed answer reaches b (load balanced): it is a's question.
    slack_dm(&b.base, "D1", "Ev2", "1764000000.000200", "staging").await;
    let posts = slack.wait("chat.postMessage", 2).await;
    let second = posts[1].body.to_string();
    assert!(second.contains("Which region?"), "{second}");
    // The button press reaches b too.
    let value = posts[1].body["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|b| b["elements"].as_array().cloned().unwrap_or_default())
        .find(|e| e["text"]["text"] == "eu")
        .and_then(|e| e["value"].as_str().map(str::to_string))
        .expect("a button for eu");
    let payload = serde_json::json!({
        "type": "block_actions",
        "user": {"id": "U1", "username": "u1", "team_id": "T0001"},
        "team": {"id": "T0001"},
        "channel": {"id": "D1", "name": "dm"},
        "container": {"type": "message", "message_ts": "1764000000.000300", "channel_id": "D1"},
        "message": {"type": "message", "ts": "1764000000.000300", "text": "Which region?"},
        "trigger_id": "1.2.3",
        "response_url": "https://hooks.slack.com/actions/T/1/x",
        "actions": [{"type": "button", "action_id": "switchboard_question_1",
                     "block_id": "switchboard_question", "value": value,
                     "action_ts": "1764000001.000"}],
    });
    let form: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish();
    assert_eq!(
        slack_post(&b.base, "/slack/interactivity", form.into_bytes()).await,
        200
    );
    let posts = slack.wait("chat.postMessage", 3).await;
    assert!(
        posts[2]
            .body
            .to_string()
            .contains("Deploying to staging in eu."),
        "{:?}",
        posts[2].body
    );
    let answers = llm.requests()[2]["messages"].to_string();
    assert!(
        answers.contains("staging") && answers.contains("eu"),
        "{answers}"
    );
    assert!(
        slack.calls("chat.postEphemeral").is_empty(),
        "no press was refused"
    );
    a.shutdown().await;
    b.shutdown().await;
    db.drop().await;
}
