//! Platform adapters turn platform traffic into inbound events and render
//! outbound messages. This module holds what the rest of the daemon sees of
//! them; each platform lives in its own feature-gated folder.

pub mod chunk;
pub mod console;
#[cfg(feature = "discord")]
pub mod discord;
pub mod markdown;
pub mod outbound;
pub mod questions;
pub mod signing;
#[cfg(feature = "slack")]
pub mod slack;
#[cfg(feature = "telegram")]
pub mod telegram;
#[cfg(feature = "webhook")]
pub mod webhook;

pub use outbound::{Outbound, OutboundHub};

/// Adds the compiled-in adapters to `daemon`; each starts only when its
/// config section enables it.
pub fn install(daemon: crate::daemon::Daemon) -> crate::daemon::Daemon {
    #[cfg(feature = "webhook")]
    let daemon = daemon.routes_with(webhook::router);
    #[cfg(feature = "telegram")]
    let daemon = telegram::install(daemon);
    #[cfg(feature = "slack")]
    let daemon = slack::install(daemon);
    #[cfg(feature = "discord")]
    let daemon = discord::install(daemon);
    daemon
}
