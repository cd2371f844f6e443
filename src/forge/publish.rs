//! A run's answer written back to the forge. For a review: the findings
//! that sit on diff lines and were not posted before become one review
//! with line comments, the summary comment is edited in place, the bot's
//! threads a push made outdated are resolved, and the check concludes.
//! For a triage or a question: a comment on the change (or the commit).
//!
//! Every write has an idempotency key (`<event>:<output>`) and a record in
//! `forge_outputs`; text posted carries the key in an HTML comment, so a
//! write that a crash left unconfirmed is found on the forge instead of
//! posted twice.

use serde_json::{Value, json};

use super::api::Failure;
use super::diff::commentable;
use super::findings::{self, Finding, Severity};
use super::host::{Anchored, Check};
use super::{Forge, Scope, Task};
use crate::config::BlockingConclusion;
use crate::platform::PlatformError;
use crate::store::OutputAttempt;

/// What a summary says when the model's findings could not be read.
const UNREAD: &str = "\n\n_The findings of this review could not be read (the model's findings block was missing or malformed, also when asked again), so none are on the diff and the check does not fail on them. The text above is what it wrote._";

/// Lines and characters of the log excerpt a triage carries.
const EXCERPT_LINES: usize = 15;
const EXCERPT_CHARS: usize = 3000;

/// The marker that names an output in the text posted.
fn marker(key: &str) -> String {
    format!("<!-- switchboard:{key} -->")
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(7)]
}

/// What a store error means for sending.
fn store_failure(err: crate::store::StoreError) -> PlatformError {
    PlatformError::Unavailable(format!("storage: {err}"))
}

/// `finding` as it can be posted on the diff in `files`: a span
/// (`start_line` to `line`) and a suggested replacement of it are kept
/// only when every line of the span is a line of the diff on the head's
/// side, so the suggestion replaces exactly the lines commented on;
/// otherwise the comment stays on its line, without the suggestion,
/// saying so.
fn spanned(mut finding: Finding, files: &[super::diff::FileDiff]) -> Finding {
    let lines = files
        .iter()
        .find(|f| f.path == finding.path)
        .and_then(|f| f.patch.as_deref())
        .map(commentable)
        .unwrap_or_default();
    let whole = (finding.first_line()..=finding.line)
        .all(|l| lines.contains_key(&(super::diff::Side::Right, l)));
    if finding.side == super::diff::Side::Right && whole {
        return finding;
    }
    finding.start_line = None;
    if finding.suggestion.take().is_some() {
        finding.body.push_str(
            "\n\n_A suggested change was left out: it would replace lines outside this change, or removed ones._",
        );
    }
    finding
}

/// The findings of a review, sorted by where they can go.
struct Sorted {
    /// New, on diff lines: posted as line comments (with fingerprints
    /// and the text of their line).
    inline: Vec<(Finding, String, String)>,
    /// Posted before on the same code.
    repeated: usize,
    /// Not on a line of the diff, or past the comment limit: listed in
    /// the summary.
    listed: Vec<Finding>,
    /// Left out by the repository's settings (its quiet profile, its
    /// ignored paths).
    quieted: usize,
    /// Set aside on the change before (resolved, answered "won't fix").
    dismissed: usize,
}

impl Forge {
    async fn record(&self, key: &str, entity: &str, kind: &str, attempt: OutputAttempt<'_>) {
        if let Err(err) = self
            .store
            .forge_output_attempt(key, (&self.route, entity, kind), attempt)
            .await
        {
            tracing::warn!(route = %self.route, key, error = %err, "forge output not recorded");
        }
    }

    /// Runs `write` as output `key` unless it was posted already; records
    /// how it went; the forge's id for it. `write` is told the id known
    /// from an earlier attempt, and whether there was one (a write whose
    /// answer a crash lost is then looked for by its marker first).
    async fn output<F, Fut>(
        &self,
        key: &str,
        entity: &str,
        kind: &str,
        write: F,
    ) -> Result<String, PlatformError>
    where
        F: FnOnce(Option<String>, bool) -> Fut,
        Fut: Future<Output = Result<(String, &'static str), Failure>>,
    {
        let known = self.store.forge_output(key).await.map_err(store_failure)?;
        if let Some(done) = known
            .as_ref()
            .filter(|o| matches!(o.status.as_str(), "posted" | "updated"))
        {
            return Ok(done.remote_id.clone().unwrap_or_default());
        }
        let tried = known.is_some();
        if !tried {
            self.store
                .forge_output_intent(key, (&self.route, entity, kind))
                .await
                .map_err(store_failure)?;
        }
        let remote = known.and_then(|o| o.remote_id);
        match write(remote, tried).await {
            Ok((id, status)) => {
                self.record(
                    key,
                    entity,
                    kind,
                    OutputAttempt {
                        status,
                        remote_id: Some(&id),
                        error: None,
                    },
                )
                .await;
                Ok(id)
            }
            Err(failure) => {
                let status = if failure.retry { "pending" } else { "failed" };
                tracing::warn!(route = %self.route, key, error = %failure.message, "forge output failed");
                self.record(
                    key,
                    entity,
                    kind,
                    OutputAttempt {
                        status,
                        remote_id: None,
                        error: Some(&failure.message),
                    },
                )
                .await;
                Err(failure.platform())
            }
        }
    }

    /// Opens the review's check on its head as the run starts (in
    /// progress), when the route gates merges.
    pub async fn begin(&self, event_id: &str, entity: &str, scope: &Scope) {
        let Some(head) = scope.head.clone().filter(|_| self.config.check_run) else {
            return;
        };
        let key = format!("{event_id}:check");
        let check = Check {
            key: key.clone(),
            conclusion: None,
            title: "Review in progress".into(),
            summary: String::new(),
            annotations: Vec::new(),
        };
        let host = self.host.clone();
        let scope = scope.clone();
        let opened = self
            .output(&key, entity, "check", |existing, _| async move {
                if existing.is_some() {
                    // Opened before a restart; it concludes at the end.
                    return Ok((existing.unwrap_or_default(), "pending"));
                }
                let id = host.check(&scope, &head, None, &check).await?;
                Ok((id, "pending"))
            })
            .await;
        if let Err(err) = opened {
            tracing::warn!(route = %self.route, entity, error = %err, "the review's check could not be opened");
        }
    }

    /// Writes the answer `text` of event `event_id`'s run on `entity`.
    pub async fn publish(
        &self,
        event_id: &str,
        entity: &str,
        text: &str,
    ) -> Result<(), PlatformError> {
        let scope = match self.scope_of(event_id).await {
            Ok(Some(scope)) => scope,
            Ok(None) => {
                return Err(PlatformError::Rejected(format!(
                    "event {event_id} has no forge scope"
                )));
            }
            Err(err) => return Err(PlatformError::Unavailable(err.to_string())),
        };
        if scope.task.reviews() {
            return self.review(event_id, entity, &scope, text).await;
        }
        if scope.task == Task::Describe {
            return self.describe(entity, &scope, text).await;
        }
        let key = format!("{event_id}:comment");
        let mut text = crate::render::clip(text, 60_000);
        if scope.task == Task::Triage {
            text.push_str(&self.failure_note(&scope).await);
        }
        let body = format!("{text}\n\n{}", marker(&key));
        let host = self.host.clone();
        let mark = marker(&key);
        self.output(&key, entity, "comment", |_, tried| async move {
            // A comment a crash left unconfirmed is found by its marker.
            if tried
                && let Ok(thread) = host.thread(&scope).await
                && thread.iter().any(|(_, _, b)| b.contains(&mark))
            {
                return Ok((String::new(), "posted"));
            }
            let id = host.comment(&scope, None, &body).await?;
            Ok((id, "posted"))
        })
        .await
        .map(|_| ())
    }

    /// Writes the description of change `entity`: one comment, edited in
    /// place by every later description.
    async fn describe(&self, entity: &str, scope: &Scope, text: &str) -> Result<(), PlatformError> {
        let key = format!("describe:{}:{entity}", self.route);
        let known = self.store.forge_output(&key).await.map_err(store_failure)?;
        let existing = known.as_ref().and_then(|o| o.remote_id.clone());
        if known.is_none() {
            self.store
                .forge_output_intent(&key, (&self.route, entity, "describe"))
                .await
                .map_err(store_failure)?;
        }
        let body = format!(
            "**Description of this change** (written by the bot from the diff; `@bot describe` writes it again)\n\n{}\n\n{}",
            crate::render::clip(text, 60_000),
            marker(&key)
        );
        let status = if existing.is_some() {
            "updated"
        } else {
            "posted"
        };
        let written = self.host.comment(scope, existing.as_deref(), &body).await;
        let (id, error) = match &written {
            Ok(id) => (Some(id.as_str()), None),
            Err(failure) => (existing.as_deref(), Some(failure.message.as_str())),
        };
        let status = match &written {
            Ok(_) => status,
            Err(failure) if failure.retry => "pending",
            Err(_) => "failed",
        };
        let attempt = OutputAttempt {
            status,
            remote_id: id,
            error,
        };
        self.record(&key, entity, "describe", attempt).await;
        written.map(|_| ()).map_err(|failure| failure.platform())
    }

    /// What a triage says whatever the model wrote: the failing job and
    /// step as the event named them, and the log's error lines (its last
    /// lines when none reads as an error).
    async fn failure_note(&self, scope: &Scope) -> String {
        // Names come from strangers' CI files: kept to one plain line.
        let plain = |s: &str| crate::render::clip(&s.replace(['`', '\n', '\r'], " "), 200);
        let mut note = String::new();
        if let Some((job, step)) = &scope.failed {
            note.push_str(&format!("\n\n---\n**Failing job:** `{}`", plain(job)));
            if let Some(step) = step {
                note.push_str(&format!(", step `{}`", plain(step)));
            }
        }
        let job = match scope.job {
            Some(job) => Some(job),
            None => self
                .host
                .failed_job(scope)
                .await
                .ok()
                .flatten()
                .map(|(id, _)| id),
        };
        let Some(raw) = (match job {
            Some(job) => self.host.job_log(scope, job).await.ok(),
            None => None,
        }) else {
            return note;
        };
        let lines = super::tools::log_lines(&raw);
        let errors: Vec<&str> = lines
            .iter()
            .map(String::as_str)
            .filter(|l| super::tools::is_error_line(l))
            .collect();
        let picked = if errors.is_empty() {
            lines.iter().map(String::as_str).collect()
        } else {
            errors
        };
        let excerpt = picked[picked.len().saturating_sub(EXCERPT_LINES)..].join("\n");
        let excerpt = crate::render::clip(&excerpt, EXCERPT_CHARS);
        let fence = super::host::fence_for(&excerpt);
        note.push_str(&format!(
            "\n\n<details><summary>Log excerpt</summary>\n\n{fence}text\n{excerpt}\n{fence}\n</details>"
        ));
        note
    }

    async fn sort(
        &self,
        scope: &Scope,
        entity: &str,
        found: Vec<Finding>,
    ) -> Result<Sorted, PlatformError> {
        let files = self
            .host
            .change_files(scope)
            .await
            .map_err(|f| f.platform())?;
        let known = self
            .store
            .forge_fingerprints(&self.route, entity)
            .await
            .map_err(store_failure)?;
        let mut sorted = Sorted {
            inline: Vec::new(),
            repeated: 0,
            listed: Vec::new(),
            quieted: 0,
            dismissed: 0,
        };
        let limit = scope.settings.max_comments(self.config.max_inline_comments);
        for finding in found {
            let anchor = files
                .iter()
                .find(|f| f.path == finding.path)
                .and_then(|f| f.patch.as_deref())
                .map(commentable)
                .and_then(|lines| lines.get(&(finding.side, finding.line)).cloned());
            let Some(line_text) = anchor.filter(|_| self.config.inline) else {
                sorted.listed.push(finding);
                continue;
            };
            let finding = spanned(finding, &files);
            let print = findings::fingerprint(&finding, &line_text);
            if known.contains(&print) || sorted.inline.iter().any(|(_, p, _)| *p == print) {
                sorted.repeated += 1;
            } else if sorted.inline.len() >= limit {
                sorted.listed.push(finding);
            } else {
                sorted.inline.push((finding, print, line_text));
            }
        }
        Ok(sorted)
    }

    async fn review(
        &self,
        event_id: &str,
        entity: &str,
        scope: &Scope,
        text: &str,
    ) -> Result<(), PlatformError> {
        let head = match &scope.head {
            Some(head) => head.clone(),
            None => self.host.state(scope).await.map_err(|f| f.platform())?.head,
        };
        let (summary, found) = findings::split(text);
        // Without a findings block the review is not known to be whole.
        let complete = found.is_some();
        // The answers asked again (to read more of the change) found
        // things too.
        let found = found.map(|mut found| {
            for earlier in &scope.earlier {
                if let (_, Some(more)) = findings::split(earlier) {
                    findings::merge(&mut found, more);
                }
            }
            found
        });
        // What the repository's settings leave out counts nowhere: not in
        // the comments, the annotations or the gate.
        let ignored = scope.settings.ignored();
        let (found, quieted): (Vec<Finding>, Vec<Finding>) = found
            .unwrap_or_default()
            .into_iter()
            .partition(|f| scope.settings.posts(&ignored, f));
        let own = self.own_comments(entity).await;
        let dismissed = self.dismissed(scope, entity, &own).await;
        let super::setaside::Sifted {
            kept: found,
            gating,
            set_aside,
        } = self.sift(scope, found, &dismissed);
        let blocking = found
            .iter()
            .chain(&gating)
            .any(|f| f.severity == Severity::Blocking);
        let annotations: Vec<Value> = found.iter().chain(&gating).map(annotation).collect();
        let mut sorted = self.sort(scope, entity, found).await?;
        sorted.quieted = quieted.len();
        sorted.dismissed = set_aside;
        let at = Reviewed {
            event_id,
            entity,
            scope,
            head: &head,
        };
        // 1. The review with its line comments, when there is anything new.
        if !sorted.inline.is_empty() {
            self.post_inline(&at, &sorted).await?;
        }
        // 2. The bot's threads a push made outdated.
        self.resolve_outdated(scope, entity, &own).await;
        // Settings that could not be read are said once per change.
        if let Some(why) = &scope.settings_error {
            self.settings_problem(scope, entity, why).await;
        }
        // 3. The summary, one comment per change, edited in place.
        self.post_summary(&at, (&summary, complete), &sorted)
            .await?;
        self.store
            .forge_reviewed(&self.route, entity, &head)
            .await
            .map_err(store_failure)?;
        // 4. The gate, last: once it completes, the review is whole.
        if self.config.check_run {
            let verdict = Verdict {
                blocking,
                complete,
                summary: &summary,
                annotations,
            };
            self.gate(&at, verdict).await?;
        }
        tracing::info!(route = %self.route, entity, head = short(&head), inline = sorted.inline.len(), repeated = sorted.repeated, "review posted");
        Ok(())
    }

    /// Says on the change, once for each distinct problem, that the
    /// repository's settings file could not be read (`why`) and the
    /// route's defaults applied.
    async fn settings_problem(&self, scope: &Scope, entity: &str, why: &str) {
        let said = findings::line_hash(why);
        let key = format!("settings:{}:{entity}:{said}", self.route);
        let why: String = why
            .chars()
            .map(|c| match c {
                '`' => '\'',
                c if c.is_control() => ' ',
                c => c,
            })
            .collect();
        let why = crate::render::clip(&why, 1000);
        let body = format!(
            "**The review settings in `{}` (base branch) could not be read:** {why}\n\nThis review used the route's defaults.\n\n{}",
            super::settings::FILE,
            marker(&key)
        );
        let host = self.host.clone();
        let scope = scope.clone();
        let posted = self
            .output(&key, entity, "comment", |_, _| async move {
                Ok((host.comment(&scope, None, &body).await?, "posted"))
            })
            .await;
        if let Err(err) = posted {
            tracing::warn!(route = %self.route, error = %err, "the settings problem could not be said");
        }
    }

    /// Posts the review with its line comments and remembers each
    /// finding's fingerprint.
    async fn post_inline(&self, at: &Reviewed<'_>, sorted: &Sorted) -> Result<(), PlatformError> {
        let Reviewed {
            event_id,
            entity,
            scope,
            head,
        } = *at;
        let key = format!("{event_id}:review");
        // Each comment carries its own key too (GitLab posts them one
        // by one, and skips those already there).
        let comments: Vec<Anchored> = sorted
            .inline
            .iter()
            .enumerate()
            .map(|(i, (f, _, text))| Anchored {
                path: f.path.clone(),
                line: f.line,
                side: f.side,
                body: format!(
                    "**{}**: {}{}\n\n{}",
                    f.severity.as_str(),
                    f.body,
                    f.suggestion.as_deref().map_or(String::new(), |s| format!(
                        "\n\n{}",
                        self.host.suggestion(s, f.line - f.first_line())
                    )),
                    marker(&format!("{key}#{i} line:{}", findings::line_hash(text)))
                ),
                start_line: f.start_line,
            })
            .collect();
        let body = format!(
            "Review of {} — {} comment(s) on the diff; the summary is in the bot's comment.\n\n{}",
            short(head),
            comments.len(),
            marker(&key)
        );
        let host = self.host.clone();
        let (scope2, head2, key2) = (scope.clone(), head.to_string(), key.clone());
        let review_id = self
            .output(&key, entity, "review", |existing, tried| async move {
                // Posted before a crash cut the record short?
                if tried
                    && existing.is_none()
                    && let Some(id) = host.find_review(&scope2, &marker(&key2)).await?
                {
                    return Ok((id, "posted"));
                }
                let id = host.post_review(&scope2, &head2, &body, &comments).await?;
                Ok((id, "posted"))
            })
            .await?;
        let posted = match self.host.review_comments(scope, &review_id).await {
            Ok(posted) => posted,
            Err(err) => {
                tracing::warn!(route = %self.route, error = %err, "the review's comments could not be read back");
                Vec::new()
            }
        };
        for (finding, print, _) in &sorted.inline {
            let id = posted
                .iter()
                .find(|(_, path, line)| *path == finding.path && *line == finding.line)
                .map(|(id, _, _)| id.as_str());
            self.store
                .forge_finding(
                    &self.route,
                    entity,
                    print,
                    &finding.path,
                    finding.line,
                    id,
                    head,
                )
                .await
                .map_err(store_failure)?;
        }
        Ok(())
    }

    /// The ids of the bot's line comments on `entity` (none when they
    /// cannot be read).
    async fn own_comments(&self, entity: &str) -> Vec<String> {
        self.store
            .forge_comment_ids(&self.route, entity)
            .await
            .unwrap_or_else(|err| {
                tracing::warn!(error = %err, "the bot's comments could not be read");
                Vec::new()
            })
    }

    /// Resolves the bot's threads (those starting with a comment of `own`)
    /// a push made outdated.
    async fn resolve_outdated(&self, scope: &Scope, entity: &str, own: &[String]) {
        if own.is_empty() {
            return;
        }
        if let Err(err) = self.host.resolve_outdated(scope, own).await {
            tracing::warn!(route = %self.route, entity, error = %err, "outdated threads not resolved");
        }
    }

    /// Posts the summary (or edits it in place); `complete`: the review's
    /// findings were read (when not, it says so).
    async fn post_summary(
        &self,
        at: &Reviewed<'_>,
        (summary, complete): (&str, bool),
        sorted: &Sorted,
    ) -> Result<(), PlatformError> {
        let Reviewed {
            event_id,
            entity,
            scope,
            head,
        } = *at;
        let mut text = format!("**Review of {}**\n\n{summary}", short(head));
        match &scope.coverage {
            Some(coverage) => text.push_str(&format!("\n\n_{}_", coverage.said())),
            None => text.push_str("\n\n_This review did not read the change's diff._"),
        }
        if !sorted.listed.is_empty() {
            text.push_str("\n\n**Also noted**\n");
            for f in &sorted.listed {
                text.push_str(&format!(
                    "- `{}:{}` ({}): {}\n",
                    f.path,
                    f.line,
                    f.severity.as_str(),
                    f.body
                ));
            }
        }
        if !complete {
            text.push_str(UNREAD);
        }
        if sorted.quieted > 0 {
            text.push_str(&format!(
                "\n\n_{} finding(s) below the repository's review profile or on paths it ignores are not shown._",
                sorted.quieted
            ));
        }
        if sorted.dismissed > 0 {
            text.push_str(&format!(
                "\n\n_{} finding(s) resolved or answered \"won't fix\" on this change before are not raised again._",
                sorted.dismissed
            ));
        }
        if sorted.repeated > 0 {
            text.push_str(&format!(
                "\n\n_{} finding(s) already commented on earlier are not repeated._",
                sorted.repeated
            ));
        }
        let summary_key = format!("{event_id}:summary");
        let body = format!(
            "{}\n\n{}",
            crate::render::clip(&text, 60_000),
            marker(&summary_key)
        );
        let existing = self
            .store
            .bot_comment(entity)
            .await
            .map_err(store_failure)?;
        let host = self.host.clone();
        let scope2 = scope.clone();
        let id = self
            .output(&summary_key, entity, "summary", |_, _| async move {
                let status = if existing.is_some() {
                    "updated"
                } else {
                    "posted"
                };
                let id = host.comment(&scope2, existing.as_deref(), &body).await?;
                Ok((id, status))
            })
            .await?;
        if !id.is_empty() {
            self.store
                .set_bot_comment(entity, &id)
                .await
                .map_err(store_failure)?;
        }
        Ok(())
    }

    /// Completes the review's check run with its conclusion.
    async fn gate(&self, at: &Reviewed<'_>, verdict: Verdict<'_>) -> Result<(), PlatformError> {
        let Reviewed {
            event_id,
            entity,
            scope,
            head,
        } = *at;
        let Verdict {
            blocking,
            complete,
            summary,
            annotations,
        } = verdict;
        let conclusion = match (self.config.blocking_conclusion, blocking, complete) {
            (BlockingConclusion::Failure, true, _) => "failure",
            (BlockingConclusion::Failure, false, true) => "success",
            _ => "neutral",
        };
        let key = format!("{event_id}:check");
        let opened = self.store.forge_output(&key).await.map_err(store_failure)?;
        let existing = opened.and_then(|o| o.remote_id).filter(|id| !id.is_empty());
        let check = Check {
            key: key.clone(),
            conclusion: Some(conclusion),
            title: if blocking {
                "Blocking findings".into()
            } else if complete {
                "Reviewed".into()
            } else {
                "Review incomplete: no findings were reported".into()
            },
            summary: crate::render::clip(summary, 60_000),
            annotations,
        };
        let host = self.host.clone();
        let (scope2, head2) = (scope.clone(), head.to_string());
        // The opening record is pending; its conclusion completes it.
        let done = format!("{key}:done");
        self.output(&done, entity, "check", |_, _| async move {
            let id = host
                .check(&scope2, &head2, existing.as_deref(), &check)
                .await?;
            Ok((id, "updated"))
        })
        .await?;
        Ok(())
    }
}

/// What a review is of.
#[derive(Clone, Copy)]
struct Reviewed<'a> {
    event_id: &'a str,
    entity: &'a str,
    scope: &'a Scope,
    head: &'a str,
}

/// What a review found, for its gate.
struct Verdict<'a> {
    blocking: bool,
    complete: bool,
    summary: &'a str,
    annotations: Vec<Value>,
}

/// A finding as a check-run annotation.
fn annotation(f: &Finding) -> Value {
    json!({
        "path": f.path,
        "start_line": f.line,
        "end_line": f.line,
        "annotation_level": match f.severity {
            Severity::Blocking => "failure",
            Severity::Warning => "warning",
            Severity::Note => "notice",
        },
        "message": crate::render::clip(&f.body, 60_000),
    })
}

/// The instructions a run of `task` gets after the event's prompt.
pub fn instructions(task: Task) -> String {
    match task {
        Task::Review | Task::FullReview => format!(
            "Read the change with forge_diff (it shows line numbers to comment on) and, where \
             you need context, files with forge_file; forge_thread shows the discussion so far. \
             Write a concise review: what the change does, the risks, concrete suggestions. \
             Do not repeat points already made in the discussion.\n\n{}",
            findings::FORMAT
        ),
        Task::Triage => "Read the failing job's log with forge_ci_log (the tail comes first) \
             and, where needed, the code with forge_file and forge_diff. Answer with the failing \
             step, a short excerpt of the log that shows the error, the likely cause and the fix."
            .into(),
        Task::Ask => "Answer the question about this change; forge_diff, forge_file and \
             forge_thread read it."
            .into(),
        Task::Describe => "Read the change with forge_diff and, where you need context, files \
             with forge_file. Write a description of it for its reviewers, in Markdown, with \
             exactly these sections: `## Summary` (what the change does and why, in two or three \
             sentences), `## Walkthrough` (one bullet per group of related files: what changed \
             in them), `## Risks` (what could break, what to test). Describe only what the diff \
             shows; do not review it."
            .into(),
    }
}
