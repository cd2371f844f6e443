//! A chat command runs once for the message that carried it: not again
//! when the platform delivers it twice, not for an edit of it, and not
//! again after a restart or on another replica (Discord's catch-up replays
//! messages a restarted daemon missed; an id-less `/approve` replayed would
//! decide whatever waits then).

use crate::common;
use crate::sessions_manager::{dm, resets_the_repo, setup, setup_with};

use common::fake_llm::FakeLlm;
use switchboard::sessions::Submitted;

/// A decision command runs for its message once: delivered again (Slack's
/// `message` and `app_mention` of one message, a retry) it is a duplicate,
/// and an edit of it is not run (it would decide the next request).
#[tokio::test]
async fn a_decision_command_runs_once_for_its_message() {
    let llm = FakeLlm::start(resets_the_repo()).await;
    let s = setup(&llm).await;
    s.manager.submit(dm("1", "p1", "reset")).await.unwrap();
    s.adapter
        .until(|a| a.shown.lock().unwrap().first().cloned())
        .await;
    let mut edited = dm("1", "p2", "/deny");
    edited.revision = switchboard::platform::Revision::Edited;
    assert!(matches!(
        s.manager.submit(edited).await.unwrap(),
        Submitted::Ignored(_)
    ));
    let approve = dm("1", "p3", "/approve");
    assert_eq!(
        s.manager.submit(approve.clone()).await.unwrap(),
        Submitted::Command
    );
    assert_eq!(
        s.manager.submit(approve).await.unwrap(),
        Submitted::Duplicate
    );
    let sent = s.adapter.wait(2).await;
    assert!(sent[0].1.starts_with("Done: approved"), "{sent:?}");
    assert_eq!(sent[1].1, "ran it");
}

/// The run is claimed in storage: a second gateway on the same database
/// (the daemon restarted, or another replica) takes the same message as a
/// duplicate, and runs the next one.
#[tokio::test]
async fn a_command_runs_once_across_a_restart() {
    let llm = FakeLlm::start(Vec::new()).await;
    let first = setup(&llm).await;
    assert_eq!(
        first.manager.submit(dm("1", "c1", "/help")).await.unwrap(),
        Submitted::Command
    );
    let url = format!("sqlite://{}/sb.db", first.dir.path().display());
    let second = setup_with(&llm, |c| c.storage.url = url, |_| {}).await;
    assert_eq!(
        second.manager.submit(dm("1", "c1", "/help")).await.unwrap(),
        Submitted::Duplicate
    );
    assert_eq!(
        second.manager.submit(dm("1", "c2", "/help")).await.unwrap(),
        Submitted::Command
    );
    assert_eq!(second.adapter.wait(1).await.len(), 1);
}
