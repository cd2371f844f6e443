//! The life every connected platform shares: learn the bot's identity
//! (retried with backoff until the platform answers or the daemon stops),
//! attach the port, hold the platform's one connection while this replica
//! leads its ingress (standing by otherwise), give each term back, and
//! detach at the end. Each adapter brings only what differs: how it asks
//! who it is, what its port is, and how it takes events while it leads.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::ComponentContext;
use crate::platform::{Backoff, Platform};

/// Waits of the identity and of the platforms' connections: 1 s doubling
/// to 30 s, jittered.
pub fn backoff() -> Backoff {
    Backoff::new(Duration::from_secs(1), Duration::from_secs(30))
}

/// Asks platform `id` who the bot is with `ask` until it answers, showing
/// each failure in the platform's health entry and waiting as
/// [`backoff`] says (or as long as the platform said, `told`); `None` once
/// the daemon stops.
pub async fn identify<T, E, Fut>(
    ctx: &ComponentContext,
    id: &str,
    mut ask: impl FnMut() -> Fut,
    told: impl Fn(&E) -> Option<Duration>,
) -> Option<T>
where
    Fut: Future<Output = Result<T, E>>,
    E: Display,
{
    ctx.health.set(id, false, "connecting");
    let mut backoff = backoff();
    loop {
        let answer = tokio::select! {
            _ = ctx.stop.cancelled() => return None,
            answer = ask() => answer,
        };
        match answer {
            Ok(me) => return Some(me),
            Err(err) => {
                ctx.health
                    .set(id, false, format!("identity not read: {err}"));
                if !backoff.pause(&ctx.stop, told(&err)).await {
                    return None;
                }
            }
        }
    }
}

/// Attaches `port` as platform `id`, runs `connected` until it returns
/// (the daemon stopped), then detaches it.
pub async fn attached<Fut>(
    ctx: &ComponentContext,
    id: &str,
    port: Arc<dyn Platform>,
    connected: Fut,
) where
    Fut: Future<Output = ()>,
{
    ctx.gateway.attach(id, port).await;
    connected.await;
    ctx.gateway.detach(id);
}

/// While this replica leads platform `id`'s ingress, runs `serve` with
/// the end of its term (which also fires when the daemon stops), and gives
/// each term back after it; returns when the daemon stops.
pub async fn lead<Fut>(
    ctx: &ComponentContext,
    id: &str,
    mut serve: impl FnMut(CancellationToken) -> Fut,
) where
    Fut: Future<Output = ()>,
{
    while let Some(term) = ctx.lead(id).await {
        serve(term.ended.clone()).await;
        ctx.gateway.cluster.release(term).await;
    }
}
