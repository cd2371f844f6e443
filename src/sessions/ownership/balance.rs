//! Replicas share the sessions (PostgreSQL). Each second every replica
//! counts the sessions each live replica owns; one owning more than its
//! fair share (the total over the replicas, rounded up) hands some over:
//! at most half its surplus a round, each to the replica owning the
//! fewest, and only while that one stays at or under the share rounded
//! down, so a move never makes a replica the next to hand one back.
//!
//! A session moves only between turns. Its worker is told whom to hand it
//! to; after its running turn (at once when idle) it leaves the rest of
//! its mailbox to the inbox, gives the lease up and tells the taker
//! (NOTIFY on [`HANDOFF_CHANNEL`]), which takes the session as a sweep
//! would: it reads the session's unprocessed events and unsent answers
//! and goes on in order, its writes fenced by the lease's next token.
//! For a while the giver (and every other replica) leaves the session to
//! the taker; should the taker never come, the sweep takes it after that.
//!
//! Draining (the daemon stopping): every worker finishes its running turn
//! and hands its session the same way to the live replica owning the
//! fewest, instead of leaving it for a lease to lapse.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cluster::Share;
use crate::sessions::manager::{Inner, SessionManager};
use crate::sessions::worker::WorkerState;
use crate::store::StoreError;

/// Where a replica tells the others it handed a session over:
/// `<taker's id>\n<giver's name>\n<key>`.
pub const HANDOFF_CHANNEL: &str = "switchboard_handoff";

/// How often a replica compares its share with the others'.
pub(in crate::sessions) const REBALANCE_EVERY: Duration = Duration::from_secs(1);

/// How long a session handed to a replica is left to it by the others.
const HANDOFF_WINDOW: Duration = Duration::from_secs(3);

/// Most sessions a replica starts handing over in one round.
const MOST_MOVES: usize = 16;

/// Most sessions remembered as handed over.
const AWAY_ENTRIES: usize = 10_000;

/// A replica a session is handed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::sessions) struct Taker {
    pub(in crate::sessions) id: String,
    pub(in crate::sessions) name: String,
}

/// What a replica knows of the hand-offs.
#[derive(Default)]
pub(in crate::sessions) struct Balance {
    /// Sessions handed (or being handed) to another replica, left to it
    /// until the instant.
    away: Mutex<HashMap<String, Instant>>,
    /// The live replicas as last counted, for a drain's hand-offs.
    shares: Mutex<Vec<Share>>,
    /// Counted once more when the drain begins.
    drain_counted: tokio::sync::OnceCell<()>,
    /// Hand-offs told lately, by taker: counted as the taker's until it
    /// shows them (a little longer, which only slows the next moves).
    recent: Mutex<Vec<(String, Instant)>>,
}

impl Balance {
    /// Whether session `key` is being left to the replica it was handed to.
    pub(in crate::sessions) fn away(&self, key: &str) -> bool {
        let away = self.away.lock().unwrap_or_else(|e| e.into_inner());
        away.get(key).is_some_and(|until| *until > Instant::now())
    }

    /// Leaves session `key` to another replica for [`HANDOFF_WINDOW`].
    fn leave_to_taker(&self, key: &str) {
        let now = Instant::now();
        let mut away = self.away.lock().unwrap_or_else(|e| e.into_inner());
        if away.len() >= AWAY_ENTRIES {
            away.retain(|_, until| *until > now);
        }
        away.insert(key.to_string(), now + HANDOFF_WINDOW);
    }

    fn forget(&self, key: &str) {
        self.away
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// Notes a hand-off to `taker` just told.
    fn told(&self, taker: &str) {
        let now = Instant::now();
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.retain(|(_, at)| now.duration_since(*at) < HANDOFF_WINDOW);
        recent.push((taker.to_string(), now));
    }

    /// Hand-offs told within the window, by taker.
    fn recent(&self) -> Vec<String> {
        let now = Instant::now();
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent
            .iter()
            .filter(|(_, at)| now.duration_since(*at) < HANDOFF_WINDOW)
            .map(|(taker, _)| taker.clone())
            .collect()
    }

    /// The live replica other than `me` owning the fewest sessions as last
    /// counted, counted as owning one more.
    fn least_owned(&self, me: &str) -> Option<Taker> {
        let mut shares = self.shares.lock().unwrap_or_else(|e| e.into_inner());
        let least = shares
            .iter_mut()
            .filter(|s| s.id != me)
            .min_by_key(|s| s.owned)?;
        least.owned += 1;
        Some(Taker {
            id: least.id.clone(),
            name: least.name.clone(),
        })
    }
}

/// The hand-offs of one round: which of `mine` (this replica's sessions,
/// handed over first when idle, then by fewest waiting) go to whom, given
/// `shares` (every live replica, this one included, with hand-offs under
/// way counted as made).
fn plan(
    me: &str,
    shares: &mut [Share],
    mine: impl IntoIterator<Item = String>,
) -> Vec<(String, Taker)> {
    let total: usize = shares.iter().map(|s| s.owned).sum();
    let n = shares.len();
    let Some(own) = shares.iter().find(|s| s.id == me).map(|s| s.owned) else {
        return Vec::new();
    };
    if n < 2 {
        return Vec::new();
    }
    let (fair, floor) = (total.div_ceil(n), total / n);
    let most = shares.iter().map(|s| s.owned).max().unwrap_or(0);
    let least = shares.iter().map(|s| s.owned).min().unwrap_or(0);
    let first_of_most = shares
        .iter()
        .find(|s| s.owned == most)
        .map(|s| s.id.as_str());
    let budget = if own > fair {
        own.saturating_sub(fair).div_ceil(2).min(MOST_MOVES)
    } else if own >= least + 2 && first_of_most == Some(me) {
        // Nobody is over the share rounded up, yet one owns two more than
        // another (a replica joined ten owning five each): one move a
        // round, by the first of those owning the most, so that the
        // others do not all give to the same one at once.
        1
    } else {
        0
    };
    let mut moves = Vec::new();
    let mut left = own;
    for key in mine.into_iter().take(budget) {
        let Some(taker) = shares
            .iter_mut()
            .filter(|s| s.id != me && (s.owned < floor || s.owned + 2 <= left))
            .min_by_key(|s| s.owned)
        else {
            break;
        };
        taker.owned += 1;
        left -= 1;
        moves.push((
            key,
            Taker {
                id: taker.id.clone(),
                name: taker.name.clone(),
            },
        ));
    }
    moves
}

impl SessionManager {
    /// One round of sharing: counts the live replicas' sessions and, when
    /// this replica owns more than its share, has some of its workers hand
    /// theirs over after their running turn. Returns how many it asked.
    pub(in crate::sessions) async fn rebalance(&self) -> Result<usize, StoreError> {
        let inner = &self.inner;
        let Some(own) = &inner.ownership else {
            return Ok(0);
        };
        let mut shares = own.cluster.shares().await?;
        *own.balance.shares.lock().unwrap_or_else(|e| e.into_inner()) = shares.clone();
        if !inner.config.cluster.rebalance || shares.len() < 2 {
            return Ok(0);
        }
        let me = own.cluster.id().to_string();
        for taker in own.balance.recent() {
            if let Some(s) = shares.iter_mut().find(|s| s.id == taker) {
                s.owned += 1;
            }
        }
        let mut candidates: Vec<(String, Arc<WorkerState>)> = Vec::new();
        for (key, state) in inner.mailboxes.leased() {
            match state.taker() {
                // Under way: counted as moved.
                Some(taker) => {
                    for s in shares.iter_mut() {
                        if s.id == me {
                            s.owned = s.owned.saturating_sub(1);
                        } else if s.id == taker.id {
                            s.owned += 1;
                        }
                    }
                }
                None => candidates.push((key, state)),
            }
        }
        candidates.sort_by_key(|(_, s)| (s.busy(), s.waiting()));
        let states: HashMap<String, Arc<WorkerState>> = candidates.iter().cloned().collect();
        let moves = plan(&me, &mut shares, candidates.into_iter().map(|(k, _)| k));
        for (key, taker) in &moves {
            if let Some(state) = states.get(key) {
                tracing::info!(session.key = %key, to = %taker.name, "handing the session over after its turn");
                own.balance.leave_to_taker(key);
                state.hand_to(taker.clone());
            }
        }
        Ok(moves.len())
    }

    /// Another replica handed session `key` over (`<taker>\n<giver>\n<key>`):
    /// taken when this replica is the taker, left to the taker otherwise.
    pub(in crate::sessions) async fn handed(&self, payload: &str) {
        let mut parts = payload.splitn(3, '\n');
        let (Some(taker), Some(giver), Some(key)) = (parts.next(), parts.next(), parts.next())
        else {
            return;
        };
        let Some(own) = &self.inner.ownership else {
            return;
        };
        if taker != own.cluster.id() {
            own.balance.leave_to_taker(key);
            return;
        }
        own.balance.forget(key);
        match super::adopt(&self.inner, own, key).await {
            Ok(super::Adopted::Taken) => {
                own.cluster.moved(key, giver, false);
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(session.key = %key, error = %err, "handed session not taken; the sweep finds it")
            }
        }
    }
}

/// After session `key`'s worker gave its lease up between turns: tells
/// the replica it was handed to (or, while draining, the live one owning
/// the fewest) to take it. False when there is none to tell.
pub(in crate::sessions) async fn hand_over(inner: &Inner, key: &str, taker: Option<Taker>) -> bool {
    let Some(own) = &inner.ownership else {
        return false;
    };
    let taker = match taker {
        Some(taker) => Some(taker),
        None if inner.stop.is_cancelled() => {
            let balance = &own.balance;
            balance
                .drain_counted
                .get_or_init(|| async {
                    // Replicas that joined since the last round count too.
                    match own.cluster.shares().await {
                        Ok(shares) => {
                            *balance.shares.lock().unwrap_or_else(|e| e.into_inner()) = shares
                        }
                        Err(err) => {
                            tracing::warn!(error = %err, "replicas not counted for the drain")
                        }
                    }
                })
                .await;
            balance.least_owned(own.cluster.id())
        }
        None => None,
    };
    let Some(taker) = taker else {
        return false;
    };
    own.balance.leave_to_taker(key);
    own.balance.told(&taker.id);
    let notice = format!("{}\n{}\n{key}", taker.id, own.cluster.name());
    if inner.stop.is_cancelled() {
        // Draining: sent before the daemon closes its connections.
        if let Err(err) = inner.store.notify(HANDOFF_CHANNEL, &notice).await {
            tracing::warn!(session.key = %key, error = %err, "hand-off not told; the sweep takes the session");
        }
    } else {
        inner.store.notify_soon(HANDOFF_CHANNEL, notice);
    }
    own.cluster.moved(key, &taker.name, true);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares(owned: &[usize]) -> Vec<Share> {
        owned
            .iter()
            .enumerate()
            .map(|(i, o)| Share {
                id: format!("r{i}"),
                name: format!("r{i}"),
                owned: *o,
            })
            .collect()
    }

    fn keys(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("s{i}")).collect()
    }

    /// Rounds of `plan` with every move completed between rounds, until
    /// nobody moves: the counts it ends on and the rounds it took.
    fn settle(owned: &[usize]) -> (Vec<usize>, usize) {
        let mut counts = owned.to_vec();
        for round in 0..100 {
            let mut moved = false;
            for i in 0..counts.len() {
                let mut s = shares(&counts);
                let moves = plan(&format!("r{i}"), &mut s, keys(counts[i]));
                for (_, taker) in &moves {
                    let t: usize = taker.id[1..].parse().unwrap();
                    counts[i] -= 1;
                    counts[t] += 1;
                    moved = true;
                }
            }
            if !moved {
                return (counts, round);
            }
        }
        panic!("never settled: {counts:?}");
    }

    #[test]
    fn a_replica_back_from_a_restart_gets_its_share_in_a_few_rounds() {
        let (counts, rounds) = settle(&[40, 0]);
        assert_eq!(counts, [20, 20]);
        assert!(rounds <= 6, "{rounds} rounds");
        let (counts, _) = settle(&[40, 0, 0]);
        assert!(counts.iter().all(|c| (13..=14).contains(c)), "{counts:?}");
        let (counts, _) = settle(&[30, 10, 0]);
        assert!(counts.iter().all(|c| (13..=14).contains(c)), "{counts:?}");
    }

    #[test]
    fn a_replica_joining_many_at_their_share_still_gets_sessions() {
        let mut owned = vec![5; 9];
        owned.push(0);
        let (counts, _) = settle(&owned);
        assert!(counts.iter().all(|c| (4..=5).contains(c)), "{counts:?}");
        assert_eq!(counts.iter().sum::<usize>(), 45);
    }

    #[test]
    fn a_fair_split_moves_nothing_and_never_ping_pongs() {
        for owned in [
            &[20, 20][..],
            &[21, 20],
            &[1, 0],
            &[0, 0],
            &[14, 13, 13],
            &[2, 1, 1],
            &[5, 5, 4, 4],
            &[1, 0, 0],
        ] {
            for (i, own) in owned.iter().enumerate() {
                let mut s = shares(owned);
                let moves = plan(&format!("r{i}"), &mut s, keys(*own));
                assert!(moves.is_empty(), "{owned:?}: r{i} moves {moves:?}");
            }
        }
    }

    #[test]
    fn a_round_moves_at_most_half_the_surplus_to_those_under_their_share() {
        let mut s = shares(&[100, 0]);
        let moves = plan("r0", &mut s, keys(100));
        assert_eq!(moves.len(), MOST_MOVES);
        let mut s = shares(&[10, 0]);
        let moves = plan("r0", &mut s, keys(10));
        assert_eq!(moves.len(), 3, "half of 5, rounded up");
        assert!(moves.iter().all(|(_, t)| t.id == "r1"));
        // A replica only just above its share moves one, to one below.
        let mut s = shares(&[3, 1, 2]);
        let moves = plan("r0", &mut s, keys(3));
        assert_eq!(moves.len(), 1);
        assert_eq!(moves[0].1.id, "r1");
    }
}
