//! The console adapter: a person at a terminal. Approvals and clarify
//! questions are asked on stderr and answered on stdin; tool activity is
//! shown as it happens.

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::agent::message::ToolCall;
use crate::agent::{AgentEvents, ClarifyBroker};
use crate::approvals::{Decision, HumanApprover, Request};
use crate::sessions::{InboundEvent, Replier};
use crate::store::{AuditEvent, Store};

/// Lines of standard input, shared by the prompt loop and the questions
/// asked during a turn.
#[derive(Clone)]
pub struct ConsoleInput(Arc<Mutex<Lines<BufReader<Stdin>>>>);

impl Default for ConsoleInput {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(
            BufReader::new(tokio::io::stdin()).lines(),
        )))
    }
}

impl ConsoleInput {
    /// The next line, `None` at end of input.
    pub async fn line(&self) -> Option<String> {
        self.0.lock().await.next_line().await.ok().flatten()
    }

    /// Prints `prompt` on stderr and reads the answer, unless cancelled.
    async fn ask(&self, prompt: &str, cancel: &CancellationToken) -> Option<String> {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        tokio::select! {
            line = self.line() => line,
            _ = cancel.cancelled() => None,
        }
    }
}

impl std::fmt::Debug for ConsoleInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConsoleInput")
    }
}

/// Puts commands that need approval to the person at the terminal.
/// Without an interactive terminal (`--once`) the answer is no.
#[derive(Debug, Clone)]
pub struct ConsoleApprovals {
    input: ConsoleInput,
    interactive: bool,
    store: Store,
}

impl ConsoleApprovals {
    /// Approvals read from `input`; `interactive` is false for one-shot
    /// runs. Session and permanent grants are stored in `store`.
    pub fn new(input: ConsoleInput, interactive: bool, store: Store) -> Self {
        Self {
            input,
            interactive,
            store,
        }
    }
}

#[async_trait::async_trait]
impl HumanApprover for ConsoleApprovals {
    async fn decide(&self, request: Request, cancel: &CancellationToken) -> Decision {
        if !self.interactive {
            return Decision::NoApprover(
                "no one is at the terminal to approve commands in a one-shot run".into(),
            );
        }
        let reasons: Vec<&str> = request.matches.iter().map(|m| m.description).collect();
        let prompt = format!(
            "\n⚠️  The agent wants to run:\n    {}\nIt {}.\nAllow? [y] once / [s] for this session / [a] always / [N] no: ",
            request.command,
            reasons.join("; ")
        );
        let keys: Vec<String> = request.matches.iter().map(|m| m.key.to_string()).collect();
        let by = "you at the terminal".to_string();
        let decision = match self.input.ask(&prompt, cancel).await {
            None => Decision::Cancelled,
            Some(answer) => match answer.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => Decision::Once { by },
                "s" | "session" => {
                    let _ = self
                        .store
                        .grant_session(&request.session_id, &keys, "console")
                        .await;
                    Decision::Session { by }
                }
                "a" | "always" => {
                    for key in &keys {
                        let _ = self.store.allow_pattern(key, "console").await;
                    }
                    Decision::Always { by }
                }
                _ => Decision::Denied {
                    by,
                    reason: Some("denied at the terminal".into()),
                },
            },
        };
        let keys = keys.join(",");
        let outcome = match &decision {
            Decision::Once { .. } => "approved_once",
            Decision::Session { .. } => "approved_session",
            Decision::Always { .. } => "approved_always",
            Decision::Cancelled => "cancelled",
            _ => "denied",
        };
        let _ = self
            .store
            .append_audit(&AuditEvent {
                approval_id: "console",
                event: "decided",
                session_id: &request.session_id,
                requester: request.requester.as_deref().unwrap_or("-"),
                actor: Some("console"),
                command: &request.command,
                pattern_keys: &keys,
                outcome,
            })
            .await;
        decision
    }
}

/// Answers `clarify` questions at the terminal.
#[derive(Debug, Clone)]
pub struct ConsoleClarify {
    input: ConsoleInput,
}

impl ConsoleClarify {
    /// Questions answered from `input`.
    pub fn new(input: ConsoleInput) -> Self {
        Self { input }
    }
}

#[async_trait::async_trait]
impl ClarifyBroker for ConsoleClarify {
    async fn ask(
        &self,
        question: &str,
        choices: &[String],
        cancel: &CancellationToken,
    ) -> Result<String, String> {
        let mut prompt = format!("\n❓ {question}\n");
        for (i, choice) in choices.iter().enumerate() {
            prompt.push_str(&format!("   {}. {choice}\n", i + 1));
        }
        prompt.push_str("> ");
        let answer = self
            .input
            .ask(&prompt, cancel)
            .await
            .ok_or_else(|| "no answer at the terminal".to_string())?;
        let answer = answer.trim();
        Ok(answer
            .parse::<usize>()
            .ok()
            .and_then(|n| choices.get(n.wrapping_sub(1)))
            .cloned()
            .unwrap_or_else(|| answer.to_string()))
    }
}

/// Shows tool activity on stderr.
#[derive(Debug, Default)]
pub struct ConsoleEvents;

impl AgentEvents for ConsoleEvents {
    fn tool_started(&self, call: &ToolCall) {
        let args = crate::tools::builtin::clip(&call.arguments, 120);
        eprintln!("  ⚙ {} {args}", call.name);
    }

    fn tool_finished(&self, call: &ToolCall, result: &str) {
        let mark = if result.starts_with("{\"error\"") {
            "✗"
        } else {
            "✓"
        };
        eprintln!("  {mark} {} ({} chars)", call.name, result.len());
    }
}

/// The session manager's side of the terminal: answers on stdout, notices
/// on stderr, questions and tool activity at the terminal.
#[derive(Debug, Clone)]
pub struct ConsoleReplier {
    input: ConsoleInput,
}

impl ConsoleReplier {
    /// Questions are answered from `input`.
    pub fn new(input: ConsoleInput) -> Self {
        Self { input }
    }
}

#[async_trait::async_trait]
impl Replier for ConsoleReplier {
    async fn reply(&self, _event: &InboundEvent, text: &str) {
        println!("{text}");
    }

    async fn notice(&self, _event: &InboundEvent, text: &str) {
        eprintln!("{text}");
    }

    fn clarifier(&self, _event: &InboundEvent) -> Option<Arc<dyn ClarifyBroker>> {
        Some(Arc::new(ConsoleClarify::new(self.input.clone())))
    }

    fn events(&self, _event: &InboundEvent) -> Option<Arc<dyn AgentEvents>> {
        Some(Arc::new(ConsoleEvents))
    }
}

/// Whether standard input is a terminal.
pub fn stdin_is_terminal() -> bool {
    std::io::stdin().is_terminal()
}
