//! Configuration loading: defaults, overrides, and every error case by name.

use switchboard::config::{
    BusyInputMode, Config, ConfigError, Env, TelegramMode, component_statuses, load_from_str,
};

fn env(pairs: &[(&str, &str)]) -> Env {
    Env::from_pairs(pairs.iter().copied())
}

/// The problems of a config expected to fail, as `(key, reason)`.
fn problems(toml: &str, vars: &[(&str, &str)]) -> Vec<(String, String)> {
    match load_from_str(toml, &env(vars)) {
        Ok(_) => panic!("config unexpectedly valid:\n{toml}"),
        Err(ConfigError::Invalid(problems)) => {
            problems.into_iter().map(|p| (p.key, p.reason)).collect()
        }
        Err(other) => panic!("unexpected error {other}"),
    }
}

/// Asserts exactly one problem, on `key`, whose reason contains `needle`.
fn fails_on(toml: &str, vars: &[(&str, &str)], key: &str, needle: &str) {
    let found = problems(toml, vars);
    assert_eq!(found.len(), 1, "expected one problem, got {found:?}");
    let (k, reason) = &found[0];
    assert_eq!(k, key, "reason: {reason}");
    assert!(reason.contains(needle), "{reason:?} lacks {needle:?}");
}

#[test]
fn committed_gateway_toml_runs_on_a_fresh_machine() {
    let text = std::fs::read_to_string("gateway.toml").unwrap();
    let config = load_from_str(&text, &Env::default()).expect("gateway.toml is valid with no env");
    assert_eq!(config.server.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(config.storage.url, "sqlite://data/switchboard.db");
    let statuses = component_statuses(&config);
    assert_eq!(statuses.len(), 4);
    for s in statuses {
        assert!(!s.enabled, "{} should be off without credentials", s.name);
        assert!(s.detail.contains("enabled = false"), "{s:?}");
    }
}

#[test]
fn empty_file_gives_the_documented_defaults() {
    let config = load_from_str("", &Env::default()).unwrap();
    assert_eq!(config.server.max_body_bytes, 1_048_576);
    assert_eq!(config.approvals.timeout_secs, 300);
    assert_eq!(config.agent.busy_input_mode, BusyInputMode::Queue);
    assert_eq!(config.telegram.mode, TelegramMode::Polling);
    assert_eq!(config.llm.model, "gpt-4.1-mini");
    assert!(config.telegram.require_mention);
}

#[test]
fn unknown_key_is_named() {
    fails_on(
        "[server]\nlisten_addr = \"x\"\n",
        &[],
        "server.listen_addr",
        "unknown field",
    );
}

#[test]
fn unknown_section_is_named() {
    fails_on(
        "[telegramm]\nenabled = true\n",
        &[],
        "telegramm",
        "unknown field",
    );
}

#[test]
fn unknown_nested_key_is_named() {
    let toml = "[[webhook.routes]]\nname = \"a\"\npath = \"/a\"\nscheme = \"github\"\nsecert_env = \"X\"\n";
    fails_on(toml, &[], "webhook.routes[0].secert_env", "unknown field");
}

#[test]
fn wrong_type_is_named() {
    fails_on(
        "[server]\nmax_body_bytes = \"big\"\n",
        &[],
        "server.max_body_bytes",
        "invalid type",
    );
}

#[test]
fn wrong_enum_value_is_named() {
    fails_on(
        "[approvals]\nmode = \"yolo\"\n",
        &[],
        "approvals.mode",
        "unknown variant",
    );
}

#[test]
fn wrong_element_type_is_named() {
    fails_on(
        "[telegram]\nallowed_users = [\"alice\"]\n",
        &[],
        "telegram.allowed_users[0]",
        "invalid type",
    );
}

#[test]
fn bad_listen_address_is_named() {
    fails_on(
        "[server]\nlisten = \"localhost\"\n",
        &[],
        "server.listen",
        "address",
    );
}

#[test]
fn discord_ids_must_be_snowflakes() {
    fails_on(
        "[discord]\nallowed_users = [\"ann#1234\"]\n",
        &[],
        "discord.allowed_users",
        "\"ann#1234\" is not a snowflake id",
    );
    fails_on(
        "[discord]\nallowed_channels = [\"#general\"]\n",
        &[],
        "discord.allowed_channels",
        "not a snowflake id",
    );
}

#[test]
fn bad_urls_are_named() {
    fails_on(
        "[llm]\nbase_url = \"not a url\"\n",
        &[],
        "llm.base_url",
        "not a valid URL",
    );
    fails_on(
        "[telegram]\napi_url = \"ftp://x\"\n",
        &[],
        "telegram.api_url",
        "not an http(s) URL",
    );
    fails_on(
        "[discord]\napi_url = \"\"\n",
        &[],
        "discord.api_url",
        "not a valid URL",
    );
    fails_on(
        "[slack]\napi_url = \"slack\"\n",
        &[],
        "slack.api_url",
        "not a valid URL",
    );
    fails_on(
        "[server]\npublic_url = \"example.com\"\n",
        &[],
        "server.public_url",
        "URL",
    );
    fails_on(
        "[storage]\nurl = \"mysql://db\"\n",
        &[],
        "storage.url",
        "neither",
    );
    fails_on(
        "[llm.auxiliary]\nbase_url = \"::\"\n",
        &[],
        "llm.auxiliary.base_url",
        "URL",
    );
}

#[test]
fn syntax_error_is_one_line() {
    let found = problems("[server\nlisten = 1\n", &[]);
    assert_eq!(found.len(), 1);
    assert!(!found[0].1.contains('\n'), "{:?}", found[0].1);
    assert!(found[0].1.contains("line 1"), "{:?}", found[0].1);
}

const KEY: (&str, &str) = ("OPENAI_API_KEY", "sk-test");

#[test]
fn telegram_needs_its_token() {
    fails_on(
        "[telegram]\nenabled = true\n",
        &[KEY],
        "telegram.token_env",
        "TELEGRAM_BOT_TOKEN is not set",
    );
    load_from_str(
        "[telegram]\nenabled = true\n",
        &env(&[KEY, ("TELEGRAM_BOT_TOKEN", "1:x")]),
    )
    .unwrap();
}

#[test]
fn telegram_webhook_mode_needs_public_url_and_secret() {
    let toml = "[telegram]\nenabled = true\nmode = \"webhook\"\n";
    let found = problems(toml, &[KEY, ("TELEGRAM_BOT_TOKEN", "1:x")]);
    let keys: Vec<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["server.public_url", "telegram.webhook_secret_env"]);
    let toml =
        "public_url = \"https://bot.example\"\n[telegram]\nenabled = true\nmode = \"webhook\"\n";
    let toml = format!("[server]\n{toml}");
    for (secret, says) in [
        ("s3cret", "at least 16"),
        ("0123456789abcdef:0123", "A-Z, a-z, 0-9"),
        (&"x".repeat(257) as &str, "at most 256"),
    ] {
        let found = problems(
            &toml,
            &[
                KEY,
                ("TELEGRAM_BOT_TOKEN", "1:x"),
                ("TELEGRAM_WEBHOOK_SECRET", secret),
            ],
        );
        assert!(
            found
                .iter()
                .any(|(k, why)| k == "telegram.webhook_secret_env" && why.contains(says)),
            "{secret}: {found:?}"
        );
    }
    load_from_str(
        &toml,
        &env(&[
            KEY,
            ("TELEGRAM_BOT_TOKEN", "1:x"),
            ("TELEGRAM_WEBHOOK_SECRET", "0123456789abcdef_-XYZ"),
        ]),
    )
    .unwrap();
}

#[test]
fn empty_secret_counts_as_missing() {
    fails_on(
        "[discord]\nenabled = true\n",
        &[KEY, ("DISCORD_BOT_TOKEN", "")],
        "discord.token_env",
        "not set",
    );
}

#[test]
fn slack_needs_the_token_of_its_mode() {
    let base = [KEY, ("SLACK_BOT_TOKEN", "xoxb-1")];
    fails_on(
        "[slack]\nenabled = true\n",
        &base,
        "slack.app_token_env",
        "SLACK_APP_TOKEN",
    );
    fails_on(
        "[slack]\nenabled = true\nmode = \"events\"\n",
        &base,
        "slack.signing_secret_env",
        "SLACK_SIGNING_SECRET",
    );
    fails_on(
        "[slack]\nenabled = true\n",
        &[KEY, ("SLACK_APP_TOKEN", "xapp-1")],
        "slack.bot_token_env",
        "SLACK_BOT_TOKEN",
    );
}

#[test]
fn enabled_adapter_needs_the_model_key_unless_keyless() {
    let toml = "[discord]\nenabled = true\n";
    fails_on(
        toml,
        &[("DISCORD_BOT_TOKEN", "t")],
        "llm.api_key_env",
        "OPENAI_API_KEY",
    );
    let keyless = "[llm]\napi_key_env = \"\"\n[discord]\nenabled = true\n";
    load_from_str(keyless, &env(&[("DISCORD_BOT_TOKEN", "t")])).unwrap();
}

const ROUTE: &str = "[webhook]\nenabled = true\n[[webhook.routes]]\nname = \"gh\"\npath = \"/webhooks/gh\"\nscheme = \"github\"\n";

#[test]
fn webhook_route_needs_its_secret() {
    let toml = format!("{ROUTE}secret_env = \"GH_SECRET\"\n");
    fails_on(
        &toml,
        &[KEY],
        "webhook.routes[0].secret_env",
        "GH_SECRET is not set",
    );
    load_from_str(&toml, &env(&[KEY, ("GH_SECRET", "a-long-enough-secret")])).unwrap();
}

#[test]
fn unsigned_route_only_on_loopback_when_marked_insecure() {
    fails_on(ROUTE, &[KEY], "webhook.routes[0].secret_env", "insecure");
    let insecure = format!("{ROUTE}insecure = true\n");
    load_from_str(&insecure, &env(&[KEY])).unwrap();
    let public = format!("[server]\nlisten = \"0.0.0.0:8080\"\n{insecure}");
    fails_on(&public, &[KEY], "webhook.routes[0].insecure", "loopback");
}

#[test]
fn github_comment_delivery_needs_a_token() {
    let toml =
        format!("{ROUTE}secret_env = \"S\"\n[webhook.routes.deliver]\nkind = \"github_comment\"\n");
    fails_on(
        &toml,
        &[KEY, ("S", "a-long-enough-secret")],
        "webhook.routes[0].deliver.token_env",
        "GITHUB_TOKEN",
    );
}

#[test]
fn route_paths_must_be_unique_and_not_reserved() {
    let toml = format!(
        "{ROUTE}insecure = true\n[[webhook.routes]]\nname = \"b\"\npath = \"/healthz\"\nscheme = \"gitlab\"\ninsecure = true\n"
    );
    fails_on(&toml, &[KEY], "webhook.routes[1].path", "reserved");
    let dup = format!(
        "{ROUTE}insecure = true\n[[webhook.routes]]\nname = \"gh\"\npath = \"/webhooks/gh\"\nscheme = \"gitlab\"\ninsecure = true\n"
    );
    let keys: Vec<String> = problems(&dup, &[KEY]).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["webhook.routes[1].name", "webhook.routes[1].path"]);
}

#[test]
fn hmac_route_needs_a_header() {
    let toml = "[[webhook.routes]]\nname = \"ci\"\npath = \"/ci\"\nscheme = \"hmac\"\n";
    fails_on(toml, &[], "webhook.routes[0].signature_header", "hmac");
}

#[test]
fn mcp_server_needs_exactly_one_transport() {
    fails_on(
        "[[mcp.servers]]\nname = \"fs\"\n",
        &[],
        "mcp.servers[0].command",
        "exactly one",
    );
    fails_on(
        "[[mcp.servers]]\nname = \"fs\"\ncommand = \"x\"\nurl = \"http://127.0.0.1:1\"\n",
        &[],
        "mcp.servers[0].command",
        "exactly one",
    );
    fails_on(
        "[[mcp.servers]]\nname = \"a b\"\ncommand = \"x\"\n",
        &[],
        "mcp.servers[0].name",
        "A-Za-z0-9",
    );
}

#[test]
fn mcp_headers_go_to_url_servers_by_env_var_name() {
    fails_on(
        "[[mcp.servers]]\nname = \"fs\"\ncommand = \"x\"\nheaders = { Authorization = \"FS_AUTH\" }\n",
        &[],
        "mcp.servers[0].headers.Authorization",
        "url servers only",
    );
    fails_on(
        "[[mcp.servers]]\nname = \"r\"\nurl = \"https://mcp.example.com/mcp\"\nheaders = { \"Bad Header\" = \"X\" }\n",
        &[],
        "mcp.servers[0].headers.Bad Header",
        "not a valid HTTP header name",
    );
    let ok = "[[mcp.servers]]\nname = \"r\"\nurl = \"https://mcp.example.com/mcp\"\nheaders = { Authorization = \"R_AUTH\" }\n";
    let config = load_from_str(ok, &Env::default()).unwrap();
    assert_eq!(config.mcp.servers[0].headers["Authorization"], "R_AUTH");
}

#[test]
fn route_to_platform_is_checked() {
    fails_on(
        "[approvals]\nroute_to = { platform = \"irc\", chat = \"#ops\" }\n",
        &[],
        "approvals.route_to.platform",
        "irc",
    );
}

#[test]
fn bad_log_filter_is_named() {
    fails_on(
        "[log]\nlevel = \"info,,=[\"\n",
        &[],
        "log.level",
        "not a valid filter",
    );
}

#[test]
fn environment_overrides_the_file() {
    let vars = [
        ("SWITCHBOARD_SERVER__LISTEN", "127.0.0.1:9999"),
        ("SWITCHBOARD_AGENT__BUSY_INPUT_MODE", "interrupt"),
        ("SWITCHBOARD_TELEGRAM__ALLOWED_USERS", "11,22"),
        ("SWITCHBOARD_DISCORD__ALLOWED_ROLES", "101,202"),
        ("SWITCHBOARD_LLM__MODEL", "llama3"),
        (
            "SWITCHBOARD_STORAGE__URL",
            "postgres://postgres@127.0.0.1/test",
        ),
        ("UNRELATED", "ignored"),
    ];
    let config: Config =
        load_from_str("[server]\nlisten = \"127.0.0.1:1\"\n", &env(&vars)).unwrap();
    assert_eq!(config.server.listen.port(), 9999);
    assert_eq!(config.agent.busy_input_mode, BusyInputMode::Interrupt);
    assert_eq!(config.telegram.allowed_users, [11, 22]);
    assert_eq!(config.discord.allowed_roles, ["101", "202"]);
    assert_eq!(config.llm.model, "llama3");
    assert!(config.storage.url.starts_with("postgres://"));
}

#[test]
fn bad_environment_override_names_key_and_variable() {
    fails_on(
        "",
        &[("SWITCHBOARD_SERVER__MAX_BODY_BYTES", "lots")],
        "server.max_body_bytes",
        "SWITCHBOARD_SERVER__MAX_BODY_BYTES",
    );
    fails_on(
        "",
        &[("SWITCHBOARD_SERVER__LISTN", "x")],
        "server.listn",
        "unknown field",
    );
}

#[test]
fn every_problem_renders_on_one_line_naming_its_key() {
    let toml = "[telegram]\nenabled = true\nmode = \"webhook\"\n[slack]\nenabled = true\n";
    let err = load_from_str(toml, &Env::default()).unwrap_err();
    let text = err.to_string();
    let lines: Vec<&str> = text.lines().collect();
    let ConfigError::Invalid(problems) = err else {
        panic!()
    };
    assert_eq!(lines.len(), problems.len());
    for (line, problem) in lines.iter().zip(&problems) {
        assert!(line.starts_with(&format!("{}: ", problem.key)), "{line}");
    }
}

#[test]
fn the_configuration_page_documents_every_key() {
    let sample = r#"
        [approvals]
        route_to = { platform = "slack", chat = "C1" }
        [llm.auxiliary]
        provider = "openai"
        base_url = "http://127.0.0.1:1"
        model = "m"
        api_key_env = "K"
        [sessions.reset_by_platform.slack]
        mode = "idle"
        [telegram]
        toolsets = ["web"]
        [discord]
        toolsets = ["web"]
        [slack]
        toolsets = ["web"]
        [[webhook.routes]]
        name = "r"
        path = "/r"
        scheme = "hmac"
        secret_env = "S"
        signature_header = "X-Sig"
        insecure = false
        events = ["push"]
        prompt = "p"
        when = { "a.b" = ["c"] }
        toolsets = ["web"]
        [webhook.routes.deliver]
        kind = "chat"
        platform = "slack"
        chat = "C1"
        [tools.send_message.targets]
        ops = { platform = "slack", chat = "C1" }
        [[mcp.servers]]
        name = "fs"
        command = "x"
        args = []
        env = { A = "b" }
        timeout_secs = 5
        [[cron.jobs]]
        name = "j"
        schedule = "0 9 * * *"
        prompt = "p"
        platform = "slack"
        chat = "C1"
        [budgets.prices.m]
        input = 1.0
        output = 2.0
    "#;
    let config = load_from_str(sample, &Env::default()).unwrap();
    let value = serde_json::to_value(&config).unwrap();
    let mut keys = Vec::new();
    collect_keys(&value, "", &mut keys);
    // Map-valued keys: document the map and the fields of one entry.
    for key in keys.iter_mut() {
        *key = key.replace(
            "tools.send_message.targets.ops.",
            "tools.send_message.targets.",
        );
        *key = key.replace(
            "sessions.reset_by_platform.slack.",
            "sessions.reset_by_platform.<platform>.",
        );
        *key = key.replace("budgets.prices.m.", "budgets.prices.<model>.");
        for level in ["user", "chat", "route", "job"] {
            *key = key.replace(&format!("budgets.{level}."), "budgets.<level>.");
        }
    }
    keys.push("tools.send_message.targets".into());
    keys.push("sessions.reset_by_platform".into());
    keys.retain(|k| !k.starts_with("webhook.routes.when."));
    keys.push("webhook.routes.when".into());
    assert!(keys.len() > 60, "found only {} keys", keys.len());
    let readme = std::fs::read_to_string("docs/configuration.md").unwrap();
    let missing: Vec<&String> = keys
        .iter()
        .filter(|k| !readme.contains(&format!("`{k}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/configuration.md lacks: {missing:?}"
    );
}

fn collect_keys(value: &serde_json::Value, prefix: &str, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                let is_table = v.is_object() && !(prefix.ends_with("servers") && k == "env");
                let is_table_array = v
                    .as_array()
                    .is_some_and(|a| a.first().is_some_and(|f| f.is_object()));
                if is_table || is_table_array {
                    collect_keys(v, &path, out);
                } else {
                    out.push(path);
                }
            }
        }
        serde_json::Value::Array(items) => {
            if let Some(first) = items.first() {
                collect_keys(first, prefix, out);
            }
        }
        _ => {}
    }
}

/// Toolset names are checked against the platforms' presets, which the
/// adapters describe (`switchboard check` and `run` refuse them alike).
fn toolset_problems(toml: &str) -> Vec<(String, String)> {
    let config = load_from_str(toml, &Env::default()).unwrap();
    switchboard::adapters::check_toolsets(&config)
        .into_iter()
        .map(|p| (p.key, p.reason))
        .collect()
}

#[test]
fn unknown_toolset_names_are_rejected() {
    for (toml, key, needle) in [
        (
            "[telegram]\ntoolsets = [\"core\", \"terminall\"]\n",
            "telegram.toolsets",
            "terminall",
        ),
        (
            "[tools]\ndisabled_toolsets = [\"gateway-matrix\"]\n",
            "tools.disabled_toolsets",
            "gateway-matrix",
        ),
        (
            "[slack]\ntoolsets = [\"mcp-fs\"]\n",
            "slack.toolsets",
            "mcp-fs",
        ),
    ] {
        let found = toolset_problems(toml);
        assert_eq!(found.len(), 1, "expected one problem, got {found:?}");
        assert_eq!(found[0].0, key);
        assert!(found[0].1.contains(needle), "{found:?}");
    }
    let ok = "[discord]\ntoolsets = [\"hermes-discord\", \"web_tools\", \"mcp-fs\", \"all\", \"gateway\", \"gateway-webhook\"]\n[[mcp.servers]]\nname = \"fs\"\ncommand = \"x\"\n";
    assert_eq!(toolset_problems(ok), []);
}

#[test]
fn check_names_bad_schedules_and_missing_prices() {
    let found = problems(
        r#"
        [[cron.jobs]]
        name = "a"
        schedule = "61 * * * *"
        prompt = "p"
        platform = "slack"
        chat = "C1"
        [[cron.jobs]]
        name = "a"
        schedule = "0 9 * * *"
        timezone = "Mars/Olympus"
        prompt = ""
        platform = "irc"
        [[cron.jobs]]
        name = "b"
        schedule = "every 10s"
        prompt = "p"
        platform = "telegram"
        chat = "1"
        [[llm.fallback]]
        model = "backup"
        [budgets.prices.m]
        input = -1.0
        output = 2.0
        [budgets.user]
        daily_cost = 1.0
        "#,
        &[],
    );
    let has = |key: &str, needle: &str| {
        assert!(
            found.iter().any(|(k, r)| k == key && r.contains(needle)),
            "no problem {key}: {needle} in {found:?}"
        );
    };
    has("cron.jobs[0].schedule", "not a cron expression");
    has("cron.jobs[1].name", "names two jobs");
    has("cron.jobs[1].timezone", "unknown time zone");
    has("cron.jobs[1].prompt", "say what the job asks");
    has("cron.jobs[1].platform", "not telegram, discord or slack");
    has("cron.jobs[1].chat", "name the chat");
    has("cron.jobs[2].schedule", "too often");
    has("budgets.prices.m", "per million tokens");
    has("budgets.prices", "have no price");
    has("budgets.prices", "backup");
}

#[test]
fn the_console_needs_its_token_and_a_port_of_its_own() {
    let found = problems(
        r#"
        [server]
        listen = "127.0.0.1:9000"
        [console]
        enabled = true
        listen = "127.0.0.1:9000"
        "#,
        &[],
    );
    assert!(
        found
            .iter()
            .any(|(k, r)| k == "console.token_env"
                && r.contains("SWITCHBOARD_CONSOLE_TOKEN is not set")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|(k, r)| k == "console.listen" && r.contains("never served on the webhook port")),
        "{found:?}"
    );
}

#[test]
fn check_names_forge_routes_that_cannot_work() {
    let found = problems(
        r#"
        [webhook]
        enabled = true
        [[webhook.routes]]
        name = "gh"
        path = "/webhooks/gh"
        scheme = "github"
        secret_env = "S"
        [webhook.routes.forge]
        app_id = 1
        commands_from = ["github:bob"]
        [[webhook.routes]]
        name = "gl"
        path = "/webhooks/gl"
        scheme = "gitlab"
        secret_env = "S"
        [webhook.routes.forge]
        app_id = 2
        private_key_file = "Cargo.toml"
        max_inline_comments = 0
        [[webhook.routes]]
        name = "ci"
        path = "/webhooks/ci"
        scheme = "hmac"
        signature_header = "x-sig"
        secret_env = "S"
        [webhook.routes.forge]
        [[webhook.routes]]
        name = "tok"
        path = "/webhooks/tok"
        scheme = "gitlab"
        secret_env = "S"
        [webhook.routes.forge]
        "#,
        &[("S", "a-long-enough-secret")],
    );
    let has = |key: &str, needle: &str| {
        assert!(
            found.iter().any(|(k, r)| k == key && r.contains(needle)),
            "no problem {key}: {needle} in {found:?}"
        );
    };
    has(
        "webhook.routes[0].forge.private_key_file",
        "needs its private key",
    );
    has(
        "webhook.routes[0].bot_login",
        "commands_from needs the bot's login",
    );
    has("webhook.routes[1].forge.app_id", "GitHub Apps are GitHub's");
    has("webhook.routes[1].forge.private_key_file", "not a PEM key");
    has("webhook.routes[1].forge.max_inline_comments", "1 to 100");
    has("webhook.routes[2].forge", "need scheme");
    has("webhook.routes[3].forge.token_env", "GITLAB_TOKEN");
    let ok = load_from_str(
        r#"
        [webhook]
        enabled = true
        [[webhook.routes]]
        name = "gh"
        path = "/webhooks/gh"
        scheme = "github"
        secret_env = "S"
        [webhook.routes.forge]
        app_id = 1
        private_key_file = "tests/data/github/app-test-key.pem"
        "#,
        &env(&[("S", "a-long-enough-secret"), ("OPENAI_API_KEY", "k")]),
    );
    assert!(ok.is_ok(), "{:?}", ok.err());
}
