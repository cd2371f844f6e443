//! `switchboard chat` from the real binary against a scripted fake model.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::fake_llm::{FakeLlm, Reply, calls, text};

fn chat_command(dir: &Path, llm: &FakeLlm) -> Command {
    std::fs::write(
        dir.join("gateway.toml"),
        format!(
            "[storage]\nurl = \"sqlite://{}/sb.db\"\n[agent]\nworkspace = \"{}/ws\"\n[llm]\nbase_url = \"{}\"\napi_key_env = \"\"\n",
            dir.display(),
            dir.display(),
            llm.url
        ),
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchboard"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .current_dir(dir);
    cmd
}

/// `switchboard chat --user ci` started with `cmd`, its stdin and stdout
/// piped; its stderr piped too if `stderr`, else dropped.
fn spawn_chat(cmd: &mut Command, stderr: bool) -> std::process::Child {
    cmd.args(["chat", "--user", "ci"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(if stderr {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .spawn()
        .unwrap()
}

#[tokio::test]
async fn once_prints_the_answer_and_denies_commands() {
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[(
            "c1",
            "terminal",
            r#"{"command": "rm -rf cache; touch ran.txt"}"#,
        )])),
        Reply::Json(text("I could not run it.")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = chat_command(dir.path(), &llm);
    let out = tokio::task::spawn_blocking(move || {
        cmd.args(["chat", "--once", "make a file", "--user", "ci"])
            .stdin(Stdio::null());
        crate::common::output_within(&mut cmd, crate::common::CLI)
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "I could not run it."
    );
    let result = llm.requests()[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        result["content"].as_str().unwrap().contains("BLOCKED"),
        "{result}"
    );
    assert!(
        !dir.path().join("ws").read_dir().unwrap().any(|d| d
            .unwrap()
            .path()
            .join("ran.txt")
            .exists())
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("💻 terminal"),
        "tool activity shown: {stderr}"
    );
}

#[tokio::test]
async fn interactive_chat_asks_before_running_commands() {
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[(
            "c1",
            "terminal",
            r#"{"command": "rm -rf old && echo approved-run > proof.txt"}"#,
        )])),
        Reply::Json(text("Done, file written.")),
        Reply::Json(calls(&[(
            "c2",
            "terminal",
            r#"{"command": "rm -r old2; echo second > nope.txt"}"#,
        )])),
        Reply::Json(text("Understood, not running it.")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = chat_command(dir.path(), &llm);
    let mut child = spawn_chat(&mut cmd, true);
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let next =
        |rx: &mpsc::Receiver<String>| rx.recv_timeout(Duration::from_secs(20)).expect("an answer");
    tokio::task::spawn_blocking(move || {
        writeln!(stdin, "write the proof file").unwrap();
        writeln!(stdin, "y").unwrap();
        assert_eq!(next(&rx), "Done, file written.");
        writeln!(stdin, "and another").unwrap();
        writeln!(stdin, "n").unwrap();
        assert_eq!(next(&rx), "Understood, not running it.");
        drop(stdin);
        assert!(child.wait().unwrap().success());
        let mut err = String::new();
        stderr.read_to_string(&mut err).unwrap();
        assert!(
            err.contains("Approval needed\n    rm -rf old && echo approved-run > proof.txt")
                && err.contains("deletes files recursively"),
            "{err}"
        );
    })
    .await
    .unwrap();
    let ws = dir.path().join("ws");
    let session_dir = common::session_workspace(&ws);
    assert_eq!(
        std::fs::read_to_string(session_dir.join("proof.txt")).unwrap(),
        "approved-run\n"
    );
    assert!(!session_dir.join("nope.txt").exists());
    let denied = llm.requests()[3]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(denied["content"].as_str().unwrap().contains("denied by ci"));
}

/// At the terminal, "s" grants the kind of command for the session (asked
/// again after /new) and "a", from a configured approver, for good (not
/// asked again after /new).
#[tokio::test]
async fn session_and_always_answers_at_the_terminal_grant_what_they_say() {
    let step = |id: &str, n: &str| {
        let command = format!("rm -rf old{n} && echo {n} > {n}.txt");
        vec![
            Reply::Json(calls(&[(
                id,
                "terminal",
                &serde_json::json!({ "command": command }).to_string(),
            )])),
            Reply::Json(text(&format!("ran {n}"))),
        ]
    };
    let script = [
        step("c1", "one"),
        step("c2", "two"),
        step("c3", "three"),
        step("c4", "four"),
    ]
    .concat();
    let llm = FakeLlm::start(script).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = chat_command(dir.path(), &llm);
    let config = dir.path().join("gateway.toml");
    let mut toml = std::fs::read_to_string(&config).unwrap();
    toml.push_str("[approvals]\napprovers = [\"cli:ci\"]\n");
    std::fs::write(&config, toml).unwrap();
    let mut child = spawn_chat(&mut cmd, true);
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // Lines up to `want`; a prompt nobody answers makes this time out.
    let until = |rx: &mpsc::Receiver<String>, want: &str| loop {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no {want:?}: an unanswered prompt?"));
        if line == want {
            break;
        }
    };
    let err = tokio::task::spawn_blocking(move || {
        writeln!(stdin, "first").unwrap();
        writeln!(stdin, "s").unwrap();
        until(&rx, "ran one");
        writeln!(stdin, "second, same kind").unwrap();
        until(&rx, "ran two");
        writeln!(stdin, "/new").unwrap();
        writeln!(stdin, "third, in a new session").unwrap();
        writeln!(stdin, "a").unwrap();
        until(&rx, "ran three");
        writeln!(stdin, "/new").unwrap();
        writeln!(stdin, "fourth").unwrap();
        until(&rx, "ran four");
        drop(stdin);
        assert!(child.wait().unwrap().success());
        let mut err = String::new();
        stderr.read_to_string(&mut err).unwrap();
        err
    })
    .await
    .unwrap();
    assert_eq!(
        err.matches("Approval needed").count(),
        2,
        "asked for one and three only: {err}"
    );
    let ws = common::session_workspace(&dir.path().join("ws"));
    for n in ["one", "two", "three", "four"] {
        assert_eq!(
            std::fs::read_to_string(ws.join(format!("{n}.txt"))).unwrap(),
            format!("{n}\n")
        );
    }
}

#[tokio::test]
async fn chat_goes_through_the_session_manager() {
    let llm = FakeLlm::start(vec![
        Reply::Json(text("Noted: 42.")),
        Reply::Json(text("A fresh start.")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = chat_command(dir.path(), &llm);
    let out = tokio::task::spawn_blocking(move || {
        let mut child = spawn_chat(&mut cmd, false);
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "remember 42").unwrap();
        writeln!(stdin, "/status").unwrap();
        writeln!(stdin, "/new").unwrap();
        writeln!(stdin, "what was the number?").unwrap();
        drop(stdin);
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "Noted: 42.");
    assert!(
        lines[1].starts_with("Session cli:dm:ci: 2 messages stored"),
        "{stdout}"
    );
    assert_eq!(lines[2], "Started a new conversation.");
    assert_eq!(lines[3], "A fresh start.");
    let second = llm.requests()[1]["messages"].to_string();
    assert!(!second.contains("remember 42"), "/new started over");
}
