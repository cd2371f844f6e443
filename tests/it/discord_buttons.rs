//! Discord buttons and interactions end to end: approvals (including
//! presses by someone not allowed, deferral past Discord's 3 seconds,
//! expiry), clarify questions and slash commands, with the real serenity
//! client against the fake Discord (see tests/discord.rs).

use crate::common;

use common::discord_harness::*;
use common::fake_discord::{BOT_ID, command, dm_press, message, press, user};
use common::fake_llm::{Reply, calls, text};
use serde_json::json;

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
    common::eventually("the slow lookup has begun", || async {
        !s.dc.calls("GET", "/channels/201").is_empty()
    })
    .await;
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
    let question_id = posted[0].id.clone();
    let mut question = message(
        &question_id,
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
        s.dc.wait(
            "PATCH",
            &format!("/channels/{DM}/messages/{question_id}"),
            1,
        )
        .await;
    assert!(content(&edits[0]).ends_with("→ staging"));
    assert_eq!(edits[0].body["components"], json!([]), "buttons removed");
    let posted = s.dc.wait_posted(2).await;
    assert_eq!(content(&posted[1]), "Deploying to staging.");
    let tool_result = s.llm.requests()[1]["messages"].to_string();
    assert!(tool_result.contains("staging"), "{tool_result}");
    s.daemon.shutdown().await;
}
