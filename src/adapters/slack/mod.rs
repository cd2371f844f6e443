//! The Slack adapter: Socket Mode (the app-level token opens a websocket;
//! each envelope is acknowledged once its event is stored), or the HTTP
//! Events API (`POST /slack/events`, v0 signatures, `url_verification`
//! answered) with the interactivity endpoint (`POST /slack/interactivity`,
//! Block Kit button presses). The Web
//! API through slack-morphism: replies in thread as mrkdwn section blocks
//! (3000 characters a block, 39 000 a message), an hourglass reaction while
//! a turn runs, approvals as Block Kit buttons updated with `chat.update`.

pub mod format;
mod inbound;
mod keyed;
pub mod verify;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use slack_morphism::errors::SlackClientError;
use slack_morphism::prelude::*;

use crate::adapters::lifecycle;
use crate::adapters::{ComponentContext, Gateway, Wiring};
use crate::config::{Config, SlackMode};
use crate::http::AppState;
use crate::platform::{
    AccessRules, Actor, Attachment, Capabilities, ChatRef, ChoiceStyle, InboundEvent, Platform,
    PlatformError, Preset, Profile, Prompt, PromptKind, retrying,
};
use crate::render::clip;
use crate::sessions::Press;

/// Characters in one section block's text.
const BLOCK_CHARS: usize = 3000;
/// Characters in one message.
const MESSAGE_CHARS: usize = 39_000;
/// The reaction shown while a turn runs.
const WORKING: &str = "hourglass_flowing_sand";

/// The platform id.
pub const ID: &str = "slack";

/// Slack as `[slack]` describes it: allowlists, pairing for strangers
/// unless `open = true`, the core tools.
pub fn profile(config: &Config) -> Profile {
    let s = &config.slack;
    Profile::chat(
        ID,
        AccessRules {
            allowed_users: s.allowed_users.clone(),
            allowed_chats: s.allowed_channels.clone(),
            require_mention: s.require_mention,
            open_when_empty: s.open,
            ..AccessRules::default()
        },
        s.toolsets.clone(),
        Preset {
            description: "Slack sessions",
            tools: &[],
            includes: &["core"],
        },
    )
    .streamed(config.chat.with(s.stream, s.progress))
}

/// Adds the Slack component and its Events API routes to `daemon`.
pub fn install<W: Wiring>(daemon: W) -> W {
    let slot: Slot = Arc::default();
    let route_slot = slot.clone();
    daemon
        .routes_with(Box::new(move |gw| event_routes(gw, route_slot)))
        .component(ID, Box::new(move |ctx| Box::pin(run(ctx, slot))))
}

type Slot = Arc<std::sync::OnceLock<Arc<Slack>>>;

/// The running adapter.
pub struct Slack {
    client: Arc<SlackHyperClient>,
    token: SlackApiToken,
    bot_user: String,
    gateway: Gateway,
    reacted: Mutex<HashSet<(String, String)>>,
    /// Display names by user id, looked up once each.
    names: Mutex<HashMap<String, String>>,
    /// Downloads the files of messages (their private URLs take the token).
    files: reqwest::Client,
    /// The host of `api_url` besides Slack's own, which file links may
    /// name (a proxy or a test server).
    api_host: Option<String>,
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

/// What joins two sections in a message's whole text.
const SECTION_SEP: usize = 2;
/// Blocks a message holds at most.
const MESSAGE_BLOCKS: usize = 50;

fn section(text: &str) -> Value {
    json!({"type": "section", "text": {"type": "mrkdwn", "text": text}})
}

/// Markdown `text` as messages of mrkdwn section blocks: sections of at
/// most [`BLOCK_CHARS`], split between Markdown blocks (the split is
/// invisible in Slack), gathered into messages of at most
/// [`MESSAGE_CHARS`] and [`MESSAGE_BLOCKS`]. Each message comes with its
/// whole text.
fn messages(text: &str) -> Vec<(String, Vec<Value>)> {
    let mut out: Vec<(String, Vec<Value>)> = Vec::new();
    let mut size = 0;
    for piece in format::pieces(text, BLOCK_CHARS) {
        let n = piece.chars().count();
        let full = out.last().is_none_or(|(_, blocks)| {
            blocks.len() >= MESSAGE_BLOCKS || size + SECTION_SEP + n > MESSAGE_CHARS
        });
        if full {
            out.push((String::new(), Vec::new()));
            size = 0;
        }
        if let Some((whole, blocks)) = out.last_mut() {
            if !whole.is_empty() {
                whole.push_str("\n\n");
            }
            whole.push_str(&piece);
            blocks.push(section(&piece));
        }
        size += n + SECTION_SEP;
    }
    out
}

fn blocks(values: Vec<Value>) -> Vec<SlackBlock> {
    values
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect()
}

fn content(text: &str, block_values: Vec<Value>) -> SlackMessageContent {
    SlackMessageContent::new()
        .with_text(clip(text, BLOCK_CHARS))
        .with_blocks(blocks(block_values))
}

/// What a failed Web API call means for the caller.
fn port_error(err: SlackClientError) -> PlatformError {
    match err {
        SlackClientError::RateLimitError(e) => PlatformError::RateLimited {
            retry_after: e.retry_after.unwrap_or(Duration::from_secs(1)),
        },
        SlackClientError::ApiError(e)
            if matches!(
                e.code.as_str(),
                "channel_not_found" | "message_not_found" | "thread_not_found"
            ) =>
        {
            PlatformError::NotFound(e.code)
        }
        // Slack's own words for "try again later", answered with 200.
        SlackClientError::ApiError(e) if e.code == "ratelimited" => PlatformError::RateLimited {
            retry_after: Duration::from_secs(1),
        },
        SlackClientError::ApiError(e)
            if matches!(
                e.code.as_str(),
                "internal_error" | "service_unavailable" | "request_timeout"
            ) =>
        {
            PlatformError::Unavailable(e.code)
        }
        SlackClientError::ApiError(e) => PlatformError::Rejected(e.code),
        other => PlatformError::Unavailable(other.to_string()),
    }
}

impl Slack {
    /// Posts `text` (Markdown) to `channel`, in `thread` if given, split
    /// into messages and blocks; returns the last message's ts.
    /// Each message carries `key` (the first as it is, the next ones
    /// numbered) in its metadata, by which [`reclaim`](Platform::reclaim)
    /// finds it.
    async fn post(
        &self,
        channel: &str,
        thread: Option<&str>,
        text: &str,
        key: Option<&str>,
    ) -> Result<String, PlatformError> {
        let session = self.client.open_session(&self.token);
        let mut last = String::new();
        for (i, (whole, sections)) in messages(text).into_iter().enumerate() {
            let mut content = content(&whole, sections);
            if let Some(key) = key {
                content = keyed::marked(content, key, i);
            }
            let mut req = SlackApiChatPostMessageRequest::new(channel.into(), content);
            if let Some(ts) = thread {
                req = req.with_thread_ts(ts.into());
            }
            let resp =
                retrying(|| async { session.chat_post_message(&req).await.map_err(port_error) })
                    .await?;
            last = resp.ts.to_string();
        }
        Ok(last)
    }

    /// The inbound event of an Events API `event`, if it is a message for
    /// the bot to consider.
    fn message_event(&self, event: &Value) -> Option<InboundEvent> {
        let me = inbound::Me {
            user: &self.bot_user,
            allowed_bots: &self.gateway.config.slack.allowed_bots,
        };
        inbound::message_event(event, &me)
    }

    /// Whether the bot's token may go with a request to `url`: Slack's own
    /// hosts, or the configured API's.
    fn trusted_link(&self, url: &str) -> bool {
        let Some(host) = url::Url::parse(url)
            .ok()
            .filter(|u| matches!(u.scheme(), "https" | "http"))
            .and_then(|u| u.host_str().map(str::to_ascii_lowercase))
        else {
            return false;
        };
        host == "slack.com" || host.ends_with(".slack.com") || Some(&host) == self.api_host.as_ref()
    }

    /// Puts the working reaction on `event`'s message (`on`) or takes it
    /// off; each once, however often the worker asks.
    async fn hourglass(&self, channel: &str, ts: &str, on: bool) -> Result<(), PlatformError> {
        let key = (channel.to_string(), ts.to_string());
        let changed = {
            let mut reacted = self.reacted.lock().unwrap_or_else(|e| e.into_inner());
            if on {
                reacted.insert(key)
            } else {
                reacted.remove(&key)
            }
        };
        if !changed {
            return Ok(());
        }
        let session = self.client.open_session(&self.token);
        let channel: SlackChannelId = channel.to_string().into();
        let ts = ts.to_string();
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
        result.map_err(port_error)
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

    /// Takes an Events API `event`: builds the inbound event, names its
    /// sender, and submits it. An error means it was not stored.
    async fn accept(&self, event: &Value) -> Result<(), crate::store::StoreError> {
        let Some(mut inbound) = self.message_event(event) else {
            return Ok(());
        };
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
        for action in payload["actions"].as_array().into_iter().flatten() {
            let press = Press {
                chat: ChatRef {
                    platform: ID.into(),
                    chat: channel.clone(),
                    thread: thread.clone(),
                },
                actor: Actor {
                    platform: ID.into(),
                    user_id: user.clone(),
                    name: name.clone(),
                    account: None,
                },
                data: action["value"].as_str().unwrap_or_default().to_string(),
            };
            if let Err(why) = self.gateway.sessions.press(&press).await {
                self.ephemeral(&channel, thread.as_deref(), &user, &why)
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

#[async_trait::async_trait]
impl Platform for Slack {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            text_limit: MESSAGE_CHARS,
            buttons: true,
            edits: true,
            threads: true,
            downloads: true,
        }
    }

    async fn fetch(&self, file: &Attachment, into: &Path) -> Result<PathBuf, PlatformError> {
        let url = file
            .url
            .as_deref()
            .filter(|url| self.trusted_link(url))
            .ok_or_else(|| PlatformError::Rejected("not a Slack file link".into()))?;
        let request = self.files.get(url).bearer_auth(&self.token.token_value.0);
        crate::platform::download(request, into.join(&file.name)).await
    }

    async fn send(
        &self,
        to: &ChatRef,
        _reply_to: Option<&str>,
        text: &str,
    ) -> Result<String, PlatformError> {
        self.post(&to.chat, to.thread.as_deref(), text, None).await
    }

    async fn send_keyed(
        &self,
        to: &ChatRef,
        _reply_to: Option<&str>,
        text: &str,
        key: &str,
    ) -> Result<String, PlatformError> {
        self.post(&to.chat, to.thread.as_deref(), text, Some(key))
            .await
    }

    /// Looks for the message among the chat's (or thread's) latest, by the
    /// key in its metadata.
    async fn reclaim(
        &self,
        at: &ChatRef,
        key: &str,
        sent_ms: i64,
    ) -> Result<Option<String>, PlatformError> {
        keyed::find(self, at, key, sent_ms).await
    }

    async fn working(
        &self,
        at: &ChatRef,
        message: Option<&str>,
        on: bool,
    ) -> Result<(), PlatformError> {
        match message {
            Some(ts) => self.hourglass(&at.chat, ts, on).await,
            None => Ok(()),
        }
    }

    async fn ask(&self, at: &ChatRef, prompt: &Prompt) -> Result<String, PlatformError> {
        let (text, mut values) = messages(&prompt.text)
            .into_iter()
            .next()
            .unwrap_or_default();
        let prefix = match prompt.kind {
            PromptKind::Approval => "switchboard_approval",
            PromptKind::Question => "switchboard_choice",
        };
        let buttons: Vec<Value> = prompt
            .choices
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut b = json!({
                    "type": "button",
                    "action_id": format!("{prefix}_{i}"),
                    "text": {"type": "plain_text", "text": clip(&c.label, 70)},
                    "value": c.data,
                });
                match c.style {
                    ChoiceStyle::Primary => b["style"] = json!("primary"),
                    ChoiceStyle::Danger => b["style"] = json!("danger"),
                    ChoiceStyle::Plain => {}
                }
                b
            })
            .collect();
        if !buttons.is_empty() {
            values.push(json!({"type": "actions", "block_id": prefix, "elements": buttons}));
        }
        let session = self.client.open_session(&self.token);
        let mut req =
            SlackApiChatPostMessageRequest::new(at.chat.clone().into(), content(&text, values));
        if let Some(ts) = &at.thread {
            req = req.with_thread_ts(ts.clone().into());
        }
        let resp = retrying(|| async { session.chat_post_message(&req).await.map_err(port_error) })
            .await?;
        Ok(resp.ts.to_string())
    }

    async fn edit(&self, at: &ChatRef, message: &str, text: &str) -> Result<(), PlatformError> {
        let session = self.client.open_session(&self.token);
        let (text, sections) = messages(text).into_iter().next().unwrap_or_default();
        let req = SlackApiChatUpdateRequest::new(
            at.chat.clone().into(),
            content(&text, sections),
            message.to_string().into(),
        );
        session
            .chat_update(&req)
            .await
            .map(|_| ())
            .map_err(port_error)
    }

    async fn delete(&self, at: &ChatRef, message: &str) -> Result<(), PlatformError> {
        let session = self.client.open_session(&self.token);
        let req =
            SlackApiChatDeleteRequest::new(at.chat.clone().into(), message.to_string().into());
        session
            .chat_delete(&req)
            .await
            .map(|_| ())
            .map_err(port_error)
    }

    fn pace(&self, _at: &ChatRef, _answering: Option<&str>) -> Option<Duration> {
        // chat.update is a Tier 3 method: about fifty a minute.
        Some(Duration::from_millis(1500))
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
        let tasks = adapter.gateway.tasks.clone();
        tasks.spawn(async move { adapter.block_action(payload).await });
    }
    StatusCode::OK.into_response()
}

fn client(api_url: &str) -> SlackHyperClient {
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(crate::http::client::tls_config())
        .https_or_http()
        .enable_http1()
        .build();
    let connector = SlackClientHyperConnector::with_connector(https)
        .with_slack_api_url(api_url.trim_end_matches('/'));
    SlackClient::new(connector)
}

/// Connects (auth.test, retried with backoff), registers the adapter, and
/// serves until `stop`.
async fn run(ctx: ComponentContext, slot: Slot) {
    let gw = ctx.gateway.clone();
    let config = gw.config.slack.clone();
    if !config.enabled {
        return;
    }
    let client = Arc::new(client(&config.api_url));
    let token = SlackApiToken::new(
        gw.env
            .get(&config.bot_token_env)
            .unwrap_or_default()
            .to_string()
            .into(),
    );
    let session = || async { client.open_session(&token).auth_test().await };
    let Some(auth) = lifecycle::identify(&ctx, ID, session, |_| None).await else {
        return;
    };
    let adapter = Arc::new(Slack {
        client,
        token,
        bot_user: auth.user_id.to_string(),
        gateway: gw.clone(),
        reacted: Mutex::new(HashSet::new()),
        names: Mutex::new(HashMap::new()),
        files: crate::http::client::client(),
        api_host: url::Url::parse(&config.api_url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string)),
    });
    let _ = slot.set(adapter.clone());
    lifecycle::attached(&ctx, ID, adapter.clone(), connected(&ctx, &adapter)).await;
}

/// Takes events while connected: from the Events API's requests, or over
/// Socket Mode while this replica leads Slack's ingress.
async fn connected(ctx: &ComponentContext, adapter: &Arc<Slack>) {
    let gw = &ctx.gateway;
    let config = &gw.config.slack;
    tracing::info!(bot_user = %adapter.bot_user, mode = ?config.mode, "slack connected");
    match config.mode {
        SlackMode::Events => {
            ctx.health.set(ID, true, "events API");
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
            let app_token = &app_token;
            lifecycle::lead(ctx, ID, |ended| async move {
                socket_mode(adapter, &ctx.health, &ended, app_token).await;
            })
            .await;
        }
    }
}

/// Socket Mode: slack-morphism keeps the websocket (and reconnects); each
/// envelope is acknowledged after its callback returns, so an event that
/// could not be stored is not acknowledged and Slack sends it again. Runs
/// until `stop` (the daemon's, or the end of this replica's term).
async fn socket_mode(
    adapter: &Arc<Slack>,
    health: &crate::telemetry::Health,
    stop: &tokio_util::sync::CancellationToken,
    app_token: &SlackApiToken,
) {
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
                    let tasks = adapter.gateway.tasks.clone();
                    tasks.spawn(async move { adapter.block_action(payload).await });
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
                health.set(ID, false, format!("socket mode: {err}"));
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(wait) => wait = (wait * 2).min(Duration::from_secs(30)),
                }
            }
        }
    }
    listener.start().await;
    health.set(ID, true, "socket mode");
    stop.cancelled().await;
    listener.shutdown().await;
}
