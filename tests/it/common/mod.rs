//! Helpers shared by the integration tests: throwaway SQLite files and
//! PostgreSQL schemas.
#![allow(dead_code)]

pub mod agent_harness;
pub mod browser;
pub mod cut_proxy;
pub mod discord_harness;
pub mod fake_discord;
pub mod fake_forge;
pub mod fake_github;
pub mod fake_gitlab;
pub mod fake_llm;
pub mod fake_port;
pub mod fake_slack;
pub mod fake_telegram;
pub mod fake_transcriber;
pub mod faults;
pub mod files;
pub mod in_process;
pub mod outage;

use switchboard::config::StorageConfig;
use switchboard::store::Store;

/// The PostgreSQL server the tests use (`TEST_DATABASE_URL` overrides).
pub fn postgres_url() -> String {
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A GitHub `pull_request` `synchronize` delivery for PR `pr` whose title
/// carries `title` (tests find their events by it in model requests).
pub fn pr_push(pr: usize, title: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "action": "synchronize",
        "number": pr,
        "pull_request": {
            "number": pr,
            "title": title,
            "body": "push",
            "draft": false,
            "user": {"login": "octocat"},
            "html_url": format!("https://github.com/octo-org/hello-world/pull/{pr}"),
            "head": {"ref": "topic", "sha": "6dcb09b5b57875f334f61aebed695e2e4193db5e"},
            "base": {"ref": "main"},
        },
        "repository": {"full_name": "octo-org/hello-world"},
        "sender": {"login": "octocat", "type": "User"},
    }))
    .unwrap()
}

/// The marker of the newest user message of a model request.
pub fn marker(request: &serde_json::Value) -> Option<usize> {
    let messages = request["messages"].as_array()?;
    let last = messages.iter().rev().find(|m| m["role"] == "user")?;
    marker_in(last["content"].as_str()?)
}

/// The number after the first `marker-` in `text`.
pub fn marker_in(text: &str) -> Option<usize> {
    let at = text.find("marker-")? + "marker-".len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Each event's first time in `seen` (marker → times), for the markers
/// below `below` taken per pull request as `marker % prs`, comes in marker
/// order: per PR, arrival order.
pub fn assert_in_order(
    what: &str,
    seen: &std::collections::BTreeMap<usize, Vec<std::time::Instant>>,
    prs: usize,
    below: usize,
) {
    for pr in 0..prs {
        let mut firsts: Vec<(std::time::Instant, usize)> = seen
            .iter()
            .filter(|(m, _)| **m < below && *m % prs == pr)
            .map(|(m, at)| (at[0], *m))
            .collect();
        firsts.sort();
        let order: Vec<usize> = firsts.iter().map(|(_, m)| *m).collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted, "PR {pr} {what} out of order");
    }
}

/// A migrated store on a fresh SQLite file; keep the dir alive.
pub async fn sqlite_store() -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig {
        url: format!("sqlite://{}", dir.path().join("test.db").display()),
        ..StorageConfig::default()
    };
    let store = Store::open(&config).await.unwrap();
    (store, dir)
}

/// A PostgreSQL schema of its own for one test, dropped by [`PgTestDb::drop`].
pub struct PgTestDb {
    /// Storage config whose URL selects the schema.
    pub config: StorageConfig,
    schema: String,
    admin: sqlx::PgPool,
}

impl PgTestDb {
    /// Creates an empty schema, or returns `None` (with the reason printed)
    /// when PostgreSQL is unreachable on a developer machine. Under
    /// `CI=true` an unreachable server fails the test.
    pub async fn create() -> Option<Self> {
        let url = postgres_url();
        let admin = match sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(std::time::Duration::from_secs(5))
            .connect(&url)
            .await
        {
            Ok(pool) => pool,
            Err(err) if std::env::var("CI").as_deref() == Ok("true") => {
                panic!("PostgreSQL at {url} is required under CI=true: {err}")
            }
            Err(err) => {
                eprintln!("skipping: PostgreSQL at {url} unreachable ({err})");
                return None;
            }
        };
        let schema = format!("t_{}", switchboard::store::new_id());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(&admin)
            .await
            .unwrap();
        let sep = if url.contains('?') { '&' } else { '?' };
        let config = StorageConfig {
            url: format!("{url}{sep}options=-c%20search_path%3D{schema}"),
            max_connections: 4,
            ..StorageConfig::default()
        };
        Some(Self {
            config,
            schema,
            admin,
        })
    }

    /// The schema's name.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// A migrated store on this schema.
    pub async fn store(&self) -> Store {
        Store::open(&self.config).await.unwrap()
    }

    /// Drops the schema and everything in it; fails, rather than waits for
    /// good, behind a transaction a daemon left open on it.
    pub async fn drop(self) {
        let mut tx = self.admin.begin().await.unwrap();
        sqlx::query("SET LOCAL lock_timeout = '30s'")
            .execute(&mut *tx)
            .await
            .unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA {} CASCADE",
            self.schema
        )))
        .execute(&mut *tx)
        .await
        .unwrap();
        tx.commit().await.unwrap();
        self.admin.close().await;
    }
}

/// Runs `test` twice: on the harness's SQLite file (`None`), then on a
/// PostgreSQL schema of its own (its storage config; skipped with the
/// reason printed where there is no server, except under `CI=true`).
pub async fn on_both_backends<F, Fut>(test: F)
where
    F: Fn(Option<StorageConfig>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    test(None).await;
    if let Some(db) = PgTestDb::create().await {
        test(Some(db.config.clone())).await;
        db.drop().await;
    }
}

/// Declares each listed `async fn name(store: Store)` as a test per
/// backend: `sqlite::name` and `postgres::name`.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    let (store, _dir) = $crate::common::sqlite_store().await;
                    super::$name(store.clone()).await;
                    store.close().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    let Some(db) = $crate::common::PgTestDb::create().await else { return };
                    let store = db.store().await;
                    super::$name(store.clone()).await;
                    store.close().await;
                    db.drop().await;
                }
            )*
        }
    };
}

/// Tool-test helpers.
pub mod tools {
    use std::sync::Arc;

    use switchboard::tools::{AllowAll, ApprovalHook, ApprovalVerdict, ToolContext};

    /// The tool runtime of the default configuration.
    pub fn runtime() -> switchboard::tools::ToolRuntime {
        let config = switchboard::config::Config::default();
        switchboard::tools::ToolRuntime::build(
            &config,
            &switchboard::config::Env::default(),
            switchboard::adapters::platforms(&config),
        )
        .unwrap()
    }

    /// A context whose workspace is a fresh directory under `dir`.
    pub fn ctx(dir: &std::path::Path) -> ToolContext {
        ctx_with(dir, Arc::new(AllowAll))
    }

    /// The same with another approval hook.
    pub fn ctx_with(dir: &std::path::Path, hook: Arc<dyn ApprovalHook>) -> ToolContext {
        ToolContext::for_session(dir, "s1", "test:dm:1", hook).unwrap()
    }

    /// A test policy: deny commands containing any of the words.
    pub struct DenyWords(pub Vec<&'static str>);

    #[async_trait::async_trait]
    impl ApprovalHook for DenyWords {
        async fn review(&self, command: &str, _ctx: &ToolContext) -> ApprovalVerdict {
            match self.0.iter().find(|w| command.contains(*w)) {
                Some(word) => ApprovalVerdict::Deny {
                    reason: format!("test policy forbids `{word}`"),
                },
                None => ApprovalVerdict::Allow,
            }
        }
    }
}

/// Dispatches through a runtime's registry and parses the JSON answer.
pub async fn call(
    runtime: &switchboard::tools::ToolRuntime,
    tool: &str,
    args: serde_json::Value,
    ctx: &switchboard::tools::ToolContext,
) -> serde_json::Value {
    let out = runtime.registry.dispatch(tool, args, ctx).await;
    serde_json::from_str(&out).unwrap_or(serde_json::Value::String(out))
}

/// The lines of a corpus under tests/data, without blanks and comments.
pub fn corpus(name: &str) -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// Polls `check` every 20 ms until it finds something; fails the test
/// after 20 s.
pub async fn until<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Polls `check` every 20 ms until it holds; fails the test after 20 s.
pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually_within(what, std::time::Duration::from_secs(20), check).await;
}

/// Polls `check` every 20 ms until it holds; fails the test after `limit`.
pub async fn eventually_within<F, Fut>(what: &str, limit: std::time::Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Serves `app` on a free loopback port until the test ends; its address.
pub async fn serve(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// A request's `Authorization` header ("" without one).
pub fn authorization(headers: &axum::http::HeaderMap) -> String {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// Waits until the daemon's component `name` reports ready.
pub async fn ready(gateway: &switchboard::daemon::Gateway, name: &str) {
    eventually(&format!("{name} ready"), || async {
        gateway.health.snapshot().get(name).is_some_and(|h| h.ready)
    })
    .await;
}

/// How many events of `platform` the inbox holds (of its newest 100).
pub async fn inbox_count(store: &Store, platform: &str) -> usize {
    store.inbox_latest(platform, 100).await.unwrap().len()
}

/// Runs the test `name` of this binary alone in a child process, with the
/// environment variable `probe` set (the child sees it and does the work):
/// for tests that read process-wide state. Fails unless it passed there
/// within [`ALONE`].
pub fn run_alone(name: &str, probe: &str) {
    let out = output_within(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--test-threads=1", "--nocapture"])
            .env(probe, "1"),
        ALONE,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `cmd` to its end, as `Command::output` does, but fails the test
/// once it has run for `limit`: the process is killed, and the failure
/// shows where its threads waited and what it printed. Its output goes to
/// files, not pipes: a process it left behind holding a pipe would keep a
/// reader waiting.
pub fn output_within(
    cmd: &mut std::process::Command,
    limit: std::time::Duration,
) -> std::process::Output {
    let (out, err) = (tempfile::tempfile().unwrap(), tempfile::tempfile().unwrap());
    let mut child = cmd
        .stdout(out.try_clone().unwrap())
        .stderr(err.try_clone().unwrap())
        .spawn()
        .unwrap();
    let printed = |mut file: &std::fs::File| {
        let mut bytes = Vec::new();
        std::io::Seek::rewind(&mut file).unwrap();
        std::io::Read::read_to_end(&mut file, &mut bytes).unwrap();
        bytes
    };
    let Some(status) = wait_within(&mut child, limit) else {
        let waits = threads_of(child.id());
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "{cmd:?} still ran after {limit:?}; its threads:\n{waits}\n{}{}",
            String::from_utf8_lossy(&printed(&out)),
            String::from_utf8_lossy(&printed(&err))
        );
    };
    std::process::Output {
        status,
        stdout: printed(&out),
        stderr: printed(&err),
    }
}

/// Waits for `child` to end, for `limit` at most: its status, `None` while
/// it still runs.
pub fn wait_within(
    child: &mut std::process::Child,
    limit: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// How long a command-line run that talks to a daemon or a model may take
/// ([`output_within`]).
pub const CLI: std::time::Duration = std::time::Duration::from_secs(120);

/// How long a test run alone ([`run_alone`]) may take: the longest ride
/// out an outage and then wait up to 90 s for the replies.
const ALONE: std::time::Duration = std::time::Duration::from_secs(300);

/// How long this binary may run: several times what the whole suite takes.
const SUITE: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// Ends this binary once it has run for [`SUITE`], saying where each of
/// its threads waits: a test that never returns would otherwise hold CI
/// until CI's own limit, and say nothing of itself (the test harness names
/// a thread after its test, cut to 15 characters here).
pub extern "C" fn watchdog() {
    std::thread::spawn(|| {
        std::thread::sleep(SUITE);
        eprintln!(
            "it: still running after {SUITE:?}; its threads:\n{}",
            threads_of(std::process::id())
        );
        std::process::exit(101);
    });
}

/// The threads of process `pid`, a line for each name and kernel function
/// they wait in, with how many.
fn threads_of(pid: u32) -> String {
    let read = |path: std::path::PathBuf| std::fs::read_to_string(path).unwrap_or_default();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return String::new();
    };
    let mut waits = std::collections::BTreeMap::<(String, String), usize>::new();
    for task in tasks.flatten() {
        let dir = task.path();
        let name = read(dir.join("comm")).trim().to_string();
        *waits.entry((name, read(dir.join("wchan")))).or_default() += 1;
    }
    waits
        .into_iter()
        .map(|((name, wchan), n)| format!("{n} x {name} waits in {wchan}\n"))
        .collect()
}

/// This process's resident memory, in KiB (VmRSS).
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// How long the platform-outage tests keep a platform failing.
pub const OUTAGE: std::time::Duration = std::time::Duration::from_secs(60);

/// What a test saw of a platform's sends: when each try came, and the
/// texts of those that went through.
pub struct Sends {
    pub tried: Vec<std::time::Instant>,
    pub sent: Vec<String>,
}

/// Rides out an [`OUTAGE`] that began at `began` while the test's
/// messages wait: at its end reads the tries made during it and this
/// process's memory, then waits up to 90 s for `expected` to go through,
/// lets 2 s pass for a stray copy, and checks each went once and in order,
/// the tries were patient (2 to 16, none within 400 ms of another; see
/// [`assert_patient`]), memory flat (`rss_early` read once the messages
/// were in); prints the figures.
pub async fn after_outage(
    platform: &str,
    began: std::time::Instant,
    rss_early: u64,
    expected: &[&str],
    sends: impl Fn() -> Sends,
) {
    tokio::time::sleep_until((began + OUTAGE).into()).await;
    let rss_late = rss_kib();
    let during = sends().tried;
    eventually_within(
        "the replies sent after the outage",
        std::time::Duration::from_secs(90),
        || async { sends().sent.len() >= expected.len() },
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let all = sends();
    assert_eq!(all.sent, expected, "each reply once, in order");
    eprintln!(
        "{platform} outage of {OUTAGE:?}: {} tries during it, {} in all; RSS {rss_early} -> {rss_late} KiB",
        during.len(),
        all.tried.len(),
    );
    assert_patient(
        &during,
        16,
        std::time::Duration::from_millis(400),
        (rss_early, rss_late),
    );
}

/// What riding out an outage must look like: the failing platform was
/// tried again (at least twice, at most `most` times, never closer than
/// `closest`), and memory (`rss`: early and late in the outage, KiB) grew
/// by less than 8 MiB.
pub fn assert_patient(
    tried: &[std::time::Instant],
    most: usize,
    closest: std::time::Duration,
    rss: (u64, u64),
) {
    assert!(
        (2..=most).contains(&tried.len()),
        "{} tries in {OUTAGE:?}",
        tried.len()
    );
    let gap = tried
        .windows(2)
        .map(|w| w[1].duration_since(w[0]))
        .min()
        .unwrap();
    assert!(gap >= closest, "tries {gap:?} apart");
    let (early, late) = rss;
    assert!(
        late < early + 8 * 1024,
        "memory grew from {early} to {late} KiB during the outage"
    );
}

/// A stored job named `name` (its id too), made by `owner` in `chat` on
/// `platform`, due in an hour on `schedule`.
pub fn stored_job(
    name: &str,
    schedule: &str,
    platform: &str,
    chat: &str,
    owner: &str,
) -> switchboard::store::CronJob {
    let now = switchboard::store::now_ms();
    switchboard::store::CronJob {
        id: name.into(),
        name: name.into(),
        origin: if owner.is_empty() { "config" } else { "chat" }.into(),
        schedule: schedule.into(),
        timezone: String::new(),
        prompt: format!("the {name}"),
        toolsets: None,
        platform: platform.into(),
        chat_id: chat.into(),
        thread_id: None,
        owner_user: owner.into(),
        owner_chat: chat.into(),
        owner_thread: None,
        owner_event: String::new(),
        missed: "skip".into(),
        missed_limit: 1,
        paused: 0,
        next_at: Some(now + 3_600_000),
        created_at: now,
        updated_at: now,
    }
}

/// The names of the tools a model request offers.
pub fn tool_names(request: &serde_json::Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The one session workspace under the workspace root `ws` (the daemon's
/// own `.incoming` and `.tmp` beside it left out).
pub fn session_workspace(ws: &std::path::Path) -> std::path::PathBuf {
    ws.read_dir()
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .unwrap()
}
