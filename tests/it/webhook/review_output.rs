//! What a GitHub review writes beyond its line comments, against the fake
//! GitHub: committable suggestions, findings the model botched asked for
//! again, per-repository settings read from the base branch, `describe`,
//! and the coverage of a change too large for one page.

use serde_json::{Value, json};

use super::review::{
    BASE, HEAD1, LIB_PATCH, comment_by, file, forge_route, status_of, token_route,
};
use super::{Running, bytes, fixture, review_answer, start_at, tool_results, wait_for};
use crate::common::fake_forge::{FakeForge, Pull};
use crate::common::fake_llm::{FakeLlm, Reply, calls, text};

/// A pull request of `files` on the fake GitHub (`prepare`d further),
/// opened and reviewed by a model following `script`: the forge, the
/// model and the daemon, once the review's check completed.
async fn reviewed(
    files: Vec<Value>,
    prepare: impl FnOnce(&FakeForge),
    script: Vec<Reply>,
) -> (FakeForge, FakeLlm, Running) {
    let forge = FakeForge::start().await;
    forge.set_pull(
        7,
        Pull {
            base: BASE.into(),
            head: HEAD1.into(),
            files,
        },
    );
    prepare(&forge);
    let llm = FakeLlm::start(script).await;
    let key = std::path::Path::new("tests/data/github/app-test-key.pem")
        .canonicalize()
        .unwrap();
    let d = start_at(&llm, &forge.url, forge_route(&forge, &key)).await;
    let opened = bytes(&fixture("pull_request.opened"));
    assert_eq!(d.github("pull_request", "o-1", &opened).await.status(), 202);
    wait_for("the check to complete", || {
        forge
            .checks()
            .first()
            .is_some_and(|c| c["status"] == "completed")
    })
    .await;
    (forge, llm, d)
}

/// A finding with a fix is a committable suggestion on exactly the lines
/// it comments on (GitHub's `suggestion` block over `start_line`..`line`);
/// one whose replacement would reach lines outside the change is posted
/// without it.
#[tokio::test]
async fn a_fix_is_a_suggestion_on_exactly_the_commented_lines() {
    let (forge, _llm, _d) = reviewed(
vec![
                file("src/lib.rs", "modified", LIB_PATCH),
                file(
                    "src/far.rs",
                    "modified",
                    "@@ -10,2 +10,2 @@\n let a = 1;\n-let b = 2;\n+let b = 3;",
                ),
            ],
|_| {},
vec![
        Reply::Json(calls(&[("c1", "forge_diff", "{}")])),
        review_answer(
            "Adds a temporary.",
            json!([
                {"path": "src/lib.rs", "start_line": 2, "line": 3, "severity": "warning",
                 "body": "The temporary is not needed.", "suggestion": "    a.checked_add(b).unwrap()\n"},
                {"path": "src/far.rs", "start_line": 8, "line": 11, "severity": "note",
                 "body": "Reaches past the change.", "suggestion": "let b = 4;"}
            ]),
        ),
    ],
)
.await;
    let comments = forge.review_comments();
    assert_eq!(comments.len(), 2, "{comments:?}");
    let fix = comments
        .iter()
        .find(|c| c["line"] == 3 && c["start_line"] == 2)
        .unwrap();
    assert_eq!(fix["start_side"], "RIGHT");
    assert!(
        fix["body"]
            .as_str()
            .unwrap()
            .contains("```suggestion\n    a.checked_add(b).unwrap()\n```"),
        "{fix}"
    );
    let refused = comments.iter().find(|c| c["path"] == "src/far.rs").unwrap();
    assert_eq!(refused["line"], 11);
    let body = refused["body"].as_str().unwrap();
    assert!(!body.contains("```suggestion"), "{body}");
    assert!(body.contains("suggested change was left out"), "{body}");
    assert!(
        refused.get("start_line").is_none_or(Value::is_null),
        "{refused}"
    );
}

/// A findings block the model botched is asked for once more, with what
/// was wrong; the second answer's findings are posted.
#[tokio::test]
async fn a_malformed_findings_block_is_asked_for_again() {
    let (forge, llm, _d) = reviewed(
vec![file("src/lib.rs", "modified", LIB_PATCH)],
|_| {},
vec![
        Reply::Json(calls(&[("c1", "forge_diff", "{}")])),
        Reply::Json(text(
            "Adds a temporary.\n\n```findings\n[{'path': 'src/lib.rs', 'line': 2, 'body': 'overflow'}]\n```",
        )),
        review_answer(
            "Adds a temporary.",
            json!([{"path": "src/lib.rs", "line": 2, "severity": "blocking", "body": "`a + b` overflows."}]),
        ),
    ],
)
.await;
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let asked = requests[2]["messages"].to_string();
    assert!(
        asked.contains("could not be read") && asked.contains("not valid JSON"),
        "{asked}"
    );
    let comments = forge.review_comments();
    assert_eq!(comments.len(), 1);
    assert!(comments[0]["body"].as_str().unwrap().contains("overflows"));
    let summary = forge.issue_comments();
    assert!(
        !summary[0]["body"]
            .as_str()
            .unwrap()
            .contains("could not be read")
    );
}

/// The repository's `.switchboard.toml` is read from the base branch and
/// obeyed: ignored paths are shown to no tool and get no comment, the
/// instructions come with the diff, the quiet profile posts only blocking
/// findings. The head's copy, which the change itself wrote, counts for
/// nothing.
#[tokio::test]
async fn settings_from_the_base_branch_are_obeyed_and_the_heads_ignored() {
    let (forge, llm, _d) = reviewed(
vec![
                file("src/lib.rs", "modified", LIB_PATCH),
                file(
                    "vendor/dep.rs",
                    "added",
                    "@@ -0,0 +1,1 @@\n+SECRET_VENDORED_CODE",
                ),
            ],
|forge| {
    forge.set_content(
        BASE,
        ".switchboard.toml",
        "[review]\nignore = [\"vendor/**\"]\nprofile = \"quiet\"\n\n[[review.instructions]]\npath = \"src/**\"\ntext = \"Prefer checked arithmetic.\"\n",
    );
    forge.set_content(
        HEAD1,
        ".switchboard.toml",
        "[review]\nprofile = \"thorough\"\n",
    );
    forge.set_content(HEAD1, "vendor/dep.rs", "SECRET_VENDORED_CODE\n");
    },
vec![
        Reply::Json(calls(&[
            ("c1", "forge_diff", "{}"),
            ("c2", "forge_file", r#"{"path": "vendor/dep.rs"}"#),
        ])),
        review_answer(
            "Adds a temporary.",
            json!([
                {"path": "src/lib.rs", "line": 2, "severity": "blocking", "body": "`a + b` overflows."},
                {"path": "src/lib.rs", "line": 3, "severity": "note", "body": "Name it total."},
                {"path": "vendor/dep.rs", "line": 1, "severity": "blocking", "body": "Vendored."}
            ]),
        ),
    ],
)
.await;
    let results = tool_results(&llm.requests()[1]);
    assert!(
        !results[0].contains("SECRET_VENDORED_CODE") && !results[0].contains("vendor/dep.rs"),
        "{}",
        results[0]
    );
    assert!(results[0].contains("1 file(s) the repository's settings ignore"));
    assert!(
        results[0].contains("Prefer checked arithmetic."),
        "{}",
        results[0]
    );
    assert!(
        results[1].contains("ignored by the repository's review settings")
            && !results[1].contains("SECRET_VENDORED_CODE"),
        "{}",
        results[1]
    );
    let comments = forge.review_comments();
    assert_eq!(comments.len(), 1, "only the blocking finding: {comments:?}");
    assert!(comments[0]["body"].as_str().unwrap().contains("overflows"));
    let summary = forge.issue_comments()[0]["body"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        summary.contains("2 finding(s) below the repository's review profile"),
        "{summary}"
    );
}

/// `@bot describe` writes a description of the change (summary,
/// walkthrough, risks) in one comment; asked again, it edits that comment.
#[tokio::test]
async fn describe_writes_one_description_edited_in_place() {
    let forge = FakeForge::start().await;
    forge.set_pull(
        7,
        Pull {
            base: BASE.into(),
            head: HEAD1.into(),
            files: vec![file("src/lib.rs", "modified", LIB_PATCH)],
        },
    );
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[("c1", "forge_diff", "{}")])),
        Reply::Json(text("## Summary\nAdds a temporary.\n## Walkthrough\n- src/lib.rs\n## Risks\nNone.")),
        Reply::Json(text("## Summary\nAdds a temporary, second take.\n## Walkthrough\n- src/lib.rs\n## Risks\nOverflow.")),
    ])
    .await;
    let d = start_at(&llm, &forge.url, token_route(&forge)).await;
    assert_eq!(
        d.github(
            "issue_comment",
            "d-1",
            &comment_by("alice", "@switchboard-bot describe")
        )
        .await
        .status(),
        202
    );
    wait_for("the description", || !forge.issue_comments().is_empty()).await;
    let asked = llm.requests()[0]["messages"].to_string();
    assert!(asked.contains("A description of change #7"), "{asked}");
    assert!(asked.contains("## Walkthrough"), "{asked}");
    assert_eq!(
        d.github(
            "issue_comment",
            "d-2",
            &comment_by("alice", "@switchboard-bot describe it again")
        )
        .await
        .status(),
        202
    );
    wait_for("the description edited", || {
        forge
            .issue_comments()
            .first()
            .and_then(|c| c["body"].as_str().map(|b| b.contains("second take")))
            .unwrap_or(false)
    })
    .await;
    let comments = forge.issue_comments();
    assert_eq!(comments.len(), 1, "edited in place: {comments:?}");
    assert!(forge.reviews().is_empty(), "a description is not a review");
    let (code, body) = status_of(
        d.github(
            "issue_comment",
            "d-3",
            &comment_by("mallory", "@switchboard-bot describe"),
        )
        .await,
    )
    .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (200, Some("commands from this login are not taken"))
    );
}

/// A change of 240 files is read across several calls: a review answered
/// before every file's diff was read is asked for again, naming what was
/// left, and the summary says what was reviewed and what was skipped.
#[tokio::test]
async fn a_large_change_is_reviewed_whole_and_the_summary_states_its_coverage() {
    let mut files: Vec<Value> = (0..240)
        .map(|i| {
            let patch = format!("@@ -0,0 +1,3 @@\n+pub fn f{i}() -> u32 {{\n+    {i} * 2 + 1\n+}}");
            file(&format!("src/m{i:03}.rs"), "added", &patch)
        })
        .collect();
    for i in 0..5 {
        files.push(file(
            &format!("deps{i}.lock"),
            "modified",
            "@@ -1 +1 @@\n-a\n+b",
        ));
    }
    let rest: Vec<(String, String)> = (2..=6)
        .map(|p| (format!("p{p}"), format!("{{\"page\": {p}}}")))
        .collect();
    let rest: Vec<(&str, &str, &str)> = rest
        .iter()
        .map(|(id, args)| (id.as_str(), "forge_diff", args.as_str()))
        .collect();
    let (forge, llm, _d) = reviewed(
        files,
        |forge| {
            forge.set_content(
                BASE,
                ".switchboard.toml",
                "[review]\nignore = [\"*.lock\"]\n",
            )
        },
        vec![
            Reply::Json(calls(&[("p1", "forge_diff", "{}")])),
            review_answer("Adds 240 functions.", json!([])),
            Reply::Json(calls(&rest)),
            review_answer("Adds 240 functions, all read.", json!([])),
        ],
    )
    .await;
    let requests = llm.requests();
    assert_eq!(requests.len(), 4);
    let first = tool_results(&requests[1])[0].clone();
    assert!(first.contains("Page 1 of"), "more than a page: {first}");
    let asked = requests[2]["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        asked.contains("the review covers 226 of the 240 changed files")
            && asked.contains("src/m239.rs"),
        "the unread files are named: {asked}"
    );
    let seen: String = tool_results(&requests[3]).join("\n");
    for i in [0, 120, 239] {
        let name = format!("src/m{i:03}.rs");
        assert!(
            first.contains(&format!("### {name}")) || seen.contains(&format!("### {name}")),
            "{name} was shown"
        );
    }
    let summary = forge.issue_comments()[0]["body"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        summary.contains(
            "Reviewed 240 of 240 changed file(s); 5 more ignored by the repository's settings."
        ),
        "{summary}"
    );
}

/// The settings are the base's as the forge has it when the run starts,
/// not the event's: a change retargeted since it was opened (from a
/// branch whose settings ignore everything) is reviewed under its new
/// base's.
#[tokio::test]
async fn settings_come_from_the_base_the_change_has_now() {
    const RETARGETED: &str = "cccccccccccccccccccccccccccccccccccccccc";
    let forge = FakeForge::start().await;
    forge.set_pull(
        7,
        Pull {
            base: RETARGETED.into(),
            head: HEAD1.into(),
            files: vec![file("src/lib.rs", "modified", LIB_PATCH)],
        },
    );
    // The event still names BASE, whose settings would hide everything.
    forge.set_content(BASE, ".switchboard.toml", "[review]\nignore = [\"**\"]\n");
    forge.set_content(
        RETARGETED,
        ".switchboard.toml",
        "[review]\nprofile = \"quiet\"\n",
    );
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[("c1", "forge_diff", "{}")])),
        review_answer(
            "Adds a temporary.",
            json!([
                {"path": "src/lib.rs", "line": 2, "severity": "blocking", "body": "`a + b` overflows."},
                {"path": "src/lib.rs", "line": 3, "severity": "note", "body": "Name it total."}
            ]),
        ),
    ])
    .await;
    let key = std::path::Path::new("tests/data/github/app-test-key.pem")
        .canonicalize()
        .unwrap();
    let d = start_at(&llm, &forge.url, forge_route(&forge, &key)).await;
    let opened = bytes(&fixture("pull_request.opened"));
    assert_eq!(
        d.github("pull_request", "rt-1", &opened).await.status(),
        202
    );
    wait_for("the check to complete", || {
        forge
            .checks()
            .first()
            .is_some_and(|c| c["status"] == "completed")
    })
    .await;
    let diff = tool_results(&llm.requests()[1])[0].clone();
    assert!(diff.contains("let sum = a + b;"), "nothing hidden: {diff}");
    let comments = forge.review_comments();
    assert_eq!(
        comments.len(),
        1,
        "the new base's quiet profile: {comments:?}"
    );
}
