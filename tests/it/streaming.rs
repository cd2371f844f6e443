//! Answers streamed into the chat through the real platform clients: the
//! first words make a message, later ones edit it at the platform's pace,
//! a long answer goes on in a few more messages, a 429 is waited out, and
//! the final answer is written into those messages once, with no preview
//! left behind and no second copy.

use crate::common;

use std::time::{Duration, Instant};

use common::discord_harness::{self, ann};
use common::fake_discord::message;
use common::fake_llm::{FakeLlm, Reply, text_stream};
use common::fake_telegram::{Call, FakeTelegram};
use common::in_process::{InProcess, daemon_config};
use common::outage::Answer;
use serde_json::json;
use switchboard::config::{Config, Env, Progress};

const ANN: i64 = 1001;

/// About 3 000 tokens of prose in paragraphs: numbered words, so order
/// and completeness can be checked.
fn long_answer() -> String {
    (0..60)
        .map(|p| {
            (0..40)
                .map(|w| format!("w{}", p * 40 + w))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The numbered words of `texts`, in order.
fn words(texts: &[String]) -> Vec<String> {
    texts
        .iter()
        .flat_map(|t| t.split_whitespace().map(str::to_string))
        .filter(|w| w.starts_with('w'))
        .collect()
}

/// Ann's private chat with a bot that streams into messages (Telegram
/// refuses it drafts).
async fn telegram(
    script: Vec<Reply>,
    tweak: impl FnOnce(&mut Config),
) -> (FakeTelegram, FakeLlm, InProcess, tempfile::TempDir) {
    let started = telegram_drafting(script, tweak).await;
    started.0.refuse_drafts();
    started
}

/// Ann's private chat, where answers stream into a draft.
async fn telegram_drafting(
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

/// The sends and edits the bot made in Ann's chat, in order.
fn writes(tg: &FakeTelegram) -> Vec<Call> {
    let mut all: Vec<Call> = ["sendMessage", "editMessageText"]
        .iter()
        .flat_map(|m| tg.calls(m))
        .collect();
    all.sort_by_key(|c| c.at);
    all
}

/// Waits until Ann's chat shows the whole answer (every numbered word).
async fn whole(tg: &FakeTelegram, n: usize) -> Vec<(i64, String)> {
    common::eventually("the whole answer shown", || async {
        let shown: Vec<String> = tg.shown(ANN).into_iter().map(|(_, t)| t).collect();
        words(&shown).len() >= n
    })
    .await;
    // Let a stray late write show itself.
    tokio::time::sleep(Duration::from_millis(300)).await;
    tg.shown(ANN)
}

/// In a private chat the answer streams into a draft, a preview that is
/// no message: the chat then shows the answer once, sent whole, never
/// edited.
#[tokio::test]
async fn a_private_chat_streams_into_a_draft_and_gets_the_answer_once() {
    let answer = long_answer();
    let expected: Vec<String> = answer.split_whitespace().map(str::to_string).collect();
    let (tg, _llm, _daemon, _dir) = telegram_drafting(
        vec![Reply::SlowSse(
            text_stream(&answer, 40),
            Duration::from_millis(8),
        )],
        |_| {},
    )
    .await;
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "write a lot"));
    let shown = whole(&tg, expected.len()).await;
    let texts: Vec<String> = shown.iter().map(|(_, t)| t.clone()).collect();
    assert_eq!(words(&texts), expected, "every word once, in order");
    let previews = tg.previews(ANN);
    assert!(previews.len() >= 2, "the answer streamed: {previews:?}");
    assert!(
        previews.windows(2).all(|p| p[0] != p[1]),
        "each preview shows something new"
    );
    assert!(tg.calls("editMessageText").is_empty(), "nothing edited");
    assert_eq!(
        tg.calls("sendMessage").len(),
        shown.len(),
        "each message sent once, when the answer was whole"
    );
}

#[tokio::test]
async fn a_long_streamed_answer_is_a_few_messages_edited_at_telegrams_pace() {
    let answer = long_answer();
    let expected: Vec<String> = answer.split_whitespace().map(str::to_string).collect();
    let (tg, _llm, _daemon, _dir) = telegram(
        vec![Reply::SlowSse(
            text_stream(&answer, 40),
            Duration::from_millis(8),
        )],
        |_| {},
    )
    .await;
    let asked = Instant::now();
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "write a lot"));
    let shown = whole(&tg, expected.len()).await;
    let texts: Vec<String> = shown.iter().map(|(_, t)| t.clone()).collect();
    assert_eq!(words(&texts), expected, "every word once, in order");
    assert!(
        (3..=5).contains(&shown.len()),
        "{} messages for {} characters",
        shown.len(),
        answer.len()
    );
    for (_, t) in &shown {
        assert!(t.encode_utf16().count() <= 4096);
        assert!(!t.contains("(1/"), "no chunk markers: {t:.40}");
    }
    let writes = writes(&tg);
    let sends = writes.iter().filter(|c| c.method == "sendMessage").count();
    assert_eq!(sends, shown.len(), "each message sent once");
    let first = writes[0].at.duration_since(asked);
    let last = writes.last().unwrap().at.duration_since(asked);
    assert!(
        first < last / 3,
        "the first words showed at {first:?}, the whole answer at {last:?}"
    );
    // Streaming edits keep to one a second in a private chat; only the
    // final write of each message may follow closer.
    let streaming = &writes[..writes.len() - shown.len()];
    for pair in streaming.windows(2) {
        let gap = pair[1].at.duration_since(pair[0].at);
        assert!(
            gap >= Duration::from_millis(950),
            "two writes {gap:?} apart"
        );
    }
    assert!(
        writes.len() as f64 <= last.as_secs_f64() + shown.len() as f64 + 1.0,
        "{} writes in {last:?}",
        writes.len()
    );
}

#[tokio::test]
async fn a_429_while_streaming_is_waited_out_and_the_answer_completes() {
    let answer = (0..300)
        .map(|w| format!("w{w}"))
        .collect::<Vec<_>>()
        .join(" ");
    let (tg, _llm, _daemon, _dir) = telegram(
        vec![Reply::SlowSse(
            text_stream(&answer, 12),
            Duration::from_millis(15),
        )],
        |_| {},
    )
    .await;
    tg.fail_edits(vec![Answer::json(
        429,
        json!({"ok": false, "error_code": 429,
            "description": "Too Many Requests: retry after 2",
            "parameters": {"retry_after": 2}}),
    )]);
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "count"));
    let shown = whole(&tg, 300).await;
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0].1, answer);
    let edits = tg.calls("editMessageText");
    assert!(edits.len() >= 2, "{edits:?}");
    let after = edits[1].at.duration_since(edits[0].at);
    assert!(
        after >= Duration::from_millis(1900),
        "the edit after the 429 came {after:?} later"
    );
}

/// Stream chunks of a call that says `words`, then asks for one tool.
fn saying_then_calling(words: &str, tool: &str, arguments: &str) -> Vec<serde_json::Value> {
    let mut chunks = text_stream(words, 5);
    chunks.pop();
    chunks.push(
        json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "model": "fake",
        "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1",
            "type": "function", "function": {"name": tool, "arguments": arguments}}]},
        "finish_reason": "tool_calls"}]}),
    );
    chunks
}

#[tokio::test]
async fn a_call_after_tools_answers_below_and_progress_is_shown_then_deleted() {
    let (tg, _llm, _daemon, _dir) = telegram(
        vec![
            Reply::Sse(saying_then_calling(
                "Let me look at the notes.",
                "terminal",
                r#"{"command":"sleep 3; echo ok"}"#,
            )),
            Reply::Sse(text_stream("All **done**: ok.", 4)),
        ],
        |c| c.telegram.progress = Some(Progress::Compact),
    )
    .await;
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "check"));
    common::eventually("the answer shown", || async {
        tg.shown(ANN).iter().any(|(_, t)| t == "All done: ok.")
    })
    .await;
    common::eventually("the status deleted", || async {
        !tg.calls("deleteMessage").is_empty()
    })
    .await;
    let sent: Vec<String> = tg
        .calls("sendMessage")
        .iter()
        .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        sent.iter().any(|t| t == "💻 running a command…"),
        "a status while the command ran: {sent:?}"
    );
    let shown: Vec<String> = tg.shown(ANN).into_iter().map(|(_, t)| t).collect();
    assert_eq!(
        shown,
        vec![
            "Let me look at the notes.".to_string(),
            "All done: ok.".to_string()
        ],
        "the status is gone, the answer is below what came before"
    );
    assert_eq!(tg.calls("deleteMessage").len(), 1);
}

/// The same turn in a private chat streaming into drafts: what the first
/// call said stays above the answer, each sent once.
#[tokio::test]
async fn a_draft_keeps_what_came_before_the_tools_above_the_answer() {
    let (tg, _llm, _daemon, _dir) = telegram_drafting(
        vec![
            Reply::Sse(saying_then_calling(
                "Let me look at the notes.",
                "terminal",
                r#"{"command":"sleep 1; echo ok"}"#,
            )),
            Reply::Sse(text_stream("All **done**: ok.", 4)),
        ],
        |_| {},
    )
    .await;
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "check"));
    common::eventually("the answer shown", || async {
        tg.shown(ANN).iter().any(|(_, t)| t == "All done: ok.")
    })
    .await;
    let shown: Vec<String> = tg.shown(ANN).into_iter().map(|(_, t)| t).collect();
    assert_eq!(
        shown,
        vec![
            "Let me look at the notes.".to_string(),
            "All done: ok.".to_string()
        ]
    );
    assert!(!tg.previews(ANN).is_empty());
}

/// On Discord, each call's messages are sent under keys of their own: the
/// answer after the tools is a new message below what the first call
/// said, never that message found again by a repeated nonce.
#[tokio::test]
async fn discord_keeps_what_came_before_the_tools_above_the_answer() {
    let s = discord_harness::start(
        vec![
            Reply::Sse(saying_then_calling(
                "Let me look at the notes.",
                "terminal",
                r#"{"command":"sleep 1; echo ok"}"#,
            )),
            Reply::Sse(text_stream("All done: ok.", 4)),
        ],
        |_| {},
    )
    .await;
    s.dc.dispatch(
        "MESSAGE_CREATE",
        message("1300", discord_harness::DM, ann(), "check", false),
    )
    .await;
    common::eventually("the answer shown", || async {
        s.dc.shown(discord_harness::DM)
            .iter()
            .any(|(_, t)| t == "All done: ok.")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let shown: Vec<String> =
        s.dc.shown(discord_harness::DM)
            .into_iter()
            .map(|(_, t)| t)
            .collect();
    assert_eq!(shown, ["Let me look at the notes.", "All done: ok."]);
    assert!(!s.dc.posted().iter().any(|c| c.repeat), "no nonce repeated");
}

#[tokio::test]
async fn streaming_off_sends_the_answer_whole() {
    let (tg, _llm, _daemon, _dir) = telegram(
        vec![Reply::SlowSse(
            text_stream("one two three four", 3),
            Duration::from_millis(30),
        )],
        |c| c.telegram.stream = Some(false),
    )
    .await;
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "hi"));
    let sent = tg.wait("sendMessage", 1).await;
    assert_eq!(sent[0].body["text"], "one two three four");
    // A quiet period: no edit and no second message come.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(tg.calls("editMessageText").is_empty());
    assert_eq!(tg.calls("sendMessage").len(), 1);
}

#[tokio::test]
async fn discord_streams_into_one_message_and_writes_the_answer_into_it() {
    let answer = (0..400)
        .map(|w| format!("w{w}"))
        .collect::<Vec<_>>()
        .join(" ");
    let s = discord_harness::start(
        vec![Reply::SlowSse(
            text_stream(&answer, 20),
            Duration::from_millis(12),
        )],
        |_| {},
    )
    .await;
    s.dc.dispatch(
        "MESSAGE_CREATE",
        message("1200", discord_harness::DM, ann(), "count", false),
    )
    .await;
    let posted = s.dc.wait_posted(1).await;
    let expected: Vec<String> = answer.split_whitespace().map(str::to_string).collect();
    common::eventually("the whole answer in the messages", || async {
        let mut last: std::collections::BTreeMap<String, String> = Default::default();
        for c in s.dc.calls("POST", "/messages") {
            last.insert(c.id.clone(), discord_harness::content(&c));
        }
        for c in s.dc.calls("PATCH", "/messages/") {
            last.insert(
                c.path.rsplit('/').next().unwrap().to_string(),
                discord_harness::content(&c),
            );
        }
        words(&last.into_values().collect::<Vec<_>>()) == expected
    })
    .await;
    let posts = s.dc.posted();
    assert!(
        (2..=3).contains(&posts.len()),
        "{} messages for {} characters",
        posts.len(),
        answer.len()
    );
    assert!(!posted.is_empty());
    let edits = s.dc.calls("PATCH", "/messages/");
    assert!(!edits.is_empty());
    let mut writes: Vec<Instant> = posts.iter().chain(&edits).map(|c| c.at).collect();
    writes.sort();
    let streaming = &writes[..writes.len() - posts.len()];
    for pair in streaming.windows(2) {
        let gap = pair[1].duration_since(pair[0]);
        assert!(
            gap >= Duration::from_millis(950),
            "two writes {gap:?} apart"
        );
    }
}

#[tokio::test]
async fn the_status_says_when_a_command_waits_for_approval() {
    let (tg, _llm, _daemon, _dir) = telegram(
        vec![
            Reply::Json(common::fake_llm::calls(&[(
                "c1",
                "terminal",
                r#"{"command":"git reset --hard"}"#,
            )])),
            Reply::Json(common::fake_llm::text("Reset done.")),
        ],
        |c| c.telegram.progress = Some(Progress::Compact),
    )
    .await;
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "reset it"));
    common::eventually("the status names the wait", || async {
        tg.shown(ANN)
            .iter()
            .any(|(_, t)| t == "💻 running a command — waiting for approval…")
    })
    .await;
    let prompt = tg
        .calls("sendMessage")
        .into_iter()
        .find(|c| c.body.get("reply_markup").is_some())
        .expect("the approval prompt");
    let once = prompt.body["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        .as_str()
        .unwrap()
        .to_string();
    let prompt_msg = json!({
        "message_id": prompt.id, "date": 1_764_000_000,
        "chat": {"id": ANN, "type": "private", "first_name": "Ann"},
        "from": {"id": 999, "is_bot": true, "first_name": "Switchboard"},
        "text": prompt.body["text"],
    });
    tg.push(FakeTelegram::press(ANN, "Ann", &prompt_msg, &once));
    common::eventually("the answer", || async {
        tg.shown(ANN).iter().any(|(_, t)| t == "Reset done.")
    })
    .await;
    common::eventually("the status is gone", || async {
        tg.shown(ANN)
            .iter()
            .all(|(_, t)| !t.contains("running a command"))
    })
    .await;
}

/// OpenAI stream chunks writing `text` in pieces of `size` characters,
/// with no finish: a stream that is still going.
fn unfinished(text: &str, size: usize) -> Vec<serde_json::Value> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(size)
        .map(|piece| {
            json!({"id": "chatcmpl-b", "object": "chat.completion.chunk", "model": "fake",
                "choices": [{"index": 0, "delta": {"content": piece.iter().collect::<String>()},
                    "finish_reason": null}]})
        })
        .collect()
}

#[tokio::test]
async fn a_stream_that_breaks_for_good_leaves_its_text_once_with_a_note() {
    let (tg, llm, _daemon, _dir) = telegram(
        vec![
            Reply::BrokenSse(unfinished("The plan has three steps: first", 5)),
            Reply::BrokenSse(unfinished("The plan", 4)),
        ],
        |c| c.llm.max_retries = 1,
    )
    .await;
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "plan?"));
    let kept = "The plan has three steps: first\n\n\
                (The answer was cut off: the connection to the model broke.)";
    common::eventually("the partial answer shown", || async {
        tg.shown(ANN).iter().any(|(_, t)| t == kept)
    })
    .await;
    assert_eq!(llm.requests().len(), 2, "one retry, then the text was kept");
    let shown: Vec<String> = tg.shown(ANN).into_iter().map(|(_, t)| t).collect();
    assert_eq!(
        shown,
        vec![kept.to_string()],
        "shown once, nothing else left"
    );
}
