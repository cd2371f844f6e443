//! The gateway side: serenity's client on its own thread, handing events to
//! the adapter in arrival order; and the REST client both sides build from
//! the config.
//!
//! serenity starts a task per gateway event, so on a multi-threaded runtime
//! two messages that arrive together can be handled out of order. The
//! gateway therefore runs on its own single-threaded runtime, where those
//! tasks start in arrival order, and each hands its event to one ordered
//! channel before it first waits; the daemon's runtime takes them from
//! there.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serenity::all::{
    ChannelId, ConnectionStage, Context, EventHandler, GatewayIntents, GuildId, Http, HttpBuilder,
    Interaction, Message, MessageId, MessageUpdateEvent, Ready, ShardStageUpdateEvent,
};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::platform::Backoff;

/// The REST base that needs no proxy setting.
const DISCORD: &str = "https://discord.com";
/// How long the gateway may take to close on shutdown.
const CLOSE_WITHIN: Duration = Duration::from_secs(1);

/// A REST client for `api_url`. Another base than Discord's is serenity's
/// proxy mode: requests go there, and rate limits are the proxy's to keep
/// (serenity's own limiter only speaks to Discord directly).
pub fn rest(token: &str, api_url: &str) -> Http {
    let mut builder = HttpBuilder::new(token);
    let base = api_url.trim_end_matches('/');
    if base != DISCORD {
        builder = builder.proxy(base).ratelimiter_disabled(true);
    }
    builder.build()
}

/// What the gateway thread hands to the daemon, in arrival order.
pub enum Incoming {
    Ready(Box<Ready>),
    Up,
    Down(String),
    Message(Box<Message>),
    /// A message as it was edited to.
    Edited(Box<Message>),
    /// A message was deleted.
    Deleted(ChannelId, MessageId),
}

/// Events waiting for the adapter before the gateway stops reading.
pub const EVENTS_WAITING: usize = 1024;
/// Interactions waiting for the adapter.
pub const INTERACTIONS_WAITING: usize = 256;

/// Where the gateway hands events: messages and connection changes in
/// order; interactions apart, since each owes an answer within 3 seconds
/// and must not wait behind message handling or a catch-up. Both are
/// bounded: when the adapter falls behind, the gateway waits (and Discord
/// keeps the events) instead of memory growing.
#[derive(Clone)]
pub struct Senders {
    /// Messages and connection changes.
    pub events: mpsc::Sender<Incoming>,
    /// Button presses and slash commands.
    pub interactions: mpsc::Sender<Box<Interaction>>,
}

/// Forwards events in their order: serenity starts a task per event on
/// this single-threaded runtime in arrival order, and a full channel
/// queues the senders first come, first served. Notes when the shard
/// first connects.
struct Forward(Senders, Arc<OnceLock<Instant>>);

#[serenity::async_trait]
impl EventHandler for Forward {
    async fn ready(&self, _: Context, ready: Ready) {
        let _ = self.0.events.send(Incoming::Ready(Box::new(ready))).await;
    }

    async fn message(&self, _: Context, msg: Message) {
        let _ = self.0.events.send(Incoming::Message(Box::new(msg))).await;
    }

    async fn message_update(
        &self,
        _: Context,
        _: Option<Message>,
        _: Option<Message>,
        event: MessageUpdateEvent,
    ) {
        // The gateway sends the whole edited message; serenity keeps its
        // fields optional.
        let edited = serde_json::to_value(&event)
            .ok()
            .and_then(|v| serde_json::from_value::<Message>(v).ok());
        match edited {
            Some(msg) => {
                let _ = self.0.events.send(Incoming::Edited(Box::new(msg))).await;
            }
            None => {
                tracing::debug!(message = %event.id, "discord edit without its message; ignored")
            }
        }
    }

    async fn message_delete(
        &self,
        _: Context,
        channel: ChannelId,
        message: MessageId,
        _: Option<GuildId>,
    ) {
        let _ = self
            .0
            .events
            .send(Incoming::Deleted(channel, message))
            .await;
    }

    async fn interaction_create(&self, _: Context, interaction: Interaction) {
        let _ = self.0.interactions.send(Box::new(interaction)).await;
    }

    async fn shard_stage_update(&self, _: Context, event: ShardStageUpdateEvent) {
        if event.new == ConnectionStage::Connected {
            let _ = self.1.set(Instant::now());
        }
        let _ = self
            .0
            .events
            .send(if event.new == ConnectionStage::Connected {
                Incoming::Up
            } else {
                Incoming::Down(format!("gateway {}", event.new))
            })
            .await;
    }
}

/// Runs the gateway on its own thread and single-threaded runtime until
/// `stop`; serenity reconnects and resumes by itself, and a client that
/// ends (bad token, gateway gone) or panics is started again after
/// [`next_wait`].
pub fn spawn_gateway(
    token: String,
    api_url: String,
    tx: Senders,
    stop: CancellationToken,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("discord-gateway".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(err) => {
                    let _ = tx
                        .events
                        .blocking_send(Incoming::Down(format!("gateway runtime: {err}")));
                    return;
                }
            };
            runtime.block_on(gateway(token, api_url, tx, stop));
        })
}

thread_local! {
    /// On the gateway thread: where a panic on it is noted.
    static PANICKED: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// Notes every panic on this thread in the flag returned. serenity runs a
/// shard in a task of the gateway's runtime, and its parsers panic on some
/// malformed fields (a 32-byte avatar hash that is not hex, found by the
/// fuzzer): the task ends, nothing reads the gateway any more, and
/// `Client::start` waits forever. The flag lets the gateway see that and
/// start a new client.
fn watch_panics() -> Arc<AtomicBool> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.with(|flag| {
                if let Ok(flag) = flag.try_borrow()
                    && let Some(flag) = flag.as_ref()
                {
                    flag.store(true, Ordering::SeqCst);
                }
            });
            previous(info);
        }));
    });
    let flag = Arc::new(AtomicBool::new(false));
    PANICKED.with(|slot| *slot.borrow_mut() = Some(flag.clone()));
    flag
}

/// Returns once `flag` is raised, lowering it.
async fn raised(flag: &AtomicBool) {
    while !flag.swap(false, Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The first wait before a client is started again.
const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest: Discord resets a bot's token after 1 000 identifies in a
/// day, and clients that keep ending (a gateway that closes at once, an
/// event serenity panics on sent after each connect) are started again
/// at most every 2 minutes (the lower half of the jitter), 720 a day.
const LONGEST_WAIT: Duration = Duration::from_secs(240);
/// A client connected this long was well: the one after it starts the
/// waits over.
const STEADY: Duration = Duration::from_secs(600);

/// The wait before the next client, after one that stayed connected for
/// `connected` (`None`: it never connected): from the first step again
/// after a client that stayed, so one ending after days of service is back
/// within a second; otherwise a step further, so clients ending soon after
/// connecting do not identify in a tight loop. Counted from the connection,
/// not the client's start: serenity's own retries before it are not
/// service.
fn next_wait(backoff: &mut Backoff, connected: Option<Duration>) -> Duration {
    if connected.is_some_and(|stayed| stayed >= STEADY) {
        backoff.reset();
    }
    backoff.next_wait()
}

async fn gateway(token: String, api_url: String, tx: Senders, stop: CancellationToken) {
    let intents = GatewayIntents::GUILD_MESSAGES
        | GatewayIntents::DIRECT_MESSAGES
        | GatewayIntents::MESSAGE_CONTENT;
    let panicked = watch_panics();
    let mut backoff = Backoff::new(FIRST_WAIT, LONGEST_WAIT);
    while !stop.is_cancelled() {
        // Each client's own: a late stage update of one that ended must
        // not count for the next.
        let connected = Arc::new(OnceLock::new());
        let client =
            serenity::client::ClientBuilder::new_with_http(rest(&token, &api_url), intents)
                .event_handler(Forward(tx.clone(), connected.clone()))
                .await;
        let reason = match client {
            Ok(mut client) => {
                let manager = client.shard_manager.clone();
                tokio::select! {
                    ended = client.start() => match ended {
                        Ok(()) => "gateway closed".to_string(),
                        Err(err) => format!("gateway: {err}"),
                    },
                    () = raised(&panicked) => {
                        let _ = tokio::time::timeout(CLOSE_WITHIN, manager.shutdown_all()).await;
                        "the gateway client panicked on an event".to_string()
                    }
                    _ = stop.cancelled() => {
                        // Bounded: a gateway that never answers the close
                        // frame must not hold up the daemon's exit.
                        let _ = tokio::time::timeout(CLOSE_WITHIN, manager.shutdown_all()).await;
                        return;
                    }
                }
            }
            Err(err) => format!("gateway: {err}"),
        };
        let wait = next_wait(&mut backoff, connected.get().map(Instant::elapsed));
        tracing::warn!(reason, retry_in = ?wait, "discord gateway down");
        // Raced against the stop: the adapter stops reading at shutdown
        // and then waits for this thread.
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tx.events.send(Incoming::Down(reason)) => {}
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_start_over_only_after_a_client_that_stayed() {
        let mut backoff = Backoff::new(FIRST_WAIT, LONGEST_WAIT);
        let quick = Duration::from_secs(2);
        let waits: Vec<Duration> = (0..12)
            .map(|_| next_wait(&mut backoff, Some(quick)))
            .collect();
        // Clients that connect and end at once: growing waits, never a day
        // of more than 1 000 identifies.
        assert!(waits[3] >= Duration::from_secs(4), "{waits:?}");
        let least = waits[10..].iter().min().unwrap();
        assert!(86_400 / least.as_secs() < 1_000, "{waits:?}");
        // Ending without having connected does not start over either.
        assert!(next_wait(&mut backoff, None) >= Duration::from_secs(60));
        // After a client that stayed connected: the first wait again.
        assert!(next_wait(&mut backoff, Some(STEADY)) <= FIRST_WAIT);
        assert!(next_wait(&mut backoff, Some(quick)) <= 2 * FIRST_WAIT);
    }
}
