//! Approvals for dangerous commands (SPEC §4): detection, the policy the
//! terminal tools consult, the broker that waits for a human's decision,
//! and the audit trail.

pub mod broker;
pub mod decision;
pub mod detect;
pub mod patterns;
pub mod policy;
pub mod shell;

pub use broker::{Broker, Request};
pub use decision::{Actor, ApprovalPrompter, ChatRef, Choice, Decision, Prompt, Refusal};
pub use detect::{Detection, Match, detect};
pub use policy::{ApprovalPolicy, Evaluation, HumanApprover, Verdict, evaluate};
