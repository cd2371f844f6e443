//! What a line runs, when it is only known as the line runs, is allowed
//! once: "for this session" on such a line grants nothing, so the next
//! line of the same shape (running anything at all) asks again.

use super::*;

fn run(h: &PolicyHarness, command: &'static str) -> tokio::task::JoinHandle<serde_json::Value> {
    let (rt, ctx) = (h.runtime.clone(), h.ctx.clone());
    tokio::spawn(
        async move { common::call(&rt, "terminal", json!({"command": command}), &ctx).await },
    )
}

#[tokio::test]
async fn a_command_only_known_when_it_runs_is_allowed_once_whatever_the_scope() {
    let h = policy_harness(ApprovalMode::Manual, None).await;
    // `$CMD` is unset: the command word is only known as the line runs.
    let first = run(&h, "$CMD touch first.txt");
    let id = h.s.adapter.prompt(1).await.approval_id;
    let decision =
        h.s.broker
            .resolve(&id, Choice::Session, &actor("1"), None)
            .await
            .unwrap();
    assert!(matches!(decision, Decision::Once { .. }), "{decision:?}");
    assert_eq!(first.await.unwrap()["exit_code"], 0);
    assert!(h.ctx.workspace.join("first.txt").exists());

    let second = run(&h, "$CMD touch second.txt");
    let id = h.s.adapter.prompt(2).await.approval_id;
    h.s.broker
        .resolve(&id, Choice::Deny, &actor("1"), None)
        .await
        .unwrap();
    let out = second.await.unwrap();
    assert!(
        out["error"]
            .as_str()
            .unwrap_or_default()
            .starts_with("BLOCKED"),
        "{out}"
    );
    assert!(!h.ctx.workspace.join("second.txt").exists());
    assert!(
        h.s.store
            .session_grants(&h.ctx.session_id, None)
            .await
            .unwrap()
            .is_empty()
    );
}
