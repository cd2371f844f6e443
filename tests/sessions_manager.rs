//! The session manager with a scripted model and a fake adapter: replies,
//! duplicates, access control before any turn, order within a session,
//! slash commands, and inbox replay.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::fake_llm::{FakeLlm, Reply, text};
use switchboard::agent::AgentDeps;
use switchboard::config::{Config, Env};
use switchboard::sessions::{
    ChatKind, InboundEvent, ManagerSettings, Replier, SessionManager, Submitted,
};
use switchboard::store::{NewInboxEvent, Store};
use switchboard::tools::{AllowAll, ToolRuntime};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
struct FakeAdapter {
    sent: Mutex<Vec<(String, String)>>,
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

impl FakeAdapter {
    async fn wait(&self, n: usize) -> Vec<(String, String)> {
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let notified = self.changed.notified();
                if self.sent.lock().unwrap().len() >= n {
                    return self.sent.lock().unwrap().clone();
                }
                notified.await;
            }
        })
        .await
        .expect("replies arrive")
    }
}

struct Setup {
    manager: SessionManager,
    adapter: Arc<FakeAdapter>,
    store: Store,
    _dir: tempfile::TempDir,
}

async fn setup(llm: &FakeLlm) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.llm.base_url = llm.url.clone();
    config.llm.api_key_env = String::new();
    config.agent.workspace = dir.path().join("ws");
    config.telegram.allowed_users = vec![1];
    config.storage.url = format!("sqlite://{}/sb.db", dir.path().display());
    let store = Store::open(&config.storage).await.unwrap();
    let tools = ToolRuntime::build(&config, &Env::default()).unwrap();
    let deps = Arc::new(AgentDeps::from_config(
        &config,
        &Env::default(),
        tools,
        store.clone(),
    ));
    let adapter = Arc::new(FakeAdapter::default());
    let manager = SessionManager::new(
        config,
        deps,
        adapter.clone(),
        Arc::new(AllowAll),
        ManagerSettings::default(),
        CancellationToken::new(),
    );
    Setup {
        manager,
        adapter,
        store,
        _dir: dir,
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
    let sent = s.adapter.wait(2).await;
    assert_eq!(
        sent.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>(),
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
