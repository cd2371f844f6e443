//! The compliance scenarios against the fake Discord REST API and
//! gateway: a guild channel with a thread, Ann allowed by id, Bob by role.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use switchboard::config::{Config, Env};

use super::{Person, Posted, Rig};
use crate::common::discord_harness::{self, ANN, BOB, CHANNEL, content, mention};
use crate::common::fake_discord::{BOT_ID, FakeDiscord, message, press, user};
use crate::common::fake_llm::{FakeLlm, Reply};
use crate::common::in_process::InProcess;

const THREAD: &str = "555";

pub struct Discord {
    dc: FakeDiscord,
    llm: FakeLlm,
    daemon: InProcess,
    config: Config,
    next: AtomicU64,
    _dir: tempfile::TempDir,
}

fn person(who: Person) -> (Value, &'static [&'static str]) {
    match who {
        Person::Owner => (user(ANN, "ann", false), &[]),
        Person::Other => (user(BOB, "bob", false), &["77"]),
    }
}

impl Discord {
    fn id(&self) -> String {
        (1000 + self.next.fetch_add(1, Ordering::SeqCst)).to_string()
    }

    async fn say_in(&self, who: Person, channel: &str, text: &str) {
        let (author, roles) = person(who);
        let mut msg = mention(&self.id(), channel, author, text);
        msg["member"]["roles"] = json!(roles);
        self.dc.dispatch("MESSAGE_CREATE", msg).await;
    }

    async fn ready(&self) {
        crate::common::ready(&self.daemon.gateway, "discord").await;
    }
}

impl Rig for Discord {
    const LIMIT: usize = 2000;

    async fn start(script: Vec<Reply>) -> Self {
        let s = discord_harness::start(script, |_| {}).await;
        s.dc.thread(THREAD, CHANNEL);
        Self {
            config: s.daemon.gateway.config.as_ref().clone(),
            dc: s.dc,
            llm: s.llm,
            daemon: s.daemon,
            next: AtomicU64::new(1),
            _dir: s._dir,
        }
    }

    fn llm(&self) -> &FakeLlm {
        &self.llm
    }

    fn store(&self) -> &switchboard::store::Store {
        &self.daemon.store
    }

    async fn say_in_thread(&self, who: Person, text: &str) -> String {
        self.say_in(who, THREAD, text).await;
        THREAD.to_string()
    }

    async fn say(&self, who: Person, text: &str) {
        self.say_in(who, CHANNEL, text).await;
    }

    fn posted(&self) -> Vec<Posted> {
        self.dc
            .posted()
            .iter()
            .map(|c| Posted {
                id: c.id.clone(),
                text: content(c),
                thread: c
                    .path
                    .trim_end_matches("/messages")
                    .rsplit('/')
                    .next()
                    .map(str::to_string),
                buttons: c.body["components"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|row| row["components"].as_array().into_iter().flatten())
                    .filter_map(|b| b["custom_id"].as_str().map(str::to_string))
                    .collect(),
            })
            .collect()
    }

    async fn press(&self, who: Person, shown: &Posted, data: &str) {
        let channel = shown.thread.clone().unwrap_or_else(|| CHANNEL.into());
        let bot = user(BOT_ID, "switchboard", true);
        let mut prompt = message(&shown.id, &channel, bot, &shown.text, true);
        prompt["components"] = json!([{"type": 1, "components":
            shown.buttons.iter().map(|b| json!({"type": 2, "style": 2, "label": "x", "custom_id": b})).collect::<Vec<_>>()}]);
        let (presser, roles) = person(who);
        let id = self.id();
        self.dc
            .dispatch(
                "INTERACTION_CREATE",
                press(&id, presser, roles, &prompt, data),
            )
            .await;
    }

    fn notices(&self) -> Vec<String> {
        self.dc
            .calls("POST", "/interactions/")
            .iter()
            .filter(|c| c.body["type"] == 4)
            .map(|c| {
                c.body["data"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }

    fn edited(&self, id: &str) -> Option<String> {
        self.dc
            .calls("PATCH", "/messages/")
            .iter()
            .rev()
            .find(|c| c.path.ends_with(&format!("/messages/{id}")))
            .map(content)
    }

    async fn restart(self) -> Self {
        let Self {
            dc,
            llm,
            daemon,
            config,
            next,
            _dir,
        } = self;
        daemon.shutdown().await;
        let env = Env::from_pairs([("DISCORD_BOT_TOKEN", "test-token")]);
        let daemon = InProcess::start(config.clone(), env).await;
        let rig = Self {
            dc,
            llm,
            daemon,
            config,
            next,
            _dir,
        };
        rig.ready().await;
        rig
    }

    async fn stop(self) {
        self.daemon.shutdown().await;
    }
}

super::compliance!(Discord);
