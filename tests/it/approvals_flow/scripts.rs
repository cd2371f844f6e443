//! Running a file the agent wrote asks a person wherever the file is run
//! from, however its times were changed.

use super::*;

/// Runs `command` at the terminal in `workdir`, in the background.
fn run_in(
    h: &PolicyHarness,
    command: &'static str,
    workdir: &'static str,
) -> tokio::task::JoinHandle<serde_json::Value> {
    let (rt, ctx) = (h.runtime.clone(), h.ctx.clone());
    tokio::spawn(async move {
        let args = json!({"command": command, "workdir": workdir});
        common::call(&rt, "terminal", args, &ctx).await
    })
}

/// The agent's script in a subdirectory, run from there (the terminal's
/// `workdir`, or `cd` on the line), one run after a `cd` that fails, and a
/// script whose modification time was set back: each is shown to a person
/// before it runs.
#[tokio::test]
async fn a_script_run_from_a_subdirectory_or_made_to_look_old_still_asks() {
    let h = policy_harness(ApprovalMode::Manual, None).await;
    let write = |path: &str| {
        let args = json!({"path": path, "content": "echo ran-by-agent\n"});
        let (rt, ctx) = (h.runtime.clone(), h.ctx.clone());
        async move { common::call(&rt, "write_file", args, &ctx).await }
    };
    write("w/x.sh").await;
    write("old.sh").await;
    let attempts = [
        ("bash x.sh", "w"),
        ("cd w && bash x.sh", "."),
        ("cd -- w && bash x.sh", "."),
        // The `cd` fails: the script at the top runs.
        ("cd nowhere; bash old.sh", "."),
        ("touch -d @0 old.sh && bash old.sh", "."),
    ];
    let asked = attempts.len();
    for (n, (command, workdir)) in attempts.into_iter().enumerate() {
        let run = run_in(&h, command, workdir);
        let shown = h.s.adapter.prompt(n + 1).await;
        assert!(
            shown.prompt.text.contains("echo ran-by-agent"),
            "{command}: {}",
            shown.prompt.text
        );
        h.s.broker
            .resolve(&shown.approval_id, Choice::Deny, &actor("1"), None)
            .await
            .unwrap();
        let out = run.await.unwrap();
        assert!(
            out["error"]
                .as_str()
                .unwrap_or_default()
                .starts_with("BLOCKED"),
            "{command}: {out}"
        );
    }
    // Once its time is set back, the next run of it alone still asks.
    let touched = run_in(&h, "touch -d @0 old.sh", ".").await.unwrap();
    assert_eq!(touched["exit_code"], 0, "{touched}");
    let again = run_in(&h, "bash old.sh", ".");
    let shown = h.s.adapter.prompt(asked + 1).await;
    assert!(
        shown.prompt.text.contains("old.sh"),
        "{}",
        shown.prompt.text
    );
    h.s.broker
        .resolve(&shown.approval_id, Choice::Once, &actor("1"), None)
        .await
        .unwrap();
    assert_eq!(again.await.unwrap()["output"], "ran-by-agent\n");
}

/// The agent writes `written` (path, content), `command` asks for approval
/// and the prompt shows `shown`; meanwhile `meanwhile` (path, content) is
/// written, then the approval is given once. The command does not run
/// (`left` is never made) and says `said`.
async fn changed_while_asked(
    written: (&str, &str),
    command: &'static str,
    shown: &str,
    meanwhile: (&str, &str),
    (said, left): (&str, &str),
) {
    let h = policy_harness(ApprovalMode::Manual, None).await;
    let args = json!({"path": written.0, "content": written.1});
    common::call(&h.runtime, "write_file", args, &h.ctx).await;
    let run = run_in(&h, command, ".");
    let prompt = h.s.adapter.prompt(1).await;
    assert!(prompt.prompt.text.contains(shown), "{}", prompt.prompt.text);
    std::fs::write(h.ctx.workspace.join(meanwhile.0), meanwhile.1).unwrap();
    h.s.broker
        .resolve(&prompt.approval_id, Choice::Once, &actor("1"), None)
        .await
        .unwrap();
    let out = run.await.unwrap();
    assert!(
        out["error"].as_str().unwrap_or_default().contains(said),
        "{out}"
    );
    assert!(!h.ctx.workspace.join(left).exists());
}

/// A script swapped while its approval is asked (by another of the
/// session's processes, say) does not run: what was approved is not what
/// would run.
#[tokio::test]
async fn a_script_changed_while_its_approval_is_asked_does_not_run() {
    changed_while_asked(
        ("build.sh", "echo shown-to-a-person\n"),
        "bash build.sh",
        "echo shown-to-a-person",
        ("build.sh", "echo swapped > swapped.txt\n"),
        (
            "build.sh changed while its approval was asked",
            "swapped.txt",
        ),
    )
    .await;
}

/// A file the line would run that appears while its approval is asked
/// (make prefers a GNUmakefile to the Makefile shown) stops it too.
#[tokio::test]
async fn a_file_that_appears_while_the_approval_is_asked_stops_the_command() {
    changed_while_asked(
        ("Makefile", "all:\n\techo shown\n"),
        "make",
        "echo shown",
        ("GNUmakefile", "all:\n\ttouch unseen.txt\n"),
        (
            "GNUmakefile appeared while the approval was asked",
            "unseen.txt",
        ),
    )
    .await;
}

/// A workdir too long to show beside the command is refused: a person
/// would see only where it runs.
#[tokio::test]
async fn a_workdir_too_long_to_show_is_refused() {
    let h = policy_harness(ApprovalMode::Manual, None).await;
    let long = "d".repeat(201);
    std::fs::create_dir_all(h.ctx.workspace.join(&long)).unwrap();
    let args = json!({"command": "rm -rf build", "workdir": long});
    let out = common::call(&h.runtime, "terminal", args, &h.ctx).await;
    assert!(
        out["error"]
            .as_str()
            .unwrap()
            .contains("workdir is over 200"),
        "{out}"
    );
    assert!(h.s.adapter.shown.lock().unwrap().is_empty());
}
