//! CPU per tool-calling turn as a user measures it: the release
//! `switchboard chat` binary in a process of its own, its stdin a script of
//! turns (`what does the note say?` then `/new`), against a model server on
//! loopback that answers each first call with a `read_file` call and each
//! second with the answer. Every turn is two model calls over HTTP, one
//! tool run and its messages stored in SQLite.
//!
//! The figure is the child's CPU time for TURNS turns less its CPU time
//! for none (start-up and shut-down), per turn; beside it, in the same
//! run, the CPU the model server (this process) spent on the same turns,
//! and the times per turn a thread of the child stopped to wait for
//! another (voluntary context switches: the waits for the model, and any
//! hand-over to another thread — SQLite and the file tools now run on the
//! chat's one thread), a count that the machine's speed does not move.
//!
//! Run: `cargo bench --bench chat_cpu` (TURNS=N, ROUNDS=N to change it;
//! CHAT_BIN=path to measure another build, e.g. the previous
//! commit's, in the same run conditions).

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use axum::Json;
use axum::Router;
use nix::sys::resource::{UsageWho, getrusage};
use serde_json::{Value, json};

/// The OpenAI chat completions answer: a `read_file` call after the
/// user's message, the answer after the tool's result.
async fn complete(Json(request): Json<Value>) -> Json<Value> {
    let last_is_user = request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "user");
    let message = if last_is_user {
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "read_file", "arguments": "{\"path\":\"note.txt\"}"}}]})
    } else {
        json!({"role": "assistant", "content": "The note says hello."})
    };
    let finish = if last_is_user { "tool_calls" } else { "stop" };
    Json(json!({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1_764_000_000,
        "model": "bench",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }))
}

fn cpu(who: UsageWho) -> Duration {
    let usage = getrusage(who).expect("getrusage");
    let tv =
        |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    tv(usage.user_time()) + tv(usage.system_time())
}

/// The times a thread of `who` gave up its CPU to wait (a wake-up from
/// another thread, or from the kernel, ended each wait).
fn waits(who: UsageWho) -> i64 {
    getrusage(who)
        .expect("getrusage")
        .voluntary_context_switches()
}

/// What a run of `switchboard chat` cost.
struct Cost {
    cpu: Duration,
    waits: i64,
}

/// Runs `switchboard chat` over `turns` turns; what it cost.
fn chat(config: &std::path::Path, turns: usize) -> Cost {
    let before = cpu(UsageWho::RUSAGE_CHILDREN);
    let waited = waits(UsageWho::RUSAGE_CHILDREN);
    let binary =
        std::env::var_os("CHAT_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_switchboard").into());
    let mut child = Command::new(binary)
        .arg("--config")
        .arg(config)
        .args(["chat", "--user", "bench"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start switchboard chat");
    let mut stdin = child.stdin.take().unwrap();
    for _ in 0..turns {
        stdin.write_all(b"what does the note say?\n/new\n").unwrap();
    }
    stdin.write_all(b"/quit\n").unwrap();
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "switchboard chat failed: {status}");
    Cost {
        cpu: cpu(UsageWho::RUSAGE_CHILDREN) - before,
        waits: waits(UsageWho::RUSAGE_CHILDREN) - waited,
    }
}

fn main() {
    let turns = support::env_usize("TURNS", 500);
    let rounds = support::env_usize("ROUNDS", 3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    runtime.spawn(async move {
        let app = Router::new().fallback(axum::routing::post(complete));
        axum::serve(listener, app).await.unwrap();
    });

    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    let note = switchboard::tools::workspace::session_dir(&workspace, "cli:dm:bench").unwrap();
    std::fs::write(note.join("note.txt"), "hello\n").unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[storage]\nurl = \"sqlite://{}/chat.db\"\n\n[llm]\nbase_url = \"http://{addr}/v1\"\napi_key_env = \"\"\nmax_retries = 0\n\n[agent]\nworkspace = \"{}\"\n",
            dir.path().display(),
            workspace.display()
        ),
    )
    .unwrap();

    println!(
        "turns per run: {turns} (2 model calls over loopback HTTP, 1 read_file, /new after each)"
    );
    chat(&config, 20);
    for round in 1..=rounds {
        let idle = chat(&config, 0);
        let server0 = cpu(UsageWho::RUSAGE_SELF);
        let busy = chat(&config, turns);
        let server = cpu(UsageWho::RUSAGE_SELF) - server0;
        let per = |d: Duration| d.as_secs_f64() * 1e3 / turns as f64;
        let gateway = busy.cpu.saturating_sub(idle.cpu);
        println!(
            "round {round}: switchboard chat {:>6.3} ms CPU/turn (start-up and shut-down {:.1} ms left out); model server {:>6.3} ms CPU/turn; ratio {:.1}x; {:.1} waits/turn",
            per(gateway),
            idle.cpu.as_secs_f64() * 1e3,
            per(server),
            per(gateway) / per(server),
            (busy.waits - idle.waits) as f64 / turns as f64
        );
    }
}
