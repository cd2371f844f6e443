//! The agent engine: model providers and the tool-calling loop.
//!
//! A [`Conversation`] is one session's agent: its history (loaded from
//! storage, every new message persisted as it is produced), its todo list,
//! its tools, and the brokers that reach its human. [`Conversation::run_turn`]
//! is SPEC §3: call the model, validate and repair its tool calls, run them
//! (in parallel when safe), feed the results back in call order, until a
//! final answer, the iteration budget, three invalid turns in a row, or
//! cancellation.

mod budget;
mod conversation;
mod execute;
mod hints;
pub mod history;
pub mod layer;
pub mod message;
mod models;
pub mod provider;
pub mod reasoning;
pub mod repair;

pub use budget::{IterationBudget, MAIN_AGENT_BUDGET, SUB_AGENT_BUDGET};
pub use conversation::{
    AgentDeps, AgentEvents, Conversation, EMPTY_ANSWER, NoEvents, SPLIT_NOTICE, STEER_PREFIX,
    SessionContext, StopReason, TOO_LONG, TOOL_USE_GUIDANCE, Turn, TurnOutcome,
};
pub use layer::ClarifyBroker;
pub use models::Models;

/// Failures that end a turn without an answer.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The model could not be reached or refused the request.
    #[error(transparent)]
    Provider(#[from] provider::ProviderError),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// A toolset of the session does not exist.
    #[error(transparent)]
    Toolset(#[from] crate::tools::ToolsetError),
    /// The turn was cancelled.
    #[error("cancelled")]
    Cancelled,
}
