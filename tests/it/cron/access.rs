//! Jobs act for the person who made them (the message they were made
//! from kept with them): only while that person may still reach the
//! agent, with the roles that message had; in a shared session, for the
//! sender of the turn that asks, and another member changes it only with
//! its owner's leave. A configured job acts for no one.

use super::*;

/// Bob, beside Ann on the allowlist.
const BOB: i64 = 1002;

/// A daemon in `dir` whose group chat `TEAM` is one session Ann and Bob
/// share.
async fn shared_group(dir: &std::path::Path, tg: &FakeTelegram, llm: &FakeLlm) -> InProcess {
    let mut config = config(dir, tg, llm, &None, Vec::new());
    config.telegram.allowed_users = vec![ANN, BOB];
    config.sessions.group_sessions_per_user = false;
    start(&config).await
}

/// `words` from `from` to the bot in the group chat `TEAM`, mentioning it.
fn mention(from: i64, name: &str, id: i64, words: &str) -> Value {
    let mut msg = FakeTelegram::message(TEAM, from, name, id, &format!("@switchboard_bot {words}"));
    msg["message"]["entities"] = json!([{"type": "mention", "offset": 0, "length": 16}]);
    msg
}

/// A job made in a chat runs as the person who made it, so only while
/// they may still reach the agent: off the allowlist since, their job is
/// refused (once, however many of its slots are due), paused and its chat
/// told once; the other owner's job runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_owner_lost_access_does_not_run() {
    const CID: &str = "1003";
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![Reply::Json(text("the digest"))]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &tg, &llm, &None, Vec::new());
    let daemon = start(&config).await;
    let store = daemon.store.clone();
    let anns = common::stored_job("anns", "0 9 * * *", "telegram", &ANN.to_string(), "1001");
    // Every minute, six slots due at once, all to be run: still refused
    // once.
    let mut cids = common::stored_job("cids", "* * * * *", "telegram", &TEAM.to_string(), CID);
    cids.missed = "all".into();
    cids.missed_limit = 5;
    cids.next_at = anns.next_at.map(|at| at - 5 * 60_000);
    store.put_job(&anns, true).await.unwrap();
    store.put_job(&cids, true).await.unwrap();
    let s = scheduler(&daemon, &config);
    let runs = settled(&s, &store, anns.next_at.unwrap()).await;
    let of = |id: &str| runs.iter().find(|r| r.job_id == id).expect("a run").clone();
    assert_eq!(
        runs.iter().filter(|r| r.job_id == "cids").count(),
        1,
        "{runs:?}"
    );
    assert_eq!(of("anns").status, "succeeded", "{runs:?}");
    assert_eq!(of("cids").status, "refused", "{runs:?}");
    assert_eq!(
        of("cids").detail.as_deref(),
        Some(switchboard::cron::OWNER_GONE)
    );
    assert_eq!(store.job("cids").await.unwrap().unwrap().paused, 1);
    assert_eq!(sent_to(&tg, ANN), ["the digest"]);
    common::eventually("the job's chat told", || async {
        sent_to(&tg, TEAM).len() == 1
    })
    .await;
    assert!(
        sent_to(&tg, TEAM)[0].contains(switchboard::cron::OWNER_GONE),
        "{:?}",
        sent_to(&tg, TEAM)
    );
    assert_eq!(llm.requests().len(), 1, "no turn for the job of Cid");
    daemon.shutdown().await;
}

/// In a group session several people share, a job is made for the one
/// whose message asks for it: Bob, writing after Ann opened the
/// conversation, is asked to confirm, and owns the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_shared_group_a_job_belongs_to_whoever_asked_for_it() {
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![
        Reply::Json(text("Hello Ann.")),
        cronjob("c1", json!({"action": "create", "name": "standup", "schedule": "0 9 * * 1-5", "prompt": "Post the standup."})),
        Reply::Json(text("Done.")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = shared_group(dir.path(), &tg, &llm).await;
    tg.push(mention(ANN, "Ann", 20, "hello"));
    common::eventually("Ann answered", || async {
        sent_to(&tg, TEAM).iter().any(|t| t == "Hello Ann.")
    })
    .await;
    tg.push(mention(
        BOB,
        "Bob",
        21,
        "post a standup reminder on weekdays",
    ));
    common::eventually("the confirmation is asked", || async {
        tg.calls("sendMessage").iter().any(|c| {
            c.body["chat_id"].as_i64() == Some(TEAM) && c.body.get("reply_markup").is_some()
        })
    })
    .await;
    press_create_as(&tg, TEAM, BOB, "Bob");
    common::eventually("made", || async {
        sent_to(&tg, TEAM).iter().any(|t| t == "Done.")
    })
    .await;
    let job = daemon.store.jobs().await.unwrap().remove(0);
    assert_eq!(job.owner_user, BOB.to_string());
    let made_from: Value = serde_json::from_str(&job.owner_event).unwrap();
    assert_eq!(made_from["user_id"], BOB.to_string());
    daemon.shutdown().await;
}

/// A job is paused, resumed or deleted only once its owner allows it: in a
/// shared chat, Ann's turn asks to delete Bob's job; her own press on the
/// question counts for nothing, Bob's *Deny* keeps the job. Her next turn
/// asks to pause it, Bob allows, and it is paused. Bob's own turn asks to
/// delete it: he is asked too, and it goes once he allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_changes_only_once_its_owner_allows_it() {
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![
        cronjob("c1", json!({"action": "create", "name": "standup", "schedule": "0 9 * * 1-5", "prompt": "Post the standup."})),
        Reply::Json(text("Made.")),
        cronjob("c2", json!({"action": "delete", "job_id": "standup"})),
        Reply::Json(text("Bob kept it.")),
        cronjob("c3", json!({"action": "pause", "job_id": "standup"})),
        Reply::Json(text("Paused.")),
        cronjob("c4", json!({"action": "delete", "job_id": "standup"})),
        Reply::Json(text("Deleted.")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = shared_group(dir.path(), &tg, &llm).await;
    let questions = || {
        tg.calls("sendMessage")
            .into_iter()
            .filter(|c| {
                c.body["chat_id"].as_i64() == Some(TEAM) && c.body.get("reply_markup").is_some()
            })
            .count()
    };
    tg.push(mention(
        BOB,
        "Bob",
        20,
        "post a standup reminder on weekdays",
    ));
    common::eventually("Bob is asked to confirm", || async { questions() == 1 }).await;
    press_create_as(&tg, TEAM, BOB, "Bob");
    common::eventually("made", || async {
        sent_to(&tg, TEAM).iter().any(|t| t == "Made.")
    })
    .await;
    let job = daemon
        .store
        .job("standup")
        .await
        .unwrap()
        .expect("Bob's job");

    tg.push(mention(ANN, "Ann", 21, "delete Bob's standup job"));
    common::eventually("Bob is asked whether Ann may delete it", || async {
        questions() == 2
    })
    .await;
    let asked = tg
        .calls("sendMessage")
        .into_iter()
        .rev()
        .find(|c| c.body.get("reply_markup").is_some())
        .unwrap();
    let words = asked.body["text"].as_str().unwrap_or_default();
    assert!(
        words.contains("delete") && words.contains("standup"),
        "{words}"
    );
    press_as(&tg, TEAM, ANN, "Ann", "Allow");
    common::eventually("Ann's press refused", || async {
        tg.calls("answerCallbackQuery").iter().any(|c| {
            c.body["text"]
                .as_str()
                .is_some_and(|t| t.contains("Only the person asked"))
        })
    })
    .await;
    assert!(
        daemon.store.job(&job.id).await.unwrap().is_some(),
        "still there"
    );
    press_as(&tg, TEAM, BOB, "Bob", "Deny");
    common::eventually("Ann's turn ends", || async {
        sent_to(&tg, TEAM).iter().any(|t| t == "Bob kept it.")
    })
    .await;
    let kept = daemon
        .store
        .job(&job.id)
        .await
        .unwrap()
        .expect("Bob denied the deletion");
    assert_eq!(kept.paused, 0);
    let told = llm.requests()[3]["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    assert!(told.contains("did not allow"), "the model was told: {told}");

    tg.push(mention(ANN, "Ann", 22, "pause Bob's standup job"));
    common::eventually("Bob is asked again", || async { questions() == 3 }).await;
    press_as(&tg, TEAM, BOB, "Bob", "Allow");
    common::eventually("paused", || async {
        sent_to(&tg, TEAM).iter().any(|t| t == "Paused.")
    })
    .await;
    assert_eq!(daemon.store.job(&job.id).await.unwrap().unwrap().paused, 1);

    // In his own turn too: words in what the turn read do not delete it
    // without his press.
    tg.push(mention(BOB, "Bob", 23, "delete my standup job"));
    common::eventually("Bob is asked about his own job", || async {
        questions() == 4
    })
    .await;
    assert!(
        daemon.store.job(&job.id).await.unwrap().is_some(),
        "not before his press"
    );
    press_as(&tg, TEAM, BOB, "Bob", "Allow");
    common::eventually("deleted", || async {
        sent_to(&tg, TEAM).iter().any(|t| t == "Deleted.")
    })
    .await;
    assert!(daemon.store.job(&job.id).await.unwrap().is_none());
    daemon.shutdown().await;
}

/// The jobs a person keeps are counted again once they confirm one: Ann,
/// allowed one job, is asked to confirm; meanwhile another conversation of
/// hers made one; her press then makes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_job_over_the_persons_limit_is_not_made() {
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![
        cronjob("c1", json!({"action": "create", "name": "stretch", "schedule": "every 1h", "prompt": "Remind Ann to stretch."})),
        Reply::Json(text("Not made.")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path(), &tg, &llm, &None, Vec::new());
    config.cron.max_jobs_per_user = 1;
    let daemon = start(&config).await;
    tg.push(FakeTelegram::message(
        ANN,
        ANN,
        "Ann",
        10,
        "remind me to stretch every hour",
    ));
    common::eventually("the confirmation is asked", || async {
        tg.calls("sendMessage")
            .iter()
            .any(|c| c.body.get("reply_markup").is_some())
    })
    .await;
    let other = common::stored_job(
        "elsewhere",
        "0 9 * * *",
        "telegram",
        &TEAM.to_string(),
        "1001",
    );
    daemon.store.put_job(&other, true).await.unwrap();
    press_create(&tg, ANN);
    common::eventually("the turn ends", || async {
        sent_to(&tg, ANN).iter().any(|t| t == "Not made.")
    })
    .await;
    let told = llm.requests()[1]["messages"].to_string();
    assert!(told.contains("already keeps 1 jobs"), "{told}");
    let jobs = daemon.store.jobs().await.unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].id, "elsewhere");
    daemon.shutdown().await;
}

/// A job keeps the message it was made from and is checked as that
/// message would be now: on Discord, which lets people in by role, Bob's
/// message had the allowed role and his job runs; Eve's had none, she is on
/// no allowlist, and her job is refused, as is one whose message cannot
/// be read (the roles of a job kept without its message are unknown, and
/// never held against it).
#[tokio::test]
async fn a_job_is_checked_with_the_roles_its_message_had() {
    use common::discord_harness as dh;
    use switchboard::platform::{ChatKind, InboundEvent};
    let s = dh::start(vec![Reply::Json(text("the digest"))], |c| {
        c.cron.enabled = false;
    })
    .await;
    let store = s.daemon.store.clone();
    let made_by = |id: &str, user: &str, roles: &[&str]| {
        let mut job = common::stored_job(id, "0 9 * * *", "discord", dh::CHANNEL, user);
        job.owner_event = serde_json::to_string(&InboundEvent {
            platform: "discord".into(),
            kind: ChatKind::Group,
            chat_id: dh::CHANNEL.into(),
            thread_id: None,
            user_id: user.into(),
            user_name: user.into(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
            text: String::new(),
            event_id: format!("made-{id}"),
            message_id: None,
            mentioned: true,
            from_bot: false,
            in_thread: false,
            attachments: Vec::new(),
            revision: Default::default(),
        })
        .unwrap();
        job
    };
    let bobs = made_by("bobs", dh::BOB, &["77"]);
    store.put_job(&bobs, true).await.unwrap();
    let eves = made_by("eves", dh::EVE, &[]);
    store.put_job(&eves, true).await.unwrap();
    // A message that cannot be read vouches for no one.
    let mut unread = made_by("unread", dh::BOB, &["77"]);
    unread.owner_event = "{\"kind\": \"lobby\"}".into();
    unread.next_at = eves.next_at;
    store.put_job(&unread, true).await.unwrap();
    let jobs = scheduler(&s.daemon, &s.daemon.gateway.config);
    let runs = settled(&jobs, &store, bobs.next_at.max(eves.next_at).unwrap()).await;
    let status = |id: &str| {
        runs.iter()
            .find(|r| r.job_id == id)
            .map(|r| r.status.clone())
    };
    assert_eq!(status("bobs").as_deref(), Some("succeeded"), "{runs:?}");
    assert_eq!(status("eves").as_deref(), Some("refused"), "{runs:?}");
    assert_eq!(status("unread").as_deref(), Some("refused"), "{runs:?}");
    assert_eq!(s.llm.requests().len(), 1, "one turn: Bob's job's");
    s.daemon.shutdown().await;
}

/// A job from the configuration acts for no one: a process its run
/// starts reports back into the job's chat though no person named
/// `cron` is on the allowlist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_a_configured_job_started_reports_back() {
    let tg = FakeTelegram::start().await;
    let args = json!({"action": "start", "command": "true", "notify_on_exit": true});
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[("c1", "process", &args.to_string())])),
        Reply::Json(text("Started the check.")),
        Reply::Json(text("The check has ended.")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let jobs = vec![job("check", "0 9 * * *", MissedPolicy::Skip, 1)];
    let config = config(dir.path(), &tg, &llm, &None, jobs);
    let daemon = start(&config).await;
    let s = scheduler(&daemon, &config);
    s.sync_config(switchboard::store::now_ms()).await.unwrap();
    let job = daemon.store.jobs().await.unwrap().remove(0);
    assert_eq!(job.origin, "config");
    assert_eq!(s.tick(job.next_at.unwrap()).await.unwrap().fired, 1);
    common::eventually("the report answered", || async {
        sent_to(&tg, ANN)
            .iter()
            .any(|t| t == "The check has ended.")
    })
    .await;
    assert_eq!(
        sent_to(&tg, ANN),
        ["Started the check.", "The check has ended."]
    );
    daemon.shutdown().await;
}
