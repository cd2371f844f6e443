//! Approvals for dangerous commands (SPEC §4): detection, the policy the
//! terminal tools consult, the broker that waits for a human's decision,
//! and the audit trail.

pub mod broker;
pub mod decision;
pub mod detect;
pub mod patterns;
pub mod policy;
pub mod relay;
pub mod scripts;
pub mod shell;
pub mod structure;

pub use crate::platform::{Actor, ChatRef};
pub use broker::{Broker, Request, shown_briefly};
pub use decision::{Choice, Decision, Refusal, code_block, prompt};
pub use detect::{Detection, Match, detect};
pub use policy::{ApprovalPolicy, Evaluation, HumanApprover, Verdict, evaluate, evaluate_bounded};
