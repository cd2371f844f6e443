//! The Slack adapter: Socket Mode (the app-level token opens a websocket;
//! each envelope is acknowledged once its event is stored), or the HTTP
//! Events API (`POST /slack/events`, v0 signatures, `url_verification`
//! answered) with the interactivity endpoint (`POST /slack/interactivity`,
//! Block Kit button presses). The Web
//! API through slack-morphism: replies in thread as mrkdwn section blocks
//! (3000 characters a block, 39 000 a message), an hourglass reaction while
//! a turn runs, approvals as Block Kit buttons updated with `chat.update`.

pub mod format;
pub mod verify;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use slack_morphism::prelude::*;

use super::chunk::{self, chars};
use super::questions::{self, Questions};
use crate::adapters::Outbound;
use crate::agent::ClarifyBroker;
use crate::approvals::{Actor, ApprovalPrompter, ChatRef, Choice, Prompt};
use crate::config::SlackMode;
use crate::daemon::{ComponentContext, Daemon, Gateway};
use crate::http::AppState;
use crate::sessions::{ChatKind, InboundEvent, Replier};

/// Characters in one section block's text.
const BLOCK_CHARS: usize = 3000;
/// Characters in one message.
const MESSAGE_CHARS: usize = 39_000;
/// The reaction shown while a turn runs.
const WORKING: &str = "hourglass_flowing_sand";

/// Adds the Slack component and its Events API routes to `daemon`.
pub fn install(daemon: Daemon) -> Daemon {
    let slot: Slot = Arc::default();
    let route_slot = slot.clone();
    daemon
        .routes_with(move |gw| event_routes(gw, route_slot))
        .component("slack", move |ctx| run(ctx, slot))
}

type Slot = Arc<std::sync::OnceLock<Arc<Slack>>>;

/// The running adapter.
pub struct Slack {
    client: Arc<SlackHyperClient>,
    token: SlackApiToken,
    bot_user: String,
    gateway: Gateway,
    rules: crate::sessions::KeyRules,
    reacted: Mutex<HashSet<(String, String)>>,
    /// Display names by user id, looked up once each.
    names: Mutex<HashMap<String, String>>,
    questions: Questions,
    this: std::sync::Weak<Slack>,
}

/// Most names remembered before the cache starts over.
const NAMES_CAP: usize = 10_000;

impl std::fmt::Debug for Slack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slack")
            .field("bot_user", &self.bot_user)
            .finish_non_exhaustive()
    }
}

/// Section blocks of at most [`BLOCK_CHARS`] each, for one message.
fn section_blocks(text: &str) -> Vec<Value> {
    chunk::split(text, BLOCK_CHARS, chars)
        .into_iter()
        .map(|part| {
            // Inner markers would read oddly; the split is invisible in Slack.
            let part = part
                .rsplit_once("\n(")
                .filter(|(_, m)| m.ends_with(')') && m.contains('/'))
                .map_or(part.clone(), |(head, _)| head.to_string());
            json!({"type": "section", "text": {"type": "mrkdwn", "text": part}})
        })
        .collect()
}

fn blocks(values: Vec<Value>) -> Vec<SlackBlock> {
    values
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect()
}

fn content(text: &str, block_values: Vec<Value>) -> SlackMessageContent {
    SlackMessageContent::new()
        .with_text(crate::tools::builtin::clip(text, BLOCK_CHARS))
        .with_blocks(blocks(block_values))
}

/// `!approve …` / `!deny …`: addressed to the bot by its form (slash
/// commands do not work in threads).
fn is_approval_answer(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with("!approve") || t.starts_with("!deny")
}

impl Slack {
    /// Posts `text` (Markdown) to `channel`, in `thread` if given, split
    /// into messages and blocks; returns the last message's ts.
    async fn post(
        &self,
        channel: &str,
        thread: Option<&str>,
        text: &str,
    ) -> Result<String, String> {
        let session = self.client.open_session(&self.token);
        let rendered = format::mrkdwn(text);
        let mut last = String::new();
        for message in chunk::split(&rendered, MESSAGE_CHARS, chars) {
            let mut req = SlackApiChatPostMessageRequest::new(
                channel.into(),
                content(&message, section_blocks(&message)),
            );
            if let Some(ts) = thread {
                req = req.with_thread_ts(ts.into());
            }
            let resp = session
                .chat_post_message(&req)
                .await
                .map_err(|e| e.to_string())?;
            last = resp.ts.to_string();
        }
        Ok(last)
    }

    /// The inbound event of an Events API `event`, if it is a message for
    /// the bot to consider.
    fn message_event(&self, event: &Value) -> Option<InboundEvent> {
        let kind = event["type"].as_str()?;
        if kind != "message" && kind != "app_mention" {
            return None;
        }
        // Edits, joins, deletions and the like are not messages to answer.
        if let Some(sub) = event["subtype"].as_str()
            && sub != "file_share"
            && sub != "thread_broadcast"
        {
            return None;
        }
        let user = event["user"].as_str()?;
        let channel = event["channel"].as_str()?;
        let ts = event["ts"].as_str()?;
        let raw = event["text"].as_str().unwrap_or_default();
        let mention = format!("<@{}>", self.bot_user);
        let text = raw.replace(&mention, "").trim().to_string();
        let dm = event["channel_type"].as_str() == Some("im");
        let allowed_bot = event["bot_id"].as_str().is_some_and(|b| {
            self.gateway
                .config
                .slack
                .allowed_bots
                .iter()
                .any(|a| a == b)
        });
        let from_bot = user == self.bot_user
            || (event.get("bot_id").is_some_and(|b| !b.is_null()) && !allowed_bot);
        let answers_approval = is_approval_answer(&text);
        // In channels the conversation lives in the thread of the message
        // that started it.
        let thread = event["thread_ts"]
            .as_str()
            .map(str::to_string)
            .or_else(|| (!dm).then(|| ts.to_string()));
        Some(InboundEvent {
            platform: "slack".into(),
            kind: if dm { ChatKind::Dm } else { ChatKind::Group },
            chat_id: channel.into(),
            thread_id: thread,
            user_id: user.into(),
            user_name: user.into(),
            roles: Vec::new(),
            text,
            // `message` and `app_mention` both arrive for a mention, and
            // Slack retries: the message itself is the identity.
            event_id: format!("{channel}:{ts}"),
            message_id: Some(ts.into()),
            mentioned: dm || kind == "app_mention" || raw.contains(&mention) || answers_approval,
            from_bot,
            entity: None,
        })
    }

    /// Puts the working reaction on `event`'s message (`on`) or takes it
    /// off; each once, however often the worker asks.
    async fn hourglass(&self, event: &InboundEvent, on: bool) {
        let Some(ts) = event.message_id.clone() else {
            return;
        };
        let key = (event.chat_id.clone(), ts.clone());
        let changed = {
            let mut reacted = self.reacted.lock().unwrap_or_else(|e| e.into_inner());
            if on {
                reacted.insert(key)
            } else {
                reacted.remove(&key)
            }
        };
        if !changed {
            return;
        }
        let session = self.client.open_session(&self.token);
        let channel: SlackChannelId = event.chat_id.clone().into();
        let name = SlackReactionName(WORKING.into());
        let result = if on {
            let req = SlackApiReactionsAddRequest::new(channel, name, ts.into());
            session.reactions_add(&req).await.map(|_| ())
        } else {
            let req = SlackApiReactionsRemoveRequest::new(name)
                .with_channel(channel)
                .with_timestamp(ts.into());
            session.reactions_remove(&req).await.map(|_| ())
        };
        if let Err(err) = result {
            tracing::debug!(error = %err, on, "slack reaction not changed");
        }
    }

    /// What `user` is called (display name, else real name, else handle),
    /// through users.info once per user; the id if Slack will not say.
    async fn name_of(&self, user: &str) -> String {
        let lock = || self.names.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(name) = lock().get(user) {
            return name.clone();
        }
        let session = self.client.open_session(&self.token);
        let found = session
            .users_info(&SlackApiUsersInfoRequest::new(user.into()))
            .await;
        let name = match found {
            Ok(resp) => {
                let u = resp.user;
                let nonempty = |n: &Option<String>| n.clone().filter(|n| !n.trim().is_empty());
                u.profile
                    .as_ref()
                    .and_then(|p| nonempty(&p.display_name).or_else(|| nonempty(&p.real_name)))
                    .or_else(|| nonempty(&u.real_name))
                    .or_else(|| nonempty(&u.name))
                    .unwrap_or_else(|| user.to_string())
            }
            // Cached too: a workspace without users:read answers the same
            // way every time.
            Err(err) => {
                tracing::debug!(user, error = %err, "users.info failed; using the id");
                user.to_string()
            }
        };
        let mut names = lock();
        if names.len() >= NAMES_CAP {
            names.clear();
        }
        names.insert(user.to_string(), name.clone());
        name
    }

    /// Takes an Events API `event`: builds the inbound event, lets a
    /// reply in a thread the bot is part of through without a mention, and
    /// submits it. An error means it was not stored.
    async fn accept(&self, event: &Value) -> Result<(), crate::store::StoreError> {
        let Some(mut inbound) = self.message_event(event) else {
            return Ok(());
        };
        if !inbound.from_bot
            && self
                .questions
                .answer_text(&inbound.chat_id, &inbound.user_id, &inbound.text)
        {
            return Ok(());
        }
        // A reply in a thread where the bot is already talking continues
        // that conversation without a mention.
        if !inbound.mentioned && event["thread_ts"].is_string() {
            let key = crate::sessions::session_key(&inbound, self.rules);
            inbound.mentioned = matches!(
                self.gateway.store.open_session_by_key(&key).await,
                Ok(Some(_))
            );
        }
        if !inbound.from_bot {
            inbound.user_name = self.name_of(&inbound.user_id).await;
        }
        self.gateway.sessions.submit(inbound).await.map(|_| ())
    }

    async fn block_action(&self, payload: Value) {
        let user = payload["user"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = payload["user"]["username"]
            .as_str()
            .or_else(|| payload["user"]["name"].as_str())
            .unwrap_or(&user)
            .to_string();
        let channel = payload["channel"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let thread = payload["message"]["thread_ts"].as_str().map(str::to_string);
        let message_ts = payload["container"]["message_ts"]
            .as_str()
            .or_else(|| payload["message"]["ts"].as_str())
            .unwrap_or_default()
            .to_string();
        for action in payload["actions"].as_array().into_iter().flatten() {
            let value = action["value"].as_str().unwrap_or_default();
            if value.starts_with("cl:") {
                match self.questions.answer_button(value, &user) {
                    Ok(choice) => {
                        let question = payload["message"]["text"].as_str().unwrap_or_default();
                        let text = format!("{question}\n→ {choice}");
                        let session = self.client.open_session(&self.token);
                        let req = SlackApiChatUpdateRequest::new(
                            channel.clone().into(),
                            content(&text, section_blocks(&text)),
                            message_ts.clone().into(),
                        );
                        if let Err(err) = session.chat_update(&req).await {
                            tracing::warn!(error = %err, "chat.update failed");
                        }
                    }
                    Err(why) => {
                        self.ephemeral(&channel, thread.as_deref(), &user, why)
                            .await;
                    }
                }
                continue;
            }
            let Some((id, choice)) = Choice::parse_button(value) else {
                continue;
            };
            let actor = Actor {
                platform: "slack".into(),
                user_id: user.clone(),
                name: name.clone(),
            };
            if let Err(refusal) = self.gateway.broker.resolve(&id, choice, &actor, None).await {
                self.ephemeral(&channel, thread.as_deref(), &user, &refusal.to_string())
                    .await;
            }
        }
    }

    async fn ephemeral(&self, channel: &str, thread: Option<&str>, user: &str, text: &str) {
        let session = self.client.open_session(&self.token);
        let mut req = SlackApiChatPostEphemeralRequest::new(
            channel.into(),
            user.into(),
            SlackMessageContent::new().with_text(text.into()),
        );
        if let Some(ts) = thread {
            req = req.with_thread_ts(ts.into());
        }
        if let Err(err) = session.chat_post_ephemeral(&req).await {
            tracing::warn!(error = %err, "chat.postEphemeral failed");
        }
    }
}

/// Asks a clarify question in one Slack conversation.
struct SlackQuestion {
    adapter: Arc<Slack>,
    channel: String,
    thread: Option<String>,
    user: String,
}

#[async_trait::async_trait]
impl ClarifyBroker for SlackQuestion {
    async fn ask(
        &self,
        question: &str,
        choices: &[String],
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<String, String> {
        let asked = self
            .adapter
            .questions
            .ask(&self.channel, Some(&self.user), choices);
        let text = format!(":question: {}", format::mrkdwn(question));
        let mut values = vec![json!({"type": "section", "text": {"type": "mrkdwn", "text": text}})];
        if !choices.is_empty() {
            let buttons: Vec<Value> = choices
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    json!({
                        "type": "button",
                        "action_id": format!("switchboard_choice_{i}"),
                        "text": {"type": "plain_text", "text": crate::tools::builtin::clip(c, 70)},
                        "value": questions::button_data(&asked.id, i),
                    })
                })
                .collect();
            values.push(json!({"type": "actions", "elements": buttons}));
        }
        let session = self.adapter.client.open_session(&self.adapter.token);
        let mut req = SlackApiChatPostMessageRequest::new(
            self.channel.clone().into(),
            content(&text, values),
        );
        if let Some(ts) = &self.thread {
            req = req.with_thread_ts(ts.clone().into());
        }
        if let Err(err) = session.chat_post_message(&req).await {
            self.adapter.questions.drop_question(&asked);
            return Err(err.to_string());
        }
        self.adapter.questions.wait(asked, cancel).await
    }
}

#[async_trait::async_trait]
impl Replier for Slack {
    fn clarifier(&self, event: &InboundEvent) -> Option<Arc<dyn ClarifyBroker>> {
        Some(Arc::new(SlackQuestion {
            adapter: self.this.upgrade()?,
            channel: event.chat_id.clone(),
            thread: event.thread_id.clone(),
            user: event.user_id.clone(),
        }))
    }

    async fn reply(&self, event: &InboundEvent, text: &str) {
        if let Err(err) = self
            .post(&event.chat_id, event.thread_id.as_deref(), text)
            .await
        {
            tracing::warn!(channel = %event.chat_id, error = %err, "slack reply failed");
        }
    }

    async fn working(&self, event: &InboundEvent) {
        self.hourglass(event, true).await;
    }

    async fn finished(&self, event: &InboundEvent) {
        self.hourglass(event, false).await;
    }
}

/// A code block that the command cannot break out of.
fn code(text: &str) -> String {
    format!("```{}```", text.replace("```", "ˋˋˋ"))
}

#[async_trait::async_trait]
impl ApprovalPrompter for Slack {
    async fn show(&self, chat: &ChatRef, prompt: &Prompt) -> Result<String, String> {
        let mut escaped = String::new();
        format::escape(&prompt.command, &mut escaped);
        let text = format!(
            ":warning: *Approval needed*\n{}\nReason: {}",
            code(&crate::tools::builtin::clip(&escaped, 2500)),
            prompt.reasons.join("; ")
        );
        let buttons: Vec<Value> = Choice::ALL
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut b = json!({
                    "type": "button",
                    "action_id": format!("switchboard_approval_{i}"),
                    "text": {"type": "plain_text", "text": c.label()},
                    "value": c.button_data(&prompt.approval_id),
                });
                match c {
                    Choice::Once => b["style"] = json!("primary"),
                    Choice::Deny => b["style"] = json!("danger"),
                    _ => {}
                }
                b
            })
            .collect();
        let values = vec![
            json!({"type": "section", "text": {"type": "mrkdwn", "text": text}}),
            json!({"type": "actions", "block_id": "switchboard_approval", "elements": buttons}),
        ];
        let session = self.client.open_session(&self.token);
        let mut req =
            SlackApiChatPostMessageRequest::new(chat.chat.clone().into(), content(&text, values));
        if let Some(ts) = &chat.thread {
            req = req.with_thread_ts(ts.clone().into());
        }
        let resp = session
            .chat_post_message(&req)
            .await
            .map_err(|e| e.to_string())?;
        Ok(resp.ts.to_string())
    }

    async fn close(&self, chat: &ChatRef, message_id: &str, outcome: &str) -> Result<(), String> {
        let session = self.client.open_session(&self.token);
        let text = format::mrkdwn(outcome);
        let req = SlackApiChatUpdateRequest::new(
            chat.chat.clone().into(),
            content(&text, section_blocks(&text)),
            message_id.to_string().into(),
        );
        session
            .chat_update(&req)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

#[async_trait::async_trait]
impl Outbound for Slack {
    async fn send_text(&self, chat: &str, text: &str) -> Result<String, String> {
        self.post(chat, None, text).await
    }
}

struct RouteState {
    slot: Slot,
    secret: String,
}

fn event_routes(gw: &Gateway, slot: Slot) -> axum::Router<AppState> {
    let s = &gw.config.slack;
    if !s.enabled || s.mode != SlackMode::Events {
        return axum::Router::new();
    }
    let state = Arc::new(RouteState {
        slot,
        secret: gw
            .env
            .get(&s.signing_secret_env)
            .unwrap_or_default()
            .to_string(),
    });
    axum::Router::new()
        .route("/slack/events", post(events).with_state(state.clone()))
        .route(
            "/slack/interactivity",
            post(interactivity).with_state(state),
        )
}

/// `None` when the request is Slack's; else the 401 to answer.
fn refused(state: &RouteState, headers: &HeaderMap, body: &[u8]) -> Option<Response> {
    if state.secret.is_empty() {
        return Some(StatusCode::UNAUTHORIZED.into_response());
    }
    let now = crate::store::now_ms() / 1000;
    let err = verify::verify(&state.secret, headers, body, now).err()?;
    tracing::warn!(error = %err, "slack request refused");
    Some(
        (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": err.to_string()})),
        )
            .into_response(),
    )
}

async fn events(State(state): State<Arc<RouteState>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(refusal) = refused(&state, &headers, &body) {
        return refusal;
    }
    let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    match payload["type"].as_str() {
        Some("url_verification") => {
            Json(json!({"challenge": payload["challenge"]})).into_response()
        }
        Some("event_callback") => {
            let Some(adapter) = state.slot.get() else {
                return StatusCode::SERVICE_UNAVAILABLE.into_response();
            };
            // Committed before the 200, well inside Slack's 3 seconds; the
            // turn runs afterwards.
            match adapter.accept(&payload["event"]).await {
                Ok(()) => StatusCode::OK.into_response(),
                Err(err) => {
                    tracing::error!(error = %err, "slack event not stored");
                    StatusCode::SERVICE_UNAVAILABLE.into_response()
                }
            }
        }
        _ => StatusCode::OK.into_response(),
    }
}

async fn interactivity(
    State(state): State<Arc<RouteState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refusal) = refused(&state, &headers, &body) {
        return refusal;
    }
    let Some(payload) = url::form_urlencoded::parse(&body)
        .find(|(k, _)| k == "payload")
        .and_then(|(_, v)| serde_json::from_str::<Value>(&v).ok())
    else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let Some(adapter) = state.slot.get().cloned() else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    if payload["type"] == "block_actions" {
        // Acknowledged at once; the decision and the message update follow.
        tokio::spawn(async move { adapter.block_action(payload).await });
    }
    StatusCode::OK.into_response()
}

fn client(api_url: &str) -> std::io::Result<SlackHyperClient> {
    // Named explicitly: with several rustls backends in the build there is
    // no process-wide default to fall back on.
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(rustls::crypto::ring::default_provider())?
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .build();
    let connector = SlackClientHyperConnector::with_connector(https)
        .with_slack_api_url(api_url.trim_end_matches('/'));
    Ok(SlackClient::new(connector))
}

/// Connects (auth.test, retried with backoff), registers the adapter, and
/// serves until `stop`.
async fn run(ctx: ComponentContext, slot: Slot) {
    let gw = ctx.gateway.clone();
    let config = gw.config.slack.clone();
    if !config.enabled {
        return;
    }
    let client = match client(&config.api_url) {
        Ok(c) => Arc::new(c),
        Err(err) => {
            ctx.health.set("slack", false, format!("TLS roots: {err}"));
            return;
        }
    };
    let token = SlackApiToken::new(
        gw.env
            .get(&config.bot_token_env)
            .unwrap_or_default()
            .to_string()
            .into(),
    );
    ctx.health.set("slack", false, "connecting");
    let mut wait = Duration::from_secs(1);
    let auth = loop {
        let result = client.open_session(&token).auth_test().await;
        match result {
            Ok(auth) => break auth,
            Err(err) => {
                ctx.health
                    .set("slack", false, format!("auth.test failed: {err}"));
                tokio::select! {
                    _ = ctx.stop.cancelled() => return,
                    _ = tokio::time::sleep(wait) => wait = (wait * 2).min(Duration::from_secs(30)),
                }
            }
        }
    };
    let adapter = Arc::new_cyclic(|this| Slack {
        client,
        token,
        bot_user: auth.user_id.to_string(),
        gateway: gw.clone(),
        rules: crate::sessions::ManagerSettings::from_config(&gw.config).rules,
        reacted: Mutex::new(HashSet::new()),
        names: Mutex::new(HashMap::new()),
        questions: Questions::default(),
        this: this.clone(),
    });
    let _ = slot.set(adapter.clone());
    gw.attach("slack", adapter.clone()).await;
    tracing::info!(bot_user = %adapter.bot_user, mode = ?config.mode, "slack connected");
    match config.mode {
        SlackMode::Events => {
            ctx.health.set("slack", true, "events API");
            ctx.stop.cancelled().await;
        }
        SlackMode::Socket => {
            let app_token = SlackApiToken::new(
                gw.env
                    .get(&config.app_token_env)
                    .unwrap_or_default()
                    .to_string()
                    .into(),
            );
            socket_mode(&adapter, &ctx, &app_token).await;
        }
    }
    gw.outbound.disconnect("slack");
}

/// Socket Mode: slack-morphism keeps the websocket (and reconnects); each
/// envelope is acknowledged after its callback returns, so an event that
/// could not be stored is not acknowledged and Slack sends it again.
async fn socket_mode(adapter: &Arc<Slack>, ctx: &ComponentContext, app_token: &SlackApiToken) {
    let mut callbacks = SlackSocketModeListenerCallbacks::<SlackClientHyperHttpsConnector>::new();
    let on_push = adapter.clone();
    callbacks.push_events_callback = Box::new(
        move |ev: SlackPushEventCallback,
              _: Arc<SlackHyperClient>,
              _: SlackClientEventsUserState| {
            let adapter = on_push.clone();
            async move {
                let event = serde_json::to_value(&ev.event)?;
                adapter.accept(&event).await?;
                Ok(())
            }
        },
    );
    let on_interaction = adapter.clone();
    callbacks.interaction_callback = Box::new(
        move |ev: SlackInteractionEvent,
              _: Arc<SlackHyperClient>,
              _: SlackClientEventsUserState| {
            let adapter = on_interaction.clone();
            async move {
                let payload = serde_json::to_value(&ev)?;
                if payload["type"] == "block_actions" {
                    tokio::spawn(async move { adapter.block_action(payload).await });
                }
                Ok(SlackInteractionResponse::Empty)
            }
        },
    );
    let environment = Arc::new(SlackClientEventsListenerEnvironment::new(
        adapter.client.clone(),
    ));
    let listener = SlackClientSocketModeListener::new(
        &SlackClientSocketModeConfig::new(),
        environment,
        callbacks,
    );
    let mut wait = Duration::from_secs(1);
    loop {
        match listener.listen_for(app_token).await {
            Ok(()) => break,
            Err(err) => {
                ctx.health
                    .set("slack", false, format!("socket mode: {err}"));
                tokio::select! {
                    _ = ctx.stop.cancelled() => return,
                    _ = tokio::time::sleep(wait) => wait = (wait * 2).min(Duration::from_secs(30)),
                }
            }
        }
    }
    listener.start().await;
    ctx.health.set("slack", true, "socket mode");
    ctx.stop.cancelled().await;
    listener.shutdown().await;
}
