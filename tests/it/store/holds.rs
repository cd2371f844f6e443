//! Budget holds (#49): what running turns hold is counted beside what
//! finished turns spent; a reservation is checked and written under one
//! lock, so concurrent ones never take more than the cap; a hold whose
//! process died (kill -9: nothing removed it) stops counting when it
//! expires, and a turn picked up again finds what its calls used.

use crate::backend_tests;

use switchboard::budgets::{HOLD_TTL_MS, Scope};
use switchboard::store::{Hold, Limit, Store, now_ms};

backend_tests!(
    concurrent_reservations_never_take_more_than_the_cap,
    a_hold_left_by_a_dead_process_stops_counting_when_it_expires,
    a_moved_or_renewed_hold_keeps_counting,
);

fn hold(session: &str, used: i64, reserved: i64) -> Hold {
    Hold {
        session_id: session.to_string(),
        platform: "telegram".into(),
        chat_id: format!("chat-{session}"),
        user_id: Some("42".into()),
        job_id: None,
        used_prompt: used,
        used_completion: 0,
        used_micros: 0,
        reserved_tokens: reserved,
        reserved_micros: 0,
    }
}

fn person() -> Scope {
    Scope::User {
        platform: "telegram".into(),
        user: "42".into(),
    }
}

fn cap(tokens: i64) -> Vec<Limit> {
    vec![Limit {
        scope: person(),
        since: 0,
        token_cap: tokens,
        cost_cap: 0,
    }]
}

async fn concurrent_reservations_never_take_more_than_the_cap(store: Store) {
    let now = now_ms();
    let limits = cap(55);
    let tries = (0..20).map(|i| {
        let store = store.clone();
        let limits = limits.clone();
        async move {
            let (taken, _) = store
                .reserve_hold(
                    &hold(&format!("s{i}"), 0, 10),
                    &limits,
                    now,
                    now + HOLD_TTL_MS,
                )
                .await
                .unwrap();
            taken
        }
    });
    let taken = futures::future::join_all(tries).await;
    assert_eq!(
        taken.iter().filter(|t| **t).count(),
        5,
        "five holds of 10 fit in 55: {taken:?}"
    );
    let spent = store.spend(&person(), 0, now).await.unwrap();
    assert_eq!((spent.tokens, spent.held_tokens), (0, 50));
    // A session's new hold replaces its own: s0 settles to 3 tokens and
    // then asks for 12, which fits beside the others' 40.
    let first = (0..20)
        .find(|i| taken[*i])
        .map(|i| format!("s{i}"))
        .unwrap();
    store
        .settle_hold(&first, (3, 0, 0), now + HOLD_TTL_MS)
        .await
        .unwrap();
    let (taken, spent) = store
        .reserve_hold(&hold(&first, 3, 12), &limits, now, now + HOLD_TTL_MS)
        .await
        .unwrap();
    assert!(taken);
    assert_eq!(
        spent[0].held_tokens, 40,
        "its own hold is not counted twice"
    );
    assert_eq!(
        store.spend(&person(), 0, now).await.unwrap().held_tokens,
        55
    );
}

async fn a_hold_left_by_a_dead_process_stops_counting_when_it_expires(store: Store) {
    let then = now_ms();
    // The dead process's turn made calls of 30 tokens and was asking for
    // 20 more when it was killed.
    let (taken, _) = store
        .reserve_hold(&hold("dead", 30, 20), &cap(100), then, then + HOLD_TTL_MS)
        .await
        .unwrap();
    assert!(taken);
    let alive = hold("alive", 0, 60);
    let (taken, spent) = store
        .reserve_hold(&alive, &cap(100), then + 1000, then + 1000 + HOLD_TTL_MS)
        .await
        .unwrap();
    assert!(!taken, "the dead turn's hold still counts: {spent:?}");
    assert_eq!(
        store.held_usage("dead").await.unwrap(),
        Some((30, 0, 0)),
        "picked up again, the turn finds what its calls used"
    );
    let later = then + HOLD_TTL_MS + 1;
    let (taken, spent) = store
        .reserve_hold(&alive, &cap(100), later, later + HOLD_TTL_MS)
        .await
        .unwrap();
    assert!(taken, "expired: {spent:?}");
    assert_eq!(spent[0].held_tokens, 0);
    assert_eq!(
        store.held_usage("dead").await.unwrap(),
        None,
        "expired holds are cleared"
    );
}

async fn a_moved_or_renewed_hold_keeps_counting(store: Store) {
    let then = now_ms();
    let (taken, _) = store
        .reserve_hold(&hold("before", 30, 0), &cap(100), then, then + HOLD_TTL_MS)
        .await
        .unwrap();
    assert!(taken);
    // The conversation went on in a new session (a split).
    store.move_hold("before", "after").await.unwrap();
    assert_eq!(store.held_usage("before").await.unwrap(), None);
    assert_eq!(store.held_usage("after").await.unwrap(), Some((30, 0, 0)));
    // Still running an hour later: renewed, it still counts.
    store
        .renew_hold("after", then + 2 * HOLD_TTL_MS)
        .await
        .unwrap();
    let later = then + HOLD_TTL_MS + 1;
    let spent = store.spend(&person(), 0, later).await.unwrap();
    assert_eq!(spent.held_tokens, 30);
}
