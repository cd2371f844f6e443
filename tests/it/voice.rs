//! Voice notes end to end (#22 item 4): a Telegram voice note, a Discord
//! voice message and a Slack audio clip are fetched through the real
//! clients from the fake platforms, heard by a fake OpenAI-compatible
//! transcription server, quoted back once and answered once; limits,
//! failures and a missing `[transcription]` are said in the chat; what was
//! heard survives a restart without being heard or quoted again.

use crate::common;

use std::time::Duration;

use common::fake_discord::message;
use common::fake_llm::{FakeLlm, Reply, text};
use common::fake_slack::FakeSlack;
use common::fake_telegram::FakeTelegram;
use common::fake_transcriber::{FakeTranscriber, invalid_file, server_error};
use common::in_process::{InProcess, daemon_config};
use serde_json::json;
use switchboard::config::{Config, Env};

const ANN: i64 = 1001;

/// What the model was asked in its newest user message, per request.
fn asked(llm: &FakeLlm) -> Vec<String> {
    llm.requests()
        .iter()
        .map(|r| {
            r["messages"]
                .as_array()
                .unwrap()
                .iter()
                .rev()
                .find(|m| m["role"] == "user")
                .map(|m| m["content"].as_str().unwrap_or_default().to_string())
                .unwrap_or_default()
        })
        .collect()
}

struct Telegram {
    tg: FakeTelegram,
    llm: FakeLlm,
    heard: FakeTranscriber,
    daemon: InProcess,
    dir: tempfile::TempDir,
}

fn telegram_config(
    dir: &std::path::Path,
    tg: &FakeTelegram,
    llm: &FakeLlm,
    heard: &FakeTranscriber,
) -> Config {
    let mut config = daemon_config(dir, &llm.url);
    config.telegram.enabled = true;
    config.telegram.api_url = tg.url.clone();
    config.telegram.allowed_users = vec![ANN];
    config.transcription.base_url = heard.url.clone();
    config.transcription.api_key_env = "STT_KEY".into();
    config
}

fn telegram_env() -> Env {
    Env::from_pairs([
        ("TELEGRAM_BOT_TOKEN", "123:test-token"),
        ("STT_KEY", "stt-secret"),
    ])
}

async fn telegram(script: Vec<Reply>, tweak: impl FnOnce(&mut Config)) -> Telegram {
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(script).await;
    let heard = FakeTranscriber::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = telegram_config(dir.path(), &tg, &llm, &heard);
    tweak(&mut config);
    let daemon = InProcess::start(config, telegram_env()).await;
    Telegram {
        tg,
        llm,
        heard,
        daemon,
        dir,
    }
}

fn sent_texts(tg: &FakeTelegram) -> Vec<String> {
    tg.calls("sendMessage")
        .iter()
        .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn a_telegram_voice_note_is_heard_quoted_and_answered_once() {
    let s = telegram(vec![Reply::Json(text("Deploying staging now."))], |_| {}).await;
    let said = b"please deploy the staging branch";
    s.tg.file("vn1", "voice/file_7.oga", said);
    s.tg.push(FakeTelegram::voice(ANN, 40, "vn1", 3, said.len()));
    let sent = s.tg.wait("sendMessage", 2).await;
    let heard = s.heard.requests();
    assert_eq!(heard.len(), 1, "heard once");
    assert_eq!(heard[0].audio, said);
    assert_eq!(heard[0].model, "whisper-1");
    assert_eq!(heard[0].response_format, "json");
    assert_eq!(heard[0].auth, "Bearer stt-secret");
    assert_eq!(heard[0].file_name, "AgADvn1.ogg");
    assert_eq!(heard[0].content_type, "audio/ogg");
    assert_eq!(s.tg.calls("getFile")[0].body["file_id"], "vn1");
    assert_eq!(s.tg.downloads(), ["voice/file_7.oga"]);
    // The quote first (a blockquote entity), then the answer.
    assert_eq!(sent[0].body["text"], "🎤 please deploy the staging branch");
    assert_eq!(sent[0].body["entities"][0]["type"], "blockquote");
    assert_eq!(sent[1].body["text"], "Deploying staging now.");
    assert_eq!(asked(&s.llm), ["please deploy the staging branch"]);
    // The audio is not kept in the workspace.
    let ws = s.dir.path().join("ws");
    let session = common::session_workspace(&ws);
    let left: Vec<_> = std::fs::read_dir(session.join("attachments"))
        .into_iter()
        .flatten()
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let staged: Vec<_> = std::fs::read_dir(ws.join(".incoming"))
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .collect();
    assert!(
        staged.is_empty(),
        "the clip was removed after it was heard: {staged:?}"
    );
    // A quiet period: no third message comes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sent_texts(&s.tg).len(), 2, "{:?}", sent_texts(&s.tg));
    s.daemon.shutdown().await;
}

/// Hearing a note waits on a service: the turn leaves its place among the
/// turns opening (two) first, and a third note is heard meanwhile.
#[tokio::test]
async fn notes_are_heard_side_by_side_beyond_the_turns_opening_at_once() {
    let users = [ANN, 1002, 1003];
    let replies = users.map(|_| Reply::Json(text("Noted.")));
    let s = telegram(replies.into(), |c| c.telegram.allowed_users = users.into()).await;
    s.heard.hold();
    for (n, user) in users.into_iter().enumerate() {
        let said = format!("note number {n}");
        let id = format!("vn{n}");
        s.tg.file(&id, &format!("voice/file_{n}.oga"), said.as_bytes());
        s.tg.push(FakeTelegram::voice(user, 40 + n as i64, &id, 3, said.len()));
    }
    s.heard.wait(3).await;
    s.heard.release();
    let sent = s.tg.wait("sendMessage", 6).await;
    let answers = sent.iter().filter(|c| c.body["text"] == "Noted.").count();
    assert_eq!(answers, 3, "{:?}", sent_texts(&s.tg));
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn without_transcription_the_sender_is_told_and_nothing_is_asked() {
    let s = telegram(vec![], |c| c.transcription.base_url = String::new()).await;
    s.tg.file("vn1", "voice/file_1.oga", b"hello");
    s.tg.push(FakeTelegram::voice(ANN, 41, "vn1", 2, 5));
    let sent = s.tg.wait("sendMessage", 1).await;
    let said = sent[0].body["text"].as_str().unwrap();
    assert!(
        said.contains("I couldn't listen to your voice note"),
        "{said}"
    );
    assert!(
        said.contains("no transcription service is set up"),
        "{said}"
    );
    // A quiet period: nothing is asked, downloaded or said after the notice.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        s.llm.requests().is_empty(),
        "a note with nothing heard is not answered"
    );
    assert!(s.tg.downloads().is_empty(), "nothing to download it for");
    assert_eq!(sent_texts(&s.tg).len(), 1);
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn notes_past_the_limits_are_refused_with_the_reason_before_downloading() {
    let s = telegram(vec![Reply::Json(text("Noted."))], |c| {
        c.transcription.max_seconds = 60;
        c.transcription.max_bytes = 1000;
    })
    .await;
    s.tg.file("long", "voice/long.oga", b"a long speech");
    s.tg.push(FakeTelegram::voice(ANN, 42, "long", 95, 13));
    let sent = s.tg.wait("sendMessage", 1).await;
    assert_eq!(
        sent[0].body["text"],
        "I couldn't listen to your voice note: it is 1:35 long and the limit is 1:00."
    );
    // Too large, with a caption: the caption is answered, with a note.
    let mut big = FakeTelegram::voice(ANN, 43, "big", 5, 2_500_000);
    big["message"]["caption"] = json!("see the voice note");
    s.tg.file("big", "voice/big.oga", b"too big to hear");
    s.tg.push(big);
    let sent = s.tg.wait("sendMessage", 3).await;
    assert_eq!(
        sent[1].body["text"],
        "I couldn't listen to your voice note: it is 2.4 MB and the limit is 0.0 MB."
    );
    assert_eq!(sent[2].body["text"], "Noted.");
    let asked = asked(&s.llm);
    assert_eq!(asked.len(), 1);
    assert!(
        asked[0].starts_with("see the voice note")
            && asked[0].contains("could not be transcribed: it is 2.4 MB"),
        "{}",
        asked[0]
    );
    assert!(s.tg.downloads().is_empty());
    assert!(s.heard.requests().is_empty());
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn a_failing_service_is_tried_again_and_a_refusal_is_said() {
    let s = telegram(vec![Reply::Json(text("On it."))], |_| {}).await;
    s.heard.fail(vec![(503, server_error())]);
    s.tg.file("vn1", "voice/1.oga", b"run the tests");
    s.tg.push(FakeTelegram::voice(ANN, 44, "vn1", 2, 13));
    let sent = s.tg.wait("sendMessage", 2).await;
    assert_eq!(s.heard.requests().len(), 2, "the 503 was tried again");
    assert_eq!(sent[0].body["text"], "🎤 run the tests");
    assert_eq!(sent[1].body["text"], "On it.");
    s.heard.fail(vec![(400, invalid_file())]);
    s.tg.file("vn2", "voice/2.oga", b"not audio");
    s.tg.push(FakeTelegram::voice(ANN, 45, "vn2", 2, 9));
    let sent = s.tg.wait("sendMessage", 3).await;
    let said = sent[2].body["text"].as_str().unwrap();
    assert!(
        said.starts_with("I couldn't listen to your voice note: the transcription service refused it (400 Bad Request: Invalid file format."),
        "{said}"
    );
    assert_eq!(s.heard.requests().len(), 3, "a refusal is not tried again");
    assert_eq!(s.llm.requests().len(), 1);
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn what_was_heard_is_kept_across_a_restart_and_not_heard_or_quoted_again() {
    // The first run's model never answers in time: the turn is cut by the
    // shutdown, after the note was heard and quoted.
    let slow = Reply::Delayed(Duration::from_secs(30), Box::new(Reply::Json(text("late"))));
    let s = telegram(vec![slow], |_| {}).await;
    s.tg.file("vn1", "voice/1.oga", b"summarise the incident");
    s.tg.push(FakeTelegram::voice(ANN, 46, "vn1", 2, 22));
    s.tg.wait("sendMessage", 1).await;
    common::eventually("the model asked", || async { !s.llm.requests().is_empty() }).await;
    s.daemon.shutdown().await;
    let llm = FakeLlm::start(vec![Reply::Json(text("Here is the summary."))]).await;
    let config = telegram_config(s.dir.path(), &s.tg, &llm, &s.heard);
    let daemon = InProcess::start(config, telegram_env()).await;
    let sent = s.tg.wait("sendMessage", 2).await;
    assert_eq!(sent[0].body["text"], "🎤 summarise the incident");
    assert_eq!(sent[1].body["text"], "Here is the summary.");
    assert_eq!(asked(&llm), ["summarise the incident"]);
    // A quiet period: the note is not heard, fetched or quoted again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.heard.requests().len(), 1, "heard once across the restart");
    assert_eq!(s.tg.downloads().len(), 1);
    assert_eq!(sent_texts(&s.tg).len(), 2, "{:?}", sent_texts(&s.tg));
    daemon.shutdown().await;
}

#[tokio::test]
async fn a_discord_voice_message_is_fetched_from_the_cdn_heard_and_answered() {
    let heard = FakeTranscriber::start().await;
    let url = heard.url.clone();
    let s = common::discord_harness::start(vec![Reply::Json(text("Sure."))], |c| {
        c.transcription.base_url = url;
        c.transcription.api_key_env = String::new();
    })
    .await;
    let said = b"what changed in the last release";
    s.dc.files.serve("250/7001/voice-message.ogg", said);
    let mut msg = message(
        "7100",
        common::discord_harness::DM,
        common::discord_harness::ann(),
        "",
        false,
    );
    msg["flags"] = json!(8192);
    msg["attachments"] = json!([{
        "id": "7001", "filename": "voice-message.ogg", "size": said.len(),
        "url": s.dc.attachment_url("250/7001/voice-message.ogg"),
        "proxy_url": s.dc.attachment_url("250/7001/voice-message.ogg"),
        "content_type": "audio/ogg", "duration_secs": 2.4, "waveform": "AAAA",
    }]);
    s.dc.dispatch("MESSAGE_CREATE", msg).await;
    let posted = s.dc.wait_posted(2).await;
    assert_eq!(
        common::discord_harness::content(&posted[0]),
        "> 🎤 what changed in the last release"
    );
    assert_eq!(common::discord_harness::content(&posted[1]), "Sure.");
    let requests = heard.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].audio, said);
    assert_eq!(requests[0].file_name, "7001.ogg");
    assert_eq!(requests[0].auth, "", "no key configured, none sent");
    assert_eq!(s.dc.files.fetched().len(), 1);
    assert_eq!(asked(&s.llm), ["what changed in the last release"]);
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn a_slack_audio_clip_is_fetched_with_the_token_heard_and_answered_once() {
    let slack = FakeSlack::start().await;
    let llm = FakeLlm::start(vec![Reply::Json(text("Restarted."))]).await;
    let heard = FakeTranscriber::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = daemon_config(dir.path(), &llm.url);
    config.slack.enabled = true;
    config.slack.open = true;
    config.slack.mode = switchboard::config::SlackMode::Events;
    config.slack.api_url = slack.url.clone();
    config.transcription.base_url = heard.url.clone();
    let secret = "8f742231b10e8888abcd99yyyzzz85a5";
    let env = Env::from_pairs([
        ("SLACK_BOT_TOKEN", "xoxb-test"),
        ("SLACK_SIGNING_SECRET", secret),
        ("OPENAI_API_KEY", "sk-test"),
    ]);
    let daemon = InProcess::start(config, env).await;
    common::ready(&daemon.gateway, "slack").await;
    let said = b"restart the worker pool";
    slack.files.serve("T1-F1/download/audio_message.webm", said);
    let event = json!({
        "type": "message", "subtype": "file_share", "channel": "D0001", "channel_type": "im",
        "user": "U1", "ts": "1764000000.000100", "text": "",
        "files": [
            {"id": "F1", "name": "audio_message.webm", "mimetype": "audio/webm", "filetype": "webm",
             "subtype": "slack_audio", "size": said.len(), "duration_ms": 2100,
             "url_private": slack.file_url("T1-F1/audio_message.webm"),
             "url_private_download": slack.file_url("T1-F1/download/audio_message.webm")},
            {"id": "F2", "name": "elsewhere.webm", "mimetype": "audio/webm", "filetype": "webm",
             "size": 10, "url_private_download": "https://files.example.net/F2/elsewhere.webm"}
        ]
    });
    let http = switchboard::http::client::client();
    let post = |retry: Option<&'static str>| {
        let body = serde_json::to_vec(&json!({
            "token": "legacy", "team_id": "T0001", "api_app_id": "A0001",
            "type": "event_callback", "event_id": "Ev01", "event_time": 1_764_000_000,
            "event": event.clone(),
        }))
        .unwrap();
        let ts = switchboard::store::now_ms() / 1000;
        let mut req = http
            .post(format!("{}/slack/events", daemon.base))
            .header("content-type", "application/json")
            .header("x-slack-request-timestamp", ts.to_string())
            .header(
                "x-slack-signature",
                switchboard::adapters::slack::verify::sign(secret, ts, &body),
            );
        if let Some(n) = retry {
            req = req
                .header("x-slack-retry-num", n)
                .header("x-slack-retry-reason", "http_timeout");
        }
        req.body(body).send()
    };
    assert_eq!(post(None).await.unwrap().status(), 200);
    let posts = slack.wait("chat.postMessage", 2).await;
    // Slack redelivers: the inbox drops it before anything is heard.
    assert_eq!(post(Some("1")).await.unwrap().status(), 200);
    let quote = posts[0].body.to_string();
    assert!(quote.contains("restart the worker pool"), "{quote}");
    assert!(
        quote.contains("not a Slack file link"),
        "the token never goes to another host: {quote}"
    );
    assert!(posts[1].body.to_string().contains("Restarted."));
    let fetched = slack.files.fetched();
    assert_eq!(
        fetched,
        [(
            "T1-F1/download/audio_message.webm".to_string(),
            "Bearer xoxb-test".to_string()
        )]
    );
    let asked = asked(&llm);
    assert_eq!(asked.len(), 1);
    assert!(
        asked[0].starts_with("[Voice note, transcribed:] restart the worker pool")
            && asked[0].contains("could not be transcribed"),
        "{}",
        asked[0]
    );
    // A quiet period: the redelivery is not heard or answered again.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(heard.requests().len(), 1);
    assert_eq!(heard.requests()[0].auth, "Bearer sk-test");
    assert_eq!(slack.calls("chat.postMessage").len(), 2, "answered once");
    daemon.shutdown().await;
}
