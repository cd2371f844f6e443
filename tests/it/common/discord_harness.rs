//! The Discord test harness: the real daemon in-process with the Discord
//! adapter pointed at [`FakeDiscord`], a scripted model, and the people and
//! channels the Discord suites talk about.

use serde_json::{Value, json};
use switchboard::config::{Config, Env};

use super::fake_discord::{self, BOT_ID, FakeDiscord, message, user};
use super::fake_llm::{FakeLlm, Reply, calls, text};
use super::in_process::{InProcess, daemon_config};

pub const ANN: &str = "42";
pub const BOB: &str = "43";
pub const EVE: &str = "66";
pub const CHANNEL: &str = "200";
pub const DM: &str = "250";

pub struct Setup {
    pub dc: FakeDiscord,
    pub llm: FakeLlm,
    pub daemon: InProcess,
    pub _dir: tempfile::TempDir,
}

pub async fn start(script: Vec<Reply>, tweak: impl FnOnce(&mut Config)) -> Setup {
    let dc = FakeDiscord::start().await;
    let llm = FakeLlm::start(script).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = daemon_config(dir.path(), &llm.url);
    config.discord.enabled = true;
    config.discord.api_url = dc.url.clone();
    config.discord.allowed_users = vec![ANN.into()];
    config.discord.allowed_roles = vec!["77".into()];
    tweak(&mut config);
    let env = Env::from_pairs([("DISCORD_BOT_TOKEN", "test-token")]);
    let daemon = InProcess::start(config, env).await;
    dc.ready().await;
    // READY reaches the adapter just after the fake sent it.
    super::ready(&daemon.gateway, "discord").await;
    Setup {
        dc,
        llm,
        daemon,
        _dir: dir,
    }
}

pub fn ann() -> Value {
    user(ANN, "ann", false)
}

pub fn mention(id: &str, channel: &str, author: Value, words: &str) -> Value {
    message(id, channel, author, &format!("<@{BOT_ID}> {words}"), true)
}

pub fn content(call: &fake_discord::Call) -> String {
    call.body["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A setup whose model first asks to run `command`, then says `after`.
pub async fn asking_for(command: &str, after: &str) -> Setup {
    let args = json!({ "command": command }).to_string();
    start(
        vec![
            Reply::Json(calls(&[("c1", "terminal", &args)])),
            Reply::Json(text(after)),
        ],
        |_| {},
    )
    .await
}

/// Sends `msg` and waits for the approval prompt it leads to: the data of
/// its first button ("Allow once") and the prompt as a message object.
pub async fn prompt_for(s: &Setup, msg: Value) -> (String, Value) {
    let channel = msg["channel_id"].as_str().unwrap().to_string();
    let guild = msg.get("guild_id").is_some();
    s.dc.dispatch("MESSAGE_CREATE", msg).await;
    let posted = s.dc.wait_posted(1).await;
    let once = posted[0].body["components"][0]["components"][0]["custom_id"]
        .as_str()
        .unwrap()
        .to_string();
    let bot = user(BOT_ID, "switchboard", true);
    let mut prompt = message(&posted[0].id, &channel, bot, &content(&posted[0]), guild);
    prompt["components"] = posted[0].body["components"].clone();
    (once, prompt)
}
