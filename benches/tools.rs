//! Tool runtime costs, each beside a baseline measured in the same run:
//! - toolset resolution: cold (fresh memo) vs memoised;
//! - dispatch: through the registry (lookup, availability, coercion,
//!   metrics, panic guard) vs calling the tool directly;
//! - coercion of a typical argument object vs cloning it.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use switchboard::config::{Config, Env};
use switchboard::tools::coerce::coerce;
use switchboard::tools::{
    AllowAll, RegisterMode, Tool, ToolContext, ToolError, ToolRuntime, ToolSpec, Toolsets,
};

struct Noop;

#[async_trait::async_trait]
impl Tool for Noop {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "noop",
            "bench",
            "does nothing",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        )
    }
    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        Ok("ok".into())
    }
}

fn resolve(c: &mut Criterion) {
    let rt = ToolRuntime::build(
        &Config::default(),
        &Env::default(),
        switchboard::adapters::platforms(&Config::default()),
    )
    .unwrap();
    let mut group = c.benchmark_group("resolve_gateway");
    group.bench_function("cold", |b| {
        b.iter(|| {
            Toolsets::new(rt.registry.clone(), rt.platforms.presets())
                .resolve("gateway")
                .unwrap()
        })
    });
    let warm = Toolsets::new(rt.registry.clone(), rt.platforms.presets());
    warm.resolve("gateway").unwrap();
    group.bench_function("memoised", |b| b.iter(|| warm.resolve("gateway").unwrap()));
    group.finish();
}

fn dispatch(c: &mut Criterion) {
    let rt = ToolRuntime::build(
        &Config::default(),
        &Env::default(),
        switchboard::adapters::platforms(&Config::default()),
    )
    .unwrap();
    let noop = Arc::new(Noop);
    rt.registry
        .register(noop.clone(), RegisterMode::Normal)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::for_session(dir.path(), "b", "bench:dm:1", Arc::new(AllowAll)).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("dispatch_noop");
    group.bench_function("direct_call", |b| {
        b.to_async(&runtime)
            .iter(|| async { noop.call(json!({"n": 1}), &ctx).await.unwrap() })
    });
    group.bench_function("registry", |b| {
        b.to_async(&runtime)
            .iter(|| async { rt.registry.dispatch("noop", json!({"n": 1}), &ctx).await })
    });
    group.finish();
}

fn coercion(c: &mut Criterion) {
    let schema = json!({
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "offset": {"type": "integer"},
            "limit": {"type": "integer"},
            "case_insensitive": {"type": "boolean"},
            "paths": {"type": "array", "items": {"type": "string"}}
        }
    });
    let args = json!({"path": "src/main.rs", "offset": "10", "limit": "200", "case_insensitive": "true", "paths": "a.rs"});
    let mut group = c.benchmark_group("coerce_args");
    group.bench_function("clone_baseline", |b| b.iter(|| args.clone()));
    group.bench_function("coerce", |b| b.iter(|| coerce(args.clone(), &schema)));
    group.finish();
}

criterion_group!(benches, resolve, dispatch, coercion);
criterion_main!(benches);
