//! How a turn ends ([`StopReason`], [`TurnOutcome`]) and the running
//! counts it ends with ([`Tally`]).

use crate::agent::IterationBudget;
use crate::agent::provider::Usage;

use super::TOO_LONG;

/// Why a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The model gave a final answer.
    Final,
    /// The iteration budget ran out.
    BudgetExhausted,
    /// Three turns in a row had only invalid tool calls.
    InvalidToolCalls,
    /// The turn was cancelled.
    Cancelled,
    /// Its next model call could have crossed a spend cap.
    OverBudget,
    /// The current message does not fit the context window even in a
    /// fresh session.
    TooLong,
}

impl StopReason {
    /// Its name in records: `final`, `budget_exhausted`, ….
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Final => "final",
            StopReason::BudgetExhausted => "budget_exhausted",
            StopReason::InvalidToolCalls => "invalid_tool_calls",
            StopReason::Cancelled => "cancelled",
            StopReason::OverBudget => "over_budget",
            StopReason::TooLong => "too_long",
        }
    }
}

/// The result of a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnOutcome {
    /// What to tell the user (a partial answer when stopped early).
    pub reply: String,
    /// Why the turn ended.
    pub stop: StopReason,
    /// Model calls made.
    pub model_calls: u32,
    /// Tool calls run.
    pub tool_calls: u32,
    /// Tokens used.
    pub usage: Usage,
    /// Something the chat should be told besides the answer (the
    /// conversation continues in a new session, say).
    pub notice: Option<String>,
    /// The messages steered into this turn (their ids, see
    /// [`Steering`](crate::agent::layer::Steering)): its answer is theirs.
    pub steered: Vec<i64>,
}

/// Output of one call this turn could no longer afford keeps this much.
const TOOL_OUTPUT_FLOOR: usize = 1000;

/// The running counts of one turn.
pub(super) struct Tally {
    pub(super) budget: IterationBudget,
    pub(super) tool_calls: u32,
    pub(super) last_text: String,
    /// Characters of tool output the rest of the turn may add.
    pub(super) tool_output_left: usize,
    pub(super) notice: Option<String>,
    /// The spend cap that stopped the turn, said after its last text.
    pub(super) over_budget: Option<String>,
    /// The messages steered into the turn.
    pub(super) steered: Vec<i64>,
}

impl Tally {
    pub(super) fn new(limit: u32, tool_output: usize) -> Self {
        Self {
            budget: IterationBudget::new(limit),
            tool_calls: 0,
            last_text: String::new(),
            tool_output_left: tool_output,
            notice: None,
            over_budget: None,
            steered: Vec::new(),
        }
    }

    /// `result` as far as this turn's tool-output budget allows: whole
    /// while it lasts, then cut with a note (never below
    /// [`TOOL_OUTPUT_FLOOR`]), so a batch of large reads cannot flood the
    /// context.
    pub(super) fn afford(&mut self, result: String) -> String {
        let chars = result.chars().count();
        if chars <= self.tool_output_left {
            self.tool_output_left -= chars;
            return result;
        }
        let keep = self.tool_output_left.max(TOOL_OUTPUT_FLOOR);
        self.tool_output_left = self.tool_output_left.saturating_sub(keep);
        format!(
            "{}\n[This turn's tool output budget is used up: the rest of this result was cut. Ask for smaller parts.]",
            crate::render::clip(&result, keep)
        )
    }

    /// The outcome, with the turn's model usage `usage`; early stops
    /// keep the last text as a partial answer.
    pub(super) fn stop(&self, reason: StopReason, usage: Usage) -> TurnOutcome {
        let note = match reason {
            StopReason::BudgetExhausted => {
                "\n\n(I stopped here: this request used up its step budget.)".to_string()
            }
            StopReason::InvalidToolCalls => {
                "\n\n(I stopped here: my tool calls kept failing validation.)".to_string()
            }
            StopReason::OverBudget => {
                format!("\n\n({})", self.over_budget.as_deref().unwrap_or_default())
            }
            StopReason::Final | StopReason::Cancelled | StopReason::TooLong => String::new(),
        };
        let reply = match reason {
            StopReason::Final => self.last_text.clone(),
            StopReason::TooLong => TOO_LONG.to_string(),
            _ => format!("{}{note}", self.last_text.trim())
                .trim()
                .to_string(),
        };
        TurnOutcome {
            reply,
            stop: reason,
            model_calls: self.budget.used(),
            tool_calls: self.tool_calls,
            usage,
            notice: self.notice.clone(),
            steered: self.steered.clone(),
        }
    }
}
