//! Approvals for dangerous commands (SPEC §4): detection, the policy the
//! terminal tools consult, the broker that waits for a human's decision,
//! and the audit trail.

pub mod detect;
pub mod patterns;
pub mod shell;

pub use detect::{Detection, Match, detect};
