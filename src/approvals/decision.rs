//! What an approval is made of outside the broker: the chat and prompt an
//! adapter shows, the four choices and their button data, who decides, the
//! decision, and why a press or command can be refused.

use crate::store::ApprovalStatus;

/// A chat where a prompt is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRef {
    /// Platform name.
    pub platform: String,
    /// Chat or channel id.
    pub chat: String,
    /// Thread, if any.
    pub thread: Option<String>,
}

/// What an adapter renders: the command, why it was flagged, and four
/// buttons whose data is [`Choice::button_data`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// Approval id (in the button data).
    pub approval_id: String,
    /// The command, shortened to fit a message.
    pub command: String,
    /// Why it needs approval.
    pub reasons: Vec<String>,
    /// Who asked, if a person did.
    pub requester: Option<String>,
}

impl Prompt {
    /// A plain-text rendering for adapters without rich formatting.
    pub fn text(&self) -> String {
        format!(
            "⚠️ Approval needed\n{}\nReason: {}\n\nReply /approve, /approve session, /approve always or /deny [reason].",
            self.command,
            self.reasons.join("; ")
        )
    }
}

/// The four answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Run it this time.
    Once,
    /// Run commands matching these patterns for the rest of the session.
    Session,
    /// Add the patterns to the permanent allowlist.
    Always,
    /// Do not run it.
    Deny,
}

impl Choice {
    /// All choices, in button order.
    pub const ALL: [Choice; 4] = [Choice::Once, Choice::Session, Choice::Always, Choice::Deny];

    fn word(self) -> &'static str {
        match self {
            Choice::Once => "once",
            Choice::Session => "session",
            Choice::Always => "always",
            Choice::Deny => "deny",
        }
    }

    /// The button label.
    pub fn label(self) -> &'static str {
        match self {
            Choice::Once => "Allow once",
            Choice::Session => "Allow for this session",
            Choice::Always => "Always allow",
            Choice::Deny => "Deny",
        }
    }

    /// Callback data of this choice's button (at most 48 bytes).
    pub fn button_data(self, approval_id: &str) -> String {
        format!("ap:{approval_id}:{}", self.word())
    }

    /// Parses button callback data.
    pub fn parse_button(data: &str) -> Option<(String, Choice)> {
        let mut parts = data.splitn(3, ':');
        if parts.next()? != "ap" {
            return None;
        }
        let id = parts.next()?.to_string();
        let choice = Choice::ALL
            .into_iter()
            .find(|c| Some(c.word()) == parts.next())?;
        Some((id, choice))
    }
}

/// The adapter side of approvals.
#[async_trait::async_trait]
pub trait ApprovalPrompter: Send + Sync {
    /// Shows the prompt with its buttons; returns the message id.
    async fn show(&self, chat: &ChatRef, prompt: &Prompt) -> Result<String, String>;
    /// Edits the prompt to `outcome` and removes its buttons.
    async fn close(&self, chat: &ChatRef, message_id: &str, outcome: &str) -> Result<(), String>;
    /// Whether requests of a session without a human, held in `chat`, are
    /// asked here rather than in `[approvals] route_to` (a webhook route
    /// that asks on the pull request itself).
    fn asks_for_humanless(&self, _chat: &ChatRef) -> bool {
        false
    }
}

/// The person acting on a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// Platform name.
    pub platform: String,
    /// User id on it.
    pub user_id: String,
    /// Display name.
    pub name: String,
}

impl Actor {
    /// `<platform>:<user id>`, the form requesters are stored in.
    pub fn key(&self) -> String {
        format!("{}:{}", self.platform, self.user_id)
    }
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed this once.
    Once {
        /// By whom.
        by: String,
    },
    /// Allowed for the session.
    Session {
        /// By whom.
        by: String,
    },
    /// Allowed permanently.
    Always {
        /// By whom.
        by: String,
    },
    /// Denied.
    Denied {
        /// By whom.
        by: String,
        /// Why, if they said.
        reason: Option<String>,
    },
    /// Nobody decided in time.
    Expired,
    /// The turn was cancelled while waiting.
    Cancelled,
    /// There was nobody to ask.
    NoApprover(String),
}

impl Decision {
    /// Text for the model when the command will not run.
    pub fn describe(&self) -> String {
        match self {
            Decision::Denied {
                by,
                reason: Some(r),
            } => format!("denied by {by}: {r}"),
            Decision::Denied { by, reason: None } => format!("denied by {by}"),
            Decision::Expired => "no one approved it in time".into(),
            Decision::Cancelled => "the request was cancelled".into(),
            Decision::NoApprover(why) => format!("no one can approve it: {why}"),
            Decision::Once { by } | Decision::Session { by } | Decision::Always { by } => {
                format!("approved by {by}")
            }
        }
    }

    pub(super) fn status(&self) -> ApprovalStatus {
        match self {
            Decision::Once { .. } => ApprovalStatus::ApprovedOnce,
            Decision::Session { .. } => ApprovalStatus::ApprovedSession,
            Decision::Always { .. } => ApprovalStatus::ApprovedAlways,
            Decision::Denied { .. } | Decision::NoApprover(_) => ApprovalStatus::Denied,
            Decision::Expired | Decision::Cancelled => ApprovalStatus::Expired,
        }
    }

    /// The text the prompt is edited to.
    pub(super) fn outcome_text(&self, command: &str) -> String {
        let short = crate::tools::builtin::clip(command, 200);
        match self {
            Decision::Once { by } => format!("✅ Allowed once by {by}\n{short}"),
            Decision::Session { by } => format!("✅ Allowed for this session by {by}\n{short}"),
            Decision::Always { by } => format!("✅ Always allowed by {by}\n{short}"),
            Decision::Denied { by, reason } => format!(
                "❌ Denied by {by}{}\n{short}",
                reason
                    .as_ref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
            Decision::Expired => format!("⌛ Expired without a decision — not run\n{short}"),
            Decision::Cancelled => format!("🚫 Cancelled — not run\n{short}"),
            Decision::NoApprover(why) => format!("❌ Not run: {why}\n{short}"),
        }
    }
}

/// Why a press or command was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No such approval (a forged or mistyped id).
    #[error("This approval does not exist.")]
    Unknown,
    /// Already decided (a replayed press).
    #[error("This approval was already decided ({0}).")]
    AlreadyDecided(String),
    /// No longer waiting (timed out, or from before a restart).
    #[error("This approval has expired.")]
    Expired,
    /// Not the requester and not an approver.
    #[error("Only the person who asked or a configured approver can decide this.")]
    NotAllowed,
    /// Nothing is waiting in this chat.
    #[error("Nothing is waiting for approval here.")]
    NothingPending,
    /// Storage failed.
    #[error("The decision could not be recorded; try again.")]
    Storage,
}
