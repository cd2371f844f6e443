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
    let answer = (0..200)
        .map(|w| format!("w{w}"))
        .collect::<Vec<_>>()
        .join(" ");
    let asked = Arc::new(AtomicUsize::new(0));
    let llm = {
        let (answer, asked) = (answer.clone(), asked.clone());
        FakeLlm::responding(move |_| {
            let first = asked.fetch_add(1, Ordering::SeqCst) == 0;
            // The first run streams slowly and is killed mid-way.
            let gap = if first { 150 } else { 2 };
            Reply::SlowSse(text_stream(&answer, 8), Duration::from_millis(gap))
        })
        .await
    };
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
