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

/// Someone on the forge as a payload names them: their login and, when it
/// is given, their account's number, which stays with the account when the
/// login is renamed or taken by someone else (`github:#583231`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct User {
    /// The login (`user.login`, GitLab's `username`).
    pub login: String,
    /// The account's number (`user.id`, GraphQL's `databaseId`).
    pub account: Option<u64>,
}

impl User {
    /// The user whose login is at `login` and number at `number` in `v`
    /// (dotted paths).
    pub fn read(v: &Value, login: &str, number: &str) -> Self {
        use crate::render::template::{lookup, lookup_str};
        Self {
            login: lookup_str(v, login).unwrap_or_default().to_string(),
            account: lookup(v, number).and_then(Value::as_u64),
        }
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
    /// The target branch's commit the change was last compared with,
    /// where the repository's settings are read.
    pub settings_at: String,
    /// Draft, author, target.
    pub info: ChangeInfo,
}

/// How a thread of the bot's was set aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetAside {
    /// Resolved by someone: not raised again.
    Resolved,
    /// Answered "won't fix": not raised again, and, by an approver, no
    /// longer gating.
    Declined,
}

/// A finding of the bot's that someone set aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dismissed {
    /// The file it is on.
    pub path: String,
    /// The bot's comment.
    pub said: String,
    /// Who set it aside.
    pub by: User,
    /// How.
    pub how: SetAside,
}

/// Whether a reply to a finding declines it: its first line outside
/// quotes starts with "won't fix" or the like.
pub fn declines(reply: &str) -> bool {
    let Some(line) = reply
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('>'))
    else {
        return false;
    };
    let line = line.to_lowercase().replace(['\u{2019}', '`'], "'");
    let line = line.trim_start_matches(|c: char| !c.is_alphanumeric());
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
    .any(|said| line.starts_with(said))
}

/// Every way a thread was set aside by someone other than the bot (`bot`,
/// its first comment's author): resolved by `resolver`, declined by each
/// reply (author, text) that [`declines`] it.
pub fn dismissals<'a>(
    bot: &str,
    resolver: Option<User>,
    replies: impl Iterator<Item = (User, &'a str)>,
) -> Vec<(User, SetAside)> {
    let other = |who: &User| !who.login.is_empty() && who.login != bot;
    let mut all: Vec<(User, SetAside)> = resolver
        .filter(other)
        .map(|by| (by, SetAside::Resolved))
        .into_iter()
        .collect();
    all.extend(
        replies
            .filter(|(who, text)| other(who) && declines(text))
            .map(|(who, _)| (who, SetAside::Declined)),
    );
    all
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

    /// Whether the author of a change described by `info` is a bot, as
    /// the forge's account says (not its name).
    async fn author_is_bot(&self, _scope: &Scope, info: &ChangeInfo) -> Result<bool, Failure> {
        Ok(info.bot)
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_reply_that_opens_with_a_decline_declines() {
        assert!(declines("Won't fix: inputs are small."));
        assert!(declines("wontfix"));
        assert!(declines(
            "  **False positive** — the index is checked above."
        ));
        assert!(!declines("This is not a false positive, please fix."));
        assert!(!declines("Is this by design?"));
        assert!(!declines("> won't fix\nNo, fix it before merging."));
        assert!(!declines(""));
        let user = |login: &str| User {
            login: login.into(),
            account: None,
        };
        let replies = [("bot", "won't fix"), ("ann", "Won't fix."), ("bob", "lgtm")]
            .map(|(who, said)| (user(who), said));
        assert_eq!(
            dismissals("bot", Some(user("carol")), replies.into_iter()),
            vec![
                (user("carol"), SetAside::Resolved),
                (user("ann"), SetAside::Declined)
            ]
        );
        assert!(dismissals("bot", Some(user("bot")), std::iter::empty()).is_empty());
    }
}
