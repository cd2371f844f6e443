//! `terminal`: run a shell command in the foreground, on the local host,
//! through the docker CLI, or over ssh. Every command passes the approval
//! hook first; on the local backend it runs in the OS sandbox
//! ([`crate::tools::sandbox`]); the child gets an environment built from an
//! allowlist, a time limit, and a bounded output capture; every process it
//! started ends with it, on timeout or cancellation too (the sandbox's
//! reaper; the process group elsewhere).

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};

use super::output::HeadTail;
use crate::config::{TerminalBackend, TerminalConfig};
use crate::tools::sandbox::{Dirs, Ending, Reserve, Sandbox, default_path, private_tmp};
use crate::tools::workspace::resolve;
use crate::tools::{
    ApprovalVerdict, Tool, ToolContext, ToolError, ToolSpec, Unavailable, arg_opt_str, arg_opt_u64,
    arg_str,
};

/// How commands are started: the backend, the sandbox of the local one,
/// and the environment children get. Shared by `terminal` and `process`.
#[derive(Debug, Clone)]
pub struct Launcher {
    config: TerminalConfig,
    sandbox: Sandbox,
}

/// Variables a child gets from the daemon's environment when set, besides
/// `[tools.terminal] env_passthrough`.
const ENV_KEPT: &[&str] = &["LANG", "LC_ALL", "TERM", "TZ"];

/// Git's settings that run a program, pinned for every local command. A
/// hook or setting the agent wrote into the workspace (`.git/hooks`,
/// `core.fsmonitor` in `.git/config`, a `.gitconfig` in `HOME`, which is
/// the workspace) would otherwise run when an innocuous `git status` or
/// `git commit` does, never shown for approval. Given as
/// `GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`, they override every
/// configuration file and yield only to `git -c` written in the command
/// itself, where approval reads it. Drivers named by `.gitattributes`
/// (`filter.*`, `diff.*.textconv`) cannot be pinned this way: the sandbox
/// is their boundary.
const GIT_PINNED: &[(&str, &str)] = &[
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.sshCommand", "ssh"),
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("sequence.editor", "true"),
    // The empty value empties the list of helpers read before it.
    ("credential.helper", ""),
    ("gpg.program", "gpg"),
    ("gpg.ssh.program", "ssh-keygen"),
    ("gpg.x509.program", "gpgsm"),
    ("protocol.ext.allow", "never"),
];

/// Appends [`GIT_PINNED`] to `env`, after the settings an operator passes
/// through in `GIT_CONFIG_COUNT` (a later one wins).
fn pin_git(env: &mut Vec<(String, String)>) {
    let first = env
        .iter()
        .find(|(n, _)| n == "GIT_CONFIG_COUNT")
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    env.retain(|(n, _)| n != "GIT_CONFIG_COUNT");
    for (i, (key, value)) in GIT_PINNED.iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{}", first + i), (*key).to_string()));
        env.push((
            format!("GIT_CONFIG_VALUE_{}", first + i),
            (*value).to_string(),
        ));
    }
    env.push((
        "GIT_CONFIG_COUNT".into(),
        (first + GIT_PINNED.len()).to_string(),
    ));
}

/// A stream of a child's output: a pipe, or its pseudo-terminal.
pub type Output = Box<dyn AsyncRead + Send + Unpin>;

/// The check `terminal` and `process` share: whether the backend runs.
pub const LAUNCHER_CHECK: &str = "command backend";

/// `'…'`-quotes a string for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl Launcher {
    /// A launcher for `config`, whose local backend runs in `sandbox`.
    pub fn new(config: TerminalConfig, sandbox: Sandbox) -> Self {
        Self { config, sandbox }
    }

    /// The backend settings.
    pub fn config(&self) -> &TerminalConfig {
        &self.config
    }

    /// The sandbox of the local backend.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// How to end a command this launcher started as process `leader`.
    pub fn ending(&self, leader: Option<u32>) -> Ending {
        Ending::new(leader, self.reaps())
    }

    /// Whether its commands are ended through their reaper.
    fn reaps(&self) -> bool {
        self.config.backend == TerminalBackend::Local && self.sandbox.reaps()
    }

    /// Whether the backend can run at all, with the reason when not.
    pub fn check(&self) -> Result<(), Unavailable> {
        match self.config.backend {
            TerminalBackend::Local => self.sandbox.check(),
            TerminalBackend::Docker => {
                if self.config.docker_container.is_empty() && self.config.docker_image.is_empty() {
                    Err(
                        "tools.terminal: docker backend needs docker_image or docker_container"
                            .into(),
                    )
                } else {
                    find_program(&self.config.docker_bin)
                }
            }
            TerminalBackend::Ssh => {
                if self.config.ssh_host.is_empty() {
                    Err("tools.terminal.ssh_host is not set".into())
                } else {
                    find_program(&self.config.ssh_bin)
                }
            }
        }
    }

    /// The environment a child gets, built from an allowlist: `PATH`, the
    /// locale, `TERM`, `TZ` and what the operator passes through — never a
    /// copy of the daemon's, which holds the gateway's secrets.
    fn child_env(&self, pty: bool) -> Vec<(String, String)> {
        let path = match self.config.backend {
            TerminalBackend::Local => self.sandbox.visible_path(&default_path()),
            TerminalBackend::Docker | TerminalBackend::Ssh => default_path(),
        };
        let mut env = vec![("PATH".to_string(), path)];
        for name in ENV_KEPT
            .iter()
            .copied()
            .chain(self.config.env_passthrough.iter().map(String::as_str))
        {
            if let Ok(value) = std::env::var(name)
                && !env.iter().any(|(n, _)| n == name)
            {
                env.push((name.to_string(), value));
            }
        }
        if self.config.backend == TerminalBackend::Local {
            pin_git(&mut env);
        }
        // In a terminal, programs that draw need to know what it can do.
        env.retain(|(n, _)| !(pty && n == "TERM"));
        if !env.iter().any(|(n, _)| n == "TERM") {
            let term = if pty { "xterm-256color" } else { "dumb" };
            env.push(("TERM".into(), term.into()));
        }
        env
    }

    /// Starts `script` with the backend in `workdir` (a path inside
    /// `workspace`), its whole process group killed when the child is
    /// dropped (a reaper's caller ends it: [`Ending::until_finished`]).
    /// With `pty` it runs in a pseudo-terminal (its stdin, stdout and
    /// stderr are the terminal, so it sees a TTY; docker and ssh are asked
    /// for one too): its output is then the terminal's, to be read as
    /// [`screen_text`](crate::render::terminal::screen_text). Returns the
    /// child, its output, and the free space it must leave, for the caller
    /// to end it by once it does not (none off the local backend; on a
    /// nearly full disk the command may only remove files).
    pub fn spawn(
        &self,
        script: &str,
        (workspace, workdir): (&Path, &Path),
        pty: bool,
        limit: Option<Duration>,
    ) -> Result<(Child, Vec<Output>, Reserve), ToolError> {
        let (mut cmd, reserve) = self.command(script, workspace, workdir, pty, limit)?;
        let failed = |e: std::io::Error| ToolError::Failed(format!("cannot start the shell: {e}"));
        if !pty {
            let mut child = cmd.spawn().map_err(failed)?;
            let outputs = [
                child.stdout.take().map(|s| Box::new(s) as Output),
                child.stderr.take().map(|s| Box::new(s) as Output),
            ];
            return Ok((child, outputs.into_iter().flatten().collect(), reserve));
        }
        let (master, slave) = super::pty::open().map_err(failed)?;
        let end = || slave.try_clone().map(Stdio::from);
        cmd.stdin(end().map_err(failed)?)
            .stdout(end().map_err(failed)?)
            .stderr(end().map_err(failed)?);
        let child = cmd.spawn().map_err(failed)?;
        // The output ends once the child and its children have let go of
        // the terminal: the daemon keeps no copy of their side.
        drop(cmd);
        drop(slave);
        Ok((child, vec![Box::new(master)], reserve))
    }

    /// A command that runs `script` with the backend, starting in `workdir`
    /// (a path inside `workspace`), and the free space it must leave;
    /// `pty`: docker and ssh are asked for a terminal; `limit`: the time
    /// the call gives it, which docker and ssh are told too.
    fn command(
        &self,
        script: &str,
        workspace: &Path,
        workdir: &Path,
        pty: bool,
        limit: Option<Duration>,
    ) -> Result<(Command, Reserve), ToolError> {
        let rel = workdir.strip_prefix(workspace).unwrap_or(Path::new(""));
        let env = self.child_env(pty);
        let mut reserve = Reserve::default();
        let mut cmd = match self.config.backend {
            TerminalBackend::Local => {
                let tmp = private_tmp(workspace).map_err(|e| {
                    ToolError::Failed(format!("cannot make the private temporary directory: {e}"))
                })?;
                let dirs = Dirs {
                    workspace,
                    tmp: &tmp,
                    workdir,
                };
                reserve = self.sandbox.reserve(dirs);
                reserve.start();
                let may_write = reserve.removing_only().is_none();
                Command::from(
                    self.sandbox
                        .command("bash", &["-c", script], dirs, &env, may_write)
                        .map_err(|e| ToolError::Failed(e.to_string()))?,
                )
            }
            TerminalBackend::Docker => {
                let inner = under(Path::new("/workspace"), rel);
                let mut c = Command::new(&self.config.docker_bin);
                let interactive = if pty { "-it" } else { "-i" };
                if self.config.docker_container.is_empty() {
                    c.args(["run", "--rm", interactive])
                        .args(&self.config.docker_args)
                        .arg("-v")
                        .arg(format!("{}:/workspace", workspace.display()))
                        .arg("-w")
                        .arg(&inner)
                        .arg(&self.config.docker_image);
                } else {
                    c.args(["exec", interactive, "-w"])
                        .arg(&inner)
                        .arg(&self.config.docker_container);
                }
                c.args(remote_words(script, limit)).current_dir(workspace);
                c
            }
            TerminalBackend::Ssh => {
                let mut c = Command::new(&self.config.ssh_bin);
                c.args(["-o", "BatchMode=yes", "-p"])
                    .arg(self.config.ssh_port.to_string());
                if pty {
                    c.arg("-tt");
                }
                if !self.config.ssh_identity_file.is_empty() {
                    c.arg("-i").arg(&self.config.ssh_identity_file);
                }
                let target = if self.config.ssh_user.is_empty() {
                    self.config.ssh_host.clone()
                } else {
                    format!("{}@{}", self.config.ssh_user, self.config.ssh_host)
                };
                let base = if self.config.ssh_remote_dir.is_empty() {
                    ".".to_string()
                } else {
                    self.config.ssh_remote_dir.clone()
                };
                let dir = under(Path::new(&base), rel);
                let words: Vec<String> = remote_words(script, limit)
                    .iter()
                    .map(|w| shell_quote(w))
                    .collect();
                let remote = format!(
                    "cd {} && {}",
                    shell_quote(&dir.display().to_string()),
                    words.join(" ")
                );
                c.arg(target).arg("--").arg(remote).current_dir(workspace);
                c
            }
        };
        if self.config.backend != TerminalBackend::Local {
            cmd.env_clear().envs(env);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            // SIGKILL would end a reaper alone.
            .kill_on_drop(!self.reaps());
        Ok((cmd, reserve))
    }
}

/// `base/rel`, without the trailing slash `join` adds for an empty `rel`.
/// What a container or a remote host runs for `script`: bash, under
/// `timeout` when the call has a `limit` (and the other side has
/// `timeout`), a little after the call's own end: killing the docker or
/// ssh client there ends nothing on the other side.
fn remote_words(script: &str, limit: Option<Duration>) -> Vec<String> {
    const LIMITED: &str = r#"if command -v timeout >/dev/null 2>&1; then exec timeout -s KILL "$1" bash -c "$0"; else exec bash -c "$0"; fi"#;
    match limit {
        None => vec!["bash".into(), "-c".into(), script.into()],
        Some(limit) => vec![
            "sh".into(),
            "-c".into(),
            LIMITED.into(),
            script.into(),
            (limit.as_secs() + REMOTE_GRACE_SECS).to_string(),
        ],
    }
}

/// Seconds a remote command outlives its call's limit: the call ends it
/// as a timeout first.
const REMOTE_GRACE_SECS: u64 = 2;

fn under(base: &Path, rel: &Path) -> std::path::PathBuf {
    if rel.as_os_str().is_empty() {
        base.to_path_buf()
    } else {
        base.join(rel)
    }
}

fn find_program(program: &str) -> Result<(), Unavailable> {
    if program.contains('/') {
        return if Path::new(program).is_file() {
            Ok(())
        } else {
            Err(Unavailable(format!("{program} not found")))
        };
    }
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
        .unwrap_or(false);
    if found {
        Ok(())
    } else {
        Err(Unavailable(format!("`{program}` is not on PATH")))
    }
}

/// Waits for a command that was killed, a while: its reaper waits for every
/// process of it, and one stuck in the kernel (on a hung mount) must not
/// hold the turn. Given up, the runtime reaps it later.
async fn end_wait(child: &mut Child) {
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
}

/// Longest `workdir` (relative to the workspace) a command may run in.
const MAX_WORKDIR_CHARS: usize = 200;

/// Asks the approval hook about `command` run in `workdir`; a denial
/// becomes a refusal the model must not retry. A command run elsewhere than
/// the workspace's top is reviewed (and shown to a person) as `cd <dir> &&
/// <command>`: what it runs by a relative path is found where it runs.
pub async fn approve(command: &str, workdir: &Path, ctx: &ToolContext) -> Result<(), ToolError> {
    let reviewed = match workdir.strip_prefix(&ctx.workspace) {
        Ok(rel) if !rel.as_os_str().is_empty() => {
            let dir = rel.to_string_lossy();
            // A person must see the command, not only where it runs.
            if dir.chars().count() > MAX_WORKDIR_CHARS {
                return Err(ToolError::InvalidArgs(format!(
                    "workdir is over {MAX_WORKDIR_CHARS} characters; run from a shorter path"
                )));
            }
            let dir = dir.replace('\'', "'\\''");
            std::borrow::Cow::Owned(format!("cd '{dir}' && {command}"))
        }
        _ => std::borrow::Cow::Borrowed(command),
    };
    match ctx.approvals.review(&reviewed, ctx).await {
        ApprovalVerdict::Allow => Ok(()),
        ApprovalVerdict::Deny { reason } => Err(ToolError::Refused(format!(
            "BLOCKED: {reason}. The command was not run. Do not retry it; tell the user instead."
        ))),
    }
}

async fn drain(mut from: impl AsyncRead + Unpin, into: Arc<std::sync::Mutex<HeadTail>>) {
    let mut buf = [0u8; 8192];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            break;
        }
        into.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(&buf[..n]);
    }
}

/// `terminal`.
#[derive(Debug, Clone)]
pub struct Terminal {
    launcher: Launcher,
}

impl Terminal {
    /// A terminal tool using `launcher`.
    pub fn new(launcher: Launcher) -> Self {
        Self { launcher }
    }
}

#[async_trait]
impl Tool for Terminal {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "terminal",
            "terminal",
            "Run a shell command (bash) in the session workspace and return its exit code and output. Anything it leaves running in the background is stopped when it ends: for servers or watchers use process instead. Dangerous commands wait for the user's approval.",
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command line to run."},
                    "timeout": {"type": "integer", "minimum": 1, "description": "Time limit in seconds (default 120)."},
                    "workdir": {"type": "string", "description": "Directory to run in, relative to the workspace."},
                    "pty": {"type": "boolean", "description": "Run in a pseudo-terminal, for programs that behave differently or only print when attached to a TTY (progress bars, colour, interactive tools); its output is cleaned of terminal control sequences. Default false."}
                },
                "required": ["command"]
            }),
        )
        .emoji("💻")
    }

    fn check(&self) -> Result<(), Unavailable> {
        self.launcher.check()
    }

    fn shared_check(&self) -> Option<String> {
        Some(LAUNCHER_CHECK.into())
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let command = arg_str(&args, "command")?;
        if command.trim().is_empty() {
            return Err(ToolError::InvalidArgs("command is empty".into()));
        }
        let config = self.launcher.config();
        let limit = arg_opt_u64(&args, "timeout")?
            .unwrap_or(config.timeout_secs)
            .clamp(1, config.max_timeout_secs);
        let workdir = resolve(&ctx.workspace, arg_opt_str(&args, "workdir").unwrap_or("."))?;
        if !workdir.is_dir() {
            return Err(ToolError::InvalidArgs(
                "workdir is not a directory in the workspace".into(),
            ));
        }
        let pty = args.get("pty").and_then(Value::as_bool).unwrap_or(false);
        approve(command, &workdir, ctx).await?;

        let started = Instant::now();
        let (mut child, outputs, reserve) = self.launcher.spawn(
            command,
            (&ctx.workspace, &workdir),
            pty,
            Some(Duration::from_secs(limit)),
        )?;
        // Its pid is taken before the child is waited for: a reaped child
        // has none, while its group lives on in what it left running.
        let ending = self.launcher.ending(child.id());
        let unfinished = ending.until_finished();
        let capture = Arc::new(std::sync::Mutex::new(HeadTail::new(
            config.output_limit_bytes,
        )));
        let readers: Vec<_> = outputs
            .into_iter()
            .map(|s| tokio::spawn(drain(s, capture.clone())))
            .collect();

        let mut stopped = None;
        let status = tokio::select! {
            status = child.wait() => Some(status.map_err(|e| ToolError::Failed(e.to_string()))?),
            _ = tokio::time::sleep(Duration::from_secs(limit)) => None,
            why = reserve.breached() => {
                tracing::warn!(session.key = %ctx.session_key, reason = %why, "command ended: the disk's reserve");
                stopped = Some(why);
                None
            }
            _ = ctx.cancel.cancelled() => {
                ending.force();
                end_wait(&mut child).await;
                unfinished.finished();
                return Err(ToolError::Cancelled);
            }
        };
        let timed_out = status.is_none() && stopped.is_none();
        if status.is_none() {
            ending.force();
            end_wait(&mut child).await;
        } else {
            // What the command left running ends with it (the tool says
            // so; `process` is for what should stay).
            ending.leftovers();
        }
        unfinished.finished();
        for mut reader in readers {
            if tokio::time::timeout(Duration::from_secs(2), &mut reader)
                .await
                .is_err()
            {
                // Something that left the process group holds the output
                // open: its reader stops here, not when that ends.
                reader.abort();
            }
        }
        let mut output = capture.lock().unwrap_or_else(|e| e.into_inner()).render();
        if pty {
            output = crate::render::terminal::screen_text(&output);
        }
        let code = status.and_then(|s| s.code());
        let mut result = json!({
            "exit_code": code,
            "timed_out": timed_out,
            "duration_ms": started.elapsed().as_millis() as u64,
            "output": output,
        });
        let meaning = match (code, status.and_then(|s| s.signal())) {
            (Some(code), _) => super::exit_codes::explain(command, code),
            (None, Some(signal)) if !timed_out => Some(super::exit_codes::explain_signal(signal)),
            _ => None,
        };
        if let Some(meaning) = meaning {
            result["exit_meaning"] = json!(meaning);
        }
        if let Some(why) = stopped {
            result["stopped"] = json!(format!("ended by the gateway: {why}"));
        }
        if let Some(why) = reserve.removing_only() {
            result["disk"] = json!(why);
        }
        Ok(result.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting_survives_quotes() {
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
