//! terminal (local, docker and ssh backends, approvals, time limits,
//! cancellation, the environment's allowlist) and process (background jobs).

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::call;
use serde_json::{Value, json};
use switchboard::config::{Config, Env, SandboxMode, TerminalBackend};
use switchboard::tools::ToolRuntime;

fn runtime_with(edit: impl FnOnce(&mut Config)) -> ToolRuntime {
    let mut config = Config::default();
    edit(&mut config);
    ToolRuntime::build(
        &config,
        &Env::default(),
        switchboard::adapters::platforms(&config),
    )
    .unwrap()
}

fn runtime() -> ToolRuntime {
    runtime_with(|_| {})
}

/// The pid a command wrote to `name` in `workspace`.
fn written_pid(workspace: &Path, name: &str) -> i32 {
    std::fs::read_to_string(workspace.join(name))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn pid_alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.contains(") Z "))
            .unwrap_or(true)
}

#[tokio::test]
async fn runs_in_the_workspace_and_reports_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    let out = call(
        &rt,
        "terminal",
        json!({"command": "pwd; echo out; echo err >&2; exit 3"}),
        &ctx,
    )
    .await;
    assert_eq!(out["exit_code"], 3, "{out}");
    assert_eq!(out["timed_out"], false);
    let text = out["output"].as_str().unwrap();
    assert!(text.contains(ctx.workspace.to_str().unwrap()), "{text}");
    assert!(text.contains("out") && text.contains("err"));

    std::fs::create_dir(ctx.workspace.join("sub")).unwrap();
    let sub = call(
        &rt,
        "terminal",
        json!({"command": "pwd", "workdir": "sub"}),
        &ctx,
    )
    .await;
    assert!(sub["output"].as_str().unwrap().trim().ends_with("/sub"));
    let escape = call(
        &rt,
        "terminal",
        json!({"command": "pwd", "workdir": "../.."}),
        &ctx,
    )
    .await;
    assert!(escape["error"].as_str().unwrap().contains("outside"));
}

/// With `pty: true` a command runs in a pseudo-terminal under either
/// sandbox: Python sees a TTY, and the colours and progress-bar rewrites
/// it prints are cleaned before the model reads them.
#[tokio::test]
async fn a_command_in_a_pty_sees_a_terminal_and_its_output_is_cleaned() {
    let script = "import sys; print(sys.stdout.isatty(), sys.stdin.isatty()); print('\\x1b[32mgreen\\x1b[0m'); print('10%\\r100%')";
    let command = format!("python3 -c \"{script}\"");
    for mode in [SandboxMode::Landlock, SandboxMode::Bwrap] {
        let dir = tempfile::tempdir().unwrap();
        let ctx = common::tools::ctx(dir.path());
        let rt = runtime_with(|c| c.tools.sandbox.mode = mode);
        let tty = call(
            &rt,
            "terminal",
            json!({"command": command, "pty": true}),
            &ctx,
        )
        .await;
        assert_eq!(tty["exit_code"], 0, "{mode:?}: {tty}");
        assert_eq!(tty["output"], "True True\ngreen\n100%\n", "{mode:?}: {tty}");
        let piped = call(&rt, "terminal", json!({"command": command}), &ctx).await;
        let piped = piped["output"].as_str().unwrap();
        assert!(piped.starts_with("False False\n"), "{mode:?}: {piped}");
        assert!(
            piped.contains("\u{1b}[32m"),
            "without a pty, output is as written"
        );
    }
}

#[tokio::test]
async fn exit_codes_that_are_not_failures_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    std::fs::write(ctx.workspace.join("notes.txt"), "alpha\nbeta\n").unwrap();
    let rt = runtime();
    let run = |command: &'static str| call(&rt, "terminal", json!({ "command": command }), &ctx);
    let no_match = run("grep -n gamma notes.txt").await;
    assert_eq!(no_match["exit_code"], 1, "{no_match}");
    let meaning = no_match["exit_meaning"].as_str().unwrap_or_default();
    assert!(meaning.contains("no lines matched"), "{no_match}");
    let missing = run("no-such-program-here").await;
    assert_eq!(missing["exit_code"], 127, "{missing}");
    assert!(
        missing["exit_meaning"]
            .as_str()
            .unwrap_or_default()
            .contains("not found")
    );
    // A failure that means what it says carries no explanation.
    let failed = run("exit 3").await;
    assert_eq!(failed["exit_code"], 3);
    assert!(failed.get("exit_meaning").is_none(), "{failed}");
}

#[tokio::test]
async fn time_limit_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    let started = Instant::now();
    let out = call(
        &rt,
        "terminal",
        // The child's pid as the daemon sees it (`$!` counts in the
        // command's own pid namespace): its parent field, read by `cut`.
        json!({"command": "sh -c 'cut -d\" \" -f4 /proc/self/stat > child.pid; exec sleep 60' & sleep 60", "timeout": 1}),
        &ctx,
    )
    .await;
    assert_eq!(out["timed_out"], true, "{out}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let pid = written_pid(&ctx.workspace, "child.pid");
    common::eventually("the background child is gone", || async { !pid_alive(pid) }).await;
}

#[tokio::test]
async fn what_a_command_leaves_in_the_background_ends_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    let out = call(
        &rt,
        "terminal",
        json!({"command": "sh -c 'cut -d\" \" -f4 /proc/self/stat > bg.pid; exec sleep 60' > /dev/null & while [ ! -s bg.pid ]; do :; done; echo started"}),
        &ctx,
    )
    .await;
    assert_eq!(out["exit_code"], 0, "{out}");
    assert!(out["output"].as_str().unwrap().contains("started"), "{out}");
    let pid = written_pid(&ctx.workspace, "bg.pid");
    common::eventually("the background job is gone", || async { !pid_alive(pid) }).await;
}

#[tokio::test]
async fn output_is_capped_head_and_tail() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime_with(|c| c.tools.terminal.output_limit_bytes = 1000);
    let out = call(
        &rt,
        "terminal",
        json!({"command": "echo FIRST; seq 1 100000; echo LAST"}),
        &ctx,
    )
    .await;
    let text = out["output"].as_str().unwrap();
    assert!(
        text.starts_with("FIRST") && text.trim_end().ends_with("LAST"),
        "{text}"
    );
    assert!(text.contains("bytes of output omitted"));
    assert!(text.len() < 1200);
}

#[tokio::test]
async fn children_get_an_environment_built_from_an_allowlist() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime_with(|c| c.tools.terminal.env_passthrough = vec!["CARGO_PKG_NAME".into()]);
    let out = call(&rt, "terminal", json!({"command": "env"}), &ctx).await;
    let text = out["output"].as_str().unwrap();
    let names: Vec<&str> = text
        .lines()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        .collect();
    let allowed = [
        "PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TERM", "TZ", "PWD", "SHLVL", "_",
    ];
    let passed = std::env::var("CARGO_PKG_NAME").is_ok();
    for name in &names {
        assert!(
            allowed.contains(name)
                || name.starts_with("GIT_CONFIG_")
                || (passed && *name == "CARGO_PKG_NAME"),
            "{name} reached the child: {text}"
        );
    }
    assert!(
        text.contains(&format!("HOME={}", ctx.workspace.display())),
        "{text}"
    );
    assert!(
        names.contains(&"PATH") && names.contains(&"TMPDIR"),
        "{text}"
    );
}

#[tokio::test]
async fn denied_commands_never_run() {
    let dir = tempfile::tempdir().unwrap();
    let hook = Arc::new(common::tools::DenyWords(vec!["rm "]));
    let ctx = common::tools::ctx_with(dir.path(), hook);
    let rt = runtime();
    std::fs::write(ctx.workspace.join("keep.txt"), "x").unwrap();
    let out = call(
        &rt,
        "terminal",
        json!({"command": "touch ran.txt; rm -f keep.txt"}),
        &ctx,
    )
    .await;
    let err = out["error"].as_str().unwrap();
    assert!(err.starts_with("BLOCKED: test policy forbids"), "{err}");
    assert!(err.contains("Do not retry"));
    assert!(!ctx.workspace.join("ran.txt").exists());
    assert!(ctx.workspace.join("keep.txt").exists());
    let started = call(
        &rt,
        "process",
        json!({"action": "start", "command": "rm -rf ."}),
        &ctx,
    )
    .await;
    assert!(started["error"].as_str().unwrap().starts_with("BLOCKED"));
}

#[tokio::test]
async fn cancellation_stops_a_running_command() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    let cancel = ctx.cancel.clone();
    let pid_file = ctx.workspace.join("shell.pid");
    tokio::spawn(async move {
        // Cancels once the command runs: its shell has written its pid.
        common::eventually("the command runs", || async {
            std::fs::read_to_string(&pid_file).is_ok_and(|pid| pid.ends_with('\n'))
        })
        .await;
        cancel.cancel();
    });
    let started = Instant::now();
    let out = call(
        &rt,
        "terminal",
        json!({"command": "cut -d' ' -f4 /proc/self/stat > shell.pid; sleep 60"}),
        &ctx,
    )
    .await;
    assert_eq!(out["error"], "Tool execution failed: cancelled");
    assert!(started.elapsed() < Duration::from_secs(5));
    let pid = written_pid(&ctx.workspace, "shell.pid");
    crate::common::eventually("the shell is gone", || async { !pid_alive(pid) }).await;
}

/// A stand-in for the docker or ssh binary: records its arguments, then
/// runs what the real tool would run on the other side: docker's words
/// from the shell on, ssh's last argument with bash.
fn fake_cli(dir: &Path, name: &str) -> String {
    fake_cli_running(dir, name, "exec")
}

/// [`fake_cli`], the other side's command started with `run` (`exec`, or
/// `setsid` for one that killing the client does not end).
fn fake_cli_running(dir: &Path, name: &str, run: &str) -> String {
    let path = dir.join(name);
    let log = dir.join(format!("{name}.args"));
    let pid = dir.join(format!("{name}.pid"));
    let start = if name == "ssh" {
        format!("{run} bash -c \"${{@: -1}}\" &")
    } else {
        format!(
            "for ((i = 1; i <= $#; i++)); do case \"${{!i}}\" in sh|bash) break;; esac; done\n{run} \"${{@:i}}\" &"
        )
    };
    std::fs::write(
        &path,
        format!(
            "#!/usr/bin/env bash\nprintf '%s\\n' \"$@\" > {}\n{start}\necho $! > {}\nwait $!\n",
            log.display(),
            pid.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn args_of(dir: &Path, name: &str) -> Vec<String> {
    std::fs::read_to_string(dir.join(format!("{name}.args")))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn docker_backend_runs_through_the_docker_cli() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_cli(dir.path(), "docker");
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime_with(|c| {
        c.tools.terminal.backend = TerminalBackend::Docker;
        c.tools.terminal.docker_bin = bin.clone();
        c.tools.terminal.docker_image = "alpine:3".into();
    });
    let out = call(
        &rt,
        "terminal",
        json!({"command": "echo from-docker"}),
        &ctx,
    )
    .await;
    assert_eq!(
        out["output"].as_str().unwrap().trim(),
        "from-docker",
        "{out}"
    );
    let args = args_of(dir.path(), "docker");
    let ws = format!("{}:/workspace", ctx.workspace.display());
    assert_eq!(
        args,
        [
            "run",
            "--rm",
            "-i",
            "--network=none",
            "-v",
            ws.as_str(),
            "-w",
            "/workspace",
            "alpine:3",
            "sh",
            "-c",
            args[11].as_str(),
            "echo from-docker",
            "122"
        ]
    );
    assert!(args[11].contains("timeout -s KILL"), "{}", args[11]);

    let rt = runtime_with(|c| {
        c.tools.terminal.backend = TerminalBackend::Docker;
        c.tools.terminal.docker_bin = bin.clone();
        c.tools.terminal.docker_container = "devbox".into();
    });
    std::fs::create_dir(ctx.workspace.join("app")).unwrap();
    call(
        &rt,
        "terminal",
        json!({"command": "true", "workdir": "app"}),
        &ctx,
    )
    .await;
    assert_eq!(
        args_of(dir.path(), "docker"),
        [
            "exec",
            "-i",
            "-w",
            "/workspace/app",
            "devbox",
            "sh",
            "-c",
            args_of(dir.path(), "docker")[7].as_str(),
            "true",
            "122"
        ]
    );
}

/// Killing the docker or ssh client at the call's limit ends nothing on
/// the other side: the command there is limited too.
#[tokio::test]
async fn a_remote_command_ends_with_its_call() {
    for name in ["docker", "ssh"] {
        let dir = tempfile::tempdir().unwrap();
        let bin = fake_cli_running(dir.path(), name, "setsid");
        let ctx = common::tools::ctx(dir.path());
        let rt = runtime_with(|c| {
            let t = &mut c.tools.terminal;
            if name == "docker" {
                t.backend = TerminalBackend::Docker;
                t.docker_bin = bin.clone();
                t.docker_container = "devbox".into();
            } else {
                t.backend = TerminalBackend::Ssh;
                t.ssh_bin = bin.clone();
                t.ssh_host = "build.example".into();
                t.ssh_remote_dir = ctx.workspace.display().to_string();
            }
        });
        let marker = ctx.workspace.join("late");
        let script = format!("sleep 4; echo late > {}", marker.display());
        let out = call(
            &rt,
            "terminal",
            json!({"command": script, "timeout": 1}),
            &ctx,
        )
        .await;
        assert_eq!(out["timed_out"], true, "{name}: {out}");
        let pid = written_pid(dir.path(), &format!("{name}.pid"));
        crate::common::eventually("the remote command is gone", || async { !pid_alive(pid) }).await;
        assert!(!marker.exists(), "{name}: the command ran past its call");
    }
}

#[tokio::test]
async fn ssh_backend_runs_through_the_ssh_binary() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_cli(dir.path(), "ssh");
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime_with(|c| {
        c.tools.terminal.backend = TerminalBackend::Ssh;
        c.tools.terminal.ssh_bin = bin.clone();
        c.tools.terminal.ssh_host = "build.example".into();
        c.tools.terminal.ssh_user = "ci".into();
        c.tools.terminal.ssh_port = 2222;
        c.tools.terminal.ssh_remote_dir = "/tmp".into();
    });
    let out = call(
        &rt,
        "terminal",
        json!({"command": "echo \"it's $((6*7))\"; pwd"}),
        &ctx,
    )
    .await;
    assert_eq!(out["output"].as_str().unwrap(), "it's 42\n/tmp\n", "{out}");
    let args = args_of(dir.path(), "ssh");
    assert_eq!(
        &args[..6],
        [
            "-o",
            "BatchMode=yes",
            "-p",
            "2222",
            "ci@build.example",
            "--"
        ]
    );
}

#[tokio::test]
async fn unconfigured_backends_are_unavailable() {
    let rt = runtime_with(|c| c.tools.terminal.backend = TerminalBackend::Ssh);
    assert!(!rt.registry.availability("terminal").is_available());
    assert!(!rt.registry.availability("process").is_available());
}

async fn wait_exit(rt: &ToolRuntime, id: &str, ctx: &switchboard::tools::ToolContext) -> Value {
    call(
        rt,
        "process",
        json!({"action": "wait", "process_id": id, "timeout": 20}),
        ctx,
    )
    .await
}

/// A background process can run in a pseudo-terminal too: it sees a TTY,
/// and what it printed is read cleaned.
#[tokio::test]
async fn a_background_process_in_a_pty_sees_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    let started = call(
        &rt,
        "process",
        json!({"action": "start", "pty": true, "command": "python3 -c \"import sys; print('tty', sys.stdout.isatty()); print('\\x1b[1mbold\\x1b[0m')\""}),
        &ctx,
    )
    .await;
    let id = started["process_id"].as_str().unwrap().to_string();
    let done = wait_exit(&rt, &id, &ctx).await;
    assert_eq!(done["exit_code"], 0, "{done}");
    assert_eq!(done["log"], "tty True\nbold", "{done}");
}

#[tokio::test]
async fn background_processes_poll_log_wait_kill() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    let started = call(
        &rt,
        "process",
        json!({"action": "start", "command": "for i in 1 2 3; do echo line$i; sleep 0.2; done"}),
        &ctx,
    )
    .await;
    let id = started["process_id"].as_str().unwrap().to_string();
    assert_eq!(started["running"], true);

    let done = wait_exit(&rt, &id, &ctx).await;
    assert_eq!(done["running"], false, "{done}");
    assert_eq!(done["exit_code"], 0);
    assert_eq!(done["log"], "line1\nline2\nline3");
    let first = call(
        &rt,
        "process",
        json!({"action": "poll", "process_id": id}),
        &ctx,
    )
    .await;
    assert_eq!(first["output"], "line1\nline2\nline3\n");
    let second = call(
        &rt,
        "process",
        json!({"action": "poll", "process_id": id}),
        &ctx,
    )
    .await;
    assert_eq!(second["output"], "", "poll returns only new output");
    let log = call(
        &rt,
        "process",
        json!({"action": "log", "process_id": id, "lines": 1}),
        &ctx,
    )
    .await;
    assert_eq!(log["log"], "line3");

    let server = call(
        &rt,
        "process",
        json!({"action": "start", "command": "sleep 120"}),
        &ctx,
    )
    .await;
    let sid = server["process_id"].as_str().unwrap().to_string();
    let listed = call(&rt, "process", json!({"action": "list"}), &ctx).await;
    assert_eq!(listed["processes"].as_array().unwrap().len(), 2);
    let killed = call(
        &rt,
        "process",
        json!({"action": "kill", "process_id": sid}),
        &ctx,
    )
    .await;
    assert_eq!(killed["running"], false, "{killed}");

    let other = switchboard::tools::ToolContext::for_session(
        dir.path(),
        "s2",
        "test:dm:2",
        Arc::new(switchboard::tools::AllowAll),
    )
    .unwrap();
    let foreign = call(
        &rt,
        "process",
        json!({"action": "poll", "process_id": id}),
        &other,
    )
    .await;
    assert!(
        foreign["error"].as_str().unwrap().contains("no process"),
        "sessions are isolated"
    );
    assert_eq!(
        call(&rt, "process", json!({"action": "list"}), &other).await["processes"],
        json!([])
    );
}

/// An ended process and its log are kept for the session to read until
/// eight more have ended, not for the daemon's lifetime (each start after
/// another grew its memory by the log's size).
#[tokio::test]
async fn ended_processes_are_forgotten_after_eight_more() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    let mut ids = Vec::new();
    for _ in 0..12 {
        let started = call(
            &rt,
            "process",
            json!({"action": "start", "command": "echo done"}),
            &ctx,
        )
        .await;
        let id = started["process_id"].as_str().unwrap().to_string();
        assert_eq!(wait_exit(&rt, &id, &ctx).await["exit_code"], 0);
        ids.push(id);
    }
    let listed = call(&rt, "process", json!({"action": "list"}), &ctx).await;
    let kept: Vec<&str> = listed["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["process_id"].as_str().unwrap())
        .collect();
    assert_eq!(kept.len(), 9, "{listed}");
    assert!(ids[3..].iter().all(|id| kept.contains(&id.as_str())));
    let gone = call(
        &rt,
        "process",
        json!({"action": "poll", "process_id": ids[0]}),
        &ctx,
    )
    .await;
    assert!(
        gone["error"].as_str().unwrap().contains("forgotten"),
        "{gone}"
    );
}

#[tokio::test]
async fn shutdown_kills_every_background_process() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime();
    let mut pids = Vec::new();
    for _ in 0..3 {
        let p = call(
            &rt,
            "process",
            json!({"action": "start", "command": "sleep 300"}),
            &ctx,
        )
        .await;
        pids.push(p["pid"].as_i64().unwrap() as i32);
    }
    assert!(pids.iter().all(|p| pid_alive(*p)));
    rt.processes.shutdown().await;
    assert!(
        pids.iter().all(|p| !pid_alive(*p)),
        "children survived shutdown"
    );
}

#[tokio::test]
async fn process_count_is_bounded_per_session() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let rt = runtime_with(|c| c.tools.terminal.max_processes = 2);
    for _ in 0..2 {
        call(
            &rt,
            "process",
            json!({"action": "start", "command": "sleep 30"}),
            &ctx,
        )
        .await;
    }
    let third = call(
        &rt,
        "process",
        json!({"action": "start", "command": "sleep 30"}),
        &ctx,
    )
    .await;
    assert!(third["error"].as_str().unwrap().contains("already running"));
    rt.processes.shutdown().await;
}
