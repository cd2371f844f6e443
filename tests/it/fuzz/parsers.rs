//! Targets that need no daemon: platform payloads as the adapters parse
//! them, webhook classification and templating per scheme, the Markdown
//! renderers and chunking, the shell normaliser and detector, chat
//! commands, configuration.

use super::{ci_cases, fuzz, github_fixture, mutated, nasty_text};
use crate::common::fake_discord;
use crate::common::fake_telegram::FakeTelegram;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;
use serde_json::{Value, json};
use switchboard::adapters::webhook::events;
use switchboard::config::{Env, SignatureScheme, WebhookRoute};
use switchboard::render::template;

/// Every target here, `cases` inputs each.
pub fn all(cases: u32) -> u64 {
    markdown(cases)
        + shell(cases)
        + commands(cases)
        + config(cases)
        + webhook(cases)
        + telegram(cases)
        + discord(cases)
}

fn markdown(cases: u32) -> u64 {
    let text = prop_oneof![nasty_text(), switchboard_markdownish()];
    fuzz(
        "markdown",
        cases,
        (text, 1000usize..5000),
        |(text, limit)| {
            use switchboard::adapters::{discord, slack, telegram};
            use switchboard::render::chunk;
            for (body, entities) in telegram::format::chunks(&text, limit) {
                prop_assert!(chunk::utf16(&body) <= limit);
                prop_assert!(
                    entities
                        .iter()
                        .all(|e| e.offset + e.length <= chunk::utf16(&body))
                );
            }
            for piece in discord::format::chunks(&text, limit) {
                prop_assert!(
                    chunk::chars(&piece) <= limit,
                    "{} > {limit}",
                    chunk::chars(&piece)
                );
            }
            for piece in slack::format::pieces(&text, limit) {
                prop_assert!(
                    chunk::chars(&piece) <= limit,
                    "{} > {limit}",
                    chunk::chars(&piece)
                );
            }
            discord::format::render(&text);
            slack::format::mrkdwn(&text);
            switchboard::render::clip(&text, limit);
            Ok(())
        },
    )
}

/// Markdown as models write it, hostile in its details.
fn switchboard_markdownish() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            nasty_text(),
            Just("\n```rust\nfn x() {}\n".to_string()),
            Just("\n| a | b |\n|---|---|\n| 1 | 2 |\n".to_string()),
            Just("\n> quoted **bold `code`**\n".to_string()),
            Just("\n- [ ] task\n  - nested _it_\n".to_string()),
            Just("<details><summary>x</summary>".to_string()),
            Just("![img](http://x/y.png)".to_string()),
            Just("[^1]: note".to_string()),
        ],
        0..12,
    )
    .prop_map(|v| v.concat())
}

fn shell(cases: u32) -> u64 {
    let command = prop_oneof![
        nasty_text(),
        "[a-z $|;&<>(){}'\"`\\\\=*?~#!-]{0,120}",
        prop::collection::vec(
            prop::sample::select(vec![
                "rm", "-rf", "/", "sudo", "bash", "-c", "'", "\"", "$(", ")", "`", "${", "}",
                "<<EOF", "EOF", "|", "&&", ";", "\\\n", "eval", "find", "-exec", "{}", "\\;",
                "xargs", "env", "-S", "=", "a=b", "$a", "<(", ">", "2>&1", "#", "\n", "\u{0}",
            ]),
            0..40,
        )
        .prop_map(|w| w.join(" ")),
    ];
    fuzz("shell", cases, command, |command| {
        use switchboard::approvals::{detect, shell};
        shell::clean(&command);
        shell::normalize(&command);
        detect::detect(&command);
        Ok(())
    })
}

fn commands(cases: u32) -> u64 {
    let text = prop_oneof![
        nasty_text(),
        (
            prop::sample::select(vec![
                "/approve",
                "/deny",
                "/new",
                "/model",
                "/status",
                "!approve",
                "/approve@bot",
                "/help",
                "/stop",
            ]),
            nasty_text()
        )
            .prop_map(|(c, rest)| format!("{c} {rest}")),
    ];
    fuzz("chat commands", cases, text, |text| {
        switchboard::platform::ChatCommand::parse(&text);
        Ok(())
    })
}

fn config(cases: u32) -> u64 {
    let shipped = std::fs::read_to_string("gateway.toml").unwrap();
    let lines: Vec<String> = shipped.lines().map(str::to_string).collect();
    let value = prop_oneof![
        nasty_text().prop_map(|t| format!("{t:?}")),
        nasty_text(),
        any::<i64>().prop_map(|n| n.to_string()),
        Just("18446744073709551616".to_string()),
        Just("-1".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
        Just("nan".to_string()),
        Just("\"0.0.0.0:99999\"".to_string()),
    ];
    let edit = (any::<usize>(), 0u8..4, value);
    let toml = prop_oneof![
        3 => prop::collection::vec(edit, 0..6).prop_map(move |edits| {
            let mut lines = lines.clone();
            for (at, kind, value) in edits {
                let i = at % lines.len();
                match kind {
                    0 => {
                        if let Some((key, _)) = lines[i].split_once('=') {
                            lines[i] = format!("{key}= {value}");
                        }
                    }
                    1 => {
                        lines.remove(i);
                    }
                    2 => {
                        let copy = lines[i].clone();
                        lines.insert(i, copy);
                    }
                    _ => lines.insert(i, value),
                }
                if lines.is_empty() {
                    lines.push(String::new());
                }
            }
            lines.join("\n")
        }),
        1 => nasty_text(),
    ];
    fuzz("config", cases, toml, |toml| {
        let _ = switchboard::config::load_from_str(&toml, &Env::default());
        Ok(())
    })
}

fn route(scheme: &str) -> WebhookRoute {
    serde_json::from_value(json!({
        "name": "fuzz", "path": "/hooks/fuzz", "scheme": scheme, "secret_env": "S",
        "events": ["pull_request", "issue_comment", "check_run", "workflow_run", "push",
                   "Merge Request Hook", "Pipeline Hook"],
        "when": {"action": ["opened", "created", "completed"]},
        "bot_login": "switchboard[bot]",
    }))
    .unwrap()
}

fn webhook_samples() -> Vec<Value> {
    let mut samples: Vec<Value> = [
        "pull_request.opened",
        "issue_comment.created",
        "check_run.completed",
        "workflow_run.completed",
    ]
    .iter()
    .map(|name| github_fixture(name))
    .collect();
    samples.push(json!({
        "object_kind": "merge_request", "event_type": "merge_request",
        "user": {"username": "ann", "name": "Ann"},
        "project": {"id": 7, "path_with_namespace": "team/app", "web_url": "https://gitlab.example.com/team/app"},
        "object_attributes": {"iid": 3, "title": "Fix", "description": "body", "action": "open",
                              "state": "opened", "url": "https://gitlab.example.com/team/app/-/merge_requests/3",
                              "source_branch": "fix", "target_branch": "main"},
    }));
    samples
}

fn webhook(cases: u32) -> u64 {
    let samples = webhook_samples();
    let header_names = [
        "x-github-event",
        "x-github-delivery",
        "x-gitlab-event",
        "x-gitlab-event-uuid",
        "webhook-id",
        "idempotency-key",
        "content-type",
    ];
    let scheme = prop::sample::select(vec![
        ("github", SignatureScheme::Github),
        ("gitlab", SignatureScheme::Gitlab),
        ("hmac", SignatureScheme::Hmac),
        ("standard-webhooks", SignatureScheme::StandardWebhooks),
    ]);
    let headers = prop::collection::vec(
        (prop::sample::select(header_names.to_vec()), nasty_text()),
        0..5,
    );
    let payload = (0..samples.len()).prop_flat_map(move |i| mutated(samples[i].clone()));
    let template = prop_oneof![
        nasty_text(),
        Just("Review {pull_request.title} by {sender.login}: {pull_request.body}".to_string()),
        "[{}a-z._ ]{0,80}",
    ];
    fuzz(
        "webhook events and templates",
        cases,
        (scheme, headers, payload, template),
        |((name, scheme), headers, payload, template)| {
            let mut map = HeaderMap::new();
            for (k, v) in headers {
                if let Ok(value) = HeaderValue::from_str(&v) {
                    map.append(HeaderName::from_static(k), value);
                }
            }
            let route = route(name);
            let body = serde_json::to_vec(&payload).unwrap();
            let event = events::event_name(scheme, &map, &payload);
            let delivery = events::delivery_id(scheme, &map, &body);
            events::classify(&route, None, &event, &delivery, &payload);
            events::entity(scheme, &event, &delivery, &payload);
            events::prompt(&route, &event, &payload);
            let mut renderer = template::Renderer::new();
            let rendered = renderer.render(&template, &payload);
            // Whatever a field holds, it cannot close its own fence.
            let fences = rendered.matches("<untrusted-data id=").count();
            prop_assert_eq!(fences, rendered.matches("</untrusted-data id=").count());
            Ok(())
        },
    )
}

fn telegram(cases: u32) -> u64 {
    use switchboard::adapters::telegram::inbound::{BotIdentity, message_event};
    use teloxide_core::types::{Update, UpdateKind, UserId};
    let mut text = FakeTelegram::message(-10_042, 7, "Ann", 11, "@switchboard_bot hi");
    text["message"]["entities"] = json!([{"type": "mention", "offset": 0, "length": 16}]);
    text["message"]["reply_to_message"] = json!({
        "message_id": 10, "date": 1_764_000_000, "chat": text["message"]["chat"],
        "from": {"id": 99, "is_bot": true, "first_name": "bot", "username": "switchboard_bot"},
        "text": "earlier"});
    text["message"]["message_thread_id"] = json!(5);
    let mut photo = FakeTelegram::message(42, 7, "Ann", 12, "");
    photo["message"].as_object_mut().unwrap().remove("text");
    photo["message"]["caption"] = json!("look");
    photo["message"]["photo"] = json!([{"file_id": "f", "file_unique_id": "u", "width": 90, "height": 90, "file_size": 1000}]);
    let press = FakeTelegram::press(7, "Ann", &text["message"], "approve:ab12cd34:once");
    let samples = [text, photo, press];
    let update = (0..samples.len()).prop_flat_map(move |i| {
        let mut sample = samples[i].clone();
        sample["update_id"] = json!(1000 + i);
        mutated(sample)
    });
    let me = BotIdentity {
        id: UserId(99),
        username: "switchboard_bot".into(),
    };
    fuzz("telegram updates", cases, update, |update| {
        let Ok(update) = serde_json::from_value::<Update>(update) else {
            return Ok(());
        };
        if let UpdateKind::Message(msg) = &update.kind {
            message_event(update.id.0, msg, &me);
        }
        Ok(())
    })
}

fn discord(cases: u32) -> u64 {
    use serenity::model::application::Interaction;
    use serenity::model::channel::Message;
    use serenity::model::id::{ChannelId, UserId};
    use switchboard::adapters::discord::inbound::{Place, message_event};
    use switchboard::adapters::discord::interactions::command_text;
    let author = fake_discord::user("501", "ann", false);
    let mut message = fake_discord::message(
        "900",
        "800",
        author.clone(),
        &format!("<@{}> hi", fake_discord::BOT_ID),
        true,
    );
    message["attachments"] = json!([{"id": "1", "filename": "a.png", "size": 10,
        "url": "https://cdn.example.com/a.png", "proxy_url": "https://cdn.example.com/a.png",
        "content_type": "image/png"}]);
    let command = fake_discord::command(
        "950",
        author.clone(),
        "800",
        "ask",
        json!([{"name": "prompt", "type": 3, "value": "hello"}]),
    );
    let press = fake_discord::press("960", author, &[], &message, "approve:ab12cd34:once");
    let samples = [message.clone(), command, press];
    let doc = (0..samples.len()).prop_flat_map(move |i| mutated(samples[i].clone()));
    let config = switchboard::config::DiscordConfig::default();
    let me = UserId::new(fake_discord::BOT_ID.parse().unwrap());
    fuzz("discord messages and interactions", cases, doc, |doc| {
        if hash_shaped_but_not_ascii(&doc) {
            // serenity 0.12's ImageHash parser panics on these (a slice at
            // byte 2 of a 32- or 34-byte hash); the gateway survives it
            // (discord::a_gateway_event_serenity_panics_on_does_not_silence_the_bot).
            return Ok(());
        }
        if let Ok(msg) = serde_json::from_value::<Message>(doc.clone()) {
            message_event(&msg, me, Place::channel(ChannelId::new(800)), &config);
        }
        if let Ok(Interaction::Command(cmd)) = serde_json::from_value::<Interaction>(doc) {
            command_text(&cmd);
        }
        Ok(())
    })
}

/// Whether any string in `doc` has the length of an image hash (32 or 34
/// bytes) without being ASCII.
fn hash_shaped_but_not_ascii(doc: &Value) -> bool {
    match doc {
        Value::String(s) => matches!(s.len(), 32 | 34) && !s.is_ascii(),
        Value::Array(a) => a.iter().any(hash_shaped_but_not_ascii),
        Value::Object(m) => m.values().any(hash_shaped_but_not_ascii),
        _ => false,
    }
}

#[test]
fn markdown_renderers_and_chunking() {
    markdown(ci_cases());
}

#[test]
fn shell_normaliser_and_detector() {
    shell(ci_cases());
}

#[test]
fn chat_commands() {
    commands(ci_cases());
}

#[test]
fn configuration_loading() {
    config(ci_cases());
}

#[test]
fn webhook_classification_and_templates_per_scheme() {
    webhook(ci_cases());
}

#[test]
fn telegram_updates_and_callbacks() {
    telegram(ci_cases());
}

#[test]
fn discord_messages_and_interactions() {
    discord(ci_cases());
}
