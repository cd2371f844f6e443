//! `process`: background processes per session (start, list, poll, log,
//! kill, wait), each with a bounded ring log. A process started with
//! `notify_on_exit` (or `watch` patterns) is reported into its session when
//! it ends (or prints a matching line), through [`ProcessReports`]; the
//! watch is kept in storage so a restart still reports it. The manager
//! kills every child when the daemon stops.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;

use super::output::RingLog;
use super::terminal::{Launcher, approve};
use crate::store::ProcessWatch;
use crate::tools::workspace::resolve;
use crate::tools::{
    Tool, ToolContext, ToolError, ToolSpec, Unavailable, arg_opt_str, arg_opt_u64, arg_str,
};

/// Longest `wait` a call may ask for.
const MAX_WAIT_SECS: u64 = 300;

/// How many `watch` patterns one process may have, and how long each is.
const MAX_PATTERNS: usize = 8;
const MAX_PATTERN_CHARS: usize = 200;

/// Output lines a report carries, and characters at most.
const REPORT_LINES: usize = 20;
const REPORT_CHARS: usize = 2000;

/// How often a process adopted from a previous run is looked at.
const ADOPTED_EVERY: Duration = Duration::from_secs(1);

/// Where a background process's end is told: the session manager, which
/// keeps the watch in storage and posts the report into the session as a
/// turn of its own, durably.
#[async_trait]
pub trait ProcessReports: Send + Sync {
    /// Keeps `watch` until its end is told, so that a restart tells it.
    async fn keep(&self, watch: &ProcessWatch);
    /// Tells `watch`'s session `text`, once per `what` (`exit`,
    /// `watch-<n>`); `last` forgets the watch.
    async fn tell(&self, watch: &ProcessWatch, what: &str, text: &str, last: bool);
}

/// What a process started with reporting asked for.
struct Reporting {
    watch: ProcessWatch,
    on_exit: bool,
    /// Case-insensitive patterns, each told once, when a line first has it.
    patterns: Vec<(String, AtomicBool)>,
}

struct Managed {
    id: String,
    session_id: String,
    command: String,
    pid: Option<u32>,
    /// How it is ended: through its reaper, or its process group.
    ending: crate::tools::sandbox::Ending,
    /// Its process was waited for: its pid may be another's now.
    waited: AtomicBool,
    started_at: i64,
    log: Mutex<RingLog>,
    read_offset: Mutex<u64>,
    exit: watch::Receiver<Option<Option<i32>>>,
    reporting: Option<Reporting>,
    /// It runs in a pseudo-terminal: its output is read as a screen's.
    pty: bool,
    /// Why the gateway ended it, when it did (the disk's reserve).
    stopped: OnceLock<String>,
    /// Why it may only remove files, when the disk was nearly full.
    disk: Option<String>,
}

impl Managed {
    /// Asks it to stop, or kills it (`force`), unless it was waited for.
    fn end(&self, force: bool) {
        if self.waited.load(Ordering::SeqCst) {
            return;
        }
        if force {
            self.ending.force();
        } else {
            self.ending.ask();
        }
    }

    /// Output of the process as the model reads it.
    fn shown(&self, raw: String) -> String {
        if self.pty {
            crate::render::terminal::screen_text(&raw)
        } else {
            raw
        }
    }

    fn state(&self) -> Value {
        match *self.exit.borrow() {
            None => json!({"running": true}),
            Some(code) => {
                let mut state = json!({"running": false, "exit_code": code});
                if let Some(meaning) =
                    code.and_then(|c| super::exit_codes::explain(&self.command, c))
                {
                    state["exit_meaning"] = json!(meaning);
                }
                if let Some(why) = self.stopped.get() {
                    state["stopped"] = json!(format!("ended by the gateway: {why}"));
                }
                state
            }
        }
    }

    fn summary(&self) -> Value {
        let mut v = json!({
            "process_id": self.id,
            "command": self.command,
            "pid": self.pid,
            "started_at": self.started_at,
        });
        if let Some(why) = &self.disk {
            v["disk"] = json!(why);
        }
        if let (Some(obj), Value::Object(state)) = (v.as_object_mut(), self.state()) {
            obj.extend(state);
        }
        v
    }
}

/// Ended processes kept for a session to poll, and for the whole daemon:
/// each holds its log (`process_log_bytes`), and one started after
/// another for the daemon's lifetime grew its memory without end.
const KEEP_ENDED: usize = 8;
const KEEP_ENDED_ALL: usize = 64;

/// Forgets the ended processes past the last [`KEEP_ENDED`] of
/// `session_id`, and past the last [`KEEP_ENDED_ALL`] of all.
fn forget_ended(procs: &mut BTreeMap<String, Arc<Managed>>, session_id: &str) {
    let ended = |procs: &BTreeMap<String, Arc<Managed>>, of_session: bool| {
        let mut ended: Vec<(i64, String)> = procs
            .values()
            .filter(|p| p.exit.borrow().is_some() && (!of_session || p.session_id == session_id))
            .map(|p| (p.started_at, p.id.clone()))
            .collect();
        ended.sort();
        ended
    };
    for (of_session, keep) in [(true, KEEP_ENDED), (false, KEEP_ENDED_ALL)] {
        let ended = ended(procs, of_session);
        let past = ended.len().saturating_sub(keep);
        for (_, id) in &ended[..past] {
            procs.remove(id);
        }
    }
}

/// All background processes of the daemon.
pub struct ProcessManager {
    launcher: Launcher,
    procs: Mutex<BTreeMap<String, Arc<Managed>>>,
    reports: OnceLock<Arc<dyn ProcessReports>>,
    /// Set once the daemon stops: the processes it kills are told as such.
    stopping: Arc<AtomicBool>,
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
            reports: OnceLock::new(),
            stopping: Arc::default(),
        }
    }

    /// The sandbox commands of the local backend run in.
    pub fn sandbox(&self) -> &crate::tools::sandbox::Sandbox {
        self.launcher.sandbox()
    }

    /// Where reports go; until set, `notify_on_exit` and `watch` are
    /// refused.
    pub fn report_to(&self, reports: Arc<dyn ProcessReports>) {
        let _ = self.reports.set(reports);
    }

    /// Takes over the watches a previous run left: a process still running
    /// (the same pid with the same start time) is looked at every second
    /// and told when it is gone; one that is gone already is told at once.
    /// Neither's exit code can be known, as neither is this run's child.
    pub fn adopt(&self, watches: Vec<ProcessWatch>) {
        let Some(reports) = self.reports.get().cloned() else {
            return;
        };
        for watch in watches {
            let reports = reports.clone();
            tokio::spawn(async move {
                let text = if started_at_tick(watch.pid) == Some(watch.pid_start) {
                    while started_at_tick(watch.pid) == Some(watch.pid_start) {
                        tokio::time::sleep(ADOPTED_EVERY).await;
                    }
                    format!(
                        "[Background process {} (`{}`) has ended; its exit code is unknown \
                         (the gateway restarted while it ran).] Tell the user.",
                        watch.id, watch.command
                    )
                } else {
                    format!(
                        "[Background process {} (`{}`) ended while the gateway was down; its \
                         exit code is unknown.] Tell the user.",
                        watch.id, watch.command
                    )
                };
                reports.tell(&watch, "exit", &text, true).await;
            });
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
            .ok_or_else(|| {
                ToolError::InvalidArgs(format!(
                    "no process {id:?} in this session (one ended is forgotten after {KEEP_ENDED} more have ended)"
                ))
            })
    }

    async fn start(
        &self,
        command: &str,
        (workdir, pty): (Option<&str>, bool),
        (on_exit, patterns): (bool, Vec<String>),
        ctx: &ToolContext,
    ) -> Result<Value, ToolError> {
        if command.trim().is_empty() {
            return Err(ToolError::InvalidArgs("command is empty".into()));
        }
        let reports = self.reports.get().cloned();
        if (on_exit || !patterns.is_empty()) && reports.is_none() {
            return Err(ToolError::InvalidArgs(
                "notify_on_exit and watch are not available here (no chat to tell)".into(),
            ));
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
        approve(command, &dir, ctx).await?;
        let (mut child, outputs, reserve) =
            self.launcher
                .spawn(command, (&ctx.workspace, &dir), pty, None)?;
        let (exit_tx, exit_rx) = watch::channel(None);
        let id = format!("proc_{}", &crate::store::new_id()[..12]);
        let pid = child.id();
        let ending = self.launcher.ending(pid);
        // Ended should this call be dropped before its waiting task has it.
        let unfinished = ending.until_finished();
        let started_at = crate::store::now_ms();
        let reporting = (on_exit || !patterns.is_empty()).then(|| Reporting {
            watch: ProcessWatch {
                id: id.clone(),
                session_key: ctx.session_key.clone(),
                command: command.to_string(),
                pid: pid.map_or(0, i64::from),
                pid_start: pid.and_then(|p| started_at_tick(i64::from(p))).unwrap_or(0),
                started_at,
                origin: ctx
                    .origin
                    .as_deref()
                    .and_then(|event| serde_json::to_string(event).ok())
                    .unwrap_or_default(),
            },
            on_exit,
            patterns: patterns
                .into_iter()
                .map(|p| (p.to_lowercase(), AtomicBool::new(false)))
                .collect(),
        });
        if let (Some(r), Some(reports)) = (&reporting, &reports)
            && r.on_exit
        {
            reports.keep(&r.watch).await;
        }
        let managed = Arc::new(Managed {
            id,
            session_id: ctx.session_id.clone(),
            command: command.to_string(),
            pid,
            ending,
            waited: AtomicBool::new(false),
            started_at,
            log: Mutex::new(RingLog::new(self.launcher.config().process_log_bytes)),
            read_offset: Mutex::new(0),
            exit: exit_rx,
            reporting,
            pty,
            stopped: OnceLock::new(),
            disk: reserve.removing_only().map(str::to_string),
        });
        let readers: Vec<_> = outputs
            .into_iter()
            .map(|stream| tokio::spawn(pump(stream, managed.clone(), reports.clone())))
            .collect();
        let ending = managed.clone();
        let stopping = self.stopping.clone();
        tokio::spawn(async move {
            let status = tokio::select! {
                status = child.wait() => status,
                why = reserve.breached() => {
                    tracing::warn!(process = %ending.id, reason = %why, "background process ended: the disk's reserve");
                    let _ = ending.stopped.set(why);
                    ending.end(true);
                    child.wait().await
                }
            };
            ending.waited.store(true, Ordering::SeqCst);
            unfinished.finished();
            for mut reader in readers {
                if tokio::time::timeout(Duration::from_secs(1), &mut reader)
                    .await
                    .is_err()
                {
                    reader.abort();
                }
            }
            let code = status.ok().and_then(|s| s.code());
            // Told before the exit is seen, so a stop waiting for the exit
            // waits for the report to be stored too.
            if let (Some(r), Some(reports)) = (&ending.reporting, &reports)
                && r.on_exit
            {
                let how = match (code, ending.stopped.get()) {
                    _ if stopping.load(Ordering::Relaxed) => {
                        "was stopped because the gateway shut down".to_string()
                    }
                    (_, Some(why)) => format!("was ended by the gateway because {why}"),
                    (Some(code), None) => format!("exited with code {code}"),
                    (None, None) => "was ended by a signal".to_string(),
                };
                reports
                    .tell(&r.watch, "exit", &exit_report(&ending, &how), true)
                    .await;
            }
            let _ = exit_tx.send(Some(code));
        });
        let mut procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        forget_ended(&mut procs, &ctx.session_id);
        procs.insert(managed.id.clone(), managed.clone());
        drop(procs);
        Ok(managed.summary())
    }

    async fn kill(&self, managed: &Managed) -> Value {
        if managed.exit.borrow().is_none() {
            managed.end(false);
            let mut exit = managed.exit.clone();
            let stopped =
                tokio::time::timeout(Duration::from_secs(3), exit.wait_for(Option::is_some)).await;
            if stopped.is_err() {
                managed.end(true);
            }
        }
        managed.summary()
    }

    /// Kills every process (daemon shutdown) and waits briefly for them.
    pub async fn shutdown(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        let all: Vec<Arc<Managed>> = self
            .procs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for managed in &all {
            managed.end(true);
        }
        for managed in all {
            let mut exit = managed.exit.clone();
            let _ =
                tokio::time::timeout(Duration::from_secs(2), exit.wait_for(Option::is_some)).await;
        }
    }
}

/// Longest line the `watch` patterns are matched against; the rest of a
/// longer line is not looked at.
const MAX_LINE: usize = 4096;

async fn pump(
    mut stream: Box<dyn AsyncRead + Send + Unpin>,
    into: Arc<Managed>,
    reports: Option<Arc<dyn ProcessReports>>,
) {
    let mut buf = [0u8; 8192];
    let mut line = Vec::new();
    let watching = |m: &Managed| {
        m.reporting.as_ref().is_some_and(|r| {
            r.patterns
                .iter()
                .any(|(_, told)| !told.load(Ordering::Relaxed))
        })
    };
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        into.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(&buf[..n]);
        if let Some(reports) = reports.as_ref().filter(|_| watching(&into)) {
            for &byte in &buf[..n] {
                if byte == b'\n' {
                    matched(&into, reports, &line);
                    line.clear();
                } else if line.len() < MAX_LINE {
                    line.push(byte);
                }
            }
        }
    }
    if let Some(reports) = &reports {
        matched(&into, reports, &line);
    }
}

/// Tells the session of each `watch` pattern `line` is the first to have.
fn matched(managed: &Managed, reports: &Arc<dyn ProcessReports>, line: &[u8]) {
    let Some(reporting) = &managed.reporting else {
        return;
    };
    if line.is_empty() {
        return;
    }
    let text = managed.shown(String::from_utf8_lossy(line).into_owned());
    let lower = text.to_lowercase();
    for (n, (pattern, told)) in reporting.patterns.iter().enumerate() {
        if lower.contains(pattern.as_str()) && !told.swap(true, Ordering::Relaxed) {
            let report = format!(
                "[Background process {} (`{}`) printed a line with \"{pattern}\":]\n{}\nTell the user.",
                managed.id,
                managed.command,
                fenced(&text)
            );
            let (reports, watch) = (reports.clone(), reporting.watch.clone());
            tokio::spawn(async move {
                reports
                    .tell(&watch, &format!("watch-{n}"), &report, false)
                    .await;
            });
        }
    }
}

/// The report of `managed`'s end: how it ended, after how long, and its
/// last lines of output.
fn exit_report(managed: &Managed, how: &str) -> String {
    let secs = (crate::store::now_ms() - managed.started_at).max(0) / 1000;
    let took = match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    };
    let tail = managed.shown(
        managed
            .log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .tail_lines(REPORT_LINES),
    );
    let start = tail
        .char_indices()
        .rev()
        .nth(REPORT_CHARS - 1)
        .map_or(0, |(at, _)| at);
    let output = match tail[start..].trim_end() {
        "" => "It printed nothing.".to_string(),
        last => format!("Its last output:\n{}", fenced(last)),
    };
    format!(
        "[Background process {} (`{}`) {how} after {took}.]\n{output}\nTell the user.",
        managed.id, managed.command
    )
}

/// `text` in a code block no line of it can close.
fn fenced(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}\n{text}\n{fence}")
}

/// When process `pid` started, in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`); `None` when there is no such process.
fn started_at_tick(pid: i64) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count
    // from the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// `notify_on_exit` and `watch` of a start.
fn reporting_args(args: &Value) -> Result<(bool, Vec<String>), ToolError> {
    let on_exit = match args.get("notify_on_exit") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ToolError::InvalidArgs(
                "`notify_on_exit` must be true or false".into(),
            ));
        }
    };
    let patterns: Vec<String> = match args.get("watch") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|p| match p.as_str().map(str::trim) {
                Some(p) if !p.is_empty() && p.chars().count() <= MAX_PATTERN_CHARS => {
                    Ok(p.to_string())
                }
                _ => Err(ToolError::InvalidArgs(format!(
                    "each `watch` pattern must be text of 1 to {MAX_PATTERN_CHARS} characters"
                ))),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(ToolError::InvalidArgs(
                "`watch` must be a list of text patterns".into(),
            ));
        }
    };
    if patterns.len() > MAX_PATTERNS {
        return Err(ToolError::InvalidArgs(format!(
            "at most {MAX_PATTERNS} `watch` patterns"
        )));
    }
    Ok((on_exit, patterns))
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
            "Manage background processes (servers, watchers, long builds) in the session workspace. action start runs a command in the background and returns its process_id; list shows this session's processes; poll returns output produced since the last poll; log returns the last lines; wait waits for exit; kill stops it. To tell the user when something finishes (\"let me know when the build is done\"), start it with notify_on_exit: when it ends you get a message with how it ended and its last output, and answer it in a turn of its own.",
            json!({
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["start", "list", "poll", "log", "kill", "wait"]},
                    "command": {"type": "string", "description": "Command to start (start)."},
                    "workdir": {"type": "string", "description": "Directory to start in, relative to the workspace (start)."},
                    "pty": {"type": "boolean", "description": "Run it in a pseudo-terminal, for programs that only print or behave when attached to a TTY; its output is cleaned of terminal control sequences (start). Default false."},
                    "notify_on_exit": {"type": "boolean", "description": "Be told when it ends, even after a restart of the gateway (start)."},
                    "watch": {"type": "array", "items": {"type": "string"}, "maxItems": 8, "description": "Also be told the first time a line of output contains one of these (case-insensitive; start)."},
                    "process_id": {"type": "string", "description": "Which process (poll, log, kill, wait)."},
                    "lines": {"type": "integer", "minimum": 1, "description": "Lines to return (log). Default 100."},
                    "timeout": {"type": "integer", "minimum": 1, "description": "Seconds to wait (wait). Default 30."}
                },
                "required": ["action"]
            }),
        )
        .emoji("⚙️")
    }

    fn check(&self) -> Result<(), Unavailable> {
        self.manager.launcher.check()
    }

    fn shared_check(&self) -> Option<String> {
        Some(super::terminal::LAUNCHER_CHECK.into())
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let action = arg_str(&args, "action")?;
        let result = match action {
            "start" => {
                self.manager
                    .start(
                        arg_str(&args, "command")?,
                        (
                            arg_opt_str(&args, "workdir"),
                            args.get("pty").and_then(Value::as_bool).unwrap_or(false),
                        ),
                        reporting_args(&args)?,
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
                v["output"] = json!(p.shown(output));
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
                    p.shown(
                        p.log
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .tail_lines(lines)
                    )
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
                    p.shown(
                        p.log
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .tail_lines(50)
                    )
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
