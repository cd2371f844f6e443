//! What a webhook delivery is and whether it runs: the event name and
//! delivery id from the scheme's headers, the route's filter and field
//! conditions, GitHub's built-in rules (reviewable pull request actions,
//! failing CI conclusions, comments that mention the bot), the entity that
//! groups events into one conversation, and the prompt.

use axum::http::HeaderMap;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::config::{GroupBy, SignatureScheme, WebhookRoute};
use crate::platform::ChatCommand;
use crate::render::template::{Renderer, lookup, lookup_str};

/// GitHub events a route takes when its `events` list is empty.
const GITHUB_DEFAULT_EVENTS: &[&str] = &[
    "pull_request",
    "issue_comment",
    "check_run",
    "check_suite",
    "workflow_run",
    "workflow_job",
];
/// Pull request actions worth a review.
const REVIEW_ACTIONS: &[&str] = &["opened", "synchronize", "reopened", "ready_for_review"];
/// CI conclusions that mean something broke.
const FAILING: &[&str] = &["failure", "timed_out", "startup_failure"];
const CI_EVENTS: &[&str] = &["check_run", "check_suite", "workflow_run", "workflow_job"];

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// The event's name: GitHub's `X-GitHub-Event`, GitLab's `object_kind`,
/// or a generic sender's `type` / `event` field.
pub fn event_name(scheme: SignatureScheme, headers: &HeaderMap, payload: &Value) -> String {
    let found = match scheme {
        SignatureScheme::Github => header(headers, "x-github-event").map(str::to_string),
        SignatureScheme::Gitlab => lookup_str(payload, "object_kind").map(str::to_string),
        SignatureScheme::Hmac | SignatureScheme::StandardWebhooks => {
            header(headers, "x-event-type")
                .or_else(|| lookup_str(payload, "type"))
                .or_else(|| lookup_str(payload, "event"))
                .map(str::to_string)
        }
    };
    found
        .filter(|e| e.len() <= 100)
        .unwrap_or_else(|| "event".into())
}

/// The delivery's identity, for idempotency. Where the signature covers
/// the body alone (GitHub, GitLab, generic HMAC), it is the body's hash:
/// a delivery id or `Idempotency-Key` header is not signed, so a replay
/// under a new one must still be a duplicate. Standard Webhooks signs its
/// `webhook-id` with the timestamp and body, so that id is kept.
pub fn delivery_id(scheme: SignatureScheme, headers: &HeaderMap, body: &[u8]) -> String {
    let signed_id = match scheme {
        SignatureScheme::StandardWebhooks => header(headers, "webhook-id"),
        SignatureScheme::Github | SignatureScheme::Gitlab | SignatureScheme::Hmac => None,
    };
    signed_id
        .filter(|v| v.len() <= 200)
        .map(str::to_string)
        .unwrap_or_else(|| format!("sha256:{}", hex::encode(Sha256::digest(body))))
}

/// What to do with a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classified {
    /// Run the agent.
    Run {
        /// Groups the events of one PR or pipeline.
        entity: String,
        /// The prompt, untrusted text fenced.
        prompt: String,
        /// Who caused the event (login), for the record.
        sender: String,
    },
    /// A `/approve …` or `/deny …` comment.
    Approval {
        /// The comment text.
        text: String,
        /// Its author's login.
        login: String,
        /// Its author's account number (`comment.user.id`).
        account: Option<u64>,
    },
    /// Acknowledged, nothing to do.
    Skip(&'static str),
}

fn action(payload: &Value) -> Option<&str> {
    lookup_str(payload, "action")
        .or_else(|| lookup_str(payload, "object_attributes.action"))
        .or_else(|| lookup_str(payload, "object_attributes.status"))
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Whether the route's filter takes `event` with `action`; `explicit`
/// when it names the action itself (which lifts the built-in rules).
fn filter(route: &WebhookRoute, event: &str, action: Option<&str>) -> Option<bool> {
    if route.events.is_empty() {
        let defaults =
            route.scheme != SignatureScheme::Github || GITHUB_DEFAULT_EVENTS.contains(&event);
        return defaults.then_some(false);
    }
    let mut taken = None;
    for entry in &route.events {
        match entry.split_once('.') {
            Some((e, a)) if e == event && Some(a) == action => return Some(true),
            None if entry == event => taken = Some(false),
            _ => {}
        }
    }
    taken
}

/// Decides what a delivery on `route` does; `own_login` is the login the
/// route's token belongs to, when known.
pub fn classify(
    route: &WebhookRoute,
    own_login: Option<&str>,
    event: &str,
    delivery: &str,
    payload: &Value,
) -> Classified {
    let action = action(payload);
    let github = route.scheme == SignatureScheme::Github;
    if github && event == "issue_comment" {
        let body = lookup_str(payload, "comment.body").unwrap_or_default();
        let login = lookup_str(payload, "comment.user.login").unwrap_or_default();
        // Nothing a bot wrote — the gateway's own answers included — is
        // read as a command or a decision.
        let is_bot = lookup_str(payload, "comment.user.type") == Some("Bot")
            || route
                .bot_login
                .as_deref()
                .into_iter()
                .chain(own_login)
                .any(|b| b.trim_start_matches('@').eq_ignore_ascii_case(login));
        if is_bot {
            return Classified::Skip("comment written by a bot");
        }
        let first = body.trim_start().lines().next().unwrap_or_default();
        if action == Some("created")
            && first.starts_with('/')
            && ChatCommand::parse(first).is_some_and(|c| c.is_decision())
        {
            return Classified::Approval {
                text: first.to_string(),
                login: login.to_string(),
                account: lookup(payload, "comment.user.id").and_then(Value::as_u64),
            };
        }
    }
    let Some(explicit) = filter(route, event, action) else {
        return Classified::Skip("event not in the route's filter");
    };
    if github
        && !explicit
        && let Some(reason) = github_rules(route, event, action, payload)
    {
        return Classified::Skip(reason);
    }
    if route.scheme == SignatureScheme::Gitlab
        && !explicit
        && let Some(reason) = gitlab_rules(route, event, payload)
    {
        return Classified::Skip(reason);
    }
    for (path, accepted) in &route.when {
        let value = lookup(payload, path).map(scalar_text);
        if !value.is_some_and(|v| accepted.contains(&v)) {
            return Classified::Skip("a field condition does not hold");
        }
    }
    let entity = match route.group_by {
        GroupBy::Entity => entity(route.scheme, event, delivery, payload),
        GroupBy::Event => format!("delivery:{delivery}"),
    };
    let sender = lookup_str(payload, "sender.login")
        .or_else(|| lookup_str(payload, "user.username"))
        .unwrap_or("unknown")
        .to_string();
    Classified::Run {
        entity,
        prompt: prompt(route, event, payload),
        sender,
    }
}

/// GitHub's built-in rules; `Some(reason)` to skip.
fn github_rules(
    route: &WebhookRoute,
    event: &str,
    action: Option<&str>,
    payload: &Value,
) -> Option<&'static str> {
    match event {
        "pull_request" => {
            // A retarget (`edited` with a new base) changes what the
            // change is reviewed against, and whether it is.
            let retargeted = action == Some("edited") && lookup(payload, "changes.base").is_some();
            if !(action.is_some_and(|a| REVIEW_ACTIONS.contains(&a)) || retargeted) {
                return Some("pull request action not reviewed");
            }
            // With a forge, the repository's settings decide on drafts
            // when the run starts.
            if route.forge.is_none()
                && lookup(payload, "pull_request.draft") == Some(&Value::Bool(true))
            {
                return Some("draft pull request");
            }
            None
        }
        "issue_comment" => {
            if action != Some("created") {
                return Some("comment not newly created");
            }
            if lookup(payload, "issue.pull_request").is_none() {
                return Some("comment not on a pull request");
            }
            let Some(bot) = route.bot_login.as_deref() else {
                return Some("no bot_login configured to be mentioned");
            };
            let body = lookup_str(payload, "comment.body").unwrap_or_default();
            let mention = format!("@{}", bot.to_ascii_lowercase());
            if !body.to_ascii_lowercase().contains(&mention) {
                return Some("comment does not mention the bot");
            }
            None
        }
        e if CI_EVENTS.contains(&e) => {
            if action != Some("completed") {
                return Some("CI event not completed");
            }
            let path = format!("{e}.conclusion");
            if route.when.contains_key(&path) {
                return None;
            }
            let conclusion = lookup_str(payload, &path).unwrap_or_default();
            (!FAILING.contains(&conclusion)).then_some("CI did not fail")
        }
        _ => None,
    }
}

/// GitLab's built-in rules; `Some(reason)` to skip: merge requests
/// opened, reopened or pushed to (drafts left alone), notes on a merge
/// request that mention the bot, failed pipelines and jobs.
fn gitlab_rules(route: &WebhookRoute, event: &str, payload: &Value) -> Option<&'static str> {
    let attr = |k: &str| lookup_str(payload, &format!("object_attributes.{k}"));
    match event {
        "merge_request" => {
            // An update that pushed commits, retargeted the request or
            // took it out of draft.
            let changed = |k: &str| lookup(payload, &format!("changes.{k}")).is_some();
            let updated = attr("action") == Some("update")
                && (attr("oldrev").is_some()
                    || changed("target_branch")
                    || changed("draft")
                    || changed("work_in_progress"));
            if !(matches!(attr("action"), Some("open" | "reopen")) || updated) {
                return Some("merge request action not reviewed");
            }
            let draft = |k: &str| {
                lookup(payload, &format!("object_attributes.{k}")) == Some(&Value::Bool(true))
            };
            // With a forge, the repository's settings decide on drafts
            // when the run starts.
            (route.forge.is_none() && (draft("draft") || draft("work_in_progress")))
                .then_some("draft merge request")
        }
        "note" => {
            if attr("noteable_type") != Some("MergeRequest") {
                return Some("comment not on a merge request");
            }
            let Some(bot) = route.bot_login.as_deref() else {
                return Some("no bot_login configured to be mentioned");
            };
            let author = lookup_str(payload, "user.username").unwrap_or_default();
            if author.eq_ignore_ascii_case(bot) {
                return Some("comment written by a bot");
            }
            let note = attr("note").unwrap_or_default().to_ascii_lowercase();
            (!note.contains(&format!("@{}", bot.to_ascii_lowercase())))
                .then_some("comment does not mention the bot")
        }
        "pipeline" => (attr("status") != Some("failed")).then_some("CI did not fail"),
        "build" => {
            (lookup_str(payload, "build_status") != Some("failed")).then_some("CI did not fail")
        }
        _ => None,
    }
}

/// The entity a delivery belongs to: its pull request where the payload
/// names one, else its run, pipeline or issue, else the delivery itself.
pub fn entity(scheme: SignatureScheme, event: &str, delivery: &str, payload: &Value) -> String {
    let num = |path: &str| lookup(payload, path).and_then(Value::as_u64);
    match scheme {
        SignatureScheme::Github => {
            let repo = lookup_str(payload, "repository.full_name").unwrap_or("unknown");
            let pr = match event {
                "pull_request" => num("pull_request.number").or_else(|| num("number")),
                "issue_comment" if lookup(payload, "issue.pull_request").is_some() => {
                    num("issue.number")
                }
                "check_run" => num("check_run.pull_requests.0.number"),
                "check_suite" => num("check_suite.pull_requests.0.number"),
                "workflow_run" => num("workflow_run.pull_requests.0.number"),
                _ => None,
            };
            if let Some(n) = pr {
                return format!("github:{repo}:pr:{n}");
            }
            let other = match event {
                "issue_comment" | "issues" => num("issue.number").map(|n| format!("issue:{n}")),
                "workflow_run" => num("workflow_run.id").map(|n| format!("run:{n}")),
                "workflow_job" => num("workflow_job.run_id").map(|n| format!("run:{n}")),
                "check_run" => {
                    lookup_str(payload, "check_run.head_sha").map(|s| format!("sha:{s}"))
                }
                "check_suite" => {
                    lookup_str(payload, "check_suite.head_sha").map(|s| format!("sha:{s}"))
                }
                _ => None,
            };
            match other {
                Some(o) => format!("github:{repo}:{o}"),
                None => format!("github:{repo}:delivery:{delivery}"),
            }
        }
        SignatureScheme::Gitlab => {
            let project = lookup_str(payload, "project.path_with_namespace").unwrap_or("unknown");
            let mr = match event {
                "merge_request" => num("object_attributes.iid"),
                "pipeline" | "note" => num("merge_request.iid"),
                _ => None,
            };
            match (mr, event) {
                (Some(n), _) => format!("gitlab:{project}:mr:{n}"),
                (None, "pipeline") => match num("object_attributes.id") {
                    Some(id) => format!("gitlab:{project}:pipeline:{id}"),
                    None => format!("gitlab:{project}:delivery:{delivery}"),
                },
                (None, "build") => match num("pipeline_id") {
                    Some(id) => format!("gitlab:{project}:pipeline:{id}"),
                    None => format!("gitlab:{project}:delivery:{delivery}"),
                },
                _ => format!("gitlab:{project}:delivery:{delivery}"),
            }
        }
        SignatureScheme::Hmac | SignatureScheme::StandardWebhooks => {
            format!("{event}:{delivery}")
        }
    }
}

fn default_template(scheme: SignatureScheme, event: &str) -> Option<&'static str> {
    Some(match (scheme, event) {
        (SignatureScheme::Github, "pull_request") => {
            "Review this pull request.\n\nRepository: {repository.full_name}\n\
             Pull request #{pull_request.number} ({action}) by {pull_request.user.login}: {pull_request.html_url}\n\
             Base {pull_request.base.ref} <- head {pull_request.head.ref} at {pull_request.head.sha}\n\
             Title: {pull_request.title}\nDescription: {pull_request.body}\n\n\
             The diff is at {pull_request.diff_url}. Give a concise review: what the change does, \
             the risks, and concrete suggestions."
        }
        (SignatureScheme::Github, "issue_comment") => {
            "A comment on pull request #{issue.number} in {repository.full_name} mentions you.\n\
             Pull request: {issue.html_url}\nTitle: {issue.title}\n\
             Comment by {comment.user.login}: {comment.body}\n\nAnswer the comment."
        }
        (SignatureScheme::Github, "check_run") => {
            "Triage this CI failure.\n\nRepository: {repository.full_name}\n\
             Check {check_run.name} concluded {check_run.conclusion} on {check_run.head_sha}: {check_run.html_url}\n\
             Output: {check_run.output.title} {check_run.output.summary} {check_run.output.text}\n\n\
             Explain the likely cause and the fix."
        }
        (SignatureScheme::Github, "check_suite") => {
            "Triage this CI failure.\n\nRepository: {repository.full_name}\n\
             Check suite {check_suite.id} on branch {check_suite.head_branch} concluded \
             {check_suite.conclusion} at {check_suite.head_sha}.\n\n\
             Explain the likely cause and the fix."
        }
        (SignatureScheme::Github, "workflow_run") => {
            "Triage this CI failure.\n\nRepository: {repository.full_name}\n\
             Workflow {workflow_run.name} run #{workflow_run.run_number} on branch {workflow_run.head_branch} \
             concluded {workflow_run.conclusion}: {workflow_run.html_url}\n\
             Commit {workflow_run.head_sha}: {workflow_run.display_title}\n\n\
             Explain the likely cause and the fix."
        }
        (SignatureScheme::Github, "workflow_job") => {
            "Triage this CI failure.\n\nRepository: {repository.full_name}\n\
             Job {workflow_job.name} of workflow {workflow_job.workflow_name} concluded \
             {workflow_job.conclusion}: {workflow_job.html_url}\nSteps: {workflow_job.steps}\n\n\
             Explain the likely cause and the fix."
        }
        (SignatureScheme::Gitlab, "merge_request") => {
            "Review this merge request.\n\nProject: {project.path_with_namespace}\n\
             Merge request !{object_attributes.iid} ({object_attributes.action}) by {user.username}: {object_attributes.url}\n\
             Source {object_attributes.source_branch} -> target {object_attributes.target_branch}\n\
             Title: {object_attributes.title}\nDescription: {object_attributes.description}\n\n\
             Give a concise review: what the change does, the risks, and concrete suggestions."
        }
        (SignatureScheme::Gitlab, "pipeline") => {
            "Triage this CI failure.\n\nProject: {project.path_with_namespace}\n\
             Pipeline {object_attributes.id} on {object_attributes.ref} finished {object_attributes.status}.\n\
             Commit: {commit.title}\nBuilds: {builds}\n\nExplain the likely cause and the fix."
        }
        _ => return None,
    })
}

/// The prompt of a delivery: the fences' note, then the route's template
/// (or the built-in one for the event) rendered over the payload.
pub fn prompt(route: &WebhookRoute, event: &str, payload: &Value) -> String {
    let mut renderer = Renderer::new();
    let source = match route.scheme {
        SignatureScheme::Github => "GitHub",
        SignatureScheme::Gitlab => "GitLab",
        _ => "webhook",
    };
    let body = match route
        .prompt
        .as_deref()
        .or_else(|| default_template(route.scheme, event))
    {
        Some(template) => renderer.render(template, payload),
        None => {
            let whole = renderer.field(&serde_json::json!({ "payload": payload }), "payload");
            format!(
                "An event `{}` arrived on webhook route `{}`. Its payload:\n{whole}\n\
                 Summarise what happened and what, if anything, needs attention.",
                event.replace('`', ""),
                route.name
            )
        }
    };
    format!("{}\n\n{body}", renderer.preamble(source))
}
