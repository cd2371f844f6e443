//! The Telegram adapter (teloxide): long polling (default) or a webhook
//! checked by its secret token; replies as text with entities in chunks of
//! at most 4096 UTF-16 units (resent without entities should Telegram
//! refuse them); typing while a turn runs; approvals and clarify questions as
//! inline keyboards answered through callback queries.

pub mod format;
pub mod inbound;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use subtle::ConstantTimeEq;
use teloxide_core::prelude::*;
use teloxide_core::requests::JsonRequest;
use teloxide_core::types::{
    AllowedUpdate, BotCommand, ChatAction, ChatId, InlineKeyboardButton, InlineKeyboardMarkup,
    MaybeInaccessibleMessage, MessageId, ReplyParameters, ThreadId, Update, UpdateKind,
};
use teloxide_core::{ApiError, RequestError};
use tokio_util::sync::CancellationToken;

use crate::adapters::lifecycle;
use crate::adapters::{ComponentContext, Gateway, Wiring};
use crate::config::{Config, TelegramMode};
use crate::http::AppState;
use crate::platform::{
    AccessRules, Actor, Attachment, Capabilities, ChatRef, InboundEvent, Platform, PlatformError,
    Preset, Profile, Prompt, Revision, retrying,
};
use crate::sessions::Press;
use crate::store::StoreError;
use inbound::{BotIdentity, message_event};

/// The platform id.
pub const ID: &str = "telegram";
/// Telegram's message limit, in UTF-16 units.
const LIMIT: usize = 4096;
/// The route Telegram posts updates to in webhook mode.
pub const WEBHOOK_PATH: &str = "/telegram/webhook";
/// Longest wait of one getUpdates call.
const POLL_SECS: u32 = 10;

type Slot = Arc<OnceLock<Arc<Telegram>>>;

/// Telegram as `[telegram]` describes it: numeric user allowlist, pairing
/// for unknown DM senders, the core tools.
pub fn profile(config: &Config) -> Profile {
    let t = &config.telegram;
    Profile::chat(
        ID,
        AccessRules {
            allowed_users: t.allowed_users.iter().map(ToString::to_string).collect(),
            require_mention: t.require_mention,
            open_when_empty: t.open,
            ..AccessRules::default()
        },
        t.toolsets.clone(),
        Preset {
            description: "Telegram sessions",
            tools: &[],
            includes: &["core"],
        },
    )
    .streamed(config.chat.with(t.stream, t.progress))
}

/// Adds the Telegram component and its webhook route to `daemon`; both do
/// nothing unless `[telegram] enabled = true`.
pub fn install<W: Wiring>(daemon: W) -> W {
    let slot: Slot = Arc::default();
    let route_slot = slot.clone();
    daemon
        .routes_with(Box::new(move |gw| webhook_routes(gw, route_slot)))
        .component(ID, Box::new(move |ctx| Box::pin(run(ctx, slot))))
}

/// The Bot API's `sendMessageDraft`, which teloxide does not know yet.
#[derive(Debug, Clone, serde::Serialize)]
struct MessageDraft {
    chat_id: i64,
    draft_id: i64,
    text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_thread_id: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    entities: Option<Vec<teloxide_core::types::MessageEntity>>,
}

impl teloxide_core::requests::Payload for MessageDraft {
    type Output = teloxide_core::types::True;
    const NAME: &'static str = "sendMessageDraft";
}

/// The running adapter.
pub struct Telegram {
    bot: Bot,
    me: BotIdentity,
    gateway: Gateway,
}

impl std::fmt::Debug for Telegram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telegram")
            .field("bot", &self.me.username)
            .finish_non_exhaustive()
    }
}

fn chat_id(chat: &str) -> Result<ChatId, PlatformError> {
    chat.parse::<i64>()
        .map(ChatId)
        .map_err(|_| PlatformError::Rejected(format!("{chat:?} is not a Telegram chat id")))
}

fn message_id(message: &str) -> Result<MessageId, PlatformError> {
    message
        .parse::<i32>()
        .map(MessageId)
        .map_err(|_| PlatformError::Rejected(format!("{message:?} is not a message id")))
}

fn thread(thread: Option<&str>) -> Option<ThreadId> {
    thread
        .and_then(|t| t.parse::<i32>().ok())
        .map(|t| ThreadId(MessageId(t)))
}

/// What a failed Bot API call means for the caller.
fn port_error(err: RequestError) -> PlatformError {
    match err {
        RequestError::RetryAfter(wait) => PlatformError::RateLimited {
            retry_after: wait.duration(),
        },
        RequestError::Api(
            api @ (ApiError::ChatNotFound
            | ApiError::MessageToEditNotFound
            | ApiError::MessageIdInvalid
            | ApiError::UserNotFound),
        ) => PlatformError::NotFound(api.to_string()),
        // teloxide keeps only the description of an error answer; these are
        // the ones the Bot API (and the proxies before it) give for a
        // failure on their side, which is worth trying again.
        RequestError::Api(ApiError::Unknown(description)) if server_side(&description) => {
            PlatformError::Unavailable(description)
        }
        RequestError::Api(api) => PlatformError::Rejected(api.to_string()),
        other => PlatformError::Unavailable(other.to_string()),
    }
}

/// Whether an error answer's description names a failure of the server.
fn server_side(description: &str) -> bool {
    [
        "Internal Server Error",
        "Bad Gateway",
        "Service Unavailable",
        "Gateway Timeout",
    ]
    .iter()
    .any(|d| description.starts_with(d))
}

fn is_parse_error(err: &RequestError) -> bool {
    matches!(err, RequestError::Api(ApiError::CantParseEntities(_)))
}

/// Sends one request with its entities, and again without them should
/// Telegram refuse them (the text is the same either way).
async fn with_entities<T, F, Fut>(send: F) -> Result<T, PlatformError>
where
    F: Fn(bool) -> Fut,
    Fut: Future<Output = Result<T, RequestError>>,
{
    let first = retrying(|| async {
        match send(true).await {
            Err(err) if is_parse_error(&err) => {
                tracing::warn!(error = %err, "entities refused; sending plain text");
                Ok(None)
            }
            Err(err) => Err(port_error(err)),
            Ok(v) => Ok(Some(v)),
        }
    })
    .await?;
    match first {
        Some(v) => Ok(v),
        None => retrying(|| async { send(false).await.map_err(port_error) }).await,
    }
}

impl Telegram {
    /// Handles one update; an error means it was not stored and must be
    /// fetched again.
    async fn handle(&self, update: Update) -> Result<(), StoreError> {
        match update.kind {
            UpdateKind::Message(msg) => match message_event(update.id.0, &msg, &self.me) {
                Some(event) => self.gateway.sessions.submit(event).await.map(|_| ()),
                None => Ok(()),
            },
            UpdateKind::EditedMessage(msg) => match message_event(update.id.0, &msg, &self.me) {
                Some(event) => {
                    // An edit is known by its message and its time, however
                    // often its update comes.
                    let at = msg.edit_date().map(|d| d.timestamp()).unwrap_or_default();
                    let edit = InboundEvent {
                        event_id: format!("{}:{}:edited:{at}", msg.chat.id, msg.id),
                        revision: Revision::Edited,
                        ..event
                    };
                    self.gateway.sessions.submit(edit).await.map(|_| ())
                }
                None => Ok(()),
            },
            UpdateKind::CallbackQuery(query) => {
                self.callback(query).await;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    async fn callback(&self, query: teloxide_core::types::CallbackQuery) {
        let (chat, thread_id) = match &query.message {
            Some(MaybeInaccessibleMessage::Regular(msg)) => (
                msg.chat.id.0.to_string(),
                msg.thread_id.map(|t| t.0.0.to_string()),
            ),
            Some(MaybeInaccessibleMessage::Inaccessible(msg)) => (msg.chat.id.0.to_string(), None),
            None => (String::new(), None),
        };
        let press = Press {
            chat: ChatRef {
                platform: ID.into(),
                chat,
                thread: thread_id,
            },
            actor: Actor {
                platform: ID.into(),
                user_id: query.from.id.0.to_string(),
                name: query.from.full_name(),
                account: None,
            },
            data: query.data.clone().unwrap_or_default(),
        };
        let notice = match self.gateway.sessions.press(&press).await {
            Ok(text) | Err(text) => text,
        };
        let answer = self
            .bot
            .answer_callback_query(query.id.clone())
            .text(crate::render::clip(&notice, 190));
        if let Err(err) =
            retrying(|| async { answer.clone().send().await.map_err(port_error) }).await
        {
            tracing::warn!(error = %err, "answerCallbackQuery failed");
        }
    }

    /// Sends MarkdownV2 `text` to `to` in chunks, the first replying to
    /// `reply_to`, the last carrying `markup`; returns the last id.
    async fn post(
        &self,
        to: &ChatRef,
        reply_to: Option<&str>,
        text: &str,
        markup: Option<InlineKeyboardMarkup>,
    ) -> Result<String, PlatformError> {
        let chat = chat_id(&to.chat)?;
        let chunks = format::chunks(text, LIMIT);
        let count = chunks.len();
        let mut last = String::new();
        for (i, (body, entities)) in chunks.into_iter().enumerate() {
            let reply = (i == 0)
                .then_some(reply_to)
                .flatten()
                .and_then(|m| m.parse::<i32>().ok());
            let markup = (i + 1 == count).then(|| markup.clone()).flatten();
            let sent = with_entities(|rich| {
                let mut req = self.bot.send_message(chat, body.clone());
                if rich && !entities.is_empty() {
                    req = req.entities(entities.clone());
                }
                if let Some(t) = thread(to.thread.as_deref()) {
                    req = req.message_thread_id(t);
                }
                if let Some(m) = reply {
                    req = req.reply_parameters(
                        ReplyParameters::new(MessageId(m)).allow_sending_without_reply(),
                    );
                }
                if let Some(markup) = &markup {
                    req = req.reply_markup(markup.clone());
                }
                req.send()
            })
            .await?;
            last = sent.id.0.to_string();
        }
        Ok(last)
    }
}

#[async_trait::async_trait]
impl Platform for Telegram {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            text_limit: LIMIT,
            buttons: true,
            edits: true,
            threads: true,
            downloads: true,
        }
    }

    async fn send(
        &self,
        to: &ChatRef,
        reply_to: Option<&str>,
        text: &str,
    ) -> Result<String, PlatformError> {
        // A private chat's id is its user's (positive); quoting there is
        // noise. Groups get the reply to the message that asked.
        let group = to.chat.starts_with('-');
        self.post(to, reply_to.filter(|_| group), text, None).await
    }

    async fn working(
        &self,
        at: &ChatRef,
        _message: Option<&str>,
        on: bool,
    ) -> Result<(), PlatformError> {
        if !on {
            return Ok(());
        }
        let mut req = self
            .bot
            .send_chat_action(chat_id(&at.chat)?, ChatAction::Typing);
        if let Some(t) = thread(at.thread.as_deref()) {
            req = req.message_thread_id(t);
        }
        req.await.map(|_| ()).map_err(port_error)
    }

    async fn ask(&self, at: &ChatRef, prompt: &Prompt) -> Result<String, PlatformError> {
        let rows = prompt.choices.iter().map(|c| {
            vec![InlineKeyboardButton::callback(
                c.label.clone(),
                c.data.clone(),
            )]
        });
        let markup = (!prompt.choices.is_empty()).then(|| InlineKeyboardMarkup::new(rows));
        self.post(at, None, &prompt.text, markup).await
    }

    async fn edit(&self, at: &ChatRef, message: &str, text: &str) -> Result<(), PlatformError> {
        let chat = chat_id(&at.chat)?;
        let id = message_id(message)?;
        let (body, entities) = format::chunks(text, LIMIT).swap_remove(0);
        with_entities(|rich| {
            let mut req = self.bot.edit_message_text(chat, id, body.clone());
            if rich && !entities.is_empty() {
                req = req.entities(entities.clone());
            }
            async move {
                match req.send().await {
                    // The message shows this already.
                    Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
                    other => other.map(|_| ()),
                }
            }
        })
        .await
    }

    async fn delete(&self, at: &ChatRef, message: &str) -> Result<(), PlatformError> {
        self.bot
            .delete_message(chat_id(&at.chat)?, message_id(message)?)
            .await
            .map(|_| ())
            .map_err(port_error)
    }

    fn split(&self, text: &str) -> Vec<String> {
        crate::render::segments::segments(text, LIMIT, |piece| {
            crate::render::chunk::utf16(&format::chunks(piece, usize::MAX).swap_remove(0).0)
        })
    }

    /// A private chat's answer streams as a draft (Bot API
    /// `sendMessageDraft`): a preview no one else sees, gone once the
    /// answer is sent, so a crash mid-stream leaves no stray message.
    fn previews(&self, at: &ChatRef) -> bool {
        !at.chat.starts_with('-')
    }

    async fn preview(&self, at: &ChatRef, draft: i64, text: &str) -> Result<(), PlatformError> {
        let chat = chat_id(&at.chat)?.0;
        let (body, entities) = format::rendered(text, LIMIT)
            .into_iter()
            .next()
            .unwrap_or_default();
        if body.trim().is_empty() {
            // Telegram takes 1 to 4096 characters; nothing new to show (a
            // code block just opened shows once it holds something).
            return Ok(());
        }
        let request = |rich: bool| {
            JsonRequest::new(
                self.bot.clone(),
                MessageDraft {
                    chat_id: chat,
                    draft_id: draft,
                    text: body.clone(),
                    message_thread_id: at.thread.as_deref().and_then(|t| t.parse().ok()),
                    entities: (rich && !entities.is_empty()).then(|| entities.clone()),
                },
            )
        };
        match request(true).send().await {
            Err(err) if is_parse_error(&err) => request(false).send().await,
            other => other,
        }
        .map(|_| ())
        .map_err(port_error)
    }

    fn pace(&self, at: &ChatRef, _answering: Option<&str>) -> Option<Duration> {
        // About one message a second in a chat, twenty a minute in a group.
        Some(if at.chat.starts_with('-') {
            Duration::from_secs(3)
        } else {
            Duration::from_secs(1)
        })
    }

    async fn fetch(&self, file: &Attachment, into: &Path) -> Result<PathBuf, PlatformError> {
        use teloxide_core::net::Download;
        let found = self
            .bot
            .get_file(teloxide_core::types::FileId(file.file.clone()))
            .await
            .map_err(port_error)?;
        let path = into.join(&file.name);
        let mut out = tokio::fs::File::create(&path)
            .await
            .map_err(|e| PlatformError::Unavailable(e.to_string()))?;
        self.bot
            .download_file(&found.path, &mut out)
            .await
            .map_err(|e| PlatformError::Unavailable(e.to_string()))?;
        // tokio's file finishes its last write in the background unless
        // flushed: without this, reading the file next may find it short.
        tokio::io::AsyncWriteExt::flush(&mut out)
            .await
            .map_err(|e| PlatformError::Unavailable(e.to_string()))?;
        Ok(path)
    }
}

fn secret(gw: &Gateway) -> Option<String> {
    gw.env
        .get(&gw.config.telegram.webhook_secret_env)
        .map(str::to_string)
}

fn webhook_routes(gw: &Gateway, slot: Slot) -> axum::Router<AppState> {
    let t = &gw.config.telegram;
    if !t.enabled || t.mode != TelegramMode::Webhook {
        return axum::Router::new();
    }
    let state = Arc::new((slot, secret(gw).unwrap_or_default()));
    axum::Router::new().route(WEBHOOK_PATH, post(receive).with_state(state))
}

async fn receive(
    State(state): State<Arc<(Slot, String)>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let (slot, secret) = &*state;
    let given = headers
        .get("x-telegram-bot-api-secret-token")
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    if secret.is_empty() || !bool::from(given.ct_eq(secret.as_bytes())) {
        return StatusCode::UNAUTHORIZED;
    }
    let Some(adapter) = slot.get() else {
        return StatusCode::SERVICE_UNAVAILABLE;
    };
    let update: Update = match serde_json::from_slice(&body) {
        Ok(u) => u,
        Err(err) => {
            tracing::warn!(error = %err, "unreadable Telegram update");
            return StatusCode::BAD_REQUEST;
        }
    };
    match adapter.handle(update).await {
        Ok(()) => StatusCode::OK,
        // Telegram retries a failed delivery.
        Err(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

fn commands() -> Vec<BotCommand> {
    [
        ("new", "Start a fresh conversation"),
        ("stop", "Cancel the running request"),
        ("status", "Show this session"),
        ("usage", "Show what you and this chat spent"),
        ("approve", "Approve the pending command"),
        ("deny", "Deny the pending command"),
        ("help", "List the commands"),
    ]
    .into_iter()
    .map(|(c, d)| BotCommand::new(c, d))
    .collect()
}

/// Connects (getMe, retried with backoff), registers the adapter, sets the
/// commands, then polls or registers the webhook until `stop`.
async fn run(ctx: ComponentContext, slot: Slot) {
    let gw = ctx.gateway.clone();
    let config = gw.config.telegram.clone();
    if !config.enabled {
        return;
    }
    let token = gw
        .env
        .get(&config.token_env)
        .unwrap_or_default()
        .to_string();
    let mut bot = Bot::new(token);
    match reqwest::Url::parse(&config.api_url) {
        Ok(url) => bot = bot.set_api_url(url),
        Err(err) => {
            ctx.health
                .set(ID, false, format!("telegram.api_url: {err}"));
            return;
        }
    }
    let Some(me) = lifecycle::identify(&ctx, ID, || bot.get_me().into_future(), told).await else {
        return;
    };
    let adapter = Arc::new(Telegram {
        bot: bot.clone(),
        me: BotIdentity {
            id: me.id,
            username: me.username.clone().unwrap_or_default(),
        },
        gateway: gw.clone(),
    });
    let _ = slot.set(adapter.clone());
    lifecycle::attached(&ctx, ID, adapter.clone(), connected(&ctx, &adapter)).await;
}

/// Takes updates while connected: by long polling while this replica
/// leads Telegram's ingress, or by the webhook it registers.
async fn connected(ctx: &ComponentContext, adapter: &Arc<Telegram>) {
    let gw = &ctx.gateway;
    let config = &gw.config.telegram;
    if let Err(err) = adapter.bot.set_my_commands(commands()).await {
        tracing::warn!(error = %err, "setMyCommands failed");
    }
    tracing::info!(bot = %adapter.me.username, mode = ?config.mode, "telegram connected");
    match config.mode {
        TelegramMode::Polling => {
            lifecycle::lead(ctx, ID, |ended| async move {
                poll(adapter, &ctx.health, &ended).await;
            })
            .await;
        }
        TelegramMode::Webhook => {
            let url = format!(
                "{}{WEBHOOK_PATH}",
                gw.config.server.public_url.trim_end_matches('/')
            );
            let registered = match reqwest::Url::parse(&url) {
                Ok(url) => adapter
                    .bot
                    .set_webhook(url)
                    .secret_token(secret(gw).unwrap_or_default())
                    .allowed_updates([
                        AllowedUpdate::Message,
                        AllowedUpdate::EditedMessage,
                        AllowedUpdate::CallbackQuery,
                    ])
                    .await
                    .map_err(|e| e.to_string()),
                Err(err) => Err(format!("server.public_url: {err}")),
            };
            match registered {
                Ok(_) => ctx.health.set(ID, true, "webhook registered"),
                Err(err) => ctx
                    .health
                    .set(ID, false, format!("setWebhook failed: {err}")),
            }
            ctx.stop.cancelled().await;
        }
    }
}

/// Waits after the failed call `err` (what Telegram asked for, on a flood
/// limit); false when `stop` fired meanwhile.
/// How long the Bot API asked to wait, when it did.
fn told(err: &RequestError) -> Option<Duration> {
    match err {
        RequestError::RetryAfter(wait) => Some(wait.duration()),
        _ => None,
    }
}

/// getUpdates in a loop. The offset moves past an update only once it is
/// committed to the inbox (or deliberately ignored), so a crash or a
/// storage failure makes Telegram send it again.
/// Long-polls until `stop` (the daemon's, or the end of this replica's
/// term as the poller).
async fn poll(
    adapter: &Arc<Telegram>,
    health: &crate::telemetry::Health,
    stop: &CancellationToken,
) {
    if let Err(err) = adapter.bot.delete_webhook().await {
        tracing::warn!(error = %err, "deleteWebhook failed");
    }
    let mut offset: i32 = 0;
    let mut backoff = lifecycle::backoff();
    loop {
        let request = adapter
            .bot
            .get_updates()
            .offset(offset)
            .timeout(POLL_SECS)
            .allowed_updates([
                AllowedUpdate::Message,
                AllowedUpdate::EditedMessage,
                AllowedUpdate::CallbackQuery,
            ]);
        let result = tokio::select! {
            _ = stop.cancelled() => return,
            r = request.send() => r,
        };
        match result {
            Ok(updates) => {
                health.set(ID, true, "polling");
                // The offset stays before an update that could not be
                // stored, so Telegram keeps it; while storage is away,
                // asking again at once would only fail again.
                let mut stored = true;
                for update in updates {
                    let next = i32::try_from(update.id.0)
                        .unwrap_or(i32::MAX)
                        .saturating_add(1);
                    match adapter.handle(update).await {
                        Ok(()) => offset = offset.max(next),
                        Err(err) => {
                            tracing::error!(error = %err, "update not stored; it will be fetched again");
                            stored = false;
                            break;
                        }
                    }
                }
                if stored {
                    backoff.reset();
                } else if !backoff.pause(stop, None).await {
                    return;
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "getUpdates failed");
                health.set(ID, false, format!("reconnecting: {err}"));
                if !backoff.pause(stop, told(&err)).await {
                    return;
                }
            }
        }
    }
}
