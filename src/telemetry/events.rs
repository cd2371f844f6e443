//! Named internal events (the shape of vector's `internal_events`): each
//! thing worth counting is a type that owns its metric names and labels,
//! and the daemon emits events instead of touching metrics itself. The
//! names here are the contract of `/metrics` (docs/operating.md).

use std::sync::LazyLock;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};

use super::handles::Handles;

/// Something that happened inside the daemon.
pub trait InternalEvent {
    /// Records it: metrics, and a log line where one is worth having.
    fn emit(self);
}

/// Records `event`.
pub fn emit(event: impl InternalEvent) {
    event.emit();
}

/// An inbound event passed the intake and went to its session.
pub struct EventAccepted<'a> {
    /// Its platform.
    pub platform: &'a str,
}

impl InternalEvent for EventAccepted<'_> {
    fn emit(self) {
        static ACCEPTED: Handles<Counter> = Handles::new();
        ACCEPTED
            .get(self.platform, "", 0, || {
                metrics::counter!("switchboard_events_total", "platform" => self.platform.to_string())
            })
            .increment(1);
    }
}

/// An inbound event was refused because too much is waiting.
pub struct EventRefused<'a> {
    /// Its platform.
    pub platform: &'a str,
    /// The session it was for.
    pub session_key: &'a str,
    /// Events waiting across sessions.
    pub pending: usize,
}

impl InternalEvent for EventRefused<'_> {
    fn emit(self) {
        tracing::warn!(session.key = %self.session_key, pending = self.pending, "busy: event refused");
        metrics::counter!("switchboard_events_refused_total", "platform" => self.platform.to_string())
            .increment(1);
    }
}

/// Events accepted and not yet processed, across sessions.
pub struct QueueDepth(pub usize);

impl InternalEvent for QueueDepth {
    fn emit(self) {
        static DEPTH: LazyLock<Gauge> = LazyLock::new(|| {
            super::metrics();
            metrics::gauge!("switchboard_queue_depth")
        });
        DEPTH.set(self.0 as f64);
    }
}

/// Sessions with a live worker.
pub struct ActiveSessions(pub usize);

impl InternalEvent for ActiveSessions {
    fn emit(self) {
        metrics::gauge!("switchboard_active_sessions").set(self.0 as f64);
    }
}

/// A turn ended.
pub struct TurnFinished<'a> {
    /// `final`, `budget`, `cancelled`, `error`…
    pub outcome: &'a str,
    /// Prompt tokens it spent.
    pub prompt_tokens: u64,
    /// Completion tokens it spent.
    pub completion_tokens: u64,
}

impl InternalEvent for TurnFinished<'_> {
    fn emit(self) {
        metrics::counter!("switchboard_turns_total", "outcome" => self.outcome.to_string())
            .increment(1);
        metrics::counter!("switchboard_llm_tokens_total", "kind" => "prompt")
            .increment(self.prompt_tokens);
        metrics::counter!("switchboard_llm_tokens_total", "kind" => "completion")
            .increment(self.completion_tokens);
    }
}

/// The model sent tool arguments that are not JSON.
pub struct InvalidToolJson {
    /// Which try this was.
    pub attempt: u32,
}

impl InternalEvent for InvalidToolJson {
    fn emit(self) {
        tracing::warn!(
            attempt = self.attempt,
            "model sent invalid JSON arguments; asking again"
        );
        metrics::counter!("switchboard_invalid_tool_json_total").increment(1);
    }
}

/// One call to a model answered (or failed).
pub struct ModelCalled {
    /// How long it took.
    pub took: Duration,
}

impl InternalEvent for ModelCalled {
    fn emit(self) {
        metrics::histogram!("switchboard_model_latency_seconds").record(self.took.as_secs_f64());
    }
}

/// A tool call ended.
pub struct ToolCalled<'a> {
    /// The tool.
    pub tool: &'a str,
    /// `ok`, `refused`, `error`, `panic`, `unknown`, `unavailable`.
    pub outcome: &'static str,
    /// How long the handler ran, if it ran.
    pub took: Option<Duration>,
}

impl InternalEvent for ToolCalled<'_> {
    fn emit(self) {
        tracing::debug!(
            tool.outcome = self.outcome,
            took_ms = self.took.map(|t| t.as_millis() as u64),
            "tool call finished"
        );
        if let Some(took) = self.took {
            metrics::histogram!("switchboard_tool_duration_seconds", "tool" => self.tool.to_string())
                .record(took.as_secs_f64());
        }
        metrics::counter!("switchboard_tool_calls_total", "tool" => self.tool.to_string(), "outcome" => self.outcome)
            .increment(1);
    }
}

/// An HTTP request was answered.
pub struct HttpAnswered<'a> {
    /// Its method, from a closed set (`OTHER` beyond HTTP's own).
    pub method: &'static str,
    /// The route that matched (`unmatched` when none did).
    pub route: &'a str,
    /// The status sent.
    pub status: u16,
    /// How long it took.
    pub took: Duration,
}

impl InternalEvent for HttpAnswered<'_> {
    fn emit(self) {
        static ANSWERED: Handles<(Counter, Histogram)> = Handles::new();
        let (count, time) = ANSWERED.get(self.route, self.method, self.status, || {
            (
                metrics::counter!(
                    "switchboard_http_requests_total",
                    "method" => self.method,
                    "route" => self.route.to_string(),
                    "status" => self.status.to_string(),
                ),
                metrics::histogram!(
                    "switchboard_http_request_duration_seconds",
                    "method" => self.method,
                    "route" => self.route.to_string(),
                ),
            )
        });
        count.increment(1);
        time.record(self.took.as_secs_f64());
    }
}

/// HTTP connections open now.
pub struct OpenConnections(pub usize);

impl InternalEvent for OpenConnections {
    fn emit(self) {
        metrics::gauge!("switchboard_http_connections").set(self.0 as f64);
    }
}

/// A connection was refused because `server.max_connections` were open.
pub struct ConnectionRefused;

impl InternalEvent for ConnectionRefused {
    fn emit(self) {
        tracing::debug!("connection refused: server.max_connections are open");
        metrics::counter!("switchboard_http_connections_refused_total").increment(1);
    }
}

/// The listener closed a connection that ran out of time.
pub struct ConnectionClosed {
    /// `header_timeout` (a request head too slow) or `idle` (keep-alive
    /// ran out).
    pub reason: &'static str,
}

impl InternalEvent for ConnectionClosed {
    fn emit(self) {
        metrics::counter!("switchboard_http_connections_closed_total", "reason" => self.reason)
            .increment(1);
    }
}

/// A webhook delivery was answered.
pub struct WebhookAnswered<'a> {
    /// The route.
    pub route: &'a str,
    /// `accepted`, `acknowledged`, `unauthorized`, `rate_limited`,
    /// `malformed`, `busy`, `error`.
    pub outcome: &'static str,
}

impl InternalEvent for WebhookAnswered<'_> {
    fn emit(self) {
        static ANSWERED: Handles<Counter> = Handles::new();
        ANSWERED
            .get(self.route, self.outcome, 0, || {
                metrics::counter!("switchboard_webhook_requests_total", "route" => self.route.to_string(), "outcome" => self.outcome)
            })
            .increment(1);
    }
}

/// A comment command on a forge route was not carried out: its author
/// may not give commands.
pub struct ForgeCommandIgnored<'a> {
    /// The route.
    pub route: &'a str,
    /// Who wrote it.
    pub login: &'a str,
}

impl InternalEvent for ForgeCommandIgnored<'_> {
    fn emit(self) {
        tracing::info!(
            route = self.route,
            login = self.login,
            "forge command from a login not allowed; ignored"
        );
        metrics::counter!("switchboard_forge_commands_ignored_total", "route" => self.route.to_string())
            .increment(1);
    }
}

/// A webhook run's answer reached its target, or finally did not.
pub struct Delivered {
    /// Whether it arrived.
    pub ok: bool,
}

impl InternalEvent for Delivered {
    fn emit(self) {
        let outcome = if self.ok { "delivered" } else { "failed" };
        metrics::counter!("switchboard_deliveries_total", "outcome" => outcome).increment(1);
    }
}

/// An approval was asked for or ended.
pub struct ApprovalStep<'a> {
    /// `requested`, `approved_once`, `denied`, `timed_out`…
    pub outcome: &'a str,
}

impl InternalEvent for ApprovalStep<'_> {
    fn emit(self) {
        metrics::counter!("switchboard_approvals_total", "outcome" => self.outcome.to_string())
            .increment(1);
    }
}

/// What this replica holds among the others on the database.
pub struct ClusterHoldings<'a> {
    /// The platforms whose single-connection ingress it leads, of those it
    /// could lead.
    pub leads: &'a [&'a str],
    /// Sessions it owns.
    pub sessions: usize,
}

impl InternalEvent for ClusterHoldings<'_> {
    fn emit(self) {
        for platform in ["telegram", "discord", "slack"] {
            let on = self.leads.contains(&platform);
            metrics::gauge!("switchboard_cluster_leader", "platform" => platform).set(if on {
                1.0
            } else {
                0.0
            });
        }
        metrics::gauge!("switchboard_cluster_sessions_owned").set(self.sessions as f64);
    }
}

/// A session moved between replicas at a turn boundary: handed to
/// another (`out`) or taken from another's hand-off.
pub struct SessionMoved {
    /// Handed out (true) or taken in.
    pub out: bool,
}

impl InternalEvent for SessionMoved {
    fn emit(self) {
        let direction = if self.out { "out" } else { "in" };
        metrics::counter!("switchboard_cluster_session_moves_total", "direction" => direction)
            .increment(1);
    }
}

/// The leases were renewed (or a renewal failed): how long ago the last
/// renewal succeeded.
pub struct LeasesRenewed(pub Duration);

impl InternalEvent for LeasesRenewed {
    fn emit(self) {
        metrics::gauge!("switchboard_cluster_lease_age_seconds").set(self.0.as_secs_f64());
    }
}
