//! Schemas of the agent-layer tools: `clarify`, `todo`, `memory`,
//! `session_search`, `cronjob` and the `forge_*` read tools. Their state (the user, the todo list, the clarify
//! broker) belongs to the running agent, which intercepts these calls
//! before the registry; the registry holds them so toolsets, availability
//! and schema listing treat them like every other tool.

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::tools::{Concurrency, Tool, ToolContext, ToolError, ToolSpec};

/// One agent-layer tool: a declaration the agent loop serves.
#[derive(Debug, Clone)]
pub struct AgentTool {
    spec: fn() -> ToolSpec,
}

/// The agent-layer tools.
pub fn agent_tools() -> Vec<AgentTool> {
    [
        clarify as fn() -> ToolSpec,
        todo,
        memory,
        session_search,
        cronjob,
        forge_diff,
        forge_file,
        forge_ci_log,
        forge_thread,
    ]
    .into_iter()
    .map(|spec| AgentTool { spec })
    .collect()
}

#[async_trait]
impl Tool for AgentTool {
    fn spec(&self) -> ToolSpec {
        (self.spec)()
    }

    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        Err(ToolError::Failed(format!(
            "{} is served by the agent loop and cannot run outside a conversation",
            self.spec().name
        )))
    }
}

fn clarify() -> ToolSpec {
    ToolSpec::new(
        "clarify",
        "clarify",
        "Ask the user a question and wait for the answer. Offer choices when the answer is one of a few options; they are shown as buttons.",
        json!({
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "The question."},
                "choices": {"type": "array", "items": {"type": "string"}, "maxItems": 6, "description": "Possible answers (optional)."}
            },
            "required": ["question"]
        }),
    )
    .emoji("❓")
    .concurrency(Concurrency::Exclusive)
}

fn todo() -> ToolSpec {
    ToolSpec::new(
        "todo",
        "todo",
        "Keep a task list for this session. Send the items to set; with merge true, items update by id and others stay. Send nothing to read the list.",
        json!({
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "content": {"type": "string"},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed", "cancelled"]}
                        },
                        "required": ["id", "content", "status"]
                    }
                },
                "merge": {"type": "boolean", "description": "Update by id instead of replacing the list. Default false."}
            }
        }),
    )
    .emoji("📋")
}

fn memory() -> ToolSpec {
    ToolSpec::new(
        "memory",
        "memory",
        "Persistent notes about the user that last across sessions: preferences, facts, ongoing work. action add stores a note, replace changes one by note_id, remove deletes one, list shows them.",
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["add", "replace", "remove", "list"]},
                "content": {"type": "string", "description": "Note text (add, replace)."},
                "note_id": {"type": "integer", "description": "Which note (replace, remove)."}
            },
            "required": ["action"]
        }),
    )
    .emoji("🧠")
}

fn session_search() -> ToolSpec {
    ToolSpec::new(
        "session_search",
        "session_search",
        "Full-text search over this user's past conversations. Every word must occur.",
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to find."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "Most results (default 10)."}
            },
            "required": ["query"]
        }),
    )
    .emoji("🗂️")
    .concurrency(Concurrency::ReadOnly)
}

fn cronjob() -> ToolSpec {
    ToolSpec::new(
        "cronjob",
        "cron",
        "Scheduled jobs of this chat: at each run the prompt is answered by an agent and the answer posted here. action create makes one (the user is asked to confirm), list shows this chat's jobs with their last run, runs shows a job's recent runs (status and delivery), pause, resume and delete change one by job_id. Jobs always post to this chat.",
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["create", "list", "runs", "pause", "resume", "delete"]},
                "schedule": {"type": "string", "description": "create: a cron expression (minute hour day month weekday, e.g. \"0 9 * * 1-5\"), \"every 30m\", or \"at 2026-12-01T09:00\"."},
                "timezone": {"type": "string", "description": "create: IANA time zone of the schedule, e.g. Europe/Berlin. Default UTC."},
                "prompt": {"type": "string", "description": "create: what to do at each run, written as a request."},
                "name": {"type": "string", "description": "create: a short name."},
                "missed": {"type": "string", "enum": ["skip", "once", "all"], "description": "create: runs missed while the gateway was down are skipped (default), run once, or all run."},
                "job_id": {"type": "string", "description": "runs, pause, resume, delete: which job (its id or name)."}
            },
            "required": ["action"]
        }),
    )
    .emoji("⏰")
    .concurrency(Concurrency::Exclusive)
}

fn forge_diff() -> ToolSpec {
    ToolSpec::new(
        "forge_diff",
        "forge",
        "The diff of the pull or merge request this run is about: the file list first, then the patches with line numbers to comment on (an incremental review shows only what changed since the last review). Paged; path shows one file whole.",
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "One changed file to show whole (optional)."},
                "page": {"type": "integer", "minimum": 1, "description": "Page, from 1 (optional)."}
            }
        }),
    )
    .emoji("🧾")
    .concurrency(Concurrency::ReadOnly)
}

fn forge_file() -> ToolSpec {
    ToolSpec::new(
        "forge_file",
        "forge",
        "A file of the repository this run is about, at the change's head (default) or base commit, with line numbers; at most 400 lines per call.",
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path in the repository."},
                "version": {"type": "string", "enum": ["head", "base"], "description": "Which commit (default head)."},
                "start_line": {"type": "integer", "minimum": 1},
                "end_line": {"type": "integer", "minimum": 1}
            },
            "required": ["path"]
        }),
    )
    .emoji("📄")
    .concurrency(Concurrency::ReadOnly)
}

fn forge_ci_log() -> ToolSpec {
    ToolSpec::new(
        "forge_ci_log",
        "forge",
        "The log of the failed CI job this run is about, its tail first, colours and timestamps removed, with the error lines listed; page back with skip_from_end.",
        json!({
            "type": "object",
            "properties": {
                "lines": {"type": "integer", "minimum": 1, "maximum": 2000, "description": "Lines to show (default 200)."},
                "skip_from_end": {"type": "integer", "minimum": 0, "description": "Lines to skip from the end, to read earlier parts."}
            }
        }),
    )
    .emoji("🪵")
    .concurrency(Concurrency::ReadOnly)
}

fn forge_thread() -> ToolSpec {
    ToolSpec::new(
        "forge_thread",
        "forge",
        "The discussion of the pull or merge request this run is about: its comments and review comments, oldest first.",
        json!({"type": "object", "properties": {}}),
    )
    .emoji("💬")
    .concurrency(Concurrency::ReadOnly)
}
