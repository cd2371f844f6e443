//! The real binary: start, serve, stop on SIGTERM with exit 0, systemd
//! notifications, CLI exit codes, migrations from the command line.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common;

const BIN: &str = env!("CARGO_BIN_EXE_switchboard");

/// A command for the binary with a clean environment (no stray
/// `SWITCHBOARD_*` or `NOTIFY_SOCKET` from the caller).
fn switchboard(dir: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .current_dir(dir);
    cmd
}

fn write_config(dir: &Path, extra: &str) -> PathBuf {
    let path = dir.join("gateway.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace_secs = 5\n\
             [storage]\nurl = \"sqlite://{}/state/sb.db\"\n[log]\nformat = \"json\"\n{extra}",
            dir.display()
        ),
    )
    .unwrap();
    path
}

struct Running {
    child: Child,
    lines: mpsc::Receiver<serde_json::Value>,
    addr: String,
}

impl Running {
    fn start(mut cmd: Command) -> Self {
        let mut child = cmd.arg("run").stderr(Stdio::piped()).spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|_| serde_json::json!({ "raw": line }));
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        let listening = wait_for(&lines, Duration::from_secs(20), |v| {
            v["message"] == "listening"
        });
        let addr = listening["http.addr"].as_str().unwrap().to_string();
        Self { child, lines, addr }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "daemon still running after {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for(
    lines: &mpsc::Receiver<serde_json::Value>,
    limit: Duration,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + limit;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(v) if pred(&v) => return v,
            Ok(v) => seen.push(v),
            Err(_) => panic!("no matching log line within {limit:?}; saw {seen:#?}"),
        }
    }
}

#[tokio::test]
async fn serves_then_exits_zero_on_sigterm_within_grace() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let mut cmd = switchboard(dir.path());
    cmd.arg("--config").arg(&config);
    let mut daemon = Running::start(cmd);

    let client = switchboard::http::client::client();
    let health = client.get(daemon.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let ready = client.get(daemon.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    assert!(
        dir.path().join("state/sb.db").exists(),
        "sqlite file created"
    );

    let sent = Instant::now();
    daemon.signal("TERM");
    let status = daemon.wait_exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "exited within the grace period"
    );
    wait_for(&daemon.lines, Duration::from_secs(1), |v| {
        v["message"] == "stopped"
    });
}

#[tokio::test]
async fn the_binary_enforces_the_listener_limits() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let mut cmd = switchboard(dir.path());
    cmd.arg("--config")
        .arg(&config)
        .env("SWITCHBOARD_SERVER__HEADER_READ_TIMEOUT_SECS", "1")
        .env("SWITCHBOARD_SERVER__MAX_CONNECTIONS", "2");
    let daemon = Running::start(cmd);
    let addr = daemon.addr.clone();
    // Two silent connections take both slots; a third is refused.
    let mut silent = Vec::new();
    for _ in 0..2 {
        silent.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    // Lets the daemon accept both (not observable from here: the slots are full).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut third = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(3), third.read_to_string(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    // Saying nothing for the head timeout closes them, freeing the slots.
    for tcp in &mut silent {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(3), tcp.read_to_end(&mut rest)).await;
        assert!(
            read.is_ok(),
            "a silent connection outlived the 1 s head timeout"
        );
    }
    let mut fresh = tokio::net::TcpStream::connect(&addr).await.unwrap();
    fresh
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    fresh.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
}

#[tokio::test]
async fn a_low_soft_descriptor_limit_is_raised_for_the_connection_cap() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    // Started the way a shell or systemd without LimitNOFILE starts it: a
    // soft limit of 1000 under a higher hard one.
    let mut cmd = Command::new("sh");
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .current_dir(dir.path())
        .args([
            "-c",
            "ulimit -S -n 1000 && exec \"$0\" --config \"$1\" \"$2\"",
            BIN,
        ])
        .arg(&config);
    let daemon = Running::start(cmd);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", daemon.child.id())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let (soft, hard) = (numbers[0], numbers[1]);
    let wanted = switchboard::config::ServerConfig::default().max_connections as u64
        + switchboard::runtime::RESERVED_DESCRIPTORS;
    assert_eq!(soft, wanted.min(hard), "{line}");
}

#[tokio::test]
async fn sigint_also_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let mut cmd = switchboard(dir.path());
    cmd.arg("--config").arg(&config);
    let mut daemon = Running::start(cmd);
    daemon.signal("INT");
    assert_eq!(daemon.wait_exit(Duration::from_secs(10)).code(), Some(0));
}

#[test]
fn notifies_systemd_ready_watchdog_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut cmd = switchboard(dir.path());
    cmd.arg("--config")
        .arg(&config)
        .env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", "200000");
    let mut daemon = Running::start(cmd);

    let mut messages: Vec<String> = Vec::new();
    let mut buf = [0u8; 4096];
    let mut recv = |messages: &mut Vec<String>| {
        let n = socket.recv(&mut buf).expect("notification within 10 s");
        messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    };
    while messages.iter().filter(|m| m.contains("WATCHDOG=1")).count() < 2 {
        recv(&mut messages);
    }
    assert!(messages[0].contains("READY=1"), "{messages:?}");
    assert!(
        messages[0].contains("STATUS=listening on 127.0.0.1:"),
        "{messages:?}"
    );

    daemon.signal("TERM");
    while !messages.iter().any(|m| m.contains("STOPPING=1")) {
        recv(&mut messages);
    }
    assert_eq!(daemon.wait_exit(Duration::from_secs(10)).code(), Some(0));
}

#[test]
fn bad_config_exits_78_with_one_line_per_problem() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "[telegram]\nenabled = true\n[llm]\napi_key_env = \"\"\n",
    );
    for sub in ["check", "run"] {
        let out = switchboard(dir.path())
            .arg("--config")
            .arg(&config)
            .arg(sub)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(78), "{sub}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{sub}: {stderr}");
        assert!(lines[0].contains("telegram.token_env"), "{stderr}");
        assert!(
            lines[0].contains("TELEGRAM_BOT_TOKEN is not set"),
            "{stderr}"
        );
    }
}

#[test]
fn environment_override_reaches_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let out = switchboard(dir.path())
        .arg("--config")
        .arg(&config)
        .arg("check")
        .env("SWITCHBOARD_SERVER__LISTEN", "not-an-address")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("server.listen"), "{stderr}");
    assert!(stderr.contains("SWITCHBOARD_SERVER__LISTEN"), "{stderr}");
}

#[test]
fn missing_explicit_config_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = switchboard(dir.path())
        .args(["--config", "nope.toml", "check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope.toml: cannot read config file"));
}

#[test]
fn check_on_the_committed_config_lists_adapters() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = switchboard(repo).arg("check").output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("config: gateway.toml: ok"), "{stdout}");
    assert!(
        stdout.contains("tools:")
            && stdout
                .lines()
                .any(|l| l.contains("web_search") && l.contains("unavailable: no search backend")),
        "{stdout}"
    );
    for name in ["telegram", "discord", "slack", "webhook"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(name) && l.contains("disabled")),
            "{name} not listed as disabled:\n{stdout}"
        );
    }
}

#[test]
fn without_a_config_file_the_defaults_are_used() {
    let dir = tempfile::tempdir().unwrap();
    let out = switchboard(dir.path()).arg("check").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("built-in defaults"));
}

#[test]
fn migrate_twice_applies_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let run = || {
        let out = switchboard(dir.path())
            .arg("--config")
            .arg(&config)
            .arg("migrate")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let shipped = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite"))
        .unwrap()
        .count();
    let first = run();
    assert!(
        first.starts_with(&format!(
            "applied {shipped} migration(s); schema version {shipped}"
        )),
        "{first}"
    );
    assert!(run().starts_with(&format!("applied 0 migration(s); schema version {shipped}")));
}

#[test]
fn version_flag_prints_the_version() {
    let dir = tempfile::tempdir().unwrap();
    let out = switchboard(dir.path()).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        format!("switchboard {}", env!("CARGO_PKG_VERSION"))
    );
}

#[tokio::test]
async fn occupied_port_fails_with_the_key() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let out = switchboard(dir.path())
        .arg("--config")
        .arg(&config)
        .arg("run")
        .env("SWITCHBOARD_SERVER__LISTEN", format!("127.0.0.1:{port}"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("server.listen: cannot bind"));
}

#[tokio::test]
async fn the_discord_gateway_shows_on_readyz_and_stops_with_the_daemon() {
    let discord = common::fake_discord::FakeDiscord::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "[llm]\napi_key_env = \"\"\n[discord]\nenabled = true\napi_url = \"{}\"\n",
            discord.url
        ),
    );
    let mut cmd = switchboard(dir.path());
    cmd.env("DISCORD_BOT_TOKEN", "test-token")
        .arg("--config")
        .arg(&config);
    let mut daemon = Running::start(cmd);
    discord.ready().await;
    let client = switchboard::http::client::client();
    let mut body = serde_json::Value::Null;
    for _ in 0..100 {
        let ready = client.get(daemon.url("/readyz")).send().await.unwrap();
        body = ready.json().await.unwrap();
        if body.to_string().contains("connected as switchboard") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        body.to_string().contains("connected as switchboard"),
        "{body}"
    );
    daemon.signal("TERM");
    assert_eq!(daemon.wait_exit(Duration::from_secs(10)).code(), Some(0));
}
