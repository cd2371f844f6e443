//! The console's actions: deciding an approval (through the broker, as a
//! chat's button would: the prompt in the chat is closed and the waiting
//! turn goes on) and sending a given-up message again. Each checks the
//! login's CSRF token and is audited.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};

use super::auth::{Operator, audit, refused_csrf};
use super::{Console, operator};
use crate::approvals::Choice;

/// An approval decision's form.
#[derive(serde::Deserialize)]
pub(super) struct DecideForm {
    #[serde(default)]
    csrf: String,
    choice: String,
    #[serde(default)]
    reason: String,
}

/// `POST /approvals/{id}`.
pub(super) async fn decide(
    State(console): State<Console>,
    operator_login: Operator,
    Path(id): Path<String>,
    axum::Form(form): axum::Form<DecideForm>,
) -> Response {
    if !operator_login.vouches(&form.csrf) {
        return refused_csrf(&console, "decide").await;
    }
    let choice = match form.choice.as_str() {
        "once" => Choice::Once,
        "session" => Choice::Session,
        "always" => Choice::Always,
        "deny" => Choice::Deny,
        _ => return (axum::http::StatusCode::BAD_REQUEST, "unknown choice").into_response(),
    };
    let reason = Some(form.reason.trim().to_string()).filter(|r| !r.is_empty());
    let outcome = console
        .state
        .broker
        .resolve_as_operator(&id, choice, &operator(), reason)
        .await;
    let said = match &outcome {
        Ok(decision) => format!("decided: {}", decision.describe()),
        Err(refusal) => format!("refused: {refusal}"),
    };
    audit(&console.state.store, "decide", &id, &said).await;
    Redirect::to(&format!("/approvals?said={}", encode(&said))).into_response()
}

/// `POST /outbox/{id}/retry`.
pub(super) async fn retry(
    State(console): State<Console>,
    operator_login: Operator,
    Path(id): Path<i64>,
    axum::Form(form): axum::Form<super::auth::CsrfForm>,
) -> Response {
    if !operator_login.vouches(form.csrf()) {
        return refused_csrf(&console, "retry").await;
    }
    let said = match console.state.sessions.retry_outbound(id).await {
        Ok(true) => "sending it again".to_string(),
        Ok(false) => "not retried: it was not given up".to_string(),
        Err(err) => format!("not retried: {err}"),
    };
    audit(
        &console.state.store,
        "retry",
        &format!("outbox {id}"),
        &said,
    )
    .await;
    Redirect::to(&format!("/deliveries?said={}", encode(&said))).into_response()
}

fn encode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}
