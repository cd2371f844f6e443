//! Time to the first visible words of an answer against time to the whole
//! answer, for a model that streams for about ten seconds: the daemon in
//! this process, the integration tests' fake model streaming 200 chunks
//! 50 ms apart, and their fake Telegram Bot API, Slack Web API and Discord
//! (REST and gateway websocket), which note when each message is sent or
//! edited. Each platform runs twice in the same run: with `stream` on, and
//! with it off (the baseline: the answer arrives whole at the end).
//!
//! Run: `cargo bench --bench live_reply` (CHUNKS=N, GAP_MS=N to change
//! the stream).

#[path = "../tests/it/common/mod.rs"]
mod common;
mod support;

use std::time::{Duration, Instant};

use common::fake_discord::{FakeDiscord, message, user};
use common::fake_llm::{FakeLlm, Reply, text_stream};
use common::fake_slack::FakeSlack;
use common::fake_telegram::FakeTelegram;
use common::in_process::{InProcess, daemon_config};
use serde_json::json;
use switchboard::config::{Config, Env, SlackMode};

const SECRET: &str = "bench-signing-secret";

/// The stream: its words and the gap between chunks.
struct Stream {
    whole: String,
    chunks: usize,
    gap: Duration,
}

impl Stream {
    /// A model that streams the answer once.
    async fn model(&self) -> FakeLlm {
        let size = self.whole.len().div_ceil(self.chunks);
        FakeLlm::start(vec![Reply::SlowSse(
            text_stream(&self.whole, size),
            self.gap,
        )])
        .await
    }
}

/// Each message write a platform saw: when, and the text it carried.
type Writes = Vec<(Instant, String)>;

/// From `asked`: the first write, and the first showing the whole answer.
fn times(asked: Instant, mut writes: Writes, whole: &str) -> Option<(Duration, Duration)> {
    writes.sort_by_key(|(at, _)| *at);
    let first = writes.first()?.0;
    let full = writes.iter().find(|(_, t)| t.trim() == whole.trim())?.0;
    Some((first - asked, full - asked))
}

/// Waits for the whole answer among `writes()`, then stops the daemon.
async fn measured(
    daemon: InProcess,
    asked: Instant,
    whole: &str,
    writes: impl Fn() -> Writes,
) -> (Duration, Duration) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let found = loop {
        if let Some(found) = times(asked, writes(), whole) {
            break found;
        }
        assert!(Instant::now() < deadline, "the answer never arrived");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    daemon.shutdown().await;
    found
}

fn config(dir: &std::path::Path, llm: &FakeLlm, stream: bool) -> Config {
    let mut config = daemon_config(dir, &llm.url);
    config.server.shutdown_grace_secs = 1;
    config.llm.stream = true;
    config.chat.stream = stream;
    config
}

async fn telegram(s: &Stream, stream: bool) -> (Duration, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let (llm, tg) = (s.model().await, FakeTelegram::start().await);
    let mut config = config(dir.path(), &llm, stream);
    config.telegram.enabled = true;
    config.telegram.api_url = tg.url.clone();
    config.telegram.allowed_users = vec![4242];
    let env = Env::from_pairs([("TELEGRAM_BOT_TOKEN", "1:bench")]);
    let daemon = InProcess::start(config, env).await;
    common::ready(&daemon.gateway, "telegram").await;
    let asked = Instant::now();
    tg.push(FakeTelegram::message(4242, 4242, "Ann", 10, "count"));
    measured(daemon, asked, &s.whole, || {
        let sent = tg.calls("sendMessage").into_iter();
        sent.chain(tg.calls("editMessageText"))
            .map(|c| (c.at, c.body["text"].as_str().unwrap_or_default().into()))
            .collect()
    })
    .await
}

async fn slack(s: &Stream, stream: bool) -> (Duration, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let (llm, slack) = (s.model().await, FakeSlack::start().await);
    let mut config = config(dir.path(), &llm, stream);
    config.slack.enabled = true;
    config.slack.mode = SlackMode::Events;
    config.slack.api_url = slack.url.clone();
    let env = Env::from_pairs([
        ("SLACK_BOT_TOKEN", "xoxb-bench"),
        ("SLACK_SIGNING_SECRET", SECRET),
    ]);
    let daemon = InProcess::start(config, env).await;
    common::ready(&daemon.gateway, "slack").await;
    let body = serde_json::to_vec(&json!({"token": "t", "team_id": "T1",
        "api_app_id": "A1", "type": "event_callback", "event_id": "Ev1",
        "event_time": 1_764_000_000, "event": {"type": "message", "channel_type": "im",
        "user": "U1", "channel": "D1", "ts": "1764000000.000100", "text": "count",
        "event_ts": "1764000000.000100"}}))
    .unwrap();
    let ts = switchboard::store::now_ms() / 1000;
    let signature = switchboard::adapters::slack::verify::sign(SECRET, ts, &body);
    let asked = Instant::now();
    let sent = switchboard::http::client::client()
        .post(format!("{}/slack/events", daemon.base))
        .header("content-type", "application/json")
        .header("x-slack-request-timestamp", ts.to_string())
        .header("x-slack-signature", signature)
        .body(body)
        .send()
        .await
        .unwrap();
    assert!(sent.status().is_success(), "{}", sent.status());
    measured(daemon, asked, &s.whole, || {
        let posted = slack.calls("chat.postMessage").into_iter();
        posted
            .chain(slack.calls("chat.update"))
            .map(|c| (c.at, c.body["text"].as_str().unwrap_or_default().into()))
            .collect()
    })
    .await
}

async fn discord(s: &Stream, stream: bool) -> (Duration, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let (llm, dc) = (s.model().await, FakeDiscord::start().await);
    let mut config = config(dir.path(), &llm, stream);
    config.discord.enabled = true;
    config.discord.api_url = dc.url.clone();
    config.discord.allowed_users = vec!["42".into()];
    let env = Env::from_pairs([("DISCORD_BOT_TOKEN", "bench-token")]);
    let daemon = InProcess::start(config, env).await;
    dc.ready().await;
    common::ready(&daemon.gateway, "discord").await;
    let asked = Instant::now();
    let ann = user("42", "ann", false);
    dc.dispatch(
        "MESSAGE_CREATE",
        message("1200", "250", ann, "count", false),
    )
    .await;
    measured(daemon, asked, &s.whole, || {
        let posted = dc.calls("POST", "/messages").into_iter();
        posted
            .chain(dc.calls("PATCH", "/messages/"))
            .map(|c| (c.at, c.body["content"].as_str().unwrap_or_default().into()))
            .collect()
    })
    .await
}

fn main() {
    let chunks = support::env_usize("CHUNKS", 200);
    let gap = Duration::from_millis(support::env_usize("GAP_MS", 50) as u64);
    let s = Stream {
        whole: (0..chunks).map(|i| format!("w{i} ")).collect(),
        chunks,
        gap,
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let sent = text_stream(&s.whole, s.whole.len().div_ceil(chunks)).len();
    runtime.block_on(async {
        println!(
            "live_reply: a {}-character answer in {sent} chunks {} ms apart ({:.1} s)",
            s.whole.len(),
            gap.as_millis(),
            (gap * sent as u32).as_secs_f64()
        );
        for (name, on, off) in [
            ("telegram", telegram(&s, true).await, telegram(&s, false).await),
            ("slack", slack(&s, true).await, slack(&s, false).await),
            ("discord", discord(&s, true).await, discord(&s, false).await),
        ] {
            println!(
                "{name:>9}: streamed: first words {:>6.2} s, whole answer {:>6.2} s | sent whole: {:>6.2} s | first words {:.0}x sooner, whole answer {:.2}x the time",
                on.0.as_secs_f64(),
                on.1.as_secs_f64(),
                off.1.as_secs_f64(),
                off.1.as_secs_f64() / on.0.as_secs_f64().max(1e-3),
                on.1.as_secs_f64() / off.1.as_secs_f64().max(1e-3),
            );
        }
    });
}
