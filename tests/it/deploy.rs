//! The deployment files say what the README promises: a hardened notify
//! unit, a non-root multi-stage image with a health check, and a compose
//! file wiring the gateway to PostgreSQL.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// `section -> key -> values` of a systemd unit file.
fn parse_unit(text: &str) -> HashMap<String, HashMap<String, Vec<String>>> {
    let mut sections: HashMap<String, HashMap<String, Vec<String>>> = HashMap::new();
    let mut current = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name.to_string();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("bad line {line:?}"));
        sections
            .entry(current.clone())
            .or_default()
            .entry(key.trim().to_string())
            .or_default()
            .push(value.trim().to_string());
    }
    sections
}

#[test]
fn systemd_unit_is_notify_watchdog_and_hardened() {
    let unit = parse_unit(&read("deploy/switchboard.service"));
    let service = &unit["Service"];
    let one = |key: &str| -> &str {
        let values = service.get(key).unwrap_or_else(|| panic!("missing {key}"));
        values.last().unwrap()
    };
    assert_eq!(one("Type"), "notify");
    assert!(one("WatchdogSec").ends_with('s'));
    assert_eq!(one("Restart"), "on-failure");
    assert_eq!(one("RestartPreventExitStatus"), "78");
    assert_eq!(one("StateDirectory"), "switchboard");
    for key in [
        "NoNewPrivileges",
        "PrivateTmp",
        "ProtectHome",
        "PrivateDevices",
    ] {
        assert_eq!(one(key), "yes", "{key}");
    }
    assert_eq!(one("ProtectSystem"), "strict");
    assert!(one("ExecStart").ends_with(" run"));
    assert!(one("ExecStartPre").ends_with(" check"));
    assert!(unit["Install"]["WantedBy"].contains(&"multi-user.target".to_string()));
}

#[test]
fn systemd_analyze_verifies_the_unit() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipping: systemd-analyze not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Point the unit at the binary under test so the executable check holds.
    let unit = read("deploy/switchboard.service").replace(
        "/usr/local/bin/switchboard",
        env!("CARGO_BIN_EXE_switchboard"),
    );
    let path = dir.path().join("switchboard.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{stderr}"
    );
    assert!(
        !stderr.contains("switchboard.service:"),
        "warnings about the unit:\n{stderr}"
    );
}

#[test]
fn dockerfile_is_multi_stage_non_root_with_healthcheck() {
    let text = read("deploy/Dockerfile");
    let froms = text.lines().filter(|l| l.starts_with("FROM ")).count();
    assert!(froms >= 2, "multi-stage build");
    let user = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line");
    assert!(
        !user.starts_with("root") && !user.starts_with("0"),
        "runs as {user}"
    );
    let health = text
        .lines()
        .position(|l| l.starts_with("HEALTHCHECK"))
        .expect("HEALTHCHECK");
    let check: String = text.lines().skip(health).take(2).collect();
    assert!(check.contains("/healthz"), "{check}");
    assert!(
        text.contains("--locked"),
        "reproducible build from Cargo.lock"
    );
}

#[test]
fn compose_wires_the_gateway_to_postgres() {
    let text = read("deploy/docker-compose.yml");
    assert!(text.contains("image: postgres:"));
    assert!(text.contains("condition: service_healthy"));
    let url = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("SWITCHBOARD_STORAGE__URL:"))
        .expect("storage URL for the gateway");
    assert!(
        url.trim().starts_with("postgres://") && url.contains("@postgres:5432/"),
        "{url}"
    );
    assert!(text.contains("dockerfile: deploy/Dockerfile"));
}

#[test]
fn slack_manifest_asks_for_what_the_adapter_uses() {
    let manifest = std::fs::read_to_string("deploy/slack-app-manifest.yml").unwrap();
    for needed in [
        "request_url: https://gateway.example.com/slack/events",
        "request_url: https://gateway.example.com/slack/interactivity",
        "- app_mention",
        "- message.im",
        "- message.channels",
        "- app_mentions:read",
        "- chat:write",
        "- reactions:write",
        "- users:read",
        "- im:history",
        "is_enabled: true",
    ] {
        assert!(manifest.contains(needed), "manifest lacks {needed:?}");
    }
}
