//! Access control and pairing (SPEC §5), one test per rule, on SQLite and
//! PostgreSQL.

use crate::backend_tests;

use switchboard::sessions::access::{self, MAX_FAILURES};
use switchboard::sessions::{
    Access, AccessRules, ApproveOutcome, ChatKind, InboundEvent, PairingOutcome,
};
use switchboard::store::Store;

fn event(kind: ChatKind, user: &str) -> InboundEvent {
    InboundEvent {
        platform: "telegram".into(),
        kind,
        chat_id: if kind == ChatKind::Dm {
            user.into()
        } else {
            "-100".into()
        },
        thread_id: None,
        user_id: user.into(),
        user_name: format!("User {user}"),
        roles: vec![],
        text: "hello".into(),
        event_id: "1".into(),
        message_id: None,
        mentioned: false,
        from_bot: false,
        in_thread: false,
        attachments: Vec::new(),
        revision: switchboard::platform::Revision::New,
    }
}

fn rules() -> AccessRules {
    AccessRules {
        allowed_users: vec!["1".into()],
        require_mention: true,
        ..AccessRules::default()
    }
}

backend_tests!(
    allowlisted_users_are_allowed_in_dms,
    mentions_are_not_an_access_question,
    bots_are_ignored,
    chat_allowlist_limits_groups,
    roles_admit_their_members,
    unknown_dm_senders_must_pair,
    unknown_group_senders_are_ignored,
    open_platforms_admit_everyone,
    pairing_admits_after_approval,
    pairing_is_rate_limited_per_user,
    at_most_three_codes_wait_per_platform,
    five_wrong_codes_lock_approvals,
);

async fn allowlisted_users_are_allowed_in_dms(store: Store) {
    assert_eq!(
        access::check(&rules(), &event(ChatKind::Dm, "1"), &store)
            .await
            .unwrap(),
        Access::Allowed
    );
}

/// Whether the bot was mentioned is the intake's last question, after
/// commands and answers (see sessions_manager); access only asks who.
async fn mentions_are_not_an_access_question(store: Store) {
    let e = event(ChatKind::Group, "1");
    assert!(!e.mentioned);
    assert_eq!(
        access::check(&rules(), &e, &store).await.unwrap(),
        Access::Allowed
    );
}

async fn bots_are_ignored(store: Store) {
    let mut e = event(ChatKind::Dm, "1");
    e.from_bot = true;
    assert_eq!(
        access::check(&rules(), &e, &store).await.unwrap(),
        Access::Ignored("message from a bot")
    );
}

async fn chat_allowlist_limits_groups(store: Store) {
    let limited = AccessRules {
        allowed_chats: vec!["-200".into()],
        ..rules()
    };
    let mut e = event(ChatKind::Group, "1");
    e.mentioned = true;
    assert_eq!(
        access::check(&limited, &e, &store).await.unwrap(),
        Access::Ignored("chat not on the allowlist")
    );
    e.chat_id = "-200".into();
    assert_eq!(
        access::check(&limited, &e, &store).await.unwrap(),
        Access::Allowed
    );
}

async fn roles_admit_their_members(store: Store) {
    let by_role = AccessRules {
        allowed_users: vec![],
        allowed_roles: vec!["ops".into()],
        ..AccessRules::default()
    };
    let mut e = event(ChatKind::Group, "9");
    assert_eq!(
        access::check(&by_role, &e, &store).await.unwrap(),
        Access::Ignored("sender not on the allowlist")
    );
    e.roles = vec!["ops".into()];
    assert_eq!(
        access::check(&by_role, &e, &store).await.unwrap(),
        Access::Allowed
    );
}

async fn unknown_dm_senders_must_pair(store: Store) {
    assert_eq!(
        access::check(&rules(), &event(ChatKind::Dm, "9"), &store)
            .await
            .unwrap(),
        Access::NeedsPairing
    );
}

async fn unknown_group_senders_are_ignored(store: Store) {
    let mut e = event(ChatKind::Group, "9");
    e.mentioned = true;
    assert_eq!(
        access::check(&rules(), &e, &store).await.unwrap(),
        Access::Ignored("sender not on the allowlist")
    );
}

async fn open_platforms_admit_everyone(store: Store) {
    let open = AccessRules {
        open_when_empty: true,
        ..AccessRules::default()
    };
    assert_eq!(
        access::check(&open, &event(ChatKind::Dm, "9"), &store)
            .await
            .unwrap(),
        Access::Allowed
    );
}

async fn pairing_admits_after_approval(store: Store) {
    let stranger = event(ChatKind::Dm, "9");
    let PairingOutcome::Issued(code) = access::request_code(&store, &stranger).await.unwrap()
    else {
        panic!("no code issued")
    };
    assert_eq!(code.len(), 8);
    assert_eq!(
        access::request_code(&store, &stranger).await.unwrap(),
        PairingOutcome::StillPending(code.clone())
    );
    assert!(
        access::pairing_message("telegram", &PairingOutcome::Issued(code.clone()))
            .contains(&format!("pairing approve telegram {code}"))
    );
    let paired = access::approve_code(&store, "telegram", &code.to_lowercase(), "owner")
        .await
        .unwrap();
    assert!(
        matches!(paired, ApproveOutcome::Paired(ref u) if u.user_id == "9"),
        "{paired:?}"
    );
    assert_eq!(
        access::check(&rules(), &stranger, &store).await.unwrap(),
        Access::Allowed
    );
    assert!(store.revoke_pairing("telegram", "9").await.unwrap());
    assert_eq!(
        access::check(&rules(), &stranger, &store).await.unwrap(),
        Access::NeedsPairing
    );
}

async fn pairing_is_rate_limited_per_user(store: Store) {
    let stranger = event(ChatKind::Dm, "9");
    let PairingOutcome::Issued(code) = access::request_code(&store, &stranger).await.unwrap()
    else {
        panic!()
    };
    access::approve_code(&store, "telegram", &code, "owner")
        .await
        .unwrap();
    store.revoke_pairing("telegram", "9").await.unwrap();
    assert_eq!(
        access::request_code(&store, &stranger).await.unwrap(),
        PairingOutcome::RateLimited
    );
}

async fn at_most_three_codes_wait_per_platform(store: Store) {
    for user in ["a", "b", "c"] {
        assert!(matches!(
            access::request_code(&store, &event(ChatKind::Dm, user))
                .await
                .unwrap(),
            PairingOutcome::Issued(_)
        ));
    }
    assert_eq!(
        access::request_code(&store, &event(ChatKind::Dm, "d"))
            .await
            .unwrap(),
        PairingOutcome::TooManyPending
    );
    let mut other = event(ChatKind::Dm, "d");
    other.platform = "discord".into();
    assert!(
        matches!(
            access::request_code(&store, &other).await.unwrap(),
            PairingOutcome::Issued(_)
        ),
        "per platform"
    );
}

async fn five_wrong_codes_lock_approvals(store: Store) {
    let PairingOutcome::Issued(code) = access::request_code(&store, &event(ChatKind::Dm, "9"))
        .await
        .unwrap()
    else {
        panic!()
    };
    for i in 1..MAX_FAILURES {
        assert_eq!(
            access::approve_code(&store, "telegram", "WRONG234", "owner")
                .await
                .unwrap(),
            ApproveOutcome::WrongCode { failures: i }
        );
    }
    assert!(matches!(
        access::approve_code(&store, "telegram", "WRONG234", "owner")
            .await
            .unwrap(),
        ApproveOutcome::LockedOut { .. }
    ));
    assert!(
        matches!(
            access::approve_code(&store, "telegram", &code, "owner")
                .await
                .unwrap(),
            ApproveOutcome::LockedOut { .. }
        ),
        "even the right code waits out the lockout"
    );
    assert!(!store.is_paired("telegram", "9").await.unwrap());
}

#[test]
fn check_warns_when_an_open_platform_can_reach_a_shell() {
    let mut config = switchboard::config::Config::default();
    config.slack.enabled = true;
    let env = switchboard::config::Env::default();
    let source = switchboard::config::ConfigSource::Defaults;
    let closed = switchboard::cli::check_report(&config, &source, &env, None);
    assert!(!closed.contains("slack.open"), "{closed}");
    config.slack.open = true;
    let open = switchboard::cli::check_report(&config, &source, &env, None);
    assert!(
        open.contains("warning: slack.open = true lets anyone who can message the bot use terminal and process"),
        "{open}"
    );
    config.slack.toolsets = Some(vec!["web".into()]);
    let safe = switchboard::cli::check_report(&config, &source, &env, None);
    assert!(!safe.contains("warning: slack.open"), "{safe}");
}
