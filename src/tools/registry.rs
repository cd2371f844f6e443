//! The registry: every tool registered once, availability probes cached,
//! and a dispatch that never fails upward.

use crate::telemetry::events;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::FutureExt;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::sanitize::{MAX_ERROR_CHARS, clean};
use super::{Tool, ToolContext, ToolError, ToolSpec, coerce};
use crate::render::clip as truncate_chars;

/// How long an availability probe result is trusted.
pub const CHECK_TTL: Duration = Duration::from_secs(30);

/// Characters of a spilled result shown inline.
const PREVIEW_CHARS: usize = 4000;

/// How a registration treats an existing tool of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterMode {
    /// Refuse to replace a tool of another toolset (MCP toolsets may
    /// replace each other).
    Normal,
    /// Replace whatever is there.
    Override,
}

/// Registration failures.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegistryError {
    /// The name is taken by another toolset.
    #[error(
        "tool `{name}` is already registered by toolset `{existing}`; toolset `{toolset}` may not replace it"
    )]
    Conflict {
        /// Tool name.
        name: String,
        /// Toolset holding it.
        existing: String,
        /// Toolset that tried to register it.
        toolset: String,
    },
}

/// Whether a tool can be used now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// It can.
    Available,
    /// It cannot; the reason.
    Unavailable(String),
}

impl Availability {
    /// True when available.
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available)
    }
}

/// A registered tool.
pub struct ToolEntry {
    /// Its declaration, taken once at registration.
    pub spec: ToolSpec,
    /// The implementation.
    pub tool: Arc<dyn Tool>,
}

impl ToolEntry {
    /// The parameters schema in force now (dynamic override or declared).
    pub fn parameters(&self) -> Cow<'_, Value> {
        match self.tool.dynamic_parameters() {
            Some(dynamic) => Cow::Owned(dynamic),
            None => Cow::Borrowed(&self.spec.parameters),
        }
    }
}

/// The tool registry; share it behind an `Arc`.
#[derive(Default)]
pub struct Registry {
    tools: RwLock<BTreeMap<String, Arc<ToolEntry>>>,
    generation: AtomicU64,
    checks: Mutex<HashMap<String, (Instant, Availability)>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("tools", &self.names())
            .field("generation", &self.generation())
            .finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a tool. A name already held by a different toolset is
    /// refused (and logged) unless both toolsets are MCP toolsets or the
    /// mode is [`RegisterMode::Override`]. Every change bumps the
    /// generation.
    pub fn register(&self, tool: Arc<dyn Tool>, mode: RegisterMode) -> Result<(), RegistryError> {
        let spec = tool.spec();
        let mut tools = self.tools.write().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = tools.get(&spec.name) {
            let same_toolset = existing.spec.toolset == spec.toolset;
            let both_mcp =
                existing.spec.toolset.starts_with("mcp-") && spec.toolset.starts_with("mcp-");
            if !same_toolset && !both_mcp && mode != RegisterMode::Override {
                let err = RegistryError::Conflict {
                    name: spec.name.clone(),
                    existing: existing.spec.toolset.clone(),
                    toolset: spec.toolset.clone(),
                };
                tracing::error!(tool = %spec.name, error = %err, "tool registration rejected");
                return Err(err);
            }
        }
        let name = spec.name.clone();
        let shared = tool.shared_check();
        tools.insert(name.clone(), Arc::new(ToolEntry { spec, tool }));
        drop(tools);
        self.forget_check(&check_key(&name, shared));
        self.generation.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Removes every tool of a toolset (an MCP server going away). Returns
    /// how many were removed.
    pub fn remove_toolset(&self, toolset: &str) -> usize {
        let mut tools = self.tools.write().unwrap_or_else(|e| e.into_inner());
        let before = tools.len();
        tools.retain(|_, entry| entry.spec.toolset != toolset);
        let removed = before - tools.len();
        drop(tools);
        if removed > 0 {
            self.checks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
        removed
    }

    /// Counter bumped by every change; memoised resolutions key on it.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// A tool by name.
    pub fn get(&self, name: &str) -> Option<Arc<ToolEntry>> {
        self.tools
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Every registered name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.tools
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Every registered tool, sorted by name.
    pub fn entries(&self) -> Vec<Arc<ToolEntry>> {
        self.tools
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Tool names grouped by the toolset they registered under.
    pub fn by_toolset(&self) -> BTreeMap<String, Vec<String>> {
        let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for entry in self.entries() {
            map.entry(entry.spec.toolset.clone())
                .or_default()
                .push(entry.spec.name.clone());
        }
        map
    }

    /// Drops every cached availability answer (a dependency changed state).
    pub fn invalidate_checks(&self) {
        self.checks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    fn forget_check(&self, name: &str) {
        self.checks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
    }

    /// Whether a tool is usable now. The probe's answer is cached for
    /// [`CHECK_TTL`], under the shared check's name for tools that share
    /// one (so it runs once for all of them); a probe that errors or
    /// panics means unavailable.
    pub fn availability(&self, name: &str) -> Availability {
        let Some(entry) = self.get(name) else {
            return Availability::Unavailable(format!("unknown tool {name}"));
        };
        let key = check_key(name, entry.tool.shared_check());
        let now = Instant::now();
        {
            let checks = self.checks.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((at, cached)) = checks.get(&key)
                && now.duration_since(*at) < CHECK_TTL
            {
                return cached.clone();
            }
        }
        let result = match std::panic::catch_unwind(AssertUnwindSafe(|| entry.tool.check())) {
            Ok(Ok(())) => Availability::Available,
            Ok(Err(reason)) => Availability::Unavailable(reason.0),
            Err(_) => Availability::Unavailable("availability check panicked".into()),
        };
        self.checks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (now, result.clone()));
        result
    }

    /// Runs a tool call and always returns a string for the model: the
    /// result, or `{"error": …}` for an unknown tool, an unavailable one, a
    /// failure or a panic. Arguments are coerced to the schema first;
    /// oversized results are spilled to the workspace with a preview.
    pub async fn dispatch(&self, name: &str, args: Value, ctx: &ToolContext) -> String {
        let tool = self.get(name).map(|entry| entry.tool.clone());
        self.guarded(name, args, ctx, |args| async move {
            match tool {
                Some(tool) => tool.call(args, ctx).await,
                None => Err(ToolError::Failed(format!("unknown tool {name}"))),
            }
        })
        .await
    }

    /// Runs `handler` for a call of registered tool `name` with the
    /// registry's guarantees, whoever serves it (the agent loop serves its
    /// own tools through this too): availability re-checked, arguments
    /// coerced to the schema, a panic caught, errors cleaned of framing
    /// tokens and capped, an oversized result spilled to the workspace.
    pub async fn guarded<F, Fut>(
        &self,
        name: &str,
        args: Value,
        ctx: &ToolContext,
        handler: F,
    ) -> String
    where
        F: FnOnce(Value) -> Fut,
        Fut: Future<Output = Result<String, ToolError>>,
    {
        let Some(entry) = self.get(name) else {
            record(name, "unknown");
            return error_json(&format!("Unknown tool: {}", clean(name, 100)));
        };
        if let Availability::Unavailable(reason) = self.availability(name) {
            record(name, "unavailable");
            return error_json(&format!(
                "Tool {name} is currently unavailable: {}",
                clean(&reason, MAX_ERROR_CHARS)
            ));
        }
        let args = coerce::coerce(args, &entry.parameters());
        let started = std::time::Instant::now();
        let outcome = AssertUnwindSafe(handler(args)).catch_unwind().await;
        let took = Some(started.elapsed());
        let record = |outcome| {
            events::emit(events::ToolCalled {
                tool: name,
                outcome,
                took,
            })
        };
        match outcome {
            Ok(Ok(output)) => {
                record("ok");
                fit_result(&entry.spec, output, ctx).await
            }
            Ok(Err(ToolError::Refused(reason))) => {
                record("refused");
                error_json(&clean(&reason, MAX_ERROR_CHARS))
            }
            Ok(Err(err)) => {
                record("error");
                error_json(&format!(
                    "Tool execution failed: {}",
                    clean(&err.to_string(), MAX_ERROR_CHARS)
                ))
            }
            Err(_) => {
                record("panic");
                tracing::error!(tool = name, "tool handler panicked");
                error_json("Tool execution failed: the tool crashed")
            }
        }
    }
}

/// Where the availability of tool `name` is cached: under its shared
/// check's name (which no tool name has: it holds a space) or its own.
fn check_key(name: &str, shared: Option<String>) -> String {
    match shared {
        Some(check) => format!("shared {check}"),
        None => name.to_string(),
    }
}

/// A call that never reached its handler.
fn record(tool: &str, outcome: &'static str) {
    events::emit(events::ToolCalled {
        tool,
        outcome,
        took: None,
    });
}

/// `{"error": message}` as a string.
pub fn error_json(message: &str) -> String {
    json!({ "error": message }).to_string()
}

/// Keeps a result within the tool's cap: longer output is written to
/// `.switchboard/results/` in the workspace and replaced by a preview that
/// says where the whole is; when that fails, it is truncated with a marker.
async fn fit_result(spec: &ToolSpec, output: String, ctx: &ToolContext) -> String {
    let total = output.chars().count();
    if total <= spec.max_result_chars {
        return output;
    }
    let preview = truncate_chars(&output, PREVIEW_CHARS.min(spec.max_result_chars));
    let file = format!("{}-{}.txt", spec.name, crate::store::new_id());
    // Beneath the workspace: the agent may have made `.switchboard` a
    // symlink to anywhere.
    let root = ctx.workspace.clone();
    let path = root.join(".switchboard").join("results").join(&file);
    let whole = output.clone();
    let written = tokio::task::spawn_blocking(move || {
        super::workspace::write_beneath(&root, &path, whole.as_bytes())
    })
    .await
    .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    match written {
        Ok(()) => json!({
            "truncated": true,
            "total_chars": total,
            "full_output_path": format!(".switchboard/results/{file}"),
            "note": "The full result was saved to full_output_path in the workspace; read it with read_file (use offset/limit).",
            "preview": preview,
        })
        .to_string(),
        Err(err) => {
            tracing::warn!(tool = %spec.name, error = %err, "could not spill a large result");
            truncate_chars(&output, spec.max_result_chars)
        }
    }
}
