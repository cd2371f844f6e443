//! Platform adapters turn platform traffic into inbound events and render
//! outbound messages. This module holds what the rest of the daemon sees of
//! them; each platform lives in its own feature-gated folder.

pub mod console;
pub mod outbound;

pub use outbound::{Outbound, OutboundHub};
