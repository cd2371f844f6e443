//! Cheap abuse: detection that cannot be stalled (brace bombs, expansion
//! bombs, any input up to 64 KiB judged in bounded time, failing closed);
//! a proxy in the environment does not carry `web_extract` past its guard.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::fake_llm::{FakeLlm, Reply, calls, text};

use proptest::prelude::*;
use switchboard::approvals::{Verdict, evaluate, evaluate_bounded};

/// The time limit for one judgement: 50 ms, the product's promise, in an
/// optimised build. The suite runs unoptimised, where the same work takes
/// several times longer (a 27 KB line of nested `$(…)`, `sh -c` and
/// braces: 66 ms of CPU unoptimised), so there the limit is four times it.
const LIMIT: Duration = Duration::from_millis(if cfg!(debug_assertions) { 200 } else { 50 });

/// The CPU time this thread spends in `judge`: the judgement's own cost,
/// which the other tests running beside it on two cores do not inflate
/// the way they do the wall clock.
fn cpu_time_of<T>(judge: impl FnOnce() -> T) -> (T, Duration) {
    use nix::sys::resource::{UsageWho, getrusage};
    let now = || {
        let usage = getrusage(UsageWho::RUSAGE_THREAD).unwrap();
        let tv = |t: nix::sys::time::TimeVal| {
            Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000)
        };
        tv(usage.user_time()) + tv(usage.system_time())
    };
    let before = now();
    let out = judge();
    (out, now() - before)
}

#[tokio::test]
async fn a_26_group_brace_bomb_is_judged_at_once_and_not_waved_through() {
    switchboard::approvals::detect::warm_up();
    let bomb = format!("echo {}", "{,}".repeat(26));
    let started = Instant::now();
    let evaluation = evaluate_bounded(&bomb, &[], &[]).await;
    let took = started.elapsed();
    assert!(took < LIMIT, "took {took:?}");
    assert_eq!(evaluation.verdict, Verdict::NeedsApproval);
    assert!(
        evaluation.detection.keys().contains(&"expansion_budget"),
        "{:?}",
        evaluation.detection.keys()
    );
}

#[test]
fn variables_that_double_are_stopped_too() {
    switchboard::approvals::detect::warm_up();
    let mut line = String::from("a=xxxxxxxxxxxxxxxx");
    let mut previous = 'a';
    for name in 'b'..='z' {
        line.push_str(&format!("; {name}=${previous}${previous}"));
        previous = name;
    }
    line.push_str("; echo $z");
    let (evaluation, took) = cpu_time_of(|| evaluate(&line, &[], &[]));
    assert!(took < LIMIT, "took {took:?}");
    assert_eq!(evaluation.verdict, Verdict::NeedsApproval);
}

#[test]
fn ordinary_brace_lists_still_expand_and_judge() {
    let evaluation = evaluate("{rm,-rf,build}", &[], &[]);
    assert!(
        evaluation.detection.keys().contains(&"recursive_delete"),
        "{:?}",
        evaluation.detection.keys()
    );
    assert!(!evaluation.detection.keys().contains(&"expansion_budget"));
}

/// Shell-ish text: the characters expansion and nesting are made of.
fn shellish(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "{", "}", ",", "$", "a", "=", ";", " ", "'", "\"", "`", "(", ")", "\\", "$(echo ",
            "{,}", "x=$x$x;", "sh -c '", "|", "&&", "\n", "rm -rf ", "${x:-", "<<<", "eval ",
        ]),
        0..max,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn any_input_up_to_64_kib_is_judged_in_bounded_time(
        text in shellish(12_000),
        pad in 0usize..4,
    ) {
        switchboard::approvals::detect::warm_up();
        let mut line = text;
        line.truncate(64 * 1024 - pad);
        while !line.is_char_boundary(line.len()) {
            line.pop();
        }
        let (_, took) = cpu_time_of(|| evaluate(&line, &[], &[]));
        prop_assert!(took < LIMIT, "{} bytes took {took:?}", line.len());
    }
}

/// A server that counts the requests it gets and answers with a page.
async fn counting(page: &'static str) -> (std::net::SocketAddr, Arc<Mutex<usize>>) {
    let hits = Arc::new(Mutex::new(0usize));
    let seen = hits.clone();
    let app = axum::Router::new().fallback(move || {
        let seen = seen.clone();
        async move {
            *seen.lock().unwrap() += 1;
            axum::response::Html(page)
        }
    });
    (common::serve(app).await, hits)
}

#[tokio::test]
async fn a_proxy_in_the_environment_is_not_used_by_web_extract() {
    let (site, site_hits) = counting("<html><body><p>the page itself</p></body></html>").await;
    let (proxy, proxy_hits) = counting("<html><body><p>through the proxy</p></body></html>").await;
    let url = format!("http://localhost:{}/page", site.port());
    let llm = FakeLlm::start(vec![
        Reply::Json(calls(&[(
            "c1",
            "web_extract",
            &serde_json::json!({ "url": url }).to_string(),
        )])),
        Reply::Json(text("done")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[storage]\nurl = \"sqlite://{0}/sb.db\"\n[agent]\nworkspace = \"{0}/ws\"\n[llm]\nbase_url = \"{1}\"\napi_key_env = \"\"\n[tools.web_extract]\nallow_hosts = [\"localhost\"]\n",
            dir.path().display(),
            llm.url
        ),
    )
    .unwrap();
    let proxy_url = format!("http://127.0.0.1:{}", proxy.port());
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_switchboard"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HTTP_PROXY", &proxy_url)
        .env("http_proxy", &proxy_url)
        .env("ALL_PROXY", &proxy_url)
        // The model is reached directly; only the page would go through it.
        .env("NO_PROXY", "127.0.0.1")
        .arg("--config")
        .arg(&config)
        .args(["chat", "--once", "read the page", "--user", "u"])
        .stdin(std::process::Stdio::null());
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
    let result = llm.requests()[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        *proxy_hits.lock().unwrap(),
        0,
        "the proxy was used: {result}"
    );
    assert_eq!(*site_hits.lock().unwrap(), 1, "{result}");
    assert!(result.contains("the page itself"), "{result}");
}
