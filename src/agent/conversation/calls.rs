//! A turn's tool calls: identical calls of a batch merged, each run
//! through the agent layer or the registry with its span and events, a
//! batch in parallel when every call in it may be.

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::Conversation;
use crate::agent::execute::{Checked, parallel_safe, run_parallel};
use crate::agent::layer::{self, AGENT_TOOLS};
use crate::agent::message::ToolCall;
use crate::tools::registry::error_json;
use crate::tools::{ToolContext, workspace};

/// Where a runnable call's result comes from after identical calls of a
/// batch were merged: its own run, or the run of the first identical one.
pub(super) enum Slot {
    First(usize),
    Repeat(usize),
}

/// The distinct runnable calls of a batch (same tool, same arguments run
/// once: one command, one approval prompt) and, for each runnable call in
/// order, which of them answers it.
pub(super) fn distinct_calls(checked: &[Checked]) -> (Vec<(ToolCall, Value)>, Vec<Slot>) {
    let mut unique: Vec<(ToolCall, Value)> = Vec::new();
    let mut slots = Vec::new();
    for c in checked {
        let Checked::Ready(call, args) = c else {
            continue;
        };
        match unique
            .iter()
            .position(|(u, a)| u.name == call.name && a == args)
        {
            Some(u) => slots.push(Slot::Repeat(u)),
            None => {
                unique.push((call.clone(), args.clone()));
                slots.push(Slot::First(unique.len() - 1));
            }
        }
    }
    (unique, slots)
}

impl Conversation {
    /// The context tools run in; the session's workspace is made here the
    /// first time.
    pub(super) fn tool_context(&self, cancel: &CancellationToken) -> std::io::Result<ToolContext> {
        let workspace = match self.workspace.get() {
            Some(dir) => dir.clone(),
            None => {
                let dir = workspace::session_dir(&self.deps.workspace_root, &self.session.key)?;
                self.workspace.get_or_init(|| dir).clone()
            }
        };
        Ok(self.context_in(workspace, cancel))
    }

    fn context_in(&self, workspace: std::path::PathBuf, cancel: &CancellationToken) -> ToolContext {
        ToolContext {
            session_id: self.session.id.clone(),
            session_key: self.session.key.clone(),
            user: self
                .owner
                .as_ref()
                .map(|o| format!("{}:{}", o.platform, o.user_id)),
            workspace,
            approvals: self.approvals.clone(),
            cancel: cancel.clone(),
            origin: self.origin.clone(),
        }
    }

    async fn run_one(&self, call: &ToolCall, args: &Value, ctx: &ToolContext) -> String {
        if ctx.cancel.is_cancelled() {
            return error_json("Tool execution failed: cancelled before it started");
        }
        let emoji = self
            .deps
            .tools
            .registry
            .get(&call.name)
            .map_or(crate::tools::DEFAULT_EMOJI, |entry| entry.spec.emoji);
        self.events.tool_started(call, emoji);
        let span = tracing::info_span!("tool", tool.name = %call.name, tool.call_id = %call.id);
        let mut result =
            tracing::Instrument::instrument(self.run_handler(call, args, ctx), span).await;
        self.events.tool_finished(call, &result);
        if !result.starts_with("{\"error\"")
            && let Some(hints) = self.hints.after(&call.name, args, &ctx.workspace).await
        {
            result.push_str("\n\n");
            result.push_str(&hints);
        }
        result
    }

    async fn run_handler(&self, call: &ToolCall, args: &Value, ctx: &ToolContext) -> String {
        let registry = &self.deps.tools.registry;
        if AGENT_TOOLS.contains(&call.name.as_str()) {
            let served = layer::Served {
                todos: &self.todos,
                store: &self.deps.store,
                owner: self.owner.as_ref(),
                clarify: self.clarify.as_deref(),
                jobs: self.jobs.as_deref(),
                origin: self.origin.as_deref(),
                forge: self.forge.as_deref(),
            };
            registry
                .guarded(&call.name, args.clone(), ctx, |args| async move {
                    layer::run(&call.name, &args, &served, &ctx.cancel).await
                })
                .await
        } else {
            self.deps
                .tools
                .registry
                .dispatch(&call.name, args.clone(), ctx)
                .await
        }
    }

    pub(super) async fn run_batch(
        &self,
        calls: &[(ToolCall, Value)],
        cancel: &CancellationToken,
    ) -> Vec<String> {
        let ctx = match self.tool_context(cancel) {
            Ok(ctx) => ctx,
            Err(err) => {
                tracing::warn!(session.key = %self.session.key, error = %err, "session workspace not made");
                let failed = error_json(&format!(
                    "Tool execution failed: the session's workspace could not be made ({err})"
                ));
                // The agent's own tools (its todo list, memory, the forge's
                // reads…) touch no file: they still run, one by one, where
                // the workspace would be (a large result is not spilled
                // into a directory that does not exist).
                let path = workspace::session_path(&self.deps.workspace_root, &self.session.key);
                let ctx = self.context_in(path, cancel);
                let mut out = Vec::with_capacity(calls.len());
                for (call, args) in calls {
                    out.push(if AGENT_TOOLS.contains(&call.name.as_str()) {
                        self.run_one(call, args, &ctx).await
                    } else {
                        failed.clone()
                    });
                }
                return out;
            }
        };
        if parallel_safe(calls, &self.deps.tools.registry) {
            let batch: Vec<std::pin::Pin<Box<dyn Future<Output = String> + Send + '_>>> = calls
                .iter()
                .map(|(call, args)| Box::pin(self.run_one(call, args, &ctx)) as _)
                .collect();
            run_parallel(batch).await
        } else {
            let mut out = Vec::with_capacity(calls.len());
            for (call, args) in calls {
                out.push(self.run_one(call, args, &ctx).await);
            }
            out
        }
    }
}
