//! Durability of the inbox with the real binary: signed webhook events are
//! pushed, the daemon is killed with SIGKILL while a turn waits on the
//! model, and a restarted daemon processes every event exactly once, in
//! order per pull request, on SQLite and on PostgreSQL.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::PgTestDb;
use common::fake_llm::{FakeLlm, Reply, text};
use serde_json::{Value, json};
use switchboard::adapters::webhook::verify::github_signature;
use switchboard::config::StorageConfig;
use switchboard::store::Store;

const BIN: &str = env!("CARGO_BIN_EXE_switchboard");
const SECRET: &str = "crash-test-secret";
const EVENTS: usize = 12;
const PRS: usize = 3;
/// Model answers given before every session's next turn hangs on the model
/// and the daemon is killed. Fewer than the events of one PR, so that every
/// session still has a turn to hang on however the answers are spread.
const QUICK: usize = 2;

struct Daemon {
    child: Child,
    addr: String,
}

/// A failed assertion must not leave a daemon running.
impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn start(dir: &Path) -> Self {
        let mut child = Command::new(BIN)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("GITHUB_WEBHOOK_SECRET", SECRET)
            .current_dir(dir)
            .arg("run")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel::<Value>();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                // Keep draining after the test stops listening: a closed
                // pipe would fail the daemon's log writes.
                let v = serde_json::from_str(&line).unwrap_or_else(|_| json!({ "raw": line }));
                let _ = tx.send(v);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(v) = rx.recv_timeout(left) else {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the daemon did not start listening");
            };
            if v["message"] == "listening" {
                let addr = v["http.addr"].as_str().unwrap().to_string();
                return Self { child, addr };
            }
        }
    }

    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    fn stop(mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status:?}");
    }
}

fn write_config(dir: &Path, storage: &str, llm: &str) {
    let config = format!(
        r#"
[server]
listen = "127.0.0.1:0"
shutdown_grace_secs = 2
[storage]
url = "{storage}"
[log]
format = "json"
level = "info"
[llm]
base_url = "{llm}"
api_key_env = ""
max_retries = 0
[agent]
workspace = "{ws}"
[webhook]
enabled = true
[[webhook.routes]]
name = "github"
path = "/webhooks/github"
scheme = "github"
secret_env = "GITHUB_WEBHOOK_SECRET"
"#,
        ws = dir.join("ws").display()
    );
    std::fs::write(dir.join("gateway.toml"), config).unwrap();
}

fn event(i: usize) -> (String, Vec<u8>) {
    let pr = i % PRS + 1;
    let body = common::pr_push(pr, &format!("marker-{i:02}"));
    (format!("delivery-{i}"), body)
}

async fn post(client: &reqwest::Client, addr: &str, i: usize) -> u16 {
    let (delivery, body) = event(i);
    client
        .post(format!("http://{addr}/webhooks/github"))
        .header("x-github-event", "pull_request")
        .header("x-github-delivery", delivery)
        .header("x-hub-signature-256", github_signature(SECRET, &body))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// The marker of the newest user message of a model request.
fn marker(request: &Value) -> Option<usize> {
    let messages = request["messages"].as_array()?;
    let last = messages.iter().rev().find(|m| m["role"] == "user")?;
    let content = last["content"].as_str()?;
    let at = content.find("marker-")?;
    content[at + 7..at + 9].parse().ok()
}

async fn crash_and_recover(storage: StorageConfig) {
    let dir = tempfile::tempdir().unwrap();
    // The first QUICK turns answer at once; then each session's next turn
    // hangs on the model, so the kill lands mid-turn in every session; the
    // restarted daemon gets quick answers for the rest.
    let mut script: Vec<Reply> = (0..QUICK)
        .map(|i| Reply::Json(text(&format!("answer {i}"))))
        .collect();
    script.extend((0..PRS).map(|_| {
        Reply::Delayed(
            Duration::from_secs(60),
            Box::new(Reply::Json(text("never seen"))),
        )
    }));
    script.extend((0..EVENTS).map(|i| Reply::Json(text(&format!("after restart {i}")))));
    let llm = FakeLlm::start(script).await;
    write_config(dir.path(), &storage.url, &llm.url);
    let client = switchboard::http::client::client();

    let first = Daemon::start(dir.path());
    for i in 0..EVENTS {
        assert_eq!(post(&client, &first.addr, i).await, 202, "event {i}");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while llm.requests().len() < QUICK + PRS {
        assert!(Instant::now() < deadline, "turns did not start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.kill();

    let store = Store::open(&storage).await.unwrap();
    let pending_at_crash = store.inbox_pending(100).await.unwrap().len();
    assert!(
        pending_at_crash > 0 && pending_at_crash < EVENTS,
        "killed part-way: {pending_at_crash} of {EVENTS} left"
    );

    eprintln!("killed with {pending_at_crash} of {EVENTS} events unprocessed");
    let second = Daemon::start(dir.path());
    // The sender retries everything: all duplicates now.
    for i in 0..EVENTS {
        let status = post(&client, &second.addr, i).await;
        assert_eq!(status, 200, "redelivery of {i} acknowledged, not run");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !store.inbox_pending(100).await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "replay did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    second.stop();

    // Exactly once: one processed row per event, one delivery per event.
    let deliveries = store.deliveries(1000).await.unwrap();
    assert_eq!(deliveries.len(), EVENTS, "{deliveries:?}");
    assert!(deliveries.iter().all(|d| d.status == "delivered"));
    // Every event reached the model; only the turns in flight at the kill
    // (one per session) were asked twice.
    let requests = llm.requests();
    let mut seen: BTreeMap<usize, usize> = BTreeMap::new();
    let mut order: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for r in &requests {
        let m = marker(r).expect("every request names its event");
        *seen.entry(m).or_default() += 1;
        order.entry(m % PRS).or_default().push(m);
    }
    assert_eq!(seen.len(), EVENTS, "{seen:?}");
    let repeated: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert_eq!(repeated.len(), PRS, "in-flight turns repeat once: {seen:?}");
    assert!(repeated.iter().all(|(_, n)| **n == 2), "{seen:?}");
    // Per pull request, events ran in arrival order.
    for (pr, markers) in order {
        let mut dedup = markers.clone();
        dedup.dedup();
        let mut sorted = dedup.clone();
        sorted.sort();
        assert_eq!(dedup, sorted, "PR {pr} out of order: {markers:?}");
    }
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_survives_kill_9_with_every_event_processed_once() {
    let dir = tempfile::tempdir().unwrap();
    let storage = StorageConfig {
        url: format!("sqlite://{}/crash.db", dir.path().display()),
        ..StorageConfig::default()
    };
    crash_and_recover(storage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_survives_kill_9_with_every_event_processed_once() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    crash_and_recover(db.config.clone()).await;
    db.drop().await;
}
