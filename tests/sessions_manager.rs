//! The session manager with a scripted model and a fake adapter: replies,
//! duplicates, access control before any turn, order within a session,
//! slash commands, and inbox replay.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::fake_llm::{FakeLlm, Reply, calls, text};
use switchboard::agent::AgentDeps;
use switchboard::approvals::{ApprovalPolicy, ApprovalPrompter, Broker, ChatRef, Prompt};
use switchboard::config::{BusyInputMode, ResetMode};
use switchboard::config::{Config, Env};
use switchboard::sessions::{
    ChatKind, InboundEvent, ManagerSettings, Replier, SessionManager, Submitted,
};
use switchboard::store::{NewInboxEvent, Store};
use switchboard::tools::ToolRuntime;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
struct FakeAdapter {
    sent: Mutex<Vec<(String, String)>>,
    prompts: Mutex<Vec<Prompt>>,
    closed: Mutex<Vec<String>>,
    changed: Notify,
}

#[async_trait::async_trait]
impl Replier for FakeAdapter {
    async fn reply(&self, event: &InboundEvent, text: &str) {
        self.sent
            .lock()
            .unwrap()
            .push((event.chat_id.clone(), text.to_string()));
        self.changed.notify_waiters();
    }
}

#[async_trait::async_trait]
impl ApprovalPrompter for FakeAdapter {
    async fn show(&self, _chat: &ChatRef, prompt: &Prompt) -> Result<String, String> {
        self.prompts.lock().unwrap().push(prompt.clone());
        self.changed.notify_waiters();
        Ok("prompt-1".into())
    }

    async fn close(&self, _chat: &ChatRef, _message: &str, outcome: &str) -> Result<(), String> {
        self.closed.lock().unwrap().push(outcome.to_string());
        Ok(())
    }
}

impl FakeAdapter {
    async fn wait(&self, n: usize) -> Vec<(String, String)> {
        self.until(|a| {
            let sent = a.sent.lock().unwrap();
            (sent.len() >= n).then(|| sent.clone())
        })
        .await
    }

    async fn until<T>(&self, check: impl Fn(&Self) -> Option<T>) -> T {
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let notified = self.changed.notified();
                if let Some(found) = check(self) {
                    return found;
                }
                notified.await;
            }
        })
        .await
        .expect("the adapter saw it in time")
    }

    fn texts(&self) -> Vec<String> {
        self.sent
            .lock()
            .unwrap()
            .iter()
            .map(|(_, t)| t.clone())
            .collect()
    }
}

struct Setup {
    manager: SessionManager,
    adapter: Arc<FakeAdapter>,
    store: Store,
    dir: tempfile::TempDir,
}

async fn setup(llm: &FakeLlm) -> Setup {
    setup_with(llm, |_| {}, |_| {}).await
}

async fn setup_with(
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
    let tools = ToolRuntime::build(&config, &Env::default()).unwrap();
    let deps = Arc::new(AgentDeps::from_config(
        &config,
        &Env::default(),
        tools,
        store.clone(),
    ));
    let adapter = Arc::new(FakeAdapter::default());
    let broker = Arc::new(Broker::new(store.clone(), &config.approvals));
    broker.register_prompter("telegram", adapter.clone()).await;
    let policy = ApprovalPolicy::new(store.clone(), broker.clone(), config.approvals.mode, None);
    let mut settings = ManagerSettings::from_config(&config);
    tune(&mut settings);
    let manager = SessionManager::new(
        config,
        deps,
        adapter.clone(),
        Arc::new(policy),
        settings,
        CancellationToken::new(),
    )
    .with_broker(broker);
    Setup {
        manager,
        adapter,
        store,
        dir,
    }
}

fn dm(user: &str, id: &str, text: &str) -> InboundEvent {
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
        entity: None,
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
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        llm.requests().len(),
        1,
        "the redelivery never reached the model"
    );
    assert!(
        s.store.inbox_pending(10).await.unwrap().is_empty(),
        "processed"
    );
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
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(s.store.inbox_pending(10).await.unwrap().is_empty());
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
    while llm.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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
    while llm.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        s.store.inbox_pending(10).await.unwrap().is_empty(),
        "both events are done"
    );
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
    while s.manager.active_sessions() > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
    while llm.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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

#[tokio::test]
async fn approve_and_deny_reach_the_waiting_turn_past_the_queue() {
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[(
            "c1",
            "terminal",
            r#"{"command":"git reset --hard"}"#,
        )])),
        Reply::Json(text("ran it")),
    ])
    .await;
    let s = setup(&llm).await;
    s.manager
        .submit(dm("1", "p1", "reset the repo"))
        .await
        .unwrap();
    let prompt = s
        .adapter
        .until(|a| a.prompts.lock().unwrap().first().cloned())
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
    assert!(s.adapter.closed.lock().unwrap()[0].contains("Allowed once by User 1"));
    // Nothing is waiting any more.
    s.manager.submit(dm("1", "p4", "/deny")).await.unwrap();
    assert_eq!(
        s.adapter.wait(4).await[3].1,
        "Nothing is waiting for approval here."
    );
}

#[tokio::test]
async fn a_session_woken_after_its_worker_left_restores_its_history() {
    let llm = FakeLlm::start(vec![
        Reply::Json(text("noted 42")),
        Reply::Json(text("it was 42")),
    ])
    .await;
    let s = setup_with(
        &llm,
        |c| c.sessions.reset.mode = ResetMode::None,
        |t| t.idle_after = Duration::from_millis(50),
    )
    .await;
    s.manager
        .submit(dm("1", "w1", "remember 42"))
        .await
        .unwrap();
    s.adapter.wait(1).await;
    while s.manager.active_sessions() > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
}
