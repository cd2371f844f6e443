//! The operator console (#24) in a real browser (headless Chromium from
//! Debian's packages through chromedriver) and over plain HTTP: logging
//! in, a pending approval made by a fake chat approved from the page (the
//! chat's prompt is edited and the turn finishes), every page rendered
//! without console errors and screenshotted; wrong tokens, missing CSRF
//! tokens and strangers refused; the console never on the webhook port.
//! Screenshots go to the test's temp dir, and are copied to the directory
//! in `SWITCHBOARD_SCREENSHOTS` when it is set.

use crate::common;

use std::path::Path;

use common::browser::Browser;
use common::fake_llm::{FakeLlm, Reply, calls, text};
use common::fake_telegram::FakeTelegram;
use common::in_process::{InProcess, telegram_config};
use switchboard::config::Env;

const ANN: i64 = 1001;
const TOKEN: &str = "console-token-4f9a1c";

async fn start(tg: &FakeTelegram, llm: &FakeLlm, dir: &Path) -> (InProcess, String) {
    let mut config = telegram_config(dir, tg, &llm.url, None, ANN);
    config.console.enabled = true;
    config.console.listen = "127.0.0.1:0".parse().unwrap();
    let daemon = InProcess::start(
        config,
        Env::from_pairs([
            ("TELEGRAM_BOT_TOKEN", "123:test-token"),
            ("SWITCHBOARD_CONSOLE_TOKEN", TOKEN),
        ]),
    )
    .await;
    common::ready(&daemon.gateway, "telegram").await;
    let console = format!(
        "http://{}",
        daemon.gateway.console.expect("the console listens")
    );
    (daemon, console)
}

fn keep(shot: &Path) {
    if let Some(dir) = std::env::var_os("SWITCHBOARD_SCREENSHOTS") {
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::copy(shot, Path::new(&dir).join(shot.file_name().unwrap()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_approves_a_waiting_command_in_the_browser_and_the_turn_finishes() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[(
            "c1",
            "terminal",
            r#"{"command":"git reset --hard"}"#,
        )])),
        Reply::Json(text("Reset done.")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (daemon, console) = start(&tg, &llm, dir.path()).await;
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "reset it"));
    let prompt = tg.wait("sendMessage", 1).await.remove(0);
    assert!(
        prompt.body["text"]
            .as_str()
            .unwrap()
            .contains("git reset --hard")
    );
    let shot = |name: &str| dir.path().join(format!("{name}.png"));

    browser.goto(&format!("{console}/approvals")).await;
    assert!(
        browser.url().await.ends_with("/login"),
        "not logged in: the login page"
    );
    browser.screenshot(&shot("login")).await;
    let field = browser.find("input[name=token]").await;
    browser.type_into(&field, "not-the-token").await;
    browser
        .click(&browser.find("button[type=submit]").await)
        .await;
    browser.source_with("That token is not the console").await;
    let field = browser.find("input[name=token]").await;
    browser.type_into(&field, TOKEN).await;
    browser
        .click(&browser.find("button[type=submit]").await)
        .await;
    let overview = browser.source_with("approvals waiting").await;
    assert!(
        browser.url().await.ends_with('/'),
        "logged in: the overview"
    );
    assert!(
        overview.contains("Health")
            && overview.contains("telegram")
            && overview.contains("approvals waiting"),
        "{overview}"
    );
    assert!(overview.contains("<svg"), "charts drawn");
    browser.screenshot(&shot("overview")).await;

    browser.goto(&format!("{console}/approvals")).await;
    let page = browser.source_with("hash chain").await;
    assert!(
        page.contains("git reset --hard") && page.contains("hash chain intact"),
        "{page}"
    );
    assert!(
        page.contains("git_reset_hard") || page.contains("reset"),
        "the explain output: {page}"
    );
    browser.screenshot(&shot("approvals")).await;
    browser
        .click(&browser.find("button[value=once]").await)
        .await;
    browser.source_with("decided: ").await;
    let edits = tg.wait("editMessageText", 1).await;
    let edited = edits[0].body["text"].as_str().unwrap();
    assert!(edited.contains("Allowed once by console"), "{edited}");
    common::eventually("the turn finishes", || async {
        tg.texts().iter().any(|t| t == "Reset done.")
    })
    .await;

    browser.goto(&format!("{console}/sessions")).await;
    browser.screenshot(&shot("sessions")).await;
    browser
        .click(&browser.find("a[href^='/sessions/']").await)
        .await;
    let transcript = browser.source_with("Reset done.").await;
    assert!(
        transcript.contains("Reset done.") && transcript.contains("<details>"),
        "tool calls folded: {transcript}"
    );
    browser.screenshot(&shot("transcript")).await;
    browser.goto(&format!("{console}/sessions?q=reset")).await;
    assert!(browser.source().await.contains("Messages with"));
    browser.goto(&format!("{console}/deliveries")).await;
    let deliveries = browser.source().await;
    assert!(
        deliveries.contains("Reset done.") && deliveries.contains("sent"),
        "{deliveries}"
    );
    browser.screenshot(&shot("deliveries")).await;
    browser.goto(&format!("{console}/")).await;
    let after = browser.source_with("Turns per minute — most 1").await;
    assert!(after.contains("<rect"), "the turn is drawn");
    browser.screenshot(&shot("overview-after")).await;
    browser.goto(&format!("{console}/jobs")).await;
    assert!(browser.source().await.contains("Spend today"));
    browser.screenshot(&shot("jobs")).await;

    let errors: Vec<_> = browser
        .console()
        .await
        .into_iter()
        .filter(|(level, _)| level == "SEVERE" || level == "WARNING")
        .collect();
    assert!(errors.is_empty(), "the browser console: {errors:?}");
    for name in [
        "overview-after",
        "login",
        "overview",
        "approvals",
        "sessions",
        "transcript",
        "deliveries",
        "jobs",
    ] {
        let png = std::fs::read(shot(name)).unwrap();
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 5_000,
            "{name}.png"
        );
        keep(&shot(name));
    }
    let audits = daemon.store.console_audits(20).await.unwrap();
    let actions: Vec<(&str, &str)> = audits
        .iter()
        .rev()
        .map(|a| (a.action.as_str(), a.outcome.as_str()))
        .collect();
    assert_eq!(actions[0], ("login", "refused: wrong token"));
    assert_eq!(actions[1], ("login", "ok"));
    assert!(
        actions[2].0 == "decide" && actions[2].1.starts_with("decided"),
        "{actions:?}"
    );
    assert!(audits.iter().all(|a| a.actor == "console"));
    browser.close().await;
    daemon.shutdown().await;
}

/// A form body of `pairs`.
fn form(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// Posts form `pairs` to `url` with the login cookie `session`.
async fn post(
    http: &reqwest::Client,
    url: String,
    session: &str,
    pairs: &[(&str, &str)],
) -> reqwest::Response {
    http.post(url)
        .header("cookie", session)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(pairs))
        .send()
        .await
        .unwrap()
}

fn no_redirects() -> reqwest::Client {
    switchboard::http::client::install_crypto();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_missing_csrf_and_strangers_are_refused() {
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let (daemon, console) = start(&tg, &llm, dir.path()).await;
    let http = no_redirects();
    let login = |token: &'static str| {
        http.post(format!("{console}/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[("token", token)]))
            .send()
    };
    let refused = login("nope").await.unwrap();
    assert_eq!(refused.status(), 303);
    assert_eq!(refused.headers()["location"], "/login?refused=token");
    assert!(refused.headers().get("set-cookie").is_none());
    let page = http.get(format!("{console}/")).send().await.unwrap();
    assert_eq!(page.status(), 303);
    assert_eq!(page.headers()["location"], "/login");
    let stranger = http
        .post(format!("{console}/outbox/1/retry"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[("csrf", "x")]))
        .send()
        .await
        .unwrap();
    assert_eq!(stranger.status(), 403, "no login, no action");

    let ok = login(TOKEN).await.unwrap();
    assert_eq!(ok.status(), 303);
    let cookie = ok.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Strict")
            && !cookie.contains("Secure"),
        "{cookie}"
    );
    let session = cookie.split(';').next().unwrap().to_string();
    let html = http
        .get(format!("{console}/deliveries"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    let csp = html.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    let html = html.text().await.unwrap();
    let csrf = html
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("forms carry the CSRF token")
        .to_string();
    for pairs in [vec![], vec![("csrf", "0123")]] {
        let refused = post(&http, format!("{console}/outbox/1/retry"), &session, &pairs).await;
        assert_eq!(refused.status(), 403);
        assert!(refused.text().await.unwrap().contains("CSRF"));
    }
    let done = post(
        &http,
        format!("{console}/outbox/1/retry"),
        &session,
        &[("csrf", csrf.as_str())],
    )
    .await;
    assert_eq!(done.status(), 303);
    assert!(
        done.headers()["location"]
            .to_str()
            .unwrap()
            .contains("not+retried"),
        "nothing to retry"
    );
    let logout = post(
        &http,
        format!("{console}/logout"),
        &session,
        &[("csrf", csrf.as_str())],
    )
    .await;
    assert_eq!(logout.status(), 303);
    let after = http
        .get(format!("{console}/"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), 303, "logged out");
    // Never on the webhook listener.
    let webhook_port = http
        .get(format!("{}/approvals", daemon.base))
        .send()
        .await
        .unwrap();
    assert_eq!(webhook_port.status(), 404);
    let audits = daemon.store.console_audits(20).await.unwrap();
    let refusals = audits
        .iter()
        .filter(|a| a.outcome.starts_with("refused"))
        .count();
    assert_eq!(refusals, 3, "{audits:?}");
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_given_up_message_is_sent_again_from_the_console() {
    let tg = FakeTelegram::start().await;
    let llm = FakeLlm::start(vec![Reply::Json(text("the answer"))]).await;
    let dir = tempfile::tempdir().unwrap();
    let (daemon, console) = start(&tg, &llm, dir.path()).await;
    let store = daemon.store.clone();
    tg.kick(ANN);
    tg.push(FakeTelegram::message(ANN, ANN, "Ann", 10, "hello"));
    let row = common::until("the answer is given up", || async {
        let rows = store.outbox(10).await.unwrap();
        rows.into_iter().find(|r| r.status == "failed")
    })
    .await;
    tg.readmit(ANN);
    let http = no_redirects();
    let ok = http
        .post(format!("{console}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[("token", TOKEN)]))
        .send()
        .await
        .unwrap();
    let session = ok.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let page = http
        .get(format!("{console}/deliveries"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("gave up") && page.contains("Retry"), "{page}");
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_string();
    let retried = post(
        &http,
        format!("{console}/outbox/{}/retry", row.id),
        &session,
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(retried.status(), 303);
    assert!(
        retried.headers()["location"]
            .to_str()
            .unwrap()
            .contains("sending+it+again")
    );
    common::eventually("sent this time", || async {
        tg.shown(ANN)
            .iter()
            .filter(|(_, t)| t == "the answer")
            .count()
            == 1
            && store.outbox_row(row.id).await.unwrap().unwrap().status == "sent"
    })
    .await;
    assert_eq!(llm.requests().len(), 1, "the model is not asked again");
    let audits = store.console_audits(5).await.unwrap();
    assert_eq!(
        (audits[0].action.as_str(), audits[0].outcome.as_str()),
        ("retry", "sending it again")
    );
    daemon.shutdown().await;
}
