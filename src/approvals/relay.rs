//! Approvals across replicas: a decision for a request whose turn waits on
//! another replica goes there through the cluster's relay, and is made by
//! that replica's broker the way a local press is (the prompt is edited,
//! the turn resumes).

use std::sync::{Arc, Weak};

use serde::{Deserialize, Serialize};

use super::broker::Broker;
use super::decision::{Choice, Decision, Refusal};
use crate::cluster::relay::{Handler, Relay};
use crate::platform::{Actor, ChatRef};

/// The relay kind of approval decisions.
pub const KIND: &str = "approval";

/// Longest reason carried (a NOTIFY payload holds 8000 bytes).
const REASON_CHARS: usize = 1000;

#[derive(Debug, Serialize, Deserialize)]
struct Ask {
    id: String,
    choice: Choice,
    actor: Actor,
    reason: Option<String>,
    /// The chat a vouched-for actor may decide in.
    vouched: Option<ChatRef>,
}

/// Has the replica waiting for approval `id` decide it; `Expired` when none
/// answers (its replica is gone).
pub(super) async fn forward(
    relay: &Relay,
    id: &str,
    choice: Choice,
    actor: &Actor,
    reason: Option<String>,
    vouched: Option<&ChatRef>,
) -> Result<Decision, Refusal> {
    let ask = Ask {
        id: id.to_string(),
        choice,
        actor: actor.clone(),
        reason: reason.map(|r| crate::render::clip(&r, REASON_CHARS)),
        vouched: vouched.cloned(),
    };
    let body = serde_json::to_string(&ask).unwrap_or_default();
    match relay.ask(KIND, body).await {
        Ok(Some(answer)) => serde_json::from_str(&answer).unwrap_or(Err(Refusal::Storage)),
        Ok(None) => Err(Refusal::Expired),
        Err(err) => {
            tracing::warn!(approval.id = id, error = %err, "decision not relayed");
            Err(Refusal::Storage)
        }
    }
}

/// Decides the relayed requests this replica's broker waits for.
pub struct Decider(pub Weak<Broker>);

impl Decider {
    /// The handler for `broker`, registered on `relay`.
    pub fn register(broker: &Arc<Broker>, relay: &Relay) {
        relay.handle(KIND, Arc::new(Self(Arc::downgrade(broker))));
    }
}

impl Handler for Decider {
    fn answer(
        &self,
        body: String,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send + '_>> {
        Box::pin(async move {
            let ask: Ask = serde_json::from_str(&body).ok()?;
            let broker = self.0.upgrade()?;
            if !broker.waits_for(&ask.id) {
                return None;
            }
            let result = broker
                .decide_here(
                    &ask.id,
                    ask.choice,
                    &ask.actor,
                    ask.reason,
                    ask.vouched.as_ref(),
                )
                .await;
            serde_json::to_string(&result).ok()
        })
    }
}
