//! A fake GitHub for reviews, speaking the REST shapes of the docs: a
//! repository with pull requests (base, head, files with patches),
//! comparisons, file contents, Actions jobs and logs; reviews with line
//! comments (refused with 422 when a line is not in the diff, as GitHub
//! does), issue and commit comments, check runs, commit statuses, the
//! GraphQL review threads, and App installation tokens. Every request is
//! recorded; the next answers can be replaced by failures.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A recorded request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub auth: String,
    pub body: Value,
}

/// A pull request.
#[derive(Debug, Clone, Default)]
pub struct Pull {
    pub base: String,
    pub head: String,
    /// GitHub's file entries (`filename`, `status`, `patch`, …).
    pub files: Vec<Value>,
}

#[derive(Default)]
struct Repo {
    pulls: HashMap<u64, Pull>,
    /// `base...head` → (status, files, commits).
    compares: HashMap<String, (String, Vec<Value>, u64)>,
    contents: HashMap<(String, String), String>,
    logs: HashMap<u64, String>,
    run_jobs: HashMap<u64, Vec<Value>>,
    commit_pulls: HashMap<String, Vec<u64>>,
    issue_comments: Vec<Value>,
    reviews: Vec<Value>,
    review_comments: Vec<Value>,
    checks: Vec<Value>,
    statuses: Vec<Value>,
    resolved: Vec<String>,
    /// Thread → who resolved it (the bot, when it resolved it itself).
    resolved_by: HashMap<String, String>,
    /// Replies in review threads: (first comment's id, login, body).
    replies: Vec<(u64, String, String)>,
    /// Fields of a pull request's JSON beyond its SHAs (`draft`, `user`,
    /// `base.ref`), laid over the defaults.
    pull_meta: HashMap<u64, Value>,
    next_id: u64,
}

#[derive(Clone, Default)]
struct Shared {
    repo: Arc<Mutex<Repo>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    faults: Arc<super::faults::Faults>,
}

/// A running fake.
pub struct FakeForge {
    pub url: String,
    shared: Shared,
}

impl FakeForge {
    pub async fn start() -> Self {
        let shared = Shared::default();
        shared.repo.lock().unwrap().next_id = 5000;
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let addr = super::serve(app).await;
        Self {
            url: format!("http://{addr}"),
            shared,
        }
    }

    fn repo(&self) -> std::sync::MutexGuard<'_, Repo> {
        self.shared.repo.lock().unwrap()
    }

    pub fn set_pull(&self, number: u64, pull: Pull) {
        self.repo().pulls.insert(number, pull);
    }

    pub fn set_compare(
        &self,
        base: &str,
        head: &str,
        status: &str,
        files: Vec<Value>,
        commits: u64,
    ) {
        self.repo()
            .compares
            .insert(format!("{base}...{head}"), (status.into(), files, commits));
    }

    pub fn set_content(&self, sha: &str, path: &str, text: &str) {
        self.repo()
            .contents
            .insert((sha.into(), path.into()), text.into());
    }

    pub fn set_job(&self, run: u64, job: u64, name: &str, log: &str) {
        let mut repo = self.repo();
        repo.logs.insert(job, log.into());
        repo.run_jobs.entry(run).or_default().push(json!({
            "id": job, "run_id": run, "name": name, "status": "completed", "conclusion": "failure",
        }));
    }

    pub fn set_commit_pulls(&self, sha: &str, pulls: &[u64]) {
        self.repo().commit_pulls.insert(sha.into(), pulls.to_vec());
    }

    /// Answers the next request to a path ending with `suffix` with this
    /// failure.
    pub fn fail_next(&self, suffix: &str, status: u16, headers: &[(&str, &str)], body: Value) {
        self.shared.faults.fail_next(suffix, status, headers, body);
    }

    /// While on, requests to paths ending with `suffix` are carried out
    /// and their answers held back (`None`: nothing held).
    pub fn hold_after(&self, suffix: Option<&str>) {
        self.shared.faults.hold_after(suffix, None);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    pub fn reviews(&self) -> Vec<Value> {
        self.repo().reviews.clone()
    }

    pub fn review_comments(&self) -> Vec<Value> {
        self.repo().review_comments.clone()
    }

    pub fn issue_comments(&self) -> Vec<Value> {
        self.repo().issue_comments.clone()
    }

    pub fn checks(&self) -> Vec<Value> {
        self.repo().checks.clone()
    }

    pub fn statuses(&self) -> Vec<Value> {
        self.repo().statuses.clone()
    }

    pub fn resolved(&self) -> Vec<String> {
        self.repo().resolved.clone()
    }

    /// Lays `meta` (`draft`, `user`, `base: {ref}`) over pull request
    /// `number`'s JSON.
    pub fn set_pull_meta(&self, number: u64, meta: Value) {
        self.repo().pull_meta.insert(number, meta);
    }

    /// `login` resolves the thread of review comment `comment`.
    pub fn resolve_as(&self, comment: u64, login: &str) {
        let mut repo = self.repo();
        let thread = format!("PRRT_{comment}");
        repo.resolved.push(thread.clone());
        repo.resolved_by.insert(thread, login.into());
    }

    /// `login` replies `body` in the thread of review comment `comment`.
    pub fn reply(&self, comment: u64, login: &str, body: &str) {
        self.repo()
            .replies
            .push((comment, login.into(), body.into()));
    }
}

/// `over`'s fields laid on `base`, objects merged key by key.
fn laid_over(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            for (k, v) in over {
                laid_over(base.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (base, over) => *base = over.clone(),
    }
}

pub fn json_answer(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

fn not_found() -> Response {
    json_answer(
        StatusCode::NOT_FOUND,
        json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}),
    )
}

/// The text of (side, line) in `files`' patch of `path`.
fn line_text(files: &[Value], path: &Value, side: &str, line: u64) -> Option<String> {
    let patch = files.iter().find(|f| f["filename"] == *path)?["patch"].as_str()?;
    patch_line(patch, side, line)
}

/// The text of (side, line) in `patch`.
pub fn patch_line(patch: &str, side: &str, line: u64) -> Option<String> {
    let mut found = None;
    for (s, n, text) in numbered(patch) {
        if s == side && n == line {
            found = Some(text);
        }
    }
    found
}

/// The lines of a patch a review comment may sit on: (side, line).
fn commentable(patch: &str) -> Vec<(String, u64)> {
    numbered(patch)
        .into_iter()
        .map(|(s, n, _)| (s, n))
        .collect()
}

/// Each commentable line of a patch: (side, number, text).
pub fn numbered(patch: &str) -> Vec<(String, u64, String)> {
    let mut out = Vec::new();
    let (mut old, mut new) = (0u64, 0u64);
    for raw in patch.lines() {
        if let Some(h) = raw.strip_prefix("@@ -") {
            let (o, rest) = h.split_once(" +").unwrap();
            old = o.split(',').next().unwrap().parse().unwrap();
            new = rest.split([',', ' ']).next().unwrap().parse().unwrap();
            continue;
        }
        match raw.chars().next() {
            Some('+') => {
                out.push(("RIGHT".into(), new, raw[1..].to_string()));
                new += 1;
            }
            Some('-') => {
                out.push(("LEFT".into(), old, raw[1..].to_string()));
                old += 1;
            }
            Some('\\') => {}
            _ => {
                let text = raw.get(1..).unwrap_or("").to_string();
                out.push(("RIGHT".into(), new, text.clone()));
                out.push(("LEFT".into(), old, text));
                old += 1;
                new += 1;
            }
        }
    }
    out
}

async fn handle(
    State(shared): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let hold = shared.faults.holds(method.as_str(), &path);
    let answer = answer(&shared, method, uri, headers, body);
    if hold {
        shared.faults.released().await;
    }
    answer
}

fn answer(shared: &Shared, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let path = uri.path().to_string();
    shared.seen.lock().unwrap().push(Seen {
        method: method.to_string(),
        path: path.clone(),
        auth: super::authorization(&headers),
        body: body.clone(),
    });
    if let Some(failure) = shared.faults.failure(&path) {
        return failure;
    }
    let query: HashMap<String, String> = uri
        .query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect()
        })
        .unwrap_or_default();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let mut repo = shared.repo.lock().unwrap();
    repo.next_id += 1;
    let id = repo.next_id;
    let m = method.as_str();
    match (m, parts.as_slice()) {
        ("POST", ["app", "installations", inst, "access_tokens"]) => json_answer(
            StatusCode::CREATED,
            json!({"token": format!("ghs_installation_{inst}"), "expires_at": "2099-01-01T00:00:00Z"}),
        ),
        ("POST", ["graphql"]) => {
            let query = body["query"].as_str().unwrap_or("");
            if query.contains("resolveReviewThread") {
                let thread = body["variables"]["id"].as_str().unwrap_or("").to_string();
                repo.resolved.push(thread.clone());
                repo.resolved_by.insert(thread.clone(), "review-bot".into());
                return json_answer(
                    StatusCode::OK,
                    json!({"data": {"resolveReviewThread": {"thread": {"id": thread, "isResolved": true}}}}),
                );
            }
            let number = body["variables"]["number"].as_u64().unwrap_or(0);
            let files = repo
                .pulls
                .get(&number)
                .map(|p| p.files.clone())
                .unwrap_or_default();
            let nodes: Vec<Value> = repo
                .review_comments
                .iter()
                .map(|c| {
                    let id = c["id"].as_u64().unwrap();
                    // Outdated when its line no longer reads as it did.
                    let now = line_text(
                        &files,
                        &c["path"],
                        c["side"].as_str().unwrap_or("RIGHT"),
                        c["line"].as_u64().unwrap_or(0),
                    );
                    let thread = format!("PRRT_{id}");
                    let mut comments = vec![json!({"databaseId": id, "body": c["body"],
                                                   "author": {"login": "review-bot"}})];
                    comments.extend(repo.replies.iter().filter(|r| r.0 == id).map(|(_, login, body)| {
                        json!({"databaseId": 0, "body": body, "author": {"login": login}})
                    }));
                    json!({
                        "id": thread,
                        "path": c["path"],
                        "isResolved": repo.resolved.contains(&thread),
                        "resolvedBy": repo.resolved_by.get(&thread).map(|l| json!({"login": l})),
                        "isOutdated": now.as_deref() != c["line_text"].as_str(),
                        "comments": {"nodes": comments},
                    })
                })
                .collect();
            json_answer(
                StatusCode::OK,
                json!({"data": {"repository": {"pullRequest": {"reviewThreads": {"nodes": nodes}}}}}),
            )
        }
        ("GET", ["repos", _, _, "pulls", n]) => {
            let n: u64 = n.parse().unwrap_or(0);
            match repo.pulls.get(&n) {
                Some(p) => {
                    let mut pull = json!({"number": n, "state": "open", "draft": false,
                           "user": {"login": "octocat", "type": "User"},
                           "base": {"sha": p.base, "ref": "main"}, "head": {"sha": p.head}});
                    if let Some(meta) = repo.pull_meta.get(&n) {
                        laid_over(&mut pull, meta);
                    }
                    json_answer(StatusCode::OK, pull)
                }
                None => not_found(),
            }
        }
        ("GET", ["repos", _, _, "pulls", n, "files"]) => {
            match repo.pulls.get(&n.parse().unwrap_or(0)) {
                Some(p) => json_answer(StatusCode::OK, Value::Array(p.files.clone())),
                None => not_found(),
            }
        }
        ("GET", ["repos", _, _, "compare", basehead]) => match repo.compares.get(*basehead) {
            Some((status, files, commits)) => json_answer(
                StatusCode::OK,
                json!({"status": status, "total_commits": commits, "files": files}),
            ),
            None => not_found(),
        },
        ("GET", ["repos", _, _, "contents", rest @ ..]) => {
            let file = rest.join("/");
            let sha = query.get("ref").cloned().unwrap_or_default();
            match repo.contents.get(&(sha, file)) {
                Some(text) => (StatusCode::OK, text.clone()).into_response(),
                None => not_found(),
            }
        }
        ("GET", ["repos", _, _, "actions", "jobs", job, "logs"]) => {
            match repo.logs.get(&job.parse().unwrap_or(0)) {
                Some(log) => (StatusCode::OK, log.clone()).into_response(),
                None => not_found(),
            }
        }
        ("GET", ["repos", _, _, "actions", "runs", run, "jobs"]) => {
            let jobs = repo
                .run_jobs
                .get(&run.parse().unwrap_or(0))
                .cloned()
                .unwrap_or_default();
            json_answer(
                StatusCode::OK,
                json!({"total_count": jobs.len(), "jobs": jobs}),
            )
        }
        ("GET", ["repos", _, _, "commits", sha, "pulls"]) => {
            let pulls: Vec<Value> = repo
                .commit_pulls
                .get(*sha)
                .into_iter()
                .flatten()
                .map(|n| json!({"number": n, "state": "open"}))
                .collect();
            json_answer(StatusCode::OK, Value::Array(pulls))
        }
        ("GET", ["repos", _, _, "issues", _, "comments"]) => {
            json_answer(StatusCode::OK, Value::Array(repo.issue_comments.clone()))
        }
        ("POST", ["repos", _, _, "issues", n, "comments"]) => {
            let c = json!({"id": id, "body": body["body"], "issue": n.parse::<u64>().unwrap_or(0),
                           "user": {"login": "switchboard[bot]", "type": "Bot"}});
            repo.issue_comments.push(c.clone());
            json_answer(StatusCode::CREATED, c)
        }
        ("POST", ["repos", _, _, "commits", sha, "comments"]) => {
            let c = json!({"id": id, "body": body["body"], "commit_id": sha,
                           "user": {"login": "switchboard[bot]", "type": "Bot"}});
            repo.issue_comments.push(c.clone());
            json_answer(StatusCode::CREATED, c)
        }
        ("PATCH", ["repos", _, _, "issues", "comments", cid]) => {
            let cid: u64 = cid.parse().unwrap_or(0);
            match repo.issue_comments.iter_mut().find(|c| c["id"] == cid) {
                Some(c) => {
                    c["body"] = body["body"].clone();
                    json_answer(StatusCode::OK, c.clone())
                }
                None => not_found(),
            }
        }
        ("GET", ["repos", _, _, "pulls", _, "comments"]) => {
            json_answer(StatusCode::OK, Value::Array(repo.review_comments.clone()))
        }
        ("GET", ["repos", _, _, "pulls", _, "reviews"]) => {
            json_answer(StatusCode::OK, Value::Array(repo.reviews.clone()))
        }
        ("POST", ["repos", _, _, "pulls", n, "reviews"]) => {
            let Some(pull) = repo.pulls.get(&n.parse().unwrap_or(0)).cloned() else {
                return not_found();
            };
            let comments = body["comments"].as_array().cloned().unwrap_or_default();
            for c in &comments {
                let file = pull.files.iter().find(|f| f["filename"] == c["path"]);
                // A comment on several lines names its first one too, in
                // the same hunk, before the last.
                let line = c["line"].as_u64().unwrap_or(0);
                let start = c["start_line"].as_u64();
                let ok = file
                    .and_then(|f| f["patch"].as_str())
                    .map(commentable)
                    .is_some_and(|lines| {
                        let side = c["side"].as_str().unwrap_or("RIGHT");
                        (start.unwrap_or(line)..=line)
                            .all(|l| lines.contains(&(side.to_string(), l)))
                            && start.is_none_or(|s| s < line && c["start_side"] == c["side"])
                    });
                if !ok {
                    return json_answer(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        json!({"message": "Unprocessable Entity", "errors": ["Line could not be resolved"]}),
                    );
                }
            }
            let review = json!({"id": id, "body": body["body"], "commit_id": body["commit_id"],
                                "state": "COMMENTED", "user": {"login": "switchboard[bot]"}});
            repo.reviews.push(review.clone());
            for (i, c) in comments.iter().enumerate() {
                let cid = id * 100 + i as u64;
                let text = line_text(
                    &pull.files,
                    &c["path"],
                    c["side"].as_str().unwrap_or("RIGHT"),
                    c["line"].as_u64().unwrap_or(0),
                );
                repo.review_comments.push(json!({
                    "line_text": text,
                    "id": cid, "pull_request_review_id": id, "path": c["path"], "line": c["line"],
                    "side": c["side"], "body": c["body"], "commit_id": body["commit_id"],
                    "start_line": c["start_line"], "start_side": c["start_side"],
                    "user": {"login": "switchboard[bot]"},
                }));
            }
            json_answer(StatusCode::OK, review)
        }
        ("GET", ["repos", _, _, "pulls", _, "reviews", rid, "comments"]) => {
            let rid: u64 = rid.parse().unwrap_or(0);
            let list: Vec<Value> = repo
                .review_comments
                .iter()
                .filter(|c| c["pull_request_review_id"] == rid)
                .cloned()
                .collect();
            json_answer(StatusCode::OK, Value::Array(list))
        }
        ("POST", ["repos", _, _, "check-runs"]) => {
            let mut check = body.clone();
            check["id"] = json!(id);
            repo.checks.push(check.clone());
            json_answer(StatusCode::CREATED, check)
        }
        ("PATCH", ["repos", _, _, "check-runs", cid]) => {
            let cid: u64 = cid.parse().unwrap_or(0);
            match repo.checks.iter_mut().find(|c| c["id"] == cid) {
                Some(check) => {
                    for (k, v) in body.as_object().cloned().unwrap_or_default() {
                        check[k.as_str()] = v;
                    }
                    json_answer(StatusCode::OK, check.clone())
                }
                None => not_found(),
            }
        }
        ("POST", ["repos", _, _, "statuses", sha]) => {
            let mut status = body.clone();
            status["sha"] = json!(sha);
            repo.statuses.push(status.clone());
            json_answer(StatusCode::CREATED, status)
        }
        _ => not_found(),
    }
}
