//! Steering (`busy_input_mode = "steer"`, `/steer <words>`): a message
//! sent while its sender's turn runs a tool lands in that turn after the
//! batch; another person's never does.

use crate::common;
use crate::sessions_manager::{dm, group, setup_with};

use common::agent_harness::tool_messages;
use common::fake_llm::{FakeLlm, Reply, calls, text};
use switchboard::config::BusyInputMode;

/// A message sent while a turn runs a tool lands in that turn after the
/// batch (steer mode, or `/steer` in queue mode): the model reads it with
/// the tool's result, one answer covers both, and the message is not run
/// again on its own.
#[tokio::test]
async fn a_steered_message_lands_between_tool_batches() {
    for (mode, second) in [
        (BusyInputMode::Steer, "also add tests"),
        (BusyInputMode::Queue, "/steer also add tests"),
    ] {
        let llm = FakeLlm::start(vec![
            Reply::Json(calls(&[(
                "c1",
                "terminal",
                r#"{"command": "until [ -f go ]; do sleep 0.05; done; echo built"}"#,
            )])),
            Reply::Json(text("built, with tests")),
        ])
        .await;
        let s = setup_with(&llm, |c| c.agent.busy_input_mode = mode, |_| {}).await;
        s.manager.submit(dm("1", "s1", "build it")).await.unwrap();
        common::eventually("the tool runs", || async {
            llm.requests().len() == 1
                && s.dir
                    .path()
                    .join("ws")
                    .read_dir()
                    .is_ok_and(|mut d| d.next().is_some())
        })
        .await;
        s.manager.submit(dm("1", "s2", second)).await.unwrap();
        s.adapter
            .until(|a| {
                a.texts()
                    .iter()
                    .any(|t| t.starts_with("Added to the request"))
                    .then_some(())
            })
            .await;
        let ws = common::session_workspace(&s.dir.path().join("ws"));
        std::fs::write(ws.join("go"), "").unwrap();
        s.adapter
            .until(|a| {
                a.texts()
                    .contains(&"built, with tests".to_string())
                    .then_some(())
            })
            .await;
        common::eventually("both events are done", || async {
            s.store.inbox_pending(10).await.unwrap().is_empty()
        })
        .await;
        let requests = llm.requests();
        assert_eq!(
            requests.len(),
            2,
            "{mode:?}: the steered message ran no turn of its own"
        );
        let results = tool_messages(&requests[1]);
        let (_, result) = results.last().unwrap();
        assert!(
            result.contains("built")
                && result.contains(switchboard::agent::STEER_PREFIX)
                && result.ends_with("also add tests"),
            "{mode:?}: {result}"
        );
    }
}

/// In a thread shared by several people, only the running turn's own
/// sender steers it: another's message waits for a turn of its own,
/// which acts for them.
#[tokio::test]
async fn another_persons_message_is_never_steered_into_a_turn() {
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[(
            "c1",
            "terminal",
            r#"{"command": "until [ -f go ]; do sleep 0.05; done; echo built"}"#,
        )])),
        Reply::Json(text("answer one")),
        Reply::Json(text("answer two")),
    ])
    .await;
    let s = setup_with(
        &llm,
        |c| c.agent.busy_input_mode = BusyInputMode::Steer,
        |_| {},
    )
    .await;
    let mut opening = group("1", "t-1", "build it", Some("t1"));
    opening.mentioned = true;
    s.manager.submit(opening).await.unwrap();
    common::eventually("the tool runs", || async {
        llm.requests().len() == 1
            && s.dir
                .path()
                .join("ws")
                .read_dir()
                .is_ok_and(|mut d| d.next().is_some())
    })
    .await;
    s.manager
        .submit(group("2", "t-2", "/steer delete the tests", Some("t1")))
        .await
        .unwrap();
    let ws = common::session_workspace(&s.dir.path().join("ws"));
    std::fs::write(ws.join("go"), "").unwrap();
    s.adapter
        .until(|a| a.texts().contains(&"answer two".to_string()).then_some(()))
        .await;
    assert!(
        !s.adapter
            .texts()
            .iter()
            .any(|t| t.starts_with("Added to the request")),
        "{:?}",
        s.adapter.texts()
    );
    let requests = llm.requests();
    assert!(!requests[1].to_string().contains("delete the tests"));
    assert!(requests[2].to_string().contains("delete the tests"));
}
