//! `switchboard approvals explain` agrees with the terminal tools' approval
//! hook on every corpus line, reports through its exit code, reads the
//! allowlist from storage, and never runs anything.

use crate::common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use switchboard::approvals::{ApprovalPolicy, Decision, HumanApprover, Request};
use switchboard::config::{ApprovalMode, StorageConfig};
use switchboard::store::Store;
use switchboard::tools::{ApprovalHook, ApprovalVerdict, ToolContext};
use tokio_util::sync::CancellationToken;

const BIN: &str = env!("CARGO_BIN_EXE_switchboard");

fn corpus() -> Vec<String> {
    let mut lines = common::corpus("dangerous.txt");
    lines.extend(common::corpus("benign.txt"));
    lines
}

fn write_config(dir: &Path) -> StorageConfig {
    let url = format!("sqlite://{}/sb.db", dir.display());
    std::fs::write(
        dir.join("gateway.toml"),
        format!("[storage]\nurl = \"{url}\"\n"),
    )
    .unwrap();
    StorageConfig {
        url,
        ..StorageConfig::default()
    }
}

fn explain(dir: &Path, args: &[&str], stdin: &str) -> (i32, String) {
    let mut child = Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .current_dir(dir)
        .arg("approvals")
        .arg("explain")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let text = stdin.to_string();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(text.as_bytes());
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

/// Records whether the hook put the command to a human, and refuses.
#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

#[async_trait::async_trait]
impl HumanApprover for Recorder {
    async fn decide(&self, request: Request, _cancel: &CancellationToken) -> Decision {
        self.0.lock().unwrap().push(request.command);
        Decision::Denied {
            by: "test".into(),
            reason: None,
        }
    }
}

/// The hook's verdict in explain's words.
async fn hook_verdict(
    policy: &ApprovalPolicy,
    recorder: &Recorder,
    ctx: &ToolContext,
    command: &str,
) -> &'static str {
    let asked_before = recorder.0.lock().unwrap().len();
    let verdict = policy.review(command, ctx).await;
    let asked = recorder.0.lock().unwrap().len() > asked_before;
    match (verdict, asked) {
        (_, true) => "needs_approval",
        (ApprovalVerdict::Allow, false) => "runs",
        (ApprovalVerdict::Deny { reason }, false) if reason.contains("hard-blocked") => {
            "hard_blocked"
        }
        (ApprovalVerdict::Deny { reason }, false) => panic!("unexpected denial: {reason}"),
    }
}

fn explain_class(verdict: &str) -> &'static str {
    match verdict {
        "no_match" | "allowed_by_allowlist" | "allowed_by_session_grant" => "runs",
        "needs_approval" => "needs_approval",
        "hard_blocked" => "hard_blocked",
        other => panic!("unknown verdict {other}"),
    }
}

async fn compare_all(dir: &Path, store: &Store) -> Vec<String> {
    let lines = corpus();
    let (_, out) = explain(dir, &["--stdin", "--json"], &(lines.join("\n") + "\n"));
    let results: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), lines.len(), "one result per line, in order");
    let recorder = Arc::new(Recorder::default());
    let policy = ApprovalPolicy::new(store.clone(), recorder.clone(), ApprovalMode::Manual, None);
    let ctx = ToolContext::for_session(
        &dir.join("ws"),
        "s1",
        "cli:dm:t",
        Arc::new(switchboard::tools::AllowAll),
    )
    .unwrap();
    let mut verdicts = Vec::new();
    for (line, result) in lines.iter().zip(&results) {
        assert_eq!(result["command"].as_str().unwrap(), line);
        let from_explain = explain_class(result["verdict"].as_str().unwrap());
        let from_hook = hook_verdict(&policy, &recorder, &ctx, line).await;
        assert_eq!(from_explain, from_hook, "disagreement on {line:?}");
        verdicts.push(result["verdict"].as_str().unwrap().to_string());
    }
    verdicts
}

#[tokio::test]
async fn explain_and_the_approval_hook_agree_on_every_corpus_line() {
    let dir = tempfile::tempdir().unwrap();
    let storage = write_config(dir.path());
    let store = Store::open(&storage).await.unwrap();
    let before = compare_all(dir.path(), &store).await;
    assert!(before.iter().any(|v| v == "hard_blocked"));
    assert!(before.iter().any(|v| v == "needs_approval"));

    store
        .allow_pattern("recursive_delete", "test")
        .await
        .unwrap();
    store.allow_pattern("git_force_push", "test").await.unwrap();
    let after = compare_all(dir.path(), &store).await;
    assert!(
        after.iter().any(|v| v == "allowed_by_allowlist"),
        "the allowlist is read from storage"
    );
    assert!(
        after.iter().filter(|v| *v == "needs_approval").count()
            < before.iter().filter(|v| *v == "needs_approval").count()
    );
}

#[test]
fn exit_codes_tell_the_verdict_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    let marker = dir.path().join("ran.txt");
    let touch = format!("touch {}", marker.display());
    assert_eq!(explain(dir.path(), &["--", &touch], "").0, 0);
    assert_eq!(explain(dir.path(), &["--", "rm", "-rf", "build"], "").0, 10);
    assert_eq!(explain(dir.path(), &["--", "rm", "-rf", "/"], "").0, 20);
    let (code, out) = explain(
        dir.path(),
        &["--stdin"],
        &format!("{touch}\nrm -rf x; {touch}\n"),
    );
    assert_eq!(code, 10, "highest over all lines");
    assert_eq!(out.lines().count(), 2);
    assert!(!marker.exists(), "explain never executes");
    let help = Command::new(BIN)
        .args(["approvals", "explain", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(
        help.contains("10 needs") && help.contains("20 hard-blocked"),
        "{help}"
    );
}

#[test]
fn stdin_lines_split_on_newline_only() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    let input = "echo a\tb; rm -rf x\n\u{ff52}\u{ff4d} -rf /\n\n";
    let (_, out) = explain(dir.path(), &["--stdin", "--json"], input);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 3, "{out}");
    assert_eq!(rows[0]["command"], "echo a\tb; rm -rf x");
    assert_eq!(rows[0]["verdict"], "needs_approval");
    assert_eq!(rows[1]["verdict"], "hard_blocked");
    assert_eq!(rows[2]["verdict"], "no_match");
}

#[test]
fn session_grants_count_with_session() {
    let dir = tempfile::tempdir().unwrap();
    let storage = write_config(dir.path());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = Store::open(&storage).await.unwrap();
        store
            .grant_session("sess-1", "telegram:1", &["git_force_push".into()], "test")
            .await
            .unwrap();
        store.close().await;
    });
    let (code, out) = explain(
        dir.path(),
        &["--json", "--session", "sess-1", "--", "git", "push", "-f"],
        "",
    );
    assert_eq!(code, 0);
    assert!(
        out.contains("\"verdict\":\"allowed_by_session_grant\""),
        "{out}"
    );
    assert_eq!(explain(dir.path(), &["--", "git", "push", "-f"], "").0, 10);
}
