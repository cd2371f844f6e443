//! The audit trail: a row changed afterwards is found, and a request that
//! cannot be audited is refused, never put to a person.

use super::*;

#[tokio::test]
async fn a_tampered_audit_row_is_found() {
    let s = setup().await;
    let sid = session(&s.store, "1").await;
    for command in ["rm -rf a", "rm -rf b"] {
        let waiting = spawn_request(&s, request(&sid, Some("1"), command));
        let n = s.adapter.shown.lock().unwrap().len() + 1;
        let id = s.adapter.prompt(n).await.approval_id;
        s.broker
            .resolve(&id, Choice::Deny, &actor("1"), None)
            .await
            .unwrap();
        waiting.await.unwrap();
    }
    assert_eq!(s.store.verify_audit().await.unwrap().first_broken, None);
    let rows = s.store.audit_rows().await.unwrap();
    let url = format!("sqlite://{}", s._dir.path().join("test.db").display());
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query("UPDATE approval_audit SET outcome = 'approved_always' WHERE id = $1")
        .bind(rows[1].id)
        .execute(&raw)
        .await
        .unwrap();
    let check = s.store.verify_audit().await.unwrap();
    assert_eq!(check.first_broken, Some(rows[1].id));
}

/// The trail refuses the request's entry (a trigger of the test's on the
/// real SQLite file): the command is refused as when nobody can approve it,
/// no prompt is shown, and the stored request is decided, not pending.
#[tokio::test]
async fn a_request_that_cannot_be_audited_is_refused() {
    let s = setup().await;
    let sid = session(&s.store, "1").await;
    let url = format!("sqlite://{}", s._dir.path().join("test.db").display());
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query(
        "CREATE TRIGGER refuse_audit BEFORE INSERT ON approval_audit \
         BEGIN SELECT RAISE(ABORT, 'the trail is refused'); END",
    )
    .execute(&raw)
    .await
    .unwrap();
    let decision = s
        .broker
        .request(
            request(&sid, Some("1"), "rm -rf build"),
            &CancellationToken::new(),
        )
        .await;
    assert!(
        matches!(decision, Decision::NoApprover(ref why) if why.contains("audited")),
        "{decision:?}"
    );
    assert!(
        s.adapter.shown.lock().unwrap().is_empty(),
        "no prompt shown"
    );
    let stored = s.store.list_approvals(10).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].status, ApprovalStatus::Denied);
    assert!(s.store.audit_rows().await.unwrap().is_empty());
}
