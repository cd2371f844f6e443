//! Model providers through the agent loop: retries and Retry-After,
//! streamed tool-call deltas, the output-cap parameter each server wants,
//! a stream timed by the gap between its chunks, and Anthropic Messages
//! spoken natively, whole or streamed, with prompt-cache breakpoints.

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
async fn what_a_provider_attaches_to_a_call_goes_back_with_it() {
    // Gemini's OpenAI-compatible endpoint signs its thinking on each call
    // and wants the signature back with the call on the next request.
    let signed = json!({"google": {"thought_signature": "sig-abc"}});
    let chunk = |delta: Value, finish: Option<&str>| json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    let whole = json!({
        "id": "x", "object": "chat.completion", "model": "gemini",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_w", "type": "function", "extra_content": signed,
                            "function": {"name": "todo", "arguments": "{}"}}]}}],
    });
    for (stream, first) in [
        (false, Reply::Json(whole)),
        (
            true,
            Reply::Sse(vec![chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_w", "type": "function", "extra_content": signed,
                                             "function": {"name": "todo", "arguments": "{}"}}]}),
                Some("tool_calls"),
            )]),
        ),
    ] {
        let llm = FakeLlm::start(vec![first, Reply::Json(text("done"))]).await;
        let mut h = harness_with(&llm, |c| c.llm.stream = stream, &[]).await;
        h.conversation
            .run_turn("plan", &CancellationToken::new())
            .await
            .unwrap();
        let again = &llm.requests()[1];
        let call = again["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|m| m["tool_calls"].get(0))
            .unwrap()
            .clone();
        assert_eq!(call["extra_content"], signed, "stream {stream}: {call}");
        // Stored with the call, so a conversation read back keeps it.
        let stored = h.stored().await;
        assert!(
            stored.iter().any(|m| m
                .tool_calls
                .as_deref()
                .is_some_and(|c| c.contains("sig-abc"))),
            "stream {stream}"
        );
    }
}

/// An Anthropic conversation (with `edit`) asked to read a.txt, which says
/// "A"; the model's script reads it and answers "It says A." over 80 input
/// tokens.
async fn anthropic_reads_a(
    llm: &FakeLlm,
    edit: impl FnOnce(&mut switchboard::config::Config) + 'static,
) -> switchboard::agent::TurnOutcome {
    let mut h = harness_with(
        llm,
        move |c| {
            c.llm.provider = LlmProvider::Anthropic;
            edit(c);
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
    out
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
    // The base URL without its /v1, as Anthropic's is written.
    let base = llm.url.trim_end_matches("/v1").to_string();
    anthropic_reads_a(&llm, move |c| c.llm.base_url = base).await;
    let first = &llm.requests()[0];
    assert!(
        first["system"][0]["text"]
            .as_str()
            .unwrap()
            .contains("switchboard")
    );
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

#[tokio::test]
async fn openai_models_that_want_max_completion_tokens_get_it() {
    let refusal = r#"{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.","type":"invalid_request_error","param":"max_tokens","code":"unsupported_parameter"}}"#;
    let llm = FakeLlm::start(vec![
        Reply::Status(400, vec![], refusal.into()),
        Reply::Json(text("first")),
        Reply::Json(text("second")),
    ])
    .await;
    let mut h = harness(&llm).await;
    for expected in ["first", "second"] {
        let out = h
            .conversation
            .run_turn("hi", &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(out.reply, expected);
    }
    let sent = llm.requests();
    assert!(
        sent[0].get("max_tokens").is_some(),
        "an unknown server gets max_tokens"
    );
    for later in &sent[1..] {
        assert!(later.get("max_tokens").is_none(), "{later}");
        assert_eq!(
            later["max_completion_tokens"], 4096,
            "and the answer is remembered"
        );
    }
}

#[tokio::test]
async fn anthropic_streams_text_and_tool_use_and_marks_the_cache() {
    let ev = |v: Value| v;
    let llm = FakeLlm::start(vec![
        Reply::Sse(vec![
            ev(json!({"type": "message_start", "message": {"id": "m1", "usage": {"input_tokens": 30, "output_tokens": 1}}})),
            ev(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}})),
            ev(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "SECRET plan"}})),
            ev(json!({"type": "content_block_stop", "index": 0})),
            ev(json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}})),
            ev(json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Let me "}})),
            ev(json!({"type": "ping"})),
            ev(json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "check."}})),
            ev(json!({"type": "content_block_stop", "index": 1})),
            ev(json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}})),
            ev(json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": "}})),
            ev(json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "\"a.txt\"}"}})),
            ev(json!({"type": "content_block_stop", "index": 2})),
            ev(json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}})),
            ev(json!({"type": "message_stop"})),
        ]),
        Reply::Sse(vec![
            ev(json!({"type": "message_start", "message": {"id": "m2", "usage": {"input_tokens": 50, "output_tokens": 1}}})),
            ev(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
            ev(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "It says A."}})),
            ev(json!({"type": "content_block_stop", "index": 0})),
            ev(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}})),
            ev(json!({"type": "message_stop"})),
        ]),
    ])
    .await;
    let out = anthropic_reads_a(&llm, |c| c.llm.stream = true).await;
    assert_eq!(out.usage.completion_tokens, 13);
    let first = &llm.requests()[0];
    assert_eq!(first["stream"], true);
    let ephemeral = json!({"type": "ephemeral"});
    assert_eq!(first["system"][0]["cache_control"], ephemeral);
    let tools = first["tools"].as_array().unwrap();
    assert_eq!(tools.last().unwrap()["cache_control"], ephemeral);
    assert!(
        tools[0].get("cache_control").is_none(),
        "one breakpoint on the tools"
    );
    let messages = first["messages"].as_array().unwrap();
    assert_eq!(
        messages.last().unwrap()["content"][0]["cache_control"],
        ephemeral
    );
    let second = llm.requests()[1].to_string();
    assert!(second.contains("toolu_1") && second.contains("Let me check."));
    assert!(
        !second.contains("SECRET"),
        "thinking is not sent back or kept"
    );
}

#[tokio::test]
async fn a_stream_may_outlast_the_timeout_while_it_keeps_moving_but_not_stall() {
    let chunk = |text: &str| json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]});
    let words: Vec<Value> = ["Slow ", "but ", "steady ", "wins."]
        .iter()
        .map(|w| chunk(w))
        .collect();
    let llm = FakeLlm::start(vec![
        Reply::SlowSse(words, Duration::from_millis(400)),
        Reply::SlowSse(vec![chunk("never")], Duration::from_millis(2500)),
    ])
    .await;
    let mut h = harness_with(
        &llm,
        |c| {
            c.llm.stream = true;
            c.llm.request_timeout_secs = 1;
            c.llm.max_retries = 0;
        },
        &[],
    )
    .await;
    let started = Instant::now();
    let out = h
        .conversation
        .run_turn("go", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.reply, "Slow but steady wins.");
    assert!(
        started.elapsed() > Duration::from_secs(1),
        "longer than the timeout in all"
    );
    let stalled = h
        .conversation
        .run_turn("again", &CancellationToken::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(stalled.contains("stalled"), "{stalled}");
}

#[tokio::test]
async fn a_stream_broken_for_good_keeps_the_longest_text_it_wrote() {
    let chunk = |text: &str| json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]});
    let llm = FakeLlm::start(vec![
        Reply::BrokenSse(vec![chunk("Partial "), chunk("text")]),
        Reply::BrokenSse(vec![chunk("Part")]),
    ])
    .await;
    let mut h = harness_with(
        &llm,
        |c| {
            c.llm.stream = true;
            c.llm.max_retries = 1;
        },
        &[],
    )
    .await;
    let out = h
        .conversation
        .run_turn("go", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        out.reply,
        "Partial text\n\n(The answer was cut off: the connection to the model broke.)"
    );
    assert_eq!(llm.requests().len(), 2, "retried once");
}
