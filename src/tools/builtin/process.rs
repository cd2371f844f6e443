//! `process`: background processes per session (start, list, poll, log,
//! kill, wait), each with a bounded ring log. The manager kills every
//! child when the daemon stops.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;

use super::output::RingLog;
use super::terminal::{Launcher, approve};
use crate::tools::workspace::resolve;
use crate::tools::{Tool, ToolContext, ToolError, ToolSpec, arg_opt_str, arg_opt_u64, arg_str};

/// Longest `wait` a call may ask for.
const MAX_WAIT_SECS: u64 = 300;

struct Managed {
    id: String,
    session_id: String,
    command: String,
    pid: Option<u32>,
    started_at: i64,
    log: Mutex<RingLog>,
    read_offset: Mutex<u64>,
    exit: watch::Receiver<Option<Option<i32>>>,
}

impl Managed {
    fn state(&self) -> Value {
        match *self.exit.borrow() {
            None => json!({"running": true}),
            Some(code) => json!({"running": false, "exit_code": code}),
        }
    }

    fn summary(&self) -> Value {
        let mut v = json!({
            "process_id": self.id,
            "command": self.command,
            "pid": self.pid,
            "started_at": self.started_at,
        });
        if let (Some(obj), Value::Object(state)) = (v.as_object_mut(), self.state()) {
            obj.extend(state);
        }
        v
    }
}

/// All background processes of the daemon.
pub struct ProcessManager {
    launcher: Launcher,
    procs: Mutex<BTreeMap<String, Arc<Managed>>>,
}

impl std::fmt::Debug for ProcessManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessManager").finish_non_exhaustive()
    }
}

impl ProcessManager {
    /// A manager starting processes with `launcher`.
    pub fn new(launcher: Launcher) -> Self {
        Self {
            launcher,
            procs: Mutex::new(BTreeMap::new()),
        }
    }

    fn session_procs(&self, session_id: &str) -> Vec<Arc<Managed>> {
        self.procs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter(|p| p.session_id == session_id)
            .cloned()
            .collect()
    }

    fn find(&self, session_id: &str, id: &str) -> Result<Arc<Managed>, ToolError> {
        self.procs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .filter(|p| p.session_id == session_id)
            .cloned()
            .ok_or_else(|| ToolError::InvalidArgs(format!("no process {id:?} in this session")))
    }

    async fn start(
        &self,
        command: &str,
        workdir: Option<&str>,
        ctx: &ToolContext,
    ) -> Result<Value, ToolError> {
        if command.trim().is_empty() {
            return Err(ToolError::InvalidArgs("command is empty".into()));
        }
        let running = self
            .session_procs(&ctx.session_id)
            .iter()
            .filter(|p| p.exit.borrow().is_none())
            .count();
        if running >= self.launcher.config().max_processes {
            return Err(ToolError::Failed(format!(
                "{running} processes are already running in this session; kill one first"
            )));
        }
        let dir = resolve(&ctx.workspace, workdir.unwrap_or("."))?;
        approve(command, ctx).await?;
        let mut child = self
            .launcher
            .command(command, &ctx.workspace, &dir)
            .spawn()
            .map_err(|e| ToolError::Failed(format!("cannot start: {e}")))?;
        let (exit_tx, exit_rx) = watch::channel(None);
        let managed = Arc::new(Managed {
            id: format!("proc_{}", &crate::store::new_id()[..12]),
            session_id: ctx.session_id.clone(),
            command: command.to_string(),
            pid: child.id(),
            started_at: crate::store::now_ms(),
            log: Mutex::new(RingLog::new(self.launcher.config().process_log_bytes)),
            read_offset: Mutex::new(0),
            exit: exit_rx,
        });
        let readers: Vec<_> = [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn AsyncRead + Send + Unpin>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn AsyncRead + Send + Unpin>),
        ]
        .into_iter()
        .flatten()
        .map(|stream| tokio::spawn(pump(stream, managed.clone())))
        .collect();
        tokio::spawn(async move {
            let status = child.wait().await;
            for reader in readers {
                let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
            }
            let _ = exit_tx.send(Some(status.ok().and_then(|s| s.code())));
        });
        self.procs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(managed.id.clone(), managed.clone());
        Ok(managed.summary())
    }

    fn signal(pid: Option<u32>, signal: nix::sys::signal::Signal) {
        if let Some(pid) = pid {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid as i32), signal);
        }
    }

    async fn kill(&self, managed: &Managed) -> Value {
        use nix::sys::signal::Signal;
        if managed.exit.borrow().is_none() {
            Self::signal(managed.pid, Signal::SIGTERM);
            let mut exit = managed.exit.clone();
            let stopped =
                tokio::time::timeout(Duration::from_secs(3), exit.wait_for(Option::is_some)).await;
            if stopped.is_err() {
                Self::signal(managed.pid, Signal::SIGKILL);
            }
        }
        managed.summary()
    }

    /// Kills every process (daemon shutdown) and waits briefly for them.
    pub async fn shutdown(&self) {
        let all: Vec<Arc<Managed>> = self
            .procs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for managed in &all {
            Self::signal(managed.pid, nix::sys::signal::Signal::SIGKILL);
        }
        for managed in all {
            let mut exit = managed.exit.clone();
            let _ =
                tokio::time::timeout(Duration::from_secs(2), exit.wait_for(Option::is_some)).await;
        }
    }
}

async fn pump(mut stream: Box<dyn AsyncRead + Send + Unpin>, into: Arc<Managed>) {
    let mut buf = [0u8; 8192];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        into.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(&buf[..n]);
    }
}

/// `process`.
#[derive(Debug, Clone)]
pub struct Process {
    manager: Arc<ProcessManager>,
}

impl Process {
    /// The tool over a shared manager.
    pub fn new(manager: Arc<ProcessManager>) -> Self {
        Self { manager }
    }
}

#[async_trait]
impl Tool for Process {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "process",
            "terminal",
            "Manage background processes (servers, watchers, long builds) in the session workspace. action start runs a command in the background and returns its process_id; list shows this session's processes; poll returns output produced since the last poll; log returns the last lines; wait waits for exit; kill stops it.",
            json!({
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["start", "list", "poll", "log", "kill", "wait"]},
                    "command": {"type": "string", "description": "Command to start (start)."},
                    "workdir": {"type": "string", "description": "Directory to start in, relative to the workspace (start)."},
                    "process_id": {"type": "string", "description": "Which process (poll, log, kill, wait)."},
                    "lines": {"type": "integer", "minimum": 1, "description": "Lines to return (log). Default 100."},
                    "timeout": {"type": "integer", "minimum": 1, "description": "Seconds to wait (wait). Default 30."}
                },
                "required": ["action"]
            }),
        )
        .emoji("⚙️")
    }

    fn check(&self) -> Result<(), String> {
        self.manager.launcher.check()
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let action = arg_str(&args, "action")?;
        let result = match action {
            "start" => {
                self.manager
                    .start(
                        arg_str(&args, "command")?,
                        arg_opt_str(&args, "workdir"),
                        ctx,
                    )
                    .await?
            }
            "list" => json!({
                "processes": self.manager.session_procs(&ctx.session_id).iter().map(|p| p.summary()).collect::<Vec<_>>()
            }),
            "poll" => {
                let p = self
                    .manager
                    .find(&ctx.session_id, arg_str(&args, "process_id")?)?;
                let mut offset = p.read_offset.lock().unwrap_or_else(|e| e.into_inner());
                let (output, next, lost) = p
                    .log
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .since(*offset);
                *offset = next;
                let mut v = p.summary();
                v["output"] = json!(output);
                v["output_dropped"] = json!(lost);
                v
            }
            "log" => {
                let p = self
                    .manager
                    .find(&ctx.session_id, arg_str(&args, "process_id")?)?;
                let lines = arg_opt_u64(&args, "lines")?.unwrap_or(100).clamp(1, 10_000) as usize;
                let mut v = p.summary();
                v["log"] = json!(
                    p.log
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .tail_lines(lines)
                );
                v
            }
            "kill" => {
                let p = self
                    .manager
                    .find(&ctx.session_id, arg_str(&args, "process_id")?)?;
                self.manager.kill(&p).await
            }
            "wait" => {
                let p = self
                    .manager
                    .find(&ctx.session_id, arg_str(&args, "process_id")?)?;
                let secs = arg_opt_u64(&args, "timeout")?
                    .unwrap_or(30)
                    .clamp(1, MAX_WAIT_SECS);
                let mut exit = p.exit.clone();
                tokio::select! {
                    _ = tokio::time::timeout(Duration::from_secs(secs), exit.wait_for(Option::is_some)) => {}
                    _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
                }
                let mut v = p.summary();
                v["log"] = json!(
                    p.log
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .tail_lines(50)
                );
                v
            }
            other => {
                return Err(ToolError::InvalidArgs(format!(
                    "unknown action {other:?}; use start, list, poll, log, kill or wait"
                )));
            }
        };
        Ok(result.to_string())
    }
}
