//! Scheduled jobs (#23): a job fires exactly once per slot across a
//! restart and a crash between its run and its next slot; slots missed
//! while the daemon was down follow the job's policy; a failed delivery or
//! a failed run is told to the job's owner and `runs` keeps status and
//! delivery apart; the `cronjob` tool makes jobs only for its own chat,
//! after the person confirms, within the per-person limit. Time is
//! injected: the daemon's own scheduler is off (`cron.enabled = false`)
//! and the test ticks a scheduler of its own at the moments it chooses.
//! Each runs on SQLite and on PostgreSQL.

use crate::common;

use std::sync::Arc;

use common::fake_llm::{FakeLlm, Reply, calls, text};
use common::fake_telegram::FakeTelegram;
use common::in_process::{InProcess, start_telegram as start, telegram_config};
use serde_json::{Value, json};
use switchboard::config::{Config, CronJobConfig, MissedPolicy, StorageConfig};
use switchboard::cron::{Scheduler, Tick};
use switchboard::store::{CronRun, Store};

mod access;

const ANN: i64 = 1001;
const TEAM: i64 = -100_500;

/// `2026-12-01T09:00:00Z` and the like, in Unix ms.
fn at(text: &str) -> i64 {
    let secs = chrono::DateTime::parse_from_rfc3339(text)
        .unwrap()
        .timestamp();
    secs * 1000
}

fn job(name: &str, schedule: &str, missed: MissedPolicy, limit: u32) -> CronJobConfig {
    CronJobConfig {
        name: name.into(),
        schedule: schedule.into(),
        prompt: format!("Post the {name}."),
        platform: "telegram".into(),
        chat: ANN.to_string(),
        missed,
        missed_limit: limit,
        ..CronJobConfig::default()
    }
}

fn config(
    dir: &std::path::Path,
    tg: &FakeTelegram,
    llm: &FakeLlm,
    storage: &Option<StorageConfig>,
    jobs: Vec<CronJobConfig>,
) -> Config {
    let mut config = telegram_config(dir, tg, &llm.url, storage.as_ref(), ANN);
    // The daemon's scheduler leaves firing to the test's.
    config.cron.enabled = false;
    config.cron.jobs = jobs;
    config
}

/// A scheduler on `daemon` that fires (time is the test's).
fn scheduler(daemon: &InProcess, config: &Config) -> Scheduler {
    let mut config = config.clone();
    config.cron.enabled = true;
    Scheduler::new(
        daemon.store.clone(),
        daemon.gateway.sessions.clone(),
        Arc::new(config),
    )
}

fn sent_to(tg: &FakeTelegram, chat: i64) -> Vec<String> {
    tg.calls("sendMessage")
        .iter()
        .filter(|c| c.body["chat_id"].as_i64() == Some(chat))
        .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Ticks `s` at `now` until every run is settled; the runs, oldest slot
/// first.
async fn settled(s: &Scheduler, store: &Store, now: i64) -> Vec<CronRun> {
    common::until("the runs settle", || async {
        s.tick(now).await.unwrap();
        let runs = store.runs(None, 100).await.unwrap();
        let open = runs
            .iter()
            .any(|r| matches!(r.status.as_str(), "queued" | "running") || r.delivery == "pending");
        (!open).then(|| runs.into_iter().rev().collect())
    })
    .await
}

fn states(runs: &[CronRun]) -> Vec<(String, String)> {
    runs.iter()
        .map(|r| (r.status.clone(), r.delivery.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_every_minute_fires_once_per_slot_across_a_crash_and_a_restart() {
    common::on_both_backends(|storage| async move {
        let tg = FakeTelegram::start().await;
        let llm = FakeLlm::start(vec![
            Reply::Json(text("digest one")),
            Reply::Json(text("digest two")),
        ])
        .await;
        let dir = tempfile::tempdir().unwrap();
        let jobs = vec![job("digest", "* * * * *", MissedPolicy::Skip, 1)];
        let config = config(dir.path(), &tg, &llm, &storage, jobs);
        let t0 = at("2026-12-01T09:00:00Z");
        let daemon = start(&config).await;
        let s = scheduler(&daemon, &config);
        s.sync_config(t0 - 30_000).await.unwrap();
        let store = daemon.store.clone();
        assert_eq!(
            store.job("digest").await.unwrap().unwrap().next_at,
            Some(t0)
        );
        assert_eq!(
            s.tick(t0 - 1).await.unwrap(),
            Tick::default(),
            "not due yet"
        );
        assert_eq!(s.tick(t0).await.unwrap().fired, 1);
        assert_eq!(s.tick(t0 + 1_000).await.unwrap(), Tick::default());
        tg.wait("sendMessage", 1).await;
        // A crash after the run was stored and before the slot moved on:
        // the slot is fired again and found stored.
        assert!(
            store
                .advance_job("config:digest", t0 + 60_000, Some(t0))
                .await
                .unwrap()
        );
        let again = s.tick(t0 + 2_000).await.unwrap();
        assert_eq!((again.fired, again.already), (0, 1));
        daemon.shutdown().await;

        let daemon = start(&config).await;
        let s = scheduler(&daemon, &config);
        s.sync_config(t0 + 30_000).await.unwrap();
        let store = daemon.store.clone();
        assert_eq!(
            store.job("digest").await.unwrap().unwrap().next_at,
            Some(t0 + 60_000),
            "a restart keeps the slot"
        );
        assert_eq!(s.tick(t0 + 30_000).await.unwrap(), Tick::default());
        assert_eq!(s.tick(t0 + 60_000).await.unwrap().fired, 1);
        tg.wait("sendMessage", 2).await;
        let runs = settled(&s, &store, t0 + 61_000).await;
        assert_eq!(
            runs.iter().map(|r| r.slot_at).collect::<Vec<_>>(),
            [t0, t0 + 60_000]
        );
        assert_eq!(
            states(&runs),
            [
                ("succeeded".into(), "posted".into()),
                ("succeeded".into(), "posted".into())
            ]
        );
        assert_eq!(sent_to(&tg, ANN), ["digest one", "digest two"]);
        let requests = llm.requests();
        assert_eq!(requests.len(), 2, "one turn per slot");
        let asked = requests[0]["messages"].to_string();
        assert!(
            asked.contains("Post the digest.") && asked.contains("2026-12-01 09:00 UTC"),
            "{asked}"
        );
        daemon.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_missed_while_stopped_follow_each_jobs_policy() {
    common::on_both_backends(|storage| async move {
        let tg = FakeTelegram::start().await;
        let llm = FakeLlm::start(
            (0..4)
                .map(|i| Reply::Json(text(&format!("run {i}"))))
                .collect(),
        )
        .await;
        let dir = tempfile::tempdir().unwrap();
        let jobs = vec![
            job("skipper", "0 * * * *", MissedPolicy::Skip, 1),
            job("once", "0 * * * *", MissedPolicy::Once, 1),
            job("all", "0 * * * *", MissedPolicy::All, 2),
        ];
        let config = config(dir.path(), &tg, &llm, &storage, jobs);
        let t0 = at("2026-12-01T09:00:00Z");
        let daemon = start(&config).await;
        let s = scheduler(&daemon, &config);
        s.sync_config(t0 - 600_000).await.unwrap();
        daemon.shutdown().await;
        // Down from before 09:00 until 12:20: slots 09, 10, 11 and 12.
        let daemon = start(&config).await;
        let s = scheduler(&daemon, &config);
        let back = at("2026-12-01T12:20:00Z");
        s.sync_config(back).await.unwrap();
        let tick = s.tick(back).await.unwrap();
        assert_eq!(
            tick.fired, 4,
            "once: 1, all: the latest 2 late and the last"
        );
        assert_eq!(tick.skipped, 4 + 3 + 1);
        let store = daemon.store.clone();
        let runs = settled(&s, &store, back).await;
        let of = |job: &str| -> Vec<(i64, String)> {
            runs.iter()
                .filter(|r| r.job_id == format!("config:{job}"))
                .map(|r| ((r.slot_at - t0) / 3_600_000, r.status.clone()))
                .collect()
        };
        assert_eq!(of("skipper"), [(3, "skipped".to_string())]);
        assert_eq!(of("once"), [(2, "skipped".into()), (3, "succeeded".into())]);
        assert_eq!(
            of("all"),
            [
                (0, "skipped".into()),
                (1, "succeeded".into()),
                (2, "succeeded".into()),
                (3, "succeeded".into())
            ]
        );
        for name in ["skipper", "once", "all"] {
            let next = store.job(name).await.unwrap().unwrap().next_at;
            assert_eq!(
                next,
                Some(at("2026-12-01T13:00:00Z")),
                "{name} waits for 13:00"
            );
        }
        assert_eq!(llm.requests().len(), 4);
        daemon.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_delivery_and_a_failed_run_are_told_to_the_owner() {
    common::on_both_backends(|storage| async move {
        let tg = FakeTelegram::start().await;
        let llm = FakeLlm::start(vec![
            Reply::Json(text("the team digest")),
            Reply::Status(
                500,
                vec![],
                json!({"error": {"message": "upstream exploded"}}).to_string(),
            ),
        ])
        .await;
        let dir = tempfile::tempdir().unwrap();
        let mut team = job("team digest", "0 9 * * *", MissedPolicy::Skip, 1);
        team.chat = TEAM.to_string();
        team.notify_chat = ANN.to_string();
        let config = config(dir.path(), &tg, &llm, &storage, vec![team]);
        let t0 = at("2026-12-01T09:00:00Z");
        let daemon = start(&config).await;
        let store = daemon.store.clone();
        let s = scheduler(&daemon, &config);
        s.sync_config(t0 - 1_000).await.unwrap();
        tg.kick(TEAM);
        assert_eq!(s.tick(t0).await.unwrap().fired, 1);
        let runs = settled(&s, &store, t0 + 1_000).await;
        assert_eq!(states(&runs), [("succeeded".into(), "failed".into())]);
        common::eventually("the owner is told", || async {
            s.tick(t0 + 1_000).await.unwrap();
            !sent_to(&tg, ANN).is_empty()
        })
        .await;
        let told = sent_to(&tg, ANN);
        assert_eq!(told.len(), 1, "{told:?}");
        assert!(
            told[0].contains("team digest") && told[0].contains("not delivered"),
            "{told:?}"
        );
        // The next day the model fails: the run failed, the owner is told.
        let t1 = t0 + 86_400_000;
        assert_eq!(s.tick(t1).await.unwrap().fired, 1);
        let runs = settled(&s, &store, t1).await;
        assert_eq!(runs[1].status, "failed");
        common::eventually("the owner is told again", || async {
            s.tick(t1).await.unwrap();
            sent_to(&tg, ANN).len() == 2
        })
        .await;
        assert!(
            sent_to(&tg, ANN)[1].contains("failed"),
            "{:?}",
            sent_to(&tg, ANN)
        );
        // Told once each.
        s.tick(t1 + 1_000).await.unwrap();
        assert_eq!(sent_to(&tg, ANN).len(), 2);
        daemon.shutdown().await;
    })
    .await;
}

/// A `cronjob` call with `args`.
fn cronjob(id: &str, args: Value) -> Reply {
    Reply::Json(calls(&[(id, "cronjob", &args.to_string())]))
}

/// The "Create" button of the newest question sent to `chat`.
fn press_create(tg: &FakeTelegram, chat: i64) {
    press_create_as(tg, chat, ANN, "Ann");
}

/// `user` (named `name`) presses *Create* on the newest question in `chat`.
fn press_create_as(tg: &FakeTelegram, chat: i64, user: i64, name: &str) {
    press_as(tg, chat, user, name, "Create");
}

/// `user` presses the button `label` of the last question asked in `chat`.
fn press_as(tg: &FakeTelegram, chat: i64, user: i64, name: &str, label: &str) {
    let asked = tg
        .calls("sendMessage")
        .into_iter()
        .rev()
        .find(|c| c.body["chat_id"].as_i64() == Some(chat) && c.body.get("reply_markup").is_some())
        .expect("a question");
    let button = asked.body["reply_markup"]["inline_keyboard"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|row| row.as_array().into_iter().flatten())
        .find(|b| b["text"] == label)
        .unwrap_or_else(|| panic!("no button {label:?} in {}", asked.body))
        .clone();
    let at = if chat < 0 {
        json!({"id": chat, "type": "supergroup", "title": "Team", "is_forum": true})
    } else {
        json!({"id": chat, "type": "private", "first_name": "Ann"})
    };
    let question = json!({
        "message_id": asked.id, "date": 1_764_000_000,
        "chat": at,
        "from": {"id": 999, "is_bot": true, "first_name": "Switchboard"},
        "text": asked.body["text"],
    });
    tg.push(FakeTelegram::press(
        user,
        name,
        &question,
        button["callback_data"].as_str().unwrap(),
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cronjob_tool_makes_a_confirmed_job_for_its_own_chat_and_it_runs() {
    common::on_both_backends(|storage| async move {
        let tg = FakeTelegram::start().await;
        // An hour away: the test fires it with a scheduler of its own.
        let later = chrono::Utc::now() + chrono::Duration::hours(1);
        let later = later.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let llm = FakeLlm::start(vec![
            // Aimed at another chat: refused by name.
            cronjob("c1", json!({"action": "create", "schedule": "every 1h", "prompt": "spam", "chat_id": "-42"})),
            cronjob("c2", json!({"action": "create", "name": "stretch", "schedule": format!("at {later}"), "prompt": "Remind Ann to stretch."})),
            Reply::Json(text("Scheduled.")),
            cronjob("c3", json!({"action": "create", "schedule": "every 2h", "prompt": "one too many"})),
            Reply::Json(text("You have too many jobs.")),
            Reply::Json(text("Time to stretch!")),
        ])
        .await;
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(dir.path(), &tg, &llm, &storage, Vec::new());
        config.cron.enabled = true;
        config.cron.max_jobs_per_user = 1;
        let daemon = start(&config).await;
        let store = daemon.store.clone();
        tg.push(FakeTelegram::message(
            ANN,
            ANN,
            "Ann",
            10,
            "remind me to stretch in a moment",
        ));
        common::eventually("the confirmation is asked", || async {
            tg.calls("sendMessage")
                .iter()
                .any(|c| c.body.get("reply_markup").is_some())
        })
        .await;
        let refused = llm.requests()[1]["messages"].to_string();
        assert!(
            refused.contains("posts to the chat it is made in"),
            "{refused}"
        );
        assert!(
            store.jobs().await.unwrap().is_empty(),
            "nothing before the press"
        );
        press_create(&tg, ANN);
        common::eventually("the job is confirmed", || async {
            sent_to(&tg, ANN).iter().any(|t| t == "Scheduled.")
        })
        .await;
        let jobs = store.jobs().await.unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(
            (jobs[0].name.as_str(), jobs[0].origin.as_str()),
            ("stretch", "chat")
        );
        assert_eq!(
            (jobs[0].chat_id.as_str(), jobs[0].owner_user.as_str()),
            ("1001", "1001")
        );
        assert_eq!(
            jobs[0].toolsets, None,
            "a direct message's job has the platform's preset"
        );
        // It keeps the message it was made from, without its words.
        let made_from: Value = serde_json::from_str(&jobs[0].owner_event).unwrap();
        assert_eq!(
            (&made_from["user_id"], &made_from["kind"], &made_from["text"]),
            (&json!("1001"), &json!("dm"), &json!(""))
        );
        // One job per person here: the next is refused before any question.
        tg.push(FakeTelegram::message(
            ANN,
            ANN,
            "Ann",
            11,
            "and every 2 hours too",
        ));
        common::eventually("the limit is said", || async {
            sent_to(&tg, ANN)
                .iter()
                .any(|t| t == "You have too many jobs.")
        })
        .await;
        let limit = llm.requests()[4]["messages"].to_string();
        assert!(limit.contains("already keeps 1 jobs"), "{limit}");
        let due = jobs[0].next_at.unwrap();
        let s = scheduler(&daemon, &config);
        assert_eq!(s.tick(due).await.unwrap().fired, 1);
        common::eventually("the job runs and posts", || async {
            sent_to(&tg, ANN).iter().any(|t| t == "Time to stretch!")
        })
        .await;
        let runs = settled(&s, &store, due).await;
        assert_eq!(states(&runs), [("succeeded".into(), "posted".into())]);
        assert_eq!(
            store.job(&jobs[0].id).await.unwrap().unwrap().next_at,
            None,
            "done"
        );
        let run_tools = common::tool_names(&llm.requests()[5]);
        assert!(
            !run_tools.contains(&"cronjob".to_string()),
            "a run makes no jobs"
        );
        daemon.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_reaches_only_its_own_jobs() {
    common::on_both_backends(|storage| async move {
        let tg = FakeTelegram::start().await;
        let llm = FakeLlm::start(vec![
            cronjob("c1", json!({"action": "pause", "job_id": "theirs"})),
            cronjob("c2", json!({"action": "list"})),
            Reply::Json(text("Nothing of yours.")),
        ])
        .await;
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path(), &tg, &llm, &storage, Vec::new());
        let daemon = start(&config).await;
        let store = daemon.store.clone();
        store
            .put_job(
                &common::stored_job("theirs", "every 1h", "telegram", "2002", "2002"),
                true,
            )
            .await
            .unwrap();
        tg.push(FakeTelegram::message(
            ANN,
            ANN,
            "Ann",
            10,
            "pause their digest",
        ));
        common::eventually("answered", || async { !sent_to(&tg, ANN).is_empty() }).await;
        let requests = llm.requests();
        let paused = requests[1]["messages"].to_string();
        assert!(
            paused.contains("in this chat (cronjob list shows them)"),
            "{paused}"
        );
        let listed = requests[2]["messages"].to_string();
        assert!(listed.contains("{\\\"jobs\\\":[]}"), "{listed}");
        assert_eq!(store.job("theirs").await.unwrap().unwrap().paused, 0);
        daemon.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemons_scheduler_fires_a_due_job_by_itself() {
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![Reply::Json(text("on the dot"))]).await;
    let dir = tempfile::tempdir().unwrap();
    let soon = chrono::Utc::now() + chrono::Duration::seconds(5);
    let soon = soon.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let jobs = vec![job("soon", &format!("at {soon}"), MissedPolicy::Once, 1)];
    let mut config = config(dir.path(), &tg, &llm, &None, jobs);
    config.cron.enabled = true;
    let daemon = start(&config).await;
    common::eventually("the job posts by itself", || async {
        sent_to(&tg, ANN) == ["on the dot"]
    })
    .await;
    let store = daemon.store.clone();
    common::eventually("and its run settles", || async {
        let runs = store.runs(None, 5).await.unwrap();
        runs.len() == 1 && runs[0].status == "succeeded" && runs[0].delivery == "posted"
    })
    .await;
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_ticking_the_same_slot_run_it_once() {
    let Some(db) = common::PgTestDb::create().await else {
        return;
    };
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![Reply::Json(text("one digest"))]).await;
    let jobs = vec![job("digest", "*/5 * * * *", MissedPolicy::Skip, 1)];
    let (da, dbb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let replica = |dir: &std::path::Path, name: &str| {
        let mut config = config(dir, &tg, &llm, &Some(db.config.clone()), jobs.clone());
        config.cluster.name = name.into();
        config
    };
    let (ca, cb) = (replica(da.path(), "a"), replica(dbb.path(), "b"));
    let a = start(&ca).await;
    let b = start(&cb).await;
    let (sa, sb) = (scheduler(&a, &ca), scheduler(&b, &cb));
    let t0 = at("2026-12-01T09:00:00Z");
    sa.sync_config(t0 - 1_000).await.unwrap();
    sb.sync_config(t0 - 1_000).await.unwrap();
    let (ta, tb) = tokio::join!(sa.tick(t0), sb.tick(t0));
    let (ta, tb) = (ta.unwrap(), tb.unwrap());
    assert_eq!(ta.fired + tb.fired, 1, "{ta:?} {tb:?}");
    common::eventually("posted", || async { sent_to(&tg, ANN) == ["one digest"] }).await;
    let runs = settled(&sa, &a.store, t0 + 1_000).await;
    assert_eq!(states(&runs), [("succeeded".into(), "posted".into())]);
    assert_eq!(llm.requests().len(), 1);
    a.shutdown().await;
    b.shutdown().await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_made_in_a_group_runs_with_the_group_toolsets() {
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![
        cronjob("c1", json!({"action": "create", "name": "team digest", "schedule": "0 9 * * 1-5", "timezone": "Europe/Berlin", "prompt": "Post the digest."})),
        Reply::Json(text("Done.")),
        Reply::Json(text("the digest")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &tg, &llm, &None, Vec::new());
    let daemon = start(&config).await;
    let store = daemon.store.clone();
    let mut mention = FakeTelegram::message(
        TEAM,
        ANN,
        "Ann",
        20,
        "@switchboard_bot post a digest here on weekdays",
    );
    mention["message"]["entities"] = json!([{"type": "mention", "offset": 0, "length": 16}]);
    tg.push(mention);
    common::eventually("the confirmation is asked in the group", || async {
        tg.calls("sendMessage").iter().any(|c| {
            c.body["chat_id"].as_i64() == Some(TEAM) && c.body.get("reply_markup").is_some()
        })
    })
    .await;
    press_create(&tg, TEAM);
    common::eventually("made", || async {
        sent_to(&tg, TEAM).iter().any(|t| t == "Done.")
    })
    .await;
    let job = store.jobs().await.unwrap().remove(0);
    assert_eq!(job.chat_id, TEAM.to_string());
    assert_eq!(job.toolsets.as_deref(), Some("safe"));
    assert_eq!(job.timezone, "Europe/Berlin");
    let s = scheduler(&daemon, &config);
    assert_eq!(s.tick(job.next_at.unwrap()).await.unwrap().fired, 1);
    common::eventually("it runs", || async {
        sent_to(&tg, TEAM).iter().any(|t| t == "the digest")
    })
    .await;
    let tools = common::tool_names(&llm.requests()[2]);
    assert!(
        tools.contains(&"read_file".to_string())
            && !tools
                .iter()
                .any(|t| ["terminal", "write_file", "patch", "process"].contains(&t.as_str())),
        "{tools:?}"
    );
    daemon.shutdown().await;
}
