//! The agent-test harness: a conversation on a fresh SQLite store, wired
//! to a scripted fake model.

use std::sync::Arc;

use serde_json::Value;
use switchboard::agent::{AgentDeps, Conversation, SessionContext};
use switchboard::config::{Config, Env};
use switchboard::store::{NewMessage, NewSession, Store};
use switchboard::tools::{AllowAll, ToolRuntime};

use super::fake_llm::FakeLlm;

pub struct Harness {
    pub conversation: Conversation,
    pub store: Store,
    pub workspace: std::path::PathBuf,
    deps: Arc<AgentDeps>,
    _dir: tempfile::TempDir,
}

fn context() -> SessionContext {
    SessionContext {
        platform: "cli".into(),
        chat_type: "direct message".into(),
        user_name: Some("Tess".into()),
        thread: None,
    }
}

impl Harness {
    /// The messages stored in the conversation's session.
    pub async fn stored(&self) -> Vec<switchboard::store::StoredMessage> {
        let session = &self.conversation.session().id;
        self.store.messages(session).await.unwrap()
    }

    /// The session's agent opened again from storage, as a worker that
    /// unloaded it would.
    pub async fn reopen(&self) -> Conversation {
        let session = self
            .store
            .open_session_by_key("cli:dm:tester")
            .await
            .unwrap()
            .unwrap();
        Conversation::open(
            self.deps.clone(),
            session,
            context(),
            (vec!["coding".into()], vec![]),
            Arc::new(AllowAll),
        )
        .await
        .unwrap()
    }
}

pub async fn harness_with(
    llm: &FakeLlm,
    edit: impl FnOnce(&mut Config),
    seed: &[NewMessage<'_>],
) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.llm.base_url = llm.url.clone();
    config.llm.api_key_env = "FAKE_KEY".into();
    config.agent.workspace = dir.path().join("ws");
    edit(&mut config);
    let (store, _db) = super::sqlite_store().await;
    std::mem::forget(_db);
    let env = Env::from_pairs([("FAKE_KEY", "sk-fake")]);
    let tools =
        ToolRuntime::build(&config, &env, switchboard::adapters::platforms(&config)).unwrap();
    let deps = Arc::new(AgentDeps::from_config(&config, &env, tools, store.clone()));
    let session = store
        .open_session(&NewSession {
            key: "cli:dm:tester",
            platform: "cli",
            chat_id: "tester",
            thread_id: None,
            user_id: Some("tester"),
        })
        .await
        .unwrap();
    for m in seed {
        store.append_message(&session.id, m).await.unwrap();
    }
    let conversation = Conversation::open(
        deps.clone(),
        session,
        context(),
        (vec!["coding".into()], vec![]),
        Arc::new(AllowAll),
    )
    .await
    .unwrap();
    let workspace =
        switchboard::tools::workspace::session_dir(&config.agent.workspace, "cli:dm:tester")
            .unwrap();
    Harness {
        conversation,
        store,
        workspace,
        deps,
        _dir: dir,
    }
}

pub async fn harness(llm: &FakeLlm) -> Harness {
    harness_with(llm, |_| {}, &[]).await
}

pub fn tool_messages(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}
