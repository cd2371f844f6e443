//! What the user gets back from a real model: reasoning never shown or
//! stored, an empty answer asked again once and never silence, a wrap-up
//! call when the step budget ends, identical calls of a batch run once,
//! and every tool's arguments coerced to its schema.

use crate::common;

use common::agent_harness::{Harness, harness, harness_with, tool_messages};
use common::fake_llm::{FakeLlm, Reply, calls, text};
use serde_json::{Value, json};
use switchboard::agent::StopReason;
use tokio_util::sync::CancellationToken;

async fn turn(h: &mut Harness, message: &str) -> switchboard::agent::TurnOutcome {
    h.conversation
        .run_turn(message, &CancellationToken::new())
        .await
        .unwrap()
}

/// Everything stored for the session, as one text.
async fn stored(h: &Harness) -> String {
    h.store
        .messages(&h.conversation.session().id)
        .await
        .unwrap()
        .iter()
        .map(|m| format!("{} {}\n", m.content, m.tool_calls.as_deref().unwrap_or("")))
        .collect()
}

fn stream_chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "c", "object": "chat.completion.chunk",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

#[tokio::test]
async fn reasoning_never_reaches_the_chat_or_storage() {
    let with_field = json!({
        "id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant",
            "reasoning_content": "SECRET-FIELD: the user wants a number",
            "content": "<think>SECRET-TAG: 2 + 2</think>\n\nIt is 4."
        }}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 5}
    });
    let llm = FakeLlm::start(vec![
        // vLLM / DeepSeek: a reasoning field and tags in the text.
        Reply::Json(with_field),
        // Qwen3 behind Ollama: the template opened the tag.
        Reply::Json(text("SECRET-OPEN: thinking first</think>Paris.")),
    ])
    .await;
    let mut h = harness(&llm).await;
    assert_eq!(turn(&mut h, "2+2?").await.reply, "It is 4.");
    assert_eq!(turn(&mut h, "capital of France?").await.reply, "Paris.");
    let all = stored(&h).await;
    assert!(!all.contains("SECRET"), "{all}");
    let second = llm.requests()[1].to_string();
    assert!(!second.contains("SECRET"), "nor sent back to the model");
}

#[tokio::test]
async fn streamed_reasoning_split_across_chunks_is_dropped() {
    let llm = FakeLlm::start(vec![Reply::Sse(vec![
        stream_chunk(
            json!({"role": "assistant", "reasoning_content": "SECRET-FIELD"}),
            None,
        ),
        stream_chunk(json!({"content": "<th"}), None),
        stream_chunk(json!({"content": "ink>SECRET-TAG "}), None),
        stream_chunk(json!({"content": "still thinking</thi"}), None),
        stream_chunk(json!({"content": "nk>The build "}), None),
        stream_chunk(json!({"content": "passed."}), Some("stop")),
    ])])
    .await;
    let mut h = harness_with(&llm, |c| c.llm.stream = true, &[]).await;
    assert_eq!(turn(&mut h, "status?").await.reply, "The build passed.");
    assert!(!stored(&h).await.contains("SECRET"));
}

#[tokio::test]
async fn an_empty_answer_is_asked_again_once() {
    let llm = FakeLlm::start(vec![
        Reply::Json(text("")),
        Reply::Json(text("Here it is.")),
    ])
    .await;
    let mut h = harness(&llm).await;
    let out = turn(&mut h, "answer me").await;
    assert_eq!(out.reply, "Here it is.");
    let retry = &llm.requests()[1]["messages"];
    let last = retry.as_array().unwrap().last().unwrap();
    assert!(
        last["content"].as_str().unwrap().contains("empty"),
        "{last}"
    );
    let all = stored(&h).await;
    assert!(!all.contains("was empty"), "the nudge is not stored: {all}");
}

#[tokio::test]
async fn an_answer_that_stays_empty_still_gets_an_honest_reply() {
    let llm = FakeLlm::start(vec![
        Reply::Json(text("")),
        Reply::Json(text("<think>only thoughts, no answer</think>")),
    ])
    .await;
    let mut h = harness(&llm).await;
    let out = turn(&mut h, "answer me").await;
    assert_eq!(out.stop, StopReason::Final);
    assert_eq!(out.reply, switchboard::agent::EMPTY_ANSWER);
    assert_eq!(llm.requests().len(), 2, "asked again once, not more");
}

#[tokio::test]
async fn an_empty_last_answer_falls_back_to_what_the_turn_said_before() {
    let mut looked = calls(&[("t1", "todo", "{}")]);
    looked["choices"][0]["message"]["content"] = json!("The list is empty, so nothing is pending.");
    let llm = FakeLlm::start(vec![
        Reply::Json(looked),
        Reply::Json(text("")),
        Reply::Json(text("")),
    ])
    .await;
    let mut h = harness(&llm).await;
    let out = turn(&mut h, "anything pending?").await;
    assert_eq!(out.stop, StopReason::Final);
    assert_eq!(out.reply, "The list is empty, so nothing is pending.");
    assert_eq!(llm.requests().len(), 3);
}

#[tokio::test]
async fn arguments_that_stay_invalid_json_are_refused_after_three_quiet_retries() {
    let broken = || Reply::Json(calls(&[("b1", "todo", "{\"todos\": ]}")]));
    let llm = FakeLlm::start(vec![
        broken(),
        broken(),
        broken(),
        broken(),
        Reply::Json(text("I could not write the list.")),
    ])
    .await;
    let mut h = harness(&llm).await;
    let out = turn(&mut h, "plan it").await;
    assert_eq!(out.reply, "I could not write the list.");
    let asked = llm.requests();
    assert_eq!(
        asked.len(),
        5,
        "three quiet retries, then the refusal goes back"
    );
    for quiet in &asked[1..4] {
        assert!(tool_messages(quiet).is_empty(), "a retry adds nothing");
    }
    let results = tool_messages(&asked[4]);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].1.contains("not valid JSON"), "{results:?}");
}

#[tokio::test]
async fn a_spent_step_budget_ends_with_a_wrap_up_without_tools() {
    let step = |i: usize| {
        Reply::Json(calls(&[(
            &format!("c{i}"),
            "search_files",
            &format!(r#"{{"pattern": "needle{i}"}}"#),
        )]))
    };
    let llm = FakeLlm::start(vec![
        step(0),
        step(1),
        Reply::Json(text(
            "I searched twice and found nothing; the config is next.",
        )),
    ])
    .await;
    let mut h = harness_with(&llm, |c| c.agent.max_iterations = 2, &[]).await;
    let out = turn(&mut h, "find the needle").await;
    assert_eq!(out.stop, StopReason::BudgetExhausted);
    assert!(
        out.reply.starts_with("I searched twice") && out.reply.contains("step budget"),
        "{}",
        out.reply
    );
    let wrap_up = &llm.requests()[2];
    assert!(wrap_up.get("tools").is_none());
    assert!(
        wrap_up["messages"]
            .to_string()
            .contains("cannot call tools")
    );
}

#[tokio::test]
async fn identical_calls_in_one_batch_run_once() {
    let append = r#"{"command": "echo ran >> count.txt"}"#;
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[
            ("a", "terminal", append),
            ("b", "terminal", append),
        ])),
        Reply::Json(text("done")),
    ])
    .await;
    let mut h = harness(&llm).await;
    turn(&mut h, "count").await;
    let count = std::fs::read_to_string(h.workspace.join("count.txt")).unwrap();
    assert_eq!(count, "ran\n", "the command ran once");
    let results = tool_messages(&llm.requests()[1]);
    assert_eq!(
        results.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        ["a", "b"],
        "every call has its result, in order"
    );
    assert!(results[1].1.contains("Same call as a"), "{results:?}");
}

#[tokio::test]
async fn agent_layer_tools_coerce_their_arguments_like_every_tool() {
    let first = r#"{"todos": [{"id": "1", "content": "build", "status": "pending"}]}"#;
    let merge =
        r#"{"merge": "true", "todos": [{"id": "2", "content": "test", "status": "pending"}]}"#;
    let search = r#"{"query": "build", "limit": "5"}"#;
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[("t1", "todo", first)])),
        Reply::Json(calls(&[("t2", "todo", merge)])),
        Reply::Json(calls(&[("s1", "session_search", search)])),
        Reply::Json(text("ok")),
    ])
    .await;
    let mut h = harness(&llm).await;
    turn(&mut h, "plan").await;
    let merged = tool_messages(&llm.requests()[2]);
    let list: Value = serde_json::from_str(&merged.last().unwrap().1).unwrap();
    assert_eq!(
        list["todos"].as_array().unwrap().len(),
        2,
        "\"true\" merged: {list}"
    );
    let searched = tool_messages(&llm.requests()[3]);
    assert!(
        !searched.last().unwrap().1.contains("error"),
        "\"5\" is a limit: {searched:?}"
    );
}

#[tokio::test]
async fn saved_notes_reach_the_model_in_the_turns_message_and_the_system_prompt_never_changes() {
    let llm = FakeLlm::start(vec![Reply::Json(text("hi")), Reply::Json(text("hi"))]).await;
    let mut h = harness(&llm).await;
    turn(&mut h, "hello").await;
    let system = |i: usize| llm.requests()[i]["messages"][0]["content"].to_string();
    let asked = |i: usize| {
        let request = &llm.requests()[i];
        let messages = request["messages"].as_array().unwrap().clone();
        let last_user = messages.iter().rev().find(|m| m["role"] == "user").unwrap();
        last_user["content"].as_str().unwrap().to_string()
    };
    assert!(
        !llm.requests()[0].to_string().contains("Notes you saved"),
        "no notes, no section"
    );
    h.store
        .add_note("cli:tester", "prefers answers in French")
        .await
        .unwrap();
    h.store
        .add_note("cli:tester", &"long note ".repeat(500))
        .await
        .unwrap();
    turn(&mut h, "hello again").await;
    assert_eq!(
        system(0),
        system(1),
        "the system prompt is byte-identical while the notes change"
    );
    let message = asked(1);
    assert!(
        message.starts_with("[Notes you saved about this user")
            && message.contains("prefers answers in French")
            && message.ends_with("[End of the notes; the user's message follows.]\n\nhello again"),
        "{message}"
    );
    assert!(message.len() < 5000, "bounded: {}", message.len());
    let stored = h.stored().await;
    assert!(
        stored
            .iter()
            .all(|m| !m.content.contains("Notes you saved")),
        "the notes are not stored with the message"
    );
}
