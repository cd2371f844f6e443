//! The Telegram adapter end to end: the real teloxide client against a fake
//! Bot API server, the real daemon in-process, a scripted model.

use crate::common;

use std::time::Duration;

use common::fake_llm::{FakeLlm, Reply, calls, text};
use common::fake_telegram::{BOT_USERNAME, FakeTelegram};
use common::in_process::{InProcess, daemon_config};
use common::outage::Answer;
use serde_json::{Value, json};
use switchboard::config::{Config, Env, TelegramMode};

const ANN: i64 = 1001;
const BOB: i64 = 1002;
const GROUP: i64 = -100_555;

struct Setup {
    tg: FakeTelegram,
    llm: FakeLlm,
    daemon: InProcess,
    dir: tempfile::TempDir,
}

async fn start(script: Vec<Reply>, tweak: impl FnOnce(&mut Config)) -> Setup {
    start_on(FakeTelegram::start().await, script, tweak).await
}

/// [`start`] against `tg`, set up before the daemon first polls it.
async fn start_on(tg: FakeTelegram, script: Vec<Reply>, tweak: impl FnOnce(&mut Config)) -> Setup {
    let llm = FakeLlm::start(script).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = daemon_config(dir.path(), &llm.url);
    config.telegram.enabled = true;
    config.telegram.api_url = tg.url.clone();
    config.telegram.allowed_users = vec![ANN, BOB];
    tweak(&mut config);
    let env = Env::from_pairs([
        ("TELEGRAM_BOT_TOKEN", "123:test-token"),
        ("TELEGRAM_WEBHOOK_SECRET", "s3cret-token-0123456789"),
    ]);
    let daemon = InProcess::start(config, env).await;
    Setup {
        tg,
        llm,
        daemon,
        dir,
    }
}

fn texts(calls: &[common::fake_telegram::Call]) -> Vec<String> {
    calls
        .iter()
        .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn a_private_message_gets_a_markdown_reply_with_typing_and_commands_set() {
    let s = start(
        vec![Reply::Json(text("**Done.** See `x_y` (v1.2)!"))],
        |_| {},
    )
    .await;
    s.tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "hello"));
    let sent = s.tg.wait("sendMessage", 1).await;
    assert_eq!(sent[0].body["chat_id"], ANN);
    assert!(sent[0].body.get("parse_mode").is_none());
    assert_eq!(sent[0].body["text"], "Done. See x_y (v1.2)!");
    assert_eq!(
        sent[0].body["entities"],
        json!([
            {"type": "bold", "offset": 0, "length": 5},
            {"type": "code", "offset": 10, "length": 3}
        ])
    );
    assert!(
        sent[0].body.get("reply_parameters").is_none(),
        "no reply quote in a private chat"
    );
    let commands = s.tg.calls("setMyCommands");
    let names: Vec<&str> = commands[0].body["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["command"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["new", "stop", "status", "usage", "approve", "deny", "help"]
    );
    let typing = s.tg.calls("sendChatAction");
    assert!(!typing.is_empty() && typing[0].body["action"] == "typing");
    let prompt = s.llm.requests()[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        prompt.contains("direct message on telegram; the user is Ann"),
        "{prompt}"
    );
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn long_replies_are_chunked_and_fall_back_to_plain_text() {
    let paragraph = "A sentence that goes **on**. ".repeat(40);
    let long = [paragraph.trim_end(); 12].join("\n\n");
    let s = start(vec![Reply::Json(text(&long))], |_| {}).await;
    s.tg.reject_entities(1);
    s.tg.push(FakeTelegram::message(ANN, ANN, "Ann", 11, "write a lot"));
    let sent = s.tg.wait("sendMessage", 4).await;
    // The first chunk's entities were refused; it went again without them.
    assert!(sent[0].body["entities"].is_array());
    assert!(sent[1].body.get("entities").is_none());
    assert_eq!(sent[0].body["text"], sent[1].body["text"]);
    assert!(sent[2].body["entities"].is_array(), "only that one message");
    assert!(
        texts(&sent[1..2])[0].ends_with("(1/3)"),
        "{:?}",
        texts(&sent)
    );
    let delivered = &sent[1..];
    assert_eq!(delivered.len(), 3);
    for (i, t) in texts(delivered).iter().enumerate() {
        assert!(t.encode_utf16().count() <= 4096);
        assert!(t.ends_with(&format!("({}/3)", i + 1)), "{t}");
        assert!(!t.contains("**"), "markup became entities: {t}");
    }
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn groups_need_a_mention_and_topics_are_threads() {
    let s = start(vec![Reply::Json(text("In the topic."))], |_| {}).await;
    s.tg.push(FakeTelegram::message(
        GROUP,
        ANN,
        "Ann",
        20,
        "just chatting",
    ));
    let mut topic = FakeTelegram::message(
        GROUP,
        ANN,
        "Ann",
        21,
        &format!("@{BOT_USERNAME} summarise please"),
    );
    topic["message"]["message_thread_id"] = json!(7);
    topic["message"]["is_topic_message"] = json!(true);
    topic["message"]["entities"] = json!([{"type": "mention", "offset": 0, "length": 16}]);
    s.tg.push(topic);
    let sent = s.tg.wait("sendMessage", 1).await;
    assert_eq!(sent[0].body["chat_id"], GROUP);
    assert_eq!(sent[0].body["message_thread_id"], 7);
    assert_eq!(sent[0].body["reply_parameters"]["message_id"], 21);
    let requests = s.llm.requests();
    assert_eq!(
        requests.len(),
        1,
        "the unmentioned message reached no agent"
    );
    let user = requests[0]["messages"].to_string();
    assert!(user.contains("summarise please") && !user.contains("@switchboard_bot"));
    let sessions = s.daemon.store.list_sessions(10).await.unwrap();
    assert_eq!(sessions[0].key, format!("telegram:group:{GROUP}:7"));
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn approval_buttons_resolve_through_the_broker() {
    let s = start(
        vec![
            Reply::Json(calls(&[(
                "c1",
                "terminal",
                r#"{"command":"git reset --hard"}"#,
            )])),
            Reply::Json(text("Reset done.")),
        ],
        |_| {},
    )
    .await;
    let mut ask =
        FakeTelegram::message(GROUP, ANN, "Ann", 30, &format!("@{BOT_USERNAME} reset it"));
    ask["message"]["entities"] = json!([{"type": "mention", "offset": 0, "length": 16}]);
    s.tg.push(ask);
    let sent = s.tg.wait("sendMessage", 1).await;
    let prompt = &sent[0].body;
    assert!(
        prompt["text"]
            .as_str()
            .unwrap()
            .contains("git reset --hard")
    );
    let buttons = prompt["reply_markup"]["inline_keyboard"]
        .as_array()
        .unwrap();
    assert_eq!(buttons.len(), 4);
    let once = buttons[0][0]["callback_data"].as_str().unwrap().to_string();
    assert!(once.starts_with("ap:") && once.ends_with(":once"));
    let prompt_msg = json!({
        "message_id": 501, "date": 1_764_000_000,
        "chat": {"id": GROUP, "type": "supergroup", "title": "Team"},
        "from": {"id": 999, "is_bot": true, "first_name": "Switchboard"},
        "text": prompt["text"],
    });
    // Bob may talk to the bot but did not ask and is no approver.
    s.tg.push(FakeTelegram::press(BOB, "Bob", &prompt_msg, &once));
    let answers = s.tg.wait("answerCallbackQuery", 1).await;
    assert!(
        answers[0].body["text"]
            .as_str()
            .unwrap()
            .starts_with("Only the person who asked"),
        "{:?}",
        answers[0].body
    );
    // A forged id is refused too, and still answered.
    s.tg.push(FakeTelegram::press(
        ANN,
        "Ann",
        &prompt_msg,
        "ap:00000000000000000000000000000000:once",
    ));
    let answers = s.tg.wait("answerCallbackQuery", 2).await;
    assert_eq!(answers[1].body["text"], "This approval does not exist.");
    s.tg.push(FakeTelegram::press(ANN, "Ann", &prompt_msg, &once));
    let answers = s.tg.wait("answerCallbackQuery", 3).await;
    assert!(
        answers[2].body["text"]
            .as_str()
            .unwrap()
            .contains("approved by Ann")
    );
    let edits = s.tg.wait("editMessageText", 1).await;
    assert_eq!(edits[0].body["message_id"], 501);
    assert!(
        edits[0].body["text"]
            .as_str()
            .unwrap()
            .contains("Allowed once by Ann")
    );
    assert!(
        edits[0].body.get("reply_markup").is_none(),
        "buttons removed"
    );
    let sent = s.tg.wait("sendMessage", 2).await;
    assert_eq!(sent[1].body["text"], "Reset done.");
    // Pressing again after the decision: refused as already decided.
    s.tg.push(FakeTelegram::press(ANN, "Ann", &prompt_msg, &once));
    let answers = s.tg.wait("answerCallbackQuery", 4).await;
    assert!(
        answers[3].body["text"]
            .as_str()
            .unwrap()
            .contains("already decided")
    );
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn polling_survives_5xx_and_honours_retry_after() {
    // The failures come first: a poll already waiting when they were set
    // would take the message before them.
    let tg = FakeTelegram::start().await;
    tg.fail_polls(vec![
        (502, json!({"ok": false, "error_code": 502, "description": "Bad Gateway"})),
        (
            429,
            json!({"ok": false, "error_code": 429,
                "description": "Too Many Requests: retry after 2", "parameters": {"retry_after": 2}}),
        ),
    ]);
    let s = start_on(tg, vec![Reply::Json(text("still here"))], |_| {}).await;
    s.tg.push(FakeTelegram::message(ANN, ANN, "Ann", 40, "are you there?"));
    let sent = s.tg.wait("sendMessage", 1).await;
    assert_eq!(sent[0].body["text"], "still here");
    let polls = s.tg.calls("getUpdates");
    // (teloxide itself pauses 10 s after a 5xx before returning the error.)
    // The third poll came at least retry_after (2 s) after the second.
    assert!(polls.len() >= 3);
    let gap = polls[2].at.duration_since(polls[1].at);
    assert!(gap >= Duration::from_secs(2), "waited {gap:?}");
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn webhook_mode_checks_the_secret_token() {
    let s = start(vec![Reply::Json(text("via webhook"))], |c| {
        c.telegram.mode = TelegramMode::Webhook;
        c.server.public_url = "https://bot.example.com/".into();
    })
    .await;
    let set = s.tg.wait("setWebhook", 1).await;
    assert_eq!(
        set[0].body["url"],
        "https://bot.example.com/telegram/webhook"
    );
    assert_eq!(set[0].body["secret_token"], "s3cret-token-0123456789");
    let mut update = FakeTelegram::message(ANN, ANN, "Ann", 50, "hi over webhook");
    update["update_id"] = json!(77);
    let http = switchboard::http::client::client();
    let url = format!("{}/telegram/webhook", s.daemon.base);
    let post = |secret: Option<&'static str>| {
        let mut req = http.post(&url).json(&update);
        if let Some(secret) = secret {
            req = req.header("X-Telegram-Bot-Api-Secret-Token", secret);
        }
        req.send()
    };
    assert_eq!(post(None).await.unwrap().status(), 401);
    assert_eq!(post(Some("wrong")).await.unwrap().status(), 401);
    assert_eq!(
        post(Some("s3cret-token-0123456789"))
            .await
            .unwrap()
            .status(),
        200
    );
    let sent = s.tg.wait("sendMessage", 1).await;
    assert_eq!(sent[0].body["text"], "via webhook");
    // Telegram redelivers an update it thinks failed: same update_id, no
    // second answer.
    assert_eq!(
        post(Some("s3cret-token-0123456789"))
            .await
            .unwrap()
            .status(),
        200
    );
    // Dropped as a duplicate before the 200: no turn for it can follow.
    assert_eq!(common::inbox_count(&s.daemon.store, "telegram").await, 1);
    assert_eq!(s.tg.calls("sendMessage").len(), 1);
    assert_eq!(s.llm.requests().len(), 1);
    assert!(
        s.tg.calls("getUpdates").is_empty(),
        "no polling in webhook mode"
    );
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn photos_are_downloaded_into_the_session_workspace() {
    let s = start(vec![Reply::Json(text("Nice photo."))], |_| {}).await;
    let mut msg = FakeTelegram::message(ANN, ANN, "Ann", 60, "");
    msg["message"].as_object_mut().unwrap().remove("text");
    msg["message"]["caption"] = json!("what is this?");
    msg["message"]["photo"] = json!([
        {"file_id": "small", "file_unique_id": "AgADsmall", "width": 90, "height": 90, "file_size": 1},
        {"file_id": "big", "file_unique_id": "AgADbig", "width": 1280, "height": 960, "file_size": 4},
    ]);
    s.tg.push(msg);
    s.tg.wait("sendMessage", 1).await;
    let get_file = s.tg.calls("getFile");
    assert_eq!(get_file[0].body["file_id"], "big", "the largest size");
    let user: Value = s.llm.requests()[0]["messages"].clone();
    let text = user.to_string();
    assert!(
        text.contains("what is this?") && text.contains("attachments/AgADbig.jpg"),
        "{text}"
    );
    let ws = s.dir.path().join("ws");
    let session_dir = common::session_workspace(&ws);
    let saved = std::fs::read(session_dir.join("attachments/AgADbig.jpg")).unwrap();
    assert_eq!(saved, [0xff, 0xd8, 0xff, 0xd9]);
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn clarify_questions_are_answered_with_buttons() {
    let s = start(
        vec![
            Reply::Json(calls(&[(
                "q1",
                "clarify",
                r#"{"question":"Which environment?","choices":["staging","production"]}"#,
            )])),
            Reply::Json(text("Deploying to staging.")),
        ],
        |_| {},
    )
    .await;
    s.tg.push(FakeTelegram::message(ANN, ANN, "Ann", 70, "deploy it"));
    let sent = s.tg.wait("sendMessage", 1).await;
    assert_eq!(sent[0].body["text"], "❓ Which environment?");
    let rows = sent[0].body["reply_markup"]["inline_keyboard"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(rows[0][0]["text"], "staging");
    let data = rows[0][0]["callback_data"].as_str().unwrap().to_string();
    let question = json!({
        "message_id": 501, "date": 1_764_000_000,
        "chat": {"id": ANN, "type": "private", "first_name": "Ann"},
        "from": {"id": 999, "is_bot": true, "first_name": "Switchboard"},
        "text": "❓ Which environment?",
    });
    s.tg.push(FakeTelegram::press(ANN, "Ann", &question, &data));
    let sent = s.tg.wait("sendMessage", 2).await;
    assert_eq!(sent[1].body["text"], "Deploying to staging.");
    let answered = s.tg.calls("answerCallbackQuery");
    assert_eq!(answered[0].body["text"], "staging");
    let tool_result = s.llm.requests()[1]["messages"].to_string();
    assert!(tool_result.contains("staging"), "{tool_result}");
    s.daemon.shutdown().await;
}

/// Set in the child process that runs the outage test alone (it reads this
/// process's memory).
const OUTAGE_PROBE: &str = "SWITCHBOARD_TELEGRAM_OUTAGE_PROBE";

/// sendMessage answers 502 and 429 (retry after 5 s) in turn for a minute
/// while two messages arrive: the replies wait with jittered backoff (a
/// handful of tries, none in a tight loop), memory stays flat, and once
/// Telegram is back each answer is sent once, in order, without asking the
/// model again.
#[tokio::test]
async fn a_minute_of_5xx_and_429_on_sends_delays_the_replies_without_a_tight_loop_or_a_copy() {
    if std::env::var_os(OUTAGE_PROBE).is_none() {
        return common::run_alone(
            "telegram::a_minute_of_5xx_and_429_on_sends_delays_the_replies_without_a_tight_loop_or_a_copy",
            OUTAGE_PROBE,
        );
    }
    let s = start(
        vec![
            Reply::Json(text("first answer")),
            Reply::Json(text("second answer")),
        ],
        |_| {},
    )
    .await;
    s.tg.fail_sends_for(
        common::OUTAGE,
        vec![
            Answer::json(
                502,
                json!({"ok": false, "error_code": 502, "description": "Bad Gateway"}),
            ),
            Answer::json(
                429,
                json!({"ok": false, "error_code": 429,
                    "description": "Too Many Requests: retry after 5", "parameters": {"retry_after": 5}}),
            ),
        ],
    );
    let began = std::time::Instant::now();
    s.tg.push(FakeTelegram::message(ANN, ANN, "Ann", 60, "first question"));
    s.tg.wait("sendMessage", 1).await;
    s.tg.push(FakeTelegram::message(
        ANN,
        ANN,
        "Ann",
        61,
        "second question",
    ));
    let sends = || {
        let calls = s.tg.calls("sendMessage");
        common::Sends {
            tried: calls.iter().map(|c| c.at).collect(),
            sent: texts(&calls.into_iter().filter(|c| c.id != 0).collect::<Vec<_>>()),
        }
    };
    common::after_outage(
        "telegram",
        began,
        common::rss_kib(),
        &["first answer", "second answer"],
        sends,
    )
    .await;
    assert_eq!(s.llm.requests().len(), 2, "each question asked once");
    let outbox = s.daemon.store.outbox(10).await.unwrap();
    assert!(outbox.iter().all(|o| o.status == "sent"), "{outbox:?}");
    assert!(outbox.iter().any(|o| o.attempts > 1), "{outbox:?}");
    s.daemon.shutdown().await;
}

/// NUL bytes in an update's text and sender are taken and answered on
/// both backends.
#[tokio::test]
async fn an_update_with_nul_bytes_is_answered_on_both_backends() {
    common::on_both_backends(|storage| async move {
        let s = start(vec![Reply::Json(text("Got it."))], |c| {
            if let Some(storage) = storage {
                c.storage = storage;
            }
        })
        .await;
        s.tg.push(FakeTelegram::message(
            ANN,
            ANN,
            "An\u{0}n",
            70,
            "what\u{0}is this",
        ));
        let sent = s.tg.wait("sendMessage", 1).await;
        assert_eq!(sent[0].body["text"], "Got it.");
        let prompt = s.llm.requests()[0]["messages"].to_string();
        assert!(prompt.contains("what\u{FFFD}is this"), "{prompt}");
        let store = &s.daemon.store;
        assert!(store.inbox_pending(10).await.unwrap().is_empty());
        s.daemon.shutdown().await;
    })
    .await;
}

/// A mention of the bot by `from` in the group, message `id`.
fn group_mention(from: i64, name: &str, id: i64) -> Value {
    let mut msg = FakeTelegram::message(GROUP, from, name, id, &format!("@{BOT_USERNAME} go"));
    msg["message"]["entities"] = json!([{"type": "mention", "offset": 0, "length": 16}]);
    msg
}

#[tokio::test]
async fn senders_and_chats_past_their_rate_are_told_once_and_nothing_is_stored() {
    let s = start(
        vec![
            Reply::Json(text("one")),
            Reply::Json(text("two")),
            Reply::Json(text("three")),
        ],
        |c| {
            c.sessions.user_messages_per_minute = 2;
            c.sessions.chat_messages_per_minute = 3;
            // One session per chat, so the answers come in order.
            c.sessions.group_sessions_per_user = false;
        },
    )
    .await;
    // Ann writes four times in a row: two pass, the third is refused with
    // a notice, the fourth silently.
    for id in 1..=4 {
        s.tg.push(group_mention(ANN, "Ann", 100 + id));
    }
    // Bob's first passes (the chat's third), his second is past the chat's
    // limit: the chat is told.
    s.tg.push(group_mention(BOB, "Bob", 110));
    s.tg.push(group_mention(BOB, "Bob", 111));
    let sent = s.tg.wait("sendMessage", 5).await;
    common::eventually("two notices and three answers", || async {
        let said = texts(&s.tg.calls("sendMessage"));
        let slow = said.iter().filter(|t| t.contains("slow down")).count();
        let answers = said
            .iter()
            .filter(|t| !t.contains("slow down") && !t.starts_with("Got it"))
            .count();
        slow >= 2 && answers >= 3
    })
    .await;
    let said = texts(&s.tg.calls("sendMessage"));
    let slow: Vec<&String> = said.iter().filter(|t| t.contains("slow down")).collect();
    assert_eq!(slow.len(), 2, "{said:?}");
    // (Besides a "queued" acknowledgement: the session was busy.)
    let answers: Vec<&String> = said
        .iter()
        .filter(|t| !t.contains("slow down") && !t.starts_with("Got it"))
        .collect();
    assert_eq!(answers, ["one", "two", "three"], "{} sent", sent.len());
    assert_eq!(s.llm.requests().len(), 3);
    assert_eq!(
        common::inbox_count(&s.daemon.store, "telegram").await,
        3,
        "refused messages are not stored"
    );
    s.daemon.shutdown().await;
}
