//! The sandbox's added latency per command: `terminal` running `true`
//! through the registry, unsandboxed (`mode = "off"`, the baseline) and
//! under Landlock and bubblewrap, measured in the same run in alternating
//! rounds. Prints the median and p99 of each and the medians' difference
//! from the baseline (the target: at most 5 ms).
//!
//! `cargo bench --bench sandbox` (`SANDBOX_BENCH_RUNS`, default 300 per
//! mode).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use switchboard::config::{Config, Env, SandboxMode};
use switchboard::tools::{AllowAll, ToolContext, ToolRuntime};

fn runtime(mode: SandboxMode) -> ToolRuntime {
    let mut config = Config::default();
    config.tools.sandbox.mode = mode;
    ToolRuntime::build(
        &config,
        &Env::default(),
        switchboard::adapters::platforms(&config),
    )
    .unwrap()
}

fn quantile(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn main() {
    let runs: usize = std::env::var("SANDBOX_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ctx =
        ToolContext::for_session(dir.path(), "bench", "bench:dm:1", Arc::new(AllowAll)).unwrap();
    let modes = [
        ("off", SandboxMode::Off),
        ("landlock", SandboxMode::Landlock),
        ("bwrap", SandboxMode::Bwrap),
    ];
    let runtimes: Vec<_> = modes.iter().map(|(_, m)| runtime(*m)).collect();
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); modes.len()];
    rt.block_on(async {
        // Warm up each, then alternate rounds of ten so drift hits all alike.
        for tools in &runtimes {
            for _ in 0..10 {
                tools
                    .registry
                    .dispatch("terminal", json!({"command": "true"}), &ctx)
                    .await;
            }
        }
        for _ in 0..runs.div_ceil(10) {
            for (i, tools) in runtimes.iter().enumerate() {
                for _ in 0..10 {
                    let started = Instant::now();
                    let out = tools
                        .registry
                        .dispatch("terminal", json!({"command": "true"}), &ctx)
                        .await;
                    samples[i].push(started.elapsed());
                    assert!(out.contains("\"exit_code\":0"), "{}: {out}", modes[i].0);
                }
            }
        }
    });
    let medians: Vec<f64> = samples
        .iter_mut()
        .map(|s| {
            s.sort();
            quantile(s, 0.5)
        })
        .collect();
    println!("sandbox: terminal running `true`, {runs} runs per mode, alternating rounds");
    println!("| mode | median | p99 | median over off |");
    println!("|---|---|---|---|");
    for (i, (name, _)) in modes.iter().enumerate() {
        println!(
            "| {name} | {:.2} ms | {:.2} ms | {:+.2} ms |",
            medians[i],
            quantile(&samples[i], 0.99),
            medians[i] - medians[0]
        );
    }
}
