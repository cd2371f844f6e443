//! Gateway overhead per agent turn, with an instant in-process model: each
//! turn is one user message, a model call that asks for `read_file`, the
//! tool run, and a second model call with the final answer, every message
//! persisted to SQLite. Prints turns per second and CPU time per turn,
//! beside a baseline measured in the same run: the bare tool dispatch.
//!
//! Run: `cargo bench --bench turn` (TURNS=N to change the count).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::sys::resource::{UsageWho, getrusage};
use serde_json::json;
use switchboard::agent::message::ToolCall;
use switchboard::agent::provider::{
    ChatModel, ChatRequest, ChatResponse, FinishReason, ProviderError, Usage,
};
use switchboard::agent::{AgentDeps, Conversation, SessionContext};
use switchboard::config::{Config, Env, StorageConfig};
use switchboard::store::{NewSession, Store};
use switchboard::tools::{AllowAll, ToolContext, ToolRuntime};
use tokio_util::sync::CancellationToken;

/// Answers instantly: a read_file call when the last message is the
/// user's, a final answer after the tool result.
struct InstantModel(AtomicU64);

#[async_trait::async_trait]
impl ChatModel for InstantModel {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let n = self.0.fetch_add(1, Ordering::Relaxed);
        let last_is_user = request
            .messages
            .last()
            .is_some_and(|m| m.role == switchboard::agent::message::Role::User);
        Ok(if last_is_user {
            ChatResponse {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: format!("c{n}"),
                    name: "read_file".into(),
                    arguments: r#"{"path":"note.txt"}"#.into(),
                    extra: None,
                }],
                finish: FinishReason::ToolCalls,
                usage: Usage::new(100, 10),
            }
        } else {
            ChatResponse {
                content: "The note says hello.".into(),
                tool_calls: vec![],
                finish: FinishReason::Stop,
                usage: Usage::default(),
            }
        })
    }
}

fn cpu_time() -> Duration {
    let usage = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage");
    let tv =
        |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    tv(usage.user_time()) + tv(usage.system_time())
}

fn main() {
    let turns: usize = std::env::var("TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::default();
        config.agent.workspace = dir.path().join("ws");
        config.storage = StorageConfig {
            url: format!("sqlite://{}/bench.db", dir.path().display()),
            ..StorageConfig::default()
        };
        let store = Store::open(&config.storage).await.unwrap();
        let tools = ToolRuntime::build(
            &config,
            &Env::default(),
            switchboard::adapters::platforms(&config),
        )
        .unwrap();
        let model: Arc<dyn ChatModel> = Arc::new(InstantModel(AtomicU64::new(0)));
        let mut deps =
            AgentDeps::from_config(&config, &Env::default(), tools.clone(), store.clone());
        deps.models.set_main(model.clone());
        deps.auxiliary = model;
        let deps = Arc::new(deps);

        // Baseline: the tool dispatch alone.
        let ctx = ToolContext::for_session(
            &config.agent.workspace,
            "b",
            "bench:dm:base",
            Arc::new(AllowAll),
        )
        .unwrap();
        std::fs::write(ctx.workspace.join("note.txt"), "hello\n").unwrap();
        let (cpu0, wall0) = (cpu_time(), Instant::now());
        for _ in 0..turns {
            tools
                .registry
                .dispatch("read_file", json!({"path": "note.txt"}), &ctx)
                .await;
        }
        let (base_cpu, base_wall) = (cpu_time() - cpu0, wall0.elapsed());

        let open = |i: usize| {
            let (deps, store) = (deps.clone(), store.clone());
            async move {
                let key = format!("bench:dm:{}", i / 20);
                let session = store
                    .open_session(&NewSession {
                        key: &key,
                        platform: "bench",
                        chat_id: "1",
                        thread_id: None,
                        user_id: Some("1"),
                    })
                    .await
                    .unwrap();
                let ws =
                    switchboard::tools::workspace::session_dir(&deps.workspace_root, &key).unwrap();
                std::fs::write(ws.join("note.txt"), "hello\n").unwrap();
                let context = SessionContext {
                    platform: "bench".into(),
                    chat_type: "direct message".into(),
                    ..Default::default()
                };
                Conversation::open(
                    deps,
                    session,
                    context,
                    (vec!["coding".into()], vec![]),
                    Arc::new(AllowAll),
                )
                .await
                .unwrap()
            }
        };
        let cancel = CancellationToken::new();
        let mut conversation = open(0).await;
        for _ in 0..50 {
            conversation.run_turn("warm up", &cancel).await.unwrap();
        }
        let (cpu0, wall0) = (cpu_time(), Instant::now());
        for i in 0..turns {
            if i % 20 == 0 {
                conversation = open(i + 1000).await;
            }
            let out = conversation
                .run_turn("what does the note say?", &cancel)
                .await
                .unwrap();
            assert_eq!(out.model_calls, 2);
        }
        let (cpu, wall) = (cpu_time() - cpu0, wall0.elapsed());

        let per = |d: Duration| d.as_secs_f64() * 1e6 / turns as f64;
        println!(
            "turns: {turns} (1 tool call, 2 model calls, 4 messages persisted to SQLite each)"
        );
        println!(
            "agent turn:     {:>9.1} turns/s   wall {:>8.1} µs/turn   cpu {:>8.1} µs/turn",
            turns as f64 / wall.as_secs_f64(),
            per(wall),
            per(cpu)
        );
        println!(
            "baseline tool:  {:>9.1} calls/s   wall {:>8.1} µs/call   cpu {:>8.1} µs/call",
            turns as f64 / base_wall.as_secs_f64(),
            per(base_wall),
            per(base_cpu)
        );
        println!(
            "ratio turn/tool: wall {:.1}x, cpu {:.1}x",
            per(wall) / per(base_wall),
            per(cpu) / per(base_cpu)
        );
    });
}
