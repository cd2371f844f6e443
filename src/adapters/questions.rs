//! Clarify questions waiting in a chat: answered by a button (`cl:<id>:<n>`)
//! or by the asked person's next message there, whichever comes first.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// How long a question waits for its answer.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(600);

struct Pending {
    chat: String,
    user: Option<String>,
    choices: Vec<String>,
    tx: oneshot::Sender<String>,
}

/// The open questions of one adapter.
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

impl Questions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a question in `chat` for `user` (anyone there when `None`).
    pub fn ask(&self, chat: &str, user: Option<&str>, choices: &[String]) -> Asked {
        let id = crate::store::new_id()[..16].to_string();
        let (tx, rx) = oneshot::channel();
        self.lock().insert(
            id.clone(),
            Pending {
                chat: chat.to_string(),
                user: user.map(str::to_string),
                choices: choices.to_vec(),
                tx,
            },
        );
        Asked { id, rx }
    }

    /// Waits for the answer of `asked`, up to [`ANSWER_WITHIN`] or until
    /// `cancel`.
    pub async fn wait(&self, asked: Asked, cancel: &CancellationToken) -> Result<String, String> {
        let Asked { id, rx } = asked;
        let answer = tokio::select! {
            a = rx => a.map_err(|_| "the question was dropped".to_string()),
            _ = cancel.cancelled() => Err("cancelled".to_string()),
            _ = tokio::time::sleep(ANSWER_WITHIN) => Err("no answer within 10 minutes".to_string()),
        };
        self.lock().remove(&id);
        answer
    }

    /// Forgets a question that could not be shown.
    pub fn drop_question(&self, asked: &Asked) {
        self.lock().remove(&asked.id);
    }

    /// Takes `text` from `user` in `chat` as the answer to a question
    /// waiting there; false when none is (or `text` is a command).
    pub fn answer_text(&self, chat: &str, user: &str, text: &str) -> bool {
        let t = text.trim_start();
        if t.starts_with('/') || t.starts_with('!') {
            return false;
        }
        let mut pending = self.lock();
        let id = pending
            .iter()
            .find(|(_, q)| q.chat == chat && q.user.as_deref().is_none_or(|u| u == user))
            .map(|(id, _)| id.clone());
        match id.and_then(|id| pending.remove(&id)) {
            Some(q) => q.tx.send(text.to_string()).is_ok(),
            None => false,
        }
    }

    /// Answers by button data `cl:<id>:<n>` pressed by `user`: the chosen
    /// text, or why the press does not count.
    pub fn answer_button(&self, data: &str, user: &str) -> Result<String, &'static str> {
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
        if let Some(q) = pending.remove(id) {
            let _ = q.tx.send(choice.clone());
        }
        Ok(choice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn buttons_and_text_answer_only_for_the_person_asked() {
        let q = Questions::default();
        let asked = q.ask("C1", Some("U1"), &["a".into(), "b".into()]);
        let data = button_data(&asked.id, 1);
        assert_eq!(
            q.answer_button(&data, "U2"),
            Err("Only the person asked can answer.")
        );
        assert!(!q.answer_text("C1", "U2", "a"));
        assert!(
            !q.answer_text("C1", "U1", "/stop"),
            "commands stay commands"
        );
        assert_eq!(q.answer_button(&data, "U1"), Ok("b".into()));
        let cancel = CancellationToken::new();
        assert_eq!(q.wait(asked, &cancel).await, Ok("b".into()));
        assert_eq!(
            q.answer_button(&data, "U1"),
            Err("This question was already answered.")
        );
        let asked = q.ask("C1", Some("U1"), &[]);
        assert!(q.answer_text("C1", "U1", "free text"));
        assert_eq!(q.wait(asked, &cancel).await, Ok("free text".into()));
    }
}
