//! Jobs act for the person who made them (the message they were made
//! from kept with them): only while that person may still reach the
//! agent, with the roles that message had; in a shared session, for the
//! sender of the turn that asks. A configured job acts for no one.

use super::*;

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
    const BOB: i64 = 1002;
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![
        Reply::Json(text("Hello Ann.")),
        cronjob("c1", json!({"action": "create", "name": "standup", "schedule": "0 9 * * 1-5", "prompt": "Post the standup."})),
        Reply::Json(text("Done.")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path(), &tg, &llm, &None, Vec::new());
    config.telegram.allowed_users = vec![ANN, BOB];
    config.sessions.group_sessions_per_user = false;
    let daemon = start(&config).await;
    let mention = |from: i64, name: &str, id: i64, words: &str| {
        let mut msg =
            FakeTelegram::message(TEAM, from, name, id, &format!("@switchboard_bot {words}"));
        msg["message"]["entities"] = json!([{"type": "mention", "offset": 0, "length": 16}]);
        msg
    };
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
