//! GitLab's REST API (v4) as the forge tools and the review output use
//! it: merge request diffs and versions, repository files, job traces,
//! discussions with positions for line comments, notes, commit statuses.

use async_trait::async_trait;
use reqwest::Method;
use serde_json::{Value, json};

use super::api::{Api, Failure};
use super::diff::{FileDiff, Side};
use super::github::CHECK_NAME;
use super::host::{
    Anchored, ChangeState, Check, Compared, Dismissed, Host, User, change, dismissals, id_of,
};
use super::scope::{ChangeInfo, Scope};
use crate::render::template::lookup_str;

/// GitLab for one route.
#[derive(Debug, Clone)]
pub struct Gitlab {
    api: Api,
}

fn encode(part: &str) -> String {
    url::form_urlencoded::byte_serialize(part.as_bytes()).collect()
}

/// The project as paths name it: its id, else its encoded path.
fn project(scope: &Scope) -> String {
    scope
        .project
        .map_or_else(|| encode(&scope.repo), |id| id.to_string())
}

/// A GitLab diff entry as a file diff.
fn file_diff(v: &Value) -> Option<FileDiff> {
    let path = v.get("new_path")?.as_str()?.to_string();
    let old = v
        .get("old_path")
        .and_then(Value::as_str)
        .map(str::to_string);
    let flag = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
    let status = if flag("new_file") {
        "added"
    } else if flag("deleted_file") {
        "removed"
    } else if flag("renamed_file") {
        "renamed"
    } else {
        "modified"
    };
    let patch = v
        .get("diff")
        .and_then(Value::as_str)
        .filter(|d| !d.is_empty())
        .map(str::to_string);
    let count = |marker: char| {
        patch.as_deref().map_or(0, |p| {
            p.lines()
                .filter(|l| l.starts_with(marker) && !l.starts_with("+++") && !l.starts_with("---"))
                .count() as u64
        })
    };
    Some(FileDiff {
        old_path: old.filter(|o| *o != path),
        path,
        status: status.into(),
        additions: count('+'),
        deletions: count('-'),
        patch,
    })
}

impl Gitlab {
    /// GitLab through `api`.
    pub fn new(api: Api) -> Self {
        Self { api }
    }

    async fn pages(&self, path: &str) -> Result<Vec<Value>, Failure> {
        self.api.list(path, None).await
    }

    fn mr_path(&self, scope: &Scope) -> Result<String, Failure> {
        Ok(format!(
            "/projects/{}/merge_requests/{}",
            project(scope),
            change(scope)?
        ))
    }

    async fn diff_refs(&self, scope: &Scope) -> Result<Value, Failure> {
        let mr = self.api.get(&self.mr_path(scope)?, None).await?.json();
        mr.get("diff_refs")
            .filter(|r| r.is_object())
            .cloned()
            .ok_or_else(|| Failure::fatal("GitLab's merge request has no diff_refs yet"))
    }

    async fn discussions(&self, scope: &Scope) -> Result<Vec<Value>, Failure> {
        self.pages(&format!("{}/discussions", self.mr_path(scope)?))
            .await
    }
}

#[async_trait]
impl Host for Gitlab {
    fn name(&self) -> &'static str {
        "GitLab"
    }

    /// GitLab's block sits on the last line and reaches `above` lines up.
    fn suggestion(&self, replacement: &str, above: u64) -> String {
        let fence = super::host::fence_for(replacement);
        format!("{fence}suggestion:-{above}+0\n{replacement}\n{fence}")
    }

    async fn state(&self, scope: &Scope) -> Result<ChangeState, Failure> {
        let mr = self.api.get(&self.mr_path(scope)?, None).await?.json();
        let get = |k: &str| {
            lookup_str(&mr, k)
                .map(str::to_string)
                .ok_or_else(|| Failure::fatal(format!("GitLab's merge request has no {k} yet")))
        };
        let flag = |k: &str| mr.get(k).and_then(Value::as_bool) == Some(true);
        Ok(ChangeState {
            base: get("diff_refs.base_sha")?,
            head: get("diff_refs.head_sha")?,
            // The target branch's tip, not the merge base the author chose
            // by branching from an old commit.
            settings_at: get("diff_refs.start_sha")?,
            info: ChangeInfo {
                draft: flag("draft") || flag("work_in_progress"),
                author: lookup_str(&mr, "author.username")
                    .unwrap_or_default()
                    .to_string(),
                bot: false,
                target: lookup_str(&mr, "target_branch")
                    .unwrap_or_default()
                    .to_string(),
                author_id: mr
                    .get("author")
                    .and_then(|a| a.get("id"))
                    .and_then(Value::as_u64),
            },
        })
    }

    /// The account's `bot` flag: a bot's username follows a pattern a
    /// person's could imitate.
    async fn author_is_bot(&self, _scope: &Scope, info: &ChangeInfo) -> Result<bool, Failure> {
        let Some(id) = info.author_id else {
            return Ok(false);
        };
        let user = self.api.get(&format!("/users/{id}"), None).await?.json();
        Ok(user.get("bot").and_then(Value::as_bool) == Some(true))
    }

    async fn change_files(&self, scope: &Scope) -> Result<Vec<FileDiff>, Failure> {
        let items = self
            .pages(&format!("{}/diffs", self.mr_path(scope)?))
            .await?;
        Ok(items.iter().filter_map(file_diff).collect())
    }

    async fn compare(&self, scope: &Scope, from: &str, to: &str) -> Result<Compared, Failure> {
        let p = project(scope);
        let base = self
            .api
            .get(
                &format!(
                    "/projects/{p}/repository/merge_base?refs[]={}&refs[]={}",
                    encode(from),
                    encode(to)
                ),
                None,
            )
            .await;
        let descends = match base {
            Ok(reply) => reply.json().get("id").and_then(Value::as_str) == Some(from),
            // The old head is gone from the repository: rewritten.
            Err(f) if matches!(f.status, 400 | 404) => false,
            Err(f) => return Err(f),
        };
        if !descends {
            return Ok(Compared::default());
        }
        let reply = self
            .api
            .get(
                &format!(
                    "/projects/{p}/repository/compare?from={}&to={}&straight=true",
                    encode(from),
                    encode(to)
                ),
                None,
            )
            .await?
            .json();
        Ok(Compared {
            descends,
            commits: reply
                .get("commits")
                .and_then(Value::as_array)
                .map_or(0, |c| c.len() as u64),
            files: reply
                .get("diffs")
                .and_then(Value::as_array)
                .map(|d| d.iter().filter_map(file_diff).collect())
                .unwrap_or_default(),
        })
    }

    async fn file(&self, scope: &Scope, path: &str, sha: &str) -> Result<String, Failure> {
        self.api
            .call(
                Method::GET,
                &format!(
                    "/projects/{}/repository/files/{}/raw?ref={}",
                    project(scope),
                    encode(path),
                    encode(sha)
                ),
                None,
                "text/plain",
                None,
            )
            .await
            .map(|r| r.body)
    }

    async fn failed_job(&self, scope: &Scope) -> Result<Option<(u64, String)>, Failure> {
        let Some(pipeline) = scope.run else {
            return Ok(None);
        };
        let jobs = self
            .pages(&format!(
                "/projects/{}/pipelines/{pipeline}/jobs?scope[]=failed",
                project(scope)
            ))
            .await?;
        Ok(jobs
            .iter()
            .find_map(|j| Some((j.get("id")?.as_u64()?, j.get("name")?.as_str()?.to_string()))))
    }

    async fn job_log(&self, scope: &Scope, job: u64) -> Result<String, Failure> {
        self.api
            .call(
                Method::GET,
                &format!("/projects/{}/jobs/{job}/trace", project(scope)),
                None,
                "text/plain",
                None,
            )
            .await
            .map(|r| r.body)
    }

    async fn thread(&self, scope: &Scope) -> Result<Vec<(String, String, String)>, Failure> {
        let notes = self
            .pages(&format!(
                "{}/notes?sort=asc&order_by=created_at",
                self.mr_path(scope)?
            ))
            .await?;
        Ok(notes
            .iter()
            .filter(|n| n.get("system") != Some(&Value::Bool(true)))
            .map(|n| {
                let who = lookup_str(n, "author.username").unwrap_or("unknown");
                let place = match (
                    lookup_str(n, "position.new_path"),
                    n.get("position").and_then(|p| p.get("new_line")),
                ) {
                    (Some(p), Some(Value::Number(l))) => format!("comment on {p}:{l}"),
                    (Some(p), _) => format!("comment on {p}"),
                    _ => "comment".into(),
                };
                let body = n.get("body").and_then(Value::as_str).unwrap_or("");
                (who.to_string(), place, body.to_string())
            })
            .collect())
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
                &format!(
                    "/projects/{}/repository/commits/{sha}/merge_requests",
                    project(scope)
                ),
                None,
            )
            .await?
            .json();
        Ok(reply
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m.get("state").and_then(Value::as_str) == Some("opened"))
            .and_then(|m| m.get("iid")?.as_u64()))
    }

    /// GitLab has no review object: each line comment is a discussion
    /// carrying its own marker, and posting skips those already there.
    async fn find_review(&self, _scope: &Scope, _marker: &str) -> Result<Option<String>, Failure> {
        Ok(None)
    }

    async fn post_review(
        &self,
        scope: &Scope,
        head: &str,
        _body: &str,
        comments: &[Anchored],
    ) -> Result<String, Failure> {
        let refs = self.diff_refs(scope).await?;
        let existing = self.discussions(scope).await?;
        let posted = |body: &str| {
            let mark = body.rsplit("<!-- switchboard:").next().unwrap_or("");
            existing.iter().any(|d| {
                lookup_str(d, "notes.0.body").is_some_and(|b| !mark.is_empty() && b.contains(mark))
            })
        };
        let path = format!("{}/discussions", self.mr_path(scope)?);
        for c in comments {
            if posted(&c.body) {
                continue;
            }
            let mut position = json!({
                "position_type": "text",
                "base_sha": refs.get("base_sha"),
                "start_sha": refs.get("start_sha"),
                "head_sha": refs.get("head_sha").cloned().unwrap_or_else(|| json!(head)),
                "new_path": c.path,
                "old_path": c.path,
            });
            match c.side {
                Side::Right => position["new_line"] = json!(c.line),
                Side::Left => position["old_line"] = json!(c.line),
            }
            self.api
                .send(
                    Method::POST,
                    &path,
                    &json!({"body": c.body, "position": position}),
                    None,
                )
                .await?;
        }
        Ok(head.to_string())
    }

    async fn review_comments(
        &self,
        scope: &Scope,
        _review: &str,
    ) -> Result<Vec<(String, String, u64)>, Failure> {
        Ok(self
            .discussions(scope)
            .await?
            .iter()
            .filter_map(|d| {
                let note = d.get("notes")?.get(0)?;
                note.get("body")?
                    .as_str()?
                    .contains("<!-- switchboard:")
                    .then_some(())?;
                let position = note.get("position")?;
                let line = position
                    .get("new_line")
                    .and_then(Value::as_u64)
                    .or_else(|| position.get("old_line").and_then(Value::as_u64))?;
                Some((
                    id_of(d)?,
                    position.get("new_path")?.as_str()?.to_string(),
                    line,
                ))
            })
            .collect())
    }

    async fn dismissed(&self, scope: &Scope, own: &[String]) -> Result<Vec<Dismissed>, Failure> {
        let mut dismissed = Vec::new();
        for d in self.discussions(scope).await? {
            if !id_of(&d).is_some_and(|id| own.contains(&id)) {
                continue;
            }
            let notes = d
                .get("notes")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let Some(first) = notes.first() else { continue };
            let author = |n: &Value| User::read(n, "author.username", "author.id");
            let bot = author(first).login;
            let resolver = (first.get("resolved").and_then(Value::as_bool) == Some(true))
                .then(|| User::read(first, "resolved_by.username", "resolved_by.id"));
            let replies = notes[1..]
                .iter()
                .map(|n| (author(n), lookup_str(n, "body").unwrap_or("")));
            for (by, how) in dismissals(&bot, resolver, replies) {
                dismissed.push(Dismissed {
                    path: lookup_str(first, "position.new_path")
                        .unwrap_or("")
                        .to_string(),
                    said: lookup_str(first, "body").unwrap_or("").to_string(),
                    by,
                    how,
                });
            }
        }
        Ok(dismissed)
    }

    /// A discussion of the gateway's is outdated when its line no longer
    /// reads as it did (GitLab's API has no flag for it): its comment
    /// carries the hash of the line's text, compared with the line at its
    /// place in the merge request's diff now.
    async fn resolve_outdated(&self, scope: &Scope, own: &[String]) -> Result<usize, Failure> {
        let files = self.change_files(scope).await?;
        let mut resolved = 0;
        for d in self.discussions(scope).await? {
            let Some(id) = id_of(&d) else { continue };
            let Some(note) = d.get("notes").and_then(|n| n.get(0)) else {
                continue;
            };
            let open = note.get("resolved").and_then(Value::as_bool) == Some(false);
            let was = note
                .get("body")
                .and_then(Value::as_str)
                .and_then(|b| b.split(" line:").nth(1))
                .and_then(|h| h.split_whitespace().next());
            let (Some(was), true) = (was, open && own.contains(&id)) else {
                continue;
            };
            let position = note.get("position");
            let path = position
                .and_then(|p| lookup_str(p, "new_path"))
                .unwrap_or("");
            let (side_new, line) = match position {
                Some(p) if p.get("new_line").and_then(Value::as_u64).is_some() => {
                    (true, p.get("new_line").and_then(Value::as_u64))
                }
                Some(p) => (false, p.get("old_line").and_then(Value::as_u64)),
                None => (true, None),
            };
            let now = files
                .iter()
                .find(|f| f.path == path)
                .and_then(|f| f.patch.as_deref())
                .zip(line)
                .and_then(|(patch, line)| {
                    super::diff::lines(patch)
                        .into_iter()
                        .find(|l| {
                            if side_new {
                                l.new == Some(line)
                            } else {
                                l.old == Some(line) && l.kind != '+'
                            }
                        })
                        .map(|l| super::findings::line_hash(l.text))
                });
            if now.as_deref() != Some(was) {
                self.api
                    .call(
                        Method::PUT,
                        &format!("{}/discussions/{id}?resolved=true", self.mr_path(scope)?),
                        None,
                        "application/json",
                        None,
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
        let p = project(scope);
        if let (Some(id), Some(n)) = (existing, scope.change) {
            let updated = self
                .api
                .send(
                    Method::PUT,
                    &format!("/projects/{p}/merge_requests/{n}/notes/{id}"),
                    &json!({"body": body}),
                    None,
                )
                .await;
            match updated {
                Ok(_) => return Ok(id.to_string()),
                // Deleted by someone: post a new one.
                Err(f) if f.status == 404 => {}
                Err(f) => return Err(f),
            }
        }
        let created = match (scope.change, &scope.head) {
            (Some(n), _) => {
                self.api
                    .send(
                        Method::POST,
                        &format!("/projects/{p}/merge_requests/{n}/notes"),
                        &json!({"body": body}),
                        None,
                    )
                    .await?
            }
            (None, Some(sha)) => {
                self.api
                    .send(
                        Method::POST,
                        &format!("/projects/{p}/repository/commits/{sha}/comments"),
                        &json!({"note": body}),
                        None,
                    )
                    .await?
            }
            (None, None) => return Err(Failure::fatal("nothing to comment on")),
        };
        // A commit comment has no id: its place stands for it.
        Ok(id_of(&created)
            .unwrap_or_else(|| format!("commit:{}", scope.head.as_deref().unwrap_or(""))))
    }

    async fn check(
        &self,
        scope: &Scope,
        head: &str,
        _existing: Option<&str>,
        check: &Check,
    ) -> Result<String, Failure> {
        // GitLab has no neutral: only a failure fails.
        let state = match check.conclusion {
            None => "running",
            Some("failure") => "failed",
            Some(_) => "success",
        };
        self.api
            .send(
                Method::POST,
                &format!("/projects/{}/statuses/{head}", project(scope)),
                &json!({
                    "state": state,
                    "name": CHECK_NAME,
                    "description": crate::render::clip(&check.title, 140),
                }),
                None,
            )
            .await?;
        Ok(format!("status:{head}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitlab_diffs_read_as_file_diffs() {
        let v = json!({"old_path": "a.rs", "new_path": "b.rs", "renamed_file": true,
                       "diff": "@@ -1,2 +1,2 @@\n-x\n+y\n z\n"});
        let f = file_diff(&v).unwrap();
        assert_eq!(
            (f.path.as_str(), f.old_path.as_deref(), f.status.as_str()),
            ("b.rs", Some("a.rs"), "renamed")
        );
        assert_eq!((f.additions, f.deletions), (1, 1));
        let scope = Scope::new("grp/sub/app".into(), crate::forge::Task::Review);
        assert_eq!(project(&scope), "grp%2Fsub%2Fapp");
    }
}
