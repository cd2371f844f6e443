//! The compliance scenarios against the fake Telegram Bot API: a forum
//! group, Ann asking, Bob allowed to talk but no approver.

use std::sync::atomic::{AtomicI64, Ordering};

use serde_json::{Value, json};
use switchboard::config::{Config, Env};

use super::{Person, Posted, Rig};
use crate::common::fake_llm::{FakeLlm, Reply};
use crate::common::fake_telegram::{BOT_USERNAME, FakeTelegram};
use crate::common::in_process::{InProcess, daemon_config};

const ANN: i64 = 1001;
const BOB: i64 = 1002;
const GROUP: i64 = -100_555;
const TOPIC: i64 = 7;

pub struct Telegram {
    tg: FakeTelegram,
    llm: FakeLlm,
    daemon: InProcess,
    config: Config,
    next_message: AtomicI64,
    _dir: tempfile::TempDir,
}

fn env() -> Env {
    Env::from_pairs([("TELEGRAM_BOT_TOKEN", "123:test-token")])
}

fn person(who: Person) -> (i64, &'static str) {
    match who {
        Person::Owner => (ANN, "Ann"),
        Person::Other => (BOB, "Bob"),
    }
}

impl Telegram {
    fn message(&self, who: Person, text: &str) -> Value {
        let (id, name) = person(who);
        let handle = format!("@{BOT_USERNAME}");
        let n = self.next_message.fetch_add(1, Ordering::SeqCst);
        let mut update = FakeTelegram::message(GROUP, id, name, n, &format!("{handle} {text}"));
        update["message"]["entities"] =
            json!([{"type": "mention", "offset": 0, "length": handle.len()}]);
        update
    }
}

impl Rig for Telegram {
    const LIMIT: usize = 4096;

    async fn start(script: Vec<Reply>) -> Self {
        let tg = FakeTelegram::start().await;
        let llm = FakeLlm::start(script).await;
        let dir = tempfile::tempdir().unwrap();
        let mut config = daemon_config(dir.path(), &llm.url);
        config.telegram.enabled = true;
        config.telegram.api_url = tg.url.clone();
        config.telegram.allowed_users = vec![ANN, BOB];
        let daemon = InProcess::start(config.clone(), env()).await;
        Self {
            tg,
            llm,
            daemon,
            config,
            next_message: AtomicI64::new(100),
            _dir: dir,
        }
    }

    fn llm(&self) -> &FakeLlm {
        &self.llm
    }

    fn store(&self) -> &switchboard::store::Store {
        &self.daemon.store
    }

    async fn say_in_thread(&self, who: Person, text: &str) -> String {
        let mut update = self.message(who, text);
        update["message"]["message_thread_id"] = json!(TOPIC);
        update["message"]["is_topic_message"] = json!(true);
        self.tg.push(update);
        TOPIC.to_string()
    }

    async fn say(&self, who: Person, text: &str) {
        self.tg.push(self.message(who, text));
    }

    fn posted(&self) -> Vec<Posted> {
        self.tg
            .calls("sendMessage")
            .into_iter()
            .filter(|c| c.id != 0)
            .map(|c| Posted {
                id: c.id.to_string(),
                text: c.body["text"].as_str().unwrap_or_default().to_string(),
                thread: c.body["message_thread_id"].as_i64().map(|t| t.to_string()),
                buttons: c.body["reply_markup"]["inline_keyboard"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|row| row.as_array().into_iter().flatten())
                    .filter_map(|b| b["callback_data"].as_str().map(str::to_string))
                    .collect(),
            })
            .collect()
    }

    async fn press(&self, who: Person, message: &Posted, data: &str) {
        let (id, name) = person(who);
        let mut shown = json!({
            "message_id": message.id.parse::<i64>().unwrap(), "date": 1_764_000_000,
            "chat": {"id": GROUP, "type": "supergroup", "title": "Team", "is_forum": true},
            "from": {"id": 999, "is_bot": true, "first_name": "Switchboard"},
            "text": message.text,
        });
        if let Some(thread) = &message.thread {
            shown["message_thread_id"] = json!(thread.parse::<i64>().unwrap());
            shown["is_topic_message"] = json!(true);
        }
        let mut press = FakeTelegram::press(id, name, &shown, data);
        // Every press is its own callback query.
        let n = self.next_message.fetch_add(1, Ordering::SeqCst);
        press["callback_query"]["id"] = json!(format!("cq-{n}"));
        self.tg.push(press);
    }

    fn notices(&self) -> Vec<String> {
        self.tg
            .calls("answerCallbackQuery")
            .iter()
            .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    fn edited(&self, id: &str) -> Option<String> {
        self.tg
            .calls("editMessageText")
            .iter()
            .rev()
            .find(|c| {
                c.body["message_id"]
                    .as_i64()
                    .map(|m| m.to_string())
                    .as_deref()
                    == Some(id)
            })
            .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
    }

    async fn restart(self) -> Self {
        let Self {
            tg,
            llm,
            daemon,
            config,
            next_message,
            _dir,
        } = self;
        daemon.shutdown().await;
        let daemon = InProcess::start(config.clone(), env()).await;
        Self {
            tg,
            llm,
            daemon,
            config,
            next_message,
            _dir,
        }
    }

    async fn stop(self) {
        self.daemon.shutdown().await;
    }
}

super::compliance!(Telegram);
