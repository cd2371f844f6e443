//! The approval broker and policy with a fake adapter: the asynchronous
//! flow, concurrency, expiry, who may decide, replays, restarts, text
//! commands, sessions without a human, the audit chain, and the modes.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::fake_llm::{FakeLlm, Reply, text};
use common::fake_port::FakePort;
use serde_json::json;
use switchboard::agent::provider::ModelEndpoint;
use switchboard::approvals::{
    Actor, ApprovalPolicy, Broker, ChatRef, Choice, Decision, Refusal, Request, detect,
};
use switchboard::config::{ApprovalMode, ApprovalsConfig, ChatTarget, Config, Env};
use switchboard::platform::{ChatCommand, Platforms};
use switchboard::store::{ApprovalStatus, NewSession, Store};
use switchboard::tools::{ToolContext, ToolRuntime};
use tokio_util::sync::CancellationToken;

mod audit;
mod commands;
mod once_only;
mod scripts;

/// A broker whose `telegram` prompts go to a fresh fake port.
async fn broker_with_port(store: &Store, config: &ApprovalsConfig) -> (Arc<Broker>, Arc<FakePort>) {
    let platforms = Arc::new(Platforms::default());
    let broker = Arc::new(Broker::new(store.clone(), config, platforms.clone()));
    let port = Arc::new(FakePort::default());
    platforms.attach("telegram", port.clone());
    broker.platform_attached("telegram").await;
    (broker, port)
}

fn actor(user: &str) -> Actor {
    Actor {
        platform: "telegram".into(),
        user_id: user.into(),
        name: format!("user{user}"),
        account: None,
    }
}

struct Setup {
    store: Store,
    broker: Arc<Broker>,
    adapter: Arc<FakePort>,
    _dir: tempfile::TempDir,
}

async fn setup_with(config: ApprovalsConfig) -> Setup {
    let (store, dir) = common::sqlite_store().await;
    let (broker, adapter) = broker_with_port(&store, &config).await;
    Setup {
        store,
        broker,
        adapter,
        _dir: dir,
    }
}

fn approvals_config() -> ApprovalsConfig {
    ApprovalsConfig {
        approvers: vec!["telegram:99".into()],
        ..ApprovalsConfig::default()
    }
}

async fn setup() -> Setup {
    setup_with(approvals_config()).await
}

async fn session(store: &Store, user: &str) -> String {
    store
        .open_session(&NewSession {
            key: &format!("telegram:dm:{user}"),
            platform: "telegram",
            chat_id: user,
            thread_id: None,
            user_id: Some(user),
        })
        .await
        .unwrap()
        .id
}

fn request(session_id: &str, user: Option<&str>, command: &str) -> Request {
    Request {
        session_id: session_id.into(),
        requester: user.map(|u| format!("telegram:{u}")),
        command: command.into(),
        matches: detect(command).matches,
    }
}

fn spawn_request(s: &Setup, req: Request) -> tokio::task::JoinHandle<Decision> {
    let broker = s.broker.clone();
    tokio::spawn(async move { broker.request(req, &CancellationToken::new()).await })
}

#[tokio::test]
async fn a_button_press_resolves_the_waiting_call() {
    let s = setup().await;
    let sid = session(&s.store, "1").await;
    let waiting = spawn_request(&s, request(&sid, Some("1"), "rm -rf build"));
    let prompt = s.adapter.prompt(1).await;
    assert_eq!(prompt.command, "rm -rf build");
    assert_eq!(prompt.reasons, ["deletes files recursively"]);
    assert_eq!(prompt.approval_id.len(), 32, "128 random bits, hex");
    let shown_chat = s.adapter.shown.lock().unwrap()[0].chat.clone();
    assert_eq!(
        shown_chat,
        ChatRef {
            platform: "telegram".into(),
            chat: "1".into(),
            thread: None
        }
    );

    let data = Choice::Once.button_data(&prompt.approval_id);
    assert!(data.len() <= 64, "fits Telegram callback data");
    let (id, choice) = Choice::parse_button(&data).unwrap();
    let decided = s
        .broker
        .resolve(&id, choice, &actor("1"), None)
        .await
        .unwrap();
    assert_eq!(decided, Decision::Once { by: "user1".into() });
    assert_eq!(waiting.await.unwrap(), decided);

    let record = s.store.approval(&id).await.unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::ApprovedOnce);
    assert_eq!(record.approver.as_deref(), Some("telegram:1"));
    assert_eq!(
        s.adapter.closed(),
        [(
            "m1".to_string(),
            "✅ Allowed once by user1\nrm -rf build".to_string()
        )]
    );
    let events: Vec<String> = s
        .store
        .audit_rows()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.event)
        .collect();
    assert_eq!(events, ["requested", "decided"]);
    assert_eq!(s.store.verify_audit().await.unwrap().first_broken, None);
    assert_eq!(s.broker.pending_count(), 0);
}

#[tokio::test]
async fn other_sessions_are_served_while_one_waits() {
    let s = setup().await;
    let a = session(&s.store, "1").await;
    let b = session(&s.store, "2").await;
    let first = spawn_request(&s, request(&a, Some("1"), "git push --force"));
    let first_prompt = s.adapter.prompt(1).await;
    let second = spawn_request(&s, request(&b, Some("2"), "git reset --hard"));
    let second_prompt = s.adapter.prompt(2).await;
    s.broker
        .resolve(
            &second_prompt.approval_id,
            Choice::Deny,
            &actor("2"),
            Some("not now".into()),
        )
        .await
        .unwrap();
    assert_eq!(
        second.await.unwrap(),
        Decision::Denied {
            by: "user2".into(),
            reason: Some("not now".into())
        }
    );
    assert!(!first.is_finished(), "the first request is still waiting");
    s.broker
        .resolve(&first_prompt.approval_id, Choice::Once, &actor("1"), None)
        .await
        .unwrap();
    assert!(matches!(first.await.unwrap(), Decision::Once { .. }));
}

#[tokio::test]
async fn a_hundred_concurrent_requests_resolve_independently() {
    let s = setup().await;
    let sid = session(&s.store, "1").await;
    let handles: Vec<_> = (0..100)
        .map(|i| spawn_request(&s, request(&sid, Some("1"), &format!("rm -rf dir{i}"))))
        .collect();
    s.adapter.prompt(100).await;
    assert_eq!(s.broker.pending_count(), 100);
    let prompts = s.adapter.shown.lock().unwrap().clone();
    for p in prompts.iter().rev() {
        let n: usize = p.command.trim_start_matches("rm -rf dir").parse().unwrap();
        let choice = if n.is_multiple_of(2) {
            Choice::Once
        } else {
            Choice::Deny
        };
        s.broker
            .resolve(&p.approval_id, choice, &actor("99"), None)
            .await
            .unwrap();
    }
    for (i, h) in handles.into_iter().enumerate() {
        let decision = h.await.unwrap();
        if i.is_multiple_of(2) {
            assert!(
                matches!(decision, Decision::Once { .. }),
                "{i}: {decision:?}"
            );
        } else {
            assert!(
                matches!(decision, Decision::Denied { .. }),
                "{i}: {decision:?}"
            );
        }
    }
    assert_eq!(s.broker.pending_count(), 0);
    let check = s.store.verify_audit().await.unwrap();
    assert_eq!((check.rows, check.first_broken), (200, None));
}

#[tokio::test]
async fn silence_expires_after_the_timeout() {
    // Real time with a short timeout: tokio's paused clock and the SQLite
    // worker threads do not mix (auto-advance spun forever under load).
    let s = setup_with(ApprovalsConfig {
        timeout_secs: 2,
        ..approvals_config()
    })
    .await;
    let sid = session(&s.store, "1").await;
    let waiting = spawn_request(&s, request(&sid, Some("1"), "docker compose down"));
    let prompt = s.adapter.prompt(1).await;
    // A quiet period of half the timeout: nothing is decided yet.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(!waiting.is_finished(), "still waiting before the timeout");
    assert_eq!(s.broker.pending_count(), 1);
    assert_eq!(waiting.await.unwrap(), Decision::Expired);
    assert_eq!(
        s.store
            .approval(&prompt.approval_id)
            .await
            .unwrap()
            .unwrap()
            .status,
        ApprovalStatus::Expired
    );
    assert!(s.adapter.closed()[0].1.starts_with("⌛ Expired"));
    let late = s
        .broker
        .resolve(&prompt.approval_id, Choice::Once, &actor("1"), None)
        .await;
    assert_eq!(late, Err(Refusal::Expired));
}

#[tokio::test]
async fn only_the_requester_or_an_approver_may_decide() {
    let s = setup().await;
    let sid = session(&s.store, "1").await;
    let waiting = spawn_request(&s, request(&sid, Some("1"), "systemctl stop nginx"));
    let id = s.adapter.prompt(1).await.approval_id;
    let stranger = s.broker.resolve(&id, Choice::Once, &actor("7"), None).await;
    assert_eq!(stranger, Err(Refusal::NotAllowed));
    let other_platform = Actor {
        platform: "slack".into(),
        user_id: "1".into(),
        name: "imposter".into(),
        account: None,
    };
    assert_eq!(
        s.broker
            .resolve(&id, Choice::Once, &other_platform, None)
            .await,
        Err(Refusal::NotAllowed)
    );
    assert_eq!(
        s.broker.pending_count(),
        1,
        "a refused press changes nothing"
    );
    s.broker
        .resolve(&id, Choice::Once, &actor("99"), None)
        .await
        .unwrap();
    assert!(matches!(waiting.await.unwrap(), Decision::Once { by } if by == "user99"));
    let refused = s
        .store
        .audit_rows()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.event == "refused")
        .count();
    assert_eq!(refused, 2, "refused presses are audited");
}

#[tokio::test]
async fn replayed_forged_and_malformed_presses_are_refused() {
    let s = setup().await;
    let sid = session(&s.store, "1").await;
    let waiting = spawn_request(&s, request(&sid, Some("1"), "git clean -fdx"));
    let id = s.adapter.prompt(1).await.approval_id;
    s.broker
        .resolve(&id, Choice::Deny, &actor("1"), None)
        .await
        .unwrap();
    waiting.await.unwrap();
    let replay = s.broker.resolve(&id, Choice::Once, &actor("1"), None).await;
    assert!(
        matches!(replay, Err(Refusal::AlreadyDecided(_))),
        "{replay:?}"
    );
    let forged = s
        .broker
        .resolve(&"f".repeat(32), Choice::Once, &actor("1"), None)
        .await;
    assert_eq!(forged, Err(Refusal::Unknown));
    for bad in ["", "ap", "ap:x", "ap:x:maybe", "other:x:once", "ap::"] {
        assert!(
            Choice::parse_button(bad).is_none() || Choice::parse_button(bad).unwrap().0.is_empty(),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn a_restart_expires_pending_requests_and_closes_their_prompts() {
    let s = setup().await;
    let sid = session(&s.store, "1").await;
    let waiting = spawn_request(&s, request(&sid, Some("1"), "rm -rf data"));
    let id = s.adapter.prompt(1).await.approval_id;
    // The prompt's message id is stored just after it is shown; the "crash"
    // comes after that.
    let mut stored = false;
    for _ in 0..500 {
        if s.store.pending_prompts(None).await.unwrap()[0]
            .prompt_message
            .is_some()
        {
            stored = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(stored, "the prompt's message id was never stored");
    waiting.abort();
    let _ = waiting.await;

    let platforms = Arc::new(Platforms::default());
    let restarted = Broker::new(s.store.clone(), &approvals_config(), platforms.clone());
    assert_eq!(restarted.expire_stale().await.unwrap(), 1);
    assert_eq!(
        s.store.approval(&id).await.unwrap().unwrap().status,
        ApprovalStatus::Expired
    );
    let adapter = Arc::new(FakePort::default());
    platforms.attach("telegram", adapter.clone());
    restarted.platform_attached("telegram").await;
    let closed = adapter.closed();
    assert_eq!(closed.len(), 1);
    assert_eq!(closed[0].0, "m1");
    assert!(closed[0].1.contains("restarted"), "{closed:?}");
    assert_eq!(
        restarted
            .resolve(&id, Choice::Once, &actor("1"), None)
            .await,
        Err(Refusal::Expired)
    );
}

#[tokio::test]
async fn sessions_without_a_human_route_to_the_approver_chat_or_are_denied() {
    let s = setup().await;
    let sid = session(&s.store, "hook").await;
    let denied = s
        .broker
        .request(request(&sid, None, "rm -rf tmp"), &CancellationToken::new())
        .await;
    assert!(
        matches!(denied, Decision::NoApprover(ref why) if why.contains("route_to")),
        "{denied:?}"
    );

    let routed = setup_with(ApprovalsConfig {
        route_to: Some(ChatTarget {
            platform: "telegram".into(),
            chat: "-100777".into(),
        }),
        ..approvals_config()
    })
    .await;
    let sid = session(&routed.store, "hook").await;
    let waiting = spawn_request(&routed, request(&sid, None, "rm -rf tmp"));
    let id = routed.adapter.prompt(1).await.approval_id;
    assert_eq!(routed.adapter.shown.lock().unwrap()[0].chat.chat, "-100777");
    assert_eq!(
        routed
            .broker
            .resolve(&id, Choice::Once, &actor("5"), None)
            .await,
        Err(Refusal::NotAllowed)
    );
    // A session grant would cover what the next event of the run asks.
    assert_eq!(
        routed
            .broker
            .resolve(&id, Choice::Session, &actor("99"), None)
            .await,
        Err(Refusal::SessionForUnattended)
    );
    routed
        .broker
        .resolve(&id, Choice::Once, &actor("99"), None)
        .await
        .unwrap();
    assert!(matches!(waiting.await.unwrap(), Decision::Once { .. }));
    assert!(
        routed
            .store
            .session_grants(&sid, None)
            .await
            .unwrap()
            .is_empty()
    );
}

struct PolicyHarness {
    s: Setup,
    runtime: ToolRuntime,
    ctx: ToolContext,
}

async fn policy_harness(mode: ApprovalMode, auxiliary: Option<&FakeLlm>) -> PolicyHarness {
    let s = setup().await;
    let sid = session(&s.store, "1").await;
    let aux = auxiliary.map(|llm| {
        let mut config = Config::default();
        config.llm.base_url = llm.url.clone();
        config.llm.api_key_env = String::new();
        ModelEndpoint::auxiliary(&config, &Env::default())
            .client(switchboard::http::client::client())
    });
    let policy = ApprovalPolicy::new(s.store.clone(), s.broker.clone(), mode, aux);
    let dir = s._dir.path().join("ws");
    let mut ctx = ToolContext::for_session(&dir, &sid, "telegram:dm:1", Arc::new(policy)).unwrap();
    ctx.user = Some("telegram:1".into());
    let runtime = ToolRuntime::build(
        &Config::default(),
        &Env::default(),
        switchboard::adapters::platforms(&Config::default()),
    )
    .unwrap();
    PolicyHarness { s, runtime, ctx }
}

#[tokio::test]
async fn the_terminal_waits_for_the_decision_and_grants_stick() {
    let h = policy_harness(ApprovalMode::Manual, None).await;
    std::fs::create_dir(h.ctx.workspace.join("build")).unwrap();
    let run = |command: &'static str| {
        let (rt, ctx) = (h.runtime.clone(), h.ctx.clone());
        tokio::spawn(async move {
            common::call(&rt, "terminal", json!({"command": command}), &ctx).await
        })
    };
    let denied = run("rm -rf build && touch first.txt");
    let id = h.s.adapter.prompt(1).await.approval_id;
    h.s.broker
        .resolve(
            &id,
            Choice::Deny,
            &actor("1"),
            Some("keep the build".into()),
        )
        .await
        .unwrap();
    let out = denied.await.unwrap();
    let err = out["error"].as_str().unwrap();
    assert!(
        err.starts_with("BLOCKED: denied by user1: keep the build"),
        "{err}"
    );
    assert!(err.contains("Do not retry"));
    assert!(h.ctx.workspace.join("build").exists() && !h.ctx.workspace.join("first.txt").exists());

    let granted = run("rm -rf build && touch second.txt");
    let id = h.s.adapter.prompt(2).await.approval_id;
    h.s.broker
        .resolve(&id, Choice::Session, &actor("1"), None)
        .await
        .unwrap();
    assert_eq!(granted.await.unwrap()["exit_code"], 0);
    assert!(h.ctx.workspace.join("second.txt").exists());

    let again = run("mkdir x && rm -r x");
    assert_eq!(
        again.await.unwrap()["exit_code"],
        0,
        "session grant: no new prompt"
    );
    assert_eq!(h.s.adapter.shown.lock().unwrap().len(), 2);

    let benign = run("echo fine");
    assert_eq!(benign.await.unwrap()["output"], "fine\n");
    assert_eq!(
        h.s.adapter.shown.lock().unwrap().len(),
        2,
        "benign commands never prompt"
    );
}

/// A grant for the rest of a session is its requester's: another person
/// in the same session (a shared thread) is asked again.
#[tokio::test]
async fn a_session_grant_covers_its_requester_alone() {
    let h = policy_harness(ApprovalMode::Manual, None).await;
    let run = |ctx: ToolContext, command: &'static str| {
        let rt = h.runtime.clone();
        tokio::spawn(async move {
            common::call(&rt, "terminal", json!({"command": command}), &ctx).await
        })
    };
    let granted = run(h.ctx.clone(), "mkdir a && rm -r a");
    let id = h.s.adapter.prompt(1).await.approval_id;
    h.s.broker
        .resolve(&id, Choice::Session, &actor("1"), None)
        .await
        .unwrap();
    assert_eq!(granted.await.unwrap()["exit_code"], 0);
    assert_eq!(
        run(h.ctx.clone(), "mkdir b && rm -r b").await.unwrap()["exit_code"],
        0,
        "the requester's own grant"
    );
    let mut other = h.ctx.clone();
    other.user = Some("telegram:2".into());
    let asked = run(other, "mkdir c && rm -r c");
    let prompt = h.s.adapter.prompt(2).await;
    assert_eq!(prompt.command, "mkdir c && rm -r c");
    h.s.broker
        .resolve(&prompt.approval_id, Choice::Deny, &actor("99"), None)
        .await
        .unwrap();
    assert!(
        asked.await.unwrap()["error"]
            .as_str()
            .unwrap()
            .starts_with("BLOCKED")
    );
    assert!(!h.ctx.workspace.join("c").exists(), "the line did not run");
}

#[tokio::test]
async fn hard_blocks_never_reach_a_human_in_any_mode() {
    for mode in [ApprovalMode::Manual, ApprovalMode::Off] {
        let h = policy_harness(mode, None).await;
        h.s.store
            .allow_pattern("rm_system", "someone")
            .await
            .unwrap();
        let out = common::call(
            &h.runtime,
            "terminal",
            json!({"command": "sudo rm -rf / --no-preserve-root"}),
            &h.ctx,
        )
        .await;
        assert!(
            out["error"].as_str().unwrap().contains("hard-blocked"),
            "{mode:?}: {out}"
        );
        assert!(h.s.adapter.shown.lock().unwrap().is_empty());
    }
    let off = policy_harness(ApprovalMode::Off, None).await;
    let out = common::call(
        &off.runtime,
        "terminal",
        json!({"command": "rm -rf nothing-here"}),
        &off.ctx,
    )
    .await;
    assert_eq!(out["exit_code"], 0, "mode off runs flagged commands");
}

#[tokio::test]
async fn smart_mode_asks_the_auxiliary_model_and_escalates_when_unsure() {
    let llm = FakeLlm::start(vec![
        Reply::Json(text("APPROVE")),
        Reply::Json(text("DENY. It deletes data.")),
        Reply::Json(text("ESCALATE")),
    ])
    .await;
    let h = policy_harness(ApprovalMode::Smart, Some(&llm)).await;
    let approved = common::call(
        &h.runtime,
        "terminal",
        json!({"command": "rm -rf node_modules"}),
        &h.ctx,
    )
    .await;
    assert_eq!(approved["exit_code"], 0);
    let denied = common::call(
        &h.runtime,
        "terminal",
        json!({"command": "rm -rf src"}),
        &h.ctx,
    )
    .await;
    assert!(
        denied["error"]
            .as_str()
            .unwrap()
            .contains("automatic reviewer refused")
    );
    let (rt, ctx) = (h.runtime.clone(), h.ctx.clone());
    let escalated = tokio::spawn(async move {
        common::call(
            &rt,
            "terminal",
            json!({"command": "git push --force"}),
            &ctx,
        )
        .await
    });
    let id = h.s.adapter.prompt(1).await.approval_id;
    h.s.broker
        .resolve(&id, Choice::Deny, &actor("1"), None)
        .await
        .unwrap();
    assert!(
        escalated.await.unwrap()["error"]
            .as_str()
            .unwrap()
            .contains("BLOCKED")
    );
    let asked = llm.requests();
    assert_eq!(asked.len(), 3);
    assert!(
        asked[0]["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("<command>\nrm -rf node_modules\n</command>")
    );
}

#[tokio::test]
async fn a_grant_that_cannot_be_stored_fails_instead_of_saying_done() {
    let s = setup().await;
    let sid = session(&s.store, "1").await;
    let waiting = spawn_request(&s, request(&sid, Some("1"), "rm -rf build"));
    let prompt = s.adapter.prompt(1).await;
    // The allowlist breaks; everything else still works.
    let db = s._dir.path().join("test.db");
    let raw = sqlx::sqlite::SqlitePoolOptions::new()
        .connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    sqlx::query("DROP TABLE allowlist")
        .execute(&raw)
        .await
        .unwrap();
    assert_eq!(
        s.broker
            .resolve(&prompt.approval_id, Choice::Always, &actor("99"), None)
            .await,
        Err(Refusal::Storage)
    );
    assert_eq!(
        s.broker.pending_count(),
        1,
        "still waiting: the person can press again"
    );
    assert!(s.adapter.closed().is_empty(), "the prompt stays open");
    let stored = s
        .store
        .approval(&prompt.approval_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.status,
        ApprovalStatus::Pending,
        "not recorded as allowed"
    );
    // A choice that needs no grant still goes through.
    s.broker
        .resolve(&prompt.approval_id, Choice::Once, &actor("1"), None)
        .await
        .unwrap();
    assert!(matches!(waiting.await.unwrap(), Decision::Once { .. }));
}

#[tokio::test]
async fn running_a_file_the_agent_wrote_shows_it_and_asks() {
    let h = policy_harness(ApprovalMode::Manual, None).await;
    let run = |tool: &'static str, args: serde_json::Value| {
        let (rt, ctx) = (h.runtime.clone(), h.ctx.clone());
        tokio::spawn(async move { common::call(&rt, tool, args, &ctx).await })
    };
    let script = json!({"path": "build.sh", "content": "echo built-by-agent\n"});
    run("write_file", script).await.unwrap();
    let first = run("terminal", json!({"command": "bash build.sh"}));
    let shown = h.s.adapter.prompt(1).await;
    assert!(
        shown.prompt.text.contains("echo built-by-agent"),
        "{}",
        shown.prompt.text
    );
    assert!(
        shown.prompt.text.contains("sha256"),
        "{}",
        shown.prompt.text
    );
    assert!(
        shown.prompt.text.contains("wrote or changed"),
        "{}",
        shown.prompt.text
    );
    h.s.broker
        .resolve(&shown.approval_id, Choice::Session, &actor("1"), None)
        .await
        .unwrap();
    assert_eq!(first.await.unwrap()["output"], "built-by-agent\n");
    let same = run("terminal", json!({"command": "sh build.sh"}));
    assert_eq!(
        same.await.unwrap()["exit_code"],
        0,
        "the same content ran again"
    );
    assert_eq!(h.s.adapter.shown.lock().unwrap().len(), 1);
    let changed = json!({"path": "build.sh", "content": "echo changed\n"});
    run("write_file", changed).await.unwrap();
    let again = run("terminal", json!({"command": "bash build.sh"}));
    let shown = h.s.adapter.prompt(2).await;
    assert!(
        shown.prompt.text.contains("echo changed"),
        "{}",
        shown.prompt.text
    );
    h.s.broker
        .resolve(&shown.approval_id, Choice::Deny, &actor("1"), None)
        .await
        .unwrap();
    assert!(
        again.await.unwrap()["error"]
            .as_str()
            .unwrap()
            .starts_with("BLOCKED")
    );
}
