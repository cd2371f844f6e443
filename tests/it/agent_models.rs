//! Which model answers: fallbacks when the main endpoint keeps failing,
//! models configured per platform, chat and user, and `/model` in a chat.

use crate::common;
use crate::sessions_manager::{dm, setup_with};

use common::agent_harness::harness_with;
use common::fake_llm::{FakeLlm, Reply, calls, text};
use switchboard::config::LlmEndpointConfig;
use tokio_util::sync::CancellationToken;

fn unavailable() -> Reply {
    Reply::Status(503, vec![], r#"{"error":{"message":"overloaded"}}"#.into())
}

/// A conversation on `main` with `fallback` as its one fallback model.
async fn with_fallback(main: &FakeLlm, fallback: &FakeLlm) -> common::agent_harness::Harness {
    with_fallback_and(main, fallback, |_| {}).await
}

/// [`with_fallback`], with `more` of the configuration.
async fn with_fallback_and(
    main: &FakeLlm,
    fallback: &FakeLlm,
    more: impl Fn(&mut switchboard::config::Config) + Send + 'static,
) -> common::agent_harness::Harness {
    let url = fallback.url.clone();
    harness_with(
        main,
        move |c| {
            c.llm.max_retries = 1;
            c.llm.fallback = vec![LlmEndpointConfig {
                base_url: Some(url.clone()),
                model: Some("backup-model".into()),
                ..Default::default()
            }];
            more(c);
        },
        &[],
    )
    .await
}

#[tokio::test]
async fn a_failing_main_model_hands_over_to_the_fallback() {
    let main = FakeLlm::start(vec![unavailable(), unavailable()]).await;
    let fallback = FakeLlm::start(vec![Reply::Json(text("from the fallback"))]).await;
    let mut h = with_fallback(&main, &fallback).await;
    let out = h
        .conversation
        .run_turn("hello", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.reply, "from the fallback");
    assert_eq!(main.requests().len(), 2, "the main model was retried first");
    assert_eq!(fallback.requests()[0]["model"], "backup-model");
}

#[tokio::test]
async fn a_call_the_fallback_answered_costs_the_fallbacks_price() {
    let main = FakeLlm::start(vec![unavailable(), unavailable()]).await;
    let fallback = FakeLlm::start(vec![Reply::Json(text("from the fallback"))]).await;
    let mut h = with_fallback_and(&main, &fallback, |c| {
        let price = |output| switchboard::config::Price {
            output,
            ..Default::default()
        };
        c.budgets.prices.insert(c.llm.model.clone(), price(1.0));
        c.budgets
            .prices
            .insert("backup-model".into(), price(1000.0));
    })
    .await;
    h.conversation
        .run_turn("hello", &CancellationToken::new())
        .await
        .unwrap();
    let session = h.conversation.session().id.clone();
    let record = h.store.turns(&session).await.unwrap().pop().unwrap();
    // Five output tokens at the fallback's 1000 per million, not the
    // main model's 1.
    assert_eq!(record.cost_micros, 5000);
}

/// Input the provider read from its prompt cache is counted apart and
/// priced at the cache's price: OpenAI's `prompt_tokens_details`, over two
/// calls of one turn.
#[tokio::test]
async fn cached_prompt_tokens_are_counted_and_priced_apart() {
    let cached = |read: u64| {
        let mut answer = text("done");
        answer["usage"] = serde_json::json!({
            "prompt_tokens": 1000, "completion_tokens": 10, "total_tokens": 1010,
            "prompt_tokens_details": {"cached_tokens": read}
        });
        answer
    };
    let mut first = calls(&[("c1", "todo", r#"{"todos": []}"#)]);
    first["usage"] = cached(0)["usage"].clone();
    let llm = FakeLlm::start(vec![Reply::Json(first), Reply::Json(cached(800))]).await;
    let mut h = harness_with(
        &llm,
        |c| {
            c.budgets.prices.insert(
                c.llm.model.clone(),
                switchboard::config::Price {
                    input: 10.0,
                    output: 0.0,
                    cache_read: Some(1.0),
                    cache_write: None,
                },
            );
        },
        &[],
    )
    .await;
    h.conversation
        .run_turn("hello", &CancellationToken::new())
        .await
        .unwrap();
    let session = h.conversation.session().id.clone();
    let record = h.store.turns(&session).await.unwrap().pop().unwrap();
    assert_eq!(
        (record.prompt_tokens, record.cache_read_tokens),
        (2000, 800)
    );
    // 1200 uncached at 10 per million, 800 cached at 1.
    assert_eq!(record.cost_micros, 12_800);
}

#[tokio::test]
async fn once_the_fallback_answered_the_rest_of_the_turn_stays_on_it() {
    let main = FakeLlm::start(vec![
        unavailable(),
        unavailable(),
        Reply::Json(text("the main model is back")),
    ])
    .await;
    let fallback = FakeLlm::start(vec![
        Reply::Json(calls(&[(
            "c1",
            "todo",
            r#"{"todos":[{"id":"1","content":"look","status":"pending"}]}"#,
        )])),
        Reply::Json(calls(&[(
            "c2",
            "todo",
            r#"{"todos":[{"id":"1","content":"look","status":"completed"}]}"#,
        )])),
        Reply::Json(text("done on the fallback")),
    ])
    .await;
    let mut h = with_fallback(&main, &fallback).await;
    let out = h
        .conversation
        .run_turn("hello", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.reply, "done on the fallback");
    assert_eq!(
        main.requests().len(),
        2,
        "the main model's retries were waited through once, not at every step"
    );
    assert_eq!(fallback.requests().len(), 3);
    // The next turn starts on the main model again.
    let next = h
        .conversation
        .run_turn("again", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(next.reply, "the main model is back");
    assert_eq!(main.requests().len(), 3);
}

#[tokio::test]
async fn a_request_the_model_refuses_is_not_sent_to_the_fallback() {
    let main = FakeLlm::start(vec![Reply::Status(
        401,
        vec![],
        r#"{"error":{"message":"Incorrect API key provided"}}"#.into(),
    )])
    .await;
    let fallback = FakeLlm::start(vec![Reply::Json(text("should not answer"))]).await;
    let mut h = with_fallback(&main, &fallback).await;
    let out = h
        .conversation
        .run_turn("hello", &CancellationToken::new())
        .await;
    assert!(out.is_err());
    assert!(fallback.requests().is_empty());
}

#[tokio::test]
async fn models_configured_per_platform_chat_and_user_apply_in_that_order() {
    let llm = FakeLlm::start(vec![
        Reply::Json(text("a")),
        Reply::Json(text("b")),
        Reply::Json(text("c")),
    ])
    .await;
    for (edit, expected) in [
        (
            Box::new(|c: &mut switchboard::config::Config| {
                c.llm
                    .model_by_platform
                    .insert("cli".into(), "platform-model".into());
            }) as Box<dyn FnOnce(&mut switchboard::config::Config)>,
            "platform-model",
        ),
        (
            Box::new(|c: &mut switchboard::config::Config| {
                c.llm
                    .model_by_platform
                    .insert("cli".into(), "platform-model".into());
                c.llm
                    .model_by_chat
                    .insert("cli:tester".into(), "chat-model".into());
            }),
            "chat-model",
        ),
        (
            Box::new(|c: &mut switchboard::config::Config| {
                c.llm
                    .model_by_chat
                    .insert("cli:tester".into(), "chat-model".into());
                c.llm
                    .model_by_user
                    .insert("cli:tester".into(), "user-model".into());
            }),
            "user-model",
        ),
    ] {
        let before = llm.requests().len();
        let mut h = harness_with(&llm, edit, &[]).await;
        h.conversation
            .run_turn("hi", &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(llm.requests()[before]["model"], expected);
    }
}

#[tokio::test]
async fn model_in_a_chat_shows_switches_and_goes_back() {
    let llm = FakeLlm::start(vec![
        Reply::Json(text("one")),
        Reply::Json(text("two")),
        Reply::Json(text("three")),
    ])
    .await;
    let s = setup_with(
        &llm,
        |c| {
            c.llm.model = "gpt-4.1-mini".into();
            c.llm.models = vec!["gpt-4.1-mini".into(), "gpt-4.1".into()];
        },
        |_| {},
    )
    .await;
    let say = async |id: &str, text: &str, n: usize| {
        s.manager.submit(dm("1", id, text)).await.unwrap();
        s.adapter.wait(n).await[n - 1].1.clone()
    };
    let shown = say("m1", "/model", 1).await;
    assert!(
        shown.contains("uses gpt-4.1-mini") && shown.contains("Available: gpt-4.1-mini, gpt-4.1"),
        "{shown}"
    );
    assert_eq!(say("m2", "hello", 2).await, "one");
    assert_eq!(llm.requests()[0]["model"], "gpt-4.1-mini");

    let switched = say("m3", "/model gpt-4.1", 3).await;
    assert!(switched.contains("now uses gpt-4.1"), "{switched}");
    assert_eq!(say("m4", "hello again", 4).await, "two");
    assert_eq!(
        llm.requests()[1]["model"],
        "gpt-4.1",
        "the loaded conversation switched"
    );

    let refused = say("m5", "/model o9-ultra", 5).await;
    assert!(
        refused.contains("not one of the available models"),
        "{refused}"
    );
    let back = say("m6", "/model default", 6).await;
    assert!(back.contains("now uses gpt-4.1-mini"), "{back}");
    assert_eq!(say("m7", "and now", 7).await, "three");
    assert_eq!(llm.requests()[2]["model"], "gpt-4.1-mini");
    let session = s
        .store
        .open_session_by_key("telegram:dm:1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(session.model, None, "the choice is kept with the session");
}

/// The system prompt of the first request `llm` got.
fn system_of(llm: &FakeLlm) -> String {
    let request = &llm.requests()[0];
    request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn model_families_that_narrate_are_told_to_act_with_their_tools() {
    let cases: [(&str, &[&str], bool); 4] = [
        ("gpt-4.1-mini", &["gpt", "codex", "gemini"], true),
        ("Gemini-2.5-Pro", &["gpt", "codex", "gemini"], true),
        ("claude-sonnet-4", &["gpt", "codex", "gemini"], false),
        ("gpt-4.1-mini", &[], false),
    ];
    for (model, families, told) in cases {
        let llm = FakeLlm::start(vec![Reply::Json(text("ok"))]).await;
        let mut h = harness_with(
            &llm,
            |c| {
                c.llm.model = model.into();
                c.agent.tool_use_guidance = families.iter().map(|f| f.to_string()).collect();
            },
            &[],
        )
        .await;
        h.conversation
            .run_turn("run the tests", &CancellationToken::new())
            .await
            .unwrap();
        let system = system_of(&llm);
        assert_eq!(
            system.contains(switchboard::agent::TOOL_USE_GUIDANCE),
            told,
            "{model} with {families:?}: {system}"
        );
    }
}
