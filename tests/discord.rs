//! The Discord adapter end to end: the real serenity client, its REST calls
//! sent to a fake Discord through `discord.api_url` (serenity's proxy
//! setting) and its gateway connected to the fake's websocket (discovered
//! through `GET /api/v10/gateway`); the real daemon in-process; a scripted
//! model.

mod common;

use common::fake_discord::{self, BOT_ID, FakeDiscord, command, dm_press, message, press, user};
use common::fake_llm::{FakeLlm, Reply, calls, text};
use common::in_process::InProcess;
use serde_json::{Value, json};
use switchboard::config::{Config, Env};

const ANN: &str = "42";
const BOB: &str = "43";
const EVE: &str = "66";
const CHANNEL: &str = "200";
const DM: &str = "250";

struct Setup {
    dc: FakeDiscord,
    llm: FakeLlm,
    daemon: InProcess,
    _dir: tempfile::TempDir,
}

async fn start(script: Vec<Reply>, tweak: impl FnOnce(&mut Config)) -> Setup {
    let dc = FakeDiscord::start().await;
    let llm = FakeLlm::start(script).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.server.shutdown_grace_secs = 2;
    config.storage.url = format!("sqlite://{}/sb.db", dir.path().display());
    config.llm.base_url = llm.url.clone();
    config.llm.api_key_env = String::new();
    config.llm.max_retries = 0;
    config.agent.workspace = dir.path().join("ws");
    config.discord.enabled = true;
    config.discord.api_url = dc.url.clone();
    config.discord.allowed_users = vec![ANN.into()];
    config.discord.allowed_roles = vec!["77".into()];
    tweak(&mut config);
    let env = Env::from_pairs([("DISCORD_BOT_TOKEN", "test-token")]);
    let daemon = InProcess::start(config, env).await;
    dc.ready().await;
    // READY reaches the adapter just after the fake sent it.
    for _ in 0..200 {
        if daemon
            .gateway
            .health
            .snapshot()
            .get("discord")
            .is_some_and(|h| h.ready)
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    Setup {
        dc,
        llm,
        daemon,
        _dir: dir,
    }
}

fn ann() -> Value {
    user(ANN, "ann", false)
}

fn mention(id: &str, channel: &str, author: Value, words: &str) -> Value {
    message(id, channel, author, &format!("<@{BOT_ID}> {words}"), true)
}

fn content(call: &fake_discord::Call) -> String {
    call.body["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A setup whose model first asks to run `command`, then says `after`.
async fn asking_for(command: &str, after: &str) -> Setup {
    let args = json!({ "command": command }).to_string();
    start(
        vec![
            Reply::Json(calls(&[("c1", "terminal", &args)])),
            Reply::Json(text(after)),
        ],
        |_| {},
    )
    .await
}

/// Sends `msg` and waits for the approval prompt it leads to: the data of
/// its first button ("Allow once") and the prompt as a message object.
async fn prompt_for(s: &Setup, msg: Value) -> (String, Value) {
    let channel = msg["channel_id"].as_str().unwrap().to_string();
    let guild = msg.get("guild_id").is_some();
    s.dc.dispatch("MESSAGE_CREATE", msg).await;
    let posted = s.dc.wait_posted(1).await;
    let once = posted[0].body["components"][0]["components"][0]["custom_id"]
        .as_str()
        .unwrap()
        .to_string();
    let bot = user(BOT_ID, "switchboard", true);
    let mut prompt = message(&posted[0].id, &channel, bot, &content(&posted[0]), guild);
    prompt["components"] = posted[0].body["components"].clone();
    (once, prompt)
}

#[tokio::test]
async fn a_mention_gets_a_reply_that_references_it() {
    let s = start(vec![Reply::Json(text("**Done.** See `x_y`."))], |_| {}).await;
    let identify = &s.dc.received(2)[0]["d"];
    let intents = identify["intents"].as_u64().unwrap();
    for (bit, name) in [
        (9, "GUILD_MESSAGES"),
        (12, "DIRECT_MESSAGES"),
        (15, "MESSAGE_CONTENT"),
    ] {
        assert!(
            intents & (1 << bit) != 0,
            "{name} intent missing: {intents}"
        );
    }
    assert!(identify["token"].as_str().unwrap().contains("test-token"));
    s.dc.dispatch(
        "MESSAGE_CREATE",
        message("1000", CHANNEL, ann(), "just chatting", true),
    )
    .await;
    s.dc.dispatch(
        "MESSAGE_CREATE",
        mention("1001", CHANNEL, user("55", "ci-bot", true), "do things"),
    )
    .await;
    s.dc.dispatch(
        "MESSAGE_CREATE",
        mention("1002", CHANNEL, ann(), "hello there"),
    )
    .await;
    let posted = s.dc.wait_posted(1).await;
    assert_eq!(
        posted[0].path,
        format!("/api/v10/channels/{CHANNEL}/messages")
    );
    assert_eq!(content(&posted[0]), "**Done.** See `x_y`.");
    assert_eq!(posted[0].body["message_reference"]["message_id"], "1002");
    assert_eq!(posted[0].body["allowed_mentions"]["parse"], json!([]));
    assert_eq!(posted[0].auth, "Bot test-token");
    assert!(
        !s.dc
            .calls("POST", &format!("/channels/{CHANNEL}/typing"))
            .is_empty()
    );
    let requests = s.llm.requests();
    assert_eq!(requests.len(), 1, "only the mention reached an agent");
    let sent = requests[0]["messages"].to_string();
    assert!(
        sent.contains("hello there") && !sent.contains("<@900>"),
        "{sent}"
    );
    let sessions = s.daemon.gateway.store.list_sessions(10).await.unwrap();
    assert_eq!(sessions[0].key, format!("discord:group:{CHANNEL}:{ANN}"));
    let registered = s.dc.wait("PUT", "/applications/800/commands", 1).await;
    let names: Vec<&str> = registered[0]
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["new", "stop", "status", "approve", "deny", "help"]);
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn strangers_pair_in_dms_and_are_ignored_in_channels() {
    let s = start(vec![Reply::Json(text("hi"))], |c| {
        c.discord.allowed_channels = vec![CHANNEL.into()];
    })
    .await;
    s.dc.dispatch("MESSAGE_CREATE", mention("1099", "201", ann(), "not here"))
        .await;
    // A gateway resume replays events: the same message id runs once.
    let replayed = mention("1098", CHANNEL, ann(), "once please");
    s.dc.dispatch("MESSAGE_CREATE", replayed.clone()).await;
    s.dc.dispatch("MESSAGE_CREATE", replayed).await;
    s.dc.dispatch(
        "MESSAGE_CREATE",
        mention("1100", CHANNEL, user(EVE, "eve", false), "hi"),
    )
    .await;
    s.dc.dispatch(
        "MESSAGE_CREATE",
        message("1101", DM, user(EVE, "eve", false), "let me in", false),
    )
    .await;
    let posted = s.dc.wait_posted(2).await;
    let pairing = posted
        .iter()
        .find(|c| c.path == format!("/api/v10/channels/{DM}/messages"))
        .expect("a pairing reply in the DM");
    assert!(
        content(pairing).contains("switchboard pairing approve"),
        "{posted:?}"
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let requests = s.llm.requests();
    assert_eq!(requests.len(), 1, "one turn: the replayed message, once");
    assert!(requests[0]["messages"].to_string().contains("once please"));
    assert_eq!(s.dc.posted().len(), 2);
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn a_refused_token_shows_on_readyz() {
    let dc = FakeDiscord::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.server.shutdown_grace_secs = 2;
    config.storage.url = format!("sqlite://{}/sb.db", dir.path().display());
    config.llm.api_key_env = String::new();
    config.discord.enabled = true;
    config.discord.api_url = dc.url.clone();
    let env = Env::from_pairs([("DISCORD_BOT_TOKEN", "bad-token")]);
    let daemon = InProcess::start(config, env).await;
    let mut body = Value::Null;
    for _ in 0..200 {
        body = reqwest::get(format!("{}/readyz", daemon.base))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if body.to_string().contains("gateway:") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(body.to_string().contains("gateway:"), "{body}");
    assert!(
        !dc.received(2).is_empty(),
        "it identified before the refusal"
    );
    daemon.shutdown().await;
}

#[tokio::test]
async fn long_replies_are_chunked_with_fences_kept() {
    let paragraph = "A sentence that goes on. ".repeat(30);
    let code: String = (0..60).map(|i| format!("let x{i} = {i};\n")).collect();
    let long = format!(
        "{p}\n\n{p}\n\n{p}\n\n```rust\n{code}```\n\n{p}\n\n{p}\n\n{p}",
        p = paragraph.trim_end()
    );
    let s = start(vec![Reply::Json(text(&long))], |_| {}).await;
    s.dc.dispatch(
        "MESSAGE_CREATE",
        message("1200", DM, ann(), "write a lot", false),
    )
    .await;
    s.dc.wait_posted(3).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let posted: Vec<String> = s.dc.posted().iter().map(content).collect();
    let n = posted.len();
    assert!(n >= 3, "{posted:?}");
    for (i, part) in posted.iter().enumerate() {
        assert!(part.chars().count() <= 2000, "chunk {i} too long");
        assert_eq!(
            part.matches("```").count() % 2,
            0,
            "unbalanced fence: {part}"
        );
        assert!(part.ends_with(&format!("({}/{n})", i + 1)), "{part}");
    }
    let joined = posted.concat();
    assert!(joined.contains("let x59 = 59;"));
    let first = &s.dc.posted()[0];
    assert_eq!(first.body["message_reference"]["message_id"], "1200");
    assert!(s.dc.posted()[1].body.get("message_reference").is_none());
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn approval_buttons_resolve_through_the_broker() {
    let s = asking_for("git reset --hard", "Reset done.").await;
    let (once, prompt_msg) = prompt_for(&s, mention("1300", CHANNEL, ann(), "reset it")).await;
    let posted = s.dc.posted();
    assert!(content(&posted[0]).contains("git reset --hard"));
    let buttons = posted[0].body["components"][0]["components"]
        .as_array()
        .unwrap();
    assert_eq!(buttons.len(), 4);
    assert_eq!(buttons[0]["label"], "Allow once");
    assert!(once.starts_with("ap:") && once.ends_with(":once"));
    let prompt_id = posted[0].id.as_str();
    // Eve did not ask and is no approver: refused, only she sees it.
    s.dc.dispatch(
        "INTERACTION_CREATE",
        press("7001", user(EVE, "eve", false), &[], &prompt_msg, &once),
    )
    .await;
    let answers =
        s.dc.wait("POST", "/interactions/7001/tok-7001/callback", 1)
            .await;
    assert_eq!(answers[0].body["type"], 4);
    assert_eq!(answers[0].body["data"]["flags"], 64);
    assert!(
        answers[0].body["data"]["content"]
            .as_str()
            .unwrap()
            .starts_with("Only the person who asked"),
        "{:?}",
        answers[0].body
    );
    // A forged id is refused as well.
    s.dc.dispatch(
        "INTERACTION_CREATE",
        press(
            "7002",
            ann(),
            &[],
            &prompt_msg,
            "ap:00000000000000000000000000000000:once",
        ),
    )
    .await;
    let answers =
        s.dc.wait("POST", "/interactions/7002/tok-7002/callback", 1)
            .await;
    assert_eq!(
        answers[0].body["data"]["content"],
        "This approval does not exist."
    );
    s.dc.dispatch(
        "INTERACTION_CREATE",
        press("7003", ann(), &[], &prompt_msg, &once),
    )
    .await;
    let answers =
        s.dc.wait("POST", "/interactions/7003/tok-7003/callback", 1)
            .await;
    assert_eq!(answers[0].body["type"], 6, "acknowledged without a message");
    let edits =
        s.dc.wait(
            "PATCH",
            &format!("/channels/{CHANNEL}/messages/{prompt_id}"),
            1,
        )
        .await;
    assert!(
        content(&edits[0]).contains("Allowed once by ann"),
        "{:?}",
        edits[0].body
    );
    assert_eq!(edits[0].body["components"], json!([]), "buttons removed");
    let posted = s.dc.wait_posted(2).await;
    assert_eq!(content(&posted[1]), "Reset done.");
    // Pressing after the decision is refused as already decided.
    s.dc.dispatch(
        "INTERACTION_CREATE",
        press("7004", ann(), &[], &prompt_msg, &once),
    )
    .await;
    let answers =
        s.dc.wait("POST", "/interactions/7004/tok-7004/callback", 1)
            .await;
    assert!(
        answers[0].body["data"]["content"]
            .as_str()
            .unwrap()
            .contains("already decided")
    );
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn a_press_that_takes_long_is_deferred_within_discords_three_seconds() {
    let s = asking_for("git clean -fdx", "Cleaned.").await;
    let (once, prompt) = prompt_for(&s, mention("1350", CHANNEL, ann(), "clean it")).await;
    s.dc.slow_edits(std::time::Duration::from_millis(4000));
    let pressed = std::time::Instant::now();
    s.dc.dispatch(
        "INTERACTION_CREATE",
        press("7301", ann(), &[], &prompt, &once),
    )
    .await;
    let answers =
        s.dc.wait("POST", "/interactions/7301/tok-7301/callback", 1)
            .await;
    let waited = pressed.elapsed();
    assert_eq!(answers[0].body["type"], 6);
    assert!(
        waited < std::time::Duration::from_millis(3000),
        "deferred after {waited:?}"
    );
    let posted = s.dc.wait_posted(2).await;
    assert_eq!(content(&posted[1]), "Cleaned.");
    assert_eq!(
        s.dc.calls("POST", "/interactions/7301/").len(),
        1,
        "answered exactly once"
    );
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn presses_do_not_wait_behind_message_handling() {
    let s = asking_for("git clean -fdx", "Cleaned.").await;
    let (once, prompt) = prompt_for(&s, message("1360", DM, ann(), "clean it", false)).await;
    // A message in a channel not seen before holds the ordered message
    // handling for 4 s (its channel lookup is slow)…
    s.dc.slow_lookups(std::time::Duration::from_secs(4));
    s.dc.dispatch("MESSAGE_CREATE", mention("1361", "201", ann(), "and this"))
        .await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // …and a press meanwhile is answered at once all the same.
    let pressed = std::time::Instant::now();
    s.dc.dispatch(
        "INTERACTION_CREATE",
        dm_press("7401", ann(), &prompt, &once),
    )
    .await;
    let answers =
        s.dc.wait("POST", "/interactions/7401/tok-7401/callback", 1)
            .await;
    assert_eq!(answers[0].body["type"], 6);
    let waited = pressed.elapsed();
    assert!(
        waited < std::time::Duration::from_millis(1500),
        "answered after {waited:?}"
    );
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn an_unanswered_prompt_is_edited_when_it_expires() {
    let s = start(
        vec![
            Reply::Json(calls(&[(
                "c1",
                "terminal",
                r#"{"command":"git push --force"}"#,
            )])),
            Reply::Json(text("Not pushed.")),
        ],
        |c| c.approvals.timeout_secs = 1,
    )
    .await;
    s.dc.dispatch("MESSAGE_CREATE", mention("1380", CHANNEL, ann(), "push it"))
        .await;
    let posted = s.dc.wait_posted(1).await;
    let edits =
        s.dc.wait(
            "PATCH",
            &format!("/channels/{CHANNEL}/messages/{}", posted[0].id),
            1,
        )
        .await;
    assert!(
        content(&edits[0]).starts_with("⌛ Expired"),
        "{:?}",
        edits[0].body
    );
    assert_eq!(edits[0].body["components"], json!([]));
    let posted = s.dc.wait_posted(2).await;
    assert_eq!(content(&posted[1]), "Not pushed.");
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn slash_commands_answer_their_interaction() {
    let s = start(vec![Reply::Json(text("noted"))], |_| {}).await;
    s.dc.dispatch(
        "MESSAGE_CREATE",
        mention("1400", CHANNEL, ann(), "remember this"),
    )
    .await;
    s.dc.wait_posted(1).await;
    s.dc.dispatch(
        "INTERACTION_CREATE",
        command("7101", ann(), CHANNEL, "status", json!([])),
    )
    .await;
    let answer =
        s.dc.wait("POST", "/interactions/7101/tok-7101/callback", 1)
            .await;
    assert_eq!(answer[0].body["type"], 4);
    let status = answer[0].body["data"]["content"].as_str().unwrap();
    assert!(
        status.starts_with(&format!(
            "Session discord:group:{CHANNEL}:{ANN}: 2 messages stored"
        )),
        "{status}"
    );
    s.dc.dispatch(
        "INTERACTION_CREATE",
        command("7102", ann(), CHANNEL, "new", json!([])),
    )
    .await;
    let answer =
        s.dc.wait("POST", "/interactions/7102/tok-7102/callback", 1)
            .await;
    assert_eq!(
        answer[0].body["data"]["content"],
        "Started a new conversation."
    );
    s.dc.dispatch(
        "INTERACTION_CREATE",
        command(
            "7103",
            ann(),
            CHANNEL,
            "deny",
            json!([{"name": "reason", "type": 3, "value": "no"}]),
        ),
    )
    .await;
    let answer =
        s.dc.wait("POST", "/interactions/7103/tok-7103/callback", 1)
            .await;
    assert_eq!(
        answer[0].body["data"]["content"],
        "Nothing is waiting for approval here."
    );
    s.dc.dispatch(
        "INTERACTION_CREATE",
        command(
            "7104",
            user(EVE, "eve", false),
            CHANNEL,
            "status",
            json!([]),
        ),
    )
    .await;
    let answer =
        s.dc.wait("POST", "/interactions/7104/tok-7104/callback", 1)
            .await;
    assert_eq!(answer[0].body["data"]["flags"], 64);
    assert_eq!(
        answer[0].body["data"]["content"],
        "You are not allowed to use this bot here."
    );
    assert_eq!(
        s.dc.posted().len(),
        1,
        "command answers went to the interactions"
    );
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn threads_are_session_threads_and_roles_allow() {
    let s = start(
        vec![
            Reply::Json(text("In the thread.")),
            Reply::Json(text("Still here.")),
        ],
        |_| {},
    )
    .await;
    s.dc.thread("555", CHANNEL);
    let mut bob = mention("1500", "555", user(BOB, "bob", false), "summarise");
    bob["member"]["roles"] = json!(["77"]);
    s.dc.dispatch("MESSAGE_CREATE", bob).await;
    let posted = s.dc.wait_posted(1).await;
    assert_eq!(posted[0].path, "/api/v10/channels/555/messages");
    let sessions = s.daemon.gateway.store.list_sessions(10).await.unwrap();
    assert_eq!(sessions[0].key, format!("discord:group:{CHANNEL}:555"));
    // In a thread the bot talks in, no mention is needed.
    let mut follow = message(
        "1501",
        "555",
        user(BOB, "bob", false),
        "and the rest?",
        true,
    );
    follow["member"]["roles"] = json!(["77"]);
    s.dc.dispatch("MESSAGE_CREATE", follow).await;
    let posted = s.dc.wait_posted(2).await;
    assert_eq!(content(&posted[1]), "Still here.");
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn auto_threads_start_on_the_opening_message() {
    let s = start(
        vec![
            Reply::Json(text("Let's talk here.")),
            Reply::Json(text("Back in the old thread.")),
        ],
        |c| {
            c.discord.auto_thread = true;
        },
    )
    .await;
    s.dc.dispatch(
        "MESSAGE_CREATE",
        mention("1600", CHANNEL, ann(), "plan the release"),
    )
    .await;
    let posted = s.dc.wait_posted(1).await;
    let threads = s.dc.calls(
        "POST",
        &format!("/channels/{CHANNEL}/messages/1600/threads"),
    );
    assert_eq!(threads.len(), 1);
    assert_eq!(threads[0].body["name"], "plan the release");
    assert_eq!(posted[0].path, "/api/v10/channels/1600/messages");
    assert!(posted[0].body.get("message_reference").is_none());
    let sessions = s.daemon.gateway.store.list_sessions(10).await.unwrap();
    assert_eq!(sessions[0].key, format!("discord:group:{CHANNEL}:1600"));
    // A message whose thread exists already (a replay after a restart):
    // Discord refuses a second thread, and the answer goes to the first.
    s.dc.thread("1610", CHANNEL);
    s.dc.dispatch("MESSAGE_CREATE", mention("1610", CHANNEL, ann(), "again"))
        .await;
    let posted = s.dc.wait_posted(2).await;
    assert_eq!(posted[1].path, "/api/v10/channels/1610/messages");
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn a_burst_of_messages_keeps_its_order() {
    let script = (0..6)
        .map(|i| Reply::Json(text(&format!("ok {i}"))))
        .collect();
    let s = start(script, |_| {}).await;
    for i in 0..6 {
        s.dc.dispatch(
            "MESSAGE_CREATE",
            message(
                &format!("{}", 1700 + i),
                DM,
                ann(),
                &format!("step {i}"),
                false,
            ),
        )
        .await;
    }
    for _ in 0..400 {
        let all = s.llm.requests().last().map(|r| r["messages"].to_string());
        if all.is_some_and(|a| a.contains("step 5")) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let last = s.llm.requests().last().unwrap()["messages"].to_string();
    let positions: Vec<usize> = (0..6)
        .map(|i| {
            last.find(&format!("step {i}"))
                .expect("every step reached the model")
        })
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{last}");
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
    s.dc.dispatch(
        "MESSAGE_CREATE",
        message("1800", DM, ann(), "deploy it", false),
    )
    .await;
    let posted = s.dc.wait_posted(1).await;
    assert_eq!(content(&posted[0]), "❓ Which environment?");
    let buttons = posted[0].body["components"][0]["components"]
        .as_array()
        .unwrap();
    assert_eq!(buttons[0]["label"], "staging");
    let data = buttons[0]["custom_id"].as_str().unwrap().to_string();
    let mut question = message(
        "5001",
        DM,
        user(BOT_ID, "switchboard", true),
        "❓ Which environment?",
        false,
    );
    question["components"] = posted[0].body["components"].clone();
    s.dc.dispatch(
        "INTERACTION_CREATE",
        dm_press("7201", ann(), &question, &data),
    )
    .await;
    let answers =
        s.dc.wait("POST", "/interactions/7201/tok-7201/callback", 1)
            .await;
    assert_eq!(answers[0].body["type"], 6);
    let edits =
        s.dc.wait("PATCH", &format!("/channels/{DM}/messages/5001"), 1)
            .await;
    assert!(content(&edits[0]).ends_with("→ staging"));
    let posted = s.dc.wait_posted(2).await;
    assert_eq!(content(&posted[1]), "Deploying to staging.");
    let tool_result = s.llm.requests()[1]["messages"].to_string();
    assert!(tool_result.contains("staging"), "{tool_result}");
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn messages_missed_between_gateway_sessions_are_caught_up() {
    let s = start(
        vec![
            Reply::Json(text("first")),
            Reply::Json(text("caught up")),
            Reply::Json(text("live again")),
        ],
        |_| {},
    )
    .await;
    s.dc.dispatch("MESSAGE_CREATE", message("1900", DM, ann(), "hello", false))
        .await;
    s.dc.wait_posted(1).await;
    s.dc.invalidate_session().await;
    // Written while the bot had no session: no gateway event for it.
    s.dc.write(message("1901", DM, ann(), "did you miss me", false));
    s.dc.ready().await;
    s.dc.dispatch(
        "MESSAGE_CREATE",
        message("1902", DM, ann(), "and now", false),
    )
    .await;
    // "live again" is the third turn's answer; a "queued" note for 1902
    // may come between, when it arrives while 1901's turn runs.
    for _ in 0..400 {
        if s.dc.posted().iter().any(|c| content(c) == "live again") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let reads = s.dc.calls("GET", &format!("/channels/{DM}/messages"));
    assert!(
        !reads.is_empty(),
        "the channel was read after the new session"
    );
    let answer = |text: &str| {
        s.dc.posted()
            .into_iter()
            .find(|c| content(c) == text)
            .unwrap_or_else(|| panic!("no {text:?} in {:?}", s.dc.posted()))
    };
    assert_eq!(
        answer("caught up").body["message_reference"]["message_id"],
        "1901"
    );
    assert_eq!(
        answer("live again").body["message_reference"]["message_id"],
        "1902"
    );
    let last = s.llm.requests().last().unwrap()["messages"].to_string();
    let (missed, live) = (last.find("did you miss me"), last.find("and now"));
    assert!(missed.is_some() && missed < live, "{last}");
    assert_eq!(s.llm.requests().len(), 3, "hello was not answered twice");
    s.daemon.shutdown().await;
}

#[tokio::test]
async fn messages_written_while_the_daemon_was_down_are_answered_after_a_restart() {
    let s = start(vec![Reply::Json(text("first"))], |_| {}).await;
    s.dc.dispatch("MESSAGE_CREATE", message("1950", DM, ann(), "hello", false))
        .await;
    s.dc.wait_posted(1).await;
    let Setup {
        dc,
        llm: _first_llm,
        daemon,
        _dir: dir,
    } = s;
    let mut config = daemon.gateway.config.as_ref().clone();
    daemon.shutdown().await;
    dc.write(message("1951", DM, ann(), "are you back?", false));
    let llm = FakeLlm::start(vec![Reply::Json(text("back"))]).await;
    config.llm.base_url = llm.url.clone();
    let env = Env::from_pairs([("DISCORD_BOT_TOKEN", "test-token")]);
    let daemon = InProcess::start(config, env).await;
    let posted = dc.wait_posted(2).await;
    assert_eq!(posted[1].body["message_reference"]["message_id"], "1951");
    assert_eq!(content(&posted[1]), "back");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(llm.requests().len(), 1, "hello was not answered again");
    daemon.shutdown().await;
    drop(dir);
}
