//! A review cut off by SIGKILL: GitHub stored the review (GitLab the
//! first of its discussions) but the answer never reached the daemon. The
//! restarted daemon sends what the killed one owed, finds what was posted
//! by the key it carries, and posts the rest once; the model is not asked
//! again.

use std::time::Duration;

use serde_json::json;

use super::{Daemon, send, write_config_with};
use crate::common::fake_forge::{FakeForge, Pull};
use crate::common::fake_gitlab::{FakeGitlab, MergeRequest};
use crate::common::fake_llm::{FakeLlm, Reply, calls, text};

const PATCH: &str = "@@ -1,3 +1,4 @@\n pub fn add(a: u32, b: u32) -> u32 {\n-    a + b\n+    let sum = a + b;\n+    sum\n }";

async fn until(what: &str, check: impl Fn() -> bool) {
    crate::common::eventually_within(
        what,
        Duration::from_secs(30),
        || std::future::ready(check()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_whose_answer_a_kill_lost_is_posted_once_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let forge = FakeForge::start().await;
    let pr = crate::common::pr_push(1, "marker-00");
    let payload: serde_json::Value = serde_json::from_slice(&pr).unwrap();
    let repo = payload["repository"]["full_name"]
        .as_str()
        .unwrap()
        .to_string();
    let number = payload["pull_request"]["number"].as_u64().unwrap();
    let head = payload["pull_request"]["head"]["sha"]
        .as_str()
        .unwrap_or("6dcb09b5b57875f334f61aebed695e2e4193db5e")
        .to_string();
    forge.set_pull(
        number,
        Pull {
            base: "9049f1265b7d61be4a8904a9a27120d2064dab3b".into(),
            head,
            files: vec![
                json!({"filename": "src/lib.rs", "status": "modified", "additions": 2,
                               "deletions": 1, "changes": 3, "patch": PATCH}),
            ],
        },
    );
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[("c1", "forge_diff", "{}")])),
        Reply::Json(text(
        "One point.\n\n```findings\n[{\"path\": \"src/lib.rs\", \"line\": 3, \"body\": \"Return the sum directly.\"}]\n```",
    )),
    ])
    .await;
    let storage = format!("sqlite://{}/crash.db", dir.path().display());
    let more = format!("[webhook.routes.forge]\napi_url = \"{}\"\n", forge.url);
    write_config_with(dir.path(), &storage, &llm.url, &forge.url, &more);
    let client = switchboard::http::client::client();
    let reviews_path = format!("/repos/{repo}/pulls/{number}/reviews");

    // GitHub stores the review and its answer is held back; the daemon
    // dies waiting for it.
    forge.hold_after(Some(&reviews_path));
    let first = Daemon::start(dir.path());
    assert_eq!(
        send(&client, &first.addr, "kill-1", pr.clone()).await,
        Some(202)
    );
    until("the review on GitHub", || forge.reviews().len() == 1).await;
    first.kill();
    forge.hold_after(None);

    let second = Daemon::start(dir.path());
    until("the review's status", || {
        forge.statuses().iter().any(|s| s["state"] != "pending")
    })
    .await;
    let posts = forge
        .seen()
        .iter()
        .filter(|s| s.method == "POST" && s.path == reviews_path)
        .count();
    assert_eq!(posts, 1, "posted once, found again after the restart");
    assert_eq!(forge.reviews().len(), 1);
    assert_eq!(forge.review_comments().len(), 1);
    assert_eq!(forge.issue_comments().len(), 1, "one summary");
    assert_eq!(
        llm.requests().len(),
        2,
        "the turn (the diff read, the answer) was not run again"
    );
    // A redelivery of the same event changes nothing.
    assert_eq!(send(&client, &second.addr, "kill-1", pr).await, Some(200));
    // A quiet period: no second review comes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(forge.reviews().len(), 1);
    second.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_discussions_cut_by_a_kill_are_each_posted_once_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let gitlab = FakeGitlab::start().await;
    let head = "da1560886d4f094c3e6c9ef40349f7d38b5d27d7";
    gitlab.set_mr(
        4,
        MergeRequest {
            base: "ae73cb07c9eeaf35924a10f713b364d32b2dd34f".into(),
            start: "ae73cb07c9eeaf35924a10f713b364d32b2dd34f".into(),
            head: head.into(),
            diffs: vec![
                json!({"old_path": "src/lib.rs", "new_path": "src/lib.rs", "new_file": false,
                               "renamed_file": false, "deleted_file": false, "diff": PATCH}),
            ],
        },
    );
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[("c1", "forge_diff", "{}")])),
        Reply::Json(text(
        "Two points.\n\n```findings\n[{\"path\": \"src/lib.rs\", \"line\": 2, \"body\": \"Name it total.\"}, {\"path\": \"src/lib.rs\", \"line\": 3, \"body\": \"Return the sum directly.\"}]\n```",
    )),
    ])
    .await;
    let storage = format!("sqlite://{}/crash.db", dir.path().display());
    // A second route, GitLab's (the variables' names are only names).
    let more = format!(
        "[[webhook.routes]]\nname = \"gitlab\"\npath = \"/webhooks/gitlab\"\nscheme = \"gitlab\"\n\
         secret_env = \"GITHUB_WEBHOOK_SECRET\"\n[webhook.routes.forge]\napi_url = \"{}\"\ntoken_env = \"GITHUB_TOKEN\"\n",
        gitlab.url
    );
    write_config_with(dir.path(), &storage, &llm.url, &gitlab.url, &more);
    let client = switchboard::http::client::client();
    let event = serde_json::to_vec(&json!({
        "object_kind": "merge_request", "event_type": "merge_request",
        "user": {"id": 1, "name": "Ann", "username": "ann"},
        "project": {"id": 15, "path_with_namespace": "grp/app"},
        "object_attributes": {"iid": 4, "action": "open", "title": "Add", "description": "",
                              "source_branch": "f", "target_branch": "main",
                              "url": "https://gitlab.example.com/grp/app/-/merge_requests/4",
                              "last_commit": {"id": head}},
    }))
    .unwrap();
    let post = |addr: String, event: Vec<u8>| {
        let client = client.clone();
        async move {
            client
                .post(format!("http://{addr}/webhooks/gitlab"))
                .header("x-gitlab-token", super::SECRET)
                .header("x-gitlab-event", "Merge Request Hook")
                .header("x-gitlab-event-uuid", "gl-kill-1")
                .header("content-type", "application/json")
                .body(event)
                .send()
                .await
                .map(|r| r.status().as_u16())
                .ok()
        }
    };

    gitlab.hold_after(Some("/merge_requests/4/discussions"));
    let first = Daemon::start(dir.path());
    assert_eq!(post(first.addr.clone(), event.clone()).await, Some(202));
    until("the first discussion on GitLab", || {
        gitlab.discussions().len() == 1
    })
    .await;
    first.kill();
    gitlab.hold_after(None);

    let second = Daemon::start(dir.path());
    until("the review's status", || {
        gitlab.statuses().iter().any(|s| s["state"] != "running")
    })
    .await;
    let posts = gitlab
        .seen()
        .iter()
        .filter(|s| s.method == "POST" && s.path.ends_with("/merge_requests/4/discussions"))
        .count();
    assert_eq!(posts, 2, "each discussion posted once");
    assert_eq!(gitlab.discussions().len(), 2);
    assert_eq!(gitlab.notes().len(), 1, "one summary note");
    assert_eq!(
        llm.requests().len(),
        2,
        "the turn (the diff read, the answer) was not run again"
    );
    second.stop();
}
