//! The forge read tools of one run: `forge_diff`, `forge_file`,
//! `forge_ci_log` and `forge_thread`. Each reads only what the run's
//! scope names (its repository, change, SHAs, job): no argument names a
//! repository, a ref or a job. Output is capped, paged, and fenced as
//! untrusted data like the event's payload.

use crate::render::terminal::strip_ansi;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::api::Failure;
use super::diff::{FileDiff, Weight, numbered};
use super::{Forge, Scope, Task};
use crate::agent::layer::ForgeDesk;
use crate::render::template::Renderer;
use crate::tools::{ToolError, arg_opt_str, arg_opt_u64, arg_str};

/// Characters of diff, file or log text one call returns.
const PAGE_CHARS: usize = 24_000;
/// Characters of one file's patch in the all-files view.
const FILE_CHARS: usize = 8_000;
/// Lines of a file one call returns.
const FILE_LINES: u64 = 400;
/// Log lines one call returns by default, and at most.
const LOG_LINES: u64 = 200;
const LOG_LINES_MAX: u64 = 2000;
/// Characters of an earlier answer kept for its findings.
const EARLIER_CHARS: usize = 100_000;
/// Error lines of a log listed before its tail.
const LOG_ERRORS: usize = 20;

/// The forge tools of one run.
pub struct Desk {
    forge: Arc<Forge>,
    scope: Scope,
    /// The run's event and the change it is about, to keep what it read.
    event: (String, String),
    /// What of the change the run read (a review's), once it read any.
    coverage: std::sync::Mutex<Option<super::scope::Coverage>>,
    /// The pages of each file shown alone (`path=`): a file counts as
    /// read once all of them were.
    pages: std::sync::Mutex<std::collections::HashMap<String, std::collections::BTreeSet<usize>>>,
    /// Answers asked again because files were left unread: their
    /// findings count with the last answer's.
    earlier: std::sync::Mutex<Vec<String>>,
}

impl Desk {
    /// The tools of the run of event `event` (about entity `.1`) with
    /// `scope` on `forge`.
    pub fn new(forge: Arc<Forge>, scope: Scope, event: (String, String)) -> Self {
        Self {
            forge,
            scope,
            event,
            coverage: Default::default(),
            pages: Default::default(),
            earlier: Default::default(),
        }
    }

    /// Notes that the run was shown the diff of `read` among the change's
    /// `files` to review (`skipped` by default and `ignored` left out),
    /// and keeps it with the run's scope.
    async fn covered(
        &self,
        (files, skipped): (&[&FileDiff], &[&FileDiff]),
        ignored: usize,
        read: &[&str],
    ) {
        if !self.scope.task.reviews() {
            return;
        }
        {
            let mut coverage = self.coverage.lock().unwrap_or_else(|e| e.into_inner());
            let coverage = coverage.get_or_insert_with(Default::default);
            coverage.files = files.iter().map(|f| f.path.clone()).collect();
            coverage.ignored = ignored;
            coverage.skipped.clear();
            for f in skipped {
                *coverage
                    .skipped
                    .entry(Weight::of(f).said().to_string())
                    .or_default() += 1;
            }
            coverage.read.extend(read.iter().map(|p| p.to_string()));
        }
        self.keep().await;
    }

    /// Keeps what the run read, and its earlier answers, with its scope.
    async fn keep(&self) {
        let scope = Scope {
            coverage: self
                .coverage
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            earlier: self
                .earlier
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            ..self.scope.clone()
        };
        let (event, entity) = &self.event;
        if let Err(err) = self.forge.keep_scope(event, entity, &scope).await {
            tracing::warn!(route = %self.forge.route, error = %err, "what the review read was not kept");
        }
    }

    /// The run's scope.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }
}

fn failed(err: Failure) -> ToolError {
    ToolError::Failed(err.message)
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// A log's lines as the tools show them: no colours, no timestamps.
pub fn log_lines(raw: &str) -> Vec<String> {
    strip_ansi(raw)
        .lines()
        .map(|l| untimed(l).to_string())
        .collect()
}

/// Whether a log line reports an error.
pub fn is_error_line(line: &str) -> bool {
    line.contains("##[error]") || line.starts_with("ERROR") || line.contains("error:")
}

/// A log line without GitHub's leading timestamp.
fn untimed(line: &str) -> &str {
    match line.split_once(' ') {
        Some((stamp, rest))
            if stamp.len() >= 20
                && stamp.ends_with('Z')
                && stamp.as_bytes().get(4) == Some(&b'-')
                && stamp.contains('T') =>
        {
            rest
        }
        _ => line,
    }
}

impl Desk {
    fn need_change(&self) -> Result<u64, ToolError> {
        self.scope
            .change
            .ok_or_else(|| ToolError::Failed("this run is about no pull or merge request".into()))
    }

    fn head(&self) -> Result<&str, ToolError> {
        self.scope
            .head
            .as_deref()
            .ok_or_else(|| ToolError::Failed("this run names no head commit".into()))
    }

    /// The files to show and what they are, without those the
    /// repository's settings ignore (never shown, by any tool).
    async fn files(&self) -> Result<(Vec<FileDiff>, String, usize), ToolError> {
        let (mut files, mut what) = self.changed().await?;
        let before = files.len();
        let ignored = self.scope.settings.ignored();
        files.retain(|f| !ignored.ignores(&f.path));
        let ignored = before - files.len();
        if ignored > 0 {
            what.push_str(&format!(
                " {ignored} file(s) the repository's settings ignore are left out."
            ));
        }
        Ok((files, what, ignored))
    }

    /// The files changed and what they are: the whole change, or what
    /// changed since the last review when the branch only moved forward.
    async fn changed(&self) -> Result<(Vec<FileDiff>, String), ToolError> {
        let n = self.need_change()?;
        let host = &self.forge.host;
        let whole = format!(
            "Pull request #{n} in {}, base {} → head {}.",
            self.scope.repo,
            short(self.scope.base.as_deref().unwrap_or("?")),
            short(self.scope.head.as_deref().unwrap_or("?"))
        );
        if let (Task::Review, Some(since), Some(head)) =
            (self.scope.task, &self.scope.since, &self.scope.head)
        {
            let compared = host
                .compare(&self.scope, since, head)
                .await
                .map_err(failed)?;
            if compared.descends {
                return Ok((
                    compared.files,
                    format!(
                        "{whole} Incremental review: the {} commit(s) since {}, the head reviewed last time. \
                         Only these changes are shown; review them.",
                        compared.commits,
                        short(since)
                    ),
                ));
            }
            let files = host.change_files(&self.scope).await.map_err(failed)?;
            return Ok((
                files,
                format!(
                    "{whole} The branch was rewritten since the last review (force-push; {} is gone \
                     from it): this is the whole change, review all of it.",
                    short(since)
                ),
            ));
        }
        let files = host.change_files(&self.scope).await.map_err(failed)?;
        Ok((files, format!("{whole} The whole change.")))
    }

    async fn diff(&self, args: &Value) -> Result<String, ToolError> {
        let (mut files, what, ignored) = self.files().await?;
        // Most important first; what a reviewer skims last, or (by
        // default) only listed.
        files.sort_by_key(Weight::of);
        let skim = self.scope.settings.skip_generated;
        let (review, skipped): (Vec<&FileDiff>, Vec<&FileDiff>) =
            files.iter().partition(|f| !(skim && Weight::skimmed(f)));
        let sets = (review.as_slice(), skipped.as_slice());
        let page = arg_opt_u64(args, "page")?.unwrap_or(1).max(1) as usize;
        let mut fence = Renderer::new();
        let mut out = format!("{what}\n{}\n", fence.tool_note());
        let numbers = "Lines show their number in the new file; `L<n>` is a removed line's \
                       number in the old file.";
        if let Some(path) = arg_opt_str(args, "path") {
            let file = files.iter().find(|f| f.path == path).ok_or_else(|| {
                ToolError::InvalidArgs(format!("{path} is not among the changed files"))
            })?;
            let Some(patch) = &file.patch else {
                return Ok(format!(
                    "{out}{path} ({}) has no textual diff (binary or too large); forge_file reads it.",
                    file.status
                ));
            };
            let text = numbered(patch);
            let pages = paginate(&text, PAGE_CHARS);
            let body = pages.get(page - 1).ok_or_else(|| {
                ToolError::InvalidArgs(format!("{path} has {} page(s)", pages.len()))
            })?;
            out.push_str(&format!("{numbers}\n{}", fence.fence_all(path, body)));
            let whole = {
                let mut seen = self.pages.lock().unwrap_or_else(|e| e.into_inner());
                let seen = seen.entry(path.to_string()).or_default();
                seen.insert(page);
                seen.len() == pages.len()
            };
            let read: &[&str] = if whole { &[path] } else { &[] };
            self.covered(sets, ignored, read).await;
            if page < pages.len() {
                out.push_str(&format!(
                    "\nPage {page} of {}: call forge_diff with path and page={} for more.",
                    pages.len(),
                    page + 1
                ));
            }
            return Ok(out);
        }
        let instructions = self
            .scope
            .settings
            .instructions_for(files.iter().map(|f| f.path.as_str()));
        if page == 1 && !instructions.is_empty() {
            out.push_str(&format!(
                "The repository's review instructions (from its base branch) for these files:\n{}\n",
                fence.fence_all("instructions", &instructions)
            ));
        }
        out.push_str(&format!("Files ({}), most important first:\n", files.len()));
        for f in &files {
            let renamed = f
                .old_path
                .as_deref()
                .map(|o| format!(" from {}", super::scope::plain_path(o)))
                .unwrap_or_default();
            let weight = Weight::of(f);
            let skimmed = if skim && Weight::skimmed(f) {
                format!(" — {}, not shown below (path= shows it)", weight.said())
            } else {
                String::new()
            };
            out.push_str(&format!(
                "- {} ({}{renamed}, +{} −{}){skimmed}\n",
                super::scope::plain_path(&f.path),
                f.status,
                f.additions,
                f.deletions
            ));
        }
        // Whole files per page, each clipped to its share; with the
        // files each page shows (those without a patch go with the list).
        let mut pages: Vec<String> = vec![String::new()];
        let mut on_page: Vec<Vec<&str>> = vec![Vec::new()];
        for f in &review {
            let Some(patch) = &f.patch else {
                on_page[0].push(&f.path);
                continue;
            };
            let mut text = numbered(patch);
            // A file cut here is read only when shown alone, whole.
            let cut = text.chars().count() > FILE_CHARS;
            if cut {
                text = format!(
                    "{}\n(cut: forge_diff with path={:?} shows it whole)",
                    crate::render::clip(&text, FILE_CHARS),
                    f.path
                );
            }
            let piece = format!("### {}\n{text}\n", f.path);
            let last = pages.last_mut().expect("one page at least");
            if !last.is_empty() && last.len() + piece.len() > PAGE_CHARS {
                pages.push(piece);
                on_page.push(Vec::new());
            } else {
                last.push_str(&piece);
            }
            if !cut {
                on_page.last_mut().expect("as many as pages").push(&f.path);
            }
        }
        let body = pages.get(page - 1).ok_or_else(|| {
            ToolError::InvalidArgs(format!("the diff has {} page(s)", pages.len()))
        })?;
        self.covered(sets, ignored, &on_page[page - 1]).await;
        if !body.is_empty() {
            out.push_str(&format!("{numbers}\n{}", fence.fence_all("diff", body)));
        }
        if page < pages.len() {
            out.push_str(&format!(
                "\nPage {page} of {}: call forge_diff with page={} for more files.",
                pages.len(),
                page + 1
            ));
        }
        Ok(out)
    }

    async fn file(&self, args: &Value) -> Result<String, ToolError> {
        let path = arg_str(args, "path")?.trim_start_matches('/');
        if path.is_empty()
            || path
                .split('/')
                .any(|p| p == ".." || p == "." || p.is_empty())
        {
            return Err(ToolError::InvalidArgs(format!(
                "{path:?} is not a file path"
            )));
        }
        if self.scope.settings.ignored().ignores(path) {
            return Err(ToolError::Refused(format!(
                "{path} is ignored by the repository's review settings"
            )));
        }
        let (which, sha) = match arg_opt_str(args, "version").unwrap_or("head") {
            "head" => ("head", self.head()?),
            "base" => (
                "base",
                self.scope
                    .base
                    .as_deref()
                    .ok_or_else(|| ToolError::Failed("this run names no base commit".into()))?,
            ),
            other => {
                return Err(ToolError::InvalidArgs(format!(
                    "version {other:?} is not head or base"
                )));
            }
        };
        let text = self
            .forge
            .host
            .file(&self.scope, path, sha)
            .await
            .map_err(failed)?;
        let total = text.lines().count() as u64;
        let start = arg_opt_u64(args, "start_line")?.unwrap_or(1).max(1);
        let end = arg_opt_u64(args, "end_line")?
            .unwrap_or(start + FILE_LINES - 1)
            .min(start + FILE_LINES - 1)
            .min(total);
        if start > total.max(1) {
            return Err(ToolError::InvalidArgs(format!("{path} has {total} lines")));
        }
        let mut body = String::new();
        for (i, line) in text.lines().enumerate() {
            let n = i as u64 + 1;
            if n < start {
                continue;
            }
            if n > end || body.len() > PAGE_CHARS {
                break;
            }
            body.push_str(&format!("{n:>6} | {line}\n"));
        }
        let mut fence = Renderer::new();
        let mut out = format!(
            "{path} at the {which} ({}), lines {start}–{end} of {total}.\n{}\n{}",
            short(sha),
            fence.tool_note(),
            fence.fence_all(path, &body)
        );
        if end < total {
            out.push_str(&format!("\nMore: start_line={}.", end + 1));
        }
        Ok(out)
    }

    async fn ci_log(&self, args: &Value) -> Result<String, ToolError> {
        let host = &self.forge.host;
        let (job, name) = match self.scope.job {
            Some(job) => (job, format!("job {job}")),
            None => host
                .failed_job(&self.scope)
                .await
                .map_err(failed)?
                .map(|(id, name)| (id, format!("job {id} ({name})")))
                .ok_or_else(|| ToolError::Failed("this run names no failed CI job".into()))?,
        };
        let raw = host.job_log(&self.scope, job).await.map_err(failed)?;
        let lines = log_lines(&raw);
        let count = arg_opt_u64(args, "lines")?
            .unwrap_or(LOG_LINES)
            .clamp(1, LOG_LINES_MAX) as usize;
        let skip = arg_opt_u64(args, "skip_from_end")?.unwrap_or(0) as usize;
        let end = lines.len().saturating_sub(skip);
        let start = end.saturating_sub(count);
        let mut tail = lines[start..end].join("\n");
        if tail.len() > PAGE_CHARS {
            let cut = tail.len() - PAGE_CHARS;
            let cut = (cut..tail.len())
                .find(|i| tail.is_char_boundary(*i))
                .unwrap_or(tail.len());
            tail = tail[cut..].to_string();
        }
        let errors: Vec<String> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| is_error_line(l))
            .take(LOG_ERRORS)
            .map(|(i, l)| format!("{:>6} | {}", i + 1, crate::render::clip(l, 300)))
            .collect();
        let mut fence = Renderer::new();
        let mut out = format!(
            "Log of {name}: {} lines; lines {}–{end} shown (the tail first). Masked secrets stay masked.\n{}\n",
            lines.len(),
            start + 1,
            fence.tool_note()
        );
        if !errors.is_empty() {
            out.push_str(&fence.fence_all("error lines", &errors.join("\n")));
            out.push('\n');
        }
        out.push_str(&fence.fence_all("log tail", &tail));
        if start > 0 {
            out.push_str(&format!(
                "\nEarlier lines: skip_from_end={}.",
                lines.len() - start
            ));
        }
        Ok(out)
    }

    async fn thread(&self) -> Result<String, ToolError> {
        self.need_change()?;
        let comments = self.forge.host.thread(&self.scope).await.map_err(failed)?;
        if comments.is_empty() {
            return Ok("No comments yet.".into());
        }
        let mut body = String::new();
        // The latest comments matter most: keep them when it is long.
        for (who, place, text) in comments.iter().rev() {
            let entry = format!("@{who} ({place}):\n{}\n\n", crate::render::clip(text, 2000));
            if body.len() + entry.len() > PAGE_CHARS {
                break;
            }
            body.insert_str(0, &entry);
        }
        let mut fence = Renderer::new();
        Ok(format!(
            "{} comment(s) on the change, oldest first.\n{}\n{}",
            comments.len(),
            fence.tool_note(),
            fence.fence_all("comments", body.trim_end())
        ))
    }
}

/// `text` in pieces of at most `max` bytes, cut at line ends.
fn paginate(text: &str, max: usize) -> Vec<String> {
    let mut pages = vec![String::new()];
    for line in text.lines() {
        let last = pages.last_mut().expect("one page at least");
        if !last.is_empty() && last.len() + line.len() + 1 > max {
            pages.push(String::new());
        }
        let last = pages.last_mut().expect("one page at least");
        last.push_str(&crate::render::clip(line, max));
        last.push('\n');
    }
    pages
}

#[async_trait]
impl ForgeDesk for Desk {
    async fn call(&self, tool: &str, args: &Value) -> Result<String, ToolError> {
        match tool {
            "forge_diff" => self.diff(args).await,
            "forge_file" => self.file(args).await,
            "forge_ci_log" => self.ci_log(args).await,
            "forge_thread" => self.thread().await,
            other => Err(ToolError::Failed(format!("{other} is not a forge tool"))),
        }
    }

    /// A review's answer must hold its findings and come after every
    /// file to review was read: what is left is named, to be read now.
    async fn check_answer(&self, answer: &str) -> Result<(), String> {
        if !self.scope.task.reviews() {
            return Ok(());
        }
        super::findings::check(answer)?;
        let unread = self.unread();
        if unread.is_err() {
            // Its findings are kept: the answer to come is merged with it.
            // Its end: the findings block closes an answer.
            let from = answer.len().saturating_sub(EARLIER_CHARS);
            let from = (from..=answer.len())
                .find(|&i| answer.is_char_boundary(i))
                .unwrap_or(answer.len());
            self.earlier
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(answer[from..].to_string());
            self.keep().await;
        }
        unread
    }
}

impl Desk {
    /// Why the review cannot be written yet: files it did not read.
    fn unread(&self) -> Result<(), String> {
        let coverage = self.coverage.lock().unwrap_or_else(|e| e.into_inner());
        let Some(coverage) = coverage.as_ref() else {
            return Err(
                "the change's diff was never read: read it with forge_diff, then write \
                        the whole review again"
                    .into(),
            );
        };
        let unread = coverage.unread();
        if unread.is_empty() {
            return Ok(());
        }
        let named: Vec<String> = unread
            .iter()
            .take(30)
            .map(|p| format!("{:?}", super::scope::plain_path(p)))
            .collect();
        Err(format!(
            "the review covers {} of the {} changed files; the diff of these was never read: {}{}. \
             Read them with forge_diff (the next pages, or path=…), then write the whole review \
             again with the findings of every file",
            coverage.files.intersection(&coverage.read).count(),
            coverage.files.len(),
            named.join(", "),
            if unread.len() > named.len() {
                ", …"
            } else {
                ""
            }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_and_timestamps_leave_the_log() {
        let line =
            "2026-12-01T09:00:00.1234567Z \u{1b}[31merror\u{1b}[0m: \u{1b}]8;;http://x\u{7}link";
        assert_eq!(untimed(&strip_ansi(line)), "error: link");
        assert_eq!(untimed("plain line"), "plain line");
    }

    #[test]
    fn pages_cut_at_line_ends() {
        let text = "aaaa\nbbbb\ncccc\n";
        assert_eq!(paginate(text, 10), vec!["aaaa\nbbbb\n", "cccc\n"]);
    }
}
