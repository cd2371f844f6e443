//! "Tell me when the build is done": a background process started with
//! `notify_on_exit` (or `watch` patterns) is reported into its chat as a
//! turn of its own, and a restart still reports the processes it was
//! watching: the one that ended meanwhile, and the one that outlived the
//! previous run once it ends. Only harmless commands run.

use crate::common;

use std::time::Duration;

use common::fake_llm::{FakeLlm, Reply, calls, text};
use common::fake_telegram::{BOT_USERNAME, FakeTelegram};
use common::in_process::{start_telegram as start, telegram_config};
use serde_json::{Value, json};
use switchboard::config::Config;
use switchboard::store::{ProcessWatch, Store};

const ANN: i64 = 1001;
const KEY: &str = "telegram:dm:1001";

fn config(dir: &std::path::Path, tg: &FakeTelegram, llm: &FakeLlm) -> Config {
    telegram_config(dir, tg, &llm.url, None, ANN)
}

fn sent(tg: &FakeTelegram) -> Vec<String> {
    tg.texts()
}

/// What the model was told in the newest message of `request`.
fn told(request: &Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m["content"].to_string())
        .unwrap_or_default()
}

fn start_call(args: Value) -> Reply {
    Reply::Json(calls(&[("c1", "process", &args.to_string())]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_started_to_notify_is_reported_into_its_chat_when_it_ends() {
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![
        start_call(json!({
            "action": "start",
            "command": "echo compiling; sleep 0.3; echo 'error[E0308]: mismatched types'; sleep 0.3; echo 'build finished'; exit 3",
            "notify_on_exit": true,
            "watch": ["ERROR["],
        })),
        Reply::Json(text("Started the build; I'll tell you when it is done.")),
        Reply::Json(text("The build printed an error.")),
        Reply::Json(text("The build is done: it failed with code 3.")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = start(&config(dir.path(), &tg, &llm)).await;
    tg.push(FakeTelegram::message(
        ANN,
        ANN,
        "Ann",
        10,
        "build it and tell me when it's done",
    ));
    tg.wait("sendMessage", 3).await;
    assert_eq!(
        sent(&tg),
        [
            "Started the build; I'll tell you when it is done.",
            "The build printed an error.",
            "The build is done: it failed with code 3.",
        ]
    );
    let requests = llm.requests();
    assert_eq!(
        requests.len(),
        4,
        "the start turn, then one turn per report"
    );
    let watched = told(&requests[2]);
    assert!(
        watched.contains("printed a line with \\\"error[\\\"")
            && watched.contains("mismatched types"),
        "{watched}"
    );
    let exited = told(&requests[3]);
    assert!(exited.contains("exited with code 3 after"), "{exited}");
    assert!(
        exited.contains("build finished"),
        "the last output: {exited}"
    );
    let store = &daemon.store;
    assert!(
        store.process_watches().await.unwrap().is_empty(),
        "told, so forgotten"
    );
    assert!(store.inbox_pending(10).await.unwrap().is_empty());
    daemon.shutdown().await;
}

/// With `busy_input_mode = "steer"`, a report that arrives while its
/// starter's turn still runs is a turn of its own afterwards: it is not
/// steered into the running turn as if the person had written it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_during_its_starters_turn_is_not_steered_into_it() {
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![
        start_call(json!({"action": "start", "command": "true", "notify_on_exit": true})),
        // Still thinking when the report comes.
        Reply::Delayed(
            Duration::from_millis(1500),
            Box::new(Reply::Json(text("Started."))),
        ),
        Reply::Json(text("It has ended.")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path(), &tg, &llm);
    config.agent.busy_input_mode = switchboard::config::BusyInputMode::Steer;
    let daemon = start(&config).await;
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "run it"));
    common::eventually("both answered", || async {
        sent(&tg).iter().any(|t| t == "It has ended.")
    })
    .await;
    assert_eq!(sent(&tg), ["Started.", "It has ended."]);
    let requests = llm.requests();
    assert_eq!(requests.len(), 3, "the report is a turn of its own");
    assert!(
        told(&requests[2]).contains("exited with code 0"),
        "{}",
        told(&requests[2])
    );
    daemon.shutdown().await;
}

/// The model starts a process that runs until the file `go` appears in
/// its workspace (`started` shows it runs), says so, answers `between`,
/// then answers the report.
fn until_go(between: &[&str]) -> Vec<Reply> {
    let mut replies = vec![
        start_call(json!({
            "action": "start",
            "command": "touch started; while [ ! -e go ]; do sleep 0.05; done",
            "notify_on_exit": true,
        })),
        Reply::Json(text("Started; I will tell you when it ends.")),
    ];
    replies.extend(between.iter().map(|t| Reply::Json(text(t))));
    replies.push(Reply::Json(text("Your job has ended.")));
    replies
}

/// In a chat several people share, a process reports as the message whose
/// turn started it (from its sender), not as whoever wrote last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_in_a_shared_chat_reports_as_the_message_that_started_it() {
    const BOB: i64 = 1002;
    const GROUP: i64 = -100_555;
    let mention = |from: i64, name: &str, id: i64, words: &str| {
        let text = format!("@{BOT_USERNAME} {words}");
        let mut msg = FakeTelegram::message(GROUP, from, name, id, &text);
        msg["message"]["entities"] =
            json!([{"type": "mention", "offset": 0, "length": BOT_USERNAME.len() + 1}]);
        msg
    };
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(until_go(&["Hello Bob."])).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path(), &tg, &llm);
    config.telegram.allowed_users = vec![ANN, BOB];
    config.sessions.group_sessions_per_user = false;
    let workspace = switchboard::tools::workspace::session_path(
        &config.agent.workspace,
        &format!("telegram:group:{GROUP}"),
    );
    let daemon = start(&config).await;
    tg.push(mention(ANN, "Ann", 10, "start the job and tell me"));
    common::eventually("Ann answered", || async {
        sent(&tg).iter().any(|t| t.starts_with("Started"))
    })
    .await;
    tg.push(mention(BOB, "Bob", 11, "hello"));
    common::eventually("Bob answered", || async {
        sent(&tg).iter().any(|t| t == "Hello Bob.")
    })
    .await;
    assert!(workspace.join("started").exists(), "the job runs");
    std::fs::write(workspace.join("go"), "").unwrap();
    common::eventually("the report answered", || async {
        sent(&tg).iter().any(|t| t == "Your job has ended.")
    })
    .await;
    let rows = daemon.store.inbox_latest("telegram", 10).await.unwrap();
    let report = rows
        .iter()
        .find(|r| r.dedupe_key.starts_with("telegram:process:"))
        .expect("the report is an event of the inbox");
    let event: Value = serde_json::from_str(&report.payload).unwrap();
    assert_eq!(event["user_id"], ANN.to_string(), "{event}");
    assert_eq!(event["chat_id"], GROUP.to_string());
    daemon.shutdown().await;
}

/// A report acts as the person who started the process, so only while
/// they may still reach the agent: unpaired meanwhile, they get no turn
/// from it, and the watch is cleared all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_whose_starter_lost_access_reports_nothing() {
    const CID: i64 = 1003;
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(until_go(&[])).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &tg, &llm);
    let workspace =
        switchboard::tools::workspace::session_path(&config.agent.workspace, "telegram:dm:1003");
    let daemon = start(&config).await;
    tg.push(FakeTelegram::message(CID, CID, "Cid", 10, "hello"));
    let store = &daemon.store;
    common::eventually("Cid asked for a code", || async {
        !store
            .pairing_requests_of("telegram", &CID.to_string())
            .await
            .unwrap()
            .is_empty()
    })
    .await;
    let code = store
        .pairing_requests_of("telegram", &CID.to_string())
        .await
        .unwrap()
        .remove(0)
        .code;
    switchboard::sessions::access::approve_code(store, "telegram", &code, "owner")
        .await
        .unwrap();
    tg.push(FakeTelegram::message(
        CID,
        CID,
        "Cid",
        11,
        "start the job and tell me",
    ));
    common::eventually("Cid answered", || async {
        sent(&tg).iter().any(|t| t.starts_with("Started"))
    })
    .await;
    common::eventually("the process watched", || async {
        !store.process_watches().await.unwrap().is_empty()
    })
    .await;
    assert!(
        store
            .revoke_pairing("telegram", &CID.to_string())
            .await
            .unwrap()
    );
    assert!(workspace.join("started").exists(), "the job runs");
    std::fs::write(workspace.join("go"), "").unwrap();
    common::eventually("the report decided and the watch cleared", || async {
        store.process_watches().await.unwrap().is_empty()
    })
    .await;
    assert_eq!(llm.requests().len(), 2, "no turn for the report");
    assert!(
        !sent(&tg).iter().any(|t| t == "Your job has ended."),
        "{:?}",
        sent(&tg)
    );
    daemon.shutdown().await;
}

/// `/proc/<pid>/stat` field 22: when `pid` started, in ticks since boot.
fn start_tick(pid: u32) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_reports_the_processes_the_previous_run_was_watching() {
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::responding(|request| {
        let told = told(request);
        Reply::Json(text(if told.contains("while the gateway was down") {
            "Your tests stopped while I was down."
        } else if told.contains("has ended; its exit code is unknown") {
            "Your server has stopped."
        } else {
            "Hello."
        }))
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &tg, &llm);
    let daemon = start(&config).await;
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "hi"));
    tg.wait("sendMessage", 1).await;
    daemon.shutdown().await;

    // What the previous run was watching: one process that is gone, and
    // one that outlived it (the test's own harmless child).
    let mut survivor = std::process::Command::new("sleep")
        .arg("5")
        .spawn()
        .unwrap();
    let store = Store::open(&config.storage).await.unwrap();
    // Both started by the turn that answered "hi".
    let origin = store.inbox_latest("telegram", 10).await.unwrap()[0]
        .payload
        .clone();
    let watch = |id: &str, command: &str, pid: u32, pid_start: i64| ProcessWatch {
        id: id.into(),
        session_key: KEY.into(),
        command: command.into(),
        pid: i64::from(pid),
        pid_start,
        started_at: switchboard::store::now_ms(),
        origin: origin.clone(),
    };
    let mut ended = std::process::Command::new("true").spawn().unwrap();
    ended.wait().unwrap();
    let gone = ended.id();
    // Kept by a replica from before watches kept their event: addressed
    // as the session's latest message.
    let mut unaddressed = watch("proc_gone", "cargo test", gone, 1);
    unaddressed.origin.clear();
    store.watch_process(&unaddressed).await.unwrap();
    store
        .watch_process(&watch(
            "proc_alive",
            "sleep 5",
            survivor.id(),
            start_tick(survivor.id()),
        ))
        .await
        .unwrap();
    store.close().await;

    let daemon = start(&config).await;
    tg.wait("sendMessage", 2).await;
    assert_eq!(sent(&tg)[1], "Your tests stopped while I was down.");
    assert_eq!(sent(&tg).len(), 2, "the survivor is still running");
    tokio::task::spawn_blocking(move || survivor.wait())
        .await
        .unwrap()
        .unwrap();
    tg.wait("sendMessage", 3).await;
    assert_eq!(sent(&tg)[2], "Your server has stopped.");
    common::eventually("both watches forgotten", || async {
        daemon
            .store
            .process_watches()
            .await
            .is_ok_and(|w| w.is_empty())
    })
    .await;
    // A quiet period: neither is reported again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sent(&tg).len(), 3, "each reported once");
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_the_gateway_stops_is_reported_after_the_restart() {
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![
        start_call(json!({"action": "start", "command": "sleep 30", "notify_on_exit": true})),
        Reply::Json(text("Started.")),
        Reply::Json(text("Your job was stopped by a restart of the gateway.")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &tg, &llm);
    let daemon = start(&config).await;
    tg.push(FakeTelegram::message(
        ANN,
        ANN,
        "Ann",
        10,
        "run the long job",
    ));
    tg.wait("sendMessage", 1).await;
    daemon.shutdown().await;
    assert_eq!(llm.requests().len(), 2, "nothing answered while stopping");

    let daemon = start(&config).await;
    tg.wait("sendMessage", 2).await;
    assert_eq!(
        sent(&tg)[1],
        "Your job was stopped by a restart of the gateway."
    );
    let report = told(&llm.requests()[2]);
    assert!(
        report.contains("was stopped because the gateway shut down"),
        "{report}"
    );
    assert!(daemon.store.process_watches().await.unwrap().is_empty());
    daemon.shutdown().await;
}
