//! The Telegram adapter (teloxide): long polling (default) or a webhook
//! checked by its secret token; replies rendered as MarkdownV2 in chunks of
//! at most 4096 UTF-16 units with a plain-text resend when Telegram cannot
//! parse them; typing while a turn runs; approvals and clarify questions as
//! inline keyboards answered through callback queries.

pub mod format;
pub mod inbound;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use subtle::ConstantTimeEq;
use teloxide::prelude::*;
use teloxide::types::{
    AllowedUpdate, BotCommand, ChatAction, InlineKeyboardButton, InlineKeyboardMarkup,
    MaybeInaccessibleMessage, MessageId, ParseMode, ReplyParameters, ThreadId, UpdateKind,
};
use teloxide::{ApiError, RequestError};
use tokio_util::sync::CancellationToken;

use super::chunk::{self, utf16};
use super::questions::{self, Questions};
use crate::adapters::Outbound;
use crate::agent::ClarifyBroker;
use crate::approvals::{Actor, ApprovalPrompter, ChatRef, Choice, Prompt};
use crate::config::TelegramMode;
use crate::daemon::{ComponentContext, Daemon, Gateway};
use crate::http::AppState;
use crate::sessions::{InboundEvent, KeyRules, Replier, session_key};
use crate::store::StoreError;
use inbound::{Attachment, BotIdentity, message_event};

/// Telegram's message limit, in UTF-16 units.
const LIMIT: usize = 4096;
/// The route Telegram posts updates to in webhook mode.
pub const WEBHOOK_PATH: &str = "/telegram/webhook";
/// Longest wait of one getUpdates call.
const POLL_SECS: u32 = 10;
/// Longest command shown in an approval prompt.
const PROMPT_COMMAND_UNITS: usize = 3000;

type Slot = Arc<OnceLock<Arc<Telegram>>>;

/// Adds the Telegram component and its webhook route to `daemon`; both do
/// nothing unless `[telegram] enabled = true`.
pub fn install(daemon: Daemon) -> Daemon {
    let slot: Slot = Arc::default();
    let route_slot = slot.clone();
    daemon
        .routes_with(move |gw| webhook_routes(gw, route_slot))
        .component("telegram", move |ctx| run(ctx, slot))
}

/// The running adapter.
pub struct Telegram {
    bot: Bot,
    me: BotIdentity,
    gateway: Gateway,
    rules: KeyRules,
    questions: Questions,
    this: std::sync::Weak<Telegram>,
}

impl std::fmt::Debug for Telegram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telegram")
            .field("bot", &self.me.username)
            .finish_non_exhaustive()
    }
}

fn chat_id(chat: &str) -> Result<ChatId, String> {
    chat.parse::<i64>()
        .map(ChatId)
        .map_err(|_| format!("{chat:?} is not a Telegram chat id"))
}

fn thread(thread: Option<&str>) -> Option<ThreadId> {
    thread
        .and_then(|t| t.parse::<i32>().ok())
        .map(|t| ThreadId(MessageId(t)))
}

fn is_parse_error(err: &RequestError) -> bool {
    matches!(err, RequestError::Api(ApiError::CantParseEntities(_)))
}

/// Renders `text` into MarkdownV2 chunks (with their plain originals) that
/// each fit the limit once escaped.
fn render_chunks(text: &str) -> Vec<(String, String)> {
    let mut limit = LIMIT;
    loop {
        let plain = chunk::split(text, limit, utf16);
        let rendered: Vec<(String, String)> = plain
            .into_iter()
            .map(|p| (format::markdown_v2(&p), p))
            .collect();
        if limit <= 1024 || rendered.iter().all(|(r, _)| utf16(r) <= LIMIT) {
            return rendered;
        }
        limit = limit * 3 / 4;
    }
}

impl Telegram {
    /// Sends `text` to a chat, chunked; the first chunk replies to
    /// `reply_to`. Returns the id of the last message sent.
    async fn send(
        &self,
        chat: &str,
        thread_id: Option<&str>,
        reply_to: Option<&str>,
        text: &str,
    ) -> Result<String, String> {
        let chat = chat_id(chat)?;
        let mut last = String::new();
        for (i, (rendered, plain)) in render_chunks(text).into_iter().enumerate() {
            let reply = (i == 0)
                .then_some(reply_to)
                .flatten()
                .and_then(|m| m.parse::<i32>().ok());
            let request = |body: String, markdown: bool| {
                let mut req = self.bot.send_message(chat, body);
                if markdown {
                    req = req.parse_mode(ParseMode::MarkdownV2);
                }
                if let Some(t) = thread(thread_id) {
                    req = req.message_thread_id(t);
                }
                if let Some(m) = reply {
                    req = req.reply_parameters(
                        ReplyParameters::new(MessageId(m)).allow_sending_without_reply(),
                    );
                }
                req
            };
            let sent = match with_retry(|| request(rendered.clone(), true).send()).await {
                Err(err) if is_parse_error(&err) => {
                    tracing::debug!(error = %err, "MarkdownV2 refused; sending plain text");
                    with_retry(|| request(plain.clone(), false).send()).await
                }
                other => other,
            }
            .map_err(|e| e.to_string())?;
            last = sent.id.0.to_string();
        }
        Ok(last)
    }

    /// Downloads an attachment into the session's workspace; returns the
    /// note for the agent.
    async fn fetch(&self, event: &InboundEvent, attachment: &Attachment) -> String {
        use teloxide::net::Download;
        let key = session_key(event, self.rules);
        let result = async {
            let file = self
                .bot
                .get_file(teloxide::types::FileId(attachment.file_id.clone()))
                .await
                .map_err(|e| e.to_string())?;
            let dir =
                crate::tools::workspace::session_dir(&self.gateway.config.agent.workspace, &key)
                    .map_err(|e| e.to_string())?
                    .join("attachments");
            tokio::fs::create_dir_all(&dir)
                .await
                .map_err(|e| e.to_string())?;
            let name: String = attachment
                .unique_id
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            let name = format!("{name}.{}", attachment.extension);
            let mut out = tokio::fs::File::create(dir.join(&name))
                .await
                .map_err(|e| e.to_string())?;
            self.bot
                .download_file(&file.path, &mut out)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(format!("attachments/{name}"))
        }
        .await;
        match result {
            Ok(path) if attachment.kind == "photo" => format!(
                "[The user sent a photo, saved as {path}; use vision_analyze with that path to look at it.]"
            ),
            Ok(path) => format!("[The user sent a document, saved as {path}.]"),
            Err(err) => {
                tracing::warn!(error = %err, "attachment could not be downloaded");
                format!(
                    "[The user sent a {}, but it could not be downloaded.]",
                    attachment.kind
                )
            }
        }
    }

    /// Handles one update; an error means it was not stored and must be
    /// fetched again.
    async fn handle(&self, update: Update) -> Result<(), StoreError> {
        match update.kind {
            UpdateKind::Message(msg) => {
                let Some((mut event, attachment)) = message_event(update.id.0, &msg, &self.me)
                else {
                    return Ok(());
                };
                if self.answer_question(&event) {
                    return Ok(());
                }
                if let Some(a) = &attachment {
                    let note = self.fetch(&event, a).await;
                    event.text = format!("{}\n{note}", event.text).trim().to_string();
                }
                self.gateway.sessions.submit(event).await.map(|_| ())
            }
            UpdateKind::CallbackQuery(query) => {
                self.callback(query).await;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A free-text answer to a pending clarify question from this chat.
    fn answer_question(&self, event: &InboundEvent) -> bool {
        self.questions
            .answer_text(&event.chat_id, &event.user_id, &event.text)
    }

    async fn callback(&self, query: teloxide::types::CallbackQuery) {
        let data = query.data.clone().unwrap_or_default();
        let actor = Actor {
            platform: "telegram".into(),
            user_id: query.from.id.0.to_string(),
            name: query.from.full_name(),
        };
        let notice = if let Some((id, choice)) = Choice::parse_button(&data) {
            match self.gateway.broker.resolve(&id, choice, &actor, None).await {
                Ok(decision) => format!("Done: {}.", decision.describe()),
                Err(refusal) => refusal.to_string(),
            }
        } else if data.starts_with("cl:") {
            self.questions
                .answer_button(&data, &actor.user_id)
                .unwrap_or_else(str::to_string)
        } else {
            "This button is not mine.".into()
        };
        let answer = self
            .bot
            .answer_callback_query(query.id.clone())
            .text(crate::tools::builtin::clip(&notice, 190));
        if let Err(err) = with_retry(|| answer.clone().send()).await {
            tracing::warn!(error = %err, "answerCallbackQuery failed");
        }
        // A pressed question shows the answer and loses its buttons.
        if data.starts_with("cl:")
            && let Some(MaybeInaccessibleMessage::Regular(msg)) = &query.message
        {
            let text = format!("{}\n→ {notice}", msg.text().unwrap_or_default());
            let _ = self.bot.edit_message_text(msg.chat.id, msg.id, text).await;
        }
    }
}

/// Runs a request, waiting out Telegram's flood control (429 with
/// `retry_after`) up to three times.
async fn with_retry<T, F, Fut>(mut send: F) -> Result<T, RequestError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RequestError>>,
{
    let mut tries = 0;
    loop {
        match send().await {
            Err(RequestError::RetryAfter(wait)) if tries < 3 => {
                tries += 1;
                tokio::time::sleep(wait.duration().min(Duration::from_secs(60))).await;
            }
            other => return other,
        }
    }
}

#[async_trait::async_trait]
impl Replier for Telegram {
    async fn reply(&self, event: &InboundEvent, text: &str) {
        let reply_to = match event.kind {
            crate::sessions::ChatKind::Group => event.message_id.as_deref(),
            crate::sessions::ChatKind::Dm => None,
        };
        if let Err(err) = self
            .send(&event.chat_id, event.thread_id.as_deref(), reply_to, text)
            .await
        {
            tracing::warn!(chat = %event.chat_id, error = %err, "telegram reply failed");
        }
    }

    async fn working(&self, event: &InboundEvent) {
        let Ok(chat) = chat_id(&event.chat_id) else {
            return;
        };
        let mut req = self.bot.send_chat_action(chat, ChatAction::Typing);
        if let Some(t) = thread(event.thread_id.as_deref()) {
            req = req.message_thread_id(t);
        }
        let _ = req.await;
    }

    fn clarifier(&self, event: &InboundEvent) -> Option<Arc<dyn ClarifyBroker>> {
        Some(Arc::new(TelegramQuestion {
            adapter: self.this.upgrade()?,
            chat: event.chat_id.clone(),
            thread: event.thread_id.clone(),
            user: Some(event.user_id.clone()),
        }))
    }
}

/// Asks a clarify question in one chat.
struct TelegramQuestion {
    adapter: Arc<Telegram>,
    chat: String,
    thread: Option<String>,
    user: Option<String>,
}

#[async_trait::async_trait]
impl ClarifyBroker for TelegramQuestion {
    async fn ask(
        &self,
        question: &str,
        choices: &[String],
        cancel: &CancellationToken,
    ) -> Result<String, String> {
        let asked = self
            .adapter
            .questions
            .ask(&self.chat, self.user.as_deref(), choices);
        let chat = chat_id(&self.chat)?;
        let mut req = self
            .adapter
            .bot
            .send_message(chat, format!("❓ {question}"));
        if let Some(t) = thread(self.thread.as_deref()) {
            req = req.message_thread_id(t);
        }
        if !choices.is_empty() {
            let rows = choices.iter().enumerate().map(|(i, c)| {
                vec![InlineKeyboardButton::callback(
                    crate::tools::builtin::clip(c, 60),
                    questions::button_data(&asked.id, i),
                )]
            });
            req = req.reply_markup(InlineKeyboardMarkup::new(rows));
        }
        if let Err(err) = req.await {
            self.adapter.questions.drop_question(&asked);
            return Err(err.to_string());
        }
        self.adapter.questions.wait(asked, cancel).await
    }
}

#[async_trait::async_trait]
impl ApprovalPrompter for Telegram {
    async fn show(&self, chat: &ChatRef, prompt: &Prompt) -> Result<String, String> {
        let mut command = prompt.command.clone();
        if utf16(&command) > PROMPT_COMMAND_UNITS {
            let cut: String = command
                .chars()
                .scan(0, |n, c| {
                    *n += c.len_utf16();
                    (*n <= PROMPT_COMMAND_UNITS).then_some(c)
                })
                .collect();
            command = format!("{cut}…");
        }
        let text = format!(
            "⚠️ Approval needed\n\n{command}\n\nReason: {}",
            prompt.reasons.join("; ")
        );
        let buttons = Choice::ALL.map(|c| {
            vec![InlineKeyboardButton::callback(
                c.label(),
                c.button_data(&prompt.approval_id),
            )]
        });
        let mut req = self
            .bot
            .send_message(chat_id(&chat.chat)?, text)
            .reply_markup(InlineKeyboardMarkup::new(buttons));
        if let Some(t) = thread(chat.thread.as_deref()) {
            req = req.message_thread_id(t);
        }
        let sent = with_retry(|| req.clone().send())
            .await
            .map_err(|e| e.to_string())?;
        Ok(sent.id.0.to_string())
    }

    async fn close(&self, chat: &ChatRef, message_id: &str, outcome: &str) -> Result<(), String> {
        let id = message_id
            .parse::<i32>()
            .map_err(|_| format!("{message_id:?} is not a message id"))?;
        let req = self
            .bot
            .edit_message_text(chat_id(&chat.chat)?, MessageId(id), outcome);
        with_retry(|| req.clone().send())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

#[async_trait::async_trait]
impl Outbound for Telegram {
    async fn send_text(&self, chat: &str, text: &str) -> Result<String, String> {
        self.send(chat, None, None, text).await
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
                .set("telegram", false, format!("telegram.api_url: {err}"));
            return;
        }
    }
    ctx.health.set("telegram", false, "connecting");
    let mut backoff = Backoff::default();
    let me = loop {
        tokio::select! {
            _ = ctx.stop.cancelled() => return,
            me = bot.get_me() => match me {
                Ok(me) => break me,
                Err(err) => {
                    ctx.health.set("telegram", false, format!("getMe failed: {err}"));
                    if !backoff.wait(&ctx.stop, &err).await {
                        return;
                    }
                }
            }
        }
    };
    let adapter = Arc::new_cyclic(|this| Telegram {
        bot: bot.clone(),
        me: BotIdentity {
            id: me.id,
            username: me.username.clone().unwrap_or_default(),
        },
        gateway: gw.clone(),
        rules: crate::sessions::ManagerSettings::from_config(&gw.config).rules,
        questions: Questions::default(),
        this: this.clone(),
    });
    let _ = slot.set(adapter.clone());
    gw.attach("telegram", adapter.clone()).await;
    if let Err(err) = bot.set_my_commands(commands()).await {
        tracing::warn!(error = %err, "setMyCommands failed");
    }
    tracing::info!(bot = %adapter.me.username, mode = ?config.mode, "telegram connected");
    match config.mode {
        TelegramMode::Polling => poll(&adapter, &ctx).await,
        TelegramMode::Webhook => {
            let url = format!(
                "{}{WEBHOOK_PATH}",
                gw.config.server.public_url.trim_end_matches('/')
            );
            let registered = match reqwest::Url::parse(&url) {
                Ok(url) => bot
                    .set_webhook(url)
                    .secret_token(secret(&gw).unwrap_or_default())
                    .allowed_updates([AllowedUpdate::Message, AllowedUpdate::CallbackQuery])
                    .await
                    .map_err(|e| e.to_string()),
                Err(err) => Err(format!("server.public_url: {err}")),
            };
            match registered {
                Ok(_) => ctx.health.set("telegram", true, "webhook registered"),
                Err(err) => ctx
                    .health
                    .set("telegram", false, format!("setWebhook failed: {err}")),
            }
            ctx.stop.cancelled().await;
        }
    }
    gw.outbound.disconnect("telegram");
}

/// Exponential backoff between failed calls, 1 s up to 30 s; Telegram's
/// `retry_after` wins when it says more.
#[derive(Default)]
struct Backoff(u32);

impl Backoff {
    /// Waits; false when `stop` fired meanwhile.
    async fn wait(&mut self, stop: &CancellationToken, err: &RequestError) -> bool {
        let wait = match err {
            RequestError::RetryAfter(s) => s.duration(),
            _ => Duration::from_secs(1 << self.0.min(5)).min(Duration::from_secs(30)),
        };
        self.0 += 1;
        tokio::select! {
            _ = stop.cancelled() => false,
            _ = tokio::time::sleep(wait) => true,
        }
    }
}

/// getUpdates in a loop. The offset moves past an update only once it is
/// committed to the inbox (or deliberately ignored), so a crash or a
/// storage failure makes Telegram send it again.
async fn poll(adapter: &Arc<Telegram>, ctx: &ComponentContext) {
    if let Err(err) = adapter.bot.delete_webhook().await {
        tracing::warn!(error = %err, "deleteWebhook failed");
    }
    let mut offset: i32 = 0;
    let mut backoff = Backoff::default();
    loop {
        let request = adapter
            .bot
            .get_updates()
            .offset(offset)
            .timeout(POLL_SECS)
            .allowed_updates([AllowedUpdate::Message, AllowedUpdate::CallbackQuery]);
        let result = tokio::select! {
            _ = ctx.stop.cancelled() => return,
            r = request.send() => r,
        };
        match result {
            Ok(updates) => {
                backoff = Backoff::default();
                ctx.health.set("telegram", true, "polling");
                for update in updates {
                    let next = i32::try_from(update.id.0)
                        .unwrap_or(i32::MAX)
                        .saturating_add(1);
                    match adapter.handle(update).await {
                        Ok(()) => offset = offset.max(next),
                        Err(err) => {
                            tracing::error!(error = %err, "update not stored; it will be fetched again");
                            break;
                        }
                    }
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "getUpdates failed");
                ctx.health
                    .set("telegram", false, format!("reconnecting: {err}"));
                if !backoff.wait(&ctx.stop, &err).await {
                    return;
                }
            }
        }
    }
}
