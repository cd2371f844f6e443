//! No Debug output prints a secret: the structures built from the
//! configuration and an environment holding the secrets are formatted, and
//! the secrets' values must not appear. (The tools that hold keys are
//! checked beside their code: web.rs, vision.rs.)

use switchboard::agent::provider::ModelEndpoint;
use switchboard::config::{Config, Env, SearchProvider};
use switchboard::tools::ToolRuntime;

const SECRETS: &[(&str, &str)] = &[
    ("OPENAI_API_KEY", "sk-live-0penai-secret"),
    ("AUX_KEY", "sk-live-aux-secret"),
    ("VISION_KEY", "sk-live-vision-secret"),
    ("BRAVE_KEY", "brave-live-secret"),
    ("TELEGRAM_BOT_TOKEN", "123:telegram-live-secret"),
    ("DISCORD_BOT_TOKEN", "discord-live-secret"),
    ("SLACK_BOT_TOKEN", "xoxb-slack-live-secret"),
    ("GITHUB_TOKEN", "ghp_github_live_secret"),
];

fn leaks(what: &str, debug: &str) {
    for (name, value) in SECRETS {
        assert!(
            !debug.contains(value),
            "{what} prints the value of {name}: {debug}"
        );
    }
}

#[tokio::test]
async fn debug_output_never_holds_a_secret() {
    let env = Env::from_pairs(SECRETS.iter().copied());
    let mut config = Config::default();
    config.llm.auxiliary.api_key_env = Some("AUX_KEY".into());
    config.tools.vision.api_key_env = Some("VISION_KEY".into());
    config.tools.web_search.provider = SearchProvider::Brave;
    config.tools.web_search.api_key_env = "BRAVE_KEY".into();
    let main = ModelEndpoint::main(&config, &env);
    assert!(main.api_key.is_some(), "the key was read");
    leaks("the main model endpoint", &format!("{main:?}"));
    leaks(
        "the auxiliary model endpoint",
        &format!("{:?}", ModelEndpoint::auxiliary(&config, &env)),
    );
    leaks("the environment", &format!("{env:?}"));
    leaks("the configuration", &format!("{config:?}"));
    let tools =
        ToolRuntime::build(&config, &env, switchboard::adapters::platforms(&config)).unwrap();
    leaks("the tool runtime", &format!("{tools:?}"));
    let github = switchboard::adapters::webhook::deliver::GithubClient::new(
        "https://api.github.com",
        "ghp_github_live_secret",
    );
    leaks("the GitHub client", &format!("{github:?}"));
}

/// A forge API that answers with a redirect to another host does not get
/// the token carried there: the credentialed client follows no redirect.
#[tokio::test]
async fn forge_calls_follow_no_redirect_with_their_token() {
    use std::sync::{Arc, Mutex};
    let elsewhere_seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = elsewhere_seen.clone();
    let elsewhere = crate::common::serve(axum::Router::new().fallback(
        move |headers: axum::http::HeaderMap| {
            let seen = seen.clone();
            async move {
                seen.lock()
                    .unwrap()
                    .push(crate::common::authorization(&headers));
                "{\"id\": 1}"
            }
        },
    ))
    .await;
    let target = format!("http://{elsewhere}/stolen");
    let api = crate::common::serve(axum::Router::new().fallback(move || {
        let target = target.clone();
        async move { axum::response::Redirect::temporary(&target) }
    }))
    .await;
    let github = switchboard::adapters::webhook::deliver::GithubClient::new(
        &format!("http://{api}"),
        "ghp_github_live_secret",
    );
    let issue = switchboard::adapters::webhook::deliver::IssueRef {
        repo: "octo-org/hello-world".into(),
        number: 1,
    };
    let posted = github.create_comment(&issue, "hello").await;
    assert!(posted.is_err(), "a redirect is not a comment: {posted:?}");
    assert!(
        elsewhere_seen.lock().unwrap().is_empty(),
        "the redirect was followed"
    );
}
