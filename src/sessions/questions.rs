//! Clarify questions: the agent's `clarify` asks through the session's
//! platform as a prompt with choices (`cl:<id>:<n>` buttons); the asked
//! person's button press or next message in that chat answers it,
//! whichever comes first, and the prompt is closed to show the answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::agent::ClarifyBroker;
use crate::agent::layer::Unanswered;
use crate::platform::{
    ChatRef, ChoiceStyle, Platforms, Prompt, PromptChoice, PromptKind, retrying,
};
use crate::render::clip;

/// How long a question waits for its answer.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(600);
/// Longest choice label.
const LABEL_CHARS: usize = 60;

struct Pending {
    chat: ChatRef,
    user: Option<String>,
    question: String,
    choices: Vec<String>,
    message: Option<String>,
    tx: oneshot::Sender<String>,
}

/// An answered question: where its prompt is, to close it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    /// The chat it was asked in.
    pub chat: ChatRef,
    /// The prompt's message, if it was shown.
    pub message: Option<String>,
    /// What the prompt is closed to.
    pub outcome: String,
    /// The answer.
    pub answer: String,
}

/// The open questions of the daemon.
#[derive(Default)]
pub struct Questions {
    pending: Mutex<HashMap<String, Pending>>,
}

impl std::fmt::Debug for Questions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Questions").finish_non_exhaustive()
    }
}

/// A registered question: its id (for button data) and its answer.
pub struct Asked {
    /// Goes into the buttons' data as `cl:<id>:<n>`.
    pub id: String,
    rx: oneshot::Receiver<String>,
}

/// The data of the button for `choice` number `n` of question `id`.
pub fn button_data(id: &str, n: usize) -> String {
    format!("cl:{id}:{n}")
}

/// Whether a press's data is a question's.
pub fn is_button(data: &str) -> bool {
    data.starts_with("cl:")
}

impl Questions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens `question` in `chat` for `user` (anyone there when `None`).
    pub fn ask(
        &self,
        chat: &ChatRef,
        user: Option<&str>,
        question: &str,
        choices: &[String],
    ) -> Asked {
        let id = crate::store::new_id()[..16].to_string();
        let (tx, rx) = oneshot::channel();
        self.lock().insert(
            id.clone(),
            Pending {
                chat: chat.clone(),
                user: user.map(str::to_string),
                question: question.to_string(),
                choices: choices.to_vec(),
                message: None,
                tx,
            },
        );
        Asked { id, rx }
    }

    /// Records where question `id` was shown.
    pub fn shown(&self, id: &str, message: String) {
        if let Some(q) = self.lock().get_mut(id) {
            q.message = Some(message);
        }
    }

    /// Waits for the answer of `asked`, up to [`ANSWER_WITHIN`] or until
    /// `cancel`.
    pub async fn wait(
        &self,
        asked: Asked,
        cancel: &CancellationToken,
    ) -> Result<String, Unanswered> {
        let Asked { id, rx } = asked;
        let answer = tokio::select! {
            a = rx => a.map_err(|_| Unanswered::Dropped),
            _ = cancel.cancelled() => Err(Unanswered::Cancelled),
            _ = tokio::time::sleep(ANSWER_WITHIN) => Err(Unanswered::TimedOut(ANSWER_WITHIN)),
        };
        self.lock().remove(&id);
        answer
    }

    /// Forgets a question that could not be shown.
    pub fn drop_question(&self, asked: &Asked) {
        self.lock().remove(&asked.id);
    }

    fn answer(q: Pending, answer: String) -> Answered {
        let answered = Answered {
            chat: q.chat,
            message: q.message,
            outcome: format!("❓ {}\n→ {answer}", q.question),
            answer: answer.clone(),
        };
        let _ = q.tx.send(answer);
        answered
    }

    /// Takes `text` from `user` in `chat` as the answer to the question
    /// waiting there for them, if exactly one is: with several (another
    /// member's turns may each ask them something), words could answer the
    /// wrong one, and only a button says which. A question asked in a
    /// thread is answered in that thread (where every conversation of a
    /// channel is a thread of its own, a message elsewhere in the channel
    /// is another conversation's); one asked in the chat itself, from
    /// anywhere in it.
    pub fn answer_text(&self, chat: &ChatRef, user: &str, text: &str) -> Option<Answered> {
        let mut pending = self.lock();
        let mut open = pending.iter().filter(|(_, q)| {
            q.chat.platform == chat.platform
                && q.chat.chat == chat.chat
                && (q.chat.thread.is_none() || q.chat.thread == chat.thread)
                && q.user.as_deref().is_none_or(|u| u == user)
        });
        let (id, _) = open.next()?;
        if open.next().is_some() {
            return None;
        }
        let id = id.clone();
        let q = pending.remove(&id)?;
        Some(Self::answer(q, text.to_string()))
    }

    /// Whether the question a button `cl:<id>:<n>` belongs to waits here.
    pub fn holds(&self, data: &str) -> bool {
        data.strip_prefix("cl:")
            .and_then(|rest| rest.split_once(':'))
            .is_some_and(|(id, _)| self.lock().contains_key(id))
    }

    /// Answers by button data `cl:<id>:<n>` pressed by `user`, or says why
    /// the press does not count.
    pub fn answer_button(&self, data: &str, user: &str) -> Result<Answered, &'static str> {
        let rest = data.strip_prefix("cl:").ok_or("This button is not mine.")?;
        let (id, n) = rest
            .split_once(':')
            .ok_or("This question does not exist.")?;
        let mut pending = self.lock();
        let q = pending
            .get(id)
            .ok_or("This question was already answered.")?;
        if q.user.as_deref().is_some_and(|u| u != user) {
            return Err("Only the person asked can answer.");
        }
        let choice = n
            .parse::<usize>()
            .ok()
            .and_then(|i| q.choices.get(i))
            .cloned()
            .ok_or("Unknown choice.")?;
        let q = pending
            .remove(id)
            .ok_or("This question was already answered.")?;
        Ok(Self::answer(q, choice))
    }
}

/// Asks a session's questions in its chat, through its platform.
pub struct PortQuestions {
    /// Where the platform's port is found.
    pub platforms: Arc<Platforms>,
    /// The open questions.
    pub questions: Arc<Questions>,
    /// The chat of the session.
    pub chat: ChatRef,
    /// Who may answer when the turn that asks does not say (`None`:
    /// anyone in the chat).
    pub user: Option<String>,
}

#[async_trait::async_trait]
impl ClarifyBroker for PortQuestions {
    async fn ask(
        &self,
        question: &str,
        choices: &[String],
        to: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<String, Unanswered> {
        // In a session several people share, the one whose turn asks
        // answers (a turn without a sender: the first); a broker for
        // anyone stays so.
        let to = to.filter(|u| !u.is_empty());
        let to = self.user.as_deref().map(|first| to.unwrap_or(first));
        let port = self
            .platforms
            .port(&self.chat.platform)
            .ok_or_else(|| Unanswered::NotConnected(self.chat.platform.to_string()))?;
        let asked = self.questions.ask(&self.chat, to, question, choices);
        let prompt = Prompt {
            id: asked.id.clone(),
            kind: PromptKind::Question,
            text: format!("❓ {question}"),
            choices: choices
                .iter()
                .enumerate()
                .map(|(i, c)| PromptChoice {
                    label: clip(c, LABEL_CHARS),
                    data: button_data(&asked.id, i),
                    style: ChoiceStyle::Plain,
                })
                .collect(),
            fallback: "Reply with your answer.".into(),
        };
        match retrying(|| port.ask(&self.chat, &prompt)).await {
            Ok(message) => self.questions.shown(&asked.id, message),
            Err(err) => {
                self.questions.drop_question(&asked);
                return Err(Unanswered::NotShown(err.to_string()));
            }
        }
        self.questions.wait(asked, cancel).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat() -> ChatRef {
        ChatRef {
            platform: "chat".into(),
            chat: "C1".into(),
            thread: None,
        }
    }

    #[tokio::test]
    async fn buttons_and_text_answer_only_for_the_person_asked() {
        let q = Questions::default();
        let asked = q.ask(&chat(), Some("U1"), "which?", &["a".into(), "b".into()]);
        q.shown(&asked.id, "m1".into());
        let data = button_data(&asked.id, 1);
        assert_eq!(
            q.answer_button(&data, "U2"),
            Err("Only the person asked can answer.")
        );
        assert!(q.answer_text(&chat(), "U2", "a").is_none());
        let answered = q.answer_button(&data, "U1").unwrap();
        assert_eq!(answered.answer, "b");
        assert_eq!(answered.message.as_deref(), Some("m1"));
        assert_eq!(answered.outcome, "❓ which?\n→ b");
        let cancel = CancellationToken::new();
        assert_eq!(q.wait(asked, &cancel).await, Ok("b".into()));
        assert_eq!(
            q.answer_button(&data, "U1"),
            Err("This question was already answered.")
        );
        let asked = q.ask(&chat(), Some("U1"), "free?", &[]);
        assert!(q.answer_text(&chat(), "U1", "free text").is_some());
        assert_eq!(q.wait(asked, &cancel).await, Ok("free text".into()));

        // Two questions open for U1 in the chat: words answer neither.
        let first = q.ask(&chat(), Some("U1"), "pause A?", &["Allow".into()]);
        let second = q.ask(&chat(), Some("U1"), "delete B?", &["Allow".into()]);
        assert!(q.answer_text(&chat(), "U1", "Allow").is_none());
        q.drop_question(&first);
        assert!(q.answer_text(&chat(), "U1", "Deny").is_some());
        assert_eq!(q.wait(second, &cancel).await, Ok("Deny".into()));

        // Asked in a thread: words elsewhere in the chat answer nothing.
        let thread = |t: &str| ChatRef {
            thread: Some(t.into()),
            ..chat()
        };
        let asked = q.ask(&thread("T1"), Some("U1"), "which?", &[]);
        assert!(q.answer_text(&thread("T2"), "U1", "hello all").is_none());
        assert!(q.answer_text(&chat(), "U1", "hello all").is_none());
        assert!(q.answer_text(&thread("T1"), "U1", "this one").is_some());
        assert_eq!(q.wait(asked, &cancel).await, Ok("this one".into()));
    }
}
