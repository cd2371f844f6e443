//! Several replicas on one PostgreSQL database. Each replica joins with an
//! id of its own and holds leases (see `store::leases`): the leadership of
//! an ingress that takes one connection per bot (Telegram polling, the
//! Discord gateway, Slack Socket Mode) and, later, the ownership of
//! sessions. One task renews all of a replica's leases every third of
//! `cluster.lease_secs`; a lease another replica took over, or one that
//! lapsed, ends its [`Term`]. A replica that cannot renew ends each term
//! itself before its lease can lapse, while the renewal may still be
//! waiting for the database (fencing: the deposed leader stops consuming
//! before anyone else may start), so two replicas never hold one term at
//! the same time by their own reckoning.
//!
//! On SQLite there is one replica ([`Cluster::single`]) and every term is
//! granted at once, ending only with the daemon.

pub mod relay;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::ClusterConfig;
use crate::store::{Store, StoreError, new_id};
use crate::telemetry::{Health, events};

/// The readiness component the cluster reports as.
pub const COMPONENT: &str = "cluster";

/// A lease held: the work it covers runs until `ended` fires.
#[derive(Debug)]
pub struct Term {
    name: String,
    /// The lease's fencing token: greater for each later holder.
    pub token: i64,
    /// Fires when the lease is lost (taken over, lapsed, or this replica
    /// could not renew it in time) or the daemon stops.
    pub ended: CancellationToken,
}

struct Held {
    token: i64,
    ended: CancellationToken,
    /// When the term ends unless a renewal sent before then succeeds: a
    /// little before its lease can lapse, counted from when the request
    /// that took or last renewed it was sent (the database stamped it
    /// later than that).
    due: Instant,
}

struct Shared {
    store: Store,
    ttl: Duration,
    health: Health,
    held: Mutex<HashMap<String, Held>>,
    /// Told when a term is taken, so the renewal task watches its due time.
    taken: tokio::sync::Notify,
}

struct Inner {
    id: String,
    name: String,
    shared: Option<Shared>,
    activity: Activity,
}

/// What this replica reports with each renewal.
#[derive(Default)]
struct Activity {
    turns: AtomicI64,
    moves_out: AtomicI64,
    moves_in: AtomicI64,
    last_move: Mutex<Option<(String, Instant)>>,
}

/// A live replica and how many sessions it owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Sessions it owns.
    pub owned: usize,
}

/// How often dead replicas' records and long-lapsed leases are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Terms falling due this close together end together.
const DUE_TOGETHER: Duration = Duration::from_millis(50);

/// This replica's membership; cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("replica", &self.inner.name)
            .field("shared", &self.is_shared())
            .finish_non_exhaustive()
    }
}

/// This machine's host name.
pub fn host() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
}

/// The name a replica goes by when `cluster.name` is empty.
fn default_name() -> String {
    format!("{}:{}", host(), std::process::id())
}

impl Cluster {
    /// The only replica: every term is granted at once.
    pub fn single() -> Self {
        Self {
            inner: Arc::new(Inner {
                id: new_id(),
                name: default_name(),
                shared: None,
                activity: Activity::default(),
            }),
        }
    }

    /// Joins the replicas sharing `store`'s database and renews this
    /// one's leases until `stop`, then leaves (giving its leases up so the
    /// others take over at once).
    pub async fn join(
        store: &Store,
        config: &ClusterConfig,
        health: Health,
        tasks: &tokio_util::task::TaskTracker,
        stop: CancellationToken,
    ) -> Result<Self, StoreError> {
        let name = if config.name.is_empty() {
            default_name()
        } else {
            config.name.clone()
        };
        let id = new_id();
        store.replica_join(&id, &name).await?;
        let ttl = Duration::from_secs(config.lease_secs);
        prune(store, ttl).await?;
        let cluster = Self {
            inner: Arc::new(Inner {
                id,
                name,
                activity: Activity::default(),
                shared: Some(Shared {
                    store: store.clone(),
                    ttl,
                    health,
                    held: Mutex::new(HashMap::new()),
                    taken: tokio::sync::Notify::new(),
                }),
            }),
        };
        cluster.report();
        tracing::info!(replica = %cluster.inner.name, replica.id = %cluster.inner.id, "joined the replicas on this database");
        tasks.spawn(cluster.clone().renew(stop));
        Ok(cluster)
    }

    /// Whether other replicas may share the database.
    pub fn is_shared(&self) -> bool {
        self.inner.shared.is_some()
    }

    /// This replica's id (unique per start).
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// This replica's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Waits until this replica holds lease `name` (trying again every
    /// second while another replica has it), or `None` once `stop` fires.
    pub async fn lead(&self, name: &str, stop: &CancellationToken) -> Option<Term> {
        loop {
            match self.try_hold(name, stop).await {
                Ok(Some(term)) => return Some(term),
                Ok(None) => {}
                Err(err) => tracing::warn!(lease = name, error = %err, "lease not taken"),
            }
            tokio::select! {
                _ = stop.cancelled() => return None,
                _ = tokio::time::sleep(self.retry_every()) => {}
            }
        }
    }

    /// Takes lease `name` if it is free; `None` while another replica has
    /// it. The term also ends when `stop` fires.
    pub async fn try_hold(
        &self,
        name: &str,
        stop: &CancellationToken,
    ) -> Result<Option<Term>, StoreError> {
        let terms = self.try_hold_many(&[name.to_string()], stop).await?;
        Ok(terms.into_iter().next().flatten())
    }

    /// [`try_hold`](Self::try_hold) of each of `names` (distinct) at once:
    /// their terms in order.
    pub async fn try_hold_many(
        &self,
        names: &[String],
        stop: &CancellationToken,
    ) -> Result<Vec<Option<Term>>, StoreError> {
        if stop.is_cancelled() {
            return Ok(names.iter().map(|_| None).collect());
        }
        let Some(shared) = &self.inner.shared else {
            return Ok(names
                .iter()
                .map(|name| {
                    Some(Term {
                        name: name.clone(),
                        token: 0,
                        ended: stop.child_token(),
                    })
                })
                .collect());
        };
        let sent = Instant::now();
        let tokens = shared
            .store
            .lease_acquire_many(names, &self.inner.id, millis(shared.ttl))
            .await?;
        if Instant::now() >= shared.due(sent) {
            // Taken so slowly that the leases may lapse at any moment: not
            // worth starting anything under.
            for (name, token) in names.iter().zip(&tokens) {
                if let Some(token) = token {
                    tracing::warn!(lease = %name, token, "lease taken too late to be trusted; given back");
                    self.give_back(shared, name, *token).await;
                }
            }
            return Ok(names.iter().map(|_| None).collect());
        }
        let terms = {
            let mut held = shared.held();
            names
                .iter()
                .zip(tokens)
                .map(|(name, token)| {
                    let token = token?;
                    let ended = stop.child_token();
                    let previous = held.insert(
                        name.clone(),
                        Held {
                            token,
                            ended: ended.clone(),
                            due: shared.due(sent),
                        },
                    );
                    if let Some(previous) = previous {
                        previous.ended.cancel();
                    }
                    tracing::info!(lease = %name, token, "lease taken");
                    Some(Term {
                        name: name.clone(),
                        token,
                        ended,
                    })
                })
                .collect::<Vec<_>>()
        };
        if terms.iter().any(Option::is_some) {
            shared.taken.notify_one();
            self.report();
        }
        Ok(terms)
    }

    /// Gives `term`'s lease up (when its work is done), so another
    /// replica may take it at once. False when the lease was no longer
    /// this replica's (taken over, lapsed, or not renewed in time).
    pub async fn release(&self, term: Term) -> bool {
        term.ended.cancel();
        let Some(shared) = &self.inner.shared else {
            return true;
        };
        let mine = {
            let mut held = shared.held();
            match held.get(&term.name) {
                Some(h) if h.token == term.token => held.remove(&term.name).is_some(),
                _ => false,
            }
        };
        if mine {
            self.give_back(shared, &term.name, term.token).await;
            self.report();
        }
        mine
    }

    /// Gives lease `name` up in the database, if it is still this
    /// replica's under `token`.
    async fn give_back(&self, shared: &Shared, name: &str, token: i64) {
        if let Err(err) = shared
            .store
            .lease_release(name, &self.inner.id, token)
            .await
        {
            tracing::warn!(lease = %name, error = %err, "lease not given up; it lapses");
        }
    }

    /// What a write made under `term` is checked against: `None` with one
    /// replica, where nobody else can take the lease.
    pub fn fence(&self, term: &Term) -> Option<crate::store::Fence> {
        self.inner.shared.as_ref().map(|_| crate::store::Fence {
            name: term.name.clone(),
            holder: self.inner.id.clone(),
            token: term.token,
        })
    }

    /// The leases this replica holds, by name, with their tokens.
    pub fn held(&self) -> Vec<(String, i64)> {
        let Some(shared) = &self.inner.shared else {
            return Vec::new();
        };
        let mut all: Vec<_> = shared
            .held()
            .iter()
            .map(|(name, h)| (name.clone(), h.token))
            .collect();
        all.sort();
        all
    }

    /// How long a lease outlives its holder's last renewal.
    pub fn lease_ttl(&self) -> Duration {
        self.inner
            .shared
            .as_ref()
            .map_or(Duration::from_secs(6), |s| s.ttl)
    }

    /// The live replicas (seen within a lease) and the sessions each owns;
    /// empty with one replica.
    pub async fn shares(&self) -> Result<Vec<Share>, StoreError> {
        let Some(shared) = &self.inner.shared else {
            return Ok(Vec::new());
        };
        Ok(shared
            .store
            .session_shares(millis(shared.ttl))
            .await?
            .into_iter()
            .map(|(id, name, owned)| Share {
                id,
                name,
                owned: usize::try_from(owned).unwrap_or(0),
            })
            .collect())
    }

    /// This replica drains: the others stop handing sessions to it.
    pub async fn draining(&self) {
        let Some(shared) = &self.inner.shared else {
            return;
        };
        if let Err(err) = shared.store.replica_draining(&self.inner.id).await {
            tracing::warn!(error = %err, "not marked draining; sessions handed here are swept");
        }
    }

    /// A turn started here.
    pub fn turn_started(&self) {
        self.inner.activity.turns.fetch_add(1, Ordering::Relaxed);
    }

    /// A turn ended here.
    pub fn turn_ended(&self) {
        self.inner.activity.turns.fetch_sub(1, Ordering::Relaxed);
    }

    /// Session `key` moved: handed to replica `to` (`out`), or taken from
    /// another's hand-off (`to` is this replica's name).
    pub fn moved(&self, key: &str, peer: &str, out: bool) {
        let a = &self.inner.activity;
        let (counter, line) = if out {
            (&a.moves_out, format!("{key} -> {peer}"))
        } else {
            (&a.moves_in, format!("{key} <- {peer}"))
        };
        counter.fetch_add(1, Ordering::Relaxed);
        *a.last_move.lock().unwrap_or_else(|e| e.into_inner()) = Some((line, Instant::now()));
        events::emit(events::SessionMoved { out });
    }

    /// Sessions handed to other replicas and taken from their hand-offs
    /// since this replica joined.
    pub fn moves(&self) -> (i64, i64) {
        let a = &self.inner.activity;
        (
            a.moves_out.load(Ordering::Relaxed),
            a.moves_in.load(Ordering::Relaxed),
        )
    }

    fn activity(&self) -> crate::store::ReplicaActivity {
        let a = &self.inner.activity;
        let last_move = a
            .last_move
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(line, at)| (line.clone(), millis(at.elapsed())));
        crate::store::ReplicaActivity {
            turns: a.turns.load(Ordering::Relaxed).max(0),
            moves_out: a.moves_out.load(Ordering::Relaxed),
            moves_in: a.moves_in.load(Ordering::Relaxed),
            last_move,
        }
    }

    fn retry_every(&self) -> Duration {
        self.inner
            .shared
            .as_ref()
            .map_or(Duration::from_secs(1), |s| {
                (s.ttl / 6).min(Duration::from_secs(1))
            })
    }

    /// Renews every third of the lease; ends the terms whose lease is gone,
    /// and each term that falls due before a renewal of it succeeds, even
    /// while that renewal is still waiting for the database.
    async fn renew(self, stop: CancellationToken) {
        let Some(shared) = &self.inner.shared else {
            return;
        };
        let every = shared.ttl / 3;
        let mut last_ok = Instant::now();
        let mut pruned = Instant::now();
        loop {
            let sent = Instant::now();
            let asked = self.held();
            let activity = self.activity();
            let renewal = tokio::time::timeout(
                every,
                shared
                    .store
                    .lease_renew(&self.inner.id, &asked, millis(shared.ttl), &activity),
            );
            let Some(renewed) = self.meanwhile(shared, &stop, renewal).await else {
                break;
            };
            match renewed {
                Ok(Ok(held)) => {
                    last_ok = sent;
                    // Renewed after their terms ended here: given up, so
                    // that nobody waits for them to lapse.
                    let ended = self.keep_only(&asked, &held, shared.due(sent));
                    if !ended.is_empty() {
                        let giving = tokio::time::timeout(every, async {
                            for (name, token) in &ended {
                                self.give_back(shared, name, *token).await;
                            }
                        });
                        if self.meanwhile(shared, &stop, giving).await.is_none() {
                            break;
                        }
                    }
                }
                Ok(Err(err)) => tracing::warn!(error = %err, "leases not renewed"),
                Err(_) => tracing::warn!("leases not renewed in time"),
            }
            events::emit(events::LeasesRenewed(last_ok.elapsed()));
            if pruned.elapsed() >= PRUNE_EVERY {
                pruned = Instant::now();
                let pruning = tokio::time::timeout(every, prune(&shared.store, shared.ttl));
                match self.meanwhile(shared, &stop, pruning).await {
                    None => break,
                    Some(Ok(Err(err))) => tracing::warn!(error = %err, "gone replicas not pruned"),
                    Some(Err(_)) => tracing::warn!("gone replicas not pruned in time"),
                    Some(Ok(Ok(()))) => {}
                }
            }
            let pause = tokio::time::sleep_until(sent + every);
            if self.meanwhile(shared, &stop, pause).await.is_none() {
                break;
            }
        }
        self.end_all();
        if let Err(err) = shared.store.replica_leave(&self.inner.id).await {
            tracing::warn!(error = %err, "left without giving the leases up; they lapse");
        }
    }

    /// Runs `work`, ending each term as it falls due meanwhile; `None`
    /// when `stop` fires first.
    async fn meanwhile<T>(
        &self,
        shared: &Shared,
        stop: &CancellationToken,
        work: impl Future<Output = T>,
    ) -> Option<T> {
        tokio::pin!(work);
        loop {
            let due = shared.held().values().map(|h| h.due).min();
            let fallen_due = async {
                match due {
                    Some(due) => tokio::time::sleep_until(due).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return None,
                done = &mut work => return Some(done),
                () = fallen_due => self.end_due(),
                // A term taken meanwhile: its due time is watched too.
                () = shared.taken.notified() => {}
            }
        }
    }

    /// Ends the terms of `asked` (the leases a renewal was asked for) that
    /// are not in `renewed`, and moves the others' due time to `due`;
    /// terms taken since are left alone. Returns the leases renewed whose
    /// terms had already ended here.
    fn keep_only(
        &self,
        asked: &[(String, i64)],
        renewed: &[(String, i64)],
        due: Instant,
    ) -> Vec<(String, i64)> {
        let Some(shared) = &self.inner.shared else {
            return Vec::new();
        };
        let mut ended = Vec::new();
        let lost: Vec<(String, Held)> = {
            let renewed: HashSet<(&str, i64)> =
                renewed.iter().map(|(n, t)| (n.as_str(), *t)).collect();
            let mut held = shared.held();
            let mut lost = Vec::new();
            for (name, token) in asked {
                match held.get_mut(name) {
                    Some(h) if h.token == *token && renewed.contains(&(name.as_str(), *token)) => {
                        h.due = h.due.max(due);
                    }
                    Some(h) if h.token == *token => {
                        lost.extend(held.remove(name).map(|h| (name.clone(), h)));
                    }
                    _ if renewed.contains(&(name.as_str(), *token)) => {
                        ended.push((name.clone(), *token));
                    }
                    _ => {}
                }
            }
            lost
        };
        for (name, h) in &lost {
            tracing::warn!(lease = %name, token = h.token, "lease lost");
            h.ended.cancel();
        }
        if !lost.is_empty() {
            self.report();
        }
        ended
    }

    /// Ends the terms that fell due: their leases may lapse before any
    /// renewal could still reach the database. Those falling due within
    /// [`DUE_TOGETHER`] end with them (early is safe), so that terms taken
    /// one after another do not each cost a pass over all the others.
    fn end_due(&self) {
        let Some(shared) = &self.inner.shared else {
            return;
        };
        let until = Instant::now() + DUE_TOGETHER;
        let due: Vec<(String, Held)> = {
            let mut held = shared.held();
            let names: Vec<String> = held
                .iter()
                .filter(|(_, h)| h.due <= until)
                .map(|(name, _)| name.clone())
                .collect();
            names
                .into_iter()
                .filter_map(|name| held.remove(&name).map(|h| (name, h)))
                .collect()
        };
        for (name, h) in &due {
            tracing::warn!(lease = %name, token = h.token, "lease given up: it could not be renewed in time");
            h.ended.cancel();
        }
        if !due.is_empty() {
            self.report();
        }
    }

    /// Ends every term: this replica is leaving.
    fn end_all(&self) {
        let Some(shared) = &self.inner.shared else {
            return;
        };
        let all: Vec<(String, Held)> = shared.held().drain().collect();
        for (_, h) in &all {
            h.ended.cancel();
        }
        if !all.is_empty() {
            self.report();
        }
    }

    fn report(&self) {
        let Some(shared) = &self.inner.shared else {
            return;
        };
        // Counted in place: called on every lease taken or given up, it
        // must not copy (or sort) thousands of session leases.
        let (mut leads, sessions) = {
            let held = shared.held();
            let leads: Vec<String> = held
                .keys()
                .filter_map(|n| n.strip_prefix("ingress:"))
                .map(str::to_string)
                .collect();
            let sessions = held.keys().filter(|n| n.starts_with("session:")).count();
            (leads, sessions)
        };
        leads.sort();
        let leads: Vec<&str> = leads.iter().map(String::as_str).collect();
        events::emit(events::ClusterHoldings {
            leads: &leads,
            sessions,
        });
        let role = if leads.is_empty() {
            "standby".to_string()
        } else {
            format!("leads {}", leads.join(", "))
        };
        shared.health.set(
            COMPONENT,
            true,
            format!(
                "replica {}: {role}; owns {sessions} sessions",
                self.inner.name
            ),
        );
    }
}

impl Shared {
    /// The due time of a term taken or renewed by a request sent at `sent`.
    fn due(&self, sent: Instant) -> Instant {
        sent + self.ttl - self.ttl / 6
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Forgets replicas gone for ten leases (and leases lapsed for a day).
async fn prune(store: &Store, ttl: Duration) -> Result<(), StoreError> {
    let pruned = store.replicas_prune(10 * millis(ttl)).await?;
    if pruned > 0 {
        tracing::info!(
            replicas.pruned = pruned,
            "replicas not seen for long forgotten"
        );
    }
    Ok(())
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
