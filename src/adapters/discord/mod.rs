//! The Discord adapter (serenity): the gateway websocket with the guild
//! message, direct message and message content intents; DMs and guild
//! channels, threads as session threads, optional auto-threads; replies in
//! chunks of at most 2000 characters that reference the triggering message,
//! typing while a turn runs; approvals and clarify questions as buttons
//! answered through interactions; slash commands registered at start.
//! Events come from [`gateway`] in arrival order; REST calls go through a
//! client of the daemon's runtime.

mod connection;
pub mod format;
pub mod gateway;
pub mod inbound;
pub mod interactions;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serenity::all::{
    ButtonStyle, ChannelId, CommandInteraction, ComponentInteraction, CreateActionRow,
    CreateAllowedMentions, CreateButton, CreateMessage, CreateThread, EditMessage, GetMessages,
    Http, HttpError, Interaction, Message, MessageId, MessageReference, UserId,
};

use crate::adapters::{Gateway, Wiring};
use crate::config::Config;
use crate::platform::{
    AccessRules, Actor, Attachment, Capabilities, ChatKind, ChatRef, ChoiceStyle, InboundEvent,
    Platform, PlatformError, Preset, Profile, Prompt, Revision, retrying,
};
use crate::render::clip;
use crate::sessions::{Press, Submitted};
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

/// The platform id.
pub const ID: &str = "discord";
/// Buttons Discord puts in one row.
const ROW_BUTTONS: usize = 5;
/// Where a slash command's answer goes: its interaction, named in the
/// event's message id.
const INTERACTION: &str = "interaction:";

/// Discord as `[discord]` describes it: allowlists of users, roles and
/// channels, pairing for unknown DM senders, the core tools.
pub fn profile(config: &Config) -> Profile {
    let d = &config.discord;
    Profile::chat(
        ID,
        AccessRules {
            allowed_users: d.allowed_users.clone(),
            allowed_chats: d.allowed_channels.clone(),
            allowed_roles: d.allowed_roles.clone(),
            require_mention: d.require_mention,
            open_when_empty: d.open,
        },
        d.toolsets.clone(),
        Preset {
            description: "Discord sessions",
            tools: &[],
            includes: &["core"],
        },
    )
    .streamed(config.chat.with(d.stream, d.progress))
}

/// Adds the Discord component; it does nothing unless
/// `[discord] enabled = true`.
pub fn install<W: Wiring>(daemon: W) -> W {
    daemon.component(ID, Box::new(|ctx| Box::pin(connection::run(ctx))))
}

/// The running adapter.
pub struct Discord {
    http: Arc<Http>,
    me: UserId,
    gateway: Gateway,
    places: Places,
    /// Auto-threads known to exist.
    threads: Mutex<HashSet<String>>,
    /// Held while an auto-thread is being started, so that two replies
    /// (the typing indicator and the answer) do not both start it.
    starting: tokio::sync::Mutex<()>,
    /// The opening text of auto-threads not started yet, for their names.
    openers: Mutex<HashMap<String, String>>,
    /// The newest message seen in each channel, to catch up from.
    seen: Mutex<HashMap<ChannelId, MessageId>>,
    interactions: Interactions,
    /// Fetches attachments from Discord's CDN (audio, to be heard).
    files: reqwest::Client,
}

impl std::fmt::Debug for Discord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discord")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

fn channel_id(id: &str) -> Result<ChannelId, PlatformError> {
    id.parse()
        .map_err(|_| PlatformError::Rejected(format!("{id:?} is not a Discord channel id")))
}

/// What a failed REST call means for the caller.
fn port_error(err: serenity::Error) -> PlatformError {
    match err {
        serenity::Error::Http(HttpError::UnsuccessfulRequest(resp)) => {
            let message = format!("{} {}", resp.status_code, resp.error.message);
            match resp.status_code.as_u16() {
                429 => PlatformError::RateLimited {
                    retry_after: Duration::from_secs(1),
                },
                404 => PlatformError::NotFound(message),
                400..=499 => PlatformError::Rejected(message),
                _ => PlatformError::Unavailable(message),
            }
        }
        other => PlatformError::Unavailable(other.to_string()),
    }
}

fn chunks(text: &str) -> Vec<String> {
    format::chunks(text, LIMIT)
}

/// An auto-thread is the thread of the message that opened it, so it has
/// that message's id.
fn is_auto_thread(chat: &ChatRef, message: Option<&str>) -> bool {
    chat.thread.is_some() && chat.thread.as_deref() == message
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
    /// `reference` (in the same channel). With a `key`, each chunk carries
    /// an enforced nonce made of it: Discord answers a repeat within a few
    /// minutes with the message it created the first time. Returns the
    /// last message's id.
    async fn post(
        &self,
        channel: &str,
        reference: Option<&str>,
        text: &str,
        key: Option<&str>,
    ) -> Result<String, PlatformError> {
        let channel = channel_id(channel)?;
        let reference = reference.and_then(|m| m.parse::<MessageId>().ok());
        let mut last = String::new();
        for (i, part) in chunks(text).into_iter().enumerate() {
            let mut msg = CreateMessage::new()
                .content(part)
                .allowed_mentions(CreateAllowedMentions::new().replied_user(true));
            if let Some(key) = key {
                // Discord takes nonces of up to 25 characters.
                let nonce: String = format!("{key}.{i}").chars().take(25).collect();
                msg = msg
                    .nonce(serenity::all::Nonce::String(nonce))
                    .enforce_nonce(true);
            }
            if i == 0
                && let Some(m) = reference
            {
                let mut r = MessageReference::from((channel, m));
                r.fail_if_not_exists = Some(false);
                msg = msg.reference_message(r);
            }
            let sent = retrying(|| async {
                channel
                    .send_message(&*self.http, msg.clone())
                    .await
                    .map_err(port_error)
            })
            .await?;
            last = sent.id.to_string();
        }
        Ok(last)
    }

    /// Sends `text` to `to`: as the answer of the slash command `reply_to`
    /// names, or posted where replies to `reply_to` go (see [`post`]).
    async fn reply(
        &self,
        to: &ChatRef,
        reply_to: Option<&str>,
        text: &str,
        key: Option<&str>,
    ) -> Result<String, PlatformError> {
        if let Some(pending) = reply_to
            .filter(|r| r.starts_with(INTERACTION))
            .and_then(|r| self.interactions.take(r))
        {
            pending.answer(&self.http, &chunks(text), false).await;
            return Ok(String::new());
        }
        let (channel, reference) = self.destination(to, reply_to).await;
        self.post(&channel, reference.as_deref(), text, key).await
    }

    /// Where replies to `message` in `chat` go, and the message they
    /// reference. An auto-thread is started here, the first time it is
    /// needed; if it cannot be, replies go to the channel instead.
    async fn destination(&self, chat: &ChatRef, message: Option<&str>) -> (String, Option<String>) {
        let message = message.filter(|m| !m.starts_with(INTERACTION));
        if !is_auto_thread(chat, message) {
            let channel = chat.thread.as_ref().unwrap_or(&chat.chat).clone();
            return (channel, message.map(str::to_string));
        }
        let thread = chat.thread.clone().unwrap_or_default();
        if self.lock_threads().contains(&thread) {
            return (thread, None);
        }
        let _starting = self.starting.lock().await;
        if self.lock_threads().contains(&thread) {
            return (thread, None);
        }
        let Ok((parent, starter)) = channel_id(&chat.chat).and_then(|parent| {
            let starter = thread
                .parse::<MessageId>()
                .map_err(|_| PlatformError::Rejected(format!("{thread:?} is not a message id")))?;
            Ok((parent, starter))
        }) else {
            return (chat.chat.clone(), message.map(str::to_string));
        };
        let first_line = self
            .openers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&thread);
        let created = parent
            .create_thread_from_message(
                &*self.http,
                starter,
                CreateThread::new(thread_name(first_line.as_deref().unwrap_or_default())),
            )
            .await;
        match created {
            Ok(_) => {}
            // Started already (by an earlier run, before a replay).
            Err(serenity::Error::Http(HttpError::UnsuccessfulRequest(resp)))
                if resp.error.code == THREAD_EXISTS => {}
            Err(err) => {
                tracing::warn!(channel = %chat.chat, error = %err, "discord thread not started; answering in the channel");
                return (chat.chat.clone(), message.map(str::to_string));
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
        let stored = match self.gateway.sessions.recent_events(ID, RECALL_WINDOW).await {
            Ok(stored) => stored,
            Err(err) => {
                tracing::warn!(error = %err, "discord: stored messages not read; no catch-up");
                return;
            }
        };
        let since = crate::store::now_ms() - CATCH_UP_WITHIN.as_millis() as i64;
        for (event, _) in stored.into_iter().filter(|(_, at)| *at >= since) {
            let Some(message) = event.message_id.as_deref().and_then(|m| m.parse().ok()) else {
                continue;
            };
            let written_in = if is_auto_thread(&event.chat(), event.message_id.as_deref()) {
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
                        if msg.timestamp.unix_timestamp() >= oldest
                            && !self.on_message(&msg, Revision::New).await
                        {
                            // Storage went away: the rest is read again by
                            // the next catch-up (after a restart, from what
                            // was stored).
                            return;
                        }
                    }
                }
                Err(err) => {
                    tracing::warn!(channel = %channel, error = %err, "discord catch-up failed");
                }
            }
        }
    }

    /// Takes one gateway message; false when storage was away and it was
    /// not stored (the caller waits for storage and offers it again).
    /// A message that was deleted: its turn is dropped or cancelled.
    async fn on_delete(&self, channel: ChannelId, message: MessageId) {
        let deleted = InboundEvent {
            platform: ID.into(),
            kind: ChatKind::Group,
            chat_id: channel.to_string(),
            thread_id: None,
            user_id: String::new(),
            user_name: String::new(),
            roles: Vec::new(),
            text: String::new(),
            event_id: format!("{message}:deleted"),
            message_id: Some(message.to_string()),
            mentioned: false,
            from_bot: false,
            in_thread: false,
            attachments: Vec::new(),
            revision: Revision::Deleted,
        };
        if let Err(err) = self.gateway.sessions.submit(deleted).await {
            tracing::warn!(error = %err, %message, "a deleted discord message was not withdrawn");
        }
    }

    /// Takes one message (`revision`: new, or an edit of one); false when
    /// storage was away and it should be offered again.
    async fn on_message(&self, msg: &Message, revision: Revision) -> bool {
        if revision == Revision::New {
            self.saw(msg.channel_id, msg.id);
        }
        let place = if msg.guild_id.is_some() {
            self.places.resolve(&self.http, msg.channel_id).await
        } else {
            Place::channel(msg.channel_id)
        };
        let config = &self.gateway.config.discord;
        let Some(mut event) = inbound::message_event(msg, self.me, place, config) else {
            return true;
        };
        if revision == Revision::Edited {
            let at = msg
                .edited_timestamp
                .map(|t| t.unix_timestamp())
                .unwrap_or_default();
            event.event_id = format!("{}:edited:{at}", event.event_id);
            event.revision = Revision::Edited;
        }
        if event.kind == ChatKind::Group
            && is_auto_thread(&event.chat(), event.message_id.as_deref())
        {
            let mut openers = self.openers.lock().unwrap_or_else(|e| e.into_inner());
            if openers.len() >= SEEN_CAP {
                openers.clear();
            }
            openers.insert(msg.id.to_string(), event.text.clone());
        }
        match self.gateway.sessions.submit(event).await {
            Ok(_) => true,
            Err(err) if self.gateway.sessions.storage_away(&err).await => {
                tracing::warn!(error = %err, message = %msg.id, "storage away; the discord message waits for it");
                false
            }
            Err(err) => {
                tracing::error!(error = %err, message = %msg.id, "discord message not stored");
                true
            }
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
        self.gateway
            .tasks
            .spawn(pending.clone().defer_when_late(self.http.clone()));
        let pressed = Press {
            chat: ChatRef {
                platform: ID.into(),
                chat: press.channel_id.to_string(),
                thread: None,
            },
            actor: Actor {
                platform: ID.into(),
                user_id: press.user.id.to_string(),
                name: inbound::display_name(
                    &press.user,
                    press.member.as_ref().and_then(|m| m.nick.as_deref()),
                ),
                account: None,
            },
            data: press.data.custom_id.clone(),
        };
        match self.gateway.sessions.press(&pressed).await {
            Ok(_) => pending.acknowledge(&self.http).await,
            Err(why) => pending.answer(&self.http, &[why], true).await,
        }
    }

    /// A slash command: handed to the session manager as its text; the
    /// reply answers the interaction.
    async fn on_command(&self, cmd: CommandInteraction) {
        let pending = Pending::new(cmd.id, &cmd.token, false);
        self.gateway
            .tasks
            .spawn(pending.clone().defer_when_late(self.http.clone()));
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
        let place_in_thread = place.thread.is_some();
        let event = InboundEvent {
            platform: ID.into(),
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
            event_id: format!("{INTERACTION}{}", cmd.id),
            message_id: Some(format!("{INTERACTION}{}", cmd.id)),
            mentioned: true,
            from_bot: false,
            in_thread: place_in_thread,
            attachments: Vec::new(),
            revision: crate::platform::Revision::New,
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

#[async_trait::async_trait]
impl Platform for Discord {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            text_limit: LIMIT,
            buttons: true,
            edits: true,
            threads: true,
            downloads: false,
        }
    }

    async fn fetch(&self, file: &Attachment, into: &Path) -> Result<PathBuf, PlatformError> {
        let url = file
            .url
            .as_deref()
            .ok_or_else(|| PlatformError::NotFound("the attachment has no link".into()))?;
        crate::platform::download(self.files.get(url), into.join(&file.name)).await
    }

    async fn send(
        &self,
        to: &ChatRef,
        reply_to: Option<&str>,
        text: &str,
    ) -> Result<String, PlatformError> {
        self.reply(to, reply_to, text, None).await
    }

    async fn send_keyed(
        &self,
        to: &ChatRef,
        reply_to: Option<&str>,
        text: &str,
        key: &str,
    ) -> Result<String, PlatformError> {
        self.reply(to, reply_to, text, Some(key)).await
    }

    /// Sent again under its key, the message comes back as Discord
    /// created it the first time (its nonce enforced); when none was, this
    /// placeholder is, for the answer to be written into.
    async fn reclaim(
        &self,
        at: &ChatRef,
        key: &str,
        _sent_ms: i64,
    ) -> Result<Option<String>, PlatformError> {
        self.reply(at, None, "…", Some(key)).await.map(Some)
    }

    async fn working(
        &self,
        at: &ChatRef,
        message: Option<&str>,
        on: bool,
    ) -> Result<(), PlatformError> {
        if !on {
            return Ok(());
        }
        let (channel, _) = self.destination(at, message).await;
        channel_id(&channel)?
            .broadcast_typing(&*self.http)
            .await
            .map_err(port_error)
    }

    async fn ask(&self, at: &ChatRef, prompt: &Prompt) -> Result<String, PlatformError> {
        let channel = channel_id(at.thread.as_ref().unwrap_or(&at.chat))?;
        let buttons: Vec<CreateButton> = prompt
            .choices
            .iter()
            .take(ROW_BUTTONS)
            .map(|c| {
                let style = match c.style {
                    ChoiceStyle::Primary => ButtonStyle::Primary,
                    ChoiceStyle::Danger => ButtonStyle::Danger,
                    ChoiceStyle::Plain => ButtonStyle::Secondary,
                };
                CreateButton::new(c.data.clone())
                    .label(clip(&c.label, 80))
                    .style(style)
            })
            .collect();
        let mut msg = CreateMessage::new()
            .content(chunks(&prompt.text).swap_remove(0))
            .allowed_mentions(CreateAllowedMentions::new());
        if !buttons.is_empty() {
            msg = msg.components(vec![CreateActionRow::Buttons(buttons)]);
        }
        let sent = retrying(|| async {
            channel
                .send_message(&*self.http, msg.clone())
                .await
                .map_err(port_error)
        })
        .await?;
        Ok(sent.id.to_string())
    }

    async fn edit(&self, at: &ChatRef, message: &str, text: &str) -> Result<(), PlatformError> {
        let (channel, message) = posted(at, message)?;
        let edit = EditMessage::new()
            .content(chunks(text).swap_remove(0))
            .components(Vec::new());
        channel
            .edit_message(&*self.http, message, edit)
            .await
            .map(|_| ())
            .map_err(port_error)
    }

    async fn delete(&self, at: &ChatRef, message: &str) -> Result<(), PlatformError> {
        let (channel, message) = posted(at, message)?;
        channel
            .delete_message(&*self.http, message)
            .await
            .map_err(port_error)
    }

    fn split(&self, text: &str) -> Vec<String> {
        crate::render::segments::segments(text, LIMIT, |piece| {
            crate::render::chunk::chars(&format::chunks(piece, usize::MAX).swap_remove(0))
        })
    }

    fn pace(&self, _at: &ChatRef, answering: Option<&str>) -> Option<Duration> {
        // A slash command is answered once, through its interaction; other
        // messages take a channel's bucket of five per five seconds.
        (!answering.is_some_and(|m| m.starts_with(INTERACTION))).then_some(Duration::from_secs(1))
    }
}

/// The channel and id of a message the bot sent in `at`: in its thread
/// when it has one (an auto-thread's id is its starter message's).
fn posted(at: &ChatRef, message: &str) -> Result<(ChannelId, MessageId), PlatformError> {
    let channel = channel_id(at.thread.as_ref().unwrap_or(&at.chat))?;
    let message = message
        .parse()
        .map_err(|_| PlatformError::Rejected(format!("{message:?} is not a message id")))?;
    Ok((channel, message))
}
