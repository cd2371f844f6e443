//! What a forge does for a review or a triage, whichever forge it is:
//! read the change, its files, CI logs and discussion; post a review with
//! comments on lines, a summary comment, a gate.

use async_trait::async_trait;
use serde_json::Value;

use super::api::Failure;
use super::diff::{FileDiff, Side};
use super::scope::{ChangeInfo, Scope};

/// The `id` of a forge object, a number or a string.
pub fn id_of(v: &Value) -> Option<String> {
    match v.get("id")? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The change (pull / merge request) a run is about, or why there is none.
pub fn change(scope: &Scope) -> Result<u64, Failure> {
    scope
        .change
        .ok_or_else(|| Failure::fatal("this run is about no pull or merge request"))
}

/// Two heads compared.
#[derive(Debug, Clone, Default)]
pub struct Compared {
    /// The newer head descends from the older (no force-push between).
    pub descends: bool,
    /// Commits between them.
    pub commits: u64,
    /// The files changed between them.
    pub files: Vec<FileDiff>,
}

/// A change as the forge has it now.
#[derive(Debug, Clone)]
pub struct ChangeState {
    /// Its base SHA.
    pub base: String,
    /// Its head SHA.
    pub head: String,
    /// Draft, author, target.
    pub info: ChangeInfo,
}

/// A finding of the bot's that someone set aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dismissed {
    /// The file it is on.
    pub path: String,
    /// The bot's comment.
    pub said: String,
    /// Who resolved it or answered "won't fix".
    pub by: String,
}

/// Whether a reply to a finding declines it.
pub fn declines(reply: &str) -> bool {
    let reply = reply.to_lowercase().replace(['\u{2019}', '`'], "'");
    [
        "won't fix",
        "wont fix",
        "wontfix",
        "will not fix",
        "not going to fix",
        "false positive",
        "not a bug",
        "by design",
        "working as intended",
    ]
    .iter()
    .any(|said| reply.contains(said))
}

/// The dismissal of a thread: it was resolved by `resolver`, or a reply
/// (author, text) declines it, anyone's but the bot's (`bot`, the
/// thread's first author).
pub fn dismissal<'a>(
    bot: &str,
    resolver: Option<&'a str>,
    mut replies: impl Iterator<Item = (&'a str, &'a str)>,
) -> Option<&'a str> {
    resolver
        .filter(|by| !by.is_empty() && *by != bot)
        .or_else(|| {
            replies
                .find(|(who, text)| *who != bot && declines(text))
                .map(|(who, _)| who)
        })
}

/// Whether `login` names a bot account: GitHub's Apps (`name[bot]`),
/// GitLab's project, group and service-account bots.
pub fn is_bot_login(login: &str) -> bool {
    let lower = login.to_ascii_lowercase();
    let gitlab_bot = |prefix: &str| {
        lower
            .strip_prefix(prefix)
            .and_then(|rest| rest.split_once("_bot"))
            .is_some_and(|(id, _)| !id.is_empty() && id.chars().all(|c| c.is_ascii_digit()))
    };
    lower.ends_with("[bot]")
        || gitlab_bot("project_")
        || gitlab_bot("group_")
        || lower.starts_with("service_account_")
}

/// A comment anchored on a diff line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchored {
    /// File path at the head.
    pub path: String,
    /// Line number on `side`.
    pub line: u64,
    /// Which version the line is in.
    pub side: Side,
    /// The comment, Markdown.
    pub body: String,
    /// The first line of a comment on several lines (same side).
    pub start_line: Option<u64>,
}

/// A fence longer than any run of backticks in `text`.
pub fn fence_for(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    "`".repeat(longest.max(2) + 1)
}

/// The state of the review's gate.
#[derive(Debug, Clone)]
pub struct Check {
    /// Names this run's check among every run's (its idempotency key).
    pub key: String,
    /// `None` while the review runs; then `success`, `neutral` or
    /// `failure`.
    pub conclusion: Option<&'static str>,
    /// One line.
    pub title: String,
    /// Markdown.
    pub summary: String,
    /// GitHub check-run annotations (`path`, `start_line`, `end_line`,
    /// `annotation_level`, `message`).
    pub annotations: Vec<Value>,
}

/// One forge, for the runs of one route.
#[async_trait]
pub trait Host: Send + Sync + std::fmt::Debug {
    /// Its name, for messages.
    fn name(&self) -> &'static str;

    /// A suggested change in a line comment, in the forge's own syntax:
    /// `replacement` stands for the commented line and the `above` lines
    /// before it.
    fn suggestion(&self, replacement: &str, above: u64) -> String;

    /// The change as it is now: its base and head SHAs, draft state,
    /// author and target branch.
    async fn state(&self, scope: &Scope) -> Result<ChangeState, Failure>;

    /// The files the change touches, with their patches.
    async fn change_files(&self, scope: &Scope) -> Result<Vec<FileDiff>, Failure>;

    /// What changed from `from` to `to`.
    async fn compare(&self, scope: &Scope, from: &str, to: &str) -> Result<Compared, Failure>;

    /// A file's text at `sha`.
    async fn file(&self, scope: &Scope, path: &str, sha: &str) -> Result<String, Failure>;

    /// The failed job of the scope's run (id and name), when it names no job.
    async fn failed_job(&self, scope: &Scope) -> Result<Option<(u64, String)>, Failure>;

    /// A job's log.
    async fn job_log(&self, scope: &Scope, job: u64) -> Result<String, Failure>;

    /// The change's discussion: (author, where, text), oldest first.
    async fn thread(&self, scope: &Scope) -> Result<Vec<(String, String, String)>, Failure>;

    /// The open change the scope's head belongs to, when it names none.
    async fn change_for(&self, scope: &Scope) -> Result<Option<u64>, Failure>;

    /// The id of a review (or review note) whose text holds `marker`.
    async fn find_review(&self, scope: &Scope, marker: &str) -> Result<Option<String>, Failure>;

    /// Posts a review of `head` with `comments` on its lines; its id.
    async fn post_review(
        &self,
        scope: &Scope,
        head: &str,
        body: &str,
        comments: &[Anchored],
    ) -> Result<String, Failure>;

    /// The line comments of review `review`: (id, path, line).
    async fn review_comments(
        &self,
        scope: &Scope,
        review: &str,
    ) -> Result<Vec<(String, String, u64)>, Failure>;

    /// The bot's threads (each starting with one of the comments `own`)
    /// that someone else resolved or answered "won't fix".
    async fn dismissed(&self, scope: &Scope, own: &[String]) -> Result<Vec<Dismissed>, Failure>;

    /// Resolves the threads a push made outdated that start with one of
    /// the comments `own`; how many.
    async fn resolve_outdated(&self, scope: &Scope, own: &[String]) -> Result<usize, Failure>;

    /// Writes the summary comment: `existing` edited in place, else a new
    /// one (on the change, or on the head commit when there is none); its id.
    async fn comment(
        &self,
        scope: &Scope,
        existing: Option<&str>,
        body: &str,
    ) -> Result<String, Failure>;

    /// Creates (`existing` none) or updates the gate on `head`; its id.
    async fn check(
        &self,
        scope: &Scope,
        head: &str,
        existing: Option<&str>,
        check: &Check,
    ) -> Result<String, Failure>;
}
