//! Logs (tracing, human or JSON, to stderr), the process-wide Prometheus
//! recorder, the named events that own its metric names ([`events`]), and
//! the components' readiness ([`Health`]).

pub mod events;
mod handles;
mod health;
mod recent;

pub use health::{ComponentHealth, Health};
pub use recent::{Problem, recent_problems};

use std::io::IsTerminal;
use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global tracing subscriber. `RUST_LOG`, when set, overrides
/// `level`. Calling it twice keeps the first subscriber.
pub fn init_logging(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(recent::Recent);
    let _ = match format {
        LogFormat::Human => registry.with(fmt).try_init(),
        LogFormat::Json => registry
            .with(fmt.json().flatten_event(true).with_current_span(true))
            .try_init(),
    };
}

/// Latency buckets (seconds) for every `*_duration_seconds` histogram.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The Prometheus handle, installing the global recorder on first use.
///
/// One recorder per process: tests that build several apps share it.
pub fn metrics() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        // No idle timeout: the handles kept by `handles` must stay the
        // registry's own.
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_duration_seconds".into()), LATENCY_BUCKETS)
            .expect("latency buckets are non-empty")
            .build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
        }
        metrics::gauge!(
            "switchboard_build_info",
            "version" => env!("CARGO_PKG_VERSION"),
        )
        .set(1.0);
        handle
    })
}
