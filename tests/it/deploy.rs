//! The deployment files say what docs/operating.md promises: a hardened notify
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
    assert_eq!(one("ProtectProc"), "invisible");
    assert_eq!(one("ProcSubset"), "pid");
    let filter = one("SystemCallFilter");
    assert!(
        filter.starts_with('~'),
        "a deny-list child processes survive"
    );
    for set in ["@mount", "@reboot", "@module", "@debug"] {
        assert!(filter.contains(set), "{set} denied");
    }
    // The sandbox `auto` picks under this unit is Landlock: its system
    // calls (and capset, prctl) must stay allowed.
    for call in ["@sandbox", "landlock", "@capabilities", "prctl"] {
        assert!(
            !filter.contains(call),
            "{call} denied: the sandbox cannot start"
        );
    }
    assert!(one("TasksMax").parse::<u32>().is_ok());
    let nofile: u64 = one("LimitNOFILE").parse().unwrap();
    let needed = switchboard::config::ServerConfig::default().max_connections as u64
        + switchboard::runtime::RESERVED_DESCRIPTORS;
    assert!(
        nofile >= needed,
        "LimitNOFILE {nofile} below the default connection cap and the daemon's own {needed}"
    );
    assert!(one("MemoryMax").ends_with('G'));
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
    assert!(check.contains("\"healthcheck\""), "{check}");
    assert!(!text.contains("curl"), "the image needs no curl");
    assert!(
        text.contains(" bubblewrap "),
        "the image ships bubblewrap for [tools.sandbox] mode = \"bwrap\""
    );
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
    for hardening in [
        "read_only: true",
        "- /tmp",
        "cap_drop:",
        "- ALL",
        "no-new-privileges:true",
        "pids_limit:",
        "mem_limit:",
        "nofile: 8192",
    ] {
        assert!(text.contains(hardening), "compose lacks {hardening}");
    }
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
        "- files:read",
        "- im:history",
        "is_enabled: true",
    ] {
        assert!(manifest.contains(needed), "manifest lacks {needed:?}");
    }
}

/// The build stage's `COPY <src…> <dest>` sources, relative to the context.
fn build_stage_copies(dockerfile: &str) -> Vec<String> {
    let mut froms = 0;
    let mut sources = Vec::new();
    for line in dockerfile.lines() {
        if line.starts_with("FROM ") {
            froms += 1;
        }
        if froms != 1 {
            continue;
        }
        if let Some(args) = line.strip_prefix("COPY ") {
            let words: Vec<&str> = args
                .split_whitespace()
                .filter(|w| !w.starts_with("--"))
                .collect();
            if let Some((_, srcs)) = words.split_last() {
                sources.extend(srcs.iter().map(|s| s.to_string()));
            }
        }
    }
    sources
}

fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap();
    }
}

/// The files the Dockerfile's build stage copies are enough for cargo to
/// load every target of the manifest: with only them in a directory,
/// `cargo build` gets as far as looking for a binary (a missing bench or
/// example file fails before that).
#[test]
fn the_docker_build_context_holds_every_target_the_manifest_names() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sources = build_stage_copies(&read("deploy/Dockerfile"));
    assert!(sources.contains(&"src".to_string()), "{sources:?}");
    assert!(
        sources.contains(&".cargo".to_string()),
        "the build settings (SQLite's flags) are copied: {sources:?}"
    );
    let context = tempfile::tempdir().unwrap();
    for source in &sources {
        copy_tree(&repo.join(source), &context.path().join(source));
    }
    let target = tempfile::tempdir().unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--offline", "--locked", "--bin", "no-such-bin"])
        .current_dir(context.path())
        .env("CARGO_TARGET_DIR", target.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no bin target named"),
        "cargo could not load the manifest from the Dockerfile's files: {stderr}"
    );
}

/// Where a Docker engine answers, the image builds and its binary loads the
/// shipped configuration; elsewhere the test says why it did not run.
#[test]
fn the_image_builds_where_a_docker_engine_runs() {
    let engine = Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output();
    match engine {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            let why = String::from_utf8_lossy(&out.stderr);
            eprintln!("skipped: no Docker engine answers here: {}", why.trim());
            return;
        }
        Err(err) => {
            eprintln!("skipped: no docker command here: {err}");
            return;
        }
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tag = format!("switchboard-test:{}", std::process::id());
    let build = Command::new("docker")
        .args(["build", "-f", "deploy/Dockerfile", "-t", &tag, "."])
        .current_dir(repo)
        .output()
        .unwrap();
    assert!(
        build.status.success(),
        "docker build failed: {}",
        String::from_utf8_lossy(&build.stderr)
    );
    let check = Command::new("docker")
        .args(["run", "--rm", &tag, "check"])
        .output()
        .unwrap();
    let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
    assert!(
        check.status.success(),
        "the image's binary refused its configuration: {}",
        String::from_utf8_lossy(&check.stderr)
    );
}

/// The values of `key:` lines in `text`, in order.
fn yaml_values<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix(key))
        .map(|v| v.trim().trim_matches('"'))
        .collect()
}

#[test]
fn the_replicas_profile_puts_two_gateways_behind_a_proxy_that_checks_readyz() {
    let compose = read("deploy/docker-compose.yml");
    assert_eq!(
        yaml_values(&compose, "SWITCHBOARD_CLUSTER__NAME:"),
        ["gateway-a", "gateway-b"]
    );
    assert_eq!(
        yaml_values(&compose, "profiles:"),
        ["[replicas]", "[replicas]"],
        "the second gateway and the proxy only in the profile"
    );
    assert!(
        compose.contains("<<: *gateway-environment"),
        "b runs a's settings"
    );
    assert!(compose.contains("- state-b:/var/lib/switchboard"));
    assert!(compose.contains("./Caddyfile:/etc/caddy/Caddyfile:ro"));
    let caddy = read("deploy/Caddyfile");
    assert!(caddy.contains("reverse_proxy gateway:8080 gateway-b:8080"));
    assert!(caddy.contains("health_uri /readyz"));
}

/// Starts the real binary in `dir` with `env`; returns it and the address
/// it listens on (from its JSON log).
fn spawn_gateway(dir: &Path, env: &[(&str, String)]) -> (std::process::Child, String) {
    use std::io::BufRead;
    std::fs::write(dir.join("gateway.toml"), "[log]\nformat = \"json\"\n").unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchboard"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .current_dir(dir)
        .arg("run")
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                && v["message"] == "listening"
            {
                let _ = tx.send(v["http.addr"].as_str().unwrap_or_default().to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the gateway listens");
    (child, addr)
}

/// What the profile's two gateways are, short of Docker (no engine here):
/// the real binary twice with the compose file's environment, on one
/// PostgreSQL database; both pass /readyz and know each other's role.
#[tokio::test]
async fn two_gateways_with_the_compose_environment_pass_readyz() {
    let Some(db) = crate::common::PgTestDb::create().await else {
        return;
    };
    let compose = read("deploy/docker-compose.yml");
    let names = yaml_values(&compose, "SWITCHBOARD_CLUSTER__NAME:");
    let mut running = Vec::new();
    for name in &names {
        let dir = tempfile::tempdir().unwrap();
        let env = [
            ("SWITCHBOARD_STORAGE__URL", db.config.url.clone()),
            ("SWITCHBOARD_SERVER__LISTEN", "127.0.0.1:0".to_string()),
            ("SWITCHBOARD_CLUSTER__NAME", name.to_string()),
            (
                "SWITCHBOARD_AGENT__WORKSPACE",
                dir.path().join("ws").display().to_string(),
            ),
        ];
        let (child, addr) = spawn_gateway(dir.path(), &env);
        running.push((child, addr, dir));
    }
    let client = switchboard::http::client::client();
    for ((_, addr, _), name) in running.iter().zip(&names) {
        let ready = client
            .get(format!("http://{addr}/readyz"))
            .send()
            .await
            .unwrap();
        assert_eq!(ready.status(), 200);
        let body = ready.text().await.unwrap();
        assert!(body.contains(&format!("replica {name}: standby")), "{body}");
    }
    let store = db.store().await;
    let (replicas, _) = store.replicas().await.unwrap();
    let mut seen: Vec<String> = replicas.into_iter().map(|r| r.name).collect();
    seen.sort();
    assert_eq!(seen, names);
    for (mut child, _, _) in running {
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        assert!(child.wait().unwrap().success());
    }
    assert!(store.replicas().await.unwrap().0.is_empty(), "both left");
    store.close().await;
    db.drop().await;
}
