//! Process signals and systemd notifications.

use std::time::Duration;

use sd_notify::NotifyState;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Resolves on the first SIGTERM or SIGINT. The handlers are installed when
/// this is called, not when it is first polled, so call it early.
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = &'static str>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    })
}

/// Tells systemd (when it started us with `Type=notify`) something.
pub fn notify(state: &[NotifyState<'_>]) {
    if let Err(err) = sd_notify::notify(state) {
        tracing::warn!(error = %err, "sd_notify failed");
    }
}

/// Pings the systemd watchdog at half its interval until `stop` fires, when
/// systemd asked for pings (`WatchdogSec=`); otherwise returns at once.
pub async fn watchdog(stop: CancellationToken) {
    let Some(interval) = sd_notify::watchdog_enabled() else {
        return;
    };
    let period = (interval / 2).max(Duration::from_millis(100));
    tracing::info!(
        watchdog.period_ms = period.as_millis() as u64,
        "systemd watchdog enabled"
    );
    let mut ticker = tokio::time::interval(period);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => notify(&[NotifyState::Watchdog]),
        }
    }
}
