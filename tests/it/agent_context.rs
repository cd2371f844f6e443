//! The conversation inside the model's context window: every provider's
//! "too long" answer recovered by compressing once, the compressed history
//! saved and read back, a split into a linked session when nothing else
//! fits, an honest answer when even that cannot help, a per-turn budget for
//! tool output, and a long conversation against a model that enforces its
//! window.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::agent_harness::{Harness, harness_with, tool_messages};
use common::fake_llm::{FakeLlm, Reply, calls, text};
use serde_json::{Value, json};
use switchboard::agent::history::SUMMARY_PREFIX;
use switchboard::agent::{SPLIT_NOTICE, StopReason, TOO_LONG};
use switchboard::config::{Config, LlmProvider};
use switchboard::store::NewMessage;
use tokio_util::sync::CancellationToken;

/// How each provider says a request is too long: (who, status, body).
const OVERFLOWS: &[(&str, u16, &str)] = &[
    (
        "openai",
        400,
        r#"{"error":{"message":"This model's maximum context length is 16385 tokens. However, your messages resulted in 17012 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
    ),
    (
        "vllm",
        400,
        r#"{"object":"error","message":"This model's maximum context length is 16384 tokens. However, you requested 17012 tokens (16012 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
    ),
    (
        "llama.cpp",
        400,
        r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":17012,"n_ctx":16384}}"#,
    ),
    (
        "llama.cpp (older, as a 500)",
        500,
        r#"{"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}"#,
    ),
    (
        "ollama",
        400,
        r#"{"error":{"message":"the input length exceeds the context length","type":"api_error","param":null,"code":null}}"#,
    ),
];

const ANTHROPIC_OVERFLOW: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210412 tokens > 200000 maximum"}}"#;

fn overflow(status: u16, body: &str) -> Reply {
    Reply::Status(
        status,
        vec![("content-type", "application/json".into())],
        body.into(),
    )
}

/// `pairs` exchanges of ~2 KB each after a first one.
fn long_history(pairs: usize) -> Vec<(String, String)> {
    let filler = "word ".repeat(400);
    let mut owned = vec![
        ("user".to_string(), "FIRST QUESTION".to_string()),
        ("assistant".to_string(), "first answer".to_string()),
    ];
    for i in 0..pairs {
        owned.push(("user".into(), format!("question {i} {filler}")));
        owned.push(("assistant".into(), format!("answer {i} {filler}")));
    }
    owned
}

async fn seeded(
    llm: &FakeLlm,
    aux: Option<&FakeLlm>,
    owned: &[(String, String)],
    edit: impl FnOnce(&mut Config),
) -> Harness {
    let seed: Vec<NewMessage> = owned
        .iter()
        .map(|(r, c)| NewMessage {
            role: r,
            content: c,
            ..Default::default()
        })
        .collect();
    let aux_url = aux.map(|a| a.url.clone());
    harness_with(
        llm,
        move |c| {
            c.llm.context_window = 16_000;
            c.llm.max_tokens = 1000;
            c.llm.max_retries = 0;
            c.llm.auxiliary.base_url = aux_url;
            edit(c);
        },
        &seed,
    )
    .await
}

fn summary_model() -> Reply {
    Reply::Json(text(
        "## Active task\nAnswer the latest question.\n## Resolved\nEarlier questions.\n## Remaining\nNothing.\n## Facts\nNone.",
    ))
}

fn has_summary(request: &Value) -> bool {
    request["messages"].as_array().unwrap().iter().any(|m| {
        m["content"]
            .as_str()
            .is_some_and(|c| c.starts_with(SUMMARY_PREFIX))
    })
}

#[tokio::test]
async fn long_histories_are_compressed_with_the_auxiliary_model() {
    let llm = FakeLlm::start(vec![Reply::Json(text("fresh answer"))]).await;
    let aux = FakeLlm::start(vec![summary_model()]).await;
    let mut h = seeded(&llm, Some(&aux), &long_history(30), |c| {
        c.llm.context_window = 8000;
        c.llm.max_tokens = 500;
    })
    .await;
    let out = h
        .conversation
        .run_turn("LATEST QUESTION", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.reply, "fresh answer");
    assert_eq!(aux.requests().len(), 1, "the auxiliary model summarised");
    let summary_request = aux.requests()[0].to_string();
    for section in ["## Active task", "## Resolved", "## Remaining", "## Facts"] {
        assert!(summary_request.contains(section), "asks for {section}");
    }
    let sent = llm.requests()[0]["messages"].as_array().unwrap().clone();
    assert!(sent.len() < 20, "{} messages sent", sent.len());
    assert_eq!(sent[1]["content"], "FIRST QUESTION", "first exchange kept");
    assert!(has_summary(&llm.requests()[0]));
    assert_eq!(
        sent.last().unwrap()["content"],
        "LATEST QUESTION",
        "recent tail kept"
    );
    assert_eq!(
        h.store
            .messages(&h.conversation.session().id)
            .await
            .unwrap()
            .len(),
        64,
        "storage keeps everything"
    );
}

/// The recent tail is sized in tokens: one huge message just before the
/// running turn is summarised (the summariser reads it), not only cut, and
/// the summary's output budget is a fifth of what it replaces.
#[tokio::test]
async fn a_huge_recent_message_is_summarised_and_the_note_scales() {
    let llm = FakeLlm::start(vec![Reply::Json(text("fresh answer"))]).await;
    let aux = FakeLlm::start(vec![summary_model()]).await;
    let mut owned = long_history(3);
    owned.push((
        "user".into(),
        format!("PASTED LOG {}", "line ".repeat(12_000)),
    ));
    owned.push(("assistant".into(), "that log shows a timeout".into()));
    let mut h = seeded(&llm, Some(&aux), &owned, |_| {}).await;
    let out = h
        .conversation
        .run_turn("LATEST QUESTION", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.reply, "fresh answer");
    let asked = &aux.requests()[0];
    assert!(
        asked.to_string().contains("PASTED LOG"),
        "the long message went to the summariser"
    );
    // About 18 000 tokens replaced: a note of a fifth of them, past the
    // old cap of 2 048, within a quarter of the 16 000-token window.
    let note = asked["max_tokens"].as_u64().unwrap();
    assert!((2_049..=4_000).contains(&note), "{note}");
    let sent = llm.requests()[0].to_string();
    assert!(has_summary(&llm.requests()[0]));
    assert!(!sent.contains("PASTED LOG"), "the log was summarised away");
    assert!(sent.contains("LATEST QUESTION"));
}

#[tokio::test]
async fn old_large_tool_outputs_are_trimmed_first() {
    let llm = FakeLlm::start(vec![Reply::Json(text("ok"))]).await;
    let big = "x".repeat(30_000);
    let calls_json = r#"[{"id":"t1","name":"read_file","arguments":"{}"}]"#;
    let mut seed = vec![
        NewMessage {
            role: "user",
            content: "read the log",
            ..Default::default()
        },
        NewMessage {
            role: "assistant",
            content: "",
            tool_calls: Some(calls_json),
            ..Default::default()
        },
        NewMessage {
            role: "tool",
            content: &big,
            tool_call_id: Some("t1"),
            name: Some("read_file"),
            ..Default::default()
        },
    ];
    for _ in 0..5 {
        seed.push(NewMessage {
            role: "user",
            content: "more",
            ..Default::default()
        });
        seed.push(NewMessage {
            role: "assistant",
            content: "sure",
            ..Default::default()
        });
    }
    let mut h = harness_with(
        &llm,
        |c| {
            c.llm.context_window = 8000;
            c.llm.max_tokens = 500;
        },
        &seed,
    )
    .await;
    h.conversation
        .run_turn("and now?", &CancellationToken::new())
        .await
        .unwrap();
    let tool = tool_messages(&llm.requests()[0]);
    assert!(
        tool[0].1.len() < 2000 && tool[0].1.contains("truncated"),
        "{}",
        tool[0].1.len()
    );
}

#[tokio::test]
async fn each_providers_too_long_answer_is_recovered_by_compressing_once() {
    for (who, status, body) in OVERFLOWS {
        let llm =
            FakeLlm::start(vec![overflow(*status, body), Reply::Json(text("answered"))]).await;
        let aux = FakeLlm::start(vec![summary_model()]).await;
        // Short enough that the estimate says it fits: only the provider
        // knows better.
        let mut h = seeded(&llm, Some(&aux), &long_history(10), |_| {}).await;
        let out = h
            .conversation
            .run_turn("LATEST QUESTION", &CancellationToken::new())
            .await
            .unwrap_or_else(|e| panic!("{who}: {e}"));
        assert_eq!(out.reply, "answered", "{who}");
        assert_eq!(out.notice, None, "{who}: no split was needed");
        assert_eq!(aux.requests().len(), 1, "{who}: summarised once");
        let sent = llm.requests();
        assert_eq!(sent.len(), 2, "{who}: asked again once");
        assert!(!has_summary(&sent[0]) && has_summary(&sent[1]), "{who}");
        // The history, not the fixed part (system prompt, tools), shrank.
        let history = |request: &serde_json::Value| request["messages"].to_string().len();
        assert!(
            history(&sent[1]) < history(&sent[0]) / 2,
            "{who}: the retry is smaller"
        );
    }
}

#[tokio::test]
async fn anthropics_prompt_is_too_long_is_recovered_the_same_way() {
    let answer = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "text", "text": "answered"}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 50, "output_tokens": 4}
    });
    let llm = FakeLlm::start(vec![overflow(400, ANTHROPIC_OVERFLOW), Reply::Json(answer)]).await;
    let aux = FakeLlm::start(vec![summary_model()]).await;
    let mut h = seeded(&llm, Some(&aux), &long_history(10), |c| {
        c.llm.provider = LlmProvider::Anthropic;
        c.llm.auxiliary.provider = Some(LlmProvider::Openai);
    })
    .await;
    let out = h
        .conversation
        .run_turn("LATEST QUESTION", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.reply, "answered");
    // Anthropic's content is a list of blocks.
    assert!(
        llm.requests()[1]["messages"]
            .to_string()
            .contains(SUMMARY_PREFIX)
    );
}

#[tokio::test]
async fn a_compressed_history_is_saved_and_read_back_without_summarising_again() {
    let llm = FakeLlm::start(vec![
        Reply::Json(text("first reply")),
        Reply::Json(text("second reply")),
    ])
    .await;
    let aux = FakeLlm::start(vec![summary_model()]).await;
    // Over the budget from the start: compressed before the first call.
    let mut h = seeded(&llm, Some(&aux), &long_history(40), |_| {}).await;
    let out = h
        .conversation
        .run_turn("LATEST QUESTION", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.reply, "first reply");
    assert_eq!(aux.requests().len(), 1);
    let shortened = h.conversation.history().to_vec();
    assert!(h.conversation.reloadable(), "the checkpoint was saved");

    let mut reopened = h.reopen().await;
    assert_eq!(
        reopened.history(),
        &shortened[..],
        "read back as it was left"
    );
    reopened
        .run_turn("ONE MORE", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        aux.requests().len(),
        1,
        "no second summary after the reload"
    );
    let second = &llm.requests()[1];
    assert!(has_summary(second));
    assert!(
        !second.to_string().contains("question 3 "),
        "the middle stays summarised"
    );
    assert!(second.to_string().contains("ONE MORE"));
    assert_eq!(
        h.store
            .messages(&reopened.session().id)
            .await
            .unwrap()
            .len(),
        82 + 2 + 2,
        "storage keeps every message whole"
    );
}

#[tokio::test]
async fn when_nothing_fits_the_conversation_goes_on_in_a_linked_session() {
    let (_, status, body) = OVERFLOWS[0];
    let llm = FakeLlm::start(vec![
        overflow(status, body),
        overflow(status, body),
        Reply::Json(text("fresh start")),
    ])
    .await;
    let aux = FakeLlm::start(vec![summary_model(), summary_model()]).await;
    let mut h = seeded(&llm, Some(&aux), &long_history(10), |_| {}).await;
    let old = h.conversation.session().clone();
    let out = h
        .conversation
        .run_turn("LATEST QUESTION", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.reply, "fresh start");
    assert_eq!(
        out.notice.as_deref(),
        Some(SPLIT_NOTICE),
        "the chat is told"
    );
    let new = h.conversation.session().clone();
    assert_ne!(new.id, old.id);
    assert_eq!(new.key, old.key);
    assert_eq!(new.parent_id.as_deref(), Some(old.id.as_str()));
    let ended = h.store.session(&old.id).await.unwrap().unwrap();
    assert_eq!(ended.end_reason.as_deref(), Some("split"));
    let sent = &llm.requests()[2]["messages"];
    let sent = sent.as_array().unwrap();
    assert!(
        sent[1]["content"]
            .as_str()
            .unwrap()
            .starts_with(SUMMARY_PREFIX)
    );
    assert_eq!(sent.last().unwrap()["content"], "LATEST QUESTION");
    let stored = h.store.messages(&new.id).await.unwrap();
    assert_eq!(stored.len(), 3, "summary, question, answer: {stored:?}");
}

#[tokio::test]
async fn a_message_too_long_for_any_conversation_gets_an_honest_answer() {
    let llm = FakeLlm::start(vec![]).await;
    let mut h = seeded(&llm, None, &[], |c| c.llm.context_window = 4000).await;
    let huge = "log line ".repeat(6000);
    let out = h
        .conversation
        .run_turn(&huge, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.stop, StopReason::TooLong);
    assert_eq!(out.reply, TOO_LONG);
    assert!(llm.requests().is_empty(), "nothing that cannot fit is sent");
}

#[tokio::test]
async fn a_turns_tool_output_has_a_budget() {
    let reads: Vec<(String, String)> = (0..8)
        .map(|i| (format!("r{i}"), format!(r#"{{"path":"big{i}.txt"}}"#)))
        .collect();
    let batch: Vec<(&str, &str, &str)> = reads
        .iter()
        .map(|(id, args)| (id.as_str(), "read_file", args.as_str()))
        .collect();
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&batch)),
        Reply::Json(text("read them")),
    ])
    .await;
    let h = seeded(&llm, None, &[], |_| {}).await;
    for i in 0..8 {
        let body: String = (0..400)
            .map(|l| format!("file {i} line {l:04} {}\n", "x".repeat(40)))
            .collect();
        std::fs::write(h.workspace.join(format!("big{i}.txt")), body).unwrap();
    }
    let mut h = h;
    h.conversation
        .run_turn("read all eight", &CancellationToken::new())
        .await
        .unwrap();
    let results = tool_messages(&llm.requests()[1]);
    assert_eq!(results.len(), 8);
    let total: usize = results.iter().map(|(_, c)| c.chars().count()).sum();
    // Half the 16 000-token window at four characters a token.
    let budget = 32_000;
    assert!(
        total <= budget + 8 * 1200,
        "{total} characters of tool output"
    );
    assert!(
        results[0].1.chars().count() > 10_000,
        "the first reads are whole"
    );
    assert!(
        results[7].1.contains("tool output budget is used up"),
        "the last read is cut and says so"
    );
}

/// A model that counts tokens more strictly than the gateway's estimate
/// (three characters a token, not four) and refuses, as OpenAI does, what
/// does not fit its window; summary requests get a short note, requests
/// asking to read get a tool call, everything else an answer.
fn windowed_model(window: usize, summaries: Arc<AtomicUsize>) -> impl Fn(&Value) -> Reply {
    move |request: &Value| {
        let size = request["messages"].to_string().len() + request["tools"].to_string().len();
        let max_out = request["max_tokens"].as_u64().unwrap_or(0) as usize;
        if size / 3 + max_out > window {
            return overflow(400, OVERFLOWS[0].2);
        }
        let messages = request["messages"].as_array().unwrap();
        if messages[0]["content"]
            .as_str()
            .unwrap_or("")
            .contains("hand-off notes")
        {
            summaries.fetch_add(1, Ordering::SeqCst);
            return summary_model();
        }
        let last = messages.last().unwrap();
        if last["role"] == "user"
            && last["content"]
                .as_str()
                .unwrap_or("")
                .contains("please read")
        {
            let id = format!("call{}", messages.len());
            return Reply::Json(calls(&[(&id, "read_file", r#"{"path":"notes.txt"}"#)]));
        }
        Reply::Json(text(&format!("answer after {} messages", messages.len())))
    }
}

#[tokio::test]
async fn a_long_conversation_keeps_answering_within_a_16k_window() {
    let summaries = Arc::new(AtomicUsize::new(0));
    let llm = FakeLlm::responding(windowed_model(16_384, summaries.clone())).await;
    let h = seeded(&llm, None, &[], |c| c.llm.context_window = 16_384).await;
    let notes: String = (0..120)
        .map(|l| format!("note {l:03}: {}\n", "n".repeat(50)))
        .collect();
    std::fs::write(h.workspace.join("notes.txt"), notes).unwrap();
    let mut h = h;
    let splits = Mutex::new(0);
    let filler = "some context for this message ".repeat(20);
    for i in 0..200 {
        let message = match i {
            // A large paste: the tail alone then needs a fresh session.
            120 => format!(
                "here is the log: {}",
                "trace frame at module::function ".repeat(1100)
            ),
            i if i % 7 == 3 => format!("turn {i}: please read notes.txt {filler}"),
            i => format!("turn {i}: {filler}"),
        };
        let out = h
            .conversation
            .run_turn(&message, &CancellationToken::new())
            .await
            .unwrap_or_else(|e| panic!("turn {i} failed: {e}"));
        assert_eq!(out.stop, StopReason::Final, "turn {i}: {}", out.reply);
        assert!(
            out.reply.starts_with("answer after"),
            "turn {i}: {}",
            out.reply
        );
        if out.notice.as_deref() == Some(SPLIT_NOTICE) {
            *splits.lock().unwrap() += 1;
        }
    }
    let summaries = summaries.load(Ordering::SeqCst);
    let splits = *splits.lock().unwrap();
    println!(
        "200 turns: {summaries} summaries, {splits} splits, {} model requests",
        llm.requests().len()
    );
    assert!(
        summaries >= 3,
        "the conversation was compressed: {summaries}"
    );
    assert!(splits >= 1, "the large paste moved it to a new session");
}

#[tokio::test]
async fn the_todo_list_outlives_the_summary_that_replaced_its_results() {
    let list = r#"{"todos":[{"id":"1","content":"migrate the schema","status":"in_progress"}]}"#;
    let calls_json = json!([{"id": "t1", "name": "todo", "arguments": list}]).to_string();
    let mut seed = vec![
        NewMessage {
            role: "user",
            content: "FIRST QUESTION",
            ..Default::default()
        },
        NewMessage {
            role: "assistant",
            content: "first answer",
            ..Default::default()
        },
        NewMessage {
            role: "user",
            content: "plan the migration",
            ..Default::default()
        },
        NewMessage {
            role: "assistant",
            content: "",
            tool_calls: Some(&calls_json),
            ..Default::default()
        },
        NewMessage {
            role: "tool",
            content: list,
            tool_call_id: Some("t1"),
            name: Some("todo"),
            ..Default::default()
        },
        NewMessage {
            role: "assistant",
            content: "planned",
            ..Default::default()
        },
    ];
    let history = long_history(40);
    seed.extend(history.iter().skip(2).map(|(r, c)| NewMessage {
        role: r,
        content: c,
        ..Default::default()
    }));
    let llm = FakeLlm::start(vec![
        Reply::Json(text("first reply")),
        Reply::Json(calls(&[("t2", "todo", "{}")])),
        Reply::Json(text("still on it")),
    ])
    .await;
    let aux = FakeLlm::start(vec![summary_model()]).await;
    let mut h = harness_with(
        &llm,
        |c| {
            c.llm.context_window = 16_000;
            c.llm.max_tokens = 1000;
            c.llm.max_retries = 0;
            c.llm.auxiliary.base_url = Some(aux.url.clone());
        },
        &seed,
    )
    .await;
    h.conversation
        .run_turn("LATEST QUESTION", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(aux.requests().len(), 1, "the middle was summarised");
    let first = llm.requests()[0].to_string();
    assert!(
        !first.contains("\"tool_call_id\""),
        "its todo result went with it"
    );
    // Read back from the checkpoint, the list is still there.
    let mut reopened = h.reopen().await;
    reopened
        .run_turn("where are we?", &CancellationToken::new())
        .await
        .unwrap();
    let results = tool_messages(&llm.requests()[2]);
    let (_, listed) = results.last().unwrap();
    assert!(listed.contains("migrate the schema"), "{listed}");
}
