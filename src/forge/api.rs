//! One forge REST call: credentials on it, the forge's rate-limit rules
//! waited out, and a failure that says whether trying again can help.
//!
//! GitHub's rules (REST docs, "Rate limits for the REST API"): a 403 or
//! 429 with `retry-after` is a secondary limit, wait that long; one with
//! `x-ratelimit-remaining: 0` is the primary limit, wait until
//! `x-ratelimit-reset`; a 403 or 429 saying "secondary rate limit" with
//! neither header, wait at least a minute. GitLab answers 429 with
//! `retry-after` (or `ratelimit-reset`).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::auth::Credentials;
use crate::platform::PlatformError;

/// Longest wait sat out inside one call; a longer one is handed back to
/// the caller (the outbox waits it out between attempts).
const LONGEST_WAIT: Duration = Duration::from_secs(60);
/// Rate-limit waits sat out inside one call.
const WAITS: u32 = 3;
/// Bodies kept of an error answer, for the record.
const ERROR_CHARS: usize = 300;

/// Why a forge call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    /// What the forge said.
    pub message: String,
    /// Its HTTP status (0 when it was not reached).
    pub status: u16,
    /// Whether trying again later can help.
    pub retry: bool,
    /// How long the forge asked us to wait.
    pub wait: Option<Duration>,
}

impl Failure {
    /// A failure trying again will not mend.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            status: 0,
            retry: false,
            wait: None,
        }
    }

    /// A failure worth trying again.
    pub fn transient(message: impl Into<String>) -> Self {
        Self {
            retry: true,
            ..Self::fatal(message)
        }
    }

    /// The port's error for it.
    pub fn platform(&self) -> PlatformError {
        match (self.wait, self.retry, self.status) {
            (Some(retry_after), _, _) => PlatformError::RateLimited { retry_after },
            (None, true, _) => PlatformError::Unavailable(self.message.clone()),
            (None, false, 404) => PlatformError::NotFound(self.message.clone()),
            (None, false, _) => PlatformError::Rejected(self.message.clone()),
        }
    }
}

/// A successful answer.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Its body.
    pub body: String,
    /// The `Link` header's `rel="next"` target (GitHub), or the
    /// `x-next-page` number (GitLab): more pages follow.
    pub more: bool,
}

impl Reply {
    /// The body as JSON (`null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// How a forge names itself in messages and reads its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// GitHub (and GitHub Enterprise Server).
    Github,
    /// GitLab (and self-managed GitLab).
    Gitlab,
}

impl Dialect {
    fn name(self) -> &'static str {
        match self {
            Self::Github => "GitHub",
            Self::Gitlab => "GitLab",
        }
    }
}

/// One forge's REST API.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    dialect: Dialect,
    credentials: Credentials,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// Seconds from a header holding a number.
fn header_secs(headers: &reqwest::header::HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse::<u64>().ok()
}

/// How long a refused answer asks us to wait, when it is a rate limit.
pub fn rate_limit_wait(
    status: StatusCode,
    headers: &reqwest::header::HeaderMap,
    body: &str,
    now_secs: u64,
) -> Option<Duration> {
    if status != StatusCode::TOO_MANY_REQUESTS && status != StatusCode::FORBIDDEN {
        return None;
    }
    if let Some(secs) = header_secs(headers, "retry-after") {
        return Some(Duration::from_secs(secs.max(1)));
    }
    let exhausted = header_secs(headers, "x-ratelimit-remaining") == Some(0);
    let reset = header_secs(headers, "x-ratelimit-reset").or_else(|| {
        // GitLab's `ratelimit-reset` is a Unix time as well.
        header_secs(headers, "ratelimit-reset")
    });
    if (exhausted || status == StatusCode::TOO_MANY_REQUESTS)
        && let Some(reset) = reset
    {
        return Some(Duration::from_secs(reset.saturating_sub(now_secs).max(1)));
    }
    if status == StatusCode::TOO_MANY_REQUESTS
        || body.to_ascii_lowercase().contains("secondary rate limit")
    {
        return Some(Duration::from_secs(60));
    }
    None
}

impl Api {
    /// The API at `base` (no trailing slash needed). Its requests carry
    /// credentials, so it follows no redirect.
    pub fn new(base: &str, dialect: Dialect, credentials: Credentials) -> Self {
        Self {
            http: crate::http::client::credentialed(),
            base: base.trim_end_matches('/').to_string(),
            dialect,
            credentials,
        }
    }

    /// The same API and credentials at another base URL.
    pub fn at(&self, base: &str) -> Self {
        Self {
            base: base.trim_end_matches('/').to_string(),
            ..self.clone()
        }
    }

    /// The API's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends `method path` (relative to the base, with its query) with
    /// `body` as JSON, reading the answer as `accept`; waits out rate
    /// limits of up to a minute (three times at most) and asks for a new
    /// App token once when the one it had is refused.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        accept: &str,
        installation: Option<u64>,
    ) -> Result<Reply, Failure> {
        let url = format!("{}{path}", self.base);
        let mut waits = 0;
        let mut renewed = false;
        loop {
            let token = self
                .credentials
                .token(&self.http, &self.base, installation)
                .await?;
            let mut req = self
                .http
                .request(method.clone(), &url)
                .header("accept", accept)
                .timeout(Duration::from_secs(60));
            req = match self.dialect {
                Dialect::Github => req
                    .bearer_auth(&token)
                    .header("x-github-api-version", "2022-11-28"),
                Dialect::Gitlab => req.header("private-token", &token),
            };
            if let Some(body) = body {
                req = req.json(body);
            }
            let name = self.dialect.name();
            let resp = req
                .send()
                .await
                .map_err(|e| Failure::transient(format!("{name} unreachable: {e}")))?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let more = headers
                .get("link")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|l| l.contains("rel=\"next\""))
                || headers
                    .get("x-next-page")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| !v.trim().is_empty());
            let text = resp
                .text()
                .await
                .map_err(|e| Failure::transient(format!("{name}'s answer was cut: {e}")))?;
            if status.is_success() {
                return Ok(Reply { body: text, more });
            }
            if status == StatusCode::UNAUTHORIZED && !renewed && self.credentials.renewable() {
                renewed = true;
                self.credentials.forget(installation);
                continue;
            }
            let now = (crate::store::now_ms() / 1000).max(0) as u64;
            let wait = rate_limit_wait(status, &headers, &text, now);
            let message = format!(
                "{name} answered {status} to {method} {path}: {}",
                crate::render::clip(&text, ERROR_CHARS)
            );
            match wait {
                Some(wait) if wait <= LONGEST_WAIT && waits < WAITS => {
                    waits += 1;
                    tracing::warn!(
                        forge = name,
                        wait_secs = wait.as_secs(),
                        path,
                        "forge rate limit; waiting"
                    );
                    tokio::time::sleep(wait).await;
                }
                Some(wait) => {
                    return Err(Failure {
                        message,
                        status: status.as_u16(),
                        retry: true,
                        wait: Some(wait),
                    });
                }
                None => {
                    let retry = status.is_server_error() || status == StatusCode::CONFLICT;
                    return Err(Failure {
                        message,
                        status: status.as_u16(),
                        retry,
                        wait: None,
                    });
                }
            }
        }
    }

    /// A JSON GET.
    pub async fn get(&self, path: &str, installation: Option<u64>) -> Result<Reply, Failure> {
        self.call(Method::GET, path, None, self.json_type(), installation)
            .await
    }

    /// Every item of the list at `path`, read 100 a page (at most 30
    /// pages: GitHub lists 3000 files of a pull request at most).
    pub async fn list(&self, path: &str, installation: Option<u64>) -> Result<Vec<Value>, Failure> {
        let mut out = Vec::new();
        for page in 1..=30 {
            let sep = if path.contains('?') { '&' } else { '?' };
            let reply = self
                .get(
                    &format!("{path}{sep}per_page=100&page={page}"),
                    installation,
                )
                .await?;
            match reply.json() {
                Value::Array(items) => out.extend(items),
                _ => {
                    return Err(Failure::fatal(format!(
                        "{}'s {path} is not a list",
                        self.dialect.name()
                    )));
                }
            }
            if !reply.more {
                break;
            }
        }
        Ok(out)
    }

    /// A JSON write (`POST`, `PATCH`, `PUT`). A comment's text that a
    /// command parser could read (its first line starts with `/`, `!` or
    /// `@`) is put behind a marker line first, so nothing the gateway
    /// writes can act as a command or an approval when the forge reports
    /// it back.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: &Value,
        installation: Option<u64>,
    ) -> Result<Value, Failure> {
        let body = &marked(body);
        self.call(method, path, Some(body), self.json_type(), installation)
            .await
            .map(|r| r.json())
    }

    fn json_type(&self) -> &'static str {
        match self.dialect {
            Dialect::Github => "application/vnd.github+json",
            Dialect::Gitlab => "application/json",
        }
    }
}

/// The first line of every comment the gateway writes whose own first
/// line a command parser could read: invisible where Markdown is shown.
pub const MARKER: &str = "<!-- switchboard -->";

/// `body` with [`MARKER`] before its comment text (`body`, and each inline
/// comment's `body`) where that text could read as a command.
fn marked(body: &Value) -> Value {
    fn mark(text: &mut Value) {
        if let Some(t) = text.as_str()
            && t.trim_start().starts_with(['/', '!', '@'])
        {
            *text = Value::String(format!("{MARKER}\n{t}"));
        }
    }
    let mut body = body.clone();
    if let Some(text) = body.get_mut("body") {
        mark(text);
    }
    if let Some(Value::Array(comments)) = body.get_mut("comments") {
        for comment in comments {
            if let Some(text) = comment.get_mut("body") {
                mark(text);
            }
        }
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comment_text_a_parser_could_read_is_marked() {
        let body = serde_json::json!({
            "body": "/approve abc always",
            "comments": [{"body": "@bot review"}, {"body": "fine"}],
        });
        let out = marked(&body);
        assert_eq!(out["body"], format!("{MARKER}\n/approve abc always"));
        assert_eq!(out["comments"][0]["body"], format!("{MARKER}\n@bot review"));
        assert_eq!(out["comments"][1]["body"], "fine");
        assert_eq!(
            marked(&serde_json::json!({"body": "Looks good"}))["body"],
            "Looks good"
        );
    }
    use reqwest::header::{HeaderMap, HeaderValue};

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn github_rate_limits_are_read_from_their_headers() {
        let forbidden = StatusCode::FORBIDDEN;
        assert_eq!(
            rate_limit_wait(forbidden, &headers(&[("retry-after", "30")]), "", 0),
            Some(Duration::from_secs(30))
        );
        let primary = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1000"),
        ]);
        assert_eq!(
            rate_limit_wait(forbidden, &primary, "", 990),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            rate_limit_wait(
                forbidden,
                &HeaderMap::new(),
                "{\"message\":\"You have exceeded a secondary rate limit\"}",
                0
            ),
            Some(Duration::from_secs(60))
        );
        // A plain permission refusal is not a limit.
        let plenty = headers(&[("x-ratelimit-remaining", "4000")]);
        assert_eq!(
            rate_limit_wait(forbidden, &plenty, "Resource not accessible", 0),
            None
        );
        assert_eq!(
            rate_limit_wait(StatusCode::NOT_FOUND, &primary, "", 0),
            None
        );
    }

    #[test]
    fn failures_map_to_the_ports_errors() {
        let limited = Failure {
            wait: Some(Duration::from_secs(5)),
            ..Failure::transient("x")
        };
        assert!(matches!(
            limited.platform(),
            PlatformError::RateLimited { .. }
        ));
        assert!(matches!(
            Failure::transient("x").platform(),
            PlatformError::Unavailable(_)
        ));
        let gone = Failure {
            status: 404,
            ..Failure::fatal("x")
        };
        assert!(matches!(gone.platform(), PlatformError::NotFound(_)));
    }
}
