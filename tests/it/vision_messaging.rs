//! vision_analyze against a fake OpenAI-compatible vision model, and
//! send_message through the port of a connected platform.

use crate::common;

use std::sync::{Arc, Mutex};

use crate::common::fake_port::FakePort;
use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use common::call;
use serde_json::{Value, json};
use switchboard::config::{ChatTarget, Config, Env};
use switchboard::tools::ToolRuntime;

type Seen = Arc<Mutex<Vec<(String, Value)>>>;

async fn fake_model(seen: Seen) -> String {
    let app = Router::new()
        .route(
            "/v1/chat/completions",
            post(
                |State(seen): State<Seen>, headers: HeaderMap, body: axum::Json<Value>| async move {
                    let auth = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_string();
                    seen.lock().unwrap().push((auth, body.0));
                    axum::Json(json!({
                        "id": "chatcmpl-1", "object": "chat.completion", "model": "vision-1",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": "A red square."}}]
                    }))
                },
            ),
        )
        .with_state(seen);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/v1")
}

#[tokio::test]
async fn vision_is_unavailable_until_a_model_is_configured() {
    let rt = ToolRuntime::build(
        &Config::default(),
        &Env::default(),
        switchboard::adapters::platforms(&Config::default()),
    )
    .unwrap();
    assert!(!rt.registry.availability("vision_analyze").is_available());
    let mut config = Config::default();
    config.tools.vision.model = "vision-1".into();
    let rt = ToolRuntime::build(
        &config,
        &Env::default(),
        switchboard::adapters::platforms(&config),
    )
    .unwrap();
    assert!(
        !rt.registry.availability("vision_analyze").is_available(),
        "API key missing"
    );
}

#[tokio::test]
async fn vision_sends_workspace_images_inline() {
    let seen = Seen::default();
    let base = fake_model(seen.clone()).await;
    let mut config = Config::default();
    config.tools.vision.model = "vision-1".into();
    config.tools.vision.base_url = Some(base);
    let rt = ToolRuntime::build(
        &config,
        &Env::from_pairs([("OPENAI_API_KEY", "sk-test")]),
        switchboard::adapters::platforms(&config),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    std::fs::write(ctx.workspace.join("shot.png"), [0x89, b'P', b'N', b'G']).unwrap();
    let out = call(
        &rt,
        "vision_analyze",
        json!({"image": "shot.png", "question": "What shape?"}),
        &ctx,
    )
    .await;
    assert_eq!(out["analysis"], "A red square.", "{out}");
    let url = call(
        &rt,
        "vision_analyze",
        json!({"image": "https://example.com/cat.jpg"}),
        &ctx,
    )
    .await;
    assert_eq!(url["analysis"], "A red square.");
    let escape = call(
        &rt,
        "vision_analyze",
        json!({"image": "../../etc/passwd"}),
        &ctx,
    )
    .await;
    assert!(escape["error"].as_str().unwrap().contains("outside"));
    // Over 20 MiB: refused by what is read, not by what the size said.
    std::fs::File::create(ctx.workspace.join("huge.png"))
        .unwrap()
        .set_len(21 << 20)
        .unwrap();
    let huge = call(&rt, "vision_analyze", json!({"image": "huge.png"}), &ctx).await;
    assert!(
        huge["error"].as_str().unwrap().contains("larger than"),
        "{huge}"
    );

    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    let (auth, body) = &requests[0];
    assert_eq!(auth, "Bearer sk-test");
    assert_eq!(body["model"], "vision-1");
    let parts = &body["messages"][0]["content"];
    assert_eq!(parts[0], json!({"type": "text", "text": "What shape?"}));
    assert_eq!(
        parts[1]["image_url"]["url"],
        "data:image/png;base64,iVBORw=="
    );
    assert_eq!(
        requests[1].1["messages"][0]["content"][1]["image_url"]["url"],
        "https://example.com/cat.jpg"
    );
}

#[tokio::test]
async fn send_message_reaches_connected_targets_only() {
    let mut config = Config::default();
    config.tools.send_message.targets.insert(
        "ops".into(),
        ChatTarget {
            platform: "slack".into(),
            chat: "C1".into(),
        },
    );
    config.tools.send_message.targets.insert(
        "family".into(),
        ChatTarget {
            platform: "telegram".into(),
            chat: "42".into(),
        },
    );
    let rt = ToolRuntime::build(
        &config,
        &Env::default(),
        switchboard::adapters::platforms(&config),
    )
    .unwrap();
    assert!(
        !rt.registry.availability("send_message").is_available(),
        "nothing connected yet"
    );

    let slack = Arc::new(FakePort::default());
    rt.platforms.attach("slack", slack.clone());
    rt.registry.invalidate_checks();
    assert!(rt.registry.availability("send_message").is_available());
    let schema = rt
        .toolsets
        .session_schemas(&["messaging".into()], &[])
        .unwrap();
    assert_eq!(
        schema[0]["function"]["parameters"]["properties"]["target"]["enum"],
        json!(["ops"])
    );

    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let ok = call(
        &rt,
        "send_message",
        json!({"target": "ops", "text": "deploy done"}),
        &ctx,
    )
    .await;
    assert_eq!(ok["message_id"], "s1", "{ok}");
    assert_eq!(
        *slack.sent.lock().unwrap(),
        [("C1".to_string(), "deploy done".to_string())]
    );
    let offline = call(
        &rt,
        "send_message",
        json!({"target": "family", "text": "hi"}),
        &ctx,
    )
    .await;
    assert!(
        offline["error"]
            .as_str()
            .unwrap()
            .contains("telegram is not connected")
    );
    let unknown = call(
        &rt,
        "send_message",
        json!({"target": "nobody", "text": "hi"}),
        &ctx,
    )
    .await;
    assert!(
        unknown["error"]
            .as_str()
            .unwrap()
            .contains("unknown target")
    );
}
