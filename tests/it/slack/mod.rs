//! The Slack adapter (Events API mode) end to end: signed Events API and
//! interactivity requests into the real daemon, the real slack-morphism
//! client against a fake Web API, a scripted model.

use crate::common;

use common::fake_llm::{FakeLlm, Reply, calls, text};
use common::fake_slack::{BOT_USER, FakeSlack};
use common::in_process::{InProcess, daemon_config};
use serde_json::{Value, json};
use switchboard::adapters::slack::verify::sign;
use switchboard::config::{Config, Env, SlackMode};

mod outages;

const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

struct Setup {
    slack: FakeSlack,
    llm: FakeLlm,
    daemon: InProcess,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

async fn start(script: Vec<Reply>) -> Setup {
    start_in(SlackMode::Events, script, |_| {}).await
}

async fn start_in(mode: SlackMode, script: Vec<Reply>, tweak: impl FnOnce(&mut Config)) -> Setup {
    let slack = FakeSlack::start().await;
    let llm = FakeLlm::start(script).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = daemon_config(dir.path(), &llm.url);
    config.slack.enabled = true;
    config.slack.open = true;
    config.slack.mode = mode;
    config.slack.api_url = slack.url.clone();
    tweak(&mut config);
    let env = Env::from_pairs([
        ("SLACK_BOT_TOKEN", "xoxb-test"),
        ("SLACK_SIGNING_SECRET", SECRET),
        ("SLACK_APP_TOKEN", "xapp-test"),
    ]);
    let daemon = InProcess::start(config, env).await;
    common::ready(&daemon.gateway, "slack").await;
    Setup {
        slack,
        llm,
        daemon,
        http: switchboard::http::client::client(),
        _dir: dir,
    }
}

impl Setup {
    async fn signed(
        &self,
        path: &str,
        body: Vec<u8>,
        ts: i64,
        extra: &[(&str, &str)],
    ) -> reqwest::Response {
        let content_type = if path.ends_with("interactivity") {
            "application/x-www-form-urlencoded"
        } else {
            "application/json"
        };
        let mut req = self
            .http
            .post(format!("{}{path}", self.daemon.base))
            .header("content-type", content_type)
            .header("x-slack-request-timestamp", ts.to_string())
            .header("x-slack-signature", sign(SECRET, ts, &body));
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        req.body(body).send().await.unwrap()
    }

    async fn event(
        &self,
        event: Value,
        event_id: &str,
        extra: &[(&str, &str)],
    ) -> reqwest::Response {
        let body = json!({
            "token": "legacy", "team_id": "T0001", "api_app_id": "A0001",
            "type": "event_callback", "event_id": event_id, "event_time": 1_764_000_000,
            "event": event,
        });
        self.signed(
            "/slack/events",
            serde_json::to_vec(&body).unwrap(),
            now(),
            extra,
        )
        .await
    }

    async fn press(
        &self,
        user: &str,
        channel: &str,
        message_ts: &str,
        value: &str,
    ) -> reqwest::Response {
        let payload = json!({
            "type": "block_actions",
            "user": {"id": user, "username": user.to_lowercase(), "team_id": "T0001"},
            "team": {"id": "T0001"},
            "channel": {"id": channel, "name": "ops"},
            "container": {"type": "message", "message_ts": message_ts, "channel_id": channel},
            "message": {"type": "message", "ts": message_ts, "text": "Approval needed"},
            "trigger_id": "1.2.3",
            "response_url": "https://hooks.slack.com/actions/T/1/x",
            "actions": [{"type": "button", "action_id": "switchboard_approval_0",
                         "block_id": "switchboard_approval", "value": value,
                         "action_ts": "1764000001.000"}],
        });
        let body: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &payload.to_string())
            .finish();
        self.signed("/slack/interactivity", body.into_bytes(), now(), &[])
            .await
    }
}

fn now() -> i64 {
    switchboard::store::now_ms() / 1000
}

fn mention(user: &str, channel: &str, ts: &str, text: &str) -> Value {
    json!({"type": "app_mention", "user": user, "channel": channel, "ts": ts,
           "text": format!("<@{BOT_USER}> {text}"), "event_ts": ts})
}

#[tokio::test]
async fn url_verification_and_signature_checks() {
    let s = start(vec![]).await;
    let body = serde_json::to_vec(&json!({"type": "url_verification", "token": "t", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"})).unwrap();
    let ok = s.signed("/slack/events", body.clone(), now(), &[]).await;
    assert_eq!(ok.status(), 200);
    assert_eq!(
        ok.json::<Value>().await.unwrap()["challenge"],
        "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    );
    let stale = s
        .signed("/slack/events", body.clone(), now() - 310, &[])
        .await;
    assert_eq!(stale.status(), 401);
    let wrong = s
        .http
        .post(format!("{}/slack/events", s.daemon.base))
        .header("x-slack-request-timestamp", now().to_string())
        .header("x-slack-signature", sign("not the secret", now(), &body))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let missing = s
        .http
        .post(format!("{}/slack/events", s.daemon.base))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 401);
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn a_mention_is_answered_in_its_thread_once_despite_retries() {
    let long = format!("**Summary**\n\n{}", "word ".repeat(1400));
    let s = start(vec![Reply::Json(text(&long))]).await;
    let r = s
        .event(
            mention("U1", "C1", "1764000000.000100", "summarise"),
            "Ev1",
            &[],
        )
        .await;
    assert_eq!(r.status(), 200);
    // Slack sends the channel `message` for the same post, and retries.
    let msg = json!({"type": "message", "channel_type": "channel", "user": "U1", "channel": "C1",
                     "ts": "1764000000.000100", "text": format!("<@{BOT_USER}> summarise")});
    assert_eq!(s.event(msg, "Ev2", &[]).await.status(), 200);
    let retry = s
        .event(
            mention("U1", "C1", "1764000000.000100", "summarise"),
            "Ev1",
            &[
                ("x-slack-retry-num", "1"),
                ("x-slack-retry-reason", "http_timeout"),
            ],
        )
        .await;
    assert_eq!(retry.status(), 200);
    let posts = s.slack.wait("chat.postMessage", 1).await;
    assert_eq!(posts[0].auth, "Bearer xoxb-test");
    assert_eq!(posts[0].body["channel"], "C1");
    assert_eq!(posts[0].body["thread_ts"], "1764000000.000100");
    let blocks = posts[0].body["blocks"].as_array().unwrap();
    assert!(blocks.len() >= 3, "7000 characters need three sections");
    for b in blocks {
        assert_eq!(b["type"], "section");
        assert!(b["text"]["text"].as_str().unwrap().chars().count() <= 3000);
    }
    assert!(
        blocks[0]["text"]["text"]
            .as_str()
            .unwrap()
            .starts_with("*Summary*")
    );
    // Each delivery was stored or dropped before its 200.
    assert_eq!(common::inbox_count(&s.daemon.store, "slack").await, 1);
    assert_eq!(s.llm.requests().len(), 1, "one turn for one message");
    let prompt = s.llm.requests()[0]["messages"].to_string();
    assert!(prompt.contains("summarise") && !prompt.contains(BOT_USER));
    assert!(
        prompt.contains("the user is annie"),
        "named through users.info: {prompt}"
    );
    let added = s.slack.calls("reactions.add");
    assert_eq!(added[0].body["name"], "hourglass_flowing_sand");
    assert_eq!(added[0].body["timestamp"], "1764000000.000100");
    s.slack.wait("reactions.remove", 1).await;
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn unmentioned_channel_messages_and_bots_are_ignored() {
    let s = start(vec![Reply::Json(text("hi"))]).await;
    let chatter = json!({"type": "message", "channel_type": "channel", "user": "U1", "channel": "C1",
                         "ts": "1764000000.000200", "text": "lunch?"});
    assert_eq!(s.event(chatter, "Ev3", &[]).await.status(), 200);
    let bot = json!({"type": "message", "channel_type": "im", "user": "U9", "bot_id": "B9",
                     "channel": "D1", "ts": "1764000000.000300", "text": "beep"});
    assert_eq!(s.event(bot, "Ev4", &[]).await.status(), 200);
    let own = json!({"type": "message", "channel_type": "im", "user": BOT_USER,
                     "channel": "D1", "ts": "1764000000.000400", "text": "my own reply"});
    assert_eq!(s.event(own, "Ev5", &[]).await.status(), 200);
    let dm = json!({"type": "message", "channel_type": "im", "user": "U1",
                    "channel": "D1", "ts": "1764000000.000500", "text": "hello"});
    assert_eq!(s.event(dm, "Ev6", &[]).await.status(), 200);
    let posts = s.slack.wait("chat.postMessage", 1).await;
    assert_eq!(posts[0].body["channel"], "D1");
    assert!(
        posts[0].body.get("thread_ts").is_none(),
        "DMs are not threaded"
    );
    assert_eq!(s.llm.requests().len(), 1, "only the DM reached the agent");
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn approval_buttons_resolve_through_the_broker() {
    let s = start(vec![
        Reply::Json(calls(&[(
            "c1",
            "terminal",
            r#"{"command":"git reset --hard"}"#,
        )])),
        Reply::Json(text("Reset done.")),
    ])
    .await;
    s.event(
        mention("U1", "C1", "1764000000.000600", "reset it"),
        "Ev7",
        &[],
    )
    .await;
    let posts = s.slack.wait("chat.postMessage", 1).await;
    let prompt = &posts[0].body;
    assert_eq!(prompt["thread_ts"], "1764000000.000600");
    let actions = prompt["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "actions")
        .unwrap();
    let buttons = actions["elements"].as_array().unwrap();
    assert_eq!(buttons.len(), 4);
    let once = buttons[0]["value"].as_str().unwrap().to_string();
    assert!(once.starts_with("ap:") && once.ends_with(":once"));
    let prompt_ts = posts[0].ts.as_str();
    // Someone else presses: refused privately, nothing decided.
    assert_eq!(s.press("U2", "C1", prompt_ts, &once).await.status(), 200);
    let ephemeral = s.slack.wait("chat.postEphemeral", 1).await;
    assert_eq!(ephemeral[0].body["user"], "U2");
    assert!(
        ephemeral[0].body["text"]
            .as_str()
            .unwrap()
            .starts_with("Only the person who asked")
    );
    assert!(s.slack.calls("chat.update").is_empty());
    // The requester presses.
    assert_eq!(s.press("U1", "C1", prompt_ts, &once).await.status(), 200);
    let updates = s.slack.wait("chat.update", 1).await;
    assert_eq!(updates[0].body["ts"], prompt_ts);
    let text = updates[0].body["text"].as_str().unwrap();
    assert!(text.contains("Allowed once by u1"), "{text}");
    assert!(
        updates[0].body["blocks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["type"] != "actions"),
        "buttons removed"
    );
    let posts = s.slack.wait("chat.postMessage", 2).await;
    assert_eq!(posts[1].body["text"], "Reset done.");
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn bang_approve_works_in_threads() {
    let s = start(vec![
        Reply::Json(calls(&[(
            "c1",
            "terminal",
            r#"{"command":"git reset --hard"}"#,
        )])),
        Reply::Json(text("Done.")),
    ])
    .await;
    s.event(
        mention("U1", "C1", "1764000000.000700", "reset"),
        "Ev8",
        &[],
    )
    .await;
    s.slack.wait("chat.postMessage", 1).await;
    let reply = json!({"type": "message", "channel_type": "channel", "user": "U1", "channel": "C1",
                       "ts": "1764000000.000800", "thread_ts": "1764000000.000700", "text": "!approve"});
    assert_eq!(s.event(reply, "Ev9", &[]).await.status(), 200);
    let posts = s.slack.wait("chat.postMessage", 3).await;
    let texts: Vec<&str> = posts
        .iter()
        .map(|p| p.body["text"].as_str().unwrap())
        .collect();
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("Done: approved by annie")),
        "{texts:?}"
    );
    assert!(texts.contains(&"Done."));
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn thread_replies_continue_the_conversation_without_a_mention() {
    let s = start(vec![
        Reply::Json(text("First.")),
        Reply::Json(text("Second.")),
        Reply::Json(text("Third.")),
    ])
    .await;
    s.event(
        mention("U1", "C1", "1764000000.000900", "start"),
        "Ev10",
        &[],
    )
    .await;
    s.slack.wait("chat.postMessage", 1).await;
    let follow = json!({"type": "message", "channel_type": "channel", "user": "U1", "channel": "C1",
                        "ts": "1764000000.001000", "thread_ts": "1764000000.000900", "text": "and then?"});
    assert_eq!(s.event(follow, "Ev11", &[]).await.status(), 200);
    let posts = s.slack.wait("chat.postMessage", 2).await;
    assert_eq!(posts[1].body["text"], "Second.");
    assert_eq!(posts[1].body["thread_ts"], "1764000000.000900");
    let second = s.llm.requests()[1]["messages"].to_string();
    assert!(second.contains("First."), "same session: {second}");
    // Threads are one conversation (sessions.thread_sessions_per_user is
    // off): a colleague's reply in it continues it too.
    let other = json!({"type": "message", "channel_type": "channel", "user": "U2", "channel": "C1",
                       "ts": "1764000000.001100", "thread_ts": "1764000000.000900", "text": "me too"});
    s.event(other, "Ev12", &[]).await;
    let posts = s.slack.wait("chat.postMessage", 3).await;
    assert_eq!(posts[2].body["text"], "Third.");
    assert!(
        s.llm.requests()[2]["messages"]
            .to_string()
            .contains("Second.")
    );
    // A reply in a thread the bot is not part of needs a mention.
    let stray = json!({"type": "message", "channel_type": "channel", "user": "U2", "channel": "C1",
                       "ts": "1764000000.001300", "thread_ts": "1764000000.001200", "text": "unrelated"});
    assert_eq!(s.event(stray, "Ev13", &[]).await.status(), 200);
    // Refused before its 200: stored nowhere, no turn to come.
    assert_eq!(common::inbox_count(&s.daemon.store, "slack").await, 3);
    assert_eq!(s.llm.requests().len(), 3);
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn socket_mode_acknowledges_envelopes_and_answers() {
    let s = start_in(
        SlackMode::Socket,
        vec![
            Reply::Json(calls(&[(
                "c1",
                "terminal",
                r#"{"command":"git reset --hard"}"#,
            )])),
            Reply::Json(text("Over the socket.")),
        ],
        |_| {},
    )
    .await;
    let open = s.slack.wait("apps.connections.open", 1).await;
    assert_eq!(
        open[0].auth, "Bearer xapp-test",
        "opened with the app-level token"
    );
    s.slack
        .envelope(envelope(
            "env-1",
            0,
            "Ev20",
            mention("U1", "C1", "1764000000.002000", "reset"),
        ))
        .await;
    s.slack.acked("env-1").await;
    let posts = s.slack.wait("chat.postMessage", 1).await;
    let value = posts[0].body["blocks"][1]["elements"][0]["value"]
        .as_str()
        .unwrap()
        .to_string();
    let payload = json!({
        "type": "block_actions",
        "user": {"id": "U1", "username": "u1", "team_id": "T0001"},
        "team": {"id": "T0001", "domain": "acme"},
        "channel": {"id": "C1", "name": "ops"},
        "container": {"type": "message", "message_ts": posts[0].ts, "channel_id": "C1"},
        "message": {"type": "message", "ts": posts[0].ts, "text": "Approval needed"},
        "trigger_id": "1.2.3",
        "api_app_id": "A0001",
        "response_url": "https://hooks.slack.com/actions/T/1/x",
        "actions": [{"type": "button", "action_id": "switchboard_approval_0",
                     "block_id": "switchboard_approval", "value": value,
                     "text": {"type": "plain_text", "text": "Allow once"},
                     "action_ts": "1764000001.000"}],
    });
    s.slack
        .envelope(json!({
            "envelope_id": "env-2", "type": "interactive",
            "accepts_response_payload": true, "payload": payload,
        }))
        .await;
    s.slack.acked("env-2").await;
    s.slack.wait("chat.update", 1).await;
    let posts = s.slack.wait("chat.postMessage", 2).await;
    assert_eq!(posts[1].body["text"], "Over the socket.");
    assert_eq!(posts[1].body["thread_ts"], "1764000000.002000");
    s.daemon.shutdown().await;
}

/// A Socket Mode envelope for `event` (Slack retries one it was not
/// acknowledged for with a new envelope id and `retry_attempt` counted up).
fn envelope(envelope_id: &str, retry: u64, event_id: &str, event: Value) -> Value {
    json!({
        "envelope_id": envelope_id, "type": "events_api",
        "accepts_response_payload": false, "retry_attempt": retry,
        "retry_reason": if retry > 0 { "timeout" } else { "" },
        "payload": {
            "token": "legacy", "team_id": "T0001", "api_app_id": "A0001",
            "type": "event_callback", "event_id": event_id, "event_time": 1_764_000_000,
            "event": event,
        },
    })
}

#[tokio::test]
async fn an_allowed_bot_is_taken_like_a_person() {
    let s = start_in(
        SlackMode::Events,
        vec![Reply::Json(text("Hello, CI bot."))],
        |c| {
            c.slack.allowed_bots = vec!["BCI".into()];
        },
    )
    .await;
    let other = json!({"type": "message", "channel_type": "im", "user": "U8", "bot_id": "BOTHER",
                       "channel": "D2", "ts": "1764000000.004000", "text": "ignored"});
    s.event(other, "Ev40", &[]).await;
    let ci = json!({"type": "message", "channel_type": "im", "user": "U9", "bot_id": "BCI",
                    "channel": "D2", "ts": "1764000000.004100", "text": "build 42 failed"});
    s.event(ci, "Ev41", &[]).await;
    let posts = s.slack.wait("chat.postMessage", 1).await;
    assert_eq!(posts[0].body["text"], "Hello, CI bot.");
    assert_eq!(s.llm.requests().len(), 1);
    assert!(
        s.llm.requests()[0]["messages"]
            .to_string()
            .contains("build 42 failed")
    );
    s.daemon.shutdown().await;
}

/// NUL bytes in an event's text, user and ts are taken and answered on
/// both backends.
#[tokio::test]
async fn an_event_with_nul_bytes_is_answered_on_both_backends() {
    common::on_both_backends(|storage| async move {
        let s = start_in(SlackMode::Events, vec![Reply::Json(text("Noted."))], |c| {
            if let Some(storage) = storage {
                c.storage = storage;
            }
        })
        .await;
        let event = mention("U1", "C1", "1764000000.000900", "what\u{0}is this");
        assert_eq!(s.event(event, "EvNUL\u{0}", &[]).await.status(), 200);
        let posts = s.slack.wait("chat.postMessage", 1).await;
        assert_eq!(posts[0].body["thread_ts"], "1764000000.000900");
        let prompt = s.llm.requests()[0]["messages"].to_string();
        assert!(prompt.contains("what\u{FFFD}is this"), "{prompt}");
        let store = &s.daemon.store;
        assert!(store.inbox_pending(10).await.unwrap().is_empty());
        s.daemon.shutdown().await;
    })
    .await;
}

fn dm(ts: &str, text: &str) -> Value {
    json!({"type": "message", "channel_type": "im", "user": "U1", "channel": "D1",
           "ts": ts, "text": text, "event_ts": ts})
}

#[tokio::test]
async fn a_streamed_answer_is_posted_once_then_updated_at_slacks_pace() {
    let answer = (0..200)
        .map(|w| format!("w{w}"))
        .collect::<Vec<_>>()
        .join(" ");
    let s = start(vec![Reply::SlowSse(
        common::fake_llm::text_stream(&answer, 10),
        std::time::Duration::from_millis(12),
    )])
    .await;
    let sent = s
        .event(
            mention("U1", "C1", "1764000000.000300", "count"),
            "Ev30",
            &[],
        )
        .await;
    assert_eq!(sent.status(), 200);
    common::eventually("the whole answer", || async {
        s.slack
            .calls("chat.update")
            .last()
            .is_some_and(|c| c.body["text"] == answer.as_str())
    })
    .await;
    // A quiet period: no second copy and no stray write come.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let posts = s.slack.calls("chat.postMessage");
    assert_eq!(posts.len(), 1, "one message, no second copy");
    assert_eq!(posts[0].body["thread_ts"], "1764000000.000300");
    let updates = s.slack.calls("chat.update");
    assert!(updates.iter().all(|u| u.body["ts"] == posts[0].ts.as_str()));
    let mut writes: Vec<std::time::Instant> = posts.iter().chain(&updates).map(|c| c.at).collect();
    writes.sort();
    for pair in writes[..writes.len() - 1].windows(2) {
        let gap = pair[1].duration_since(pair[0]);
        assert!(
            gap >= std::time::Duration::from_millis(1400),
            "two writes {gap:?} apart"
        );
    }
}

#[tokio::test]
async fn an_edit_before_the_turn_replaces_the_message_and_a_deletion_drops_one() {
    let s = start(vec![
        Reply::Delayed(
            std::time::Duration::from_millis(1500),
            Box::new(Reply::Json(text("first done"))),
        ),
        Reply::Json(text("second done")),
        Reply::Json(text("never")),
    ])
    .await;
    let dm = |ts: &str, words: &str| {
        json!({"type": "message", "channel_type": "im", "user": "U1", "channel": "D1",
               "ts": ts, "text": words, "event_ts": ts})
    };
    s.event(dm("1764000000.000401", "one"), "Ev41", &[]).await;
    common::eventually("the first turn asked", || async {
        s.llm.requests().len() == 1
    })
    .await;
    s.event(dm("1764000000.000402", "tow"), "Ev42", &[]).await;
    s.event(dm("1764000000.000403", "three"), "Ev43", &[]).await;
    let changed = json!({"type": "message", "subtype": "message_changed", "channel": "D1",
        "channel_type": "im", "event_ts": "1764000000.000500",
        "message": {"type": "message", "user": "U1", "text": "two",
                    "ts": "1764000000.000402", "edited": {"user": "U1", "ts": "1764000000.000500"}},
        "previous_message": {"type": "message", "user": "U1", "text": "tow", "ts": "1764000000.000402"}});
    assert_eq!(s.event(changed, "Ev44", &[]).await.status(), 200);
    let deleted = json!({"type": "message", "subtype": "message_deleted", "channel": "D1",
        "channel_type": "im", "deleted_ts": "1764000000.000403", "event_ts": "1764000000.000501",
        "previous_message": {"type": "message", "user": "U1", "text": "three", "ts": "1764000000.000403"}});
    assert_eq!(s.event(deleted, "Ev45", &[]).await.status(), 200);
    common::eventually("the edited one answered", || async {
        s.slack
            .calls("chat.postMessage")
            .iter()
            .any(|c| c.body["text"] == "second done")
    })
    .await;
    // A quiet period: the deleted message is not asked about.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let asked: Vec<String> = s
        .llm
        .requests()
        .iter()
        .map(|r| {
            r["messages"]
                .as_array()
                .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
                .and_then(|m| m["content"].as_str())
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(
        asked,
        vec!["one", "two"],
        "the edit read, the deleted one dropped"
    );
}

#[tokio::test]
async fn a_stranger_in_the_workspace_gets_a_pairing_code_not_an_agent() {
    let s = start_in(SlackMode::Events, vec![Reply::Json(text("hi"))], |c| {
        c.slack.open = false;
    })
    .await;
    let hello = json!({"type": "message", "channel_type": "im", "user": "U7",
                       "channel": "D7", "ts": "1764000000.000900", "text": "run rm -rf ~ for me"});
    assert_eq!(s.event(hello, "Ev90", &[]).await.status(), 200);
    s.event(
        mention("U7", "C1", "1764000000.000901", "and here"),
        "Ev91",
        &[],
    )
    .await;
    let posts = s.slack.wait("chat.postMessage", 1).await;
    assert_eq!(posts[0].body["channel"], "D7");
    let said = posts[0].body["text"].as_str().unwrap_or_default();
    assert!(said.contains("pairing approve slack"), "{said}");
    let pending = s
        .daemon
        .store
        .pairing_requests(Some("slack"))
        .await
        .unwrap();
    assert_eq!(pending.len(), 1);
    assert!(s.llm.requests().is_empty(), "no agent ran for a stranger");
    s.daemon.shutdown().await;
}
