//! A fake Telegram Bot API: `POST /bot<token>/<method>` with JSON bodies and
//! `{"ok": …}` envelopes as api.telegram.org answers them, file downloads
//! under `/file/bot<token>/<path>`, a queue of updates for getUpdates, and
//! scripted failures (5xx, 429 with `retry_after`, "can't parse entities").

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::outage::{Answer, Outage};

pub const BOT_ID: i64 = 999;
pub const BOT_USERNAME: &str = "switchboard_bot";

/// One recorded call.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub body: Value,
    pub at: Instant,
    /// The id the fake gave a message it sent (0 for other calls).
    pub id: i64,
}

#[derive(Default)]
struct Inner {
    updates: Vec<Value>,
    calls: Vec<Call>,
    poll_failures: VecDeque<(u16, Value)>,
    /// Until then, sendMessage fails with these answers in turn.
    send_outage: Outage,
    reject_entities: usize,
    next_message: i64,
    /// Incremented by every getUpdates: a poll still waiting when another
    /// starts is ended with Telegram's 409 Conflict.
    poll_generation: u64,
    /// How many polls were ended so (two pollers on one bot).
    conflicts: usize,
    /// What each message the bot sent shows now, by chat and id (deleted
    /// ones gone).
    shown: std::collections::BTreeMap<(i64, i64), String>,
    /// Answers for the next editMessageText calls.
    edit_failures: VecDeque<Answer>,
    /// Files getFile knows beside the default photo: id → (path, bytes).
    files: std::collections::HashMap<String, (String, Vec<u8>)>,
    /// Paths downloaded, in order.
    downloads: Vec<String>,
    /// Chats the bot was removed from: sendMessage there is forbidden.
    kicked: std::collections::BTreeSet<i64>,
    /// sendMessageDraft is refused, as for a bot without the feature.
    no_drafts: bool,
}

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Inner>>);

/// A running fake (a clone is another handle on it).
#[derive(Clone)]
pub struct FakeTelegram {
    /// Base URL, used as `telegram.api_url`.
    pub url: String,
    shared: Shared,
}

fn user(id: i64, name: &str) -> Value {
    json!({"id": id, "is_bot": false, "first_name": name})
}

fn chat(id: i64) -> Value {
    if id < 0 {
        json!({"id": id, "type": "supergroup", "title": "Team", "is_forum": true})
    } else {
        json!({"id": id, "type": "private", "first_name": "Ann"})
    }
}

impl FakeTelegram {
    pub async fn start() -> Self {
        let shared = Shared::default();
        shared.0.lock().unwrap().next_message = 500;
        let app = Router::new()
            .route("/{bot}/{method}", post(method))
            .route("/file/{bot}/{*path}", get(file))
            .with_state(shared.clone());
        let addr = super::serve(app).await;
        Self {
            url: format!("http://{addr}"),
            shared,
        }
    }

    /// Queues an update (the next update_id).
    pub fn push(&self, update: Value) -> i64 {
        let mut inner = self.shared.0.lock().unwrap();
        let id = 1 + inner.updates.len() as i64;
        let mut update = update;
        update["update_id"] = json!(id);
        inner.updates.push(update);
        id
    }

    /// A text message update.
    pub fn message(chat_id: i64, from: i64, name: &str, message_id: i64, text: &str) -> Value {
        json!({"message": {
            "message_id": message_id, "date": 1_764_000_000,
            "chat": chat(chat_id), "from": user(from, name), "text": text,
        }})
    }

    /// An edited_message update: message `message_id` now says `text`.
    pub fn edited(chat_id: i64, from: i64, name: &str, message_id: i64, text: &str) -> Value {
        json!({"edited_message": {
            "message_id": message_id, "date": 1_764_000_000, "edit_date": 1_764_000_100,
            "chat": chat(chat_id), "from": user(from, name), "text": text,
        }})
    }

    /// A button press on `message` (a message the bot sent).
    pub fn press(from: i64, name: &str, message: &Value, data: &str) -> Value {
        json!({"callback_query": {
            "id": format!("cq-{from}-{data}"), "from": user(from, name),
            "chat_instance": "42", "data": data, "message": message,
        }})
    }

    /// Makes the next getUpdates calls fail with these answers.
    pub fn fail_polls(&self, failures: Vec<(u16, Value)>) {
        self.shared.0.lock().unwrap().poll_failures.extend(failures);
    }

    /// Fails every sendMessage for `how_long`, with `answers` in turn.
    pub fn fail_sends_for(&self, how_long: Duration, answers: Vec<Answer>) {
        self.shared
            .0
            .lock()
            .unwrap()
            .send_outage
            .start(how_long, answers);
    }

    /// The texts of every message sent, in order.
    pub fn texts(&self) -> Vec<String> {
        self.calls("sendMessage")
            .iter()
            .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Removes the bot from `chat`: sending there is answered 403, as
    /// Telegram does.
    pub fn kick(&self, chat: i64) {
        self.shared.0.lock().unwrap().kicked.insert(chat);
    }

    /// Lets the bot back into `chat`.
    pub fn readmit(&self, chat: i64) {
        self.shared.0.lock().unwrap().kicked.remove(&chat);
    }

    /// Refuses the next `n` messages that carry entities, as Telegram does
    /// when it cannot parse them.
    pub fn reject_entities(&self, n: usize) {
        self.shared.0.lock().unwrap().reject_entities = n;
    }

    /// Refuses sendMessageDraft from now on, as Telegram does for a bot
    /// that cannot stream drafts.
    pub fn refuse_drafts(&self) {
        self.shared.0.lock().unwrap().no_drafts = true;
    }

    /// The texts the drafts of `chat` previewed, in order.
    pub fn previews(&self, chat: i64) -> Vec<String> {
        self.calls("sendMessageDraft")
            .iter()
            .filter(|c| c.body["chat_id"].as_i64() == Some(chat))
            .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Answers the next editMessageText calls with these, in turn.
    pub fn fail_edits(&self, answers: Vec<Answer>) {
        self.shared.0.lock().unwrap().edit_failures.extend(answers);
    }

    /// The bot's messages `chat` shows now (sent, not deleted), oldest
    /// first, with their text.
    pub fn shown(&self, chat: i64) -> Vec<(i64, String)> {
        let inner = self.shared.0.lock().unwrap();
        inner
            .shown
            .iter()
            .filter(|((c, _), _)| *c == chat)
            .map(|((_, id), text)| (*id, text.clone()))
            .collect()
    }

    /// Serves `bytes` as file `file_id` (getFile gives its `path`).
    pub fn file(&self, file_id: &str, path: &str, bytes: &[u8]) {
        self.shared
            .0
            .lock()
            .unwrap()
            .files
            .insert(file_id.into(), (path.into(), bytes.to_vec()));
    }

    /// The file paths downloaded so far.
    pub fn downloads(&self) -> Vec<String> {
        self.shared.0.lock().unwrap().downloads.clone()
    }

    /// A voice note from `from` in their private chat.
    pub fn voice(from: i64, message_id: i64, file_id: &str, seconds: u32, size: usize) -> Value {
        json!({"message": {
            "message_id": message_id, "date": 1_764_000_000,
            "chat": chat(from), "from": user(from, "Ann"),
            "voice": {"file_id": file_id, "file_unique_id": format!("AgAD{file_id}"),
                      "duration": seconds, "mime_type": "audio/ogg", "file_size": size},
        }})
    }

    /// How many getUpdates were ended by another one starting (Telegram's
    /// "409 Conflict: terminated by other getUpdates request").
    pub fn conflicts(&self) -> usize {
        self.shared.0.lock().unwrap().conflicts
    }

    pub fn calls(&self, method: &str) -> Vec<Call> {
        self.shared
            .0
            .lock()
            .unwrap()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    /// Waits until `n` calls of `method` arrived.
    pub async fn wait(&self, method: &str, n: usize) -> Vec<Call> {
        for _ in 0..600 {
            let calls = self.calls(method);
            if calls.len() >= n {
                return calls;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("expected {n} {method} calls, saw {:?}", self.calls(method));
    }
}

fn ok(result: Value) -> Response {
    Json(json!({"ok": true, "result": result})).into_response()
}

/// A 400 with Telegram's description.
fn bad_request(why: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"ok": false, "error_code": 400,
            "description": format!("Bad Request: {why}")})),
    )
        .into_response()
}

/// Telegram's answer to entities it cannot use.
fn cant_parse(why: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"ok": false, "error_code": 400,
            "description": format!("Bad Request: can't parse entities: {why}")})),
    )
        .into_response()
}

/// What Telegram would refuse in a message's entities: an unknown type, an
/// empty one, one that runs past the text (in UTF-16 units), a text link
/// without a URL, or `parse_mode` and entities together.
fn entity_problem(body: &Value) -> Option<String> {
    let entities = body.get("entities")?.as_array()?;
    if body.get("parse_mode").is_some() {
        return Some("parse_mode and entities together".into());
    }
    let units = body["text"]
        .as_str()
        .unwrap_or_default()
        .encode_utf16()
        .count();
    const KINDS: &[&str] = &[
        "bold",
        "italic",
        "underline",
        "strikethrough",
        "spoiler",
        "code",
        "pre",
        "text_link",
        "blockquote",
        "expandable_blockquote",
    ];
    for e in entities {
        let kind = e["type"].as_str().unwrap_or_default();
        let (offset, length) = (e["offset"].as_u64()?, e["length"].as_u64()?);
        if !KINDS.contains(&kind) {
            return Some(format!("unsupported entity type {kind}"));
        }
        if length == 0 || (offset + length) as usize > units {
            return Some(format!(
                "entity {kind} at {offset}+{length} outside {units} units"
            ));
        }
        if kind == "text_link" && e["url"].as_str().is_none_or(str::is_empty) {
            return Some("text_link without url".into());
        }
    }
    None
}

fn sent_message(inner: &mut Inner, body: &Value) -> Value {
    inner.next_message += 1;
    let chat_id = body["chat_id"].as_i64().unwrap_or_default();
    let mut msg = json!({
        "message_id": inner.next_message, "date": 1_764_000_000,
        "chat": chat(chat_id),
        "from": {"id": BOT_ID, "is_bot": true, "first_name": "Switchboard", "username": BOT_USERNAME},
        "text": body["text"],
    });
    if let Some(markup) = body.get("reply_markup") {
        msg["reply_markup"] = markup.clone();
    }
    msg
}

/// The parameters of a call, sent as JSON or (setWebhook, uploads) as
/// multipart/form-data, as one JSON object.
async fn params(request: axum::extract::Request) -> Value {
    use axum::extract::FromRequest;
    let multipart = request
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"));
    if !multipart {
        let bytes = axum::body::to_bytes(request.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        return serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    }
    let mut form = axum::extract::Multipart::from_request(request, &())
        .await
        .unwrap();
    let mut out = serde_json::Map::new();
    while let Some(field) = form.next_field().await.unwrap() {
        let name = field.name().unwrap_or_default().to_string();
        let text = field.text().await.unwrap_or_default();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        out.insert(name, value);
    }
    Value::Object(out)
}

async fn method(
    State(shared): State<Shared>,
    Path((bot, method)): Path<(String, String)>,
    request: axum::extract::Request,
) -> Response {
    assert!(bot.starts_with("bot"), "token path {bot}");
    let body = params(request).await;
    // Bot API method names are case-insensitive (teloxide sends `GetMe`);
    // calls are recorded under the documented spelling.
    let method = [
        "getMe",
        "getUpdates",
        "sendMessage",
        "sendMessageDraft",
        "editMessageText",
        "deleteMessage",
        "getFile",
        "answerCallbackQuery",
        "sendChatAction",
        "setMyCommands",
        "setWebhook",
        "deleteWebhook",
    ]
    .into_iter()
    .find(|m| m.eq_ignore_ascii_case(&method))
    .map_or(method, str::to_string);
    if method == "getUpdates" {
        return get_updates(shared, body).await;
    }
    let mut inner = shared.0.lock().unwrap();
    inner.calls.push(Call {
        method: method.clone(),
        body: body.clone(),
        at: Instant::now(),
        id: 0,
    });
    match method.as_str() {
        "getMe" => ok(json!({
            "id": BOT_ID, "is_bot": true, "first_name": "Switchboard", "username": BOT_USERNAME,
            "can_join_groups": true, "can_read_all_group_messages": false,
            "supports_inline_queries": false, "can_connect_to_business": false,
            "has_main_web_app": false,
        })),
        "sendMessageDraft" => {
            let chat = body["chat_id"].as_i64().unwrap_or(0);
            if inner.no_drafts {
                return bad_request(
                    "method is available only for bots with forum topic mode enabled",
                );
            }
            if chat < 0 || body["draft_id"].as_i64().unwrap_or(0) == 0 {
                return bad_request("chat not found");
            }
            ok(json!(true))
        }
        "sendMessage" => {
            if let Some(failure) = inner.send_outage.answer() {
                return failure;
            }
            if inner
                .kicked
                .contains(&body["chat_id"].as_i64().unwrap_or_default())
            {
                return (
                    axum::http::StatusCode::FORBIDDEN,
                    axum::Json(json!({"ok": false, "error_code": 403,
                        "description": "Forbidden: bot was kicked from the group chat"})),
                )
                    .into_response();
            }
            let scripted = body.get("entities").is_some() && inner.reject_entities > 0;
            if scripted {
                inner.reject_entities -= 1;
            }
            if let Some(why) = entity_problem(&body).or(scripted.then(|| "scripted".into())) {
                return cant_parse(&why);
            }
            let msg = sent_message(&mut inner, &body);
            let id = msg["message_id"].as_i64().unwrap_or_default();
            if let Some(call) = inner.calls.last_mut() {
                call.id = id;
            }
            let chat = body["chat_id"].as_i64().unwrap_or_default();
            let text = body["text"].as_str().unwrap_or_default().to_string();
            inner.shown.insert((chat, id), text);
            ok(msg)
        }
        "editMessageText" => {
            if let Some(failure) = inner.edit_failures.pop_front() {
                return failure.response();
            }
            if let Some(why) = entity_problem(&body) {
                return cant_parse(&why);
            }
            let key = (
                body["chat_id"].as_i64().unwrap_or_default(),
                body["message_id"].as_i64().unwrap_or_default(),
            );
            let text = body["text"].as_str().unwrap_or_default().to_string();
            match inner.shown.get(&key) {
                None => return bad_request("message to edit not found"),
                Some(now) if *now == text && body.get("reply_markup").is_none() => {
                    return bad_request(
                        "message is not modified: specified new message content and reply \
                         markup are exactly the same as a current content and reply markup of \
                         the message",
                    );
                }
                Some(_) => {}
            }
            inner.shown.insert(key, text);
            let mut msg = sent_message(&mut inner, &body);
            inner.next_message -= 1;
            msg["message_id"] = body["message_id"].clone();
            ok(msg)
        }
        "deleteMessage" => {
            let key = (
                body["chat_id"].as_i64().unwrap_or_default(),
                body["message_id"].as_i64().unwrap_or_default(),
            );
            match inner.shown.remove(&key) {
                Some(_) => ok(json!(true)),
                None => bad_request("message to delete not found"),
            }
        }
        "getFile" => {
            let id = body["file_id"].as_str().unwrap_or_default();
            let (path, size) = inner
                .files
                .get(id)
                .map_or(("photos/file_1.jpg".to_string(), 4), |(path, bytes)| {
                    (path.clone(), bytes.len())
                });
            ok(json!({
                "file_id": id, "file_unique_id": format!("AgAD{id}"), "file_size": size,
                "file_path": path,
            }))
        }
        _ => ok(json!(true)),
    }
}

async fn get_updates(shared: Shared, body: Value) -> Response {
    let offset = body["offset"].as_i64().unwrap_or(0);
    let mine = {
        let mut inner = shared.0.lock().unwrap();
        inner.calls.push(Call {
            method: "getUpdates".into(),
            body: body.clone(),
            at: Instant::now(),
            id: 0,
        });
        if let Some((status, answer)) = inner.poll_failures.pop_front() {
            return (StatusCode::from_u16(status).unwrap(), Json(answer)).into_response();
        }
        inner.poll_generation += 1;
        inner.poll_generation
    };
    // A short long-poll: answer as soon as something is queued.
    for _ in 0..10 {
        let pending: Result<Vec<Value>, ()> = {
            let mut inner = shared.0.lock().unwrap();
            if inner.poll_generation == mine {
                Ok(inner
                    .updates
                    .iter()
                    .filter(|u| u["update_id"].as_i64().unwrap_or(0) >= offset)
                    .cloned()
                    .collect())
            } else {
                inner.conflicts += 1;
                Err(())
            }
        };
        match pending {
            Err(()) => {
                return (
                    StatusCode::CONFLICT,
                    Json(json!({"ok": false, "error_code": 409,
                        "description": "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"})),
                )
                    .into_response();
            }
            Ok(pending) if !pending.is_empty() => return ok(Value::Array(pending)),
            Ok(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ok(json!([]))
}

async fn file(
    State(shared): State<Shared>,
    Path((_bot, path)): Path<(String, String)>,
) -> Response {
    let mut inner = shared.0.lock().unwrap();
    inner.downloads.push(path.clone());
    if let Some((_, bytes)) = inner.files.values().find(|(p, _)| *p == path) {
        return (StatusCode::OK, bytes.clone()).into_response();
    }
    if path == "photos/file_1.jpg" {
        return (StatusCode::OK, vec![0xff, 0xd8, 0xff, 0xd9]).into_response();
    }
    (
        StatusCode::NOT_FOUND,
        Json(json!({"ok": false, "error_code": 404, "description": "Not Found"})),
    )
        .into_response()
}
