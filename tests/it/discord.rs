//! The Discord adapter end to end: the real serenity client, its REST calls
//! sent to a fake Discord through `discord.api_url` (serenity's proxy
//! setting) and its gateway connected to the fake's websocket (discovered
//! through `GET /api/v10/gateway`); the real daemon in-process; a scripted
//! model.

use crate::common;

use common::discord_harness::*;
use common::fake_discord::{FakeDiscord, message, user};
use common::fake_llm::{FakeLlm, Reply, text};
use common::in_process::{InProcess, daemon_config};
use common::outage::Answer;
use serde_json::{Value, json};
use switchboard::config::Env;

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
    let nonce = posted[0].body["nonce"].as_str().unwrap_or_default();
    assert!(
        nonce.starts_with("sb") && nonce.ends_with(".0") && nonce.len() <= 25,
        "an answer carries its outbox row as an enforced nonce: {nonce:?}"
    );
    assert_eq!(posted[0].body["enforce_nonce"], true);
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
    let sessions = s.daemon.store.list_sessions(10).await.unwrap();
    assert_eq!(sessions[0].key, format!("discord:group:{CHANNEL}:{ANN}"));
    let registered = s.dc.wait("PUT", "/applications/800/commands", 1).await;
    let names: Vec<&str> = registered[0]
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "new", "stop", "status", "usage", "approve", "deny", "model", "help"
        ]
    );
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
    // Messages are taken in order: by the pairing reply to the last one,
    // every earlier one was stored or refused.
    assert_eq!(common::inbox_count(&s.daemon.store, "discord").await, 1);
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
    // The model is never asked.
    let mut config = daemon_config(dir.path(), "http://127.0.0.1:9");
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
    common::eventually("the last chunk", || async {
        s.dc.posted().last().is_some_and(|c| {
            let text = content(c);
            let n = s.dc.posted().len();
            text.ends_with(&format!("({n}/{n})"))
        })
    })
    .await;
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
    let sessions = s.daemon.store.list_sessions(10).await.unwrap();
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
    let sessions = s.daemon.store.list_sessions(10).await.unwrap();
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
    // "hello" came back with the catch-up before "are you back?" and was
    // dropped then.
    assert_eq!(common::inbox_count(&daemon.store, "discord").await, 2);
    assert_eq!(llm.requests().len(), 1, "hello was not answered again");
    daemon.shutdown().await;
    drop(dir);
}

#[tokio::test]
async fn a_gateway_event_serenity_panics_on_does_not_silence_the_bot() {
    let s = start(vec![Reply::Json(text("still here"))], |_| {}).await;
    // serenity 0.12's ImageHash parser slices a 32-byte hash at byte 2: a
    // multibyte avatar hash panics inside its shard runner.
    let mut hostile = user("56", "mallory", false);
    hostile["avatar"] = json!(format!("€{}", "a".repeat(29)));
    assert_eq!(hostile["avatar"].as_str().unwrap().len(), 32);
    s.dc.dispatch("MESSAGE_CREATE", mention("1200", CHANNEL, hostile, "boom"))
        .await;
    // The client is started again and identifies anew.
    common::eventually("a second identify", || async {
        s.dc.received(2).len() >= 2
    })
    .await;
    s.dc.dispatch(
        "MESSAGE_CREATE",
        mention("1201", CHANNEL, ann(), "are you there"),
    )
    .await;
    let posted = s.dc.wait_posted(1).await;
    assert_eq!(content(&posted[0]), "still here");
    s.daemon.shutdown().await;
}

/// NUL bytes in a message's content and author are taken and answered on
/// both backends.
#[tokio::test]
async fn a_message_with_nul_bytes_is_answered_on_both_backends() {
    common::on_both_backends(|storage| async move {
        let s = start(vec![Reply::Json(text("Noted."))], |c| {
            if let Some(storage) = storage {
                c.storage = storage;
            }
        })
        .await;
        let mut author = ann();
        author["global_name"] = json!("An\u{0}n");
        s.dc.dispatch(
            "MESSAGE_CREATE",
            mention("1090", CHANNEL, author, "what\u{0}is this"),
        )
        .await;
        let posted = s.dc.wait_posted(1).await;
        assert_eq!(content(&posted[0]), "Noted.");
        let prompt = s.llm.requests()[0]["messages"].to_string();
        assert!(prompt.contains("what\u{FFFD}is this"), "{prompt}");
        let store = &s.daemon.store;
        assert!(store.inbox_pending(10).await.unwrap().is_empty());
        s.daemon.shutdown().await;
    })
    .await;
}

/// Discord never sends a gateway event again, so while storage is away
/// the adapter holds what arrives (in order) and offers it once the
/// database is back: both messages answered once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_wait_for_postgres_and_are_answered_in_order_once_it_is_back() {
    let Some(db) = common::PgTestDb::create().await else {
        return;
    };
    let (proxy, storage) = common::cut_proxy::CutProxy::before(&db).await;
    let s = start(
        vec![
            Reply::Json(text("First, after the outage.")),
            Reply::Json(text("Second, after the outage.")),
        ],
        |c| c.storage = storage,
    )
    .await;
    proxy.cut();
    for (id, words) in [("1201", "first question"), ("1202", "second question")] {
        s.dc.dispatch("MESSAGE_CREATE", mention(id, CHANNEL, ann(), words))
            .await;
    }
    // A quiet period: nothing is asked or answered while storage is away.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(s.dc.posted().is_empty(), "nothing answered while away");
    assert!(s.llm.requests().is_empty());

    proxy.restore();
    // The second may come while the first one's turn runs, and be told it
    // waits its turn.
    let answers = || -> Vec<String> {
        let posted = s.dc.posted().iter().map(content).collect::<Vec<_>>();
        posted
            .into_iter()
            .filter(|t| !t.starts_with("Got it"))
            .collect()
    };
    common::eventually("both answered", || async { answers().len() >= 2 }).await;
    assert_eq!(
        answers(),
        ["First, after the outage.", "Second, after the outage."]
    );
    let asked = s.llm.requests();
    assert_eq!(asked.len(), 2, "each message asked once");
    assert!(asked[0]["messages"].to_string().contains("first question"));
    assert!(asked[1]["messages"].to_string().contains("second question"));
    let store = &s.daemon.store;
    assert_eq!(common::inbox_count(store, "discord").await, 2);
    assert!(store.inbox_pending(10).await.unwrap().is_empty());
    s.daemon.shutdown().await;
    db.drop().await;
}

/// Set in the child process that runs the outage test alone (it reads this
/// process's memory).
const OUTAGE_PROBE: &str = "SWITCHBOARD_DISCORD_OUTAGE_PROBE";

/// Creating messages answers Cloudflare's HTML 502 and Discord's 429 (with
/// Retry-After and its JSON body) in turn for a minute while two mentions
/// arrive: the replies wait with jittered backoff (a handful of tries,
/// none in a tight loop), memory stays flat, and once Discord is back each
/// answer is posted once, in order, without asking the model again.
#[tokio::test]
async fn a_minute_of_5xx_and_429_on_sends_delays_the_replies_without_a_tight_loop_or_a_copy() {
    if std::env::var_os(OUTAGE_PROBE).is_none() {
        return common::run_alone(
            "discord::a_minute_of_5xx_and_429_on_sends_delays_the_replies_without_a_tight_loop_or_a_copy",
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
    s.dc.fail_sends_for(
        common::OUTAGE,
        vec![
            Answer::html(502, "<html><head><title>502 Bad Gateway</title></head></html>"),
            Answer::json(
                429,
                json!({"message": "You are being rate limited.", "retry_after": 5.0, "global": false}),
            )
            .header("retry-after", 5)
            .header("x-ratelimit-scope", "user"),
        ],
    );
    let began = std::time::Instant::now();
    s.dc.dispatch(
        "MESSAGE_CREATE",
        mention("1301", CHANNEL, ann(), "first question"),
    )
    .await;
    s.dc.wait_posted(1).await;
    s.dc.dispatch(
        "MESSAGE_CREATE",
        mention("1302", CHANNEL, ann(), "second question"),
    )
    .await;
    let sends = || {
        let calls = s.dc.posted();
        common::Sends {
            tried: calls.iter().map(|c| c.at).collect(),
            sent: calls.iter().filter(|c| !c.refused).map(content).collect(),
        }
    };
    common::after_outage(
        "discord",
        began,
        common::rss_kib(),
        &["first answer", "second answer"],
        sends,
    )
    .await;
    assert_eq!(s.llm.requests().len(), 2, "each question asked once");
    s.daemon.shutdown().await;
}

/// An answer sent again under the same key (what the outbox does for a
/// reply a crash left unconfirmed) is the message Discord created the first
/// time: its enforced nonce makes the repeat show nothing new.
#[tokio::test]
async fn a_reply_sent_again_under_its_key_is_shown_once() {
    let s = start(vec![], |_| {}).await;
    let port = s.daemon.gateway.platforms.port("discord").unwrap();
    let to = switchboard::platform::ChatRef {
        platform: "discord".into(),
        chat: CHANNEL.into(),
        thread: None,
    };
    let first = port
        .send_keyed(&to, None, "the answer", "sb42")
        .await
        .unwrap();
    let again = port
        .send_keyed(&to, None, "the answer", "sb42")
        .await
        .unwrap();
    assert_eq!(first, again, "the same message");
    let posted = s.dc.posted();
    assert_eq!(posted.len(), 2);
    assert!(
        !posted[0].repeat && posted[1].repeat,
        "the second created nothing"
    );
    let other = port.send_keyed(&to, None, "another", "sb43").await.unwrap();
    assert_ne!(other, first);
    s.daemon.shutdown().await;
}
