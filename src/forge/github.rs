//! GitHub's REST (and, to resolve review threads, GraphQL) API as the
//! forge tools and the review output use it.

use async_trait::async_trait;
use reqwest::Method;
use serde_json::{Value, json};

use super::api::{Api, Failure};
use super::diff::FileDiff;
use super::host::{
    Anchored, ChangeState, Check, Compared, Dismissed, Host, User, change, dismissals, id_of,
};
use super::scope::{ChangeInfo, Scope};
use crate::render::template::lookup_str;

/// The check's name, as branch protection requires it.
pub const CHECK_NAME: &str = "switchboard/review";
/// Annotations GitHub takes in one check-run request.
const ANNOTATIONS_PER_REQUEST: usize = 50;

/// GitHub for one route.
#[derive(Debug, Clone)]
pub struct Github {
    api: Api,
    /// Check runs need an App; with a token the gate is a commit status.
    app: bool,
}

/// A path with each segment percent-encoded.
fn encode_path(path: &str) -> String {
    path.split('/')
        .map(|s| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>())
        .collect::<Vec<_>>()
        .join("/")
}

fn file_diff(v: &Value) -> Option<FileDiff> {
    Some(FileDiff {
        path: v.get("filename")?.as_str()?.to_string(),
        old_path: v
            .get("previous_filename")
            .and_then(Value::as_str)
            .map(str::to_string),
        status: v
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("modified")
            .to_string(),
        additions: v.get("additions").and_then(Value::as_u64).unwrap_or(0),
        deletions: v.get("deletions").and_then(Value::as_u64).unwrap_or(0),
        patch: v.get("patch").and_then(Value::as_str).map(str::to_string),
    })
}

impl Github {
    /// GitHub through `api`; `app` when it authenticates as an App.
    pub fn new(api: Api, app: bool) -> Self {
        Self { api, app }
    }

    async fn pages(&self, scope: &Scope, path: &str) -> Result<Vec<Value>, Failure> {
        self.api.list(path, scope.installation).await
    }

    fn graphql_url(&self) -> String {
        let base = self.api.base();
        match base.strip_suffix("/api/v3") {
            Some(host) => format!("{host}/api/graphql"),
            None => format!("{base}/graphql"),
        }
    }

    /// The `fields` of the change's first 100 review threads.
    async fn review_threads(&self, scope: &Scope, fields: &str) -> Result<Vec<Value>, Failure> {
        let n = change(scope)?;
        let Some((owner, name)) = scope.repo.split_once('/') else {
            return Ok(Vec::new());
        };
        let query = format!(
            "query($owner:String!,$name:String!,$number:Int!){{repository(owner:$owner,name:$name){{pullRequest(number:$number){{reviewThreads(first:100){{nodes{{{fields}}}}}}}}}}}"
        );
        let threads = self
            .graphql(
                scope,
                &query,
                json!({"owner": owner, "name": name, "number": n}),
            )
            .await?;
        Ok(crate::render::template::lookup(
            &threads,
            "data.repository.pullRequest.reviewThreads.nodes",
        )
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
    }

    async fn graphql(
        &self,
        scope: &Scope,
        query: &str,
        variables: Value,
    ) -> Result<Value, Failure> {
        let path = self
            .graphql_url()
            .strip_prefix(self.api.base())
            .map(str::to_string);
        let body = json!({"query": query, "variables": variables});
        let answer = match path {
            Some(path) => {
                self.api
                    .send(Method::POST, &path, &body, scope.installation)
                    .await?
            }
            None => {
                // Enterprise Server: GraphQL lives beside /api/v3.
                let api = self.api.at(&self.graphql_url());
                api.send(Method::POST, "", &body, scope.installation)
                    .await?
            }
        };
        if let Some(errors) = answer.get("errors").filter(|e| !e.is_null()) {
            return Err(Failure::fatal(format!(
                "GitHub GraphQL refused: {}",
                crate::render::clip(&errors.to_string(), 300)
            )));
        }
        Ok(answer)
    }
}

#[async_trait]
impl Host for Github {
    fn name(&self) -> &'static str {
        "GitHub"
    }

    /// GitHub's block replaces the lines the comment spans (its
    /// `start_line` to `line`), so `above` is in the comment, not here.
    fn suggestion(&self, replacement: &str, _above: u64) -> String {
        let fence = super::host::fence_for(replacement);
        format!("{fence}suggestion\n{replacement}\n{fence}")
    }

    async fn state(&self, scope: &Scope) -> Result<ChangeState, Failure> {
        let n = change(scope)?;
        let pr = self
            .api
            .get(
                &format!("/repos/{}/pulls/{n}", scope.repo),
                scope.installation,
            )
            .await?
            .json();
        let get = |p: &str| {
            crate::render::template::lookup_str(&pr, p)
                .map(str::to_string)
                .ok_or_else(|| Failure::fatal(format!("GitHub's pull request has no {p}")))
        };
        let author = lookup_str(&pr, "user.login").unwrap_or_default();
        let base = get("base.sha")?;
        Ok(ChangeState {
            settings_at: base.clone(),
            base,
            head: get("head.sha")?,
            info: ChangeInfo {
                draft: pr.get("draft").and_then(Value::as_bool) == Some(true),
                // An App's login ends in `[bot]`, which no person's can.
                bot: lookup_str(&pr, "user.type") == Some("Bot") || author.ends_with("[bot]"),
                author: author.to_string(),
                target: lookup_str(&pr, "base.ref").unwrap_or_default().to_string(),
                author_id: None,
            },
        })
    }

    async fn change_files(&self, scope: &Scope) -> Result<Vec<FileDiff>, Failure> {
        let n = change(scope)?;
        let items = self
            .pages(scope, &format!("/repos/{}/pulls/{n}/files", scope.repo))
            .await?;
        Ok(items.iter().filter_map(file_diff).collect())
    }

    async fn compare(&self, scope: &Scope, from: &str, to: &str) -> Result<Compared, Failure> {
        let reply = self
            .api
            .get(
                &format!("/repos/{}/compare/{from}...{to}?per_page=100", scope.repo),
                scope.installation,
            )
            .await?
            .json();
        let status = reply.get("status").and_then(Value::as_str).unwrap_or("");
        Ok(Compared {
            // "behind" or "diverged": the old head is not under the new one.
            descends: matches!(status, "ahead" | "identical"),
            commits: reply
                .get("total_commits")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            files: reply
                .get("files")
                .and_then(Value::as_array)
                .map(|f| f.iter().filter_map(file_diff).collect())
                .unwrap_or_default(),
        })
    }

    async fn file(&self, scope: &Scope, path: &str, sha: &str) -> Result<String, Failure> {
        self.api
            .call(
                Method::GET,
                &format!(
                    "/repos/{}/contents/{}?ref={}",
                    scope.repo,
                    encode_path(path),
                    url::form_urlencoded::byte_serialize(sha.as_bytes()).collect::<String>()
                ),
                None,
                "application/vnd.github.raw+json",
                scope.installation,
            )
            .await
            .map(|r| r.body)
    }

    async fn failed_job(&self, scope: &Scope) -> Result<Option<(u64, String)>, Failure> {
        let Some(run) = scope.run else {
            return Ok(None);
        };
        let reply = self
            .api
            .get(
                &format!(
                    "/repos/{}/actions/runs/{run}/jobs?filter=latest&per_page=100",
                    scope.repo
                ),
                scope.installation,
            )
            .await?
            .json();
        Ok(reply
            .get("jobs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|j| {
                matches!(
                    j.get("conclusion").and_then(Value::as_str),
                    Some("failure" | "timed_out" | "startup_failure")
                )
            })
            .and_then(|j| Some((j.get("id")?.as_u64()?, j.get("name")?.as_str()?.to_string()))))
    }

    async fn job_log(&self, scope: &Scope, job: u64) -> Result<String, Failure> {
        self.api
            .call(
                Method::GET,
                &format!("/repos/{}/actions/jobs/{job}/logs", scope.repo),
                None,
                "application/vnd.github+json",
                scope.installation,
            )
            .await
            .map(|r| r.body)
    }

    async fn thread(&self, scope: &Scope) -> Result<Vec<(String, String, String)>, Failure> {
        let n = change(scope)?;
        let mut out = Vec::new();
        for (kind, path) in [
            (
                "comment",
                format!("/repos/{}/issues/{n}/comments", scope.repo),
            ),
            (
                "review comment",
                format!("/repos/{}/pulls/{n}/comments", scope.repo),
            ),
        ] {
            for c in self.pages(scope, &path).await? {
                let who =
                    crate::render::template::lookup_str(&c, "user.login").unwrap_or("unknown");
                let place = match (c.get("path").and_then(Value::as_str), c.get("line")) {
                    (Some(p), Some(Value::Number(l))) => format!("{kind} on {p}:{l}"),
                    (Some(p), _) => format!("{kind} on {p}"),
                    _ => kind.to_string(),
                };
                let body = c.get("body").and_then(Value::as_str).unwrap_or("");
                let at = c.get("created_at").and_then(Value::as_str).unwrap_or("");
                out.push((at.to_string(), (who.to_string(), place, body.to_string())));
            }
        }
        // Both lists in one, oldest first (ISO timestamps sort as text).
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out.into_iter().map(|(_, c)| c).collect())
    }

    async fn change_for(&self, scope: &Scope) -> Result<Option<u64>, Failure> {
        if scope.change.is_some() {
            return Ok(scope.change);
        }
        let Some(sha) = &scope.head else {
            return Ok(None);
        };
        let reply = self
            .api
            .get(
                &format!("/repos/{}/commits/{sha}/pulls", scope.repo),
                scope.installation,
            )
            .await?
            .json();
        Ok(reply
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p.get("state").and_then(Value::as_str) == Some("open"))
            .and_then(|p| p.get("number")?.as_u64()))
    }

    async fn find_review(&self, scope: &Scope, marker: &str) -> Result<Option<String>, Failure> {
        let n = change(scope)?;
        let reviews = self
            .pages(scope, &format!("/repos/{}/pulls/{n}/reviews", scope.repo))
            .await?;
        Ok(reviews
            .iter()
            .find(|r| {
                r.get("body")
                    .and_then(Value::as_str)
                    .is_some_and(|b| b.contains(marker))
            })
            .and_then(id_of))
    }

    async fn post_review(
        &self,
        scope: &Scope,
        head: &str,
        body: &str,
        comments: &[Anchored],
    ) -> Result<String, Failure> {
        let n = change(scope)?;
        let inline: Vec<Value> = comments
            .iter()
            .map(|c| {
                let mut comment = json!({
                    "path": c.path,
                    "line": c.line,
                    "side": c.side.as_str(),
                    "body": c.body,
                });
                if let Some(start) = c.start_line {
                    comment["start_line"] = json!(start);
                    comment["start_side"] = json!(c.side.as_str());
                }
                comment
            })
            .collect();
        let review = self
            .api
            .send(
                Method::POST,
                &format!("/repos/{}/pulls/{n}/reviews", scope.repo),
                &json!({
                    "commit_id": head,
                    "body": body,
                    "event": "COMMENT",
                    "comments": inline,
                }),
                scope.installation,
            )
            .await?;
        id_of(&review).ok_or_else(|| Failure::fatal("GitHub's review has no id"))
    }

    async fn review_comments(
        &self,
        scope: &Scope,
        review: &str,
    ) -> Result<Vec<(String, String, u64)>, Failure> {
        let n = change(scope)?;
        let items = self
            .pages(
                scope,
                &format!("/repos/{}/pulls/{n}/reviews/{review}/comments", scope.repo),
            )
            .await?;
        Ok(items
            .iter()
            .filter_map(|c| {
                let line = c
                    .get("line")
                    .or_else(|| c.get("original_line"))
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                Some((id_of(c)?, c.get("path")?.as_str()?.to_string(), line))
            })
            .collect())
    }

    async fn dismissed(&self, scope: &Scope, own: &[String]) -> Result<Vec<Dismissed>, Failure> {
        let nodes = self
            .review_threads(
                scope,
                "isResolved resolvedBy{login databaseId} path comments(first:30){nodes{databaseId body author{login ...on User{databaseId}}}}",
            )
            .await?;
        let mut dismissed = Vec::new();
        for thread in &nodes {
            let comments = crate::render::template::lookup(thread, "comments.nodes")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let Some(first) = comments.first() else {
                continue;
            };
            let id = first.get("databaseId").map(|v| v.to_string());
            if !id.is_some_and(|id| own.contains(&id)) {
                continue;
            }
            let author = |c: &Value| User::read(c, "author.login", "author.databaseId");
            let bot = author(first).login;
            let resolver = (thread.get("isResolved") == Some(&Value::Bool(true)))
                .then(|| User::read(thread, "resolvedBy.login", "resolvedBy.databaseId"));
            let replies = comments[1..]
                .iter()
                .map(|c| (author(c), lookup_str(c, "body").unwrap_or("")));
            for (by, how) in dismissals(&bot, resolver, replies) {
                dismissed.push(Dismissed {
                    path: lookup_str(thread, "path").unwrap_or("").to_string(),
                    said: lookup_str(first, "body").unwrap_or("").to_string(),
                    by,
                    how,
                });
            }
        }
        Ok(dismissed)
    }

    async fn resolve_outdated(&self, scope: &Scope, own: &[String]) -> Result<usize, Failure> {
        let nodes = self
            .review_threads(
                scope,
                "id isResolved isOutdated comments(first:1){nodes{databaseId}}",
            )
            .await?;
        let mut resolved = 0;
        for thread in nodes {
            let outdated = thread.get("isOutdated") == Some(&Value::Bool(true))
                && thread.get("isResolved") == Some(&Value::Bool(false));
            let first = crate::render::template::lookup(&thread, "comments.nodes.0.databaseId")
                .map(|v| v.to_string());
            let ours = first.is_some_and(|id| own.contains(&id));
            let Some(id) = thread.get("id").and_then(Value::as_str) else {
                continue;
            };
            if outdated && ours {
                self.graphql(
                    scope,
                    "mutation($id:ID!){resolveReviewThread(input:{threadId:$id}){thread{id isResolved}}}",
                    json!({"id": id}),
                )
                .await?;
                resolved += 1;
            }
        }
        Ok(resolved)
    }

    async fn comment(
        &self,
        scope: &Scope,
        existing: Option<&str>,
        body: &str,
    ) -> Result<String, Failure> {
        if let Some(id) = existing {
            let updated = self
                .api
                .send(
                    Method::PATCH,
                    &format!("/repos/{}/issues/comments/{id}", scope.repo),
                    &json!({"body": body}),
                    scope.installation,
                )
                .await;
            match updated {
                Ok(_) => return Ok(id.to_string()),
                // Deleted by someone: post a new one.
                Err(f) if f.status == 404 => {}
                Err(f) => return Err(f),
            }
        }
        let path = match (scope.change, &scope.head) {
            (Some(n), _) => format!("/repos/{}/issues/{n}/comments", scope.repo),
            (None, Some(sha)) => format!("/repos/{}/commits/{sha}/comments", scope.repo),
            (None, None) => return Err(Failure::fatal("nothing to comment on")),
        };
        let created = self
            .api
            .send(
                Method::POST,
                &path,
                &json!({"body": body}),
                scope.installation,
            )
            .await?;
        id_of(&created).ok_or_else(|| Failure::fatal("GitHub's comment has no id"))
    }

    async fn check(
        &self,
        scope: &Scope,
        head: &str,
        existing: Option<&str>,
        check: &Check,
    ) -> Result<String, Failure> {
        if !self.app {
            // Tokens cannot write check runs: a commit status gates instead.
            let state = match check.conclusion {
                None => "pending",
                Some("failure") => "failure",
                Some(_) => "success",
            };
            self.api
                .send(
                    Method::POST,
                    &format!("/repos/{}/statuses/{head}", scope.repo),
                    &json!({
                        "state": state,
                        "context": CHECK_NAME,
                        "description": crate::render::clip(&check.title, 140),
                    }),
                    scope.installation,
                )
                .await?;
            return Ok(format!("status:{head}"));
        }
        let mut annotations = check.annotations.chunks(ANNOTATIONS_PER_REQUEST);
        let first: Vec<Value> = annotations
            .next()
            .map(<[Value]>::to_vec)
            .unwrap_or_default();
        let mut body = json!({
            "name": CHECK_NAME,
            "head_sha": head,
            "external_id": check.key,
        });
        match check.conclusion {
            None => body["status"] = json!("in_progress"),
            Some(conclusion) => {
                body["status"] = json!("completed");
                body["conclusion"] = json!(conclusion);
                body["output"] = json!({
                    "title": check.title,
                    "summary": crate::render::clip(&check.summary, 60_000),
                    "annotations": first,
                });
            }
        }
        let id = match existing {
            Some(id) => {
                self.api
                    .send(
                        Method::PATCH,
                        &format!("/repos/{}/check-runs/{id}", scope.repo),
                        &body,
                        scope.installation,
                    )
                    .await?;
                id.to_string()
            }
            None => {
                let created = self
                    .api
                    .send(
                        Method::POST,
                        &format!("/repos/{}/check-runs", scope.repo),
                        &body,
                        scope.installation,
                    )
                    .await?;
                id_of(&created).ok_or_else(|| Failure::fatal("GitHub's check run has no id"))?
            }
        };
        // GitHub adds the annotations of each further update to the run's.
        for more in annotations {
            self.api
                .send(
                    Method::PATCH,
                    &format!("/repos/{}/check-runs/{id}", scope.repo),
                    &json!({"output": {
                        "title": check.title,
                        "summary": crate::render::clip(&check.summary, 60_000),
                        "annotations": more,
                    }}),
                    scope.installation,
                )
                .await?;
        }
        Ok(id)
    }
}
