//! A platform port that records what the sessions and the broker send
//! through it, for the suites that drive them without a platform server.

use std::sync::Mutex;
use std::time::Duration;

use switchboard::platform::{Capabilities, ChatRef, Platform, PlatformError, Prompt};
use tokio::sync::Notify;

/// A prompt as shown, with the approval's parts read back from its text.
#[derive(Debug, Clone)]
pub struct Shown {
    /// Where it was shown.
    pub chat: ChatRef,
    /// The prompt itself.
    pub prompt: Prompt,
    /// Its id.
    pub approval_id: String,
    /// The command in its code block.
    pub command: String,
    /// The reasons after `Reason:`.
    pub reasons: Vec<String>,
}

impl Shown {
    fn of(chat: &ChatRef, prompt: &Prompt) -> Self {
        let mut command = Vec::new();
        let mut fenced = false;
        let mut reasons = Vec::new();
        for line in prompt.text.lines() {
            if line.starts_with("```") {
                fenced = !fenced;
            } else if fenced {
                command.push(line);
            } else if let Some(r) = line.strip_prefix("Reason: ") {
                reasons = r.split("; ").map(str::to_string).collect();
            }
        }
        Self {
            chat: chat.clone(),
            prompt: prompt.clone(),
            approval_id: prompt.id.clone(),
            command: command.join("\n"),
            reasons,
        }
    }
}

/// Records sends, prompts and closings.
#[derive(Default)]
pub struct FakePort {
    /// (chat, text) of every message sent.
    pub sent: Mutex<Vec<(String, String)>>,
    /// Every prompt shown.
    pub shown: Mutex<Vec<Shown>>,
    /// (message, outcome) of every prompt closed.
    pub closed: Mutex<Vec<(String, String)>>,
    changed: Notify,
}

#[async_trait::async_trait]
impl Platform for FakePort {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            text_limit: 4096,
            buttons: true,
            edits: true,
            threads: true,
            downloads: false,
        }
    }

    async fn send(
        &self,
        to: &ChatRef,
        _reply_to: Option<&str>,
        text: &str,
    ) -> Result<String, PlatformError> {
        let id = {
            let mut sent = self.sent.lock().unwrap();
            sent.push((to.chat.clone(), text.to_string()));
            format!("s{}", sent.len())
        };
        self.changed.notify_waiters();
        Ok(id)
    }

    async fn ask(&self, at: &ChatRef, prompt: &Prompt) -> Result<String, PlatformError> {
        let id = {
            let mut shown = self.shown.lock().unwrap();
            shown.push(Shown::of(at, prompt));
            format!("m{}", shown.len())
        };
        self.changed.notify_waiters();
        Ok(id)
    }

    async fn edit(&self, _at: &ChatRef, message: &str, outcome: &str) -> Result<(), PlatformError> {
        self.closed
            .lock()
            .unwrap()
            .push((message.to_string(), outcome.to_string()));
        self.changed.notify_waiters();
        Ok(())
    }
}

impl FakePort {
    /// Waits until `n` prompts were shown; returns the n-th. Fails after
    /// a minute of real time, counted by a thread rather than by tokio's
    /// timers (paused time, which skips ahead whenever the runtime idles,
    /// would end the wait at once).
    pub async fn prompt(&self, n: usize) -> Shown {
        let (expire, expired) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(60));
            let _ = expire.send(());
        });
        tokio::pin!(expired);
        loop {
            let notified = self.changed.notified();
            if let Some(p) = self.shown.lock().unwrap().get(n - 1) {
                return p.clone();
            }
            tokio::select! {
                () = notified => {}
                _ = &mut expired => panic!(
                    "prompt {n} not shown within 60 s; shown: {:?}; sent: {:?}",
                    self.shown.lock().unwrap().iter().map(|s| &s.prompt.text).collect::<Vec<_>>(),
                    self.texts(),
                ),
            }
        }
    }

    /// The prompts closed so far.
    pub fn closed(&self) -> Vec<(String, String)> {
        self.closed.lock().unwrap().clone()
    }

    /// Waits up to 20 s until `n` messages were sent; returns them.
    pub async fn wait(&self, n: usize) -> Vec<(String, String)> {
        self.until(|a| {
            let sent = a.sent.lock().unwrap();
            (sent.len() >= n).then(|| sent.clone())
        })
        .await
    }

    /// Waits up to 20 s until `check` finds something.
    pub async fn until<T>(&self, check: impl Fn(&Self) -> Option<T>) -> T {
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let notified = self.changed.notified();
                if let Some(found) = check(self) {
                    return found;
                }
                notified.await;
            }
        })
        .await
        .expect("the adapter saw it in time")
    }

    /// The texts sent so far.
    pub fn texts(&self) -> Vec<String> {
        self.sent
            .lock()
            .unwrap()
            .iter()
            .map(|(_, t)| t.clone())
            .collect()
    }
}
