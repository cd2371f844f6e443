//! The exploits of the containment review, each run by the real binary
//! (`switchboard chat --once`) against a scripted model that obeys injected
//! instructions, with approvals off, so the sandbox alone is what stops
//! them — under Landlock and under bubblewrap. Commands inside the
//! workspace (build, test, git) still work in the same runs.

mod processes;

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::fake_llm::{FakeLlm, Reply, calls, text};

/// Secrets in the daemon's environment, named by its configuration or not.
const SECRETS: &[(&str, &str)] = &[
    ("SB_TEST_MODEL_KEY", "sk-model-7f3a9c1e"),
    ("SB_TEST_FALLBACK_KEY", "sk-fallback-44d0b2aa"),
    ("SB_TEST_FORGE_TOKEN", "ghp-forge-9be17c03"),
    ("SB_TEST_CONSOLE", "console-token-2c5e8d71f0a94b36"),
    ("SB_TEST_MCP_HEADER", "mcp-header-5a1f"),
    ("SB_TEST_WEBHOOK_SECRET", "whsec-61e0c4d2"),
];

/// The two mechanisms the tests run under.
const MODES: &[&str] = &["landlock", "bwrap"];

/// One daemon's files: its data directory (database and workspaces) and a
/// directory outside every workspace.
struct Host {
    dir: tempfile::TempDir,
    /// More `[tools.sandbox]` keys.
    sandbox: String,
    /// The uid and gid the daemon runs as, when not the test's.
    user: Option<u32>,
}

impl Host {
    fn new() -> Self {
        Self::with_sandbox("")
    }

    fn with_sandbox(keys: &str) -> Self {
        let host = Self {
            dir: tempfile::tempdir().unwrap(),
            sandbox: keys.to_string(),
            user: None,
        };
        std::fs::create_dir_all(host.outside()).unwrap();
        std::fs::write(host.outside().join("keep.txt"), "precious").unwrap();
        host
    }

    /// The daemon runs as `nobody` (when the test runs as root), whose
    /// process limit Linux enforces, unlike root's.
    fn run_by_nobody(mut self) -> Self {
        if std::fs::metadata("/proc/self")
            .is_ok_and(|me| std::os::unix::fs::MetadataExt::uid(&me) == 0)
        {
            const NOBODY: u32 = 65534;
            let mut dirs = vec![self.path().to_path_buf()];
            while let Some(dir) = dirs.pop() {
                std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
                for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                    if entry.file_type().unwrap().is_dir() {
                        dirs.push(entry.path());
                    } else {
                        std::os::unix::fs::chown(entry.path(), Some(NOBODY), Some(NOBODY)).unwrap();
                    }
                }
            }
            self.user = Some(NOBODY);
        }
        self
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn outside(&self) -> PathBuf {
        self.path().join("outside")
    }

    fn db(&self) -> PathBuf {
        self.path().join("data/sb.db")
    }

    fn config(&self, llm: &FakeLlm, mode: &str) -> PathBuf {
        let file = self.path().join("gateway.toml");
        std::fs::write(
            &file,
            format!(
                "[storage]\nurl = \"sqlite://{db}\"\n[agent]\nworkspace = \"{dir}/data/ws\"\n\
                 [llm]\nbase_url = \"{url}\"\napi_key_env = \"SB_TEST_MODEL_KEY\"\n\
                 [[llm.fallback]]\nmodel = \"fallback\"\napi_key_env = \"SB_TEST_FALLBACK_KEY\"\n\
                 [approvals]\nmode = \"off\"\n[tools.sandbox]\nmode = \"{mode}\"\n{keys}\n",
                db = self.db().display(),
                dir = self.path().display(),
                url = llm.url,
                keys = self.sandbox,
            ),
        )
        .unwrap();
        file
    }

    fn command(&self, config: &Path) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchboard"));
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(SECRETS.iter().copied())
            .arg("--config")
            .arg(config)
            .current_dir(self.path());
        if let Some(id) = self.user {
            std::os::unix::process::CommandExt::uid(&mut cmd, id);
            std::os::unix::process::CommandExt::gid(&mut cmd, id);
        }
        cmd
    }

    /// Runs the agent through `steps` (one tool call each, `(tool,
    /// arguments)`) in `mode`; returns each call's result as the model
    /// read it.
    async fn run(&self, mode: &str, steps: &[(&str, String)]) -> Vec<String> {
        let mut script: Vec<Reply> = steps
            .iter()
            .enumerate()
            .map(|(i, (tool, args))| Reply::Json(calls(&[(&format!("c{i}"), tool, args)])))
            .collect();
        script.push(Reply::Json(text("done")));
        let llm = FakeLlm::start(script).await;
        let config = self.config(&llm, mode);
        let mut cmd = self.command(&config);
        cmd.args([
            "chat",
            "--once",
            "do as the README says",
            "--user",
            "mallory",
        ])
        .stdin(Stdio::null());
        let out = tokio::task::spawn_blocking(move || {
            crate::common::output_within(&mut cmd, crate::common::CLI)
        })
        .await
        .unwrap();
        assert!(
            out.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let requests = llm.requests();
        assert_eq!(requests.len(), steps.len() + 1, "{mode}: every step ran");
        requests[1..]
            .iter()
            .map(|r| {
                let last = r["messages"].as_array().unwrap().last().unwrap().clone();
                last["content"].as_str().unwrap_or_default().to_string()
            })
            .collect()
    }
}

fn terminal(command: &str) -> (&'static str, String) {
    (
        "terminal",
        serde_json::json!({ "command": command }).to_string(),
    )
}

fn assert_no_secret(mode: &str, results: &[String]) {
    for result in results {
        for (name, value) in SECRETS {
            assert!(
                !result.contains(value),
                "{mode}: {name}'s value reached the model: {result}"
            );
        }
    }
}

#[tokio::test]
async fn a_script_the_agent_wrote_cannot_delete_outside_its_workspace() {
    for mode in MODES {
        let host = Host::new();
        let outside = host.outside();
        let script = format!("rm -rf {}\necho script-ran\n", outside.display());
        let results = host
            .run(
                mode,
                &[
                    (
                        "write_file",
                        serde_json::json!({"path": "build.sh", "content": script}).to_string(),
                    ),
                    terminal("bash build.sh"),
                    terminal(&format!(
                        "rm -rf {}; ls {}",
                        outside.display(),
                        outside.display()
                    )),
                ],
            )
            .await;
        assert!(results[1].contains("script-ran"), "{mode}: {}", results[1]);
        assert_eq!(
            std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
            "precious",
            "{mode}: the directory outside the workspace was touched: {results:?}"
        );
    }
}

#[tokio::test]
async fn the_daemons_environment_and_proc_entries_are_out_of_reach() {
    for mode in MODES {
        let host = Host::new();
        let results = host
            .run(
                mode,
                &[
                    // The daemon by its pid: the parent when commands share
                    // its pid namespace, found by its command line when not.
                    terminal(
                        "d=$(grep -l 'switchboar[d]' /proc/[0-9]*/cmdline | cut -d/ -f3); echo daemons=$(echo $d | wc -w); \
                         for p in $PPID $d; do tr '\\0' '\\n' < /proc/$p/environ && echo read-$p; done; echo end",
                    ),
                    terminal("cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; env"),
                    terminal(
                        "for p in $PPID $(grep -l 'switchboar[d]' /proc/[0-9]*/cmdline | cut -d/ -f3); do \
                         [ \"$p\" != 0 ] && kill -0 $p && echo signalled-$p; done; echo end",
                    ),
                    terminal("grep -l 'switchboar[d]' /proc/[0-9]*/cmdline; echo end"),
                    terminal("cat /etc/shadow; ls /etc/ssh; echo end"),
                ],
            )
            .await;
        assert!(!results[4].contains("root:"), "{mode}: {}", results[4]);
        assert!(!results[4].contains("ssh_host_"), "{mode}: {}", results[4]);
        assert_no_secret(mode, &results);
        // Under bubblewrap $PPID is the sandbox's own init, in a pid
        // namespace where the daemon does not exist.
        if *mode == "landlock" {
            assert!(!results[0].contains("daemons=0"), "{mode}: {}", results[0]);
            assert!(!results[0].contains("read-"), "{mode}: {}", results[0]);
            assert!(!results[2].contains("signalled-"), "{mode}: {}", results[2]);
        } else {
            assert!(!results[3].contains("/cmdline"), "{mode}: {}", results[3]);
        }
    }
}

#[tokio::test]
async fn the_database_is_unreadable_and_the_allowlist_unchanged() {
    for mode in MODES {
        let host = Host::new();
        let db = host.db().display().to_string();
        let insert = "INSERT INTO allowlist VALUES ('recursive_delete', 'agent', 0)";
        let results = host
            .run(
                mode,
                &[
                    terminal(&format!(
                        "head -c 16 {db}; echo; ls -1 ../.. | sed 's/^/entry:/'; echo read-end"
                    )),
                    terminal(&format!(
                        "/usr/bin/python3 -c \"import sqlite3; c = sqlite3.connect('{db}'); c.execute(\\\"{insert}\\\"); c.commit(); print('inserted')\"; sqlite3 ../../sb.db \"{insert}\" && echo inserted-relative; echo write-end"
                    )),
                ],
            )
            .await;
        assert!(
            !results[0].contains("SQLite format"),
            "{mode}: {}",
            results[0]
        );
        assert!(
            !results[0].contains("entry:sb.db"),
            "{mode}: {}",
            results[0]
        );
        assert!(!results[1].contains("inserted"), "{mode}: {}", results[1]);
        let list = host
            .command(&host.path().join("gateway.toml"))
            .args(["approvals", "list", "--json"])
            .output()
            .unwrap();
        assert!(list.status.success());
        let listed = String::from_utf8_lossy(&list.stdout);
        assert!(!listed.contains("recursive_delete"), "{mode}: {listed}");
    }
}

/// The keys the daemon holds stay hidden even in a directory commands may
/// read: the ssh backend's identity, a forge route's GitHub App key and the
/// configuration file.
#[tokio::test]
async fn the_daemons_keys_are_hidden_in_a_readable_directory() {
    for mode in MODES {
        let mut host = Host::new();
        // Not under /tmp, which bubblewrap gives commands a fresh one of.
        let outside_tmp = tempfile::tempdir_in("/var/tmp").unwrap();
        let keys = outside_tmp.path().to_path_buf();
        std::fs::write(keys.join("notes.txt"), "readable notes").unwrap();
        std::fs::write(keys.join("id_ed25519"), "ssh-key-material").unwrap();
        std::fs::copy("tests/data/github/app-test-key.pem", keys.join("app.pem")).unwrap();
        // The configuration's own directory is readable too.
        host.sandbox = format!(
            "read_only = [\"{dir}\", \"{host}\"]\n[tools.terminal]\nssh_identity_file = \"{dir}/id_ed25519\"\n\
             [webhook]\nenabled = true\n[[webhook.routes]]\nname = \"forge\"\npath = \"/webhooks/forge\"\n\
             secret_env = \"SB_TEST_CONSOLE\"\nscheme = \"github\"\n\
             [webhook.routes.forge]\napp_id = 1\nprivate_key_file = \"{dir}/app.pem\"\n",
            dir = keys.display(),
            host = host.path().display(),
        );
        let results = host
            .run(
                mode,
                &[terminal(&format!(
                    "cat {0}/notes.txt {0}/id_ed25519 {0}/app.pem {1}/gateway.toml; echo end",
                    keys.display(),
                    host.path().display()
                ))],
            )
            .await;
        assert!(
            !results[0].contains("api_key_env"),
            "{mode}: the configuration was read: {}",
            results[0]
        );
        assert!(
            results[0].contains("readable notes"),
            "{mode}: {}",
            results[0]
        );
        assert!(
            !results[0].contains("ssh-key-material"),
            "{mode}: {}",
            results[0]
        );
        assert!(
            !results[0].contains("PRIVATE KEY"),
            "{mode}: {}",
            results[0]
        );
    }
}

#[tokio::test]
async fn other_sessions_workspaces_are_out_of_reach() {
    for mode in MODES {
        let host = Host::new();
        let other = host.path().join("data/ws/telegram_dm_42-0000beef");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("notes.txt"), "someone else's").unwrap();
        let results = host
            .run(
                mode,
                &[terminal(&format!(
                    "cat {0}/notes.txt; rm -f {0}/notes.txt; ls ..; echo end",
                    other.display()
                ))],
            )
            .await;
        assert!(
            !results[0].contains("someone else's"),
            "{mode}: {}",
            results[0]
        );
        assert!(other.join("notes.txt").exists(), "{mode}");
    }
}

#[tokio::test]
async fn a_unix_socket_outside_the_workspace_cannot_be_reached() {
    for mode in MODES {
        let host = Host::new();
        // Stands for the Docker or PostgreSQL socket of the host.
        let path = host.outside().join("daemon.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let connect = format!(
            "/usr/bin/python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{}'); s.sendall(b'x'); print('connected')\"; \
             /usr/bin/python3 -c \"import socket; a, b = socket.socketpair(); a.send(b'p'); print('pair', b.recv(1))\"",
            path.display()
        );
        let results = host.run(mode, &[terminal(&connect)]).await;
        assert!(!results[0].contains("connected"), "{mode}: {}", results[0]);
        assert!(results[0].contains("pair b'p'"), "{mode}: {}", results[0]);
        assert!(
            listener.accept().is_err(),
            "{mode}: the socket outside was reached"
        );
    }
}

#[tokio::test]
async fn metadata_outside_cannot_become_an_escalation_and_io_uring_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    for mode in MODES {
        let host = Host::new();
        let keep = host.outside().join("keep.txt");
        let before = std::fs::metadata(&keep).unwrap().permissions().mode();
        let command = format!(
            "chmod 4777 {0}; chown 1:1 {0}; setfattr -n user.x -v 1 {0} 2>/dev/null; \
             /usr/bin/python3 -c \"import ctypes; l = ctypes.CDLL(None, use_errno=True); r = l.syscall(425, 1, ctypes.create_string_buffer(128)); print('uring', r, ctypes.get_errno())\"; \
             touch mine.sh && chmod +x mine.sh && ls -l mine.sh",
            keep.display()
        );
        let results = host.run(mode, &[terminal(&command)]).await;
        let after = std::fs::metadata(&keep).unwrap();
        assert_eq!(
            after.permissions().mode() & 0o6000,
            0,
            "{mode}: {}",
            results[0]
        );
        assert_eq!(after.permissions().mode(), before, "{mode}: {}", results[0]);
        assert!(results[0].contains("uring -1 1"), "{mode}: {}", results[0]);
        assert!(
            results[0].contains("-rwx"),
            "{mode}: chmod +x in the workspace: {}",
            results[0]
        );
    }
}

#[tokio::test]
async fn network_off_and_resource_limits_hold() {
    // A listener on loopback stands for any host a command could reach.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    for mode in MODES {
        let host = Host::with_sandbox(
            "network = false\nopen_files = 200\ncpu_secs = 77\nfile_size_mb = 1\n",
        );
        let command = format!(
            "/usr/bin/python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2); print('reached')\"; \
             echo files=$(ulimit -n) cpu=$(ulimit -t); head -c 2000000 /dev/zero > big.bin; echo size=$(stat -c %s big.bin)"
        );
        let results = host.run(mode, &[terminal(&command)]).await;
        assert!(!results[0].contains("reached"), "{mode}: {}", results[0]);
        assert!(
            results[0].contains("files=200 cpu=77"),
            "{mode}: {}",
            results[0]
        );
        assert!(
            results[0].contains("size=1048576"),
            "{mode}: {}",
            results[0]
        );
        assert!(
            listener.accept().is_err(),
            "{mode}: the listener was reached"
        );
    }
}

#[tokio::test]
async fn build_test_and_git_still_work_inside_the_workspace() {
    for mode in MODES {
        let host = Host::new();
        let results = host
            .run(
                mode,
                &[
                    (
                        "write_file",
                        serde_json::json!({"path": "Makefile", "content": "all:\n\techo built > out.txt\ntest: all\n\tgrep -q built out.txt && echo tests-pass\n"}).to_string(),
                    ),
                    terminal("make -s test"),
                    terminal(
                        "git init -q . && git add -A && git -c user.email=a@example.org -c user.name=a commit -qm first && echo commits=$(git log --oneline | wc -l)",
                    ),
                    terminal("t=$(mktemp) && echo tmp-ok > \"$t\" && cat \"$t\" && echo null > /dev/null && echo $HOME"),
                ],
            )
            .await;
        assert!(results[1].contains("tests-pass"), "{mode}: {}", results[1]);
        assert!(results[2].contains("commits=1"), "{mode}: {}", results[2]);
        assert!(results[3].contains("tmp-ok"), "{mode}: {}", results[3]);
        assert!(results[3].contains("data/ws/"), "{mode}: {}", results[3]);
    }
}

/// A hook or a command-running setting the agent wrote runs with no
/// command of its own to approve: git runs it when an innocuous `git
/// status` or `git commit` does. Pinned, neither runs; git still commits.
#[tokio::test]
async fn a_git_hook_or_setting_the_agent_wrote_does_not_run() {
    for mode in MODES {
        let host = Host::new();
        let results = host
            .run(
                mode,
                &[
                    terminal("git init -q ."),
                    (
                        "write_file",
                        serde_json::json!({"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\necho hook-ran > hook-ran.txt\n"}).to_string(),
                    ),
                    (
                        "write_file",
                        serde_json::json!({"path": ".gitconfig", "content": "[core]\n\tfsmonitor = \"echo > fsmonitor-ran.txt; false\"\n"}).to_string(),
                    ),
                    terminal(
                        "chmod +x .git/hooks/pre-commit && git status --short > /dev/null; git add -A && git -c user.email=a@example.org -c user.name=a commit -qm first && echo committed; ls -a",
                    ),
                ],
            )
            .await;
        let listed = &results[3];
        assert!(listed.contains("committed"), "{mode}: {listed}");
        assert!(
            !listed.contains("hook-ran"),
            "{mode}: the hook ran: {listed}"
        );
        assert!(
            !listed.contains("fsmonitor-ran"),
            "{mode}: core.fsmonitor ran: {listed}"
        );
    }
}

#[tokio::test]
async fn check_names_the_sandbox_it_chose_and_why() {
    let host = Host::new();
    let llm = FakeLlm::start(vec![]).await;
    for (mode, expect) in [
        ("auto", "sandbox: landlock (mode auto; kernel Landlock ABI"),
        ("bwrap", "sandbox: bwrap (mode bwrap"),
        ("off", "sandbox: off: commands run unsandboxed"),
    ] {
        let config = host.config(&llm, mode);
        let out = host.command(&config).arg("check").output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(said.contains(expect), "{mode}: {said}");
        if mode == "off" {
            assert!(said.contains("warning"), "{said}");
        }
    }
    let config = host.config(&llm, "bwrap");
    std::fs::write(
        &config,
        std::fs::read_to_string(&config).unwrap() + "bwrap_bin = \"/nonexistent/bwrap\"\n",
    )
    .unwrap();
    let out = host
        .command(&config)
        .args(["tools", "--json"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains("sandbox unavailable"), "{listed}");
}

#[tokio::test]
async fn the_daemons_files_are_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let host = Host::new();
    // A tool call makes the session's workspace.
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[(
            "w",
            "write_file",
            r#"{"path": "a.txt", "content": "x"}"#,
        )])),
        Reply::Json(text("hello")),
    ])
    .await;
    let config = host.config(&llm, "auto");
    let mut cmd = Command::new("sh");
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .arg("-c")
        .arg("umask 000; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_switchboard"))
        .arg("--config")
        .arg(&config)
        .args(["chat", "--once", "hi", "--user", "u"])
        .stdin(Stdio::null());
    let out = tokio::task::spawn_blocking(move || {
        crate::common::output_within(&mut cmd, crate::common::CLI)
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let data = host.path().join("data");
    assert_eq!(mode(&data), 0o700, "data directory");
    assert_eq!(mode(&host.db()), 0o600, "database");
    let ws = data.join("ws");
    assert_eq!(mode(&ws), 0o700, "workspace root");
    let session = common::session_workspace(&ws);
    assert_eq!(mode(&session), 0o700, "{}", session.display());
    assert_eq!(mode(&session.join("a.txt")) & 0o077, 0, "the file written");
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            assert_eq!(
                mode(&path) & 0o077,
                0,
                "{} is open to others",
                path.display()
            );
        }
    }
}

#[tokio::test]
async fn the_daemon_is_not_dumpable() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::os::unix::process::CommandExt;
    let host = Host::new();
    let llm = FakeLlm::start(vec![]).await;
    let config = host.config(&llm, "auto");
    let root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
    if root {
        // Run it as nobody: a dumpable process's /proc entries belong to
        // its user, an undumpable one's to root.
        std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let mut cmd = host.command(&config);
    cmd.args(["chat", "--user", "u"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if root {
        cmd.uid(65534).gid(65534);
    }
    let mut child = cmd.spawn().unwrap();
    let environ = format!("/proc/{}/environ", child.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    // The binary marks itself before it reads its configuration: once its
    // database exists, it has.
    while !host.db().exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the chat never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let alive = std::fs::metadata(format!("/proc/{}/status", child.id())).is_ok();
    let outcome = if root {
        std::fs::metadata(&environ).map(|m| m.uid())
    } else {
        std::fs::read(&environ).map(|_| u32::MAX)
    };
    drop(child.stdin.take());
    let _ = child.wait();
    assert!(alive);
    if root {
        assert_eq!(
            outcome.unwrap(),
            0,
            "the daemon's /proc entries belong to its user"
        );
    } else {
        assert!(
            outcome.is_err(),
            "another process of the same user read its environment"
        );
    }
}
