//! The adapter's life: connecting (the bot's identity over REST, retried),
//! the gateway thread held while this replica leads Discord's ingress, and
//! the loops that take its events and interactions in order.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serenity::all::{Command, Interaction};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::gateway::{self, Incoming, Senders, rest, spawn_gateway};
use super::inbound::Places;
use super::interactions::{self, Interactions};
use super::{Discord, ID};
use crate::adapters::{ComponentContext, lifecycle};
use crate::platform::Revision;

/// Takes interactions once the adapter exists, each in its own task on
/// the daemon's tracker, until `stop`.
async fn interactions_loop(
    mut rx: mpsc::Receiver<Box<Interaction>>,
    mut adapter: tokio::sync::watch::Receiver<Option<Arc<Discord>>>,
    stop: CancellationToken,
) {
    let ready = tokio::select! {
        a = adapter.wait_for(Option::is_some) => a.ok().and_then(|a| a.clone()),
        _ = stop.cancelled() => None,
    };
    // None when the daemon stops before the first READY.
    let Some(adapter) = ready else {
        return;
    };
    loop {
        let interaction = tokio::select! {
            i = rx.recv() => i,
            _ = stop.cancelled() => None,
        };
        let Some(interaction) = interaction else {
            return;
        };
        let a = adapter.clone();
        adapter
            .gateway
            .tasks
            .spawn(async move { a.on_interaction(*interaction).await });
    }
}

/// Builds the adapter from the bot's identity (over REST, so a replica
/// that does not hold the gateway still sends and edits), then, while this
/// replica holds the gateway, takes its events.
pub(super) async fn run(ctx: ComponentContext) {
    let gw = ctx.gateway.clone();
    let config = gw.config.discord.clone();
    if !config.enabled {
        return;
    }
    let token = gw
        .env
        .get(&config.token_env)
        .unwrap_or_default()
        .to_string();
    let http = Arc::new(rest(&token, &config.api_url));
    let Some(me) = lifecycle::identify(&ctx, ID, || http.get_current_user(), |_| None).await else {
        return;
    };
    let adapter = Arc::new(Discord {
        http: http.clone(),
        me: me.id,
        gateway: gw.clone(),
        places: Places::default(),
        threads: Mutex::new(HashSet::new()),
        starting: tokio::sync::Mutex::new(()),
        openers: Mutex::new(HashMap::new()),
        seen: Mutex::new(HashMap::new()),
        interactions: Interactions::default(),
        files: crate::http::client::client(),
    });
    tracing::info!(bot = %me.name, id = %me.id, "discord connected");
    let events = lifecycle::lead(&ctx, ID, |ended| {
        let (adapter, ctx, token) = (&adapter, &ctx, &token);
        async move { take_events(adapter, ctx, token, &ended).await }
    });
    lifecycle::attached(&ctx, ID, adapter.clone(), events).await;
}

/// Runs the gateway thread and takes its events until `stop` (the
/// daemon's, or the end of this replica's term as the gateway's holder).
async fn take_events(
    adapter: &Arc<Discord>,
    ctx: &ComponentContext,
    token: &str,
    stop: &CancellationToken,
) {
    let gw = &ctx.gateway;
    let (tx, mut rx) = mpsc::channel(gateway::EVENTS_WAITING);
    let (itx, irx) = mpsc::channel(gateway::INTERACTIONS_WAITING);
    let senders = Senders {
        events: tx,
        interactions: itx,
    };
    let (ready_tx, ready_rx) = tokio::sync::watch::channel(None);
    gw.tasks
        .spawn(interactions_loop(irx, ready_rx, stop.child_token()));
    let thread = match spawn_gateway(
        token.to_string(),
        gw.config.discord.api_url.clone(),
        senders,
        stop.clone(),
    ) {
        Ok(thread) => thread,
        Err(err) => {
            ctx.health.set(ID, false, format!("gateway thread: {err}"));
            stop.cancelled().await;
            return;
        }
    };
    let mut ready = false;
    loop {
        let incoming = tokio::select! {
            incoming = rx.recv() => incoming,
            _ = stop.cancelled() => None,
        };
        let Some(incoming) = incoming else {
            break;
        };
        match incoming {
            Incoming::Ready(r) => {
                ctx.health
                    .set(ID, true, format!("connected as {}", r.user.name));
                if ready {
                    // A new session, not a resume: events of the gap were lost.
                    adapter.catch_up().await;
                    continue;
                }
                ready = true;
                adapter.http.set_application_id(r.application.id);
                let http = adapter.http.clone();
                gw.tasks.spawn(async move {
                    match Command::set_global_commands(&*http, interactions::commands()).await {
                        Ok(cmds) => {
                            tracing::info!(count = cmds.len(), "discord slash commands registered")
                        }
                        Err(err) => {
                            tracing::warn!(error = %err, "discord slash commands not registered")
                        }
                    }
                });
                let _ = ready_tx.send(Some(adapter.clone()));
                // What was written while no replica read the gateway.
                adapter.recall_seen().await;
                adapter.catch_up().await;
            }
            Incoming::Up if ready => ctx.health.set(ID, true, "connected"),
            Incoming::Up => {}
            Incoming::Down(reason) => ctx.health.set(ID, false, reason),
            Incoming::Message(msg) => {
                if !ready {
                    continue;
                }
                // Discord does not send a gateway event again: while storage
                // is away the message is held (later ones wait behind it in
                // the channel, in order) and offered again once it is back.
                // A stop first leaves it to the next start's catch-up.
                while !adapter.on_message(&msg, Revision::New).await {
                    if !gw.sessions.storage_back(stop).await {
                        break;
                    }
                }
            }
            Incoming::Edited(msg) if ready => {
                adapter.on_message(&msg, Revision::Edited).await;
            }
            Incoming::Deleted(channel, message) if ready => {
                adapter.on_delete(channel, message).await;
            }
            Incoming::Edited(_) | Incoming::Deleted(..) => {}
        }
    }
    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
}
