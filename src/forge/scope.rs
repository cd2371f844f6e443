//! What a webhook event lets the forge tools reach: one repository, one
//! pull / merge request or pipeline, its SHAs. Read from the payload when
//! the event arrives and stored with it; no tool argument can widen it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::render::template::{lookup, lookup_str};

/// What the run is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    /// Review what changed since the last review (the whole change when
    /// there was none, or the branch was rewritten).
    Review,
    /// Review the whole change.
    FullReview,
    /// Find why CI failed.
    Triage,
    /// Answer a question about the change.
    Ask,
    /// Describe the change (summary, walkthrough, risks), in one comment
    /// edited in place.
    Describe,
}

impl Task {
    /// Whether the run reviews code.
    pub fn reviews(self) -> bool {
        matches!(self, Self::Review | Self::FullReview)
    }
}

/// The part of a forge one run may read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scope {
    /// `owner/repo` (GitHub) or `group/project` (GitLab).
    pub repo: String,
    /// GitLab's project id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<u64>,
    /// Pull request number / merge request iid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<u64>,
    /// Base SHA of the change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// Head SHA (of the change, or of the failed CI run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// The head last reviewed, for an incremental review (set when the
    /// run starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Workflow run (GitHub) or pipeline (GitLab).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<u64>,
    /// The failed job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<u64>,
    /// The GitHub App installation the event came through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installation: Option<u64>,
    /// What the run is for.
    pub task: Task,
    /// The question of an `ask` command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The failed job's name and its failed step, as the event names them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<(String, Option<String>)>,
    /// The repository's review settings, read from the base commit when
    /// the run starts.
    #[serde(default, skip_serializing_if = "is_default")]
    pub settings: super::settings::Settings,
    /// What is wrong with the repository's settings file (the route's
    /// defaults apply instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings_error: Option<String>,
    /// What of the change the run read, for the summary to say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<Coverage>,
    /// Made because an event happened, not asked for in a comment: the
    /// repository's settings decide whether it is made.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub automatic: bool,
    /// The change as the forge has it when the run starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<ChangeInfo>,
    /// The repository's default branch, as the event names it: where the
    /// settings of a CI run that belongs to no change are read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_branch: Option<String>,
    /// Earlier answers of the run that were asked again (to read more of
    /// the change): their findings are merged with the last answer's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<String>,
}

/// What a run knows of its change when it starts, for the settings to
/// decide whether it is reviewed automatically.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeInfo {
    /// Still a draft.
    pub draft: bool,
    /// Who opened it.
    pub author: String,
    /// Whether that is a bot.
    pub bot: bool,
    /// The branch it targets.
    pub target: String,
    /// The author's account id, where the forge needs it to tell a bot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author_id: Option<u64>,
}

/// `path` (a change's, so its author's) as one line of plain text for a
/// prompt or a comment: control characters escaped, backticks made
/// quotes, at most 300 characters.
pub fn plain_path(path: &str) -> String {
    let escaped: String = path
        .chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else if c == '`' {
                vec!['\'']
            } else {
                vec![c]
            }
        })
        .collect();
    crate::render::clip(&escaped, 300)
}

/// What of a change a review run read with `forge_diff`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage {
    /// The changed files to review (those the settings ignore left out).
    pub files: std::collections::BTreeSet<String>,
    /// Of them, those whose diff the run was shown.
    pub read: std::collections::BTreeSet<String>,
    /// Changed files the repository's settings ignore.
    pub ignored: usize,
    /// Changed files skipped by default, by kind (lock file, vendored,
    /// generated).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub skipped: std::collections::BTreeMap<String, usize>,
}

impl Coverage {
    /// The files to review whose diff was not shown, in order.
    pub fn unread(&self) -> Vec<&str> {
        self.files
            .difference(&self.read)
            .map(String::as_str)
            .collect()
    }

    /// One line saying what was reviewed.
    pub fn said(&self) -> String {
        let unread = self.unread();
        let skipped: usize = self.skipped.values().sum();
        let mut line = format!(
            "Reviewed {} of {} changed file(s)",
            self.files.intersection(&self.read).count(),
            self.files.len() + skipped
        );
        if skipped > 0 {
            let kinds: Vec<String> = self
                .skipped
                .iter()
                .map(|(kind, n)| format!("{n} {kind}"))
                .collect();
            line.push_str(&format!(
                "; skipped {skipped} by default ({})",
                kinds.join(", ")
            ));
        }
        if self.ignored > 0 {
            line.push_str(&format!(
                "; {} more ignored by the repository's settings",
                self.ignored
            ));
        }
        if !unread.is_empty() {
            let shown: Vec<String> = unread
                .iter()
                .take(20)
                .map(|p| format!("`{}`", plain_path(p)))
                .collect();
            line.push_str(&format!(
                "; not read: {}{}",
                shown.join(", "),
                if unread.len() > 20 { ", …" } else { "" }
            ));
        }
        line.push('.');
        line
    }
}

fn is_default(settings: &super::settings::Settings) -> bool {
    *settings == super::settings::Settings::default()
}

impl Scope {
    /// A scope of `repo` for `task`, naming nothing else yet.
    pub fn new(repo: String, task: Task) -> Self {
        Self {
            repo,
            project: None,
            change: None,
            base: None,
            head: None,
            since: None,
            run: None,
            job: None,
            installation: None,
            task,
            question: None,
            failed: None,
            settings: Default::default(),
            settings_error: None,
            coverage: None,
            automatic: false,
            info: None,
            default_branch: None,
            earlier: Vec::new(),
        }
    }
}

fn num(payload: &Value, path: &str) -> Option<u64> {
    lookup(payload, path).and_then(Value::as_u64)
}

fn sha(payload: &Value, path: &str) -> Option<String> {
    lookup_str(payload, path)
        .filter(|s| s.len() >= 7 && s.len() <= 64 && s.chars().all(|c| c.is_ascii_hexdigit()))
        .map(str::to_string)
}

/// A branch name as an event gives it, when it is one git allows and
/// plain enough to pass as a ref in a URL's query.
pub fn branch_name(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with(['-', '/'])
        && !name.ends_with(['/', '.'])
        && !name.contains("..")
        && !name.contains("//")
        && !name.contains("@{")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/+".contains(c));
    ok.then(|| name.to_string())
}

impl Scope {
    /// Whether `login` is the change's author (as the forge had it when
    /// the run started).
    pub fn by_author(&self, login: &str) -> bool {
        self.info
            .as_ref()
            .is_some_and(|i| !i.author.is_empty() && i.author.eq_ignore_ascii_case(login))
    }

    /// Why a run no one asked for is not made under the repository's
    /// settings (`None`: it is made).
    pub fn skipped(&self) -> Option<String> {
        if !self.automatic {
            return None;
        }
        let settings = &self.settings;
        match self.task {
            Task::Describe if !settings.describe => {
                return Some("the settings do not describe changes when they are opened".into());
            }
            Task::Triage => {
                return self
                    .failed
                    .as_ref()
                    .filter(|(job, _)| !settings.triages(job))
                    .map(|(job, _)| {
                        format!("the settings do not triage the job {}", plain_path(job))
                    });
            }
            _ => {}
        }
        self.info.as_ref().and_then(|info| settings.passes(info))
    }
}

/// A repository name as the forge paths take it (`owner/repo`,
/// `group/sub/project`): no empty, `.` or `..` segment, nothing outside
/// letters, digits and `._-/`.
pub fn repo_name(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != "..")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c));
    ok.then(|| name.to_string())
}

/// The scope of a GitHub event, or `None` when it reaches no code.
pub fn github(event: &str, payload: &Value, task: Option<Task>) -> Option<Scope> {
    let repo = repo_name(lookup_str(payload, "repository.full_name")?)?;
    let mut scope = Scope::new(repo, Task::Triage);
    scope.installation = num(payload, "installation.id");
    scope.default_branch = lookup_str(payload, "repository.default_branch").and_then(branch_name);
    match event {
        "pull_request" => {
            scope.change = num(payload, "pull_request.number").or_else(|| num(payload, "number"));
            scope.base = sha(payload, "pull_request.base.sha");
            scope.head = sha(payload, "pull_request.head.sha");
            scope.task = match lookup_str(payload, "action") {
                Some("synchronize") => Task::Review,
                _ => Task::FullReview,
            };
        }
        "issue_comment" => {
            lookup(payload, "issue.pull_request")?;
            scope.change = num(payload, "issue.number");
            scope.task = task?;
        }
        "workflow_job" => {
            scope.job = num(payload, "workflow_job.id");
            scope.run = num(payload, "workflow_job.run_id");
            scope.head = sha(payload, "workflow_job.head_sha");
            let step = lookup(payload, "workflow_job.steps")
                .and_then(Value::as_array)
                .and_then(|steps| {
                    steps
                        .iter()
                        .find(|s| lookup_str(s, "conclusion") == Some("failure"))
                })
                .and_then(|s| lookup_str(s, "name"))
                .map(str::to_string);
            scope.failed =
                lookup_str(payload, "workflow_job.name").map(|job| (job.to_string(), step));
        }
        "workflow_run" => {
            scope.run = num(payload, "workflow_run.id");
            scope.head = sha(payload, "workflow_run.head_sha");
            scope.change = num(payload, "workflow_run.pull_requests.0.number");
        }
        "check_run" => {
            // An Actions job's check run has the job's id.
            scope.job = num(payload, "check_run.id");
            scope.head = sha(payload, "check_run.head_sha");
            scope.change = num(payload, "check_run.pull_requests.0.number");
        }
        "check_suite" => {
            scope.head = sha(payload, "check_suite.head_sha");
            scope.change = num(payload, "check_suite.pull_requests.0.number");
        }
        _ => return None,
    }
    match task {
        Some(task) => scope.task = task,
        None => scope.automatic = true,
    }
    Some(scope)
}

/// The scope of a GitLab event, or `None` when it reaches no code.
pub fn gitlab(event: &str, payload: &Value, task: Option<Task>) -> Option<Scope> {
    let repo = repo_name(lookup_str(payload, "project.path_with_namespace")?)?;
    let mut scope = Scope::new(repo, Task::Triage);
    scope.project = num(payload, "project.id");
    scope.default_branch = lookup_str(payload, "project.default_branch").and_then(branch_name);
    match event {
        "merge_request" => {
            scope.change = num(payload, "object_attributes.iid");
            scope.head = sha(payload, "object_attributes.last_commit.id");
            // An update that pushed commits names the previous head.
            scope.task = match lookup_str(payload, "object_attributes.action") {
                Some("update") if lookup(payload, "object_attributes.oldrev").is_some() => {
                    Task::Review
                }
                _ => Task::FullReview,
            };
        }
        "note" => {
            scope.change = num(payload, "merge_request.iid");
            scope.change?;
            scope.head = sha(payload, "merge_request.last_commit.id");
            scope.task = task?;
        }
        "pipeline" => {
            scope.run = num(payload, "object_attributes.id");
            scope.head = sha(payload, "object_attributes.sha");
            scope.change = num(payload, "merge_request.iid");
            let failed = lookup(payload, "builds")
                .and_then(Value::as_array)
                .and_then(|builds| {
                    builds
                        .iter()
                        .find(|b| lookup_str(b, "status") == Some("failed"))
                });
            scope.job = failed.and_then(|b| num(b, "id"));
            scope.failed = failed
                .and_then(|b| lookup_str(b, "name"))
                .map(|name| (name.to_string(), None));
        }
        "build" => {
            scope.job = num(payload, "build_id");
            scope.failed = lookup_str(payload, "build_name").map(|name| (name.to_string(), None));
            scope.run = num(payload, "pipeline_id");
            scope.head = sha(payload, "sha");
            scope.project = scope.project.or_else(|| num(payload, "project_id"));
        }
        _ => return None,
    }
    match task {
        Some(task) => scope.task = task,
        None => scope.automatic = true,
    }
    Some(scope)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pull_request_event_scopes_its_repository_and_shas() {
        let p = json!({
            "action": "synchronize",
            "number": 7,
            "pull_request": {"number": 7, "base": {"sha": "aaaaaaa1"}, "head": {"sha": "bbbbbbb2"}},
            "repository": {"full_name": "octo/hello"},
            "installation": {"id": 42},
        });
        let s = github("pull_request", &p, None).unwrap();
        assert_eq!(
            (s.repo.as_str(), s.change, s.task),
            ("octo/hello", Some(7), Task::Review)
        );
        assert_eq!(s.head.as_deref(), Some("bbbbbbb2"));
        assert_eq!(s.installation, Some(42));
        let bad = json!({"repository": {"full_name": "../x"}, "pull_request": {"number": 1}});
        assert_eq!(github("pull_request", &bad, None), None);
        let not_a_sha = json!({"repository": {"full_name": "a/b"}, "pull_request": {"head": {"sha": "main; rm"}}});
        assert_eq!(github("pull_request", &not_a_sha, None).unwrap().head, None);
    }

    #[test]
    fn a_failed_pipeline_scopes_its_first_failed_job() {
        let p = json!({
            "object_kind": "pipeline",
            "object_attributes": {"id": 31, "sha": "cccccccc"},
            "project": {"id": 5, "path_with_namespace": "grp/app"},
            "builds": [{"id": 1, "status": "success"}, {"id": 2, "status": "failed"}],
        });
        let s = gitlab("pipeline", &p, None).unwrap();
        assert_eq!((s.project, s.run, s.job), (Some(5), Some(31), Some(2)));
    }
}
