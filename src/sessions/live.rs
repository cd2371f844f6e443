//! Answers that stream into the chat. While a model call runs, what it
//! writes (its reasoning hidden) goes into messages: the first of it is
//! sent, later text edits that message at the pace the platform allows,
//! and text past a message's length continues in another one. A call
//! after tools starts new messages below, so the answer always comes
//! after whatever the tools asked in the chat (an approval, a question);
//! what earlier calls said stays where it was. With `progress` on, a
//! status message says which tool is at work (once one runs longer than
//! the edit pace) and is deleted when the answer is in.
//!
//! The last call's messages and the status message are stored with the
//! event from the first one sent, and the turn's final answer is written
//! into them from the outbox (see [`outbox`](super::outbox)): one answer
//! shows as one set of messages, whether it was streamed, cut off by a
//! crash and run again, or sent whole.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::manager::Inner;
use crate::agent::AgentEvents;
use crate::agent::message::ToolCall;
use crate::agent::provider::{Live, TextSink};
use crate::agent::reasoning::shown_so_far;
use crate::config::Progress;
use crate::platform::{Activity, ChatRef, InboundEvent, Platform, PlatformError, Platforms};
use crate::render::clip;
use crate::store::{Draft as StoredDraft, Store};
use crate::tools::{ApprovalHook, ApprovalVerdict, ToolContext};

/// Longest a 429 is waited out while streaming (the answer is sent at
/// the end anyway).
const LONGEST_WAIT: Duration = Duration::from_secs(30);
/// How long the end of a turn waits for a draft's last request.
const FINISH_WAIT: Duration = Duration::from_secs(10);

/// What a draft shows: the model call's text so far and the tools at
/// work.
#[derive(Debug, Clone, Default)]
struct View {
    /// Counts model calls.
    call: u64,
    text: String,
    /// The previous call's whole text, when it wrote any.
    before: Option<(u64, String)>,
    /// Running tools with their emoji, latest last.
    running: Vec<(ToolCall, &'static str)>,
    /// One of them waits for a person to approve a command.
    waiting: bool,
}

/// The status line of a tool at work, behind its emoji (`waiting`: for an
/// approval).
fn status(
    progress: Progress,
    (call, emoji): &(ToolCall, &'static str),
    waiting: bool,
) -> Option<String> {
    let doing = match call.name.as_str() {
        "terminal" | "process" => "running a command",
        "read_file" => "reading a file",
        "write_file" | "patch" => "editing a file",
        "search_files" => "searching files",
        "web_search" => "searching the web",
        "web_extract" => "reading a web page",
        "vision_analyze" => "looking at an image",
        "memory" => "checking notes",
        "session_search" => "searching past conversations",
        "todo" => "planning",
        "clarify" => "asking you",
        "send_message" => "sending a message",
        "delegate_task" => "handing part of the work over",
        _ => "using a tool",
    };
    let doing = if waiting {
        format!("{doing} — waiting for approval")
    } else {
        doing.to_string()
    };
    match progress {
        Progress::Off => None,
        Progress::Compact => Some(format!("{emoji} _{doing}…_")),
        Progress::Verbose => {
            let what = serde_json::from_str::<serde_json::Value>(&call.arguments)
                .ok()
                .and_then(|args| {
                    args.as_object()?
                        .values()
                        .find_map(|v| v.as_str().map(str::to_string))
                })
                .map(|arg| clip(&arg.replace(['`', '\n'], " "), 80))
                .unwrap_or_default();
            let name = call.name.replace('`', "'");
            Some(if what.is_empty() {
                format!("{emoji} _{doing}…_ `{name}`")
            } else {
                format!("{emoji} _{doing}…_ `{name}` `{what}`")
            })
        }
    }
}

/// Where a turn's text and tool activity go while it runs.
#[derive(Debug)]
pub(super) struct Feed {
    view: watch::Sender<View>,
    progress: Progress,
}

impl Feed {
    /// A model call starts: its text goes into new messages.
    fn next_call(&self) {
        self.view.send_modify(|v| {
            if !v.text.trim().is_empty() {
                v.before = Some((v.call, std::mem::take(&mut v.text)));
            }
            v.text.clear();
            v.call += 1;
        });
    }
}

/// The approvals of a session's commands, telling its draft while one
/// waits for a person.
pub(super) struct Watched {
    hook: Arc<dyn ApprovalHook>,
    draft: Slot,
}

impl Watched {
    pub(super) fn new(hook: Arc<dyn ApprovalHook>, draft: Slot) -> Self {
        Self { hook, draft }
    }

    fn waiting(&self, on: bool) {
        let feed = self.draft.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(feed) = feed {
            feed.view.send_if_modified(|v| {
                let changed = v.waiting != on;
                v.waiting = on;
                changed
            });
        }
    }
}

#[async_trait::async_trait]
impl ApprovalHook for Watched {
    async fn review(&self, command: &str, ctx: &ToolContext) -> ApprovalVerdict {
        // A command that needs no one is decided before the draft looks.
        self.waiting(true);
        let verdict = self.hook.review(command, ctx).await;
        self.waiting(false);
        verdict
    }
}

impl TextSink for Feed {
    fn restart(&self) {
        self.view.send_if_modified(|v| {
            let had = !v.text.is_empty();
            v.text.clear();
            had
        });
    }

    fn text(&self, delta: &str) {
        if !delta.is_empty() {
            self.view.send_modify(|v| v.text.push_str(delta));
        }
    }
}

/// The tool activity and streamed text of a session's turns, handed to
/// its conversation as its [`AgentEvents`]; the worker attaches each
/// streamed turn's draft to it.
pub(super) struct Watcher {
    platforms: Arc<Platforms>,
    chat: ChatRef,
    draft: Slot,
}

/// The draft of the turn that runs, if it streams.
pub(super) type Slot = Arc<Mutex<Option<Arc<Feed>>>>;

impl Watcher {
    pub(super) fn new(platforms: Arc<Platforms>, chat: ChatRef, draft: Slot) -> Self {
        Self {
            platforms,
            chat,
            draft,
        }
    }

    fn feed(&self) -> Option<Arc<Feed>> {
        self.draft.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn show(&self, activity: Activity) {
        if let Some(port) = self.platforms.port(&self.chat.platform) {
            port.activity(&self.chat, &activity);
        }
    }
}

impl AgentEvents for Watcher {
    fn tool_started(&self, call: &ToolCall, emoji: &'static str) {
        if let Some(feed) = self.feed()
            && feed.progress != Progress::Off
        {
            feed.view
                .send_modify(|v| v.running.push((call.clone(), emoji)));
        }
        self.show(Activity::ToolStarted {
            name: call.name.clone(),
            emoji,
            arguments: clip(&call.arguments, 120),
        });
    }

    fn tool_finished(&self, call: &ToolCall, result: &str) {
        if let Some(feed) = self.feed() {
            feed.view.send_if_modified(|v| {
                let before = v.running.len();
                v.running.retain(|(c, _)| c.id != call.id);
                v.running.len() != before
            });
        }
        self.show(Activity::ToolFinished {
            name: call.name.clone(),
            ok: !result.starts_with("{\"error\""),
            chars: result.len(),
        });
    }

    fn answer_started(&self) -> Option<Live> {
        let feed = self.feed()?;
        feed.next_call();
        Some(Live(feed as Arc<dyn TextSink>))
    }
}

/// What a draft showed when its turn ended.
#[derive(Debug, Default)]
pub(super) struct Shown {
    /// The last call's messages and the status message.
    pub(super) draft: StoredDraft,
    /// When its last request was made.
    pub(super) last: Option<Instant>,
    /// The edit pace of its chat.
    pub(super) pace: Duration,
    /// Storing `draft` as its event's failed.
    unsaved: bool,
}

impl Shown {
    /// Waits until the chat may be edited again.
    pub(super) async fn paced(&self) {
        if let Some(last) = self.last {
            tokio::time::sleep_until(last + self.pace).await;
        }
    }
}

/// A turn's answer streaming into its chat.
pub(super) struct Draft {
    inbox_id: i64,
    feed: Arc<Feed>,
    slot: Slot,
    stop: CancellationToken,
    task: JoinHandle<Shown>,
}

impl Draft {
    /// Streams the answer to `event` (inbox event `inbox_id`) into its
    /// chat through `slot`, when its platform streams there. A turn run
    /// again (`again`) writes into the messages its first run showed.
    pub(super) async fn open(
        inner: &Inner,
        inbox_id: i64,
        event: &InboundEvent,
        again: bool,
        slot: &Slot,
    ) -> Option<Self> {
        let profile = inner.platforms().profile(&event.platform)?;
        if !profile.live.stream {
            return None;
        }
        let port = inner.platforms().port(&event.platform)?;
        let chat = event.chat();
        let pace = port.pace(&chat, event.message_id.as_deref())?;
        let draft = if again {
            super::reclaim::reclaimed(&inner.store, port.as_ref(), &chat, inbox_id)
                .await
                .unwrap_or_default()
        } else {
            StoredDraft::default()
        };
        // A draft's id is non-zero, within 32 bits.
        let preview = port
            .previews(&chat)
            .then(|| (inbox_id - 1).rem_euclid(i64::from(i32::MAX)) + 1);
        let (view, rx) = watch::channel(View::default());
        let feed = Arc::new(Feed {
            view,
            progress: profile.live.progress,
        });
        let stop = CancellationToken::new();
        let stream = Stream {
            port,
            store: inner.store.clone(),
            inbox_id,
            chat,
            reply_to: event.message_id.clone(),
            pace,
            shown: vec![String::new(); draft.messages.len()],
            progress: profile.live.progress,
            status_shown: None,
            draft,
            unsaved: false,
            last: None,
            preview,
            sends: 0,
        };
        let task = inner.tracker.spawn(stream.run(rx, stop.clone()));
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(feed.clone());
        Some(Self {
            inbox_id,
            feed,
            slot: slot.clone(),
            stop,
            task,
        })
    }

    /// Ends the stream: what it showed, stored so the answer finds it.
    pub(super) async fn finish(self, inner: &Inner) -> Shown {
        *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = None;
        drop(self.feed);
        self.stop.cancel();
        let abort = self.task.abort_handle();
        let shown = match tokio::time::timeout(FINISH_WAIT, self.task).await {
            Ok(Ok(shown)) => shown,
            Ok(Err(_)) => Shown::default(),
            Err(_) => {
                abort.abort();
                Shown::default()
            }
        };
        if shown.unsaved {
            save(inner, self.inbox_id, &shown.draft).await;
        }
        shown
    }
}

/// Stores `draft` as inbox event `inbox_id`'s, waiting out a storage
/// outage (the answer's commit would wait for it anyway).
async fn save(inner: &Inner, inbox_id: i64, draft: &StoredDraft) {
    loop {
        match inner.store.set_draft(inbox_id, draft).await {
            Ok(()) => return,
            Err(err) if inner.store.failed_from_away(&err).await => {
                if !inner.store.until_back(&inner.stop).await {
                    return;
                }
            }
            Err(err) => {
                tracing::warn!(inbox.id = inbox_id, error = %err, "could not store the streamed answer's messages");
                return;
            }
        }
    }
}

/// The task that shows a draft.
struct Stream {
    port: Arc<dyn Platform>,
    store: Store,
    inbox_id: i64,
    chat: ChatRef,
    reply_to: Option<String>,
    pace: Duration,
    /// The current call's messages and the status message.
    draft: StoredDraft,
    /// What each of the call's messages shows; a message a first run sent
    /// shows something unknown, so it is written on the first change.
    shown: Vec<String>,
    progress: Progress,
    /// The tool call the status message is about, and what it shows.
    status_shown: Option<(String, String)>,
    /// Storing `draft` as the event's failed.
    unsaved: bool,
    last: Option<Instant>,
    /// The preview shown instead of messages (its id), where the
    /// platform shows one.
    preview: Option<i64>,
    /// Messages sent so far, which makes each send's key its own.
    sends: u64,
}

/// A sent message's id, which later edits need.
fn sent(sent: Result<String, PlatformError>) -> Result<String, PlatformError> {
    match sent {
        Ok(id) if id.is_empty() => Err(PlatformError::Rejected("no message id to edit".into())),
        other => other,
    }
}

/// Why a stream stops showing.
enum Halt {
    /// The turn ended.
    Stopped,
    /// The platform refused: the answer is sent whole at the end.
    Refused,
}

impl Stream {
    async fn run(mut self, mut rx: watch::Receiver<View>, stop: CancellationToken) -> Shown {
        let mut call = 0;
        let mut again = false;
        loop {
            if !again {
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => break,
                    changed = rx.changed() => if changed.is_err() { break },
                }
            }
            let view = rx.borrow_and_update().clone();
            again = match self.update(&view, &mut call, &stop).await {
                Ok(again) => again,
                Err(Halt::Stopped) => break,
                Err(Halt::Refused) => {
                    tracing::debug!(platform = %self.chat.platform, "streaming stopped; the answer is sent whole");
                    break;
                }
            };
        }
        Shown {
            draft: self.draft,
            last: self.last,
            pace: self.pace,
            unsaved: self.unsaved,
        }
    }

    /// Brings the chat up to `view`; true when it should be looked at
    /// again without waiting for a change (a wait was asked for, or a
    /// status is due).
    async fn update(
        &mut self,
        view: &View,
        call: &mut u64,
        stop: &CancellationToken,
    ) -> Result<bool, Halt> {
        if let Some(draft) = self.preview {
            if view.call != *call {
                // What the call before said stays in the chat, as it does
                // when the answer streams into messages.
                if *call != 0
                    && let Some((before, text)) = &view.before
                    && *before == *call
                {
                    for piece in self.port.split(&shown_so_far(text)) {
                        self.paced(stop).await?;
                        let said = self.port.send(&self.chat, None, &piece).await;
                        self.last = Some(Instant::now());
                        if let Err(err) = said {
                            return self.failed(err, stop).await;
                        }
                    }
                    self.shown.clear();
                }
                *call = view.call;
            }
            return self.show_preview(view, draft, stop).await;
        }
        if view.call != *call {
            // The first call writes into what a first run of the turn
            // showed; a later one starts below what the one before said.
            if *call != 0 {
                if let Some((before, text)) = &view.before
                    && *before == *call
                {
                    // The last words of the previous call.
                    let pieces = self.port.split(&shown_so_far(text));
                    if self.write(&pieces, stop).await? {
                        return Ok(true);
                    }
                }
                self.draft.messages.clear();
                self.shown.clear();
                self.store_draft().await;
            }
            *call = view.call;
        }
        let pieces = self.port.split(&shown_so_far(&view.text));
        if self.write(&pieces, stop).await? {
            return Ok(true);
        }
        self.status(view, stop).await
    }

    /// Shows the call's latest words (or, before any, the tool at work)
    /// in the preview `draft`. Should the platform refuse previews, the
    /// answer streams into messages instead.
    async fn show_preview(
        &mut self,
        view: &View,
        draft: i64,
        stop: &CancellationToken,
    ) -> Result<bool, Halt> {
        let pieces = self.port.split(&shown_so_far(&view.text));
        let line = match pieces.last().filter(|p| !p.trim().is_empty()) {
            Some(piece) => piece.clone(),
            None => match view
                .running
                .last()
                .and_then(|running| status(self.progress, running, view.waiting))
            {
                Some(line) => line,
                None => return Ok(false),
            },
        };
        if self.shown.first() == Some(&line) {
            return Ok(false);
        }
        self.paced(stop).await?;
        let result = self.port.preview(&self.chat, draft, &line).await;
        let before = self.last.replace(Instant::now());
        match result {
            Ok(()) => {
                self.shown = vec![line];
                Ok(false)
            }
            Err(err @ PlatformError::RateLimited { .. }) => self.failed(err, stop).await,
            Err(PlatformError::Unavailable(why)) => {
                // Tried again in a pace.
                tracing::debug!(platform = %self.chat.platform, error = %why, "a preview failed");
                let pace = self.pace;
                self.failed(PlatformError::RateLimited { retry_after: pace }, stop)
                    .await
            }
            Err(err) => {
                tracing::debug!(platform = %self.chat.platform, error = %err, "previews refused; the answer streams into messages");
                self.preview = None;
                self.shown.clear();
                self.last = before;
                Ok(true)
            }
        }
    }

    /// Shows `pieces` in the call's messages; true when a rate limit was
    /// waited out (the view may be newer now).
    async fn write(&mut self, pieces: &[String], stop: &CancellationToken) -> Result<bool, Halt> {
        for (i, piece) in pieces.iter().enumerate() {
            if self.shown.get(i) == Some(piece) {
                continue;
            }
            self.paced(stop).await?;
            let result = match self.draft.messages.get(i) {
                Some(id) => self.port.edit(&self.chat, id, piece).await,
                None => {
                    let reply_to = self.reply_to.clone().filter(|_| i == 0);
                    match self.send_new(Some(i), reply_to.as_deref(), piece).await {
                        Ok(id) => {
                            self.draft.messages.push(id);
                            self.store_draft().await;
                            Ok(())
                        }
                        Err(err) => Err(err),
                    }
                }
            };
            self.last = Some(Instant::now());
            match result {
                Ok(()) => {
                    if self.shown.len() <= i {
                        self.shown.resize(i + 1, String::new());
                    }
                    self.shown[i] = piece.clone();
                }
                Err(err) => return self.failed(err, stop).await,
            }
        }
        Ok(false)
    }

    /// Shows the tool at work in the status message, once it has run for
    /// a pace (quick tools show nothing).
    async fn status(&mut self, view: &View, stop: &CancellationToken) -> Result<bool, Halt> {
        let Some((id, line)) = view.running.last().and_then(|running| {
            status(self.progress, running, view.waiting).map(|line| (&running.0.id, line))
        }) else {
            return Ok(false);
        };
        let line = &line;
        if self
            .status_shown
            .as_ref()
            .is_some_and(|(shown_id, shown_line)| shown_id == id && shown_line == line)
        {
            return Ok(false);
        }
        if self.draft.status.is_none() && !self.waited_for(id) {
            // Look again in a pace: still running, it gets a status.
            self.status_shown = Some((id.clone(), String::new()));
            tokio::select! {
                biased;
                _ = stop.cancelled() => return Err(Halt::Stopped),
                _ = tokio::time::sleep(self.pace) => {}
            }
            return Ok(true);
        }
        self.paced(stop).await?;
        let result = match &self.draft.status {
            Some(message) => self.port.edit(&self.chat, message, line).await,
            None => match self.send_new(None, None, line).await {
                Ok(message) => {
                    self.draft.status = Some(message);
                    self.store_draft().await;
                    Ok(())
                }
                Err(err) => Err(err),
            },
        };
        self.last = Some(Instant::now());
        match result {
            Ok(()) => {
                self.status_shown = Some((id.clone(), line.clone()));
                Ok(false)
            }
            Err(err) => self.failed(err, stop).await,
        }
    }

    /// Whether the status of call `id` was held back a pace already.
    fn waited_for(&self, id: &str) -> bool {
        self.status_shown
            .as_ref()
            .is_some_and(|(shown, _)| shown == id)
    }

    /// Sends a new message of the draft (at `place`, or the status
    /// message), under a key stored first: a crash before its id is
    /// stored leaves the key, by which the restart finds it.
    async fn send_new(
        &mut self,
        place: Option<usize>,
        reply_to: Option<&str>,
        text: &str,
    ) -> Result<String, PlatformError> {
        let now = crate::store::now_ms();
        let key = super::reclaim::key(self.inbox_id, now, self.sends);
        self.sends += 1;
        self.draft.sending = Some(super::reclaim::sending(&key, place, now));
        self.store_draft().await;
        let result = sent(self.port.send_keyed(&self.chat, reply_to, text, &key).await);
        self.draft.sending = None;
        if result.is_err() {
            // Nothing to look for after a crash.
            self.store_draft().await;
        }
        result
    }

    async fn store_draft(&mut self) {
        self.unsaved = match self.store.set_draft(self.inbox_id, &self.draft).await {
            Ok(()) => false,
            Err(err) => {
                tracing::debug!(inbox.id = self.inbox_id, error = %err, "draft not stored yet");
                true
            }
        };
    }

    async fn paced(&self, stop: &CancellationToken) -> Result<(), Halt> {
        if let Some(at) = self.last {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return Err(Halt::Stopped),
                _ = tokio::time::sleep_until(at + self.pace) => {}
            }
        }
        Ok(())
    }

    async fn failed(&mut self, err: PlatformError, stop: &CancellationToken) -> Result<bool, Halt> {
        match err {
            PlatformError::RateLimited { retry_after } => {
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => return Err(Halt::Stopped),
                    _ = tokio::time::sleep(retry_after.min(LONGEST_WAIT)) => {}
                }
                Ok(true)
            }
            err => {
                tracing::debug!(platform = %self.chat.platform, error = %err, "a streamed message was refused");
                Err(Halt::Refused)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_by_mode() {
        let call = (
            ToolCall {
                id: "c1".into(),
                name: "terminal".into(),
                arguments: r#"{"command":"cargo test"}"#.into(),
                extra: None,
            },
            "💻",
        );
        assert_eq!(status(Progress::Off, &call, true), None);
        assert_eq!(
            status(Progress::Compact, &call, false).unwrap(),
            "💻 _running a command…_"
        );
        assert_eq!(
            status(Progress::Verbose, &call, false).unwrap(),
            "💻 _running a command…_ `terminal` `cargo test`"
        );
        assert_eq!(
            status(Progress::Compact, &call, true).unwrap(),
            "💻 _running a command — waiting for approval…_"
        );
    }
}
