//! The operator console under abuse: a slow body is cut like on the main
//! listener; wrong tokens lock out the client that sent them, never the
//! operator elsewhere; `check` refuses a short token and warns on a public
//! listen; the documented token variable starts the console.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::in_process::{InProcess, daemon_config};
use switchboard::config::Env;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "console-token-4f9a1c-7d2e-48b1-9a0c-5e3f";

async fn console(
    tweak: impl FnOnce(&mut switchboard::config::Config),
) -> (InProcess, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = daemon_config(dir.path(), "http://127.0.0.1:9/v1");
    config.console.enabled = true;
    config.console.listen = "127.0.0.1:0".parse().unwrap();
    tweak(&mut config);
    let daemon = InProcess::start(
        config,
        Env::from_pairs([("SWITCHBOARD_CONSOLE_TOKEN", TOKEN)]),
    )
    .await;
    let addr = daemon.gateway.console.expect("the console listens");
    (daemon, addr.to_string(), dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_at_one_byte_a_while_is_cut_by_the_request_timeout() {
    let (daemon, addr, _dir) = console(|c| c.server.request_timeout_secs = 1).await;
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    tcp.write_all(
        b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 64\r\n\r\nt",
    )
    .await
    .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    // Keep trickling; the console must answer (and close) on its own.
    while !String::from_utf8_lossy(&answer).contains("\r\n\r\n") {
        assert!(started.elapsed() < Duration::from_secs(15), "no answer");
        let _ = tcp.write_all(b"o").await;
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(500), tcp.read(&mut buf)).await
        {
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
        }
    }
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    daemon.shutdown().await;
}

fn login_from(local: [u8; 4]) -> reqwest::Client {
    switchboard::http::client::install_crypto();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(std::net::IpAddr::from(local))
        .build()
        .unwrap()
}

async fn login(http: &reqwest::Client, addr: &str, token: &str) -> String {
    let answer = http
        .post(format!("http://{addr}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap();
    answer.headers()["location"].to_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_lock_out_their_client_only() {
    let (daemon, addr, _dir) = console(|_| {}).await;
    let stranger = login_from([127, 0, 0, 2]);
    for _ in 0..8 {
        login(&stranger, &addr, "guess").await;
    }
    assert_eq!(
        login(&stranger, &addr, TOKEN).await,
        "/login?refused=wait",
        "the guessing client waits, even with the right token"
    );
    let operator = login_from([127, 0, 0, 1]);
    assert_eq!(
        login(&operator, &addr, TOKEN).await,
        "/",
        "the operator is not locked out"
    );
    daemon.shutdown().await;
}

fn check(dir: &std::path::Path, console: &str, token: &str) -> (Option<i32>, String) {
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[storage]\nurl = \"sqlite://{}/sb.db\"\n[console]\nenabled = true\n{console}\n",
            dir.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .env_clear()
        .env("SWITCHBOARD_CONSOLE_TOKEN", token)
        .env("OPENAI_API_KEY", "k")
        .arg("--config")
        .arg(&config)
        .arg("check")
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), said)
}

#[test]
fn check_refuses_a_short_token_and_warns_on_a_public_listen() {
    let dir = tempfile::tempdir().unwrap();
    let (code, said) = check(dir.path(), "listen = \"127.0.0.1:8081\"", "x");
    assert_eq!(code, Some(78), "{said}");
    assert!(
        said.contains("console.token_env") && said.contains("at least 32"),
        "{said}"
    );
    let (code, said) = check(dir.path(), "listen = \"0.0.0.0:8081\"", TOKEN);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("warning: console.listen"), "{said}");
    let (code, said) = check(dir.path(), "listen = \"127.0.0.1:8081\"", TOKEN);
    assert_eq!(code, Some(0), "{said}");
    assert!(!said.contains("warning: console.listen"), "{said}");
}

#[tokio::test]
async fn the_documented_token_variable_starts_the_console() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[storage]\nurl = \"sqlite://{0}/sb.db\"\n[agent]\nworkspace = \"{0}/ws\"\n[console]\nenabled = true\nlisten = \"127.0.0.1:{port}\"\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("SWITCHBOARD_CONSOLE_TOKEN", TOKEN)
        .env("OPENAI_API_KEY", "k")
        .arg("--config")
        .arg(&config)
        .arg("run")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let http = login_from([127, 0, 0, 1]);
    let started = Instant::now();
    let answered = loop {
        if let Ok(page) = http
            .get(format!("http://127.0.0.1:{port}/login"))
            .send()
            .await
        {
            break page.status().as_u16();
        }
        if let Ok(Some(status)) = daemon.try_wait() {
            let mut err = String::new();
            std::io::Read::read_to_string(daemon.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("the daemon stopped ({status}): {err}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the console never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let logged_in = login(&http, &format!("127.0.0.1:{port}"), TOKEN).await;
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert_eq!(answered, 200);
    assert_eq!(logged_in, "/");
}
