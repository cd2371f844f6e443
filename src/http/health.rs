//! `GET /healthz` (the process answers) and `GET /readyz` (storage reachable
//! and every enabled component ready; 503 with the reasons otherwise).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;

use super::AppState;
use crate::store::PROBE_TIMEOUT;
use crate::telemetry::ComponentHealth;

#[derive(Serialize)]
pub(super) struct Liveness {
    status: &'static str,
    version: &'static str,
}

pub(super) async fn healthz() -> Json<Liveness> {
    Json(Liveness {
        status: "ok",
        version: env!("CARGO_PKG_VERSION"),
    })
}

#[derive(Serialize)]
pub(super) struct Readiness {
    status: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    reasons: Vec<String>,
    checks: BTreeMap<String, ComponentHealth>,
}

pub(super) async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Readiness>) {
    let mut checks = state.health.snapshot();
    let storage = match tokio::time::timeout(PROBE_TIMEOUT, state.store.ping()).await {
        Ok(Ok(())) => ComponentHealth {
            ready: true,
            detail: "reachable".into(),
        },
        Ok(Err(err)) => ComponentHealth {
            ready: false,
            detail: err.to_string(),
        },
        Err(_) => ComponentHealth {
            ready: false,
            detail: format!("no answer within {PROBE_TIMEOUT:?}"),
        },
    };
    checks.insert("storage".into(), storage);
    let reasons: Vec<String> = checks
        .iter()
        .filter(|(_, c)| !c.ready)
        .map(|(name, c)| format!("{name}: {}", c.detail))
        .collect();
    let (code, status) = if reasons.is_empty() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    };
    (
        code,
        Json(Readiness {
            status,
            reasons,
            checks,
        }),
    )
}
