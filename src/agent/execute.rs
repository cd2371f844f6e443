//! Checking the model's tool calls (name repair, argument JSON) and running
//! a batch of them, in parallel only when that cannot change the outcome.

use std::path::{Component, Path, PathBuf};

use futures::StreamExt;
use serde_json::Value;

use super::message::ToolCall;
use super::provider::FinishReason;
use super::repair::repair;
use crate::tools::{Concurrency, Registry};

/// Most calls of one batch running at once.
pub const MAX_PARALLEL: usize = 8;

/// A call after validation.
#[derive(Debug, Clone)]
pub enum Checked {
    /// Runnable: the (repaired) call and its parsed arguments.
    Ready(ToolCall, Value),
    /// Not runnable; the error goes back to the model.
    Invalid(ToolCall, String),
    /// Arguments cut off by the output limit: never executed.
    Truncated(ToolCall),
    /// Arguments are not JSON (the model call is retried first).
    BadJson(ToolCall, String),
}

impl Checked {
    /// The call as it goes into the history.
    pub fn call(&self) -> &ToolCall {
        match self {
            Checked::Ready(call, _)
            | Checked::Invalid(call, _)
            | Checked::Truncated(call)
            | Checked::BadJson(call, _) => call,
        }
    }

    /// The error result of a call that must not run; `None` when it may.
    pub fn refusal(&self) -> Option<String> {
        let message = match self {
            Checked::Ready(..) => return None,
            Checked::Invalid(_, message) => message.clone(),
            Checked::BadJson(_, err) => {
                format!("Arguments are not valid JSON ({err}); the call was not executed.")
            }
            Checked::Truncated(call) => format!(
                "The arguments of {} were cut off by the output limit, so the call was NOT executed. Send smaller arguments (for example, write a large file in several parts).",
                call.name
            ),
        };
        Some(crate::tools::registry::error_json(&message))
    }
}

/// Validates one call against the session's tool names.
pub fn check(call: &ToolCall, valid: &[String], finish: FinishReason) -> Checked {
    let Some(name) = repair(&call.name, valid) else {
        let message = format!(
            "Unknown tool: {}. Available tools: {}.",
            crate::render::clip(&call.name, 80),
            valid.join(", ")
        );
        return Checked::Invalid(call.clone(), message);
    };
    let repaired = ToolCall {
        name,
        ..call.clone()
    };
    let text = call.arguments.trim();
    let text = if text.is_empty() { "{}" } else { text };
    match serde_json::from_str::<Value>(text) {
        Ok(args @ Value::Object(_)) => Checked::Ready(
            ToolCall {
                arguments: text.to_string(),
                ..repaired
            },
            args,
        ),
        Ok(Value::Null) => Checked::Ready(
            ToolCall {
                arguments: "{}".into(),
                ..repaired
            },
            Value::Object(Default::default()),
        ),
        Ok(other) => Checked::Invalid(
            repaired,
            format!(
                "Arguments must be a JSON object, not {}.",
                crate::render::clip(&other.to_string(), 80)
            ),
        ),
        Err(e) if e.is_eof() || finish == FinishReason::Length => Checked::Truncated(repaired),
        Err(e) => Checked::BadJson(repaired, e.to_string()),
    }
}

/// `path` relative to the workspace, with `.` and `..` folded lexically.
fn normalized(path: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for part in Path::new(path).components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir => out.push("/"),
            _ => {}
        }
    }
    out
}

/// Whether a batch may run in parallel: more than one call, none
/// exclusive (clarify, writes without a path, state changes), and no two
/// path-scoped calls on overlapping paths.
pub fn parallel_safe(calls: &[(ToolCall, Value)], registry: &Registry) -> bool {
    if calls.len() < 2 {
        return false;
    }
    let mut paths: Vec<PathBuf> = Vec::new();
    for (call, args) in calls {
        if call.name == "clarify" {
            return false;
        }
        let Some(entry) = registry.get(&call.name) else {
            return false;
        };
        match entry.spec.concurrency {
            Concurrency::Exclusive => return false,
            Concurrency::ReadOnly => {}
            Concurrency::PathScoped { arg } => {
                let Some(path) = args.get(arg).and_then(Value::as_str) else {
                    return false;
                };
                let path = normalized(path);
                if paths
                    .iter()
                    .any(|p| p.starts_with(&path) || path.starts_with(p))
                {
                    return false;
                }
                paths.push(path);
            }
        }
    }
    true
}

/// Runs a batch of tool futures, at most [`MAX_PARALLEL`] at once,
/// returning their results in call order.
pub async fn run_parallel<'a>(
    batch: Vec<std::pin::Pin<Box<dyn Future<Output = String> + Send + 'a>>>,
) -> Vec<String> {
    futures::stream::iter(batch)
        .buffered(MAX_PARALLEL)
        .collect()
        .await
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(name: &str, args: &str) -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: args.into(),
            extra: None,
        }
    }

    fn valid() -> Vec<String> {
        vec!["read_file".into(), "write_file".into()]
    }

    #[test]
    fn arguments_are_classified() {
        assert!(
            matches!(check(&call("read_file", ""), &valid(), FinishReason::ToolCalls), Checked::Ready(_, a) if a == json!({}))
        );
        assert!(
            matches!(check(&call("Read-File", "{\"path\":\"a\"}"), &valid(), FinishReason::ToolCalls), Checked::Ready(c, _) if c.name == "read_file")
        );
        assert!(matches!(
            check(
                &call("read_file", "{\"path\": \"a"),
                &valid(),
                FinishReason::ToolCalls
            ),
            Checked::Truncated(_)
        ));
        assert!(matches!(
            check(
                &call("read_file", "{path: a}"),
                &valid(),
                FinishReason::ToolCalls
            ),
            Checked::BadJson(..)
        ));
        assert!(matches!(
            check(
                &call("read_file", "{path: a}"),
                &valid(),
                FinishReason::Length
            ),
            Checked::Truncated(_)
        ));
        assert!(matches!(
            check(&call("read_file", "[1]"), &valid(), FinishReason::ToolCalls),
            Checked::Invalid(..)
        ));
        assert!(
            matches!(check(&call("rm_everything", "{}"), &valid(), FinishReason::ToolCalls), Checked::Invalid(_, m) if m.contains("Available tools: read_file, write_file"))
        );
    }

    /// A tool of any name that says it only reads.
    #[derive(Debug)]
    struct Reader(&'static str);

    #[async_trait::async_trait]
    impl crate::tools::Tool for Reader {
        fn spec(&self) -> crate::tools::ToolSpec {
            crate::tools::ToolSpec::new(self.0, "t", "reads", json!({"type": "object"}))
                .concurrency(Concurrency::ReadOnly)
        }

        async fn call(
            &self,
            _args: Value,
            _ctx: &crate::tools::ToolContext,
        ) -> Result<String, crate::tools::ToolError> {
            Ok(String::new())
        }
    }

    #[test]
    fn clarify_never_runs_in_parallel_whatever_its_spec_says() {
        let registry = Registry::new();
        for name in ["look", "clarify"] {
            registry
                .register(
                    std::sync::Arc::new(Reader(name)),
                    crate::tools::registry::RegisterMode::Normal,
                )
                .unwrap();
        }
        let batch = |names: &[&str]| -> Vec<(ToolCall, Value)> {
            names.iter().map(|n| (call(n, "{}"), json!({}))).collect()
        };
        assert!(parallel_safe(&batch(&["look", "look"]), &registry));
        assert!(!parallel_safe(&batch(&["look", "clarify"]), &registry));
        assert!(!parallel_safe(&batch(&["clarify", "clarify"]), &registry));
    }

    #[tokio::test]
    async fn at_most_eight_calls_run_at_once_and_results_keep_order() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let running = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let batch: Vec<std::pin::Pin<Box<dyn Future<Output = String> + Send + '_>>> = (0..20)
            .map(|i| {
                let (running, most) = (&running, &most);
                Box::pin(async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    for _ in 0..3 {
                        tokio::task::yield_now().await;
                    }
                    running.fetch_sub(1, Ordering::SeqCst);
                    i.to_string()
                }) as _
            })
            .collect();
        let out = run_parallel(batch).await;
        assert_eq!(most.load(Ordering::SeqCst), MAX_PARALLEL);
        assert_eq!(MAX_PARALLEL, 8);
        let expected: Vec<String> = (0..20).map(|i: i32| i.to_string()).collect();
        assert_eq!(out, expected);
    }

    #[test]
    fn paths_fold_lexically() {
        assert_eq!(normalized("./a/../b/c"), PathBuf::from("b/c"));
        assert_eq!(normalized("b/c/"), PathBuf::from("b/c"));
    }
}
