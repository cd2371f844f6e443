//! Which runs a repository's settings let happen, and what a review does
//! not raise again, against the fake GitHub and GitLab: drafts, bots'
//! changes, other branches and untriaged jobs left alone unless someone
//! asks; a description on open; a finding its author resolved or answered
//! "won't fix" kept off the diff after a push; the findings of an answer
//! asked again merged with the last; lock files skipped by default.

use serde_json::{Value, json};

use super::review::{BASE, HEAD1, LIB_PATCH, comment_by, file, forge_route, token_route};
use super::review_gitlab as gl;
use super::{Running, bytes, fixture, review_answer, start_at, tool_results, wait_for};
use crate::common::fake_forge::{FakeForge, Pull};
use crate::common::fake_gitlab::{FakeGitlab, MergeRequest};
use crate::common::fake_llm::{FakeLlm, Reply, calls, text};

const HEAD2: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa2";

/// The webhook events once none is left to run: (delivery, outcome).
async fn settled(d: &Running) -> Vec<(String, String)> {
    crate::common::eventually("every event to be processed", || async {
        d.store.inbox_pending(100).await.is_ok_and(|p| p.is_empty())
    })
    .await;
    d.store
        .inbox_latest("webhook", 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|row| (row.dedupe_key, row.outcome.unwrap_or_default()))
        .collect()
}

fn one_pull(forge: &FakeForge, head: &str, files: Vec<Value>) {
    forge.set_pull(
        7,
        Pull {
            base: BASE.into(),
            head: head.into(),
            files,
        },
    );
}

async fn deliver(d: &Running, event: &str, delivery: &str, body: &Value) {
    let status = d.github(event, delivery, &bytes(body)).await.status();
    assert_eq!(status, 202, "{delivery}");
}

/// Drafts, bots' changes and changes to branches the settings do not
/// review get no automatic review (no model call, no check, no comment),
/// nor a description; a comment command still reviews them.
#[tokio::test]
async fn runs_no_one_asked_for_follow_drafts_bots_and_branches() {
    let forge = FakeForge::start().await;
    one_pull(
        &forge,
        HEAD1,
        vec![file("src/lib.rs", "modified", LIB_PATCH)],
    );
    forge.set_content(
        BASE,
        ".switchboard.toml",
        "[review]\ndrafts = false\nbots = false\nbranches = [\"main\", \"release/*\"]\ndescribe = true\n",
    );
    forge.set_pull_meta(7, json!({"draft": true}));
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[("c1", "forge_diff", "{}")])),
        review_answer("Asked for, so reviewed.", json!([])),
    ])
    .await;
    let d = start_at(&llm, &forge.url, token_route(&forge)).await;

    let opened = fixture("pull_request.opened");
    deliver(&d, "pull_request", "draft-1", &opened).await;
    let mut sync = opened.clone();
    sync["action"] = json!("synchronize");
    forge.set_pull_meta(
        7,
        json!({"user": {"login": "dependabot[bot]", "type": "Bot"}}),
    );
    sync["pull_request"]["head"]["sha"] = json!(HEAD1);
    deliver(&d, "pull_request", "bot-1", &sync).await;
    settled(&d).await;
    forge.set_pull_meta(7, json!({"base": {"ref": "dev"}}));
    sync["pull_request"]["title"] = json!("another push");
    deliver(&d, "pull_request", "branch-1", &sync).await;
    let outcomes = settled(&d).await;
    let skipped: Vec<&str> = outcomes
        .iter()
        .filter(|(_, o)| o == "skipped")
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(
        skipped.len(),
        4,
        "the draft's review and description, the bot's push, the other branch's push: {outcomes:?}"
    );
    assert!(llm.requests().is_empty(), "no model call");
    assert!(forge.checks().is_empty() && forge.issue_comments().is_empty());

    // Asked for in a comment, the change on another branch is reviewed.
    let asked = comment_by("alice", "@switchboard-bot review");
    assert_eq!(
        d.github("issue_comment", "ask-1", &asked).await.status(),
        202
    );
    wait_for("the summary", || !forge.issue_comments().is_empty()).await;
    assert!(
        forge.issue_comments()[0]["body"]
            .as_str()
            .unwrap()
            .contains("Asked for, so reviewed.")
    );
}

/// With `describe = true`, a change just opened gets its description
/// beside its review, each in its own comment.
#[tokio::test]
async fn a_change_opened_is_described_when_the_settings_say_so() {
    let forge = FakeForge::start().await;
    one_pull(
        &forge,
        HEAD1,
        vec![file("src/lib.rs", "modified", LIB_PATCH)],
    );
    forge.set_content(BASE, ".switchboard.toml", "[review]\ndescribe = true\n");
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[("c1", "forge_diff", "{}")])),
        review_answer("Adds a temporary.", json!([])),
        Reply::Json(calls(&[("c2", "forge_diff", "{}")])),
        Reply::Json(text(
            "## Summary\nStores the sum first.\n## Walkthrough\n- src/lib.rs: a temporary\n## Risks\nNone.",
        )),
    ])
    .await;
    let d = start_at(&llm, &forge.url, token_route(&forge)).await;
    deliver(
        &d,
        "pull_request",
        "open-1",
        &fixture("pull_request.opened"),
    )
    .await;
    wait_for("the summary and the description", || {
        forge.issue_comments().len() == 2
    })
    .await;
    let outcomes = settled(&d).await;
    assert!(outcomes.iter().all(|(_, o)| o != "skipped"), "{outcomes:?}");
    let bodies: Vec<String> = forge
        .issue_comments()
        .iter()
        .map(|c| c["body"].as_str().unwrap().to_string())
        .collect();
    assert!(bodies.iter().any(|b| b.contains("Review of")), "{bodies:?}");
    assert!(
        bodies
            .iter()
            .any(|b| b.contains("Description of this change") && b.contains("Stores the sum first")),
        "{bodies:?}"
    );
    let asked = llm.requests()[2]["messages"].to_string();
    assert!(asked.contains("was just opened; describe it"), "{asked}");
}

/// A failed job the settings do not triage is left alone; one they name
/// is triaged.
#[tokio::test]
async fn only_the_jobs_the_settings_name_are_triaged() {
    let forge = FakeForge::start().await;
    one_pull(
        &forge,
        HEAD1,
        vec![file("src/lib.rs", "modified", LIB_PATCH)],
    );
    forge.set_commit_pulls("3484a3fb816e0859fd6e1cea078d76385ff50625", &[7]);
    forge.set_job(2202229078, 289782451, "linters", "##[error]lint failed\n");
    forge.set_content(
        BASE,
        ".switchboard.toml",
        "[review]\ntriage_jobs = [\"test*\"]\n",
    );
    let llm = FakeLlm::start(vec![Reply::Json(text("The linter failed: fix the lint."))]).await;
    let d = start_at(&llm, &forge.url, token_route(&forge)).await;
    let job = fixture("workflow_job.completed");
    deliver(&d, "workflow_job", "job-1", &job).await;
    let outcomes = settled(&d).await;
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].1, "skipped", "{outcomes:?}");
    assert!(llm.requests().is_empty() && forge.issue_comments().is_empty());

    forge.set_content(
        BASE,
        ".switchboard.toml",
        "[review]\ntriage_jobs = [\"lint*\"]\n",
    );
    let mut again = job.clone();
    again["workflow_job"]["run_attempt"] = json!(2);
    deliver(&d, "workflow_job", "job-2", &again).await;
    wait_for("the triage", || !forge.issue_comments().is_empty()).await;
}

/// A finding whose thread the change's author declined ("won't fix") is
/// not raised again after a push, even reworded on a moved line; the
/// summary says so. The author alone does not lift the gate, even as one
/// of the route's approvers: the blocking finding still fails the check.
#[tokio::test]
async fn a_finding_its_author_resolved_is_not_raised_again_after_a_push() {
    let forge = FakeForge::start().await;
    one_pull(
        &forge,
        HEAD1,
        vec![file("src/lib.rs", "modified", LIB_PATCH)],
    );
    let moved = "@@ -1,3 +1,5 @@\n pub fn add(a: u32, b: u32) -> u32 {\n-    a + b\n+    // Adds.\n+    let sum = a + b;\n+    sum\n+    // Done.\n }";
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[("c1", "forge_diff", "{}")])),
        review_answer(
            "Adds a temporary.",
            json!([{"path": "src/lib.rs", "line": 2, "severity": "blocking",
                    "body": "Unchecked addition `a + b` can overflow on large inputs."}]),
        ),
        Reply::Json(calls(&[("c2", "forge_diff", "{}")])),
        review_answer(
            "Adds comments.",
            json!([
                {"path": "src/lib.rs", "line": 3, "severity": "blocking",
                 "body": "The addition `a + b` is unchecked and can overflow on large inputs."},
                {"path": "src/lib.rs", "line": 5, "severity": "note", "body": "Drop the `Done.` comment."}
            ]),
        ),
    ])
    .await;
    let key = std::path::Path::new("tests/data/github/app-test-key.pem")
        .canonicalize()
        .unwrap();
    let route = forge_route(&forge, &key);
    let d = start_at(&llm, &forge.url, |config| {
        route(config);
        config.webhook.routes[0].approvers = vec!["github:octocat".into()];
    })
    .await;
    deliver(&d, "pull_request", "res-1", &fixture("pull_request.opened")).await;
    wait_for("the first review", || forge.review_comments().len() == 1).await;
    settled(&d).await;
    let first = forge.review_comments()[0]["id"].as_u64().unwrap();
    // The pull request's author (octocat, an approver too) declines it;
    // a quoted decline from someone else is no decline.
    forge.reply(first, "mallory", "> won't fix\nPlease do fix it.");
    forge.reply(first, "octocat", "Won't fix: inputs are small.");

    one_pull(&forge, HEAD2, vec![file("src/lib.rs", "modified", moved)]);
    forge.set_compare(
        HEAD1,
        HEAD2,
        "ahead",
        vec![file("src/lib.rs", "modified", moved)],
        1,
    );
    let mut sync = fixture("pull_request.opened");
    sync["action"] = json!("synchronize");
    sync["pull_request"]["head"]["sha"] = json!(HEAD2);
    deliver(&d, "pull_request", "res-2", &sync).await;
    wait_for("the second check to complete", || {
        forge
            .checks()
            .iter()
            .filter(|c| c["status"] == "completed")
            .count()
            == 2
    })
    .await;
    let comments = forge.review_comments();
    assert_eq!(comments.len(), 2, "only the new point: {comments:?}");
    assert!(comments[1]["body"].as_str().unwrap().contains("Done."));
    let summary = forge.issue_comments()[0]["body"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        summary.contains("1 finding(s) resolved or answered \"won't fix\""),
        "{summary}"
    );
    let checks = forge.checks();
    assert_eq!(
        checks[1]["conclusion"], "failure",
        "the author alone does not lift the gate"
    );
}

/// A thread the author resolved is not raised again either; a new,
/// different point on the same file still is.
#[tokio::test]
async fn a_resolved_thread_keeps_its_point_and_only_it_off_the_diff() {
    let forge = FakeForge::start().await;
    one_pull(
        &forge,
        HEAD1,
        vec![file("src/lib.rs", "modified", LIB_PATCH)],
    );
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[("c1", "forge_diff", "{}")])),
        review_answer(
            "Adds a temporary.",
            json!([{"path": "src/lib.rs", "line": 2, "severity": "warning",
                    "body": "User input is logged here without redaction."}]),
        ),
        Reply::Json(calls(&[("c2", "forge_diff", "{}")])),
        review_answer(
            "Again.",
            json!([
                {"path": "src/lib.rs", "line": 2, "severity": "warning",
                 "body": "User input is logged without redaction here."},
                {"path": "src/lib.rs", "line": 3, "severity": "warning",
                 "body": "User input is executed here without checks."}
            ]),
        ),
    ])
    .await;
    let d = start_at(&llm, &forge.url, token_route(&forge)).await;
    deliver(&d, "pull_request", "rs-1", &fixture("pull_request.opened")).await;
    wait_for("the first comment", || forge.review_comments().len() == 1).await;
    settled(&d).await;
    let first = forge.review_comments()[0]["id"].as_u64().unwrap();
    forge.resolve_as(first, "octocat");
    let asked = comment_by("alice", "@switchboard-bot full review");
    assert_eq!(
        d.github("issue_comment", "rs-2", &asked).await.status(),
        202
    );
    wait_for("the new point", || forge.review_comments().len() == 2).await;
    settled(&d).await;
    let comments = forge.review_comments();
    assert_eq!(comments.len(), 2, "{comments:?}");
    assert!(comments[1]["body"].as_str().unwrap().contains("executed"));
}

/// On GitLab, a maintainer's "won't fix" reply sets the finding aside:
/// not raised again after a push, and no longer failing the gate.
#[tokio::test]
async fn a_wont_fix_from_a_maintainer_sets_a_gitlab_finding_aside() {
    let (gitlab, states) = wont_fix_on_gitlab("gitlab:ann", json!({"username": "ann"})).await;
    assert_eq!(gitlab.discussions().len(), 1, "not raised again");
    assert_eq!(
        states,
        ["failed", "success"],
        "set aside by a maintainer, it no longer fails the gate"
    );
    let summary = gitlab
        .notes()
        .iter()
        .filter_map(|n| n["body"].as_str())
        .find(|b| b.contains("Review of"))
        .unwrap()
        .to_string();
    assert!(summary.contains("answered \"won't fix\""), "{summary}");
}

/// A maintainer named by account number is known by it: their "won't fix"
/// counts under a new login, and the login they had, now another
/// account's, counts for nothing.
#[tokio::test]
async fn a_maintainer_named_by_account_number_is_known_by_it_not_by_login() {
    let renamed = json!({"username": "ann-renamed", "id": 42});
    let (_, states) = wont_fix_on_gitlab("gitlab:#42", renamed).await;
    assert_eq!(states, ["failed", "success"]);
    let old_login = json!({"username": "ann", "id": 7});
    let (_, states) = wont_fix_on_gitlab("gitlab:#42", old_login).await;
    assert_eq!(states, ["failed", "failed"], "not set aside");
}

/// A merge request reviewed with a blocking finding, `author` answering
/// it "won't fix" with `approver` the route's approver, then reviewed
/// again after a push: the forge, and the gate's two final states.
async fn wont_fix_on_gitlab(approver: &str, author: Value) -> (FakeGitlab, Vec<String>) {
    let gitlab = FakeGitlab::start().await;
    let patch = "@@ -1,2 +1,3 @@\n fn main() {\n+    let v = input().unwrap();\n }";
    let moved = "@@ -1,2 +1,4 @@\n fn main() {\n+    // Reads.\n+    let v = input().unwrap();\n }";
    let mr = |head: &str, patch: &str| MergeRequest {
        base: gl::BASE.into(),
        start: gl::START.into(),
        head: head.into(),
        diffs: vec![gl::diff("src/main.rs", patch, false)],
    };
    gitlab.set_mr(4, mr(gl::HEAD1, patch));
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[("c1", "forge_diff", "{}")])),
        review_answer(
            "Reads input.",
            json!([{"path": "src/main.rs", "line": 2, "severity": "blocking",
                    "body": "`unwrap()` panics when the input is missing."}]),
        ),
        Reply::Json(calls(&[("c2", "forge_diff", "{}")])),
        review_answer(
            "Adds a comment.",
            json!([{"path": "src/main.rs", "line": 3, "severity": "blocking",
                    "body": "This `unwrap()` panics when input is missing."}]),
        ),
    ])
    .await;
    let route = gl::route(&gitlab);
    let d = start_at(&llm, &gitlab.url, |config| {
        route(config);
        config.webhook.routes[0].approvers = vec![approver.into()];
    })
    .await;
    let opened = gl::mr_event("open", gl::HEAD1, None);
    assert_eq!(
        gl::send(&d, "Merge Request Hook", "w-1", &opened).await.0,
        202
    );
    wait_for("the first gate", || gl::final_states(&gitlab).len() == 1).await;
    assert_eq!(gitlab.discussions().len(), 1);
    settled(&d).await;
    let discussion = gitlab.discussions()[0]["id"].as_str().unwrap().to_string();
    gitlab.reply(&discussion, author, "Won't fix: the input is always there.");

    gitlab.set_mr(4, mr(gl::HEAD2, moved));
    gitlab.set_merge_base(gl::HEAD1, gl::HEAD2, gl::HEAD1);
    gitlab.set_compare(
        gl::HEAD1,
        gl::HEAD2,
        vec![gl::diff("src/main.rs", moved, false)],
        1,
    );
    let pushed = gl::mr_event("update", gl::HEAD2, Some(gl::HEAD1));
    assert_eq!(
        gl::send(&d, "Merge Request Hook", "w-2", &pushed).await.0,
        202
    );
    wait_for("the second gate", || gl::final_states(&gitlab).len() == 2).await;
    let states = gl::final_states(&gitlab);
    (gitlab, states)
}

/// A review answered before every file was read is asked again; the
/// findings of both answers are posted (merged, a point made twice once),
/// and a lock file is skipped by default, said in the coverage.
#[tokio::test]
async fn findings_of_an_answer_asked_again_are_merged_and_lock_files_skipped() {
    let mut files: Vec<Value> = (0..60)
        .map(|i| {
            let body = "x".repeat(600);
            let patch = format!("@@ -0,0 +1,2 @@\n+// {body}\n+pub fn f{i}() {{}}");
            file(&format!("src/m{i:02}.rs"), "added", &patch)
        })
        .collect();
    files.push(file("Cargo.lock", "modified", "@@ -1 +1 @@\n-a\n+b"));
    let forge = FakeForge::start().await;
    one_pull(&forge, HEAD1, files);
    let early = json!([
        {"path": "src/m00.rs", "line": 2, "severity": "warning",
         "body": "Function f0 has an empty body and returns nothing."}
    ]);
    let late = json!([
        {"path": "src/m00.rs", "line": 2, "severity": "warning",
         "body": "Function f0 has an empty body and returns nothing!"},
        {"path": "src/m59.rs", "line": 2, "severity": "warning", "body": "f59 does nothing either."}
    ]);
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[("p1", "forge_diff", "{}")])),
        review_answer("Sixty empty functions.", early),
        Reply::Json(calls(&[("p2", "forge_diff", "{\"page\": 2}")])),
        review_answer("Sixty empty functions, all read.", late),
    ])
    .await;
    let d = start_at(&llm, &forge.url, token_route(&forge)).await;
    deliver(
        &d,
        "pull_request",
        "merge-1",
        &fixture("pull_request.opened"),
    )
    .await;
    wait_for("the summary", || !forge.issue_comments().is_empty()).await;
    let listed = tool_results(&llm.requests()[1])[0].clone();
    assert!(
        listed.contains("Cargo.lock (modified, +2 −1) — lock file, not shown below"),
        "{listed}"
    );
    assert!(!listed.contains("### Cargo.lock"), "{listed}");
    let mut bodies: Vec<String> = forge
        .review_comments()
        .iter()
        .map(|c| c["body"].as_str().unwrap().to_string())
        .collect();
    bodies.sort();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    assert!(
        bodies[0].contains("Function f0") && bodies[1].contains("f59"),
        "{bodies:?}"
    );
    let summary = forge.issue_comments()[0]["body"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        summary.contains("Reviewed 60 of 61 changed file(s); skipped 1 by default (1 lock file)."),
        "{summary}"
    );
}

/// On GitLab: a draft merge request is left alone (its review and its
/// description) until an update takes it out of draft, when it is
/// reviewed whole; a merge request opened ready is reviewed and, with
/// `describe = true`, described.
#[tokio::test]
async fn gitlab_drafts_wait_for_ready_and_a_new_request_is_described() {
    let gitlab = FakeGitlab::start().await;
    gitlab.set_mr(
        4,
        MergeRequest {
            base: gl::BASE.into(),
            start: gl::START.into(),
            head: gl::HEAD1.into(),
            diffs: vec![gl::diff("src/lib.rs", gl::LIB, false)],
        },
    );
    gitlab.set_file(
        gl::START,
        ".switchboard.toml",
        "[review]\ndescribe = true\n",
    );
    gitlab.set_mr_meta(4, json!({"draft": true}));
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[("c1", "forge_diff", "{}")])),
        review_answer("Ready now.", json!([])),
        Reply::Json(calls(&[("c2", "forge_diff", "{}")])),
        review_answer("Opened ready.", json!([])),
        Reply::Json(calls(&[("c3", "forge_diff", "{}")])),
        Reply::Json(text(
            "## Summary\nKeeps the sum.\n## Walkthrough\n- src/lib.rs\n## Risks\nNone.",
        )),
    ])
    .await;
    let d = start_at(&llm, &gitlab.url, gl::route(&gitlab)).await;
    let mut opened = gl::mr_event("open", gl::HEAD1, None);
    opened["object_attributes"]["draft"] = json!(true);
    assert_eq!(
        gl::send(&d, "Merge Request Hook", "gd-1", &opened).await.0,
        202
    );
    let outcomes = settled(&d).await;
    assert_eq!(
        outcomes.iter().filter(|(_, o)| o == "skipped").count(),
        2,
        "the draft's review and description: {outcomes:?}"
    );
    assert!(llm.requests().is_empty() && gitlab.notes().is_empty());

    gitlab.set_mr_meta(4, json!({"draft": false}));
    let mut ready = gl::mr_event("update", gl::HEAD1, None);
    ready["changes"] = json!({"draft": {"previous": true, "current": false}});
    assert_eq!(
        gl::send(&d, "Merge Request Hook", "gd-2", &ready).await.0,
        202
    );
    wait_for("the review once ready", || {
        gl::final_states(&gitlab).len() == 1
    })
    .await;
    let summary = |gitlab: &FakeGitlab, what: &str| {
        gitlab
            .notes()
            .iter()
            .filter_map(|n| n["body"].as_str().map(str::to_string))
            .find(|b| b.contains(what))
    };
    assert!(summary(&gitlab, "Ready now.").is_some());

    // Another merge request, opened ready: reviewed, then described.
    gitlab.set_mr(
        5,
        MergeRequest {
            base: gl::BASE.into(),
            start: gl::START.into(),
            head: gl::HEAD2.into(),
            diffs: vec![gl::diff("src/lib.rs", gl::LIB, false)],
        },
    );
    let mut other = gl::mr_event("open", gl::HEAD2, None);
    other["object_attributes"]["iid"] = json!(5);
    other["object_attributes"]["id"] = json!(100);
    assert_eq!(
        gl::send(&d, "Merge Request Hook", "gd-3", &other).await.0,
        202
    );
    wait_for("the description", || {
        summary(&gitlab, "Description of this change").is_some()
    })
    .await;
    let described = summary(&gitlab, "Description of this change").unwrap();
    assert!(described.contains("Keeps the sum."), "{described}");
    assert!(summary(&gitlab, "Opened ready.").is_some());
}

/// On GitLab too, a large merge request is read across calls: the first
/// answer's findings are kept with the last's, and the summary states the
/// coverage.
#[tokio::test]
async fn a_large_gitlab_change_is_read_whole_and_its_findings_merged() {
    let diffs: Vec<Value> = (0..60)
        .map(|i| {
            let body = "x".repeat(600);
            let patch = format!("@@ -0,0 +1,2 @@\n+// {body}\n+pub fn f{i}() {{}}\n");
            gl::diff(&format!("src/m{i:02}.rs"), &patch, true)
        })
        .collect();
    let gitlab = FakeGitlab::start().await;
    gitlab.set_mr(
        4,
        MergeRequest {
            base: gl::BASE.into(),
            start: gl::START.into(),
            head: gl::HEAD1.into(),
            diffs,
        },
    );
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[("p1", "forge_diff", "{}")])),
        review_answer(
            "Sixty functions.",
            json!([{"path": "src/m00.rs", "line": 2, "severity": "warning",
                    "body": "Function f0 has an empty body and returns nothing."}]),
        ),
        Reply::Json(calls(&[("p2", "forge_diff", "{\"page\": 2}")])),
        review_answer(
            "Sixty functions, all read.",
            json!([{"path": "src/m59.rs", "line": 2, "severity": "warning",
                    "body": "Function f59 has an empty body too."}]),
        ),
    ])
    .await;
    let d = start_at(&llm, &gitlab.url, gl::route(&gitlab)).await;
    let opened = gl::mr_event("open", gl::HEAD1, None);
    assert_eq!(
        gl::send(&d, "Merge Request Hook", "gl-big", &opened)
            .await
            .0,
        202
    );
    wait_for("the gate", || gl::final_states(&gitlab).len() == 1).await;
    assert_eq!(llm.requests().len(), 4, "asked again once");
    let mut paths: Vec<String> = gitlab
        .discussions()
        .iter()
        .map(|d| {
            d["notes"][0]["position"]["new_path"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        ["src/m00.rs", "src/m59.rs"],
        "both answers' findings"
    );
    let summary = gitlab
        .notes()
        .iter()
        .filter_map(|n| n["body"].as_str().map(str::to_string))
        .find(|b| b.contains("Review of"))
        .unwrap();
    assert!(
        summary.contains("Reviewed 60 of 60 changed file(s)."),
        "{summary}"
    );
}

/// On GitLab, a merge request opened by a bot's account (as the forge's
/// user record says, whatever its name) or to a branch the settings do
/// not review is left alone; a person's to a reviewed branch is reviewed.
#[tokio::test]
async fn gitlab_bots_and_other_branches_are_left_alone() {
    let gitlab = FakeGitlab::start().await;
    let mr = |head: &str| MergeRequest {
        base: gl::BASE.into(),
        start: gl::START.into(),
        head: head.into(),
        diffs: vec![gl::diff("src/lib.rs", gl::LIB, false)],
    };
    gitlab.set_mr(4, mr(gl::HEAD1));
    gitlab.set_file(
        gl::START,
        ".switchboard.toml",
        "[review]\nbots = false\nbranches = [\"main\"]\n",
    );
    gitlab.set_bot(77);
    // A bot named like a person.
    gitlab.set_mr_meta(4, json!({"author": {"id": 77, "username": "renovate"}}));
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[("c1", "forge_diff", "{}")])),
        review_answer("A person's change.", json!([])),
    ])
    .await;
    let d = start_at(&llm, &gitlab.url, gl::route(&gitlab)).await;
    let opened = gl::mr_event("open", gl::HEAD1, None);
    assert_eq!(
        gl::send(&d, "Merge Request Hook", "gb-1", &opened).await.0,
        202
    );
    settled(&d).await;
    gitlab.set_mr_meta(
        4,
        json!({"author": {"id": 78, "username": "project_5_bot_abc"}, "target_branch": "dev"}),
    );
    let pushed = gl::mr_event("update", gl::HEAD2, Some(gl::HEAD1));
    gitlab.set_mr(4, mr(gl::HEAD2));
    assert_eq!(
        gl::send(&d, "Merge Request Hook", "gb-2", &pushed).await.0,
        202
    );
    let outcomes = settled(&d).await;
    assert_eq!(
        outcomes.iter().filter(|(_, o)| o == "skipped").count(),
        3,
        "the bot's review and description, the other branch's push: {outcomes:?}"
    );
    assert!(llm.requests().is_empty() && gitlab.notes().is_empty());

    // A person (whose name looks like a bot's) to main: reviewed.
    gitlab.set_mr_meta(
        4,
        json!({"author": {"id": 78, "username": "project_5_bot_abc"}}),
    );
    gitlab.set_mr(4, mr(gl::HEAD3));
    let again = gl::mr_event("update", gl::HEAD3, Some(gl::HEAD2));
    assert_eq!(
        gl::send(&d, "Merge Request Hook", "gb-3", &again).await.0,
        202
    );
    wait_for("the review", || gl::final_states(&gitlab).len() == 1).await;
}
