//! A session's conversation in and out of memory: a worker that left, or
//! an idle conversation unloaded, comes back from storage whole.

use crate::common;
use crate::sessions_manager::{Setup, dm, setup_with};

use std::time::Duration;

use common::fake_llm::{FakeLlm, Reply, text};
use switchboard::config::ResetMode;
use switchboard::sessions::ManagerSettings;

/// "remember 42", then `between` (which lets the conversation leave
/// memory), then "what was it?": the model sees the first exchange again,
/// read from storage.
async fn remembers_across(
    settings: impl FnOnce(&mut ManagerSettings),
    between: impl AsyncFnOnce(&Setup),
) -> Setup {
    let llm = FakeLlm::start(vec![
        Reply::Json(text("noted 42")),
        Reply::Json(text("it was 42")),
    ])
    .await;
    let s = setup_with(&llm, |c| c.sessions.reset.mode = ResetMode::None, settings).await;
    s.manager
        .submit(dm("1", "w1", "remember 42"))
        .await
        .unwrap();
    s.adapter.wait(1).await;
    between(&s).await;
    s.manager
        .submit(dm("1", "w2", "what was it?"))
        .await
        .unwrap();
    assert_eq!(s.adapter.wait(2).await[1].1, "it was 42");
    let second = llm.requests()[1]["messages"].to_string();
    assert!(
        second.contains("remember 42") && second.contains("noted 42"),
        "{second}"
    );
    s
}

#[tokio::test]
async fn a_session_woken_after_its_worker_left_restores_its_history() {
    remembers_across(
        |t| t.idle_after = Duration::from_millis(50),
        async |s| {
            common::eventually("the worker left", || async {
                s.manager.active_sessions() == 0
            })
            .await;
        },
    )
    .await;
}

#[tokio::test]
async fn an_idle_conversation_leaves_memory_and_comes_back_from_storage() {
    let s = remembers_across(
        |t| t.unload_after = Duration::from_secs(1),
        async |s| {
            common::eventually("the conversation is loaded", || async {
                s.manager.loaded_conversations() == 1
            })
            .await;
            common::eventually("the idle conversation is unloaded", || async {
                s.manager.loaded_conversations() == 0
            })
            .await;
            assert_eq!(s.manager.active_sessions(), 1, "the worker itself stays");
        },
    )
    .await;
    common::eventually("the conversation is loaded again", || async {
        s.manager.loaded_conversations() == 1
    })
    .await;
}

#[tokio::test]
async fn over_the_history_cache_a_conversation_leaves_memory_after_its_turn() {
    let s = remembers_across(
        |t| t.history_cache = 0,
        async |s| {
            common::eventually("the worker finished the turn", || async {
                s.manager.pending() == 0
            })
            .await;
            assert_eq!(s.manager.loaded_conversations(), 0);
            assert_eq!(s.manager.cached_history_bytes(), 0);
            assert_eq!(s.manager.active_sessions(), 1, "the worker itself stays");
        },
    )
    .await;
    common::eventually("the second turn finished", || async {
        s.manager.pending() == 0
    })
    .await;
    assert_eq!(s.manager.loaded_conversations(), 0);
}

#[tokio::test]
async fn the_history_cache_counts_what_conversations_hold() {
    let s = remembers_across(
        |t| t.unload_after = Duration::from_millis(300),
        async |s| {
            common::eventually("the first exchange is counted", || async {
                s.manager.cached_history_bytes() > "remember 42noted 42".len()
            })
            .await;
            assert_eq!(s.manager.loaded_conversations(), 1);
            common::eventually("the idle conversation is unloaded", || async {
                s.manager.loaded_conversations() == 0
            })
            .await;
            assert_eq!(s.manager.cached_history_bytes(), 0);
        },
    )
    .await;
    common::eventually("the second exchange is counted", || async {
        s.manager.cached_history_bytes() > 0
    })
    .await;
}

#[tokio::test]
async fn past_the_idle_worker_cap_quiet_workers_retire_and_come_back_whole() {
    let llm = FakeLlm::responding(|_| Reply::Json(text("ok"))).await;
    let s = setup_with(
        &llm,
        |c| c.sessions.reset.mode = ResetMode::None,
        |t| {
            t.unload_after = Duration::from_millis(300);
            t.idle_workers = 1;
        },
    )
    .await;
    // Two sessions (the users the setup allows), one message each.
    for user in 1..=2 {
        let user = user.to_string();
        s.manager
            .submit(dm(&user, &format!("a{user}"), &format!("remember {user}")))
            .await
            .unwrap();
    }
    s.adapter.wait(2).await;
    // Quiet for the unload time: each drops its history, and a worker
    // retires while more than one is alive; worker_idle_secs (600 s) is
    // far off.
    common::eventually("down to the idle cap", || async {
        s.manager.active_sessions() == 1
    })
    .await;
    // A quiet period: the cap's worker does not retire.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(s.manager.active_sessions(), 1, "the cap's worker stays");
    common::eventually("every history dropped", || async {
        s.manager.loaded_conversations() == 0
    })
    .await;
    // A retired session's next message starts a worker with its history.
    for user in 1..=2 {
        let user = user.to_string();
        s.manager
            .submit(dm(&user, &format!("b{user}"), "and again"))
            .await
            .unwrap();
    }
    s.adapter.wait(4).await;
    let requests = llm.requests();
    for user in 1..=2 {
        let again = requests
            .iter()
            .rev()
            .map(|r| r["messages"].to_string())
            .find(|m| m.contains(&format!("remember {user}")))
            .unwrap();
        assert!(again.contains("and again"), "session {user}: {again}");
    }
}

/// In a shared group session (not one per user), a second person's turn
/// acts for them: the first sender's memory notes and their other
/// conversations stay out of reach.
#[tokio::test]
async fn a_second_person_in_a_shared_session_cannot_read_the_first_ones_notes() {
    use common::fake_llm::calls;
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[(
            "n1",
            "memory",
            r#"{"action":"add","content":"locker code: lighthouse"}"#,
        )])),
        Reply::Json(text("noted")),
        Reply::Json(text("hi team")),
        Reply::Json(calls(&[
            ("m1", "memory", r#"{"action":"list"}"#),
            ("s1", "session_search", r#"{"query":"lighthouse"}"#),
        ])),
        Reply::Json(text("nothing known")),
    ])
    .await;
    let s = setup_with(&llm, |c| c.sessions.group_sessions_per_user = false, |_| {}).await;
    let in_group = |user: &str, id: &str, words: &str| switchboard::platform::InboundEvent {
        kind: switchboard::platform::ChatKind::Group,
        chat_id: "-100".into(),
        mentioned: true,
        ..dm(user, id, words)
    };
    s.manager
        .submit(dm("1", "p1", "remember my locker code, it is lighthouse"))
        .await
        .unwrap();
    s.adapter.wait(1).await;
    s.manager
        .submit(in_group("1", "g1", "hello team"))
        .await
        .unwrap();
    s.adapter.wait(2).await;
    s.manager
        .submit(in_group("2", "g2", "what do you know about the locker?"))
        .await
        .unwrap();
    assert_eq!(s.adapter.wait(3).await[2].1, "nothing known");
    let second_person = &llm.requests()[4];
    let results = common::agent_harness::tool_messages(second_person);
    assert_eq!(results.len(), 2, "{results:?}");
    for (call, result) in &results {
        assert!(!result.contains("locker"), "{call}: {result}");
    }
    // The first person's note travels with no message to the second's turn.
    let asked = second_person["messages"].to_string();
    assert!(
        !asked.contains("locker code") && !asked.contains("Notes you saved"),
        "{asked}"
    );
    // The first person still has their note.
    assert_eq!(s.store.notes("telegram:1").await.unwrap().len(), 1);
}
