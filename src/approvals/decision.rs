//! What an approval is made of outside the broker: the prompt shown
//! through the platform port, the four choices and their button data, the
//! decision, and why a press or command can be refused.

use crate::platform::{ApproveScope, ChatCommand, ChoiceStyle, Prompt, PromptChoice, PromptKind};
use crate::store::ApprovalStatus;

/// A code block that `text` cannot break out of: fenced with more
/// backticks than any run inside it.
pub fn code_block(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}\n{text}\n{fence}")
}

/// The prompt of approval `id` for `command`, flagged for `reasons`.
pub fn prompt(id: &str, command: &str, reasons: &[&str]) -> Prompt {
    Prompt {
        id: id.to_string(),
        kind: PromptKind::Approval,
        text: format!(
            "⚠️ **Approval needed**\n{}\nReason: {}",
            code_block(command),
            reasons.join("; ")
        ),
        choices: Choice::ALL
            .iter()
            .map(|c| PromptChoice {
                label: c.label().to_string(),
                data: c.button_data(id),
                style: match c {
                    Choice::Once => ChoiceStyle::Primary,
                    Choice::Deny => ChoiceStyle::Danger,
                    Choice::Session | Choice::Always => ChoiceStyle::Plain,
                },
            })
            .collect(),
        fallback: "Reply /approve, /approve session, /approve always or /deny [reason].".into(),
    }
}

/// The four answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

    /// The choice a decision command makes, with the approval it names
    /// and the reason it gives; `None` for other commands.
    pub fn of_command(command: &ChatCommand) -> Option<(Choice, Option<String>, Option<String>)> {
        match command {
            ChatCommand::Approve { id, scope } => {
                let choice = match scope {
                    ApproveScope::Once => Choice::Once,
                    ApproveScope::Session => Choice::Session,
                    ApproveScope::Always => Choice::Always,
                };
                Some((choice, id.clone(), None))
            }
            ChatCommand::Deny { id, reason } => Some((Choice::Deny, id.clone(), reason.clone())),
            _ => None,
        }
    }

    /// Parses button callback data.
    pub fn parse_button(data: &str) -> Option<(String, Choice)> {
        let mut parts = data.splitn(3, ':');
        if parts.next()? != "ap" {
            return None;
        }
        let id = parts.next()?.to_string();
        let word = parts.next()?;
        let choice = Choice::ALL.into_iter().find(|c| c.word() == word)?;
        Some((id, choice))
    }
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
        let short = crate::render::clip(command, 200);
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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
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
    /// "Always" from someone who is not an approver.
    #[error(
        "Only a configured approver can allow this permanently; choose Allow once or For this session."
    )]
    AlwaysForApprovers,
    /// "For this session" on a run without a person (a webhook's): the
    /// grant would cover what the next event on the change asks.
    #[error(
        "A run without a person gets no session grant (the next event on the change would run under it); choose Allow once."
    )]
    SessionForUnattended,
    /// Nothing is waiting in this chat.
    #[error("Nothing is waiting for approval here.")]
    NothingPending,
    /// More than one request is waiting where the command was written,
    /// and it named none (the requests: id and command, each).
    #[error("More than one request is waiting here; name one with /approve ID or /deny ID: {0}.")]
    WhichOne(String),
    /// Storage failed.
    #[error("The decision could not be recorded; try again.")]
    Storage,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_button_reads_back_as_its_choice() {
        for choice in Choice::ALL {
            let data = choice.button_data("abc");
            assert!(data.len() <= 48, "{data}");
            assert_eq!(
                Choice::parse_button(&data),
                Some(("abc".to_string(), choice))
            );
        }
        assert_eq!(Choice::parse_button("ap:abc:maybe"), None);
        assert_eq!(Choice::parse_button("cl:abc:0"), None);
        assert_eq!(Choice::parse_button("ap:abc"), None);
    }

    #[test]
    fn the_prompt_offers_the_four_choices_and_fences_the_command() {
        let p = prompt("abc", "echo ```; rm -rf x", &["deletes files recursively"]);
        assert_eq!(p.kind, PromptKind::Approval);
        let labels: Vec<&str> = p.choices.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "Allow once",
                "Allow for this session",
                "Always allow",
                "Deny"
            ]
        );
        assert!(
            p.text.contains("````\necho ```; rm -rf x\n````"),
            "a longer fence than any run inside: {}",
            p.text
        );
        assert!(p.text.ends_with("Reason: deletes files recursively"));
    }
}
