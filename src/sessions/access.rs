//! Who may reach an agent: per-platform allowlists of users, chats and
//! roles, bots ignored, and pairing for unknown DM senders (an 8-character
//! code the owner approves with `switchboard pairing approve`).
//! Unauthorised traffic never reaches an agent. (`require_mention` is the
//! intake's last word, after commands and answers: see `intake.rs`.)

use rand::Rng;

use crate::platform::{AccessRules, ChatKind, InboundEvent};
use crate::store::{PairedUser, PairingRequest, Result, Store, now_ms};

/// Code alphabet without look-alikes (no 0/O, 1/I/L).
const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
/// Code length.
pub const CODE_LEN: usize = 8;
/// How long a code is valid.
pub const CODE_TTL_MS: i64 = 60 * 60 * 1000;
/// Most pending codes per platform.
pub const MAX_PENDING: usize = 3;
/// One new code per user per this long.
pub const REQUEST_INTERVAL_MS: i64 = 10 * 60 * 1000;
/// Failed approvals before a lockout.
pub const MAX_FAILURES: i64 = 5;
/// How long a lockout lasts.
pub const LOCKOUT_MS: i64 = 15 * 60 * 1000;

/// What to do with an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Hand it to the session.
    Allowed,
    /// Drop it silently; the reason is logged.
    Ignored(&'static str),
    /// An unknown DM sender: offer a pairing code.
    NeedsPairing,
}

/// Decides whether an event may reach an agent.
pub async fn check(rules: &AccessRules, event: &InboundEvent, store: &Store) -> Result<Access> {
    if event.from_bot {
        return Ok(Access::Ignored("message from a bot"));
    }
    if !rules.allowed_chats.is_empty()
        && event.kind == ChatKind::Group
        && !rules.allowed_chats.contains(&event.chat_id)
    {
        return Ok(Access::Ignored("chat not on the allowlist"));
    }
    let listed = rules.allowed_users.contains(&event.user_id)
        || event.roles.iter().any(|r| rules.allowed_roles.contains(r));
    let open = open_to_all(rules);
    if listed || open || store.is_paired(&event.platform, &event.user_id).await? {
        return Ok(Access::Allowed);
    }
    Ok(match event.kind {
        ChatKind::Dm => Access::NeedsPairing,
        ChatKind::Group => Access::Ignored("sender not on the allowlist"),
    })
}

/// Whether everyone may talk: no user or role allowlist, and the
/// platform set open when it has none.
fn open_to_all(rules: &AccessRules) -> bool {
    rules.open_when_empty && rules.allowed_users.is_empty() && rules.allowed_roles.is_empty()
}

/// Whether `user_id` may still reach the agent on `platform`, as far as can
/// be told without a message of theirs: on the allowlist, paired, or the
/// platform open to all. Where roles admit people, their roles now are
/// unknown here, so they are given the benefit of the doubt.
pub async fn still_allowed(
    rules: &AccessRules,
    platform: &str,
    user_id: &str,
    store: &Store,
) -> Result<bool> {
    let open = open_to_all(rules);
    Ok(open
        || !rules.allowed_roles.is_empty()
        || rules.allowed_users.iter().any(|u| u == user_id)
        || store.is_paired(platform, user_id).await?)
}

/// What asking for a pairing code gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairingOutcome {
    /// A new code.
    Issued(String),
    /// The user's code from earlier is still valid.
    StillPending(String),
    /// Asked again too soon.
    RateLimited,
    /// Too many codes are waiting on this platform.
    TooManyPending,
}

fn new_code() -> String {
    let mut rng = rand::rng();
    (0..CODE_LEN)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Issues (or repeats) a pairing code for an unknown DM sender.
pub async fn request_code(store: &Store, event: &InboundEvent) -> Result<PairingOutcome> {
    if let Some(existing) = store
        .pairing_requests_of(&event.platform, &event.user_id)
        .await?
        .into_iter()
        .next()
    {
        return Ok(PairingOutcome::StillPending(existing.code));
    }
    let now = now_ms();
    if let Some(last) = store
        .last_pairing_request_at(&event.platform, &event.user_id)
        .await?
        && now - last < REQUEST_INTERVAL_MS
    {
        return Ok(PairingOutcome::RateLimited);
    }
    if store.pairing_requests(Some(&event.platform)).await?.len() >= MAX_PENDING {
        return Ok(PairingOutcome::TooManyPending);
    }
    let code = new_code();
    store
        .insert_pairing_request(&PairingRequest {
            platform: event.platform.to_string(),
            code: code.clone(),
            user_id: event.user_id.clone(),
            user_name: event.user_name.clone(),
            chat_id: event.chat_id.clone(),
            created_at: now,
            expires_at: now + CODE_TTL_MS,
        })
        .await?;
    Ok(PairingOutcome::Issued(code))
}

/// The reply an unknown sender on `platform` gets.
pub fn pairing_message(platform: &str, outcome: &PairingOutcome) -> String {
    match outcome {
        PairingOutcome::Issued(code) | PairingOutcome::StillPending(code) => format!(
            "I don't know you yet. Ask the owner of this bot to run:\n  switchboard pairing approve {platform} {code}\nThe code is valid for one hour."
        ),
        PairingOutcome::RateLimited => {
            "A pairing code was requested recently; please wait before asking again.".into()
        }
        PairingOutcome::TooManyPending => {
            "Too many pairing requests are waiting; please try again later.".into()
        }
    }
}

/// What approving a code did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApproveOutcome {
    /// The user is paired.
    Paired(PairedUser),
    /// No such valid code; `failures` in a row so far.
    WrongCode {
        /// Consecutive failures.
        failures: i64,
    },
    /// Too many wrong codes: approvals are locked until then (Unix ms).
    LockedOut {
        /// End of the lockout.
        until: i64,
    },
}

/// Approves a code (from the CLI). Five wrong codes in a row lock the
/// platform's approvals for 15 minutes.
pub async fn approve_code(
    store: &Store,
    platform: &str,
    code: &str,
    by: &str,
) -> Result<ApproveOutcome> {
    let now = now_ms();
    let locked = store.pairing_locked_until(platform).await?;
    if locked > now {
        return Ok(ApproveOutcome::LockedOut { until: locked });
    }
    let code = code.trim().to_ascii_uppercase();
    match store.approve_pairing(platform, &code, by).await? {
        Some(user) => {
            store.reset_pairing_failures(platform).await?;
            Ok(ApproveOutcome::Paired(user))
        }
        None => {
            let failures = store
                .record_pairing_failure(platform, MAX_FAILURES, now + LOCKOUT_MS)
                .await?;
            if failures >= MAX_FAILURES {
                Ok(ApproveOutcome::LockedOut {
                    until: now + LOCKOUT_MS,
                })
            } else {
                Ok(ApproveOutcome::WrongCode { failures })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a message: the allowlist and pairing decide, an open
    /// platform lets everyone, and roles (unknown here) never shut out.
    #[tokio::test]
    async fn still_allowed_without_a_message() {
        let config = crate::config::StorageConfig {
            url: "sqlite::memory:".into(),
            ..Default::default()
        };
        let store = Store::open(&config).await.unwrap();
        let listed = AccessRules {
            allowed_users: vec!["1".into()],
            ..Default::default()
        };
        assert!(
            still_allowed(&listed, "telegram", "1", &store)
                .await
                .unwrap()
        );
        assert!(
            !still_allowed(&listed, "telegram", "2", &store)
                .await
                .unwrap()
        );
        store
            .insert_pairing_request(&PairingRequest {
                platform: "telegram".into(),
                code: "ABCDEFGH".into(),
                user_id: "2".into(),
                user_name: "Bob".into(),
                chat_id: "2".into(),
                created_at: now_ms(),
                expires_at: now_ms() + CODE_TTL_MS,
            })
            .await
            .unwrap();
        approve_code(&store, "telegram", "ABCDEFGH", "owner")
            .await
            .unwrap();
        assert!(
            still_allowed(&listed, "telegram", "2", &store)
                .await
                .unwrap()
        );
        store.revoke_pairing("telegram", "2").await.unwrap();
        assert!(
            !still_allowed(&listed, "telegram", "2", &store)
                .await
                .unwrap()
        );
        let by_role = AccessRules {
            allowed_roles: vec!["staff".into()],
            ..listed.clone()
        };
        assert!(
            still_allowed(&by_role, "telegram", "2", &store)
                .await
                .unwrap()
        );
        let open = AccessRules {
            open_when_empty: true,
            ..Default::default()
        };
        assert!(still_allowed(&open, "telegram", "3", &store).await.unwrap());
        store.close().await;
    }

    #[test]
    fn codes_use_the_unambiguous_alphabet() {
        for _ in 0..200 {
            let code = new_code();
            assert_eq!(code.len(), CODE_LEN);
            assert!(code.bytes().all(|b| ALPHABET.contains(&b)), "{code}");
            assert!(!code.contains(['0', 'O', '1', 'I', 'L']));
        }
    }
}
