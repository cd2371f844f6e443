//! Decisions across replicas (PostgreSQL): the turn waiting for an approval
//! runs on the replica that owns its session, while the button press or
//! `/approve` can reach any replica (the one reading the platform's
//! gateway, or whichever the load balancer picked). A replica that has no
//! waiter for a pending approval asks the others on [`ASK`]; the one that
//! has it decides, through the same broker path as a local press (the
//! prompt is edited, the turn resumes), and answers on [`ANSWER`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::broker::Broker;
use super::decision::{Choice, Decision, Refusal};
use crate::platform::{Actor, ChatRef};
use crate::store::{Store, new_id};

/// Where a replica asks the others to decide.
pub const ASK: &str = "switchboard_decide";
/// Where the deciding replica answers.
pub const ANSWER: &str = "switchboard_decided";

/// How long a replica waits for the one holding the request.
const PATIENCE: Duration = Duration::from_secs(5);
/// Longest reason carried (a NOTIFY payload holds 8000 bytes).
const REASON_CHARS: usize = 1000;

#[derive(Debug, Serialize, Deserialize)]
struct Ask {
    req: String,
    from: String,
    id: String,
    choice: Choice,
    actor: Actor,
    reason: Option<String>,
    /// The chat a vouched-for actor may decide in.
    vouched: Option<ChatRef>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Answer {
    req: String,
    to: String,
    result: Result<Decision, Refusal>,
}

type Waiting = Mutex<HashMap<String, oneshot::Sender<Result<Decision, Refusal>>>>;

/// This replica's end of the relay; share it behind an `Arc`.
pub struct Relay {
    store: Store,
    replica: String,
    waiting: Waiting,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

impl Relay {
    /// The relay of replica `replica` over `store`'s database.
    pub fn new(store: Store, replica: &str) -> Self {
        Self {
            store,
            replica: replica.to_string(),
            waiting: Mutex::new(HashMap::new()),
        }
    }

    fn waiting(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<Result<Decision, Refusal>>>>
    {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks the replica waiting for approval `id` to decide it; `Expired`
    /// when none answers in time (its replica is gone).
    pub(super) async fn forward(
        &self,
        id: &str,
        choice: Choice,
        actor: &Actor,
        reason: Option<String>,
        vouched: Option<&ChatRef>,
    ) -> Result<Decision, Refusal> {
        let req = new_id();
        let ask = Ask {
            req: req.clone(),
            from: self.replica.clone(),
            id: id.to_string(),
            choice,
            actor: actor.clone(),
            reason: reason.map(|r| crate::render::clip(&r, REASON_CHARS)),
            vouched: vouched.cloned(),
        };
        let (tx, rx) = oneshot::channel();
        self.waiting().insert(req.clone(), tx);
        let payload = serde_json::to_string(&ask).unwrap_or_default();
        if let Err(err) = self.store.notify(ASK, &payload).await {
            self.waiting().remove(&req);
            tracing::warn!(approval.id = id, error = %err, "decision not relayed");
            return Err(Refusal::Storage);
        }
        let answer = tokio::time::timeout(PATIENCE, rx).await;
        self.waiting().remove(&req);
        match answer {
            Ok(Ok(result)) => result,
            _ => Err(Refusal::Expired),
        }
    }

    /// Takes the others' asks (deciding those this replica waits for) and
    /// their answers to this one's, until `stop`.
    pub async fn run(self: Arc<Self>, broker: Arc<Broker>, stop: CancellationToken) {
        let mut listener = None;
        loop {
            if listener.is_none() {
                match self.store.listen(&[ASK, ANSWER]).await {
                    Ok(Some(l)) => listener = Some(l),
                    Ok(None) => return,
                    Err(err) => {
                        tracing::warn!(error = %err, "not listening for other replicas' decisions; trying again");
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
                Ok(n) if n.channel() == ASK => {
                    if let Ok(ask) = serde_json::from_str::<Ask>(n.payload())
                        && ask.from != self.replica
                        && broker.waits_for(&ask.id)
                    {
                        let (relay, broker) = (self.clone(), broker.clone());
                        tokio::spawn(async move { relay.decide(&broker, ask).await });
                    }
                }
                Ok(n) => {
                    if let Ok(answer) = serde_json::from_str::<Answer>(n.payload())
                        && answer.to == self.replica
                        && let Some(tx) = self.waiting().remove(&answer.req)
                    {
                        let _ = tx.send(answer.result);
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "listening for other replicas' decisions failed; listening again");
                    listener = None;
                }
            }
        }
    }

    async fn decide(&self, broker: &Broker, ask: Ask) {
        let result = broker
            .decide_here(
                &ask.id,
                ask.choice,
                &ask.actor,
                ask.reason,
                ask.vouched.as_ref(),
            )
            .await;
        let answer = Answer {
            req: ask.req,
            to: ask.from,
            result,
        };
        let payload = serde_json::to_string(&answer).unwrap_or_default();
        if let Err(err) = self.store.notify(ANSWER, &payload).await {
            tracing::warn!(approval.id = %ask.id, error = %err, "relayed decision made but not answered");
        }
    }
}
