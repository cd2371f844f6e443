//! The Discord adapter (serenity): the gateway websocket with the guild
//! message, direct message and message content intents; DMs and guild
//! channels, threads as session threads, optional auto-threads; replies in
//! chunks of at most 2000 characters that reference the triggering message,
//! typing while a turn runs; approvals and clarify questions as buttons
//! answered through interactions; slash commands registered at start.
//! Events come from [`gateway`] in arrival order; REST calls go through a
//! client of the daemon's runtime.

pub mod format;
pub mod gateway;
pub mod inbound;
pub mod interactions;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serenity::all::{
    ButtonStyle, ChannelId, Command, CommandInteraction, ComponentInteraction, CreateActionRow,
    CreateAllowedMentions, CreateButton, CreateMessage, CreateThread, EditMessage, GetMessages,
    Http, HttpError, Interaction, Message, MessageId, MessageReference, UserId,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::chunk::{self, chars};
use super::questions::{self, Questions};
use crate::adapters::Outbound;
use crate::agent::ClarifyBroker;
use crate::approvals::{Actor, ApprovalPrompter, ChatRef, Choice, Prompt};
use crate::daemon::{ComponentContext, Daemon, Gateway};
use crate::sessions::{ChatKind, InboundEvent, KeyRules, Replier, Submitted, session_key};
use crate::tools::builtin::clip;
use gateway::{Incoming, Senders, rest, spawn_gateway};
use inbound::{Place, Places};
use interactions::{Interactions, Pending};

/// Discord's message limit, in characters.
const LIMIT: usize = 2000;
/// Most messages read per channel when catching up after a new session.
const CATCH_UP: u8 = 100;
/// Messages older than this are not answered when catching up.
const CATCH_UP_WITHIN: Duration = Duration::from_secs(3600);
/// How many of the newest inbox events are read for where to catch up.
const RECALL_WINDOW: i64 = 5000;
/// Most channels remembered for catching up.
const SEEN_CAP: usize = 10_000;
/// Discord's error code for a message that has a thread already.
const THREAD_EXISTS: isize = 160_004;
/// Longest command shown in an approval prompt.
const PROMPT_COMMAND_CHARS: usize = 1500;

/// Adds the Discord component; it does nothing unless
/// `[discord] enabled = true`.
pub fn install(daemon: Daemon) -> Daemon {
    daemon.component("discord", run)
}

/// The running adapter.
pub struct Discord {
    http: Arc<Http>,
    me: UserId,
    gateway: Gateway,
    rules: KeyRules,
    questions: Questions,
    places: Places,
    /// Auto-threads known to exist.
    threads: Mutex<HashSet<String>>,
    /// The newest message seen in each channel, to catch up from.
    seen: Mutex<HashMap<ChannelId, MessageId>>,
    interactions: Interactions,
    this: Weak<Discord>,
}

impl std::fmt::Debug for Discord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discord")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

fn channel_id(id: &str) -> Result<ChannelId, String> {
    id.parse()
        .map_err(|_| format!("{id:?} is not a Discord channel id"))
}

fn chunks(text: &str) -> Vec<String> {
    chunk::split(&format::render(text), LIMIT, chars)
}

/// An auto-thread is the thread of the message that opened it, so it has
/// that message's id.
fn is_auto_thread(event: &InboundEvent) -> bool {
    event.kind == ChatKind::Group
        && event.thread_id.is_some()
        && event.thread_id == event.message_id
}

/// A thread name from the message that opens it.
fn thread_name(text: &str) -> String {
    let first = text.lines().next().unwrap_or_default().trim();
    let name = clip(first, 90);
    if name.is_empty() {
        "switchboard".into()
    } else {
        name
    }
}

impl Discord {
    /// Sends `text` to `channel` in chunks; the first references
    /// `reference` (in the same channel). Returns the last message's id.
    async fn post(
        &self,
        channel: &str,
        reference: Option<&str>,
        text: &str,
    ) -> Result<String, String> {
        let channel = channel_id(channel)?;
        let reference = reference.and_then(|m| m.parse::<MessageId>().ok());
        let mut last = String::new();
        for (i, part) in chunks(text).into_iter().enumerate() {
            let mut msg = CreateMessage::new()
                .content(part)
                .allowed_mentions(CreateAllowedMentions::new().replied_user(true));
            if i == 0
                && let Some(m) = reference
            {
                let mut r = MessageReference::from((channel, m));
                r.fail_if_not_exists = Some(false);
                msg = msg.reference_message(r);
            }
            let sent = channel
                .send_message(&*self.http, msg)
                .await
                .map_err(|e| e.to_string())?;
            last = sent.id.to_string();
        }
        Ok(last)
    }

    /// Where replies to `event` go, and the message they reference. An
    /// auto-thread is started here, the first time it is needed; if it
    /// cannot be, replies go to the channel instead.
    async fn destination(&self, event: &InboundEvent) -> (String, Option<String>) {
        if !is_auto_thread(event) {
            let channel = event.thread_id.as_ref().unwrap_or(&event.chat_id).clone();
            return (channel, event.message_id.clone());
        }
        let thread = event.thread_id.clone().unwrap_or_default();
        if self.lock_threads().contains(&thread) {
            return (thread, None);
        }
        let Ok((parent, message)) = channel_id(&event.chat_id).and_then(|parent| {
            let message = thread
                .parse::<MessageId>()
                .map_err(|_| format!("{thread:?} is not a message id"))?;
            Ok((parent, message))
        }) else {
            return (event.chat_id.clone(), event.message_id.clone());
        };
        let created = parent
            .create_thread_from_message(
                &*self.http,
                message,
                CreateThread::new(thread_name(&event.text)),
            )
            .await;
        match created {
            Ok(_) => {}
            // Started already (by an earlier run, before a replay).
            Err(serenity::Error::Http(HttpError::UnsuccessfulRequest(resp)))
                if resp.error.code == THREAD_EXISTS => {}
            Err(err) => {
                tracing::warn!(channel = %event.chat_id, error = %err, "discord thread not started; answering in the channel");
                return (event.chat_id.clone(), event.message_id.clone());
            }
        }
        self.lock_threads().insert(thread.clone());
        (thread, None)
    }

    fn lock_threads(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.threads.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes one gateway message: builds its event, lets an answer to an
    /// open question or a message in a thread the bot talks in through,
    /// and submits it.
    fn saw(&self, channel: ChannelId, id: MessageId) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() >= SEEN_CAP && !seen.contains_key(&channel) {
            seen.clear();
        }
        let newest = seen.entry(channel).or_insert(id);
        *newest = (*newest).max(id);
    }

    /// Remembers where the messages stored in the last [`CATCH_UP_WITHIN`]
    /// were written, so that the first session catches up on what was
    /// written while the daemon was down.
    async fn recall_seen(&self) {
        let rows = match self
            .gateway
            .store
            .inbox_latest("discord", RECALL_WINDOW)
            .await
        {
            Ok(rows) => rows,
            Err(err) => {
                tracing::warn!(error = %err, "discord: stored messages not read; no catch-up");
                return;
            }
        };
        let since = crate::store::now_ms() - CATCH_UP_WITHIN.as_millis() as i64;
        for row in rows.into_iter().filter(|r| r.received_at >= since) {
            let Ok(event) = serde_json::from_str::<InboundEvent>(&row.payload) else {
                continue;
            };
            let Some(message) = event.message_id.as_deref().and_then(|m| m.parse().ok()) else {
                continue;
            };
            let written_in = if is_auto_thread(&event) {
                &event.chat_id
            } else {
                event.thread_id.as_ref().unwrap_or(&event.chat_id)
            };
            if let Ok(channel) = channel_id(written_in) {
                self.saw(channel, message);
            }
        }
    }

    /// After a new gateway session (not a resume) the events of the gap
    /// are gone: each channel's messages since the newest one seen there
    /// are read and taken like gateway messages (at most [`CATCH_UP`] per
    /// channel, none older than [`CATCH_UP_WITHIN`]); the inbox drops the
    /// ones taken already.
    async fn catch_up(&self) {
        let seen: Vec<(ChannelId, MessageId)> = self
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(c, m)| (*c, *m))
            .collect();
        let oldest = crate::store::now_ms() / 1000 - CATCH_UP_WITHIN.as_secs() as i64;
        for (channel, after) in seen {
            let missed = channel
                .messages(&*self.http, GetMessages::new().after(after).limit(CATCH_UP))
                .await;
            match missed {
                Ok(mut missed) => {
                    missed.sort_by_key(|m| m.id);
                    tracing::info!(channel = %channel, count = missed.len(), "discord catch-up");
                    for msg in missed {
                        if msg.timestamp.unix_timestamp() >= oldest {
                            self.on_message(msg).await;
                        }
                    }
                }
                Err(err) => {
                    tracing::warn!(channel = %channel, error = %err, "discord catch-up failed");
                }
            }
        }
    }

    async fn on_message(&self, msg: Message) {
        self.saw(msg.channel_id, msg.id);
        let place = if msg.guild_id.is_some() {
            self.places.resolve(&self.http, msg.channel_id).await
        } else {
            Place::channel(msg.channel_id)
        };
        let in_thread = place.thread.is_some();
        let config = &self.gateway.config.discord;
        let Some(mut event) = inbound::message_event(&msg, self.me, place, config) else {
            return;
        };
        if !event.from_bot
            && self
                .questions
                .answer_text(&msg.channel_id.to_string(), &event.user_id, &event.text)
        {
            return;
        }
        if !event.mentioned && in_thread {
            let key = session_key(&event, self.rules);
            event.mentioned = matches!(
                self.gateway.store.open_session_by_key(&key).await,
                Ok(Some(_))
            );
        }
        if let Err(err) = self.gateway.sessions.submit(event).await {
            tracing::error!(error = %err, message = %msg.id, "discord message not stored");
        }
    }

    async fn on_interaction(&self, interaction: Interaction) {
        match interaction {
            Interaction::Component(press) => self.on_press(press).await,
            Interaction::Command(cmd) => self.on_command(cmd).await,
            _ => {}
        }
    }

    /// A button: a clarify choice or an approval decision.
    async fn on_press(&self, press: ComponentInteraction) {
        let pending = Pending::new(press.id, &press.token, true);
        tokio::spawn(pending.clone().defer_when_late(self.http.clone()));
        let user = press.user.id.to_string();
        let data = press.data.custom_id.as_str();
        if data.starts_with("cl:") {
            match self.questions.answer_button(data, &user) {
                Ok(choice) => {
                    pending.acknowledge(&self.http).await;
                    let text = clip(&format!("{}\n→ {choice}", press.message.content), LIMIT);
                    let edit = EditMessage::new().content(text).components(Vec::new());
                    if let Err(err) = press
                        .channel_id
                        .edit_message(&*self.http, press.message.id, edit)
                        .await
                    {
                        tracing::warn!(error = %err, "discord question not updated");
                    }
                }
                Err(why) => pending.answer(&self.http, &[why.to_string()], true).await,
            }
            return;
        }
        let Some((id, choice)) = Choice::parse_button(data) else {
            pending
                .answer(
                    &self.http,
                    &["This button is no longer active.".into()],
                    true,
                )
                .await;
            return;
        };
        let actor = Actor {
            platform: "discord".into(),
            user_id: user,
            name: inbound::display_name(
                &press.user,
                press.member.as_ref().and_then(|m| m.nick.as_deref()),
            ),
        };
        match self.gateway.broker.resolve(&id, choice, &actor, None).await {
            Ok(_) => pending.acknowledge(&self.http).await,
            Err(refusal) => {
                pending
                    .answer(&self.http, &[refusal.to_string()], true)
                    .await;
            }
        }
    }

    /// A slash command: handed to the session manager as its text; the
    /// reply answers the interaction.
    async fn on_command(&self, cmd: CommandInteraction) {
        let pending = Pending::new(cmd.id, &cmd.token, false);
        tokio::spawn(pending.clone().defer_when_late(self.http.clone()));
        let Some(text) = interactions::command_text(&cmd) else {
            pending
                .answer(&self.http, &["I don't know that command.".into()], true)
                .await;
            return;
        };
        let place = match &cmd.channel {
            Some(ch) => {
                let place = Place::of(ch.id, ch.kind, ch.parent_id);
                self.places.learn(ch.id, place.clone());
                place
            }
            None if cmd.guild_id.is_some() => self.places.resolve(&self.http, cmd.channel_id).await,
            None => Place::channel(cmd.channel_id),
        };
        let event = InboundEvent {
            platform: "discord".into(),
            kind: if cmd.guild_id.is_some() {
                ChatKind::Group
            } else {
                ChatKind::Dm
            },
            chat_id: place.chat,
            thread_id: place.thread,
            user_id: cmd.user.id.to_string(),
            user_name: inbound::display_name(
                &cmd.user,
                cmd.member.as_ref().and_then(|m| m.nick.as_deref()),
            ),
            roles: cmd
                .member
                .as_ref()
                .map(|m| m.roles.iter().map(ToString::to_string).collect())
                .unwrap_or_default(),
            text,
            event_id: format!("interaction:{}", cmd.id),
            message_id: None,
            mentioned: true,
            from_bot: false,
            entity: None,
        };
        let key = event.event_id.clone();
        self.interactions.open(&key, pending);
        let outcome = self.gateway.sessions.submit(event).await;
        if let Some(pending) = self.interactions.take(&key) {
            let text = match outcome {
                Ok(Submitted::Ignored(_)) => "You are not allowed to use this bot here.",
                Ok(Submitted::Duplicate) => "Already received.",
                Ok(_) => "Sent.",
                Err(err) => {
                    tracing::error!(error = %err, "discord command not stored");
                    "That could not be taken right now; try again."
                }
            };
            pending.answer(&self.http, &[text.into()], true).await;
        }
    }
}

/// Asks a clarify question in one Discord channel.
struct DiscordQuestion {
    adapter: Arc<Discord>,
    event: InboundEvent,
}

#[async_trait::async_trait]
impl ClarifyBroker for DiscordQuestion {
    async fn ask(
        &self,
        question: &str,
        choices: &[String],
        cancel: &CancellationToken,
    ) -> Result<String, String> {
        let adapter = &self.adapter;
        let (channel, _) = adapter.destination(&self.event).await;
        let asked = adapter
            .questions
            .ask(&channel, Some(&self.event.user_id), choices);
        let buttons: Vec<CreateButton> = choices
            .iter()
            .take(5)
            .enumerate()
            .map(|(i, c)| {
                CreateButton::new(questions::button_data(&asked.id, i))
                    .label(clip(c, 80))
                    .style(ButtonStyle::Secondary)
            })
            .collect();
        let text = clip(&format!("❓ {}", format::render(question)), LIMIT);
        let mut msg = CreateMessage::new()
            .content(text)
            .allowed_mentions(CreateAllowedMentions::new());
        if !buttons.is_empty() {
            msg = msg.components(vec![CreateActionRow::Buttons(buttons)]);
        }
        let sent = match channel_id(&channel) {
            Ok(id) => id
                .send_message(&*adapter.http, msg)
                .await
                .map_err(|e| e.to_string()),
            Err(err) => Err(err),
        };
        if let Err(err) = sent {
            adapter.questions.drop_question(&asked);
            return Err(err);
        }
        adapter.questions.wait(asked, cancel).await
    }
}

#[async_trait::async_trait]
impl Replier for Discord {
    fn clarifier(&self, event: &InboundEvent) -> Option<Arc<dyn ClarifyBroker>> {
        Some(Arc::new(DiscordQuestion {
            adapter: self.this.upgrade()?,
            event: event.clone(),
        }))
    }

    async fn reply(&self, event: &InboundEvent, text: &str) {
        if let Some(pending) = self.interactions.take(&event.event_id) {
            pending.answer(&self.http, &chunks(text), false).await;
            return;
        }
        let (channel, reference) = self.destination(event).await;
        if let Err(err) = self.post(&channel, reference.as_deref(), text).await {
            tracing::warn!(channel, error = %err, "discord reply failed");
        }
    }

    async fn working(&self, event: &InboundEvent) {
        let (channel, _) = self.destination(event).await;
        let Ok(channel) = channel_id(&channel) else {
            return;
        };
        if let Err(err) = channel.broadcast_typing(&*self.http).await {
            tracing::debug!(error = %err, "discord typing failed");
        }
    }
}

#[async_trait::async_trait]
impl ApprovalPrompter for Discord {
    async fn show(&self, chat: &ChatRef, prompt: &Prompt) -> Result<String, String> {
        let channel = channel_id(chat.thread.as_ref().unwrap_or(&chat.chat))?;
        let text = format!(
            "⚠️ **Approval needed**\n{}\nReason: {}",
            format::code_block(&clip(&prompt.command, PROMPT_COMMAND_CHARS)),
            clip(&prompt.reasons.join("; "), 300),
        );
        let buttons: Vec<CreateButton> = Choice::ALL
            .iter()
            .map(|c| {
                let style = match c {
                    Choice::Once => ButtonStyle::Primary,
                    Choice::Deny => ButtonStyle::Danger,
                    _ => ButtonStyle::Secondary,
                };
                CreateButton::new(c.button_data(&prompt.approval_id))
                    .label(c.label())
                    .style(style)
            })
            .collect();
        let msg = CreateMessage::new()
            .content(text)
            .allowed_mentions(CreateAllowedMentions::new())
            .components(vec![CreateActionRow::Buttons(buttons)]);
        let sent = channel
            .send_message(&*self.http, msg)
            .await
            .map_err(|e| e.to_string())?;
        Ok(sent.id.to_string())
    }

    async fn close(&self, chat: &ChatRef, message_id: &str, outcome: &str) -> Result<(), String> {
        let channel = channel_id(chat.thread.as_ref().unwrap_or(&chat.chat))?;
        let message: MessageId = message_id
            .parse()
            .map_err(|_| format!("{message_id:?} is not a message id"))?;
        let edit = EditMessage::new()
            .content(clip(&format::render(outcome), LIMIT))
            .components(Vec::new());
        channel
            .edit_message(&*self.http, message, edit)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

#[async_trait::async_trait]
impl Outbound for Discord {
    async fn send_text(&self, chat: &str, text: &str) -> Result<String, String> {
        self.post(chat, None, text).await
    }
}

/// Takes interactions once the adapter exists, each in its own task.
async fn interactions_loop(
    mut rx: mpsc::UnboundedReceiver<Box<Interaction>>,
    mut adapter: tokio::sync::watch::Receiver<Option<Arc<Discord>>>,
) {
    // None when the daemon stops before the first READY.
    let Some(adapter) = adapter
        .wait_for(Option::is_some)
        .await
        .ok()
        .and_then(|a| a.clone())
    else {
        return;
    };
    while let Some(interaction) = rx.recv().await {
        let a = adapter.clone();
        tokio::spawn(async move { a.on_interaction(*interaction).await });
    }
}

/// Starts the gateway thread, builds the adapter on the first READY, and
/// takes events until `stop`.
async fn run(ctx: ComponentContext) {
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
    ctx.health.set("discord", false, "connecting");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (itx, irx) = mpsc::unbounded_channel();
    let senders = Senders {
        events: tx,
        interactions: itx,
    };
    let (ready_tx, ready_rx) = tokio::sync::watch::channel(None);
    tokio::spawn(interactions_loop(irx, ready_rx));
    let thread = match spawn_gateway(
        token.clone(),
        config.api_url.clone(),
        senders,
        ctx.stop.clone(),
    ) {
        Ok(thread) => thread,
        Err(err) => {
            ctx.health
                .set("discord", false, format!("gateway thread: {err}"));
            return;
        }
    };
    let http = Arc::new(rest(&token, &config.api_url));
    let mut adapter: Option<Arc<Discord>> = None;
    loop {
        let incoming = tokio::select! {
            incoming = rx.recv() => incoming,
            _ = ctx.stop.cancelled() => None,
        };
        let Some(incoming) = incoming else {
            break;
        };
        match incoming {
            Incoming::Ready(ready) => {
                ctx.health
                    .set("discord", true, format!("connected as {}", ready.user.name));
                if let Some(a) = &adapter {
                    // A new session, not a resume: events of the gap were lost.
                    a.catch_up().await;
                } else {
                    http.set_application_id(ready.application.id);
                    let a = Arc::new_cyclic(|this| Discord {
                        http: http.clone(),
                        me: ready.user.id,
                        gateway: gw.clone(),
                        rules: crate::sessions::ManagerSettings::from_config(&gw.config).rules,
                        questions: Questions::default(),
                        places: Places::default(),
                        threads: Mutex::new(HashSet::new()),
                        seen: Mutex::new(HashMap::new()),
                        interactions: Interactions::default(),
                        this: this.clone(),
                    });
                    gw.attach("discord", a.clone()).await;
                    let http = http.clone();
                    tokio::spawn(async move {
                        match Command::set_global_commands(&*http, interactions::commands()).await {
                            Ok(cmds) => tracing::info!(
                                count = cmds.len(),
                                "discord slash commands registered"
                            ),
                            Err(err) => {
                                tracing::warn!(error = %err, "discord slash commands not registered")
                            }
                        }
                    });
                    tracing::info!(bot = %ready.user.name, id = %ready.user.id, "discord connected");
                    let _ = ready_tx.send(Some(a.clone()));
                    // What was written while the daemon was down.
                    a.recall_seen().await;
                    a.catch_up().await;
                    adapter = Some(a);
                }
            }
            Incoming::Up if adapter.is_some() => ctx.health.set("discord", true, "connected"),
            Incoming::Up => {}
            Incoming::Down(reason) => ctx.health.set("discord", false, reason),
            Incoming::Message(msg) => {
                if let Some(a) = &adapter {
                    a.on_message(*msg).await;
                }
            }
        }
    }
    gw.outbound.disconnect("discord");
    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
}
