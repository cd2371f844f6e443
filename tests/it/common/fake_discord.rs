//! A fake Discord: the REST API under `/api/v10` (gateway discovery,
//! channels, messages, typing, threads, interaction callbacks and
//! webhooks, global commands) answering with Discord's documented object
//! shapes and recording every call; and a gateway websocket that says
//! HELLO, takes IDENTIFY, answers with READY, acknowledges heartbeats, and
//! dispatches the events a test sends (MESSAGE_CREATE, INTERACTION_CREATE).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::files::Files;
use super::outage::{Answer, Outage};

pub const BOT_ID: &str = "900";
pub const APP_ID: &str = "800";
pub const GUILD: &str = "300";

#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub path: String,
    pub auth: String,
    pub body: Value,
    /// The id the fake gave a message it created.
    pub id: String,
    /// Answered with an outage's error.
    pub refused: bool,
    /// A message creation Discord answered with the message an earlier
    /// one with the same enforced nonce created (nothing new was shown).
    pub repeat: bool,
    /// When it came.
    pub at: std::time::Instant,
}

#[derive(Clone, Default)]
struct Shared {
    calls: Arc<Mutex<Vec<Call>>>,
    next_id: Arc<Mutex<u64>>,
    gateway_url: Arc<Mutex<String>>,
    /// Frames to send on the open gateway connection.
    socket: Arc<Mutex<Option<tokio::sync::mpsc::UnboundedSender<Value>>>>,
    /// Every frame the client sent (IDENTIFY, heartbeats).
    received: Arc<Mutex<Vec<Value>>>,
    seq: Arc<Mutex<u64>>,
    /// Thread channel id → parent channel id.
    threads: Arc<Mutex<HashMap<String, String>>>,
    /// How long message edits take.
    edit_delay: Arc<Mutex<Duration>>,
    /// How long channel lookups take.
    lookup_delay: Arc<Mutex<Duration>>,
    /// Messages by channel, as `GET …/messages` reads them.
    history: Arc<Mutex<HashMap<String, Vec<Value>>>>,
    /// While open, creating a message fails.
    sends_down: Outage,
    /// Messages created with `enforce_nonce`, by channel and nonce.
    nonces: Arc<Mutex<HashMap<(String, String), Value>>>,
    /// While on, a message is created and its answer never comes (as
    /// when the bot dies before reading it).
    hold_sends: Arc<std::sync::atomic::AtomicBool>,
    /// What each of the bot's messages shows now, by (channel, id).
    shown: Arc<Mutex<std::collections::BTreeMap<(String, String), String>>>,
}

pub struct FakeDiscord {
    /// Used as `discord.api_url`.
    pub url: String,
    /// Attachments on the "CDN", under `/attachments/`.
    pub files: Files,
    shared: Shared,
}

/// A user object.
pub fn user(id: &str, name: &str, bot: bool) -> Value {
    json!({"id": id, "username": name, "global_name": name, "discriminator": "0",
           "avatar": null, "bot": bot, "public_flags": 0})
}

/// A message object as Discord sends it in MESSAGE_CREATE.
pub fn message(id: &str, channel: &str, author: Value, content: &str, guild: bool) -> Value {
    let mentions: Vec<Value> = if content.contains(&format!("<@{BOT_ID}>")) {
        vec![user(BOT_ID, "switchboard", true)]
    } else {
        Vec::new()
    };
    let mut m = json!({
        "id": id, "channel_id": channel, "author": author, "content": content,
        "timestamp": chrono::Utc::now().to_rfc3339(), "edited_timestamp": null,
        "tts": false, "mention_everyone": false, "mentions": mentions, "mention_roles": [],
        "attachments": [], "embeds": [], "pinned": false, "type": 0, "flags": 0,
        "components": [],
    });
    if guild {
        m["guild_id"] = json!(GUILD);
        m["member"] = json!({"roles": [], "joined_at": "2026-01-01T00:00:00.000000+00:00",
                             "deaf": false, "mute": false, "flags": 0});
    }
    m
}

/// A guild member object for `user` with `roles`.
fn member(user: Value, roles: &[&str]) -> Value {
    json!({"user": user, "roles": roles, "joined_at": "2026-01-01T00:00:00.000000+00:00",
           "deaf": false, "mute": false, "flags": 0, "permissions": "2248473465835073"})
}

/// A button press (INTERACTION_CREATE, type 3) on `message` in a guild.
pub fn press(id: &str, presser: Value, roles: &[&str], message: &Value, custom_id: &str) -> Value {
    json!({
        "id": id, "application_id": APP_ID, "type": 3, "token": format!("tok-{id}"), "version": 1,
        "guild_id": GUILD, "channel_id": message["channel_id"],
        "channel": {"id": message["channel_id"], "type": 0, "name": "general", "guild_id": GUILD},
        "member": member(presser, roles),
        "data": {"custom_id": custom_id, "component_type": 2},
        "message": message, "app_permissions": "2248473465835073", "locale": "en-US",
        "guild_locale": "en-US", "entitlements": [], "authorizing_integration_owners": {"0": GUILD},
        "context": 0, "attachment_size_limit": 10485760,
    })
}

/// A button press on `message` in a DM: no guild, no member, the presser
/// as `user`.
pub fn dm_press(id: &str, presser: Value, message: &Value, custom_id: &str) -> Value {
    let mut p = press(id, presser.clone(), &[], message, custom_id);
    let fields = p.as_object_mut().unwrap();
    fields.remove("guild_id");
    fields.remove("member");
    p["user"] = presser;
    p["channel"] = json!({"id": message["channel_id"], "type": 1});
    p
}

/// A slash command (INTERACTION_CREATE, type 2) in guild channel `channel`.
pub fn command(id: &str, user: Value, channel: &str, name: &str, options: Value) -> Value {
    json!({
        "id": id, "application_id": APP_ID, "type": 2, "token": format!("tok-{id}"), "version": 1,
        "guild_id": GUILD, "channel_id": channel,
        "channel": {"id": channel, "type": 0, "name": "general", "guild_id": GUILD},
        "member": member(user, &[]),
        "data": {"id": "700", "name": name, "type": 1, "options": options},
        "app_permissions": "2248473465835073", "locale": "en-US", "guild_locale": "en-US",
        "entitlements": [], "authorizing_integration_owners": {"0": GUILD}, "context": 0,
        "attachment_size_limit": 10485760,
    })
}

impl FakeDiscord {
    pub async fn start() -> Self {
        let shared = Shared {
            next_id: Arc::new(Mutex::new(5000)),
            ..Shared::default()
        };
        let files = Files::default();
        let app = Router::new()
            .route("/api/v10/{*rest}", axum::routing::any(rest))
            .nest("/attachments", files.router())
            .with_state(shared.clone());
        let addr = super::serve(app).await;
        let ws = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        *shared.gateway_url.lock().unwrap() = format!("ws://{}", ws.local_addr().unwrap());
        tokio::spawn(gateway(ws, shared.clone()));
        Self {
            url: format!("http://{addr}"),
            files,
            shared,
        }
    }

    /// The CDN URL of attachment `path` (see [`Files::serve`]).
    pub fn attachment_url(&self, path: &str) -> String {
        format!("{}/attachments/{path}", self.url)
    }

    /// Declares channel `id` a public thread under `parent`.
    pub fn thread(&self, id: &str, parent: &str) {
        self.shared
            .threads
            .lock()
            .unwrap()
            .insert(id.into(), parent.into());
    }

    /// Fails every message the bot creates for `how_long`, with `answers`
    /// in turn.
    pub fn fail_sends_for(&self, how_long: Duration, answers: Vec<Answer>) {
        self.shared.sends_down.start(how_long, answers);
    }

    /// While `on`, a message the bot creates is created, but its answer
    /// never comes.
    pub fn hold_sends(&self, on: bool) {
        self.shared
            .hold_sends
            .store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// The bot's messages `channel` shows now (created, not deleted),
    /// with their text.
    pub fn shown(&self, channel: &str) -> Vec<(String, String)> {
        self.shared
            .shown
            .lock()
            .unwrap()
            .iter()
            .filter(|((c, _), _)| c == channel)
            .map(|((_, id), text)| (id.clone(), text.clone()))
            .collect()
    }

    /// Makes every message edit take `delay`.
    pub fn slow_edits(&self, delay: Duration) {
        *self.shared.edit_delay.lock().unwrap() = delay;
    }

    /// Makes every channel lookup take `delay`.
    pub fn slow_lookups(&self, delay: Duration) {
        *self.shared.lookup_delay.lock().unwrap() = delay;
    }

    pub fn calls(&self, method: &str, path_contains: &str) -> Vec<Call> {
        self.shared
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.method == method && c.path.contains(path_contains))
            .cloned()
            .collect()
    }

    pub async fn wait(&self, method: &str, path_contains: &str, n: usize) -> Vec<Call> {
        for _ in 0..600 {
            let calls = self.calls(method, path_contains);
            if calls.len() >= n {
                return calls;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!(
            "expected {n} {method} …{path_contains}… calls, saw {:?}",
            self.shared.calls.lock().unwrap()
        );
    }

    /// The messages the bot posted (POST …/messages), in order.
    pub fn posted(&self) -> Vec<Call> {
        self.calls("POST", "/messages")
            .into_iter()
            .filter(|c| c.path.ends_with("/messages"))
            .collect()
    }

    pub async fn wait_posted(&self, n: usize) -> Vec<Call> {
        for _ in 0..600 {
            let posted = self.posted();
            if posted.len() >= n {
                return posted;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("expected {n} posted messages, saw {:?}", self.posted());
    }

    /// The frames the client sent with opcode `op`.
    pub fn received(&self, op: u64) -> Vec<Value> {
        self.shared
            .received
            .lock()
            .unwrap()
            .iter()
            .filter(|f| f["op"] == op)
            .cloned()
            .collect()
    }

    /// Waits until the client has identified and READY went out.
    pub async fn ready(&self) {
        for _ in 0..600 {
            if !self.received(2).is_empty() && self.shared.socket.lock().unwrap().is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!(
            "the gateway client never identified; calls {:?}, frames {:?}",
            self.shared.calls.lock().unwrap(),
            self.shared.received.lock().unwrap()
        );
    }

    /// Puts `message` into its channel's history without dispatching it
    /// (written while the bot was not connected).
    pub fn write(&self, message: Value) {
        let channel = message["channel_id"].as_str().unwrap().to_string();
        self.shared
            .history
            .lock()
            .unwrap()
            .entry(channel)
            .or_default()
            .push(message);
    }

    /// Forgets the gateway client (its process was killed): the next
    /// [`ready`](Self::ready) waits for another to identify.
    pub fn disconnected(&self) {
        self.shared.socket.lock().unwrap().take();
        self.shared.received.lock().unwrap().clear();
    }

    /// Ends the gateway session the way Discord does when it cannot be
    /// resumed (op 9, `d: false`); the client has to identify again.
    pub async fn invalidate_session(&self) {
        self.ready().await;
        let tx = self.shared.socket.lock().unwrap().take().unwrap();
        self.shared.received.lock().unwrap().clear();
        tx.send(json!({"op": 9, "d": false})).unwrap();
    }

    /// Dispatches event `t` with data `d` on the gateway.
    pub async fn dispatch(&self, t: &str, d: Value) {
        if t == "MESSAGE_CREATE" {
            self.write(d.clone());
        }
        self.ready().await;
        let tx = self.shared.socket.lock().unwrap().clone().unwrap();
        tx.send(json!({"op": 0, "t": t, "d": d})).unwrap();
    }
}

fn new_id(shared: &Shared) -> String {
    let mut next = shared.next_id.lock().unwrap();
    *next += 1;
    next.to_string()
}

/// Records what message `id` of `channel` shows now (`None`: deleted).
fn shown_now(shared: &Shared, channel: &str, id: &str, content: Option<&Value>) {
    let mut shown = shared.shown.lock().unwrap();
    let key = (channel.to_string(), id.to_string());
    match content {
        Some(text) => {
            shown.insert(key, text.as_str().unwrap_or_default().to_string());
        }
        None => {
            shown.remove(&key);
        }
    }
}

async fn rest(
    State(shared): State<Shared>,
    method: Method,
    uri: Uri,
    Path(rest): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let auth = super::authorization(&headers);
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let id = new_id(&shared);
    shared.calls.lock().unwrap().push(Call {
        method: method.to_string(),
        path: uri.path().to_string(),
        auth,
        body: body.clone(),
        id: id.clone(),
        refused: false,
        repeat: false,
        at: std::time::Instant::now(),
    });
    let parts: Vec<&str> = rest.split('/').collect();
    let bot_message = |channel: &str, id: String| {
        let mut m = message(&id, channel, user(BOT_ID, "switchboard", true), "", false);
        m["content"] = body["content"].clone();
        m["components"] = body.get("components").cloned().unwrap_or(json!([]));
        m
    };
    match (method.as_str(), parts.as_slice()) {
        ("GET", ["gateway"]) => Json(json!({"url": *shared.gateway_url.lock().unwrap()})).into_response(),
        ("GET", ["users", "@me"]) => Json(user(BOT_ID, "switchboard", true)).into_response(),
        ("GET", ["gateway", "bot"]) => Json(json!({
            "url": *shared.gateway_url.lock().unwrap(), "shards": 1,
            "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
        }))
        .into_response(),
        ("GET", ["channels", id]) => {
            let delay = *shared.lookup_delay.lock().unwrap();
            tokio::time::sleep(delay).await;
            let parent = shared.threads.lock().unwrap().get(*id).cloned();
            Json(match parent {
                Some(parent) => json!({"id": id, "type": 11, "guild_id": GUILD, "name": "a thread",
                    "parent_id": parent, "owner_id": "42", "thread_metadata": {"archived": false,
                    "auto_archive_duration": 1440, "archive_timestamp": "2026-11-29T10:00:00.000000+00:00",
                    "locked": false}}),
                None => json!({"id": id, "type": 0, "guild_id": GUILD, "name": "general",
                    "position": 0, "permission_overwrites": [], "nsfw": false, "parent_id": null}),
            })
            .into_response()
        }
        ("POST", ["channels", _, "typing"]) => StatusCode::NO_CONTENT.into_response(),
        ("GET", ["channels", channel, "messages"]) => {
            let params: HashMap<String, String> =
                url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
                    .into_owned()
                    .collect();
            let after: u64 = params.get("after").and_then(|a| a.parse().ok()).unwrap_or(0);
            let limit: usize = params.get("limit").and_then(|l| l.parse().ok()).unwrap_or(50);
            let mut found: Vec<Value> = shared
                .history
                .lock()
                .unwrap()
                .get(*channel)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|m| m["id"].as_str().and_then(|i| i.parse::<u64>().ok()) > Some(after))
                .collect();
            // Discord answers newest first.
            found.sort_by_key(|m| std::cmp::Reverse(m["id"].as_str().unwrap().parse::<u64>().unwrap()));
            found.truncate(limit);
            Json(Value::Array(found)).into_response()
        }
        ("POST", ["channels", channel, "messages"]) => match shared.sends_down.answer() {
            Some(failure) => {
                if let Some(call) = shared.calls.lock().unwrap().last_mut() {
                    call.refused = true;
                }
                failure
            }
            None => {
                let nonce = body["nonce"]
                    .as_str()
                    .filter(|_| body["enforce_nonce"] == true)
                    .map(|n| ((*channel).to_string(), n.to_string()));
                let created = {
                    let mut nonces = shared.nonces.lock().unwrap();
                    if let Some(earlier) = nonce.as_ref().and_then(|n| nonces.get(n)) {
                        if let Some(call) = shared.calls.lock().unwrap().last_mut() {
                            call.repeat = true;
                        }
                        return Json(earlier.clone()).into_response();
                    }
                    let created = bot_message(channel, id.clone());
                    if let Some(n) = nonce {
                        nonces.insert(n, created.clone());
                    }
                    created
                };
                shown_now(&shared, channel, &id, Some(&body["content"]));
                if shared.hold_sends.load(std::sync::atomic::Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                Json(created).into_response()
            }
        },
        ("PATCH", ["channels", channel, "messages", id]) => {
            let delay = *shared.edit_delay.lock().unwrap();
            tokio::time::sleep(delay).await;
            if body.get("content").is_some() {
                shown_now(&shared, channel, id, Some(&body["content"]));
            }
            Json(bot_message(channel, (*id).to_string())).into_response()
        }
        ("DELETE", ["channels", channel, "messages", id]) => {
            shown_now(&shared, channel, id, None);
            StatusCode::NO_CONTENT.into_response()
        }
        ("POST", ["channels", channel, "messages", id, "threads"]) => {
            let existed = shared
                .threads
                .lock()
                .unwrap()
                .insert((*id).to_string(), (*channel).to_string())
                .is_some();
            if existed {
                return (
                    StatusCode::BAD_REQUEST,
                    Json(json!({"message": "A thread has already been created for this message", "code": 160004})),
                )
                    .into_response();
            }
            Json(json!({"id": id, "type": 11, "guild_id": GUILD, "name": body["name"],
                "parent_id": channel, "owner_id": BOT_ID, "thread_metadata": {"archived": false,
                "auto_archive_duration": 1440, "archive_timestamp": "2026-11-29T10:00:00.000000+00:00",
                "locked": false}}))
            .into_response()
        }
        ("PUT", ["applications", _, "commands"]) => {
            let commands: Vec<Value> = body
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|mut c| {
                    c["id"] = json!(new_id(&shared));
                    c["application_id"] = json!(APP_ID);
                    c["version"] = json!("1");
                    c["type"] = json!(1);
                    c["default_member_permissions"] = Value::Null;
                    c
                })
                .collect();
            Json(Value::Array(commands)).into_response()
        }
        ("POST", ["interactions", _, _, "callback"]) => StatusCode::NO_CONTENT.into_response(),
        ("PATCH", ["webhooks", _, _, "messages", _]) | ("POST", ["webhooks", _, _]) => {
            Json(bot_message("0", id)).into_response()
        }
        _ => (
            StatusCode::NOT_FOUND,
            Json(json!({"message": "404: Not Found", "code": 0})),
        )
            .into_response(),
    }
}

/// The gateway: HELLO on connect, READY after IDENTIFY, ACK for each
/// heartbeat, then the dispatches the test sends.
async fn gateway(listener: tokio::net::TcpListener, shared: Shared) {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    while let Ok((stream, _)) = listener.accept().await {
        let Ok(ws) = tokio_tungstenite::accept_async(stream).await else {
            continue;
        };
        let (mut sink, mut source) = ws.split();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
        let hello = json!({"op": 10, "d": {"heartbeat_interval": 41250}, "s": null, "t": null});
        if sink.send(Message::text(hello.to_string())).await.is_err() {
            continue;
        }
        let received = shared.received.clone();
        let socket = shared.socket.clone();
        let url = shared.gateway_url.lock().unwrap().clone();
        let to_client = tx.clone();
        tokio::spawn(async move {
            while let Some(Ok(msg)) = source.next().await {
                if let Message::Close(_) = msg {
                    // Answered like Discord does, so the client's close completes.
                    let _ = to_client.send(json!({"close": 1000}));
                    break;
                }
                let Message::Text(text) = msg else { continue };
                let Ok(frame) = serde_json::from_str::<Value>(&text) else {
                    continue;
                };
                received.lock().unwrap().push(frame.clone());
                match frame["op"].as_u64() {
                    Some(1) => {
                        let _ = to_client.send(json!({"op": 11}));
                    }
                    Some(2)
                        if frame["d"]["token"]
                            .as_str()
                            .is_some_and(|t| t.contains("bad-token")) =>
                    {
                        let _ = to_client.send(json!({"close": 4004}));
                        break;
                    }
                    Some(2) => {
                        let ready = json!({
                            "v": 10, "user": {"id": BOT_ID, "username": "switchboard", "global_name": null,
                                "discriminator": "0", "avatar": null, "bot": true, "verified": true,
                                "mfa_enabled": false, "flags": 0},
                            "guilds": [{"id": GUILD, "unavailable": true}],
                            "session_id": "fake-session", "resume_gateway_url": url,
                            "shard": [0, 1], "application": {"id": APP_ID, "flags": 0},
                        });
                        let _ = to_client.send(json!({"op": 0, "t": "READY", "d": ready}));
                        *socket.lock().unwrap() = Some(to_client.clone());
                    }
                    _ => {}
                }
            }
        });
        let seq = shared.seq.clone();
        tokio::spawn(async move {
            while let Some(mut frame) = rx.recv().await {
                if let Some(code) = frame["close"].as_u64() {
                    use tokio_tungstenite::tungstenite::protocol::CloseFrame;
                    let close = CloseFrame {
                        code: (code as u16).into(),
                        reason: "closed by the fake".into(),
                    };
                    let _ = sink.send(Message::Close(Some(close))).await;
                    break;
                }
                if frame["op"] == 0 {
                    let mut s = seq.lock().unwrap();
                    *s += 1;
                    frame["s"] = json!(*s);
                } else {
                    frame["s"] = Value::Null;
                    frame["t"] = Value::Null;
                    if frame.get("d").is_none() {
                        frame["d"] = Value::Null;
                    }
                }
                if sink.send(Message::text(frame.to_string())).await.is_err() {
                    break;
                }
            }
        });
    }
}
