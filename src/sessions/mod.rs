//! Sessions (SPEC §5): which session an inbound event belongs to, and who
//! may reach an agent at all. The per-session workers, busy policy, resets
//! and the inbox replay build on these.

pub mod access;
pub mod keys;
pub mod manager;

pub use access::{Access, AccessRules, ApproveOutcome, PairingOutcome};
pub use keys::{ChatKind, InboundEvent, KeyRules, session_key};
pub use manager::{ManagerSettings, Replier, SessionManager, Submitted};
