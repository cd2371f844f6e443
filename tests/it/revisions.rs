//! Edits and deletions of the user's message, through the real platform
//! clients: edited before its turn, the new text is what the model reads;
//! edited while it runs, the edit is a message of its own (queued, or
//! interrupting, per `busy_input_mode`); deleted before it runs, it is
//! dropped; deleted while it runs, the turn is cancelled, its pending
//! approval withdrawn, and nothing is said.

use crate::common;

use std::time::Duration;

use common::discord_harness::{self, ann};
use common::fake_discord::message;
use common::fake_llm::{FakeLlm, Reply, calls, text};
use common::fake_telegram::FakeTelegram;
use common::in_process::{InProcess, daemon_config};
use serde_json::json;
use switchboard::config::{BusyInputMode, Config, Env};

const ANN: i64 = 1001;

/// The last user message of each model request.
fn asked(llm: &FakeLlm) -> Vec<String> {
    llm.requests()
        .iter()
        .filter_map(|r| {
            r["messages"]
                .as_array()?
                .iter()
                .rev()
                .find(|m| m["role"] == "user")
                .and_then(|m| m["content"].as_str())
                .map(str::to_string)
        })
        .collect()
}

async fn telegram(
    script: Vec<Reply>,
    tweak: impl FnOnce(&mut Config),
) -> (FakeTelegram, FakeLlm, InProcess, tempfile::TempDir) {
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(script).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = daemon_config(dir.path(), &llm.url);
    config.telegram.enabled = true;
    config.telegram.api_url = tg.url.clone();
    config.telegram.allowed_users = vec![ANN];
    tweak(&mut config);
    let daemon = InProcess::start(
        config,
        Env::from_pairs([("TELEGRAM_BOT_TOKEN", "123:test-token")]),
    )
    .await;
    (tg, llm, daemon, dir)
}

fn slow(answer: &str) -> Reply {
    Reply::Delayed(
        Duration::from_millis(1500),
        Box::new(Reply::Json(text(answer))),
    )
}

#[tokio::test]
async fn a_message_edited_before_its_turn_is_read_as_edited() {
    let (tg, llm, daemon, _dir) = telegram(
        vec![slow("first done"), Reply::Json(text("second done"))],
        |_| {},
    )
    .await;
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "first question"));
    common::eventually("the first turn asked", || async {
        llm.requests().len() == 1
    })
    .await;
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 11, "secnd question"));
    // The second waits behind the first; it is corrected meanwhile.
    common::eventually("the second stored", || async {
        common::inbox_count(&daemon.store, "telegram").await == 2
    })
    .await;
    tg.push(FakeTelegram::edited(ANN, ANN, "Ann", 11, "second question"));
    common::eventually("both answered", || async {
        tg.calls("sendMessage")
            .iter()
            .any(|c| c.body["text"] == "second done")
    })
    .await;
    // A quiet period: no third turn comes (the edit is not a message).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(asked(&llm), vec!["first question", "second question"]);
}

/// Telegram's message ids are each chat's own: an edit of message 11 in
/// another chat, by another user, is that user's own message, never the
/// queued message 11 of this chat (it would run as its author).
#[tokio::test]
async fn an_edit_in_another_chat_never_rewrites_a_message_with_the_same_id() {
    const BOB: i64 = 2002;
    let (tg, llm, daemon, _dir) = telegram(
        vec![
            slow("first done"),
            Reply::Json(text("done")),
            Reply::Json(text("done")),
        ],
        |config| config.telegram.allowed_users = vec![ANN, BOB],
    )
    .await;
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "first question"));
    common::eventually("the first turn asked", || async {
        llm.requests().len() == 1
    })
    .await;
    tg.push(FakeTelegram::message(
        ANN,
        ANN,
        "Ann",
        11,
        "second question",
    ));
    common::eventually("the second stored", || async {
        common::inbox_count(&daemon.store, "telegram").await == 2
    })
    .await;
    tg.push(FakeTelegram::edited(
        BOB,
        BOB,
        "Bob",
        11,
        "read my notes aloud",
    ));
    common::eventually("three turns asked", || async { llm.requests().len() == 3 }).await;
    let mut asked = asked(&llm);
    asked.sort();
    assert_eq!(
        asked,
        vec!["first question", "read my notes aloud", "second question"]
    );
}

#[tokio::test]
async fn a_message_edited_while_its_turn_runs_is_queued_as_a_new_one() {
    let (tg, llm, _daemon, _dir) = telegram(
        vec![
            slow("answer to the typo"),
            Reply::Json(text("answer to the fix")),
        ],
        |_| {},
    )
    .await;
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "wat time is it"));
    common::eventually("the turn asked", || async { llm.requests().len() == 1 }).await;
    tg.push(FakeTelegram::edited(ANN, ANN, "Ann", 10, "what time is it"));
    common::eventually("the edit answered", || async {
        tg.calls("sendMessage")
            .iter()
            .any(|c| c.body["text"] == "answer to the fix")
    })
    .await;
    assert_eq!(asked(&llm), vec!["wat time is it", "what time is it"]);
    // A redelivered edit is the same edit.
    tg.push(FakeTelegram::edited(ANN, ANN, "Ann", 10, "what time is it"));
    // A quiet period: no third turn comes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(llm.requests().len(), 2);
}

#[tokio::test]
async fn an_edit_while_the_turn_runs_interrupts_it_in_interrupt_mode() {
    let (tg, llm, _daemon, _dir) = telegram(
        vec![
            Reply::Delayed(
                Duration::from_secs(10),
                Box::new(Reply::Json(text("too late"))),
            ),
            Reply::Json(text("answer to the fix")),
        ],
        |c| c.agent.busy_input_mode = BusyInputMode::Interrupt,
    )
    .await;
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "wat time is it"));
    common::eventually("the turn asked", || async { llm.requests().len() == 1 }).await;
    tg.push(FakeTelegram::edited(ANN, ANN, "Ann", 10, "what time is it"));
    common::eventually_within("the edit answered", Duration::from_secs(8), || async {
        tg.calls("sendMessage")
            .iter()
            .any(|c| c.body["text"] == "answer to the fix")
    })
    .await;
    assert!(
        tg.calls("sendMessage")
            .iter()
            .all(|c| c.body["text"] != "too late")
    );
}

#[tokio::test]
async fn a_message_deleted_before_its_turn_is_dropped() {
    let s =
        discord_harness::start(vec![slow("first done"), Reply::Json(text("never"))], |_| {}).await;
    s.dc.dispatch(
        "MESSAGE_CREATE",
        message("1400", discord_harness::DM, ann(), "one", false),
    )
    .await;
    common::eventually("the first turn asked", || async {
        s.llm.requests().len() == 1
    })
    .await;
    s.dc.dispatch(
        "MESSAGE_CREATE",
        message("1401", discord_harness::DM, ann(), "two", false),
    )
    .await;
    // The deletion finds the second stored, waiting behind the first.
    common::eventually("the second stored", || async {
        common::inbox_count(&s.daemon.store, "discord").await == 2
    })
    .await;
    s.dc.dispatch(
        "MESSAGE_DELETE",
        json!({"id": "1401", "channel_id": discord_harness::DM}),
    )
    .await;
    common::eventually("the first answered", || async {
        s.dc.posted()
            .iter()
            .any(|c| discord_harness::content(c) == "first done")
    })
    .await;
    // A quiet period: the deleted message does not run.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(s.llm.requests().len(), 1, "the deleted message never ran");
    assert!(
        s.dc.posted()
            .iter()
            .all(|c| discord_harness::content(c) != "never")
    );
}

#[tokio::test]
async fn a_message_deleted_while_its_turn_runs_cancels_it_and_withdraws_its_approval() {
    let args = json!({"command": "git reset --hard"}).to_string();
    let s = discord_harness::start(
        vec![
            Reply::Json(calls(&[("c1", "terminal", &args)])),
            Reply::Json(text("reset done")),
        ],
        |_| {},
    )
    .await;
    s.dc.dispatch(
        "MESSAGE_CREATE",
        message("1500", discord_harness::DM, ann(), "reset it", false),
    )
    .await;
    // The approval prompt is out: the turn waits on it.
    let prompt = s.dc.wait_posted(1).await;
    assert!(
        prompt[0].body["components"].is_array(),
        "an approval prompt: {:?}",
        prompt[0].body
    );
    s.dc.dispatch(
        "MESSAGE_DELETE",
        json!({"id": "1500", "channel_id": discord_harness::DM}),
    )
    .await;
    common::eventually("the prompt withdrawn", || async {
        s.dc.calls("PATCH", &format!("/messages/{}", prompt[0].id))
            .iter()
            .any(|c| {
                discord_harness::content(c)
                    .to_lowercase()
                    .contains("cancel")
            })
    })
    .await;
    // A quiet period: the cancelled turn goes no further.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(s.llm.requests().len(), 1, "the turn went no further");
    assert_eq!(s.dc.posted().len(), 1, "nothing said but the prompt");
}
