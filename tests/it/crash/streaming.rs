//! A streamed answer cut off by SIGKILL: the restarted daemon runs the
//! interrupted turn again and writes its answer into the message the first
//! run left half written (or, streamed as a Telegram draft, sends it once),
//! so the chat shows one complete answer and no orphan preview.

use super::{Daemon, write_config_with};
use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::fake_llm::{FakeLlm, Reply, text_stream};
use common::fake_telegram::FakeTelegram;

const ANN: i64 = 3001;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_by_kill_9_ends_as_one_complete_answer_after_the_restart() {
    let (tg, dir, answer, asked) = streaming_daemon().await;
    tg.refuse_drafts();
    cut_and_restarted(&tg, dir.path(), &answer, &asked).await;
}

/// A private chat's stream is a draft: killed mid-stream, the daemon
/// leaves no message at all, and the restart sends the answer once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draft_cut_by_kill_9_leaves_nothing_and_the_answer_comes_once() {
    let (tg, dir, answer, asked) = streaming_daemon().await;
    let first = Daemon::start(dir.path());
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "count"));
    common::eventually("part of the answer previewed", || async {
        tg.previews(ANN)
            .last()
            .is_some_and(|t| t.split_whitespace().count() >= 10)
    })
    .await;
    first.kill();
    assert!(tg.shown(ANN).is_empty(), "nothing but a preview was shown");
    let second = Daemon::start(dir.path());
    common::eventually("the whole answer shown", || async {
        tg.shown(ANN).iter().any(|(_, t)| *t == answer)
    })
    .await;
    // A quiet period: no second message and no further turn come.
    tokio::time::sleep(Duration::from_millis(500)).await;
    second.stop();
    let shown: Vec<String> = tg.shown(ANN).into_iter().map(|(_, t)| t).collect();
    assert_eq!(shown, vec![answer], "the answer once, nothing else");
    assert_eq!(
        asked.load(Ordering::SeqCst),
        2,
        "the cut-off turn ran again"
    );
    assert!(tg.calls("editMessageText").is_empty());
}

/// Telegram and a model whose first run streams slowly (to be killed
/// mid-way), with a daemon's directory configured for them.
async fn streaming_daemon() -> (FakeTelegram, tempfile::TempDir, String, Arc<AtomicUsize>) {
    let (answer, llm, asked) = slow_then_quick(200).await;
    let tg = FakeTelegram::start().await;
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("sqlite://{}/crash.db", dir.path().display());
    let telegram = format!(
        "[telegram]\nenabled = true\napi_url = \"{}\"\nallowed_users = [{ANN}]\n",
        tg.url
    );
    write_config_with(
        dir.path(),
        &storage,
        &llm.url,
        "http://127.0.0.1:9",
        &telegram,
    );
    (tg, dir, answer, asked)
}

/// Kills a daemon streaming into Ann's chat mid-answer, then checks that
/// the restarted one writes the whole answer into the message left half
/// written.
async fn cut_and_restarted(
    tg: &FakeTelegram,
    dir: &std::path::Path,
    answer: &str,
    asked: &AtomicUsize,
) {
    let storage = format!("sqlite://{}/crash.db", dir.display());
    let first = Daemon::start(dir);
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "count"));
    common::eventually("part of the answer shown", || async {
        tg.shown(ANN)
            .first()
            .is_some_and(|(_, t)| t.split_whitespace().count() >= 10)
    })
    .await;
    first.kill();
    let half = tg.shown(ANN);
    assert_eq!(half.len(), 1, "{half:?}");
    assert_ne!(half[0].1, answer, "killed mid-stream");
    let store = switchboard::store::Store::open(&switchboard::config::StorageConfig {
        url: storage.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let pending = store.inbox_pending(10).await.unwrap();
    assert_eq!(pending.len(), 1, "the event is left to the restart");
    assert!(pending[0].attempts > 0, "its turn had started: {pending:?}");
    let draft = store.draft(pending[0].id).await.unwrap();
    assert_eq!(
        draft.messages,
        vec![half[0].0.to_string()],
        "the draft is stored"
    );
    store.close().await;

    let second = Daemon::start(dir);
    common::eventually("the whole answer shown", || async {
        tg.shown(ANN).iter().any(|(_, t)| *t == answer)
    })
    .await;
    // A quiet period: no second message and no further turn come.
    tokio::time::sleep(Duration::from_millis(500)).await;
    second.stop();

    let shown = tg.shown(ANN);
    assert_eq!(
        shown,
        vec![(half[0].0, answer.to_string())],
        "the half-written message became the answer; nothing else is shown"
    );
    assert_eq!(
        asked.load(Ordering::SeqCst),
        2,
        "the cut-off turn ran again"
    );
    assert_eq!(tg.calls("sendMessage").len(), 1, "sent once, then edited");
}

/// A model whose first answer streams slowly (the run to be killed) and
/// whose second comes at once: the answer, the model, and how many times
/// it was asked.
async fn slow_then_quick(words: usize) -> (String, FakeLlm, Arc<AtomicUsize>) {
    let answer = (0..words)
        .map(|w| format!("w{w}"))
        .collect::<Vec<_>>()
        .join(" ");
    let asked = Arc::new(AtomicUsize::new(0));
    let llm = {
        let (answer, asked) = (answer.clone(), asked.clone());
        FakeLlm::responding(move |_| {
            let first = asked.fetch_add(1, Ordering::SeqCst) == 0;
            let gap = if first { 150 } else { 2 };
            Reply::SlowSse(text_stream(&answer, 8), Duration::from_millis(gap))
        })
        .await
    };
    (answer, llm, asked)
}

/// Discord: the daemon is killed after Discord created the stream's first
/// message but before its id was stored. The restart finds that message
/// by its nonce and writes the answer into it: the chat ends with the
/// answer once and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_a_message_whose_id_a_kill_lost_becomes_the_answer() {
    use common::fake_discord::{FakeDiscord, message};
    let (answer, llm, asked) = slow_then_quick(120).await;
    let dc = FakeDiscord::start().await;
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("sqlite://{}/crash.db", dir.path().display());
    let discord = format!(
        "[discord]\nenabled = true\napi_url = \"{}\"\nallowed_users = [\"{}\"]\n",
        dc.url,
        common::discord_harness::ANN
    );
    write_config_with(
        dir.path(),
        &storage,
        &llm.url,
        "http://127.0.0.1:9",
        &discord,
    );
    let first = Daemon::start(dir.path());
    dc.ready().await;
    dc.hold_sends(true);
    dc.dispatch(
        "MESSAGE_CREATE",
        message(
            "1200",
            common::discord_harness::DM,
            common::discord_harness::ann(),
            "count",
            false,
        ),
    )
    .await;
    dc.wait_posted(1).await;
    first.kill();
    dc.disconnected();
    dc.hold_sends(false);
    assert_eq!(
        dc.shown(common::discord_harness::DM).len(),
        1,
        "the message the kill orphaned"
    );

    let second = Daemon::start(dir.path());
    common::eventually("the whole answer shown", || async {
        dc.shown(common::discord_harness::DM)
            .iter()
            .any(|(_, t)| *t == answer)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    second.stop();
    let shown: Vec<String> = dc
        .shown(common::discord_harness::DM)
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert_eq!(shown, vec![answer], "the answer once, nothing else");
    assert_eq!(
        asked.load(Ordering::SeqCst),
        2,
        "the cut-off turn ran again"
    );
    assert!(
        dc.posted().iter().any(|c| c.repeat),
        "found again by its nonce"
    );
}

/// Slack: the daemon is killed after Slack posted the stream's first
/// message but before its ts was stored. The restart finds that message
/// among the chat's by the key in its metadata and writes the answer into
/// it: the chat ends with the answer once and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_a_message_whose_ts_a_kill_lost_becomes_the_answer() {
    use common::fake_slack::FakeSlack;
    let (answer, llm, asked) = slow_then_quick(120).await;
    let slack = FakeSlack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("sqlite://{}/crash.db", dir.path().display());
    let config = format!(
        "[slack]\nenabled = true\nopen = true\nmode = \"socket\"\napi_url = \"{}\"\n",
        slack.url
    );
    write_config_with(
        dir.path(),
        &storage,
        &llm.url,
        "http://127.0.0.1:9",
        &config,
    );
    let first = Daemon::start(dir.path());
    slack.hold_posts(true);
    let dm = serde_json::json!({"type": "message", "channel_type": "im", "user": "U1",
        "channel": "D1", "ts": "1764000000.000100", "text": "count", "event_ts": "1764000000.000100"});
    slack
        .envelope(serde_json::json!({
            "envelope_id": "env-1", "type": "events_api", "accepts_response_payload": false,
            "retry_attempt": 0, "retry_reason": "",
            "payload": {"token": "legacy", "team_id": "T0001", "api_app_id": "A0001",
                        "type": "event_callback", "event_id": "Ev1", "event_time": 1_764_000_000,
                        "event": dm},
        }))
        .await;
    slack.wait("chat.postMessage", 1).await;
    first.kill();
    slack.hold_posts(false);
    assert_eq!(slack.shown("D1").len(), 1, "the message the kill orphaned");

    let second = Daemon::start(dir.path());
    common::eventually("the whole answer shown", || async {
        slack.shown("D1").contains(&answer)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    second.stop();
    assert_eq!(
        slack.shown("D1"),
        vec![answer],
        "the answer once, nothing else"
    );
    assert_eq!(
        asked.load(Ordering::SeqCst),
        2,
        "the cut-off turn ran again"
    );
    assert!(
        !slack.calls("conversations.history").is_empty()
            || !slack.calls("conversations.replies").is_empty(),
        "looked for by its key"
    );
}
