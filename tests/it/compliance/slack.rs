//! The compliance scenarios against the fake Slack Web API, events and
//! presses coming in signed through the Events API routes: channel C1, U1
//! asking, U2 in the workspace too.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use switchboard::adapters::slack::verify::sign;
use switchboard::config::{Config, Env, SlackMode};

use super::{Person, Posted, Rig};
use crate::common::fake_llm::{FakeLlm, Reply};
use crate::common::fake_slack::{BOT_USER, FakeSlack};
use crate::common::in_process::{InProcess, daemon_config};

const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const CHANNEL: &str = "C1";
const THREAD: &str = "1764000000.000100";

pub struct Slack {
    slack: FakeSlack,
    llm: FakeLlm,
    daemon: InProcess,
    config: Config,
    http: reqwest::Client,
    next: AtomicU64,
    _dir: tempfile::TempDir,
}

fn env() -> Env {
    Env::from_pairs([
        ("SLACK_BOT_TOKEN", "xoxb-test"),
        ("SLACK_SIGNING_SECRET", SECRET),
    ])
}

fn user(who: Person) -> &'static str {
    match who {
        Person::Owner => "U1",
        Person::Other => "U2",
    }
}

/// The mrkdwn a message shows: its section blocks.
fn shown(body: &Value) -> String {
    body["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "section")
        .filter_map(|b| b["text"]["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n\n")
}

impl Slack {
    async fn signed(&self, path: &str, body: Vec<u8>, content_type: &str) {
        let ts = switchboard::store::now_ms() / 1000;
        let resp = self
            .http
            .post(format!("{}{path}", self.daemon.base))
            .header("content-type", content_type)
            .header("x-slack-request-timestamp", ts.to_string())
            .header("x-slack-signature", sign(SECRET, ts, &body))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
    }

    async fn mention(&self, who: Person, text: &str, thread: Option<&str>) {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let ts = format!("1764000001.{n:06}");
        let mut event = json!({"type": "app_mention", "user": user(who), "channel": CHANNEL,
            "ts": ts, "text": format!("<@{BOT_USER}> {text}"), "event_ts": ts});
        if let Some(thread) = thread {
            event["thread_ts"] = json!(thread);
        }
        let body = json!({
            "token": "legacy", "team_id": "T0001", "api_app_id": "A0001",
            "type": "event_callback", "event_id": format!("Ev{n}"), "event_time": 1_764_000_000,
            "event": event,
        });
        self.signed(
            "/slack/events",
            serde_json::to_vec(&body).unwrap(),
            "application/json",
        )
        .await;
    }
}

impl Rig for Slack {
    const LIMIT: usize = 39_000;

    async fn start(script: Vec<Reply>) -> Self {
        let slack = FakeSlack::start().await;
        let llm = FakeLlm::start(script).await;
        let dir = tempfile::tempdir().unwrap();
        let mut config = daemon_config(dir.path(), &llm.url);
        config.slack.enabled = true;
        config.slack.open = true;
        config.slack.mode = SlackMode::Events;
        config.slack.api_url = slack.url.clone();
        let daemon = InProcess::start(config.clone(), env()).await;
        let rig = Self {
            slack,
            llm,
            daemon,
            config,
            http: switchboard::http::client::client(),
            next: AtomicU64::new(1),
            _dir: dir,
        };
        rig.ready().await;
        rig
    }

    fn llm(&self) -> &FakeLlm {
        &self.llm
    }

    fn store(&self) -> &switchboard::store::Store {
        &self.daemon.store
    }

    async fn say_in_thread(&self, who: Person, text: &str) -> String {
        self.mention(who, text, Some(THREAD)).await;
        THREAD.to_string()
    }

    async fn say(&self, who: Person, text: &str) {
        self.mention(who, text, None).await;
    }

    fn posted(&self) -> Vec<Posted> {
        self.slack
            .calls("chat.postMessage")
            .into_iter()
            .map(|c| Posted {
                id: c.ts.clone(),
                text: shown(&c.body),
                thread: c.body["thread_ts"].as_str().map(str::to_string),
                buttons: c.body["blocks"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|b| b["type"] == "actions")
                    .flat_map(|b| b["elements"].as_array().into_iter().flatten())
                    .filter_map(|e| e["value"].as_str().map(str::to_string))
                    .collect(),
            })
            .collect()
    }

    async fn press(&self, who: Person, message: &Posted, data: &str) {
        let mut shown_message = json!({"type": "message", "ts": message.id, "text": message.text});
        if let Some(thread) = &message.thread {
            shown_message["thread_ts"] = json!(thread);
        }
        let payload = json!({
            "type": "block_actions",
            "user": {"id": user(who), "username": user(who).to_lowercase(), "team_id": "T0001"},
            "team": {"id": "T0001"},
            "channel": {"id": CHANNEL, "name": "ops"},
            "container": {"type": "message", "message_ts": message.id, "channel_id": CHANNEL},
            "message": shown_message,
            "trigger_id": "1.2.3",
            "response_url": "https://hooks.slack.com/actions/T/1/x",
            "actions": [{"type": "button", "action_id": "switchboard_0",
                         "block_id": "switchboard", "value": data,
                         "action_ts": "1764000001.000"}],
        });
        let body: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &payload.to_string())
            .finish();
        self.signed(
            "/slack/interactivity",
            body.into_bytes(),
            "application/x-www-form-urlencoded",
        )
        .await;
    }

    fn notices(&self) -> Vec<String> {
        self.slack
            .calls("chat.postEphemeral")
            .iter()
            .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    fn edited(&self, id: &str) -> Option<String> {
        self.slack
            .calls("chat.update")
            .iter()
            .rev()
            .find(|c| c.body["ts"] == id)
            .map(|c| shown(&c.body))
    }

    async fn restart(self) -> Self {
        let Self {
            slack,
            llm,
            daemon,
            config,
            http,
            next,
            _dir,
        } = self;
        daemon.shutdown().await;
        let daemon = InProcess::start(config.clone(), env()).await;
        let rig = Self {
            slack,
            llm,
            daemon,
            config,
            http,
            next,
            _dir,
        };
        rig.ready().await;
        rig
    }

    async fn stop(self) {
        self.daemon.shutdown().await;
    }
}

impl Slack {
    /// Waits until the adapter has connected (auth.test answered and the
    /// port attached).
    async fn ready(&self) {
        crate::common::ready(&self.daemon.gateway, "slack").await;
    }
}

super::compliance!(Slack);
