//! Exact identity: approvers are `platform:id` and match only there; a bare
//! id is a configuration error; "Always" is for approvers only.

use crate::common;

use std::sync::Arc;

use common::fake_port::FakePort;
use switchboard::approvals::{Actor, Broker, Choice, Decision, Refusal, Request, detect};
use switchboard::config::{ApprovalsConfig, Config, Env, validate};
use switchboard::platform::Platforms;
use switchboard::store::{NewSession, Store};
use tokio_util::sync::CancellationToken;

async fn broker(approvers: &[&str]) -> (Store, Arc<Broker>, Arc<FakePort>, tempfile::TempDir) {
    let (store, dir) = common::sqlite_store().await;
    let config = ApprovalsConfig {
        approvers: approvers.iter().map(|a| a.to_string()).collect(),
        ..ApprovalsConfig::default()
    };
    let platforms = Arc::new(Platforms::default());
    let broker = Arc::new(Broker::new(store.clone(), &config, platforms.clone()));
    let port = Arc::new(FakePort::default());
    platforms.attach("telegram", port.clone());
    broker.platform_attached("telegram").await;
    (store, broker, port, dir)
}

async fn ask(store: &Store, broker: &Arc<Broker>, user: &str) -> tokio::task::JoinHandle<Decision> {
    let session = store
        .open_session(&NewSession {
            key: &format!("telegram:dm:{user}"),
            platform: "telegram",
            chat_id: user,
            thread_id: None,
            user_id: Some(user),
        })
        .await
        .unwrap()
        .id;
    let request = Request {
        session_id: session,
        requester: Some(format!("telegram:{user}")),
        command: "rm -rf build".into(),
        matches: detect("rm -rf build").matches,
    };
    let broker = broker.clone();
    tokio::spawn(async move { broker.request(request, &CancellationToken::new()).await })
}

fn person(platform: &str, id: &str) -> Actor {
    Actor {
        platform: platform.into(),
        user_id: id.into(),
        name: format!("{platform}-{id}"),
        account: None,
    }
}

#[tokio::test]
async fn an_approver_id_matches_on_its_own_platform_only() {
    let (store, broker, port, _dir) = broker(&["slack:U024BE7LH"]).await;
    let waiting = ask(&store, &broker, "5").await;
    let id = port.prompt(1).await.approval_id;
    // The same id as a GitHub login (anyone can register one).
    let github = broker
        .resolve(&id, Choice::Always, &person("github", "U024BE7LH"), None)
        .await;
    assert_eq!(github, Err(Refusal::NotAllowed));
    assert!(store.allowlist().await.unwrap().is_empty());
    broker
        .resolve(&id, Choice::Always, &person("slack", "U024BE7LH"), None)
        .await
        .unwrap();
    assert!(matches!(waiting.await.unwrap(), Decision::Always { .. }));
}

#[tokio::test]
async fn a_requester_may_allow_once_or_for_the_session_but_not_always() {
    let (store, broker, port, _dir) = broker(&["telegram:99"]).await;
    let waiting = ask(&store, &broker, "5").await;
    let id = port.prompt(1).await.approval_id;
    let always = broker
        .resolve(&id, Choice::Always, &person("telegram", "5"), None)
        .await;
    assert_eq!(always, Err(Refusal::AlwaysForApprovers));
    assert!(
        store.allowlist().await.unwrap().is_empty(),
        "the allowlist is unchanged"
    );
    assert_eq!(broker.pending_count(), 1, "still waiting");
    broker
        .resolve(&id, Choice::Session, &person("telegram", "5"), None)
        .await
        .unwrap();
    assert!(matches!(waiting.await.unwrap(), Decision::Session { .. }));

    let waiting = ask(&store, &broker, "5").await;
    let id = port.prompt(2).await.approval_id;
    broker
        .resolve(&id, Choice::Always, &person("telegram", "99"), None)
        .await
        .unwrap();
    assert!(matches!(waiting.await.unwrap(), Decision::Always { .. }));
    assert_eq!(store.allowlist().await.unwrap().len(), 1);
}

#[test]
fn a_bare_approver_id_is_a_configuration_error_showing_the_qualified_form() {
    let mut config = Config::default();
    config.approvals.approvers = vec!["U024BE7LH".into(), "telegram:42".into()];
    let problems = validate(&config, &Env::default());
    let text = problems
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(text.contains("approvals.approvers[0]"), "{text}");
    assert!(text.contains("\"slack:U024BE7LH\""), "{text}");
    assert!(!text.contains("approvals.approvers[1]"), "{text}");
}
