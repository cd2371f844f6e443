//! The session manager with a scripted model and a fake adapter: replies,
//! duplicates, access control before any turn, order within a session,
//! slash commands, and inbox replay.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::fake_llm::{FakeLlm, Reply, calls, text};
use common::fake_port::FakePort;
use switchboard::agent::AgentDeps;
use switchboard::approvals::{ApprovalPolicy, Broker};
use switchboard::config::{BusyInputMode, ResetMode};
use switchboard::config::{Config, Env};
use switchboard::sessions::{
    ChatKind, InboundEvent, Links, ManagerSettings, SessionManager, Submitted,
};
use switchboard::store::{NewInboxEvent, Store};
use switchboard::tools::ToolRuntime;
use tokio_util::sync::CancellationToken;

pub(crate) struct Setup {
    pub(crate) manager: SessionManager,
    pub(crate) adapter: Arc<FakePort>,
    pub(crate) store: Store,
    pub(crate) dir: tempfile::TempDir,
}

pub(crate) async fn setup(llm: &FakeLlm) -> Setup {
    setup_with(llm, |_| {}, |_| {}).await
}

pub(crate) async fn setup_with(
    llm: &FakeLlm,
    configure: impl FnOnce(&mut Config),
    tune: impl FnOnce(&mut ManagerSettings),
) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.llm.base_url = llm.url.clone();
    config.llm.api_key_env = String::new();
    config.agent.workspace = dir.path().join("ws");
    config.telegram.allowed_users = vec![1, 2];
    config.storage.url = format!("sqlite://{}/sb.db", dir.path().display());
    configure(&mut config);
    let store = Store::open(&config.storage).await.unwrap();
    let tools = ToolRuntime::build(
        &config,
        &Env::default(),
        switchboard::adapters::platforms(&config),
    )
    .unwrap();
    let deps = Arc::new(AgentDeps::from_config(
        &config,
        &Env::default(),
        tools,
        store.clone(),
    ));
    let platforms = deps.tools.platforms.clone();
    let adapter = Arc::new(FakePort::default());
    platforms.attach("telegram", adapter.clone());
    let broker = Arc::new(Broker::new(store.clone(), &config.approvals, platforms));
    let policy = ApprovalPolicy::new(store.clone(), broker.clone(), config.approvals.mode, None);
    let mut settings = ManagerSettings::from_config(&config);
    tune(&mut settings);
    let manager = SessionManager::new(
        config,
        deps,
        Links::single(Arc::new(policy), broker),
        settings,
        CancellationToken::new(),
    );
    Setup {
        manager,
        adapter,
        store,
        dir,
    }
}

pub(crate) fn dm(user: &str, id: &str, text: &str) -> InboundEvent {
    InboundEvent {
        platform: "telegram".into(),
        kind: ChatKind::Dm,
        chat_id: user.into(),
        thread_id: None,
        user_id: user.into(),
        user_name: format!("User {user}"),
        roles: vec![],
        text: text.into(),
        event_id: id.into(),
        message_id: None,
        mentioned: false,
        from_bot: false,
        in_thread: false,
        attachments: Vec::new(),
        revision: switchboard::platform::Revision::New,
    }
}

#[tokio::test]
async fn a_message_is_answered_once_even_when_redelivered() {
    let llm = FakeLlm::start(vec![Reply::Json(text("hello back"))]).await;
    let s = setup(&llm).await;
    assert_eq!(
        s.manager.submit(dm("1", "u1", "hello")).await.unwrap(),
        Submitted::Accepted
    );
    assert_eq!(
        s.adapter.wait(1).await,
        [("1".to_string(), "hello back".to_string())]
    );
    assert_eq!(
        s.manager.submit(dm("1", "u1", "hello")).await.unwrap(),
        Submitted::Duplicate
    );
    // The duplicate was dropped before `submit` answered: no turn for it
    // can start later.
    assert_eq!(
        llm.requests().len(),
        1,
        "the redelivery never reached the model"
    );
    assert_eq!(common::inbox_count(&s.store, "telegram").await, 1);
    // The row is marked processed just after the answer goes out.
    common::eventually("processed", || async {
        s.store.inbox_pending(10).await.unwrap().is_empty()
    })
    .await;
    let system = llm.requests()[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        system.contains("direct message on telegram; the user is User 1"),
        "{system}"
    );
}

#[tokio::test]
async fn strangers_get_pairing_and_no_turn() {
    let llm = FakeLlm::start(vec![]).await;
    let s = setup(&llm).await;
    assert_eq!(
        s.manager.submit(dm("9", "u1", "let me in")).await.unwrap(),
        Submitted::Pairing
    );
    let sent = s.adapter.wait(1).await;
    assert!(
        sent[0].1.contains("switchboard pairing approve"),
        "{sent:?}"
    );
    let mut group = dm("9", "u2", "hi all");
    group.kind = ChatKind::Group;
    group.chat_id = "-100".into();
    group.mentioned = true;
    assert_eq!(
        s.manager.submit(group).await.unwrap(),
        Submitted::Ignored("sender not on the allowlist")
    );
    assert!(llm.requests().is_empty());
    assert!(
        s.store.inbox_pending(10).await.unwrap().is_empty(),
        "unauthorised traffic is not even stored"
    );
}

#[tokio::test]
async fn one_session_answers_in_order() {
    let llm = FakeLlm::start(vec![
        Reply::Delayed(
            Duration::from_millis(300),
            Box::new(Reply::Json(text("first answer"))),
        ),
        Reply::Json(text("second answer")),
    ])
    .await;
    let s = setup(&llm).await;
    s.manager.submit(dm("1", "a", "one")).await.unwrap();
    s.manager.submit(dm("1", "b", "two")).await.unwrap();
    // The second message is acknowledged as queued, then both are answered.
    let sent = s.adapter.wait(3).await;
    assert_eq!(
        sent.iter()
            .map(|(_, t)| t.as_str())
            .filter(|t| !t.starts_with("Got it"))
            .collect::<Vec<_>>(),
        ["first answer", "second answer"]
    );
    let second = &llm.requests()[1]["messages"];
    assert!(
        second.to_string().contains("first answer"),
        "the second turn saw the first"
    );
}

#[tokio::test]
async fn slash_commands_bypass_the_queue() {
    let llm = FakeLlm::start(vec![Reply::Json(text("noted"))]).await;
    let s = setup(&llm).await;
    assert_eq!(
        s.manager.submit(dm("1", "h", "/help")).await.unwrap(),
        Submitted::Command
    );
    assert!(s.adapter.wait(1).await[0].1.contains("/new"));
    s.manager
        .submit(dm("1", "m", "remember this"))
        .await
        .unwrap();
    s.adapter.wait(2).await;
    assert_eq!(
        s.manager.submit(dm("1", "s", "/status")).await.unwrap(),
        Submitted::Command
    );
    let status = s.adapter.wait(3).await[2].1.clone();
    assert!(
        status.contains("telegram:dm:1") && status.contains("2 messages"),
        "{status}"
    );
    assert_eq!(
        s.manager.submit(dm("1", "n", "/new")).await.unwrap(),
        Submitted::Command
    );
    s.adapter.wait(4).await;
    assert!(
        s.store
            .open_session_by_key("telegram:dm:1")
            .await
            .unwrap()
            .is_none(),
        "session ended"
    );
    assert_eq!(llm.requests().len(), 1, "commands never reach the model");
}

#[tokio::test]
async fn unprocessed_inbox_events_are_replayed_in_order() {
    let llm = FakeLlm::start(vec![Reply::Json(text("r1")), Reply::Json(text("r2"))]).await;
    let s = setup(&llm).await;
    for (id, text) in [("x1", "first"), ("x2", "second")] {
        let payload = serde_json::to_string(&dm("1", id, text)).unwrap();
        s.store
            .inbox_insert(&NewInboxEvent {
                platform: "telegram",
                dedupe_key: &format!("telegram:{id}"),
                session_key: "telegram:dm:1",
                payload: &payload,
            })
            .await
            .unwrap();
    }
    assert_eq!(s.manager.replay().await.unwrap(), 2);
    let sent = s.adapter.wait(2).await;
    assert_eq!(
        sent.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>(),
        ["r1", "r2"]
    );
    let first = llm.requests()[0]["messages"].to_string();
    assert!(first.contains("first") && !first.contains("second"));
    common::eventually("the replayed events are done", || async {
        s.store.inbox_pending(10).await.unwrap().is_empty()
    })
    .await;
}

#[tokio::test]
async fn queued_messages_get_one_acknowledgement_per_window() {
    let llm = FakeLlm::start(vec![
        Reply::Delayed(
            Duration::from_millis(600),
            Box::new(Reply::Json(text("a1"))),
        ),
        Reply::Json(text("a2")),
        Reply::Json(text("a3")),
    ])
    .await;
    let s = setup(&llm).await;
    s.manager.submit(dm("1", "q1", "one")).await.unwrap();
    common::eventually("the first turn asked", || async {
        !llm.requests().is_empty()
    })
    .await;
    s.manager.submit(dm("1", "q2", "two")).await.unwrap();
    s.manager.submit(dm("1", "q3", "three")).await.unwrap();
    let sent = s.adapter.wait(4).await;
    let texts: Vec<&str> = sent.iter().map(|(_, t)| t.as_str()).collect();
    assert!(texts[0].starts_with("Got it"), "{texts:?}");
    assert_eq!(&texts[1..], ["a1", "a2", "a3"]);
    assert_eq!(
        texts.iter().filter(|t| t.starts_with("Got it")).count(),
        1,
        "one acknowledgement per 30 s"
    );
}

#[tokio::test]
async fn interrupt_mode_cancels_the_running_turn_for_the_new_message() {
    let llm = FakeLlm::start(vec![
        Reply::Delayed(
            Duration::from_secs(5),
            Box::new(Reply::Json(text("too late"))),
        ),
        Reply::Json(text("answer to two")),
    ])
    .await;
    let s = setup_with(
        &llm,
        |c| c.agent.busy_input_mode = BusyInputMode::Interrupt,
        |_| {},
    )
    .await;
    s.manager.submit(dm("1", "i1", "one")).await.unwrap();
    common::eventually("the first turn asked", || async {
        !llm.requests().is_empty()
    })
    .await;
    s.manager.submit(dm("1", "i2", "two")).await.unwrap();
    s.adapter
        .until(|a| {
            a.texts()
                .contains(&"answer to two".to_string())
                .then_some(())
        })
        .await;
    assert!(!s.adapter.texts().contains(&"too late".to_string()));
    let second = llm.requests()[1]["messages"].to_string();
    assert!(second.contains("two"), "{second}");
    common::eventually("both events are done", || async {
        s.store.inbox_pending(10).await.unwrap().is_empty()
    })
    .await;
}

#[tokio::test]
async fn idle_sessions_start_over_with_a_notice() {
    let llm = FakeLlm::start(vec![Reply::Json(text("r1")), Reply::Json(text("r2"))]).await;
    let s = setup_with(
        &llm,
        |c| {
            c.sessions.reset.mode = ResetMode::Idle;
            c.sessions.reset.idle_minutes = 60;
        },
        |t| t.idle_after = Duration::from_millis(50),
    )
    .await;
    s.manager
        .submit(dm("1", "r1", "remember 42"))
        .await
        .unwrap();
    s.adapter.wait(1).await;
    let first = s
        .store
        .open_session_by_key("telegram:dm:1")
        .await
        .unwrap()
        .unwrap();
    common::eventually("the worker left", || async {
        s.manager.active_sessions() == 0
    })
    .await;
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}/sb.db", s.dir.path().display()))
        .await
        .unwrap();
    sqlx::query("UPDATE sessions SET last_active_at = last_active_at - 7200000")
        .execute(&pool)
        .await
        .unwrap();
    s.manager
        .submit(dm("1", "r2", "what number?"))
        .await
        .unwrap();
    let sent = s.adapter.wait(3).await;
    assert!(sent[1].1.contains("idle for more than 1 hour"), "{sent:?}");
    assert_eq!(sent[2].1, "r2");
    let ended = s.store.session(&first.id).await.unwrap().unwrap();
    assert_eq!(ended.end_reason.as_deref(), Some("reset: idle"));
    let second = llm.requests()[1]["messages"].to_string();
    assert!(!second.contains("remember 42"), "fresh history: {second}");
}

#[tokio::test]
async fn a_full_queue_refuses_without_storing() {
    let llm = FakeLlm::start(vec![
        Reply::Delayed(
            Duration::from_millis(800),
            Box::new(Reply::Json(text("a1"))),
        ),
        Reply::Json(text("a2")),
    ])
    .await;
    let s = setup_with(&llm, |_| {}, |t| t.queue_cap = 1).await;
    assert_eq!(
        s.manager.submit(dm("1", "f1", "one")).await.unwrap(),
        Submitted::Accepted
    );
    common::eventually("the first turn asked", || async {
        !llm.requests().is_empty()
    })
    .await;
    assert_eq!(
        s.manager.submit(dm("1", "f2", "two")).await.unwrap(),
        Submitted::Accepted
    );
    assert_eq!(
        s.manager.submit(dm("1", "f3", "three")).await.unwrap(),
        Submitted::Busy
    );
    assert!(
        s.adapter
            .texts()
            .iter()
            .any(|t| t.contains("still working")),
        "the sender was told"
    );
    let stored: Vec<String> = s
        .store
        .inbox_pending(10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.payload)
        .collect();
    assert_eq!(stored.len(), 2, "the refused event was not stored");
    assert!(stored.iter().all(|p| !p.contains("three")));
    s.adapter
        .until(|a| a.texts().contains(&"a2".to_string()).then_some(()))
        .await;
    assert_eq!(llm.requests().len(), 2, "only the accepted two ran");
}

#[tokio::test]
async fn the_inbox_cap_applies_across_sessions() {
    let llm = FakeLlm::start(vec![Reply::Delayed(
        Duration::from_millis(500),
        Box::new(Reply::Json(text("a1"))),
    )])
    .await;
    let s = setup_with(&llm, |c| c.sessions.max_pending = 1, |_| {}).await;
    s.manager.submit(dm("1", "c1", "one")).await.unwrap();
    assert_eq!(
        s.manager
            .submit(dm("2", "c2", "other session"))
            .await
            .unwrap(),
        Submitted::Busy
    );
    s.adapter
        .until(|a| a.texts().contains(&"a1".to_string()).then_some(()))
        .await;
    for _ in 0..100 {
        if s.manager.pending() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(s.manager.pending(), 0);
    assert_eq!(
        s.manager
            .submit(dm("2", "c2", "other session"))
            .await
            .unwrap(),
        Submitted::Accepted,
        "refused, not remembered: the redelivery is taken once there is room"
    );
}

/// A model that runs `git reset --hard` (which asks), then says "ran it".
pub(crate) fn resets_the_repo() -> Vec<Reply> {
    vec![
        Reply::Json(calls(&[(
            "c1",
            "terminal",
            r#"{"command":"git reset --hard"}"#,
        )])),
        Reply::Json(text("ran it")),
    ]
}

#[tokio::test]
async fn approve_and_deny_reach_the_waiting_turn_past_the_queue() {
    let llm = FakeLlm::start(resets_the_repo()).await;
    let s = setup(&llm).await;
    s.manager
        .submit(dm("1", "p1", "reset the repo"))
        .await
        .unwrap();
    let prompt = s
        .adapter
        .until(|a| a.shown.lock().unwrap().first().cloned())
        .await;
    assert!(prompt.command.contains("git reset --hard"));
    // Someone else (allowed to talk to the bot, not an approver) is refused.
    let mut other = dm("2", "p2", &format!("/approve {}", prompt.approval_id));
    other.chat_id = "1".into();
    assert_eq!(s.manager.submit(other).await.unwrap(), Submitted::Command);
    let refused = s.adapter.wait(1).await[0].1.clone();
    assert!(refused.contains("Only the person who asked"), "{refused}");
    // The requester answers while their own turn is still running.
    assert_eq!(
        s.manager.submit(dm("1", "p3", "/approve")).await.unwrap(),
        Submitted::Command
    );
    let sent = s.adapter.wait(3).await;
    assert!(
        sent[1].1.starts_with("Done: approved by User 1"),
        "{sent:?}"
    );
    assert_eq!(sent[2].1, "ran it");
    assert!(
        s.adapter.closed.lock().unwrap()[0]
            .1
            .contains("Allowed once by User 1")
    );
    // Nothing is waiting any more.
    s.manager.submit(dm("1", "p4", "/deny")).await.unwrap();
    assert_eq!(
        s.adapter.wait(4).await[3].1,
        "Nothing is waiting for approval here."
    );
}

pub(crate) fn group(user: &str, id: &str, text: &str, thread: Option<&str>) -> InboundEvent {
    InboundEvent {
        kind: ChatKind::Group,
        chat_id: "-100".into(),
        thread_id: thread.map(str::to_string),
        in_thread: thread.is_some(),
        ..dm(user, id, text)
    }
}

#[tokio::test]
async fn in_groups_commands_come_before_the_mention_rule_and_threads_continue() {
    let llm = FakeLlm::start(vec![
        Reply::Json(text("first answer")),
        Reply::Json(text("thread answer")),
    ])
    .await;
    let s = setup(&llm).await;
    // Telegram's default: require_mention = true.
    assert_eq!(
        s.manager
            .submit(group("1", "g1", "hello all", None))
            .await
            .unwrap(),
        Submitted::Ignored("the bot was not mentioned")
    );
    assert_eq!(
        s.manager
            .submit(group("1", "g2", "/status", None))
            .await
            .unwrap(),
        Submitted::Command,
        "a command needs no mention"
    );
    assert!(
        s.adapter.wait(1).await[0]
            .1
            .starts_with("No conversation yet")
    );
    // A thread without a session of the bot needs a mention too ...
    assert_eq!(
        s.manager
            .submit(group("1", "g3", "anyone?", Some("t1")))
            .await
            .unwrap(),
        Submitted::Ignored("the bot was not mentioned")
    );
    // ... the bot's own thread does not.
    let mut opening = group("1", "g4", "look at this", Some("t1"));
    opening.mentioned = true;
    assert_eq!(
        s.manager.submit(opening).await.unwrap(),
        Submitted::Accepted
    );
    assert_eq!(s.adapter.wait(2).await[1].1, "first answer");
    assert_eq!(
        s.manager
            .submit(group("1", "g5", "and more", Some("t1")))
            .await
            .unwrap(),
        Submitted::Accepted
    );
    assert_eq!(s.adapter.wait(3).await[2].1, "thread answer");
}

#[tokio::test]
async fn a_question_is_answered_by_the_next_message_or_a_press_and_closed() {
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[(
            "q1",
            "clarify",
            r#"{"question":"Which colour?","choices":["red","blue"]}"#,
        )])),
        Reply::Json(text("blue it is")),
        Reply::Json(calls(&[("q2", "clarify", r#"{"question":"Your name?"}"#)])),
        Reply::Json(text("hello Ann")),
    ])
    .await;
    let s = setup(&llm).await;
    s.manager.submit(dm("1", "a1", "paint it")).await.unwrap();
    let shown = s.adapter.prompt(1).await;
    assert_eq!(shown.prompt.text, "❓ Which colour?");
    let labels: Vec<&str> = shown
        .prompt
        .choices
        .iter()
        .map(|c| c.label.as_str())
        .collect();
    assert_eq!(labels, ["red", "blue"]);
    let press = |user: &str, data: &str| switchboard::sessions::Press {
        chat: shown.chat.clone(),
        actor: switchboard::platform::Actor {
            platform: "telegram".into(),
            user_id: user.into(),
            name: user.into(),
            account: None,
        },
        data: data.into(),
    };
    let blue = shown.prompt.choices[1].data.clone();
    assert_eq!(
        s.manager.press(&press("2", &blue)).await,
        Err("Only the person asked can answer.".into())
    );
    assert_eq!(s.manager.press(&press("1", &blue)).await, Ok("blue".into()));
    assert_eq!(
        s.manager.press(&press("1", &blue)).await,
        Err("This question was already answered.".into())
    );
    assert_eq!(s.adapter.wait(1).await[0].1, "blue it is");
    assert_eq!(
        s.adapter.closed(),
        [("m1".to_string(), "❓ Which colour?\n→ blue".to_string())]
    );

    s.manager.submit(dm("1", "a2", "greet me")).await.unwrap();
    s.adapter.prompt(2).await;
    // A command stays a command while a question waits.
    assert_eq!(
        s.manager.submit(dm("1", "a3", "/status")).await.unwrap(),
        Submitted::Command
    );
    // An edit replays words written before the question: it answers nothing.
    let mut edit = dm("1", "a1", "Bob");
    edit.revision = switchboard::platform::Revision::Edited;
    assert_ne!(
        s.manager.submit(edit).await.unwrap(),
        Submitted::Command,
        "an edit is not an answer"
    );
    assert_eq!(
        s.manager.submit(dm("1", "a4", "Ann")).await.unwrap(),
        Submitted::Command,
        "the answer is taken, not queued as a message"
    );
    let sent = s.adapter.wait(3).await;
    assert_eq!(sent[2].1, "hello Ann");
    assert_eq!(s.adapter.closed()[1].1, "❓ Your name?\n→ Ann");
    let asked = llm.requests()[3]["messages"].as_array().unwrap().clone();
    assert!(
        asked.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("Ann")
    );
}

#[tokio::test]
async fn a_button_that_is_no_prompt_of_ours_is_refused() {
    let llm = FakeLlm::start(vec![]).await;
    let s = setup(&llm).await;
    let press = switchboard::sessions::Press {
        chat: switchboard::platform::ChatRef {
            platform: "telegram".into(),
            chat: "1".into(),
            thread: None,
        },
        actor: switchboard::platform::Actor {
            platform: "telegram".into(),
            user_id: "1".into(),
            name: "Ann".into(),
            account: None,
        },
        data: "xx:forged".into(),
    };
    assert_eq!(
        s.manager.press(&press).await,
        Err("This button is no longer active.".into())
    );
    let forged = switchboard::sessions::Press {
        data: "ap:0123456789abcdef0123456789abcdef:once".into(),
        ..press
    };
    assert_eq!(
        s.manager.press(&forged).await,
        Err("This approval does not exist.".into())
    );
}

/// Log output kept in memory.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn log_lines_say_which_session_turn_and_tool_they_come_from() {
    const PROBE: &str = "SWITCHBOARD_LOG_PROBE";
    if std::env::var_os(PROBE).is_none() {
        // Run alone in a process of its own: tracing's callsite caches are
        // process-wide, and other tests' threads race this one's subscriber.
        let name = "sessions_manager::log_lines_say_which_session_turn_and_tool_they_come_from";
        tokio::task::spawn_blocking(move || common::run_alone(name, PROBE))
            .await
            .unwrap();
        return;
    }
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_span_list(true)
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .finish();
    // This test's runtime has one thread: the workers log through it too.
    let _guard = tracing::subscriber::set_default(subscriber);
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[("r1", "read_file", r#"{"path":"missing.txt"}"#)])),
        Reply::Json(text("no such file")),
    ])
    .await;
    let s = setup(&llm).await;
    s.manager.submit(dm("1", "l1", "read it")).await.unwrap();
    assert_eq!(s.adapter.wait(1).await[0].1, "no such file");
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let line = logs
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|l| l["fields"]["message"] == "tool call finished")
        .expect("the tool call was logged");
    let spans = line["spans"].as_array().unwrap();
    let names: Vec<&str> = spans.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["session", "turn", "tool"], "{line}");
    assert_eq!(spans[0]["session.key"], "telegram:dm:1");
    assert_eq!(spans[2]["tool.name"], "read_file");
    assert_eq!(line["fields"]["tool.outcome"], "error");
}
