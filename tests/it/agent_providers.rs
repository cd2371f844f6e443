//! Model providers through the agent loop: retries and Retry-After,
//! streamed tool-call deltas, and Anthropic Messages spoken natively.

use crate::common;

use std::time::{Duration, Instant};

use common::agent_harness::{harness, harness_with, tool_messages};
use common::fake_llm::{FakeLlm, Reply, text};
use serde_json::{Value, json};
use switchboard::config::LlmProvider;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn rate_limits_are_retried_after_retry_after() {
    let llm = FakeLlm::start(vec![
        Reply::Status(
            429,
            vec![("retry-after", "1".into())],
            "{\"error\":\"slow down\"}".into(),
        ),
        Reply::Json(text("after the wait")),
    ])
    .await;
    let mut h = harness(&llm).await;
    let started = Instant::now();
    let out = h
        .conversation
        .run_turn("hi", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.reply, "after the wait");
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(llm.requests().len(), 2);
}

#[tokio::test]
async fn server_errors_retry_but_client_errors_do_not() {
    let llm = FakeLlm::start(vec![
        Reply::Status(503, vec![("retry-after", "0".into())], "busy".into()),
        Reply::Json(text("fine")),
    ])
    .await;
    let mut h = harness(&llm).await;
    assert_eq!(
        h.conversation
            .run_turn("hi", &CancellationToken::new())
            .await
            .unwrap()
            .reply,
        "fine"
    );

    let llm = FakeLlm::start(vec![
        Reply::Status(401, vec![], "{\"error\":\"bad key\"}".into()),
        Reply::Json(text("unused")),
    ])
    .await;
    let mut h = harness(&llm).await;
    let err = h
        .conversation
        .run_turn("hi", &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("401"), "{err}");
    assert_eq!(llm.requests().len(), 1, "no retry on 401");
}

#[tokio::test]
async fn streamed_tool_call_deltas_are_assembled() {
    let chunk = |delta: Value, finish: Option<&str>| json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    let llm = FakeLlm::start(vec![
        Reply::Sse(vec![
            chunk(json!({"role": "assistant", "content": null}), None),
            chunk(json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "write_file", "arguments": ""}}]}), None),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\": \"s.txt\", "}}]}), None),
            chunk(json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\""}}]}), None),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"content\": \"streamed\"}"}}]}), None),
            chunk(json!({"tool_calls": [{"index": 1, "function": {"arguments": ": \"other.txt\"}"}}]}), Some("tool_calls")),
            json!({"id": "c", "choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 12}}),
        ]),
        Reply::Sse(vec![
            chunk(json!({"content": "All "}), None),
            chunk(json!({"content": "done."}), Some("stop")),
        ]),
    ])
    .await;
    let mut h = harness_with(&llm, |c| c.llm.stream = true, &[]).await;
    std::fs::write(h.workspace.join("other.txt"), "other content").unwrap();
    let out = h
        .conversation
        .run_turn("stream it", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.reply, "All done.");
    assert_eq!(
        std::fs::read_to_string(h.workspace.join("s.txt")).unwrap(),
        "streamed"
    );
    assert_eq!(llm.requests()[0]["stream"], true);
    let results = tool_messages(&llm.requests()[1]);
    assert_eq!(
        results.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        ["call_a", "call_b"]
    );
    assert!(results[1].1.contains("other content"));
    assert_eq!(out.usage.prompt_tokens, 40);
}

#[tokio::test]
async fn anthropic_messages_are_spoken_natively() {
    let llm = FakeLlm::start(vec![
        Reply::Json(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.txt"}}
            ],
            "stop_reason": "tool_use", "usage": {"input_tokens": 30, "output_tokens": 9}
        })),
        Reply::Json(json!({
            "id": "msg_2", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "text", "text": "It says A."}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 50, "output_tokens": 4}
        })),
    ])
    .await;
    let base = llm.url.trim_end_matches("/v1").to_string();
    let mut h = harness_with(
        &llm,
        move |c| {
            c.llm.provider = LlmProvider::Anthropic;
            c.llm.base_url = base;
        },
        &[],
    )
    .await;
    std::fs::write(h.workspace.join("a.txt"), "A").unwrap();
    let out = h
        .conversation
        .run_turn("read a", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.reply, "It says A.");
    assert_eq!(out.usage.prompt_tokens, 80);
    let first = &llm.requests()[0];
    assert!(first["system"].as_str().unwrap().contains("switchboard"));
    assert!(first["tools"][0]["input_schema"].is_object());
    assert_eq!(llm.headers(0)["x-api-key"], "sk-fake");
    assert_eq!(llm.headers(0)["anthropic-version"], "2023-06-01");
    let second = &llm.requests()[1]["messages"];
    let last = second.as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"][0]["type"], "tool_result");
    assert_eq!(last["content"][0]["tool_use_id"], "toolu_1");
    assert_eq!(second[1]["content"][1]["type"], "tool_use");
}
