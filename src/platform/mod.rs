//! The platform port: everything the rest of the daemon knows about a chat
//! platform or the webhook receiver. It imports no adapter; adapters
//! implement [`Platform`] and describe themselves with a [`Profile`], and
//! the sessions, approvals and tools talk to whichever is connected
//! through one [`Platforms`] registry.
//!
//! - [`InboundEvent`]: what an adapter hands on (translated, not judged).
//! - [`Profile`]: what a platform is — its access rules, toolsets, whether
//!   its sessions have a human, how its session keys are made.
//! - [`Platform`]: what a connected platform does — send, show that a turn
//!   is running, ask a prompt with choices and close it, fetch a file.
//! - [`ChatCommand`]: the one parser of `/new`, `/approve`, … in any chat.

mod backoff;
mod command;
mod download;
mod event;
mod limit;
mod profile;
mod registry;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use backoff::Backoff;
pub use command::{ApproveScope, ChatCommand};
pub use download::{MAX_DOWNLOAD_BYTES, download};
pub use event::{Actor, Attachment, AttachmentKind, ChatKind, InboundEvent, Revision};
pub use limit::RateLimiter;
pub use profile::{AccessRules, KeyScheme, Preset, Profile, STILL};
pub use registry::Platforms;

/// The webhook receiver's platform name. Forges (reviews, CI triage) act
/// only on its events, whether or not the receiver is built in.
pub const WEBHOOK: &str = "webhook";

/// A platform's name: `telegram`, `discord`, `slack`, `webhook`, `cli`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct PlatformId(String);

impl PlatformId {
    /// The id named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for PlatformId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for PlatformId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for PlatformId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for PlatformId {
    fn from(name: &str) -> Self {
        Self(name.to_string())
    }
}

impl From<String> for PlatformId {
    fn from(name: String) -> Self {
        Self(name)
    }
}

impl PartialEq<str> for PlatformId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for PlatformId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// A place messages go: a chat (channel, group, DM, webhook route) and,
/// where the platform has them, a thread in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatRef {
    /// The platform.
    pub platform: PlatformId,
    /// Chat or channel id (for the webhook receiver: the route name).
    pub chat: String,
    /// Thread, topic, Slack `thread_ts` or webhook entity.
    pub thread: Option<String>,
}

/// What a platform can show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Longest message, in the platform's own unit.
    pub text_limit: usize,
    /// Prompts can carry buttons.
    pub buttons: bool,
    /// Sent messages can be edited.
    pub edits: bool,
    /// Chats have threads.
    pub threads: bool,
    /// Attached pictures and documents are saved into the session's
    /// workspace through [`Platform::fetch`] (else the agent gets their
    /// links). Audio is fetched to be heard wherever `fetch` works.
    pub downloads: bool,
}

/// How a prompt's choice looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChoiceStyle {
    /// The expected answer.
    Primary,
    /// The answer that stops something.
    Danger,
    /// Any other.
    Plain,
}

/// One answer a prompt offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptChoice {
    /// Button label.
    pub label: String,
    /// Data the press carries back (at most 48 bytes).
    pub data: String,
    /// Looks.
    pub style: ChoiceStyle,
}

/// Approval or question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKind {
    /// A command waits for approval.
    Approval,
    /// The agent asks the user.
    Question,
}

/// A message with choices: an approval request or a clarify question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// Approval or question id (also inside each choice's data).
    pub id: String,
    /// Which of the two.
    pub kind: PromptKind,
    /// The message, Markdown.
    pub text: String,
    /// Its choices, in order; may be empty for a free-text question.
    pub choices: Vec<PromptChoice>,
    /// How to answer by text, for platforms without buttons.
    pub fallback: String,
}

/// Tool activity a platform may show while a turn runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Activity {
    /// A tool is about to run.
    ToolStarted {
        /// Tool name.
        name: String,
        /// The emoji the tool declares.
        emoji: &'static str,
        /// Its arguments, shortened.
        arguments: String,
    },
    /// A tool finished.
    ToolFinished {
        /// Tool name.
        name: String,
        /// Whether it succeeded.
        ok: bool,
        /// Size of its result.
        chars: usize,
    },
}

/// Why a platform call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlatformError {
    /// Flood control: try again after the given wait.
    #[error("rate limited; retry after {}s", retry_after.as_secs())]
    RateLimited {
        /// How long the platform asks to wait.
        retry_after: Duration,
    },
    /// The chat, message or file does not exist (any more).
    #[error("not found: {0}")]
    NotFound(String),
    /// The platform refused the request (bad id, no permission, too long).
    #[error("rejected: {0}")]
    Rejected(String),
    /// The platform could not be reached or failed on its side.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// Most waits [`retrying`] sits out.
const RATE_LIMIT_TRIES: u32 = 3;
/// Longest single wait [`retrying`] accepts.
const LONGEST_WAIT: Duration = Duration::from_secs(60);

/// Runs one platform request, waiting out [`PlatformError::RateLimited`]
/// (at most three times, each wait capped at a minute).
pub async fn retrying<T, F, Fut>(mut request: F) -> Result<T, PlatformError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, PlatformError>>,
{
    let mut tries = 0;
    loop {
        match request().await {
            Err(PlatformError::RateLimited { retry_after }) if tries < RATE_LIMIT_TRIES => {
                tries += 1;
                tracing::debug!(
                    retry_after_ms = retry_after.as_millis() as u64,
                    "platform rate limit; waiting"
                );
                tokio::time::sleep(retry_after.min(LONGEST_WAIT)).await;
            }
            other => return other,
        }
    }
}

/// A connected platform, as the sessions, approvals and tools use it.
/// Text is Markdown; each platform renders and splits it its own way.
#[async_trait::async_trait]
pub trait Platform: Send + Sync {
    /// What this platform can show.
    fn capabilities(&self) -> Capabilities;

    /// Sends `text` to `to`, replying to message `reply_to` where the
    /// platform does that; returns the id of the last message sent.
    async fn send(
        &self,
        to: &ChatRef,
        reply_to: Option<&str>,
        text: &str,
    ) -> Result<String, PlatformError>;

    /// [`send`](Self::send), with `key` naming this message among every
    /// one the gateway sends: a platform that recognises a message sent
    /// again under the same key (Discord's enforced nonce) shows it once,
    /// so sending again what a crash left unconfirmed cannot duplicate it.
    /// Elsewhere it is `send`.
    async fn send_keyed(
        &self,
        to: &ChatRef,
        reply_to: Option<&str>,
        text: &str,
        _key: &str,
    ) -> Result<String, PlatformError> {
        self.send(to, reply_to, text).await
    }

    /// A turn for `message` in `at` is running (`on`, repeated every few
    /// seconds) or has ended.
    async fn working(
        &self,
        _at: &ChatRef,
        _message: Option<&str>,
        _on: bool,
    ) -> Result<(), PlatformError> {
        Ok(())
    }

    /// Shows a prompt with its choices; returns its message id.
    async fn ask(&self, at: &ChatRef, prompt: &Prompt) -> Result<String, PlatformError>;

    /// Edits `message` (an id [`send`](Self::send) or [`ask`](Self::ask)
    /// returned) to `text`, Markdown that fits one message, and removes its
    /// choices if it had any. Editing a message to the text it shows
    /// already succeeds.
    async fn edit(&self, at: &ChatRef, message: &str, text: &str) -> Result<(), PlatformError>;

    /// Deletes `message`, which the gateway sent.
    async fn delete(&self, _at: &ChatRef, _message: &str) -> Result<(), PlatformError> {
        Err(PlatformError::Rejected(
            "this platform does not delete messages".into(),
        ))
    }

    /// `text` (Markdown) in the pieces an answer streaming into a chat
    /// shows in, each one message [`edit`](Self::edit) takes whole.
    fn split(&self, text: &str) -> Vec<String> {
        crate::render::segments::segments(
            text,
            self.capabilities().text_limit,
            crate::render::chunk::chars,
        )
    }

    /// How often a message in `at` may be edited while the answer to
    /// message `answering` streams into it; `None` where answers cannot
    /// stream (no edits, or not there).
    fn pace(&self, _at: &ChatRef, _answering: Option<&str>) -> Option<Duration> {
        None
    }

    /// The message a [`send_keyed`](Self::send_keyed) under `key` (at
    /// `sent_ms`, Unix ms) left in `at` when a crash lost its id, where the
    /// platform can find it: by the key it carries (Slack's message
    /// metadata), or by sending again under the key, which returns the
    /// message sent before (Discord's enforced nonce, for a few minutes; a
    /// placeholder when none was). `None` elsewhere.
    async fn reclaim(
        &self,
        _at: &ChatRef,
        _key: &str,
        _sent_ms: i64,
    ) -> Result<Option<String>, PlatformError> {
        Ok(None)
    }

    /// Whether an answer streaming into `at` is shown as a preview that is
    /// no message of the chat (Telegram's drafts in private chats): a
    /// crash mid-stream leaves nothing behind, and the answer is sent as
    /// one message when done.
    fn previews(&self, _at: &ChatRef) -> bool {
        false
    }

    /// Shows `text` as the preview `draft` of an answer streaming into
    /// `at` (see [`previews`](Self::previews)).
    async fn preview(&self, _at: &ChatRef, _draft: i64, _text: &str) -> Result<(), PlatformError> {
        Err(PlatformError::Rejected(
            "this platform shows no previews".into(),
        ))
    }

    /// Downloads `file` into directory `into` (as `file.name`, at most
    /// [`MAX_DOWNLOAD_BYTES`]); returns the saved path.
    async fn fetch(&self, _file: &Attachment, _into: &Path) -> Result<PathBuf, PlatformError> {
        Err(PlatformError::Rejected(
            "this platform does not download files".into(),
        ))
    }

    /// Tool activity during a turn in `at`, for platforms that show it.
    fn activity(&self, _at: &ChatRef, _activity: &Activity) {}
}
