//! Durable webhook ingest under load: distinct signed `pull_request`
//! deliveries (a body sent twice is a replay, deduplicated) posted over
//! many connections to the real daemon (signature verified, rate limit,
//! filter, deduplicated and committed to the inbox before the 202). In the
//! same run, the baselines: a bare axum handler that answers 202 without
//! looking; the naive durable handler (the signature verified, then one
//! SQLite commit per delivery); pgbench's naive insert of inbox-shaped
//! rows on PostgreSQL. Each is reported with its rate and p50, p90, p99
//! and max. The model accepts connections and never answers, so each
//! session's first turn waits and the rest queue: what is measured is the
//! ingest path, not the agent.
//!
//! The daemon is measured on SQLite and on PostgreSQL (a fresh schema at
//! `TEST_DATABASE_URL`, the tests' server by default) with the deliveries
//! spread over 1, 40, 400 and 2 000 pull requests (each its own session,
//! live until the end), then as two and three replicas (in this process)
//! sharing one database, the deliveries spread over them in turn.
//!
//! Each point of the curve is measured in rounds (`ROUNDS`, 3 by default):
//! in each, the targets one after another, the disk's writeback settled
//! before each; the point is reported at each target's medians, as an
//! external run alternating wrk rounds would be.
//!
//! Run: `cargo bench --bench webhook_ingest` (REQUESTS=N per run,
//! CONNECTIONS=C, ROUNDS=R (odd) per point, PRS=1,40 for other points of the curve;
//! INGEST_ONLY=sqlite|postgres measures one backend alone, for profiling;
//! INGEST_ONLY=replicas one, two and three replicas in turn, `ROUNDS` times,
//! or the counts in REPLICAS=1,3).

use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::post;
use switchboard::adapters::webhook::verify::github_signature;
use switchboard::config::{Config, Env, load_from_str};
use switchboard::daemon::{Daemon, Gateway};

mod support;
use support::wrk::{Run, load, load_across};
use support::{SECRET, env_usize, gateway_toml_on};

async fn bare_handler() -> (Apart, String) {
    Apart::start(async {
        let app = axum::Router::new().route(
            "/webhooks/github",
            post(|_body: axum::body::Bytes| async { StatusCode::ACCEPTED }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}/webhooks/github")
    })
    .await
}

/// A runtime of its own for a server, as a process of its own has: the
/// bench's client does not share its workers, and dropping it ends what
/// the server left running (a stopped daemon's turns still waiting on the
/// model, and their sockets), as a process's exit does. Kept on the
/// bench's runtime, those ran a long run out of descriptors.
struct Apart(Option<tokio::runtime::Runtime>);

impl Apart {
    /// Runs `setup` on a new runtime, where what it spawns stays.
    async fn start<T: Send + 'static>(
        setup: impl Future<Output = T> + Send + 'static,
    ) -> (Self, T) {
        let rt = switchboard::runtime::build().unwrap();
        let out = rt.spawn(setup).await.unwrap();
        (Apart(Some(rt)), out)
    }
}

impl Drop for Apart {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// The naive durable handler: verifies the signature, then commits the
/// delivery to SQLite in a transaction of its own (WAL, `synchronous =
/// NORMAL`, as the daemon's store) before its 202.
async fn naive_sqlite(dir: &std::path::Path) -> (Apart, String) {
    let file = dir.join("naive.db");
    Apart::start(async move {
        use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
        let options = SqliteConnectOptions::new()
            .filename(file)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10));
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .unwrap();
        sqlx::query(
            "CREATE TABLE inbox (id INTEGER PRIMARY KEY, dedupe_key TEXT NOT NULL UNIQUE, \
         payload TEXT NOT NULL, received_at INTEGER NOT NULL)",
        )
        .execute(&pool)
        .await
        .unwrap();
        let handler = move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let pool = pool.clone();
            async move {
                let sig = headers
                    .get("x-hub-signature-256")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                if sig != github_signature(SECRET, &body) {
                    return StatusCode::UNAUTHORIZED;
                }
                let id = headers
                    .get("x-github-delivery")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let inserted = sqlx::query(
                    "INSERT INTO inbox (dedupe_key, payload, received_at) VALUES ($1, $2, $3) \
                 ON CONFLICT DO NOTHING",
                )
                .bind(id)
                .bind(String::from_utf8_lossy(&body).into_owned())
                .bind(switchboard::store::now_ms())
                .execute(&pool)
                .await;
                match inserted {
                    Ok(_) => StatusCode::ACCEPTED,
                    Err(_) => StatusCode::SERVICE_UNAVAILABLE,
                }
            }
        };
        let app = axum::Router::new().route("/webhooks/github", post(handler));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}/webhooks/github")
    })
    .await
}

/// A model endpoint that accepts connections and never answers; each
/// connection is held until its daemon closes it.
async fn silent_model() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut sink = [0u8; 4096];
                while tokio::io::AsyncReadExt::read(&mut socket, &mut sink)
                    .await
                    .is_ok_and(|n| n > 0)
                {}
            });
        }
    });
    format!("http://{addr}/v1")
}

/// A daemon the bench started; [`stop`](Self::stop) waits until it has
/// stopped, so what it left to do (the deferred turns of the sessions a
/// run opened) does not run into the next target's measurement.
struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
    apart: Apart,
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
        drop(self.apart);
    }
}

/// A daemon on `storage`, on a runtime of its own ([`Apart`]) with its
/// silent model.
async fn daemon(dir: &std::path::Path, storage: &str) -> (String, Gateway, Running) {
    let (dir, storage) = (dir.to_path_buf(), storage.to_string());
    let (apart, (url, gateway, stop, task)) = Apart::start(async move {
        let model = silent_model().await;
        let toml = gateway_toml_on(&dir, "127.0.0.1:0", &model, &storage);
        let env = Env::from_pairs([("GITHUB_WEBHOOK_SECRET", SECRET)]);
        let config: Config = load_from_str(&toml, &env).unwrap();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let d = switchboard::adapters::install(Daemon::new(config, env)).component(
            "bench",
            move |ctx| async move {
                let _ = ready_tx.send((ctx.local_addr, ctx.gateway.clone()));
                ctx.stop.cancelled().await;
            },
        );
        let task = tokio::spawn(async move {
            let _ = d
                .run_until(async move {
                    let _ = stop_rx.await;
                    "bench done"
                })
                .await;
        });
        let (addr, gateway) = ready_rx.await.unwrap();
        (
            format!("http://{addr}/webhooks/github"),
            gateway,
            stop_tx,
            task,
        )
    })
    .await;
    let running = Running { stop, task, apart };
    (url, gateway, running)
}

/// `requests` deliveries into a daemon on `storage`, after a warm-up;
/// returns the run and how many rows the inbox then holds.
async fn ingest(storage: &str, requests: usize, connections: usize, prs: usize) -> (Run, usize) {
    let dir = tempfile::tempdir().unwrap();
    let (url, gateway, stop) = daemon(dir.path(), storage).await;
    load(url.clone(), 20_000_000, 200, connections, prs).await;
    let run = load(url, 0, requests, connections, prs).await;
    let store = switchboard::store::Store::connect(&gateway.config.storage)
        .await
        .unwrap();
    let stored = store.inbox_pending(10_000_000).await.unwrap().len();
    store.close().await;
    stop.stop().await;
    end_connections().await;
    assert_eq!(run.accepted, requests, "every delivery was accepted");
    (run, stored - 200)
}

/// `requests` deliveries spread over `replicas` daemons sharing `storage`
/// (PostgreSQL), after a warm-up.
async fn ingest_replicas(
    storage: &str,
    replicas: usize,
    requests: usize,
    connections: usize,
) -> Run {
    end_connections().await;
    let mut dirs = Vec::new();
    let mut urls = Vec::new();
    let mut stops = Vec::new();
    for _ in 0..replicas {
        let dir = tempfile::tempdir().unwrap();
        let (url, _, stop) = daemon(dir.path(), storage).await;
        dirs.push(dir);
        urls.push(url);
        stops.push(stop);
    }
    load_across(
        urls.clone(),
        30_000_000 + replicas * 1_000_000,
        200,
        connections,
        PRS,
    )
    .await;
    let run = load_across(
        urls,
        40_000_000 + replicas * 1_000_000,
        requests,
        connections,
        PRS,
    )
    .await;
    for stop in stops {
        stop.stop().await;
    }
    end_connections().await;
    assert_eq!(run.accepted, requests, "every delivery was accepted");
    run
}

/// One, two and three replicas (or `REPLICAS`) in turn, `rounds` times
/// (each on a fresh schema), and each count's median against the first's:
/// what sharing sessions costs, without the rest of the bench.
async fn replicas_alone(requests: usize, connections: usize, rounds: usize) {
    let counts: Vec<usize> = std::env::var("REPLICAS").map_or_else(
        |_| vec![1, 2, 3],
        |list| list.split(',').map(|n| n.trim().parse().unwrap()).collect(),
    );
    let mut rates = vec![Vec::new(); counts.len()];
    for round in 1..=rounds {
        for (&replicas, rates) in counts.iter().zip(rates.iter_mut()) {
            let schema = postgres_schema()
                .await
                .expect("INGEST_ONLY=replicas needs PostgreSQL");
            settle().await;
            let run = ingest_replicas(&schema, replicas, requests, connections).await;
            println!(
                "  {round}: {replicas} replica(s), {PRS} PRs: {:.0} req/s, p99 {:.2?}",
                run.rate, run.p99
            );
            rates.push(run.rate);
        }
    }
    let first = middle(rates[0].clone());
    for (replicas, rates) in counts.iter().zip(rates) {
        let rate = middle(rates);
        println!(
            "  {replicas} replica(s): {rate:.0} req/s, {:.2}x {}",
            rate / first,
            counts[0]
        );
    }
}

/// The PostgreSQL server at `TEST_DATABASE_URL` (the tests' default
/// otherwise).
fn server_url() -> String {
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A pool on [`server_url`], if it answers.
async fn server() -> Option<sqlx::PgPool> {
    sqlx::PgPool::connect(&server_url())
        .await
        .inspect_err(|err| println!("PostgreSQL unreachable for cleaning up: {err}"))
        .ok()
}

/// The schemas [`postgres_schema`] made, dropped at the end.
static SCHEMAS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Drops the schemas this run made, so that runs do not pile them up in
/// the tests' database.
async fn drop_schemas() {
    end_connections().await;
    let schemas = std::mem::take(&mut *SCHEMAS.lock().unwrap());
    if schemas.is_empty() {
        return;
    }
    let Some(admin) = server().await else {
        return;
    };
    for schema in schemas {
        let drop = format!("DROP SCHEMA {schema} CASCADE");
        if let Err(err) = sqlx::query(sqlx::AssertSqlSafe(drop)).execute(&admin).await {
            println!("schema {schema} left behind: {err}");
        }
    }
    admin.close().await;
}

/// A fresh schema on the PostgreSQL server at `TEST_DATABASE_URL` (the
/// tests' default otherwise), as a URL selecting it; `None` with the reason
/// printed when the server is unreachable.
async fn postgres_schema() -> Option<String> {
    let url = server_url();
    let admin = match sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&url)
        .await
    {
        Ok(pool) => pool,
        Err(err) => {
            println!("PostgreSQL at {url} unreachable ({err}): measuring SQLite only");
            return None;
        }
    };
    let schema = format!("bench_{}", switchboard::store::new_id());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&admin)
        .await
        .unwrap();
    SCHEMAS.lock().unwrap().push(schema.clone());
    admin.close().await;
    let sep = if url.contains('?') { '&' } else { '?' };
    Some(format!(
        "{url}{sep}options=-c%20search_path%3D{schema}&application_name={schema}"
    ))
}

/// Ends the connections stopped daemons left open on this run's schemas
/// (each connection named after its schema by [`postgres_schema`]): a
/// daemon's shutdown gives up closing them after its grace while a turn
/// still waits on the silent model, and what it left running may open
/// more, so a process running many daemons would run the server out of
/// connections. Called between targets, when no daemon is measured.
async fn end_connections() {
    let ours = SCHEMAS.lock().unwrap().clone();
    if ours.is_empty() {
        return;
    }
    let Some(admin) = server().await else {
        return;
    };
    let ended = sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name = ANY($1) AND pid <> pg_backend_pid()",
    )
    .bind(ours)
    .execute(&admin)
    .await;
    if let Err(err) = ended {
        println!("connections of stopped daemons left open: {err}");
    }
    admin.close().await;
}

/// pgbench's naive insert (`support/naive_insert.sql`: one `INSERT … ON
/// CONFLICT DO NOTHING` of an inbox-shaped row per transaction) from
/// `clients` connections for 5 s, on a table beside the daemon's; its
/// transactions per second, or `None` with the reason printed.
async fn pgbench(url: &str, clients: usize) -> Option<f64> {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    sqlx::query(
        "CREATE TABLE naive_inbox (id BIGSERIAL PRIMARY KEY, platform TEXT NOT NULL, \
         dedupe_key TEXT NOT NULL UNIQUE, session_key TEXT NOT NULL, payload TEXT NOT NULL, \
         received_at BIGINT NOT NULL)",
    )
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/benches/support/naive_insert.sql"
    );
    let out = tokio::process::Command::new("pgbench")
        .args(["-n", "-T", "5", "-j", "2", "-f", script])
        .arg(format!("-c{clients}"))
        .arg(url)
        .output()
        .await;
    let out = match out {
        Ok(out) if out.status.success() => out,
        Ok(out) => {
            println!("pgbench failed: {}", String::from_utf8_lossy(&out.stderr));
            return None;
        }
        Err(err) => {
            println!("pgbench not runnable ({err}): no naive baseline");
            return None;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// Waits until what the last target wrote is on the disk, so that the
/// next one does not pay for its writeback.
async fn settle() {
    tokio::task::spawn_blocking(nix::unistd::sync)
        .await
        .unwrap();
}

/// Pull requests the replicas' deliveries are spread over: a count prime
/// to 2 and 3, so that the replicas' turns and the pull requests do not line
/// up. With 50, each of two replicas got every delivery of the same 25 pull
/// requests (the offsets are even), owned them, and none was handed over.
const PRS: usize = 49;

fn print(name: &str, run: &Run, bare: &Run) {
    println!(
        "  {name:<26}: {:>7.0} req/s  p50 {:>8.2?}  p90 {:>8.2?}  p99 {:>8.2?}  max {:>8.2?}  {:>5.1} % of bare",
        run.rate,
        run.p50,
        run.p90,
        run.p99,
        run.max,
        100.0 * run.rate / bare.rate
    );
}

/// The curve's points: `PRS` (comma-separated counts of pull requests)
/// or 1, 40, 400 and 2 000.
fn curve() -> Vec<usize> {
    match std::env::var("PRS") {
        Ok(list) => list
            .split(',')
            .filter_map(|n| n.trim().parse().ok())
            .filter(|n| *n > 0)
            .collect(),
        Err(_) => vec![1, 40, 400, 2000],
    }
}

/// The middle of `values` (the upper one of an even count: a target that
/// failed a round).
fn middle<T: Copy + PartialOrd>(mut values: Vec<T>) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values[values.len() / 2]
}

/// Each figure of `runs` at its median over the rounds.
fn median(runs: &[Run]) -> Run {
    let of = |f: fn(&Run) -> Duration| middle(runs.iter().map(f).collect());
    Run {
        rate: middle(runs.iter().map(|r| r.rate).collect()),
        p50: of(|r| r.p50),
        p90: of(|r| r.p90),
        p99: of(|r| r.p99),
        max: of(|r| r.max),
        accepted: middle(runs.iter().map(|r| r.accepted).collect()),
    }
}

/// One point of the curve's rounds: each target measured once per round,
/// in turn.
#[derive(Default)]
struct Rounds {
    bare: Vec<Run>,
    naive: Vec<Run>,
    sqlite: Vec<Run>,
    pgbench: Vec<f64>,
    postgres: Vec<Run>,
}

fn main() {
    // Seconds of load at the daemon's rate, as wrk's 5 s rounds: the turns
    // a burst opens (they wait a second for a busy intake), the held keys
    // indexed once 8 192 wait and the log's checkpoints all fall inside
    // the measurement (12 000, over in half a second with the wrk-like
    // client, opened no turn within it and indexed keys twice, too few
    // requests waiting to show in p99).
    let requests = env_usize("REQUESTS", 100_000);
    let connections = env_usize("CONNECTIONS", 32);
    // This machine's speed drifts within minutes: each point's targets
    // are measured in turn, round after round, and compared at their
    // medians.
    // An odd count, so that each median is one round's figure.
    let rounds = env_usize("ROUNDS", 3).max(1) | 1;
    // The daemon's own runtime, so the in-process daemon (and the
    // baselines beside it) run as in production.
    let rt = switchboard::runtime::build().unwrap();
    rt.block_on(async {
        measure(requests, connections, rounds).await;
        drop_schemas().await;
    });
}

/// The whole bench, or one backend alone under `INGEST_ONLY`.
async fn measure(requests: usize, connections: usize, rounds: usize) {
    let only = std::env::var("INGEST_ONLY");
    if only.as_deref() == Ok("replicas") {
        replicas_alone(requests, connections, rounds).await;
        return;
    }
    if let Ok(only) = only {
        // For profilers: the ingest path alone, on one backend.
        for prs in curve() {
            let dir = tempfile::tempdir().unwrap();
            let url = match only.as_str() {
                "postgres" => postgres_schema()
                    .await
                    .expect("INGEST_ONLY=postgres needs PostgreSQL"),
                _ => format!("sqlite://{}", dir.path().join("bench.db").display()),
            };
            let (run, _) = ingest(&url, requests, connections, prs).await;
            println!(
                "switchboard ingest ({only}, {prs} PRs): {:.0} req/s, p99 {:.2?}",
                run.rate, run.p99
            );
        }
        return;
    }
    let (_bare, bare_url) = bare_handler().await;
    load(bare_url.clone(), 10_000_000, 200, connections, 1).await;
    let naive_dir = tempfile::tempdir().unwrap();
    let (_naive, naive_url) = naive_sqlite(naive_dir.path()).await;
    load(naive_url.clone(), 10_000_000, 200, connections, 1).await;
    println!(
        "webhook ingest, {requests} distinct signed pull_request deliveries over {connections} connections, {rounds} rounds per point"
    );
    let mut bare = None;
    let mut naive_offset = 0;
    for prs in curve() {
        println!("  at {prs} pull requests:");
        let mut point = Rounds::default();
        for round in 1..=rounds {
            settle().await;
            let point_bare = load(bare_url.clone(), 0, requests, connections, 1).await;
            settle().await;
            let naive = load(naive_url.clone(), naive_offset, requests, connections, 1).await;
            naive_offset += requests;
            for (target, run) in [("bare", &point_bare), ("naive", &naive)] {
                assert_eq!(
                    run.accepted, requests,
                    "the {target} handler accepted every delivery"
                );
            }
            print(
                &format!("{round}: bare axum handler"),
                &point_bare,
                &point_bare,
            );
            print(
                &format!("{round}: naive durable (SQLite)"),
                &naive,
                &point_bare,
            );
            let dir = tempfile::tempdir().unwrap();
            let sqlite = format!("sqlite://{}", dir.path().join("bench.db").display());
            settle().await;
            let (run, stored) = ingest(&sqlite, requests, connections, prs).await;
            assert_eq!(stored, requests, "SQLite holds every delivery");
            print(&format!("{round}: SQLite"), &run, &point_bare);
            point.sqlite.push(run);
            point.bare.push(point_bare);
            point.naive.push(naive);
            let (Some(naive_pg), Some(pg)) = (postgres_schema().await, postgres_schema().await)
            else {
                continue;
            };
            end_connections().await;
            settle().await;
            let tps = pgbench(&naive_pg, connections).await;
            if let Some(tps) = tps {
                println!(
                    "  {round}: pgbench naive insert   : {tps:>7.0} tps from {connections} clients"
                );
                point.pgbench.push(tps);
            }
            // pgbench's pages written out by the server, not by a
            // checkpoint during the target.
            let server = sqlx::PgPool::connect(&naive_pg).await.unwrap();
            sqlx::query("CHECKPOINT").execute(&server).await.unwrap();
            server.close().await;
            end_connections().await;
            settle().await;
            let (run, stored) = ingest(&pg, requests, connections, prs).await;
            assert_eq!(stored, requests, "PostgreSQL holds every delivery");
            print(&format!("{round}: Postgres"), &run, &point_bare);
            point.postgres.push(run);
        }
        let point_bare = median(&point.bare);
        let naive = median(&point.naive);
        let run = median(&point.sqlite);
        println!(
            "    medians at {prs} pull requests (SQLite {} rounds, PostgreSQL {}, pgbench {}):",
            point.sqlite.len(),
            point.postgres.len(),
            point.pgbench.len()
        );
        print("bare axum handler", &point_bare, &point_bare);
        print("naive durable (SQLite)", &naive, &point_bare);
        print(&format!("SQLite, {prs} PRs"), &run, &point_bare);
        println!(
            "      p99 {:.2}x the naive handler's (target <= 1), {:.1} % of bare (target >= 35 %)",
            run.p99.as_secs_f64() / naive.p99.as_secs_f64(),
            100.0 * run.rate / point_bare.rate
        );
        if !point.postgres.is_empty() {
            let run = median(&point.postgres);
            print(&format!("Postgres, {prs} PRs"), &run, &point_bare);
            if !point.pgbench.is_empty() {
                let tps = middle(point.pgbench.clone());
                println!("  pgbench naive insert      : {tps:>7.0} tps from {connections} clients");
                println!(
                    "      {:.1} % of pgbench's naive insert (target >= 100 %)",
                    100.0 * run.rate / tps
                );
            }
        }
        bare = Some(point_bare);
    }
    let (Some(pg), Some(bare)) = (postgres_schema().await, bare) else {
        return;
    };
    let (one, _) = ingest(&pg, requests, connections, PRS).await;
    for replicas in [2, 3] {
        // Each replica on a schema of its own run's, the deliveries
        // spread over them: an event's session is often another
        // replica's, which is told.
        let schema = postgres_schema().await.expect("PostgreSQL answered above");
        let run = ingest_replicas(&schema, replicas, requests, connections).await;
        print(&format!("{replicas} replicas, Postgres"), &run, &bare);
        println!(
            "      {:.2}x one replica ({:.0} req/s, {PRS} PRs)",
            run.rate / one.rate,
            one.rate
        );
    }
}
