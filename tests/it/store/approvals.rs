//! Approvals in storage: a request is decided once, and a decision is
//! stored whole (its status, its grant, its audit entry) or not at all;
//! the permanent allowlist.

use crate::backend_tests;

use switchboard::store::{
    ApprovalRecord, ApprovalStatus, AuditEvent, AuditKind, Grant, NewSession, Settlement, Store,
    new_id, now_ms,
};

backend_tests!(
    approvals_are_decided_once,
    a_decision_is_stored_with_its_grant_and_entry,
    allowlist_add_list_revoke,
    waiting_prompts_are_found_by_chat_and_thread,
);

pub(crate) fn approval(session_id: &str) -> ApprovalRecord {
    ApprovalRecord {
        id: new_id(),
        session_id: session_id.into(),
        session_key: "telegram:dm:1".into(),
        requester: "telegram:1".into(),
        command: "rm -rf build".into(),
        pattern_keys: switchboard::store::PatternKeys(vec!["recursive_delete".into()]),
        status: ApprovalStatus::Pending,
        approver: None,
        reason: None,
        created_at: now_ms(),
        expires_at: now_ms() + 300_000,
        decided_at: None,
    }
}

async fn approvals_are_decided_once(store: Store) {
    let record = approval("s1");
    store.insert_approval(&record).await.unwrap();
    assert_eq!(store.approval(&record.id).await.unwrap().unwrap(), record);
    assert!(
        store
            .decide_approval(
                &record.id,
                ApprovalStatus::Denied,
                Some("telegram:9"),
                Some("no")
            )
            .await
            .unwrap()
    );
    assert!(
        !store
            .decide_approval(
                &record.id,
                ApprovalStatus::ApprovedOnce,
                Some("telegram:1"),
                None
            )
            .await
            .unwrap(),
        "a decided request cannot be decided again"
    );
    assert!(
        !store
            .decide_approval("forged", ApprovalStatus::ApprovedOnce, None, None)
            .await
            .unwrap()
    );
    let stored = store.approval(&record.id).await.unwrap().unwrap();
    assert_eq!(stored.status, ApprovalStatus::Denied);
    assert_eq!(stored.approver.as_deref(), Some("telegram:9"));
    assert_eq!(stored.reason.as_deref(), Some("no"));
    assert!(stored.decided_at.is_some());
    assert_eq!(stored.pattern_keys.0, ["recursive_delete"]);
    let second = approval("s2");
    store.insert_approval(&second).await.unwrap();
    assert_eq!(store.list_approvals(10).await.unwrap().len(), 2);
}

/// What an id-less `/approve` may mean on another replica: the requests
/// waiting with a prompt in the chat, in the thread of the session that
/// asked when one is given, oldest first.
async fn waiting_prompts_are_found_by_chat_and_thread(store: Store) {
    let mut ids = Vec::new();
    for (thread, command) in [
        (Some("10"), "rm -rf a"),
        (None, "git push -f"),
        (Some("20"), "rm -rf c"),
    ] {
        let session = store
            .open_session(&NewSession {
                key: &format!("telegram:-100:{thread:?}"),
                platform: "telegram",
                chat_id: "-100",
                thread_id: thread,
                user_id: Some("1"),
            })
            .await
            .unwrap();
        let record = ApprovalRecord {
            command: command.into(),
            created_at: now_ms() + ids.len() as i64,
            ..approval(&session.id)
        };
        store.insert_approval(&record).await.unwrap();
        store
            .set_approval_prompt(&record.id, "telegram", "-100", "5")
            .await
            .unwrap();
        ids.push(record.id);
    }
    let found = |thread: Option<&'static str>, limit| {
        let store = store.clone();
        async move {
            store
                .pending_prompts_in("telegram", "-100", thread, limit)
                .await
                .unwrap()
        }
    };
    assert_eq!(
        found(Some("20"), 3).await,
        [(ids[2].clone(), "rm -rf c".to_string())]
    );
    let all = found(None, 3).await;
    assert_eq!(
        all.iter().map(|(id, _)| id).collect::<Vec<_>>(),
        [&ids[0], &ids[1], &ids[2]]
    );
    assert_eq!(found(None, 2).await.len(), 2);
    assert!(found(Some("30"), 3).await.is_empty());
    store
        .decide_approval(&ids[2], ApprovalStatus::Denied, Some("telegram:9"), None)
        .await
        .unwrap();
    assert!(found(Some("20"), 3).await.is_empty());
    assert!(
        store
            .pending_prompts_in("telegram", "-200", None, 3)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn allowlist_add_list_revoke(store: Store) {
    assert!(
        store
            .allow_pattern("git_force_push", "telegram:1")
            .await
            .unwrap()
    );
    assert!(
        !store
            .allow_pattern("git_force_push", "telegram:2")
            .await
            .unwrap(),
        "already there"
    );
    assert!(store.allow_pattern("docker_stop", "cli").await.unwrap());
    assert_eq!(allowed(&store).await, ["docker_stop", "git_force_push"]);
    assert!(store.is_pattern_allowed("docker_stop").await.unwrap());
    assert!(store.revoke_pattern("docker_stop").await.unwrap());
    assert!(!store.revoke_pattern("docker_stop").await.unwrap());
    assert!(!store.is_pattern_allowed("docker_stop").await.unwrap());
}

/// What the broker writes for "Always" and "Session": one transaction.
/// A second decision on the same request writes nothing, not even its
/// grant, and entries chain as appended ones do.
async fn a_decision_is_stored_with_its_grant_and_entry(store: Store) {
    let keys = ["recursive_delete".to_string(), "git_force_push".to_string()];
    let settle = |id: &str, grant, status| {
        let (store, id, keys) = (store.clone(), id.to_string(), keys.clone());
        async move { settle(&store, &id, &keys, grant, status).await.unwrap() }
    };
    let always = approval("s1");
    store.insert_approval(&always).await.unwrap();
    assert!(settle(&always.id, Grant::Always, ApprovalStatus::ApprovedAlways).await);
    let once_more = settle(
        &always.id,
        Grant::Session {
            session: "s1",
            requester: "telegram:1",
        },
        ApprovalStatus::ApprovedSession,
    );
    assert!(!once_more.await, "decided once");
    let session = approval("s1");
    store.insert_approval(&session).await.unwrap();
    assert!(
        settle(
            &session.id,
            Grant::Session {
                session: "s1",
                requester: "telegram:1",
            },
            ApprovalStatus::ApprovedSession
        )
        .await
    );
    assert!(!settle("forged", Grant::Always, ApprovalStatus::ApprovedAlways).await);

    assert_eq!(
        allowed(&store).await,
        ["git_force_push", "recursive_delete"]
    );
    assert_eq!(
        store
            .session_grants("s1", Some("telegram:1"))
            .await
            .unwrap(),
        ["git_force_push", "recursive_delete"]
    );
    assert_eq!(
        store.session_grants("s1", None).await.unwrap(),
        ["git_force_push", "recursive_delete"]
    );
    assert!(
        store
            .session_grants("s1", Some("telegram:2"))
            .await
            .unwrap()
            .is_empty(),
        "another person in the session was granted nothing"
    );
    let stored = store.approval(&always.id).await.unwrap().unwrap();
    assert_eq!(stored.status, ApprovalStatus::ApprovedAlways);
    assert_eq!(stored.approver.as_deref(), Some("telegram:9"));
    let rows = store.audit_rows().await.unwrap();
    let outcomes: Vec<_> = rows.iter().map(|r| r.outcome.as_str()).collect();
    assert_eq!(outcomes, ["approved_always", "approved_session"]);
    assert_eq!(store.verify_audit().await.unwrap().first_broken, None);
}

/// `status` with `grant` of `keys` on request `id`, decided by
/// `telegram:9`.
async fn settle(
    store: &Store,
    id: &str,
    keys: &[String],
    grant: Grant<'_>,
    status: ApprovalStatus,
) -> switchboard::store::Result<bool> {
    let joined = keys.join(",");
    store
        .settle_approval(
            id,
            &Settlement {
                status,
                approver: Some("telegram:9"),
                reason: None,
                grant,
                keys,
                entry: AuditEvent {
                    approval_id: id,
                    event: AuditKind::Decided,
                    session_id: "s1",
                    requester: "telegram:1",
                    actor: Some("telegram:9"),
                    command: "rm -rf build && git push -f",
                    pattern_keys: &joined,
                    outcome: status.as_str(),
                },
            },
        )
        .await
}

/// Two replicas settle "Always" at once on requests whose keys came in
/// opposite orders: both go through, every time (their grants would
/// otherwise wait on each other's uncommitted rows, and PostgreSQL end one
/// as a deadlock).
#[tokio::test]
async fn replicas_granting_the_same_keys_at_once_both_settle() {
    let Some(db) = crate::common::PgTestDb::create().await else {
        return;
    };
    let (one, other) = (db.store().await, db.store().await);
    for round in 0..20 {
        let keys = [format!("key-{round}-a"), format!("key-{round}-b")];
        let reversed = [keys[1].clone(), keys[0].clone()];
        let (first, second) = (approval("s1"), approval("s2"));
        one.insert_approval(&first).await.unwrap();
        one.insert_approval(&second).await.unwrap();
        let always = ApprovalStatus::ApprovedAlways;
        let (a, b) = tokio::join!(
            settle(&one, &first.id, &keys, Grant::Always, always),
            settle(&other, &second.id, &reversed, Grant::Always, always),
        );
        assert!(a.unwrap() && b.unwrap(), "round {round}");
    }
    assert_eq!(one.allowlist().await.unwrap().len(), 40);
    assert_eq!(one.verify_audit().await.unwrap().first_broken, None);
    one.close().await;
    other.close().await;
    db.drop().await;
}

/// The permanent allowlist's keys, sorted.
async fn allowed(store: &Store) -> Vec<String> {
    let entries = store.allowlist().await.unwrap();
    entries.into_iter().map(|e| e.pattern_key).collect()
}
