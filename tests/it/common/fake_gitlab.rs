//! A fake GitLab (REST v4) for reviews: a project with merge requests
//! (diff refs, diffs), merge bases and comparisons, raw files, pipeline
//! jobs and traces; notes, discussions with positions (refused with 400
//! when the line is not in the diff, as GitLab does), resolving them, and
//! commit statuses. Every request is recorded with its `PRIVATE-TOKEN`;
//! the next answer to a path can be replaced by a failure.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::fake_forge::{json_answer, patch_line};

/// A recorded request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: String,
    pub token: String,
    pub body: Value,
}

/// A merge request.
#[derive(Debug, Clone, Default)]
pub struct MergeRequest {
    pub base: String,
    pub start: String,
    pub head: String,
    /// GitLab diff entries (`old_path`, `new_path`, `diff`, `new_file`, …).
    pub diffs: Vec<Value>,
}

#[derive(Default)]
struct Project {
    mrs: HashMap<u64, MergeRequest>,
    /// (a, b) → their merge base.
    bases: HashMap<(String, String), String>,
    /// (from, to) → (diffs, commits).
    compares: HashMap<(String, String), (Vec<Value>, u64)>,
    files: HashMap<(String, String), String>,
    traces: HashMap<u64, String>,
    pipeline_jobs: HashMap<u64, Vec<Value>>,
    commit_mrs: HashMap<String, Vec<u64>>,
    notes: Vec<Value>,
    discussions: Vec<Value>,
    statuses: Vec<Value>,
    /// Fields of a merge request's JSON beyond its SHAs (`draft`,
    /// `author`, `target_branch`), laid over the defaults.
    mr_meta: HashMap<u64, Value>,
    /// User ids whose account is a bot's.
    bots: Vec<u64>,
    next_id: u64,
}

#[derive(Clone, Default)]
struct Shared {
    project: Arc<Mutex<Project>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    faults: Arc<super::faults::Faults>,
}

/// A running fake.
pub struct FakeGitlab {
    /// The API base, `http://127.0.0.1:<port>/api/v4`.
    pub url: String,
    shared: Shared,
}

impl FakeGitlab {
    pub async fn start() -> Self {
        let shared = Shared::default();
        shared.project.lock().unwrap().next_id = 700;
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let addr = super::serve(app).await;
        Self {
            url: format!("http://{addr}/api/v4"),
            shared,
        }
    }

    fn project(&self) -> std::sync::MutexGuard<'_, Project> {
        self.shared.project.lock().unwrap()
    }

    pub fn set_mr(&self, iid: u64, mr: MergeRequest) {
        self.project().mrs.insert(iid, mr);
    }

    /// A file's text at a commit, for the raw file endpoint.
    pub fn set_file(&self, sha: &str, path: &str, text: &str) {
        self.project()
            .files
            .insert((sha.into(), path.into()), text.into());
    }

    pub fn set_merge_base(&self, a: &str, b: &str, base: &str) {
        self.project()
            .bases
            .insert((a.into(), b.into()), base.into());
    }

    pub fn set_compare(&self, from: &str, to: &str, diffs: Vec<Value>, commits: u64) {
        self.project()
            .compares
            .insert((from.into(), to.into()), (diffs, commits));
    }

    pub fn set_job(&self, pipeline: u64, job: u64, name: &str, trace: &str) {
        let mut p = self.project();
        p.traces.insert(job, trace.into());
        p.pipeline_jobs.entry(pipeline).or_default().push(
            json!({"id": job, "name": name, "stage": "test", "status": "failed", "pipeline": {"id": pipeline}}),
        );
    }

    pub fn set_commit_mrs(&self, sha: &str, iids: &[u64]) {
        self.project().commit_mrs.insert(sha.into(), iids.to_vec());
    }

    pub fn fail_next(&self, suffix: &str, status: u16, headers: &[(&str, &str)], body: Value) {
        self.shared.faults.fail_next(suffix, status, headers, body);
    }

    /// While on, POSTs to paths ending with `suffix` are carried out and
    /// their answers held back (`None`: nothing held).
    pub fn hold_after(&self, suffix: Option<&str>) {
        self.shared.faults.hold_after(suffix, Some("POST"));
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    pub fn notes(&self) -> Vec<Value> {
        self.project().notes.clone()
    }

    pub fn discussions(&self) -> Vec<Value> {
        self.project().discussions.clone()
    }

    pub fn statuses(&self) -> Vec<Value> {
        self.project().statuses.clone()
    }

    /// Sets `meta`'s fields (`draft`, `author`, `target_branch`) in
    /// merge request `iid`'s JSON.
    pub fn set_mr_meta(&self, iid: u64, meta: Value) {
        self.project().mr_meta.insert(iid, meta);
    }

    /// Marks user `id`'s account as a bot's.
    pub fn set_bot(&self, id: u64) {
        self.project().bots.push(id);
    }

    /// `username` resolves discussion `discussion`.
    pub fn resolve_as(&self, discussion: &str, username: &str) {
        let mut p = self.project();
        if let Some(d) = p.discussions.iter_mut().find(|d| d["id"] == discussion) {
            d["notes"][0]["resolved"] = json!(true);
            d["notes"][0]["resolved_by"] = json!({"username": username});
        }
    }

    /// `author` (`{"username", "id"}`) replies `body` in discussion
    /// `discussion`.
    pub fn reply(&self, discussion: &str, author: Value, body: &str) {
        let mut p = self.project();
        p.next_id += 1;
        let id = p.next_id;
        if let Some(d) = p.discussions.iter_mut().find(|d| d["id"] == discussion)
            && let Some(notes) = d["notes"].as_array_mut()
        {
            notes.push(json!({"id": id, "type": "DiffNote", "body": body,
                              "author": author, "resolvable": true, "resolved": false}));
        }
    }
}

fn not_found() -> Response {
    json_answer(StatusCode::NOT_FOUND, json!({"message": "404 Not found"}))
}

fn mr_diff_line(mr: &MergeRequest, path: &str, side: &str, line: u64) -> Option<String> {
    let diff = mr.diffs.iter().find(|d| d["new_path"] == path)?["diff"].as_str()?;
    patch_line(diff, side, line)
}

async fn handle(
    State(shared): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let hold = shared.faults.holds(method.as_str(), uri.path());
    let answer = answer(&shared, method, uri, headers, body);
    if hold {
        shared.faults.released().await;
    }
    answer
}

fn answer(shared: &Shared, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let path = uri.path().to_string();
    let query = uri.query().unwrap_or("").to_string();
    shared.seen.lock().unwrap().push(Seen {
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
        token: headers
            .get("private-token")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string(),
        body: body.clone(),
    });
    if let Some(failure) = shared.faults.failure(&path) {
        return failure;
    }
    let params: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let param = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    if let Some(user) = path.strip_prefix("/api/v4/users/") {
        // A user, a bot when the test said so.
        let id: u64 = user.parse().unwrap_or(0);
        let bot = shared.project.lock().unwrap().bots.contains(&id);
        return json_answer(
            StatusCode::OK,
            json!({"id": id, "username": format!("user{id}"), "bot": bot}),
        );
    }
    let Some(rest) = path.strip_prefix("/api/v4/projects/") else {
        return not_found();
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let mut p = shared.project.lock().unwrap();
    p.next_id += 1;
    let id = p.next_id;
    match (method.as_str(), &parts[1..]) {
        ("GET", ["merge_requests", iid]) => {
            let iid: u64 = iid.parse().unwrap_or(0);
            match p.mrs.get(&iid) {
                Some(mr) => {
                    let mut json = json!({"iid": iid, "state": "opened", "sha": mr.head,
                           "draft": false, "work_in_progress": false,
                           "author": {"username": "alice"}, "target_branch": "main",
                           "diff_refs": {"base_sha": mr.base, "start_sha": mr.start, "head_sha": mr.head}});
                    for (k, v) in p
                        .mr_meta
                        .get(&iid)
                        .and_then(Value::as_object)
                        .into_iter()
                        .flatten()
                    {
                        json[k] = v.clone();
                    }
                    json_answer(StatusCode::OK, json)
                }
                None => not_found(),
            }
        }
        ("GET", ["merge_requests", iid, "diffs"]) => match p.mrs.get(&iid.parse().unwrap_or(0)) {
            Some(mr) => json_answer(StatusCode::OK, Value::Array(mr.diffs.clone())),
            None => not_found(),
        },
        ("GET", ["repository", "merge_base"]) => {
            let refs: Vec<String> = params
                .iter()
                .filter(|(k, _)| k == "refs[]")
                .map(|(_, v)| v.clone())
                .collect();
            match refs
                .first()
                .zip(refs.get(1))
                .and_then(|(a, b)| p.bases.get(&(a.clone(), b.clone())))
            {
                Some(base) => json_answer(StatusCode::OK, json!({"id": base})),
                None => not_found(),
            }
        }
        ("GET", ["repository", "compare"]) => {
            let key = (
                param("from").unwrap_or_default(),
                param("to").unwrap_or_default(),
            );
            match p.compares.get(&key) {
                Some((diffs, commits)) => json_answer(
                    StatusCode::OK,
                    json!({"commits": (0..*commits).map(|i| json!({"id": format!("c{i}")})).collect::<Vec<_>>(),
                           "diffs": diffs, "compare_same_ref": false}),
                ),
                None => not_found(),
            }
        }
        ("GET", ["repository", "files", file, "raw"]) => {
            let file = url::form_urlencoded::parse(format!("f={file}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default();
            match p.files.get(&(param("ref").unwrap_or_default(), file)) {
                Some(text) => (StatusCode::OK, text.clone()).into_response(),
                None => not_found(),
            }
        }
        ("GET", ["pipelines", pid, "jobs"]) => {
            let jobs = p
                .pipeline_jobs
                .get(&pid.parse().unwrap_or(0))
                .cloned()
                .unwrap_or_default();
            json_answer(StatusCode::OK, Value::Array(jobs))
        }
        ("GET", ["jobs", jid, "trace"]) => match p.traces.get(&jid.parse().unwrap_or(0)) {
            Some(trace) => (StatusCode::OK, trace.clone()).into_response(),
            None => not_found(),
        },
        ("GET", ["repository", "commits", sha, "merge_requests"]) => {
            let mrs: Vec<Value> = p
                .commit_mrs
                .get(*sha)
                .into_iter()
                .flatten()
                .map(|iid| json!({"iid": iid, "state": "opened"}))
                .collect();
            json_answer(StatusCode::OK, Value::Array(mrs))
        }
        ("GET", ["merge_requests", _, "notes"]) => {
            json_answer(StatusCode::OK, Value::Array(p.notes.clone()))
        }
        ("POST", ["merge_requests", iid, "notes"]) => {
            let note = json!({"id": id, "body": body["body"], "noteable_iid": iid.parse::<u64>().unwrap_or(0),
                              "system": false, "author": {"username": "review-bot"}});
            p.notes.push(note.clone());
            json_answer(StatusCode::CREATED, note)
        }
        ("PUT", ["merge_requests", _, "notes", nid]) => {
            let nid: u64 = nid.parse().unwrap_or(0);
            match p.notes.iter_mut().find(|n| n["id"] == nid) {
                Some(n) => {
                    n["body"] = body["body"].clone();
                    json_answer(StatusCode::OK, n.clone())
                }
                None => not_found(),
            }
        }
        ("POST", ["repository", "commits", sha, "comments"]) => {
            let note =
                json!({"note": body["note"], "commit": sha, "author": {"username": "review-bot"}});
            p.notes.push(json!({"id": id, "body": body["note"], "system": false, "author": {"username": "review-bot"}}));
            json_answer(StatusCode::CREATED, note)
        }
        ("GET", ["merge_requests", _, "discussions"]) => {
            json_answer(StatusCode::OK, Value::Array(p.discussions.clone()))
        }
        ("POST", ["merge_requests", iid, "discussions"]) => {
            let Some(mr) = p.mrs.get(&iid.parse().unwrap_or(0)).cloned() else {
                return not_found();
            };
            let pos = &body["position"];
            let (side, line) = match pos["new_line"].as_u64() {
                Some(l) => ("RIGHT", l),
                None => ("LEFT", pos["old_line"].as_u64().unwrap_or(0)),
            };
            let path = pos["new_path"].as_str().unwrap_or("");
            let text = mr_diff_line(&mr, path, side, line);
            if text.is_none()
                || pos["head_sha"] != mr.head.as_str()
                || pos["base_sha"] != mr.base.as_str()
            {
                return json_answer(
                    StatusCode::BAD_REQUEST,
                    json!({"message": "400 Bad request - Note {:line_code=>[\"can't be blank\", \"must be a valid line code\"]}"}),
                );
            }
            let discussion = json!({
                "id": format!("d{id:040}"),
                "individual_note": false,
                "notes": [{"id": id, "type": "DiffNote", "body": body["body"], "author": {"username": "review-bot"},
                           "resolvable": true, "resolved": false, "position": pos, "line_text": text}],
            });
            p.discussions.push(discussion.clone());
            json_answer(StatusCode::CREATED, discussion)
        }
        ("PUT", ["merge_requests", _, "discussions", did]) => {
            let resolved = param("resolved") == Some("true".into());
            match p.discussions.iter_mut().find(|d| d["id"] == *did) {
                Some(d) => {
                    d["notes"][0]["resolved"] = json!(resolved);
                    d["notes"][0]["resolved_by"] = json!({"username": "review-bot"});
                    json_answer(StatusCode::OK, d.clone())
                }
                None => not_found(),
            }
        }
        ("POST", ["statuses", sha]) => {
            let mut status = body.clone();
            status["sha"] = json!(sha);
            p.statuses.push(status.clone());
            json_answer(StatusCode::CREATED, status)
        }
        _ => not_found(),
    }
}
