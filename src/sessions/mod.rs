//! Sessions (SPEC §5): which session an inbound event belongs to, who may
//! reach an agent at all, and the per-session workers that run the turns:
//! busy policy, resets, the durable inbox and its replay.

pub mod access;
mod commands;
pub mod keys;
pub mod manager;
pub mod replier;
pub mod reset;
mod worker;

pub use access::{Access, AccessRules, ApproveOutcome, PairingOutcome};
pub use keys::{ChatKind, InboundEvent, KeyRules, session_key};
pub use manager::{Backlog, ManagerSettings, SessionManager, Submitted};
pub use replier::{Replier, Replies};
pub use reset::{ResetReason, reset_due};
