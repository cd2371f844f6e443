//! `switchboard tools` and `switchboard toolsets` from the real binary.

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use switchboard::config::Env;

const BIN: &str = env!("CARGO_BIN_EXE_switchboard");

fn run(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// A gateway.toml in `dir` whose storage is a SQLite file there.
fn storage_in(dir: &Path) -> switchboard::config::StorageConfig {
    let url = format!("sqlite://{}/sb.db", dir.display());
    std::fs::write(
        dir.join("gateway.toml"),
        format!("[storage]\nurl = \"{url}\"\n"),
    )
    .unwrap();
    switchboard::config::StorageConfig {
        url,
        ..Default::default()
    }
}

fn fixture() -> String {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/mcp_fixture")
        .display()
        .to_string()
}

#[test]
fn tools_lists_availability_with_reasons_and_mcp_tools() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("gateway.toml"),
        format!(
            "[[mcp.servers]]\nname = \"fixture\"\ncommand = \"{}\"\n",
            fixture()
        ),
    )
    .unwrap();
    let (code, out, err) = run(dir.path(), &["tools", "--json"]);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).unwrap();
    let tools = json["tools"].as_array().unwrap();
    let find = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    assert_eq!(find("read_file")["available"], true);
    assert_eq!(find("terminal")["emoji"], "💻");
    assert_eq!(find("echo")["toolset"], "mcp-fixture");
    let search = find("web_search");
    assert_eq!(search["available"], false);
    assert!(
        search["reason"]
            .as_str()
            .unwrap()
            .contains("no search backend")
    );

    let (_, text, _) = run(dir.path(), &["tools", "--platform", "webhook"]);
    let names: Vec<&str> = text
        .lines()
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    assert_eq!(
        names,
        ["clarify", "vision_analyze", "web_extract", "web_search"]
    );
}

/// Each tool shows its emoji, and what it needs from the environment.
#[test]
fn tools_show_their_emoji_and_the_variables_they_need() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("gateway.toml"),
        "[tools.web_search]\nprovider = \"brave\"\napi_key_env = \"SB_TEST_BRAVE_KEY\"\n",
    )
    .unwrap();
    let (code, text, err) = run(dir.path(), &["tools"]);
    assert_eq!(code, 0, "{err}");
    let line = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .to_string()
    };
    assert!(line("terminal").starts_with("💻 "), "{text}");
    let search = line("web_search");
    assert!(
        search.starts_with("🔍 ") && search.ends_with("(needs SB_TEST_BRAVE_KEY)"),
        "{search}"
    );
}

#[test]
fn toolsets_lists_and_resolves() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, _) = run(dir.path(), &["toolsets"]);
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .any(|l| l.starts_with("gateway-webhook") && l.contains(" 4 tools")),
        "{out}"
    );
    let (code, out, _) = run(dir.path(), &["toolsets", "hermes-webhook", "--json"]);
    assert_eq!(code, 0);
    let json: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        json["tools"],
        serde_json::json!(["clarify", "vision_analyze", "web_extract", "web_search"])
    );
    let (code, _, err) = run(dir.path(), &["toolsets", "nope"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown toolset `nope`"), "{err}");
}

#[test]
fn check_rejects_unknown_toolsets_by_name() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("gateway.toml"),
        "[slack]\ntoolsets = [\"gateway-slack\", \"shell\"]\n",
    )
    .unwrap();
    let (code, _, err) = run(dir.path(), &["check"]);
    assert_eq!(code, 78);
    assert!(
        err.contains("slack.toolsets: unknown toolset(s): shell"),
        "{err}"
    );
}

/// A PostgreSQL server that lets this host in without a password lets any
/// command with the network in as well, whatever password the URL holds
/// (the tests' server trusts 127.0.0.1): `check` tries it and says so, and
/// says nothing once commands have no network.
#[test]
fn check_warns_when_commands_could_reach_the_gateways_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let url = crate::common::postgres_url();
    let mut with_password = url::Url::parse(&url).unwrap();
    with_password.set_password(Some("not-asked-for")).unwrap();
    for url in [url, with_password.to_string()] {
        let storage = format!("[storage]\nurl = \"{url}\"\n");
        std::fs::write(dir.path().join("gateway.toml"), &storage).unwrap();
        let (code, out, err) = run(dir.path(), &["check"]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.lines().any(|l| l.contains(
                "warning: storage's PostgreSQL lets this host in as \"postgres\" without a password"
            ) && l.contains("network = false")),
            "{url}: {out}"
        );
        std::fs::write(
            dir.path().join("gateway.toml"),
            format!("{storage}[tools.sandbox]\nnetwork = false\n"),
        )
        .unwrap();
        let (code, out, err) = run(dir.path(), &["check"]);
        assert_eq!(code, 0, "{err}");
        assert!(!out.contains("PostgreSQL lets"), "{out}");
    }
}

/// A disk already below the reserve holds every writing command back:
/// `check` says so before the first one is ended.
#[test]
fn check_warns_when_the_workspaces_disk_is_below_the_reserve() {
    let dir = tempfile::tempdir().unwrap();
    let config = |reserve_mb: u64| {
        format!(
            "[agent]\nworkspace = \"{}\"\n[tools.sandbox]\ndisk_reserve_mb = {reserve_mb}\n",
            dir.path().join("ws").display()
        )
    };
    std::fs::write(dir.path().join("gateway.toml"), config(1 << 40)).unwrap();
    let (code, out, err) = run(dir.path(), &["check"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines().any(|l| l.contains("warning: the disk holding")
            && l.contains("commands must leave (tools.sandbox.disk_reserve_mb)")),
        "{out}"
    );
    std::fs::write(dir.path().join("gateway.toml"), config(1)).unwrap();
    let (code, out, err) = run(dir.path(), &["check"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("the disk holding"), "{out}");
}

/// The kernel applies no `processes` limit to root: `check` says so when
/// it runs as root, and only then.
#[test]
fn check_says_when_the_processes_limit_cannot_hold() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = run(dir.path(), &["check"]);
    assert_eq!(code, 0, "{err}");
    let said = out
        .lines()
        .any(|l| l.contains("warning: the daemon runs as root") && l.contains("RLIMIT_NPROC"));
    assert_eq!(said, nix::unistd::geteuid().is_root(), "{out}");
}

#[test]
fn pairing_cli_lists_approves_and_revokes() {
    let dir = tempfile::tempdir().unwrap();
    let storage = storage_in(dir.path());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let code = runtime.block_on(async {
        let store = switchboard::store::Store::open(&storage).await.unwrap();
        let event = switchboard::sessions::InboundEvent {
            platform: "telegram".into(),
            kind: switchboard::sessions::ChatKind::Dm,
            chat_id: "77".into(),
            thread_id: None,
            user_id: "77".into(),
            user_name: "Zed".into(),
            roles: vec![],
            text: "hi".into(),
            event_id: "1".into(),
            message_id: None,
            mentioned: false,
            from_bot: false,
            in_thread: false,
            attachments: Vec::new(),
            revision: switchboard::platform::Revision::New,
        };
        let outcome = switchboard::sessions::access::request_code(&store, &event)
            .await
            .unwrap();
        store.close().await;
        match outcome {
            switchboard::sessions::PairingOutcome::Issued(code) => code,
            other => panic!("{other:?}"),
        }
    });
    let (status, out, _) = run(dir.path(), &["pairing", "list"]);
    assert_eq!(status, 0);
    assert!(out.contains(&code) && out.contains("Zed"), "{out}");
    let (status, _, err) = run(dir.path(), &["pairing", "approve", "telegram", "AAAAAAAA"]);
    assert_eq!(status, 1);
    assert!(err.contains("1 failed attempt"), "{err}");
    let (status, out, _) = run(dir.path(), &["pairing", "approve", "telegram", &code]);
    assert_eq!(status, 0, "{out}");
    assert!(out.contains("paired Zed (77)"));
    assert_eq!(
        run(dir.path(), &["pairing", "revoke", "telegram", "77"]).0,
        0
    );
    assert_eq!(
        run(dir.path(), &["pairing", "revoke", "telegram", "77"]).0,
        1
    );
}

#[test]
fn sessions_cli_lists_shows_and_searches() {
    let dir = tempfile::tempdir().unwrap();
    let storage = storage_in(dir.path());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (id, next) = runtime.block_on(async {
        let store = switchboard::store::Store::open(&storage).await.unwrap();
        let session = store
            .open_session(&switchboard::store::NewSession {
                key: "slack:dm:D1",
                platform: "slack",
                chat_id: "D1",
                thread_id: None,
                user_id: Some("U1"),
            })
            .await
            .unwrap();
        for (role, text) in [
            ("user", "why is the deploy red"),
            ("assistant", "the migration timed out"),
        ] {
            store
                .append_message(
                    &session.id,
                    &switchboard::store::NewMessage {
                        role,
                        content: text,
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
        }
        store
            .set_session_model(&session.id, Some("gpt-4.1"))
            .await
            .unwrap();
        let chosen = store.session(&session.id).await.unwrap().unwrap();
        let next = store.split_session(&chosen).await.unwrap();
        store.close().await;
        (session.id, next.id)
    });
    let (status, out, _) = run(dir.path(), &["sessions", "show", &next]);
    assert_eq!(status, 0);
    assert!(
        out.contains(&format!("continues session {id}"))
            && out.contains("model chosen with /model: gpt-4.1"),
        "the split keeps the link and the model: {out}"
    );
    let (status, out, _) = run(dir.path(), &["sessions", "list"]);
    assert_eq!(status, 0);
    assert!(
        out.contains(&id) && out.contains("slack:dm:D1") && out.contains("ended"),
        "{out}"
    );
    let (status, out, _) = run(dir.path(), &["sessions", "show", &id]);
    assert_eq!(status, 0);
    assert!(
        out.contains("user: why is the deploy red")
            && out.contains("assistant: the migration timed out"),
        "{out}"
    );
    let (status, out, _) = run(dir.path(), &["sessions", "search", "migration", "--json"]);
    assert_eq!(status, 0);
    let hits: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(hits["hits"][0]["session_key"], "slack:dm:D1");
    assert_eq!(run(dir.path(), &["sessions", "show", "nope"]).0, 1);
}

#[tokio::test]
async fn healthcheck_says_whether_the_daemon_answers() {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::common::in_process::daemon_config(dir.path(), "http://127.0.0.1:9/v1");
    let daemon = crate::common::in_process::InProcess::start(config, Env::default()).await;
    let run = |url: String| {
        tokio::task::spawn_blocking(move || {
            crate::common::output_within(
                Command::new(BIN).args(["healthcheck", "--url", &url]),
                crate::common::CLI,
            )
        })
    };
    let up = run(daemon.base.clone()).await.unwrap();
    assert_eq!(
        up.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let base = daemon.base.clone();
    daemon.shutdown().await;
    let down = run(base).await.unwrap();
    assert_eq!(down.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&down.stderr).starts_with("unhealthy:"));
}

#[test]
fn cron_and_usage_cli_show_runs_apart_from_their_delivery_and_spend_against_caps() {
    let dir = tempfile::tempdir().unwrap();
    let storage = storage_in(dir.path());
    let toml = std::fs::read_to_string(dir.path().join("gateway.toml")).unwrap();
    std::fs::write(
        dir.path().join("gateway.toml"),
        format!("{toml}[llm]\nmodel = \"m\"\n[budgets.user]\ndaily_cost = 0.10\n[budgets.prices.m]\ninput = 1000.0\noutput = 1000.0\n"),
    )
    .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = switchboard::store::Store::open(&storage).await.unwrap();
        let now = switchboard::store::now_ms();
        let job = switchboard::store::CronJob {
            id: "config:digest".into(),
            timezone: "Europe/Berlin".into(),
            ..crate::common::stored_job("digest", "0 9 * * *", "slack", "C1", "")
        };
        store.put_job(&job, true).await.unwrap();
        store
            .record_run(
                "config:digest",
                now - 60_000,
                None,
                "succeeded",
                "failed",
                Some("rejected: channel_not_found"),
            )
            .await
            .unwrap();
        store
            .record_turn(&switchboard::store::TurnRecord {
                session_id: "s1".into(),
                started_at: now,
                finished_at: now,
                model_calls: 1,
                tool_calls: 0,
                prompt_tokens: 40,
                completion_tokens: 10,
                cache_read_tokens: 60,
                cache_write_tokens: 0,
                outcome: "final".into(),
                model: Some("m".into()),
                cost_micros: 50_000,
                platform: Some("slack".into()),
                chat_id: Some("C1".into()),
                user_id: Some("U1".into()),
                job_id: None,
            })
            .await
            .unwrap();
        // U2's turn is running: 20 tokens used, held against the caps.
        let hold = switchboard::store::Hold {
            session_id: "s2".into(),
            platform: "slack".into(),
            chat_id: "C2".into(),
            user_id: Some("U2".into()),
            job_id: None,
            used_prompt: 15,
            used_completion: 5,
            used_micros: 20_000,
            reserved_tokens: 0,
            reserved_micros: 0,
        };
        let (taken, _) = store
            .reserve_hold(&hold, &[], now, now + switchboard::budgets::HOLD_TTL_MS)
            .await
            .unwrap();
        assert!(taken);
        store.close().await;
    });
    let (status, out, err) = run(dir.path(), &["cron", "list"]);
    assert_eq!(status, 0, "{err}");
    assert!(
        out.contains("config:digest") && out.contains("succeeded / failed"),
        "{out}"
    );
    let (_, out, _) = run(dir.path(), &["cron", "show", "digest"]);
    assert!(
        out.contains("0 9 * * * (Europe/Berlin)") && out.contains("channel_not_found"),
        "{out}"
    );
    let (_, out, _) = run(dir.path(), &["cron", "runs", "--json"]);
    let runs: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(runs["runs"][0]["status"], "succeeded");
    assert_eq!(runs["runs"][0]["delivery"], "failed");
    let (status, out, err) = run(dir.path(), &["usage"]);
    assert_eq!(status, 0, "{err}");
    assert!(
        out.contains("slack:U1") && out.contains("50% of its cap: 0.05 of 0.10"),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.contains("slack:U2")
            && l.contains("0 turns")
            && l.contains("(+0.02 / 20 tokens held by running turns)")
            && l.contains(
                "20% of its cap: 0.02 of 0.10, of which 0.02 (20 tokens) held by running requests"
            )),
        "{out}"
    );
    let (_, out, _) = run(dir.path(), &["usage", "--json"]);
    let usage: serde_json::Value = serde_json::from_str(&out).unwrap();
    let user = &usage["usage"][0]["spend"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["level"] == "user")
        .unwrap()
        .clone();
    assert_eq!(
        (user["tokens"].as_i64(), user["used_percent"].as_f64()),
        (Some(50), Some(50.0))
    );
    let running = usage["usage"][0]["spend"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["level"] == "user" && r["id"] == "U2")
        .unwrap()
        .clone();
    assert_eq!(
        (
            running["held_tokens"].as_i64(),
            running["held_cost"].as_f64()
        ),
        (Some(20), Some(0.02))
    );
    let (_, out, _) = run(dir.path(), &["cron", "show", "nope"]);
    assert!(out.is_empty());
}
