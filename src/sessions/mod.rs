//! Sessions (SPEC §5): the intake every inbound event passes (access,
//! answers, commands, mentions, attachments, the durable inbox), the
//! voice notes heard before their turn, the
//! session key each belongs to, and the per-session workers that run the
//! turns: busy policy, resets, replay. Nothing here knows a platform by
//! name: each describes itself with a [`Profile`](crate::platform::Profile).

pub mod access;
mod commands;
mod completion;
mod deliveries;
mod intake;
pub mod keys;
mod live;
mod mailboxes;
pub mod manager;
mod notify;
mod opening;
mod outbox;
mod ownership;
mod pressure;
pub mod questions;
mod recent;
mod reclaim;
pub mod replies;
pub mod reset;
mod revisions;
mod steer;
mod throttle;
mod voice;
mod worker;

pub use access::{Access, ApproveOutcome, PairingOutcome};
pub use deliveries::Deliveries;
pub use intake::Press;
pub use keys::{KeyRules, session_key};
pub use manager::{Backlog, Links, ManagerSettings, SessionManager, Submitted};
pub use replies::Replies;
pub use reset::{ResetReason, reset_due};

pub use crate::platform::{AccessRules, ChatKind, InboundEvent};
