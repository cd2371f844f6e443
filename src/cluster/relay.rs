//! Requests to whichever replica can answer them (PostgreSQL): a turn
//! waits for an approval or a question's answer on the replica that owns
//! its session, while the button press or the `/approve` reaches any
//! replica (the one reading the platform's gateway, or whichever the load
//! balancer picked). That replica asks the others on [`ASK`] under a kind
//! (`approval`, `question`); each hands the request to its handler of that
//! kind, which answers only if the waiting turn is its own, and the answer
//! comes back on [`ANSWER`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::store::{Store, StoreError, new_id};

/// Where a replica asks the others.
pub const ASK: &str = "switchboard_ask";
/// Where the replica that could answer does.
pub const ANSWER: &str = "switchboard_answer";

/// How long a replica waits for the one that can answer.
const PATIENCE: Duration = Duration::from_secs(5);

type Future<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Answers the requests of one kind: `None` when this replica holds
/// nothing they are for.
pub trait Handler: Send + Sync {
    /// The answer to `body`, if it is this replica's to give.
    fn answer(&self, body: String) -> Future<'_, Option<String>>;
}

#[derive(Debug, Serialize, Deserialize)]
struct Ask {
    req: String,
    from: String,
    kind: String,
    body: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct Answer {
    req: String,
    to: String,
    body: String,
}

/// This replica's end of the relay; share it behind an `Arc`.
pub struct Relay {
    store: Store,
    replica: String,
    waiting: Mutex<HashMap<String, oneshot::Sender<String>>>,
    handlers: Mutex<HashMap<String, Arc<dyn Handler>>>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Relay {
    /// The relay of replica `replica` over `store`'s database.
    pub fn new(store: Store, replica: &str) -> Self {
        Self {
            store,
            replica: replica.to_string(),
            waiting: Mutex::new(HashMap::new()),
            handlers: Mutex::new(HashMap::new()),
        }
    }

    /// Answers the other replicas' requests of `kind` with `handler`.
    pub fn handle(&self, kind: &str, handler: Arc<dyn Handler>) {
        locked(&self.handlers).insert(kind.to_string(), handler);
    }

    /// Asks the other replicas; the answer of the one whose handler of
    /// `kind` gave one, or `None` when none did in time (the replica it
    /// was for is gone). The body must fit a NOTIFY (under 7 KiB).
    pub async fn ask(&self, kind: &str, body: String) -> Result<Option<String>, StoreError> {
        let req = new_id();
        let ask = Ask {
            req: req.clone(),
            from: self.replica.clone(),
            kind: kind.to_string(),
            body,
        };
        let (tx, rx) = oneshot::channel();
        locked(&self.waiting).insert(req.clone(), tx);
        let payload = serde_json::to_string(&ask).unwrap_or_default();
        if let Err(err) = self.store.notify(ASK, &payload).await {
            locked(&self.waiting).remove(&req);
            return Err(err);
        }
        let answer = tokio::time::timeout(PATIENCE, rx).await;
        locked(&self.waiting).remove(&req);
        Ok(answer.ok().and_then(Result::ok))
    }

    /// Takes the others' requests and the answers to this replica's, until
    /// `stop`.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut listener = None;
        loop {
            if listener.is_none() {
                let listening = tokio::select! {
                    _ = stop.cancelled() => return,
                    l = self.store.listen(&[ASK, ANSWER]) => l,
                };
                match listening {
                    Ok(Some(l)) => listener = Some(l),
                    Ok(None) => return,
                    Err(err) => {
                        tracing::warn!(error = %err, "not listening for other replicas' requests; trying again");
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        }
                    }
                }
            }
            let Some(l) = listener.as_mut() else { continue };
            let told = tokio::select! {
                _ = stop.cancelled() => return,
                told = l.recv() => told,
            };
            match told {
                Ok(n) if self.store.is_channel(n.channel(), ASK) => {
                    if let Ok(ask) = serde_json::from_str::<Ask>(n.payload())
                        && ask.from != self.replica
                    {
                        let handler = locked(&self.handlers).get(&ask.kind).cloned();
                        if let Some(handler) = handler {
                            let relay = self.clone();
                            tokio::spawn(async move { relay.answer(handler, ask).await });
                        }
                    }
                }
                Ok(n) => {
                    if let Ok(answer) = serde_json::from_str::<Answer>(n.payload())
                        && answer.to == self.replica
                        && let Some(tx) = locked(&self.waiting).remove(&answer.req)
                    {
                        let _ = tx.send(answer.body);
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "listening for other replicas' requests failed; listening again");
                    listener = None;
                }
            }
        }
    }

    async fn answer(&self, handler: Arc<dyn Handler>, ask: Ask) {
        let Some(body) = handler.answer(ask.body).await else {
            return;
        };
        let answer = Answer {
            req: ask.req,
            to: ask.from,
            body,
        };
        let payload = serde_json::to_string(&answer).unwrap_or_default();
        if let Err(err) = self.store.notify(ANSWER, &payload).await {
            tracing::warn!(kind = %ask.kind, error = %err, "a request was carried out but not answered");
        }
    }
}
