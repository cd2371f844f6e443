//! Slack while something is away: storage (Socket Mode envelopes left
//! unacknowledged, Events API deliveries refused with 503) and Slack's own
//! posts failing for a minute.

use serde_json::json;

use super::{dm, envelope, mention, start, start_in};
use crate::common;
use common::fake_llm::{Reply, text};
use common::outage::Answer;
use switchboard::config::SlackMode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_mode_leaves_envelopes_unacknowledged_while_postgres_is_away() {
    let Some(db) = common::PgTestDb::create().await else {
        return;
    };
    let (proxy, storage) = common::cut_proxy::CutProxy::before(&db).await;
    let s = start_in(
        SlackMode::Socket,
        vec![Reply::Json(text("Back and answering."))],
        |c| c.storage = storage,
    )
    .await;
    s.slack.wait("apps.connections.open", 1).await;
    let asked = mention("U1", "C1", "1764000000.003000", "still there?");

    proxy.cut();
    s.slack
        .envelope(envelope("env-a", 0, "Ev30", asked.clone()))
        .await;
    // A quiet period: no acknowledgement and no answer while storage is away.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(
        !s.slack.acks().iter().any(|a| a["envelope_id"] == "env-a"),
        "an envelope that could not be stored is not acknowledged"
    );
    assert!(s.slack.calls("chat.postMessage").is_empty());

    proxy.restore();
    common::eventually("storage back", || async { !s.daemon.store.is_away().await }).await;
    // Slack sends the envelope it got no acknowledgement for again.
    s.slack
        .envelope(envelope("env-b", 1, "Ev30", asked.clone()))
        .await;
    s.slack.acked("env-b").await;
    let posts = s.slack.wait("chat.postMessage", 1).await;
    assert_eq!(posts[0].body["text"], "Back and answering.");
    // A third copy is acknowledged and dropped as the same event.
    s.slack.envelope(envelope("env-c", 2, "Ev30", asked)).await;
    s.slack.acked("env-c").await;
    // A quiet period: the third copy is not answered.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(s.slack.calls("chat.postMessage").len(), 1);
    assert_eq!(s.llm.requests().len(), 1, "answered once");
    s.daemon.shutdown().await;
    db.drop().await;
}

/// The Events API while storage is away: a delivery gets 503 (Slack sends
/// it again) and nothing of it is kept; the retry after the restore is
/// taken and answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_refused_with_503_while_postgres_is_away_and_taken_on_the_retry() {
    let Some(db) = common::PgTestDb::create().await else {
        return;
    };
    let (proxy, storage) = common::cut_proxy::CutProxy::before(&db).await;
    let s = start_in(
        SlackMode::Events,
        vec![Reply::Json(text("Back and answering."))],
        |c| c.storage = storage,
    )
    .await;
    let asked = mention("U1", "C1", "1764000000.004000", "still there?");
    proxy.cut();
    let refused = s.event(asked.clone(), "Ev40", &[]).await;
    assert_eq!(refused.status(), 503);
    assert!(s.slack.calls("chat.postMessage").is_empty());
    proxy.restore();
    common::eventually("storage back", || async { !s.daemon.store.is_away().await }).await;
    let retry = [
        ("x-slack-retry-num", "1"),
        ("x-slack-retry-reason", "http_error"),
    ];
    assert_eq!(s.event(asked, "Ev40", &retry).await.status(), 200);
    let posts = s.slack.wait("chat.postMessage", 1).await;
    assert_eq!(posts[0].body["thread_ts"], "1764000000.004000");
    assert_eq!(s.llm.requests().len(), 1, "answered once");
    s.daemon.shutdown().await;
    db.drop().await;
}

/// Set in the child process that runs the outage test alone (it reads this
/// process's memory).
const OUTAGE_PROBE: &str = "SWITCHBOARD_SLACK_OUTAGE_PROBE";

/// chat.postMessage answers an HTML 503, a 429 (retry after 5 s) and
/// Slack's `internal_error` in turn for a minute while two messages arrive
/// in a DM: the replies wait with jittered backoff (a handful of tries,
/// none in a tight loop), memory stays flat, and once Slack is back each
/// answer is posted once, in order, without asking the model again.
#[tokio::test]
async fn a_minute_of_5xx_and_429_on_posts_delays_the_replies_without_a_tight_loop_or_a_copy() {
    if std::env::var_os(OUTAGE_PROBE).is_none() {
        return common::run_alone(
            "slack::outages::a_minute_of_5xx_and_429_on_posts_delays_the_replies_without_a_tight_loop_or_a_copy",
            OUTAGE_PROBE,
        );
    }
    let s = start(vec![
        Reply::Json(text("first answer")),
        Reply::Json(text("second answer")),
    ])
    .await;
    s.slack.fail_posts_for(
        common::OUTAGE,
        vec![
            Answer::html(503, "<html><body>Service Unavailable</body></html>"),
            Answer::json(429, json!({"ok": false, "error": "ratelimited"}))
                .header("retry-after", 5),
            Answer::json(200, json!({"ok": false, "error": "internal_error"})),
        ],
    );
    let began = std::time::Instant::now();
    let first = s.event(dm("1764000100.000100", "first question"), "EvOut1", &[]);
    assert_eq!(first.await.status(), 200);
    s.slack.wait("chat.postMessage", 1).await;
    let second = s.event(dm("1764000100.000200", "second question"), "EvOut2", &[]);
    assert_eq!(second.await.status(), 200);
    let sends = || {
        let calls = s.slack.calls("chat.postMessage");
        common::Sends {
            tried: calls.iter().map(|c| c.at).collect(),
            sent: calls
                .iter()
                .filter(|c| !c.refused)
                .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
                .collect(),
        }
    };
    common::after_outage(
        "slack",
        began,
        common::rss_kib(),
        &["first answer", "second answer"],
        sends,
    )
    .await;
    assert_eq!(s.llm.requests().len(), 2, "each question asked once");
    s.daemon.shutdown().await;
}
